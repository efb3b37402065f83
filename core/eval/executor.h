// Whole-graph execution on the reference kernels, in topological order, with If, Loop and Scan
// subgraphs and calls of model-local functions. Used to verify that an optimized model computes
// what the original did.
#pragma once

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include <absl/status/statusor.h>

#include "core/eval/kernel.h"
#include "core/ir/model.h"

namespace graft::eval {

// Runs the main graph of `model` on `feeds` (by graph input name; initializers that are also
// inputs use their default when not fed). Returns the graph outputs in order.
// Errors: InvalidArgument for missing/ill-typed feeds, Unimplemented naming the first op the
// evaluator cannot run, ResourceExhausted when a tensor exceeds the limits.
absl::StatusOr<std::vector<Tensor>> run_model(const ir::Model& model,
                                              const std::map<std::string, Tensor>& feeds,
                                              const Limits& limits = {});

}  // namespace graft::eval
