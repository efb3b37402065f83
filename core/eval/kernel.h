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

// What one run may use (budget.h): run_model and run_kernel make a Budget from these unless one
// is already current.
struct Limits {
  // Largest tensor any kernel may allocate (folding cap; also a guard against crafted shapes).
  uint64_t max_tensor_bytes = 16ull << 20;
  // The most bytes held at once: every tensor (weights, feeds, copies, Loop/Scan outputs) and
  // kernel scratch. 0 = no cap.
  uint64_t max_live_bytes = 256ull << 20;
  // Polled before every node and every Budget::kPollUnits of kernel work when set; a non-OK
  // status stops the run with that status (how a request deadline or cancellation reaches a
  // long verification run, inside a long kernel too).
  const std::function<absl::Status()>* should_continue = nullptr;
  // Operations (multiply-adds, elements written) of the whole run. 0 = no cap.
  uint64_t max_work = 4'000'000'000;
};

struct KernelContext {
  const ir::Node& node;
  int64_t opset;                      // the node's domain opset version
  std::vector<const Tensor*> inputs;  // nullptr for an absent optional input
  std::vector<Tensor> outputs;        // sized to the node's output count by the caller
  Limits limits;

  const Tensor* input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  // A zero-filled output of the given type and dims, within the limits. Its elements are charged
  // as work.
  absl::StatusOr<Tensor*> make_output(size_t i, int32_t dtype, std::vector<int64_t> dims);
  // ResourceExhausted at once when `units` operations would pass the run's work budget: kernels
  // that know their cost (MatMul, Conv, ...) refuse before they start, then charge it as they go
  // with spend_work() (budget.h).
  absl::Status afford(double units) const;
};

using Kernel = std::function<absl::Status(KernelContext&)>;

// Registers `kernel` for `op` in the default ONNX domain for opset versions in
// [since_version, until_version] (until_version 0 = any later version).
void register_kernel(std::string op, int since_version, int until_version, Kernel kernel);
// The same for `op` of another domain (com.microsoft), by that domain's opset version.
void register_kernel(std::string domain, std::string op, int since_version, int until_version,
                     Kernel kernel);
// The kernel for a node, or nullptr if the op (at that opset) is not supported.
const Kernel* find_kernel(std::string_view op, std::string_view domain, int64_t opset);
// Names of all supported ops of the default domain (for reports and the conformance test).
std::vector<std::string> supported_ops();
// The supported ops of other domains, as "DOMAIN:OP" (com.microsoft:Attention), sorted.
std::vector<std::string> supported_domain_ops();
// The opset ranges [since, until] registered for `op` (until 0 = open-ended).
std::vector<std::pair<int, int>> kernel_versions(std::string_view op);

// Runs `node`'s kernel on `inputs` (nullptr for absent optional inputs): the one way into a
// kernel. Checks the node's operands against its schema first (a missing required input is
// InvalidArgument, never a null dereference), runs under the current budget or a new one made
// from `limits`, and turns a Stop or a failed allocation into its status. Errors name the node.
absl::StatusOr<std::vector<Tensor>> run_kernel(const ir::Node& node,
                                               std::vector<const Tensor*> inputs,
                                               const Limits& limits);

}  // namespace graft::eval
