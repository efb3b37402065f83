// Whether a node's inputs and attributes fit its operator's ONNX schema: every required input is
// present (not past the end, not an empty name), variadic inputs have no holes, the count is
// within the schema's bounds, and every required attribute is there with its type. Kernels and
// passes rely on required inputs being there; a model that omits one is not valid ONNX, whatever
// the op.
#pragma once

#include <absl/status/status.h>

#include "core/ir/model.h"

namespace graft::ir {

// InvalidArgument naming the node, the op and the missing input (by position and schema name).
// OK for ops without a schema at the node's opset (custom domains, newer opsets), unless
// `clamp_to_known_opset`, which checks nodes of newer opsets against the newest schema known.
absl::Status check_operands(const Node& n, bool clamp_to_known_opset = false);

// check_operands over every node of every graph of `model` (subgraphs and function bodies).
absl::Status check_model_operands(const Model& model);

}  // namespace graft::ir
