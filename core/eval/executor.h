// Whole-graph execution on the reference kernels, in topological order, with If, Loop and Scan
// subgraphs and calls of model-local functions. Used to verify that an optimized model computes
// what the original did.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include <absl/status/statusor.h>

#include "core/eval/kernel.h"
#include "core/ir/model.h"

namespace graft::eval {

// What a run used, whether it finished or not.
struct RunStats {
  uint64_t peak_bytes = 0;  // most bytes held at once (tensors and kernel scratch)
  uint64_t work = 0;        // operations charged (multiply-adds, elements written)
};

// Runs the main graph of `model` on `feeds` (by graph input name; initializers that are also
// inputs use their default when not fed). Returns the graph outputs in order.
// Errors: InvalidArgument for missing/ill-typed feeds or a node without a required input,
// Unimplemented naming the first op the evaluator cannot run, ResourceExhausted when a tensor,
// the memory or the work budget of `limits` is exceeded, and the status of a failed
// `limits.should_continue` poll (DeadlineExceeded, Cancelled).
absl::StatusOr<std::vector<Tensor>> run_model(const ir::Model& model,
                                              const std::map<std::string, Tensor>& feeds,
                                              const Limits& limits = {}, RunStats* stats = nullptr);

// Called with every value a run computes as it is computed: the fed graph inputs, then each
// node's outputs (main graph, If branches, each Loop and Scan iteration; not inside function
// calls, whose outputs are reported as the call's).
using ValueObserver = std::function<void(const ir::Value&, const Tensor&)>;
absl::StatusOr<std::vector<Tensor>> run_model(const ir::Model& model,
                                              const std::map<std::string, Tensor>& feeds,
                                              const Limits& limits, RunStats* stats,
                                              const ValueObserver* observer);

}  // namespace graft::eval
