// Reference CPU kernels: one function per op (per file group), looked up by op type, domain and
// opset version. A kernel reads its node's attributes and input tensors and writes outputs.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <absl/status/status.h>

#include "core/eval/tensor.h"
#include "core/ir/model.h"

namespace graft::eval {

struct Limits {
  // Largest tensor any kernel may allocate (folding cap; also a guard against crafted shapes).
  uint64_t max_tensor_bytes = 16ull << 20;
  // Whole-graph runs: the most bytes of tensors alive at once (weights included); 0 = no cap.
  uint64_t max_live_bytes = 0;
  // Polled before every node when set; a non-OK status stops the run with that status (how a
  // request deadline or cancellation reaches a long verification run).
  const std::function<absl::Status()>* should_continue = nullptr;
};

struct KernelContext {
  const ir::Node& node;
  int64_t opset;                      // the node's domain opset version
  std::vector<const Tensor*> inputs;  // nullptr for an absent optional input
  std::vector<Tensor> outputs;        // sized to the node's output count by the caller
  Limits limits;

  const Tensor* input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  // A zero-filled output of the given type and dims, within the limits.
  absl::StatusOr<Tensor*> make_output(size_t i, int32_t dtype, std::vector<int64_t> dims);
};

using Kernel = std::function<absl::Status(KernelContext&)>;

// Registers `kernel` for `op` in the default ONNX domain for opset versions in
// [since_version, until_version] (until_version 0 = any later version).
void register_kernel(std::string op, int since_version, int until_version, Kernel kernel);
// The kernel for a node, or nullptr if the op (at that opset) is not supported.
const Kernel* find_kernel(std::string_view op, std::string_view domain, int64_t opset);
// Names of all supported ops (for reports and the conformance test).
std::vector<std::string> supported_ops();

}  // namespace graft::eval
