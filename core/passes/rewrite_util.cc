#include "core/passes/rewrite_util.h"

namespace graft {

bool bypass_node(ir::Node* node, ir::Value* in, ir::Value* out) {
  if (!in || !out || in == out || node->dead() || out->producer() != node) return false;
  for (ir::Value* other : node->outputs())
    if (other && other != out && other->use_count() > 0) return false;
  ir::Graph* g = node->graph();
  if (!is_output_of(*g, out)) {
    // Outputs of nested subgraphs naming `out` follow it to `in`: subgraph outputs are
    // positional, their names are not interface, and `in` is in scope wherever `out` was.
    ir::Graph::replace_all_uses(out, in);
    g->remove_node(node);
    return true;
  }
  // Keeping `node` is the only way to give one value two output names, or to output a graph
  // input, initializer or outer-scope value under a new name.
  ir::Node* producer = in->producer();
  if (!producer || producer->graph() != g || in->is_graph_input() || in->is_initializer() ||
      is_output_of(*g, in))
    return false;
  int index = in->producer_index();
  g->remove_node(node);  // `out` survives without a producer: it is a graph output
  g->move_output_name(producer, index, out);
  return true;
}

}  // namespace graft
