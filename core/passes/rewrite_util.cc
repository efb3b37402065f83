#include "core/passes/rewrite_util.h"

namespace graft {

bool is_output_of(const ir::Graph& graph, const ir::Value* value) {
  if (!value->is_graph_output()) return false;
  for (const auto& out : graph.outputs())
    if (out.value == value) return true;
  return false;
}

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

bool only_attributes(const ir::Node& n, std::initializer_list<std::string_view> known) {
  for (const auto& a : n.attributes()) {
    bool found = false;
    for (std::string_view k : known) found = found || a.name() == k;
    if (!found) return false;
  }
  return true;
}

bool can_hold_new_initializers(const ir::Model& model, const ir::Graph* g) {
  if (!model.allows_new_initializers()) return false;
  while (g->parent()) g = g->parent()->graph();
  return g == &model.graph();
}

onnx::AttributeProto constant_value_attr(onnx::TensorProto tensor) {
  onnx::AttributeProto attr;
  attr.set_name("value");
  attr.set_type(onnx::AttributeProto::TENSOR);
  *attr.mutable_t() = std::move(tensor);
  return attr;
}

}  // namespace graft
