// Memory statistics of a model, estimated from the IR alone (no evaluator, no weights read):
// the bytes of its weights and the peak bytes of activations alive at once when the main graph
// runs in its saved node order, freeing each value after its last reader (as the reference
// evaluator does). Used by the schedule_memory pass and by reports.
//
// The model of a run (estimate_memory, graph_peak_bytes):
//  - a value of a graph is live from its producer (graph inputs: from the start) to the last
//    node of that graph reading it, directly or from inside one of its subgraphs (a capture);
//    graph outputs stay to the end; a value nobody reads lives while its producer runs;
//  - at each node, the bytes in use are those of the values live across it (its inputs
//    included: they are still held while it runs) plus its outputs; for a node with subgraphs
//    (If, Loop, Scan), each body is estimated the same way in its own saved order and, as a
//    body runs before the node's outputs are made, the node adds the larger of the body's peak
//    and (body outputs + node outputs), for the body needing most. The outer values a body
//    captures are counted in the enclosing graph (live until the If/Loop/Scan); a Loop/Scan
//    body counts once, not per iteration (its values die before the next), and scan outputs
//    growing over the iterations are not modelled beyond the node's declared outputs;
//  - initializers are weights (weight_bytes), never activations, in any graph, and so are the
//    values of Constant nodes (runtimes load them as initializers; a Constant that is itself a
//    graph output is an activation too, as it must be returned);
//  - a value's size is its element size times its dims from the shape facts (Value::fact()):
//    a known dim as is, a symbolic dim from `dims` (else `default_dim`), an unknown dim as
//    `default_dim`. A value whose element type or rank is unknown (or whose type has no fixed
//    size: strings) counts 0 bytes and is counted in unknown_size_values.
// All sums and products saturate at UINT64_MAX: dims come from untrusted models.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/ir/model.h"
#include "core/ir/saturating.h"

namespace graft {

// Symbolic dim name (ONNX dim_param) -> size.
using DimBindings = std::map<std::string, int64_t, std::less<>>;

struct MemoryStats {
  uint64_t weight_bytes = 0;           // initializers and Constant values of every graph
  uint64_t peak_activation_bytes = 0;  // see above
  std::string largest_tensor;          // name of the largest activation ("" if none)
  uint64_t largest_tensor_bytes = 0;
  int64_t unknown_size_values = 0;  // activations whose size is unknown (counted as 0)
  int64_t peak_node = -1;           // position (in the main graph) of the node at the peak;
                                    // -1 when the peak is before any node (graph inputs)
  std::string peak_node_name;       // estimate_memory: that node's name, else its op type
};

// Estimates `model`'s memory (see above). `default_dim` (clamped to >= 0) sizes unbound
// symbolic and unknown dims.
MemoryStats estimate_memory(const ir::Model& model, const DimBindings& dims, int64_t default_dim);

// How values are sized (the parameters of estimate_memory).
struct SizeRule {
  const DimBindings* dims = nullptr;  // may be null: no bindings
  int64_t default_dim = 1;
};

// The estimated bytes of `v` (see above); false in *known when its size is unknown (0 returned).
uint64_t value_bytes(const ir::Value& v, const SizeRule& rule, bool* known = nullptr);

// The node of `g` that holds `n` (n itself, or the If/Loop/Scan of `g` whose subgraph, at any
// depth, holds it); nullptr if `n` is not inside `g`.
ir::Node* node_in_graph(const ir::Graph& g, ir::Node* n);

// The nodes of `g` reading `v` (a value of `g`), directly or from their subgraphs, once each,
// in no particular order; graph-output references from subgraphs count as reads by the node
// holding that subgraph.
std::vector<ir::Node*> readers_in_graph(const ir::Graph& g, const ir::Value& v);

// The estimated peak activation bytes of running `g`'s nodes in `order` (a topological order of
// all of its live nodes, e.g. g.nodes()). Fills `stats` (may be null): peak_activation_bytes,
// largest_tensor(_bytes), unknown_size_values, peak_node (position in `order`); weight_bytes is
// left alone.
uint64_t graph_peak_bytes(const ir::Graph& g, const std::vector<ir::Node*>& order,
                          const SizeRule& rule, MemoryStats* stats = nullptr);

// The estimated activation bytes in use while each node of the main graph runs, in its saved
// order (the walk estimate_memory does; the largest entry is its peak unless the peak is before
// any node). For reports: the memory over the schedule.
std::vector<uint64_t> activation_timeline(const ir::Model& model, const SizeRule& rule);

}  // namespace graft
