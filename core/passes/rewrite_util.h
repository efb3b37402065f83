// Helpers shared by the passes: bypassing a node whose output equals one of its inputs
// (eliminate_identity, eliminate_noop, simplify_arithmetic), attribute checks, and where a new
// constant may live.
#pragma once

#include <initializer_list>
#include <string_view>

#include "core/ir/model.h"

namespace graft {

// True if `value` is listed among the outputs of `graph` itself (not of a nested subgraph).
bool is_output_of(const ir::Graph& graph, const ir::Value* value);

// Removes `node`, whose output `out` carries the same data as `in`, so that every reader of `out`
// reads `in` instead. Output names of `node`'s graph are interface and are kept: when `out` is one
// of them, the node producing `in` is made to output `out` directly, which needs `in` to be a node
// output of the same graph that is not itself an output of that graph. Returns false and changes
// nothing when that is not possible or when another output of `node` is still used.
bool bypass_node(ir::Node* node, ir::Value* in, ir::Value* out);

// True if every attribute of `n` is named in `known`. An attribute outside it may change the
// meaning of the node (or come from an op version the pass does not reason about).
bool only_attributes(const ir::Node& n, std::initializer_list<std::string_view> known);

// Whether a new initializer may be added to `g`: the model's IR allows it (IR >= 4, where
// initializers need not be graph inputs) and `g` is the main graph or nested in it (function
// bodies cannot hold initializers). Elsewhere a constant must be a Constant node.
bool can_hold_new_initializers(const ir::Model& model, const ir::Graph* g);

// The "value" attribute of a Constant node holding `tensor`.
onnx::AttributeProto constant_value_attr(onnx::TensorProto tensor);

}  // namespace graft
