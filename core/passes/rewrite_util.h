// Transitional: bypass_node, until every pass goes through the Rewriter (rewriter.h).
#pragma once

#include "core/ir/model.h"
#include "core/passes/queries.h"
#include "core/passes/rewriter.h"

namespace graft {

// Removes `node`, whose output `out` carries the same data as `in`, so that every reader of `out`
// reads `in` instead. Output names of `node`'s graph are interface and are kept: when `out` is one
// of them, the node producing `in` is made to output `out` directly, which needs `in` to be a node
// output of the same graph that is not itself an output of that graph. Returns false and changes
// nothing when that is not possible or when another output of `node` is still used.
bool bypass_node(ir::Node* node, ir::Value* in, ir::Value* out);

}  // namespace graft
