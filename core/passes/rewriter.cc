#include "core/passes/rewriter.h"

#include <absl/strings/str_cat.h>

namespace graft {

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

void Rewriter::Transaction::commit() {
  if (!open_) return;
  open_ = false;
  rw_.model_.release(checkpoint_);
  if (!rw_.model_.journaling()) rw_.added_log_.clear();
}

void Rewriter::Transaction::rollback() {
  if (!open_) return;
  open_ = false;
  rw_.model_.rollback(checkpoint_);
  while (rw_.added_log_.size() > added_) {
    rw_.added_.erase(rw_.added_log_.back());
    rw_.added_log_.pop_back();
  }
}

bool Rewriter::Transaction::edited() const {
  return rw_.model_.generation() != checkpoint_.generation;
}

namespace {

// Whether `to`'s producer can be renamed to output `from`, an output name of graph `g`.
bool can_take_name(const ir::Graph& g, const ir::Value* to) {
  const ir::Node* p = to->producer();
  return p && !p->dead() && p->graph() == &g && !to->is_graph_input() && !to->is_initializer() &&
         !to->is_output_of(g);
}

}  // namespace

void Rewriter::touch_readers(const ir::Value* v) {
  if (!on_touch || !v) return;
  for (const ir::Use& u : v->uses()) touch(u.node);
}

bool Rewriter::replace_all_uses(ir::Value* from, ir::Value* to, bool allow_identity,
                                bool keep_name) {
  if (!from || !to || from == to || from->dead() || to->dead()) return false;
  ir::Graph* g = from->owner();
  const bool interface = from->is_output_of(*g);
  keep_name = keep_name || (to->producer() && added_.count(to->producer()) > 0);
  if (interface && (from->is_graph_input() || from->is_initializer())) {
    // A graph input or initializer its graph also returns keeps its name as what it is. A
    // subgraph's outputs are positional: they return `to` (through an Identity where `to` is
    // not the subgraph's own value). A model's output names are its interface: refused.
    const bool own = to->owner() == g;
    if (g->parent() == nullptr || (!own && !allow_identity)) return false;
    touch_readers(from);
    ir::Graph::replace_all_uses(from, to);
    touch(g->parent());
    if (!own) {
      ir::Node* id = add_node(*g, "Identity", {to}, 1);
      const auto refs = to->output_refs();
      for (const auto& [graph, index] : refs)
        if (graph == g) g->set_output(static_cast<size_t>(index), id->output(0));
    }
    return true;
  }
  if (!interface && !(keep_name && can_take_name(*g, to))) {
    // Outputs of nested graphs follow: they are positional, and `to` is in scope wherever
    // `from` was.
    touch_readers(from);
    ir::Graph::replace_all_uses(from, to);
    return true;
  }
  if (can_take_name(*g, to)) {
    touch_readers(from);
    touch_readers(to);
    ir::Node* p = to->producer();
    g->move_output_name(p, to->producer_index(), from);
    touch(p);
    return true;
  }
  // One value cannot have two names, and a graph input, initializer or outer value cannot be
  // renamed: only an Identity can give `to` the output's name.
  if (!allow_identity) return false;
  ir::Node* id = add_node(*g, "Identity", {to}, 1, from->producer());
  touch_readers(from);
  g->move_output_name(id, 0, from);
  return true;
}

bool Rewriter::replace_node(ir::Node* node, const std::vector<ir::Value*>& replacements,
                            bool allow_identity) {
  if (!node || node->dead()) return false;
  ir::Graph* g = node->graph();
  const auto& outs = node->outputs();
  // Check every output first, so a refusal changes nothing.
  for (size_t i = 0; i < outs.size(); ++i) {
    ir::Value* out = outs[i];
    if (!out || out->use_count() == 0) continue;
    ir::Value* to = i < replacements.size() ? replacements[i] : nullptr;
    if (!to || to == out) return false;
    if (!allow_identity && out->is_output_of(*out->owner()) && !can_take_name(*g, to)) return false;
  }
  // A later output's replacement may be an earlier output's: copy before the slots change.
  const std::vector<ir::Value*> original(outs.begin(), outs.end());
  for (size_t i = 0; i < original.size(); ++i) {
    ir::Value* out = original[i];
    if (!out || out->dead() || out->use_count() == 0) continue;
    replace_all_uses(out, replacements[i], allow_identity);
  }
  return erase(node);
}

bool Rewriter::erase(ir::Node* node) {
  if (!node || node->dead()) return false;
  const std::vector<ir::Value*> inputs(node->inputs().begin(), node->inputs().end());
  if (!node->graph()->remove_node(node)) return false;  // an output is still read
  for (ir::Value* v : inputs) lost_reader(v);
  return true;
}

void Rewriter::lost_reader(ir::Value* v) {
  if (!v || v->dead()) return;
  erase_if_unused(v);
  // Its producer may now have a single reader, or none.
  if (!v->dead()) touch(v->producer());
}

void Rewriter::erase_unread_producers(ir::Value* v) {
  std::vector<ir::Value*> work = {v};
  while (!work.empty()) {
    ir::Value* value = work.back();
    work.pop_back();
    if (!value || value->dead() || value->use_count() > 0 || value->is_graph_output()) continue;
    ir::Node* p = value->producer();
    if (!p || p->dead()) {
      erase_if_unused(value);
      continue;
    }
    bool unread = true;
    for (const ir::Value* out : p->outputs())
      if (out && (out->use_count() > 0 || out->is_graph_output())) unread = false;
    if (!unread) continue;
    const std::vector<ir::Value*> inputs(p->inputs().begin(), p->inputs().end());
    if (!erase(p)) continue;
    work.insert(work.end(), inputs.begin(), inputs.end());
  }
}

void Rewriter::erase_if_unused(ir::Value* v) {
  if (!v || v->dead() || v->use_count() > 0 || v->is_graph_input()) return;
  if (v->is_initializer()) {
    v->owner()->remove_value(v);
    return;
  }
  ir::Node* p = v->producer();
  if (p && !p->dead() && p->is("Constant")) erase(p);
}

ir::Node* Rewriter::add_node(ir::Graph& g, std::string_view op,
                             const std::vector<ir::Value*>& inputs, size_t outputs,
                             const ir::Node* origin, std::string_view domain) {
  std::vector<std::string> hints;
  const ir::Value* named = origin ? origin->output(0) : nullptr;
  for (size_t i = 0; i < outputs; ++i) {
    std::string hint = named ? absl::StrCat(named->name(), "_", std::string(op)) : std::string(op);
    if (outputs > 1) absl::StrAppend(&hint, "_", i);
    hints.push_back(std::move(hint));
  }
  ir::Node* n = g.add_node(std::string(op), inputs, hints, std::string(domain));
  added_.insert(n);
  if (model_.journaling()) added_log_.push_back(n);
  if (origin && !origin->name().empty())
    n->mutable_proto().set_name(
        model_.fresh_name(absl::StrCat(origin->name(), "/", std::string(op))));
  touch(n);
  return n;
}

ir::Value* Rewriter::add_constant(ir::Graph& g, onnx::TensorProto tensor,
                                  std::string_view name_hint) {
  if (can_hold_new_initializers(model_, &g)) return g.add_initializer(name_hint, std::move(tensor));
  ir::Node* c = g.add_node("Constant", {}, {std::string(name_hint)});
  c->set_attr(constant_value_attr(std::move(tensor)));
  touch(c);
  return c->output(0);
}

void Rewriter::set_input(ir::Node* node, size_t index, ir::Value* v) {
  ir::Value* old = node->input(index);
  node->set_input(index, v);
  touch(node);
  touch_readers(node->output(0));
  lost_reader(old);
}

bool Rewriter::remove_output(ir::Node* node, size_t i) {
  if (!node->remove_output(i)) return false;
  touch(node);
  return true;
}

bool Rewriter::remove_graph_output(ir::Graph& g, size_t i) {
  if (g.parent() == nullptr || i >= g.outputs().size()) return false;
  ir::Value* v = g.outputs()[i].value;
  g.remove_output(i);
  touch(g.parent());
  erase_unread_producers(v);
  return true;
}

bool Rewriter::remove_graph_input(ir::Graph& g, size_t i) {
  if (g.parent() == nullptr || !g.remove_input(i)) return false;
  touch(g.parent());
  return true;
}

void Rewriter::set_inputs(ir::Node* node, const std::vector<ir::Value*>& inputs) {
  std::vector<ir::Value*> old(node->inputs().begin(), node->inputs().end());
  for (size_t i = 0; i < inputs.size(); ++i) node->set_input(i, inputs[i]);
  node->truncate_inputs(inputs.size());
  touch(node);
  touch_readers(node->output(0));
  for (ir::Value* v : old) lost_reader(v);
}

bool Rewriter::replace_with_constant(ir::Node* node, onnx::TensorProto tensor) {
  if (!node || node->outputs().size() != 1) return false;
  std::vector<onnx::TensorProto> tensors;
  tensors.push_back(std::move(tensor));
  return replace_with_constants(node, std::move(tensors));
}

bool Rewriter::replace_with_constants(ir::Node* node, std::vector<onnx::TensorProto> tensors) {
  if (!node || node->dead() || tensors.size() != node->outputs().size()) return false;
  ir::Graph* g = node->graph();
  if (can_hold_new_initializers(model_, g)) {
    // Each read output keeps its name and readers and becomes an initializer.
    for (size_t i = 0; i < tensors.size(); ++i) {
      ir::Value* out = node->output(i);
      if (!out || out->use_count() == 0) continue;
      touch_readers(out);
      g->make_initializer(out, std::move(tensors[i]));
    }
    return erase(node);
  }
  std::vector<ir::Value*> replacements;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ir::Value* out = node->output(i);
    if (!out || out->use_count() == 0) {
      replacements.push_back(nullptr);
      continue;
    }
    ir::Node* c = add_node(*g, "Constant", {}, 1, node);
    c->set_attr(constant_value_attr(std::move(tensors[i])));
    replacements.push_back(c->output(0));
  }
  return replace_node(node, replacements);
}

void Rewriter::set_attr(ir::Node* node, onnx::AttributeProto attr) {
  node->set_attr(std::move(attr));
  touch(node);
}

void Rewriter::remove_attr(ir::Node* node, std::string_view name) {
  node->remove_attr(name);
  touch(node);
}

}  // namespace graft
