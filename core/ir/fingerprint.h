// A model's fingerprint: what "this pass (or rule) changed nothing" is checked against, in tests
// and fuzzing (PipelineConfig::check_unchanged, the rule driver's transaction check).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <absl/status/status.h>
#include <onnx/onnx_pb.h>

#include "core/ir/model.h"

namespace graft {

// What check_unchanged compares: the model serialized deterministically with each initializer's
// tensor replaced by its position in `tensors`, which holds the tensors themselves. Taking one
// costs a clone and a serialization of everything but the weights; the weights are compared by
// identity, and by bytes only where a pass replaced one.
struct ModelFingerprint {
  std::string structure;
  std::vector<std::shared_ptr<const onnx::TensorProto>> tensors;
};
ModelFingerprint fingerprint(const ir::Model& model);
// OK when `after` serializes to the same bytes as `before`: the same structure, and each
// initializer the same tensor or one with the same bytes; else an Internal error naming `pass`
// and the first difference. As strict as comparing whole serialized models, because initializer
// tensors are immutable (shared_ptr<const>: snapshots and rollbacks already rely on it) and
// `before` holds its tensors, so no address can be reused by another tensor meanwhile.
absl::Status verify_unchanged(const std::string& pass, const ModelFingerprint& before,
                              const ModelFingerprint& after);

}  // namespace graft
