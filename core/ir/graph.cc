// Graph and node mutation, topological sorting and structural verification.
#include <algorithm>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <absl/strings/str_cat.h>

#include "core/base/status.h"
#include "core/ir/model.h"

namespace graft::ir {

bool is_onnx_domain(std::string_view domain) { return domain.empty() || domain == "ai.onnx"; }

// ---------------------------------------------------------------------------------------------
// Value

void Value::set_initializer(onnx::TensorProto tensor) {
  tensor.set_name(name_);
  if (owner_)
    owner_->model()->on_undo([this, old = initializer_] {
      initializer_ = old;
      initializer_type_.reset();
    });
  initializer_ = std::make_shared<const onnx::TensorProto>(std::move(tensor));
  initializer_type_.reset();
  // New contents: this value and what its readers compute may have changed.
  drop_fact();
  for (const Use& u : uses_) u.node->edited();
}

void Value::set_stored_sparse(bool sparse) {
  if (sparse == stored_sparse_) return;
  if (owner_) owner_->model()->on_undo([this, old = stored_sparse_] { stored_sparse_ = old; });
  stored_sparse_ = sparse;
  if (owner_) owner_->model()->touch();
}

void Value::drop_fact() {
  Model* model = owner_ ? owner_->model() : nullptr;
  if (model && model->journaling() && (fact_gen_ != 0 || inferred_)) {
    std::shared_ptr<TensorFact> inferred(std::move(inferred_));
    model->on_undo([this, fact = fact_, gen = fact_gen_, exact = fact_exact_, inferred] {
      fact_ = fact;
      fact_gen_ = gen;
      fact_exact_ = exact;
      inferred_ = inferred ? std::make_unique<TensorFact>(*inferred) : nullptr;
    });
  }
  fact_gen_ = 0;
  inferred_.reset();
  if (model) model->touch();
}

const TensorFact& Value::fact() const { return fact_of(*this); }

const onnx::TypeProto* Value::type() const {
  if (info_ && info_->has_type()) return &info_->type();
  if (graph_input_) {
    for (const auto& in : owner_->inputs())
      if (in.value == this && in.info.has_type()) return &in.info.type();
  }
  for (const auto& [graph, index] : output_refs_) {
    const auto& out = graph->outputs()[index];
    if (out.info.has_type()) return &out.info.type();
  }
  if (initializer_) {
    if (!initializer_type_) {
      initializer_type_ = std::make_unique<onnx::TypeProto>();
      auto* tt = initializer_type_->mutable_tensor_type();
      tt->set_elem_type(initializer_->data_type());
      auto* shape = tt->mutable_shape();
      for (int64_t d : initializer_->dims()) shape->add_dim()->set_dim_value(d);
    }
    return initializer_type_.get();
  }
  return nullptr;
}

void Value::set_type(const onnx::TypeProto& type) {
  if (owner_->model()->journaling()) {
    std::shared_ptr<const onnx::ValueInfoProto> old;
    if (info_) old = std::make_shared<const onnx::ValueInfoProto>(*info_);
    owner_->model()->on_undo(
        [this, old, order = info_order_, next = owner_->next_info_order_, gen = fact_gen_] {
          info_ = old ? std::make_unique<onnx::ValueInfoProto>(*old) : nullptr;
          info_order_ = order;
          owner_->next_info_order_ = next;
          fact_gen_ = gen;
        });
  }
  if (!info_) {
    info_ = std::make_unique<onnx::ValueInfoProto>();
    info_order_ = owner_->next_info_order_++;
  }
  info_->set_name(name_);
  *info_->mutable_type() = type;
  fact_gen_ = 0;  // the declaration is one of the fact's sources
  owner_->model()->touch();
}

// ---------------------------------------------------------------------------------------------
// Node

void Value::add_use(Node* node, int index) {
  if (node->use_pos_.size() < node->inputs_.size()) node->use_pos_.resize(node->inputs_.size());
  node->use_pos_[index] = static_cast<uint32_t>(uses_.size());
  uses_.push_back({node, index});
  owner_->model()->on_undo([this] { uses_.pop_back(); });
}

void Value::remove_use(Node* node, int index) {
  size_t pos = index < static_cast<int>(node->use_pos_.size()) ? node->use_pos_[index] : 0;
  if (pos >= uses_.size() || !(uses_[pos] == Use{node, index})) {
    auto it = std::find(uses_.begin(), uses_.end(), Use{node, index});
    if (it == uses_.end()) return;
    pos = static_cast<size_t>(it - uses_.begin());
  }
  // Swap with the last entry: use lists are unordered, and this keeps removal O(1) even for
  // values shared by very many nodes.
  const Use removed = uses_[pos];
  if (pos + 1 != uses_.size()) {
    uses_[pos] = uses_.back();
    uses_[pos].node->use_pos_[uses_[pos].index] = static_cast<uint32_t>(pos);
  }
  uses_.pop_back();
  owner_->model()->on_undo([this, pos, removed] {
    if (pos < uses_.size()) {  // the last entry moved into the slot: it goes back to the end
      const Use moved = uses_[pos];
      uses_.push_back(moved);
      moved.node->use_pos_[moved.index] = static_cast<uint32_t>(uses_.size() - 1);
      uses_[pos] = removed;
    } else {
      uses_.push_back(removed);
    }
    std::vector<uint32_t>& slots = removed.node->use_pos_;
    if (slots.size() <= static_cast<size_t>(removed.index)) slots.resize(removed.index + 1);
    slots[removed.index] = static_cast<uint32_t>(pos);
  });
}

int64_t Node::opset() const { return graph_->opset(domain()); }

void Node::edited() {
  for (Value* o : outputs_)
    if (o) o->drop_fact();
  graph_->model()->touch();
}

void Node::save_proto() {
  Model* model = graph_->model();
  if (model->journaling() && born_ != model->journal_session())
    model->on_undo(
        [this, old = std::make_shared<const onnx::NodeProto>(proto_)] { proto_ = *old; });
}

onnx::NodeProto& Node::mutable_proto() {
  edited();
  save_proto();
  return proto_;
}

void Node::set_input(size_t i, Value* v) {
  edited();
  graph_->model()->on_undo(
      [this, i, size = inputs_.size(), old = i < inputs_.size() ? inputs_[i] : nullptr] {
        if (i < inputs_.size()) inputs_[i] = old;
        inputs_.resize(size);
      });
  if (i >= inputs_.size()) inputs_.resize(i + 1, nullptr);
  if (inputs_[i]) inputs_[i]->remove_use(this, static_cast<int>(i));
  inputs_[i] = v;
  if (v) v->add_use(this, static_cast<int>(i));
}

void Node::add_input(Value* v) { set_input(inputs_.size(), v); }

void Node::truncate_inputs(size_t count) {
  if (inputs_.size() > count) edited();
  while (inputs_.size() > count) {
    Value* last = inputs_.back();
    if (last) last->remove_use(this, static_cast<int>(inputs_.size() - 1));
    graph_->model()->on_undo([this, last] { inputs_.push_back(last); });
    inputs_.pop_back();
    use_pos_.resize(std::min(use_pos_.size(), inputs_.size()));
  }
}

bool Node::remove_output(size_t i) {
  if (i >= outputs_.size()) return false;
  Value* out = outputs_[i];
  if (out && (!out->uses_.empty() || !out->output_refs_.empty())) return false;
  graph_->model()->touch();
  graph_->model()->on_undo([this, i, out] {
    outputs_.insert(outputs_.begin() + static_cast<std::ptrdiff_t>(i), out);
    for (size_t k = i; k < outputs_.size(); ++k)
      if (outputs_[k]) outputs_[k]->producer_index_ = static_cast<int>(k);
    if (out) out->producer_ = this;
  });
  outputs_.erase(outputs_.begin() + static_cast<std::ptrdiff_t>(i));
  for (size_t k = i; k < outputs_.size(); ++k)
    if (outputs_[k]) outputs_[k]->producer_index_ = static_cast<int>(k);
  if (out) {
    out->producer_ = nullptr;
    out->producer_index_ = -1;
    graph_->remove_value(out);
  }
  return true;
}

const onnx::AttributeProto* Node::attr(std::string_view name) const {
  for (const auto& a : proto_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

int64_t Node::attr_int(std::string_view name, int64_t def) const {
  const auto* a = attr(name);
  return a && a->has_i() ? a->i() : def;
}

float Node::attr_float(std::string_view name, float def) const {
  const auto* a = attr(name);
  return a && a->has_f() ? a->f() : def;
}

std::string Node::attr_string(std::string_view name, std::string def) const {
  const auto* a = attr(name);
  return a && a->has_s() ? a->s() : def;
}

std::optional<std::vector<int64_t>> Node::attr_ints(std::string_view name) const {
  const auto* a = attr(name);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

void Node::set_attr(onnx::AttributeProto attr) {
  edited();
  save_proto();
  for (auto& a : *proto_.mutable_attribute()) {
    if (a.name() == attr.name()) {
      a = std::move(attr);
      return;
    }
  }
  *proto_.add_attribute() = std::move(attr);
}

void Node::remove_attr(std::string_view name) {
  edited();
  save_proto();
  auto* attrs = proto_.mutable_attribute();
  for (int i = 0; i < attrs->size(); ++i) {
    if (attrs->Get(i).name() == name) {
      attrs->DeleteSubrange(i, 1);
      return;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Graph

int64_t Graph::opset(std::string_view domain) const {
  const Graph* root = this;
  while (root->parent_) root = root->parent_->graph();
  const Model::OpsetImports* imports = model_->opset_imports(root);
  auto find =
      [&](const google::protobuf::RepeatedPtrField<onnx::OperatorSetIdProto>& list) -> int64_t {
    for (const auto& op : list) {
      bool match = is_onnx_domain(domain) ? is_onnx_domain(op.domain()) : op.domain() == domain;
      if (match) return op.version();
    }
    return 0;
  };
  int64_t v = imports ? find(*imports) : 0;
  if (v == 0 && imports != &model_->rest().opset_import()) v = find(model_->rest().opset_import());
  return v;
}

std::vector<Node*> Graph::nodes() const {
  if (!order_valid_) {
    order_.clear();
    order_.reserve(live_nodes_);
    for (const auto& n : nodes_)
      if (!n->dead_) order_.push_back(n.get());
    order_valid_ = true;
  }
  return order_;
}

std::vector<Value*> Graph::initializers() const {
  std::vector<Value*> out;
  out.reserve(initializers_.size());
  for (Value* v : initializers_)
    if (!v->dead_ && v->initializer_) out.push_back(v);
  std::stable_sort(out.begin(), out.end(),
                   [](const Value* a, const Value* b) { return a->init_order_ < b->init_order_; });
  return out;
}

Value* Graph::find_local(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Value* Graph::lookup(std::string_view name) const {
  for (const Graph* g = this; g; g = g->parent_ ? g->parent_->graph() : nullptr)
    if (Value* v = g->find_local(name)) return v;
  return nullptr;
}

Value* Graph::new_value(std::string name) {
  auto v = std::make_unique<Value>();
  v->name_ = std::move(name);
  v->owner_ = this;
  Value* raw = v.get();
  values_.push_back(std::move(v));
  Value*& slot = by_name_[raw->name_];
  model_->on_undo([this, raw, shadowed = slot] {
    // Freed by the next compact(), like any removed value.
    raw->dead_ = true;
    if (shadowed)
      by_name_[raw->name_] = shadowed;
    else
      by_name_.erase(raw->name_);
  });
  slot = raw;
  return raw;
}

void Graph::journal_new_node(Node* n, int64_t next_order) {
  n->born_ = model_->journal_session();
  model_->on_undo([this, n, next_order] {
    n->dead_ = true;  // freed by the next compact(); its outputs die with their own records
    --live_nodes_;
    order_valid_ = false;
    next_order_ = next_order;
  });
}

Node* Graph::add_node(std::string op_type, std::vector<Value*> inputs,
                      const std::vector<std::string>& output_hints, std::string domain) {
  model_->touch();
  auto node = std::make_unique<Node>();
  Node* n = node.get();
  n->graph_ = this;
  journal_new_node(n, next_order_);
  n->order_ = next_order_++;
  n->proto_.set_op_type(std::move(op_type));
  if (!domain.empty()) n->proto_.set_domain(std::move(domain));
  n->proto_.set_name(model_->fresh_name(n->proto_.op_type()));
  for (size_t i = 0; i < inputs.size(); ++i) n->set_input(i, inputs[i]);
  for (size_t i = 0; i < output_hints.size(); ++i) {
    Value* v = new_value(model_->fresh_name(output_hints[i]));
    v->producer_ = n;
    v->producer_index_ = static_cast<int>(i);
    n->outputs_.push_back(v);
  }
  nodes_.push_back(std::move(node));
  ++live_nodes_;
  order_valid_ = false;
  return n;
}

Value* Graph::add_initializer(std::string_view name_hint, onnx::TensorProto tensor) {
  model_->touch();
  Value* v = new_value(model_->fresh_name(name_hint));
  v->set_initializer(std::move(tensor));
  register_initializer(v);
  return v;
}

void Graph::register_initializer(Value* v) {
  model_->on_undo([this, v, order = v->init_order_, next = next_init_order_] {
    initializers_.pop_back();
    v->init_order_ = order;
    next_init_order_ = next;
  });
  v->init_order_ = next_init_order_++;
  initializers_.push_back(v);
}

void Graph::make_initializer(Value* value, onnx::TensorProto tensor) {
  model_->touch();
  if (Node* p = value->producer_) {
    // The producer keeps a fresh, unused value in its slot (and can then be removed).
    Value* fresh = p->graph_->new_value(model_->fresh_name(value->name_));
    fresh->producer_ = p;
    fresh->producer_index_ = value->producer_index_;
    p->outputs_[value->producer_index_] = fresh;
    model_->on_undo([value, p, index = value->producer_index_] {
      p->outputs_[index] = value;
      value->producer_ = p;
      value->producer_index_ = index;
    });
    value->producer_ = nullptr;
    value->producer_index_ = -1;
  }
  bool registered = value->initializer_ != nullptr;
  value->set_initializer(std::move(tensor));
  if (!registered) register_initializer(value);
}

// Copies nodes and their subgraphs into another graph (Graph::copy_nodes). Three steps, so that
// nothing changes when the copy is refused and so that node order within the copied subgraphs
// does not matter (a pass may have appended nodes out of order): check what the copy reads from
// outside, create every value and node, then wire inputs, captures and outputs.
class NodeCopier {
 public:
  NodeCopier(Graph& dst, const std::function<Value*(Value*)>& outer) : dst_(dst), outer_(outer) {}

  std::vector<Node*> run(const std::vector<const Node*>& srcs) {
    for (const Node* src : srcs) {
      for (const Value* out : src->outputs_)
        if (out) defined_.insert(out);
      collect_defined(*src);
    }
    for (const Node* src : srcs)
      if (!check(*src)) return {};
    dst_.model_->touch();
    std::vector<Node*> copies;
    copies.reserve(srcs.size());
    for (const Node* src : srcs) {
      Node* copy = create_node(*src, dst_);
      dst_.journal_new_node(copy, dst_.next_order_);
      copy->order_ = dst_.next_order_++;
      copies.push_back(copy);
    }
    dst_.order_valid_ = false;
    for (size_t i = 0; i < srcs.size(); ++i) wire_node(*srcs[i], copies[i]);
    return copies;
  }

 private:
  // Values `src`'s subgraphs define, in any nested scope.
  void collect_defined(const Node& src) {
    for (const auto& sub : src.subgraphs_) {
      const Graph& g = *sub.graph;
      for (const auto& in : g.inputs_) defined_.insert(in.value);
      for (const Value* v : g.initializers()) defined_.insert(v);
      for (const Node* n : g.nodes()) {
        for (const Value* out : n->outputs_)
          if (out) defined_.insert(out);
        collect_defined(*n);
      }
    }
  }

  // Whether every subgraph output resolves to a value, and no subgraph holds what the copy cannot
  // rename.
  bool check(const Node& src) {
    for (const auto& sub : src.subgraphs_) {
      const Graph& g = *sub.graph;
      if (g.rest_.sparse_initializer_size() > 0) return false;
      for (const auto& out : g.outputs_)
        if (!out.value || (!defined_.count(out.value) && !outer(out.value))) return false;
      for (const Node* n : g.nodes())
        if (!check(*n)) return false;
    }
    return true;
  }

  Value* outer(Value* v) {
    auto it = outer_cache_.find(v);
    if (it != outer_cache_.end()) return it->second;
    Value* r = outer_(v);
    outer_cache_.emplace(v, r);
    return r;
  }

  Value* resolve(Value* v) {
    if (!v) return nullptr;
    auto it = copies_.find(v);
    return it != copies_.end() ? it->second : outer(v);
  }

  // A value of `g` standing for `src`: fresh name, the declared type, flags.
  Value* define(Graph& g, const Value* src) {
    Value* v = g.new_value(g.model_->fresh_name(src->name_));
    if (src->info_) {
      v->info_ = std::make_unique<onnx::ValueInfoProto>(*src->info_);
      v->info_->set_name(v->name_);
      v->info_order_ = g.next_info_order_++;
    }
    copies_[src] = v;
    return v;
  }

  // Pass 1: the node, its output values and its subgraphs' values and nodes, without links.
  Node* create_node(const Node& src, Graph& g) {
    auto node = std::make_unique<Node>();
    Node* n = node.get();
    n->graph_ = &g;
    n->order_ = src.order_;
    n->proto_ = src.proto_;
    if (!src.name().empty()) n->proto_.set_name(g.model_->fresh_name(src.name()));
    for (size_t i = 0; i < src.outputs_.size(); ++i) {
      const Value* out = src.outputs_[i];
      if (!out) {
        n->outputs_.push_back(nullptr);
        continue;
      }
      Value* v = define(g, out);
      v->producer_ = n;
      v->producer_index_ = static_cast<int>(i);
      n->outputs_.push_back(v);
    }
    for (const auto& sub : src.subgraphs_) {
      Subgraph copy{sub.attr_name, sub.index, std::make_unique<Graph>(g.model_, n)};
      create_graph(*sub.graph, *copy.graph);
      n->subgraphs_.push_back(std::move(copy));
    }
    g.nodes_.push_back(std::move(node));
    ++g.live_nodes_;
    return n;
  }

  void create_graph(const Graph& s, Graph& d) {
    d.rest_ = s.rest_;
    // Annotations name tensors by their old names; they are hints a copy can do without.
    d.rest_.clear_quantization_annotation();
    d.next_order_ = s.next_order_;
    for (const auto& in : s.inputs_) {
      Value* v = define(d, in.value);
      v->graph_input_ = true;
      GraphInput copy{in.info, v};
      copy.info.set_name(v->name_);
      d.inputs_.push_back(std::move(copy));
    }
    for (Value* init : s.initializers()) {
      Value* v = copies_.count(init) ? copies_[init] : define(d, init);
      // Shared, like a clone's: tensors are immutable, and saving writes the value's name.
      v->initializer_ = init->initializer_;
      v->stored_sparse_ = init->stored_sparse_;
      v->init_order_ = d.next_init_order_++;
      d.initializers_.push_back(v);
    }
    for (const Node* n : s.nodes()) create_node(*n, d);
  }

  // Pass 2: inputs (and uses), subgraph outputs.
  void wire_node(const Node& src, Node* n) {
    for (size_t i = 0; i < src.inputs_.size(); ++i) {
      Value* v = resolve(src.inputs_[i]);
      n->inputs_.push_back(v);
      if (v) v->add_use(n, static_cast<int>(i));
    }
    for (size_t k = 0; k < src.subgraphs_.size(); ++k) {
      const Graph& s = *src.subgraphs_[k].graph;
      Graph& d = *n->subgraphs_[k].graph;
      const std::vector<Node*> src_nodes = s.nodes();
      const std::vector<Node*> dst_nodes = d.nodes();
      for (size_t i = 0; i < src_nodes.size(); ++i) wire_node(*src_nodes[i], dst_nodes[i]);
      for (const auto& out : s.outputs_) {
        Value* v = resolve(out.value);
        v->output_refs_.emplace_back(&d, static_cast<int>(d.outputs_.size()));
        d.model_->on_undo([v] { v->output_refs_.pop_back(); });
        d.outputs_.push_back({out.info, v});
      }
    }
  }

  Graph& dst_;
  const std::function<Value*(Value*)>& outer_;
  std::unordered_set<const Value*> defined_;
  std::unordered_map<const Value*, Value*> copies_;
  std::unordered_map<Value*, Value*> outer_cache_;
};

std::vector<Node*> Graph::copy_nodes(const std::vector<const Node*>& srcs,
                                     const std::function<Value*(Value*)>& outer) {
  return NodeCopier(*this, outer).run(srcs);
}

bool Graph::remove_node(Node* node) {
  if (node->dead_) return true;
  for (const Value* out : node->outputs_)
    if (out && (!out->uses_.empty() || !out->output_refs_.empty())) return false;
  detach_node(node);
  return true;
}

void Graph::detach_node(Node* node) {
  model_->touch();
  if (node->dead_) return;
  // Detach uses held by nested subgraph nodes and outputs first (they may capture outer values).
  for (auto& sub : node->subgraphs_) {
    Graph* g = sub.graph.get();
    for (auto& out : g->outputs_) {
      auto& refs = out.value->output_refs_;
      if (model_->journaling())
        model_->on_undo([v = out.value, old = refs] { v->output_refs_ = old; });
      refs.erase(
          std::remove_if(refs.begin(), refs.end(), [g](const auto& r) { return r.first == g; }),
          refs.end());
    }
    for (Node* inner : g->nodes()) g->detach_node(inner);
  }
  for (size_t i = 0; i < node->inputs_.size(); ++i)
    if (node->inputs_[i]) node->inputs_[i]->remove_use(node, static_cast<int>(i));
  for (Value* out : node->outputs_) {
    if (!out) continue;
    model_->on_undo([out, node, index = out->producer_index_] {
      out->producer_ = node;
      out->producer_index_ = index;
    });
    out->producer_ = nullptr;
    out->producer_index_ = -1;
    // Only a dying subgraph's values can still be read here (by its own dying nodes).
    if (out->uses_.empty() && out->output_refs_.empty()) remove_value(out);
  }
  node->dead_ = true;
  --live_nodes_;
  order_valid_ = false;
  model_->on_undo([this, node] {
    node->dead_ = false;
    ++live_nodes_;
    order_valid_ = false;
  });
}

void Graph::remove_value(Value* value) {
  if (value->dead_ || value->graph_input_ || value->producer_ || !value->uses_.empty() ||
      !value->output_refs_.empty())
    return;
  value->owner_->model_->touch();
  Graph* g = value->owner_;
  value->dead_ = true;
  auto it = g->by_name_.find(value->name_);
  const bool named = it != g->by_name_.end() && it->second == value;
  if (named) g->by_name_.erase(it);
  g->model_->on_undo([g, value, named] {
    value->dead_ = false;
    if (named) g->by_name_[value->name_] = value;
  });
}

void Graph::replace_all_uses(Value* from, Value* to, bool keep_outputs) {
  if (from == to) return;
  Model* model = from->owner_->model_;
  model->touch();
  // The undo records copy use and output lists: made only while journaling.
  const bool journaling = model->journaling();
  if (journaling)
    model->on_undo([from, uses = from->uses_] {
      from->uses_ = uses;
      for (size_t k = 0; k < uses.size(); ++k) {
        uses[k].node->inputs_[uses[k].index] = from;
        uses[k].node->use_pos_[uses[k].index] = static_cast<uint32_t>(k);
      }
    });
  for (const Use& u : from->uses_) {
    u.node->inputs_[u.index] = to;
    to->add_use(u.node, u.index);
  }
  from->uses_.clear();
  if (!keep_outputs) {
    if (journaling)
      model->on_undo([from, to, refs = from->output_refs_, kept = to->output_refs_.size()] {
        to->output_refs_.resize(kept);
        for (const auto& [graph, index] : refs) graph->outputs_[index].value = from;
        from->output_refs_ = refs;
      });
    for (const auto& [graph, index] : from->output_refs_) {
      graph->outputs_[index].value = to;
      to->output_refs_.emplace_back(graph, index);
    }
    from->output_refs_.clear();
  }
}

void Graph::set_output(size_t i, Value* value) {
  model_->touch();
  Value* old = outputs_[i].value;
  if (old == value) return;
  if (model_->journaling())
    model_->on_undo(
        [this, i, old, refs = old->output_refs_, kept = value->output_refs_.size(), value] {
          outputs_[i].value = old;
          old->output_refs_ = refs;
          value->output_refs_.resize(kept);
        });
  auto& refs = old->output_refs_;
  refs.erase(
      std::find(refs.begin(), refs.end(), std::pair<Graph*, int>(this, static_cast<int>(i))));
  outputs_[i].value = value;
  value->output_refs_.emplace_back(this, static_cast<int>(i));
}

bool Graph::remove_input(size_t i) {
  if (i >= inputs_.size()) return false;
  Value* v = inputs_[i].value;
  if (!v->uses_.empty() || !v->output_refs_.empty() || v->initializer_) return false;
  model_->touch();
  if (model_->journaling())
    model_->on_undo([this, i, v, info = inputs_[i].info] {
      inputs_.insert(inputs_.begin() + static_cast<std::ptrdiff_t>(i), GraphInput{info, v});
      v->graph_input_ = true;
    });
  inputs_.erase(inputs_.begin() + static_cast<std::ptrdiff_t>(i));
  v->graph_input_ = false;
  remove_value(v);
  return true;
}

void Graph::remove_output(size_t i) {
  if (i >= outputs_.size()) return;
  model_->touch();
  // The reference of the value at output `at` that reads position `from` reads `to`.
  auto retarget = [this](size_t at, int from, int to) {
    for (auto& ref : outputs_[at].value->output_refs_)
      if (ref.first == this && ref.second == from) {
        ref.second = to;
        return;
      }
  };
  Value* v = outputs_[i].value;
  if (model_->journaling())
    model_->on_undo([this, i, out = outputs_[i], refs = v->output_refs_, retarget] {
      outputs_.insert(outputs_.begin() + static_cast<std::ptrdiff_t>(i), out);
      for (size_t k = i + 1; k < outputs_.size(); ++k)
        retarget(k, static_cast<int>(k - 1), static_cast<int>(k));
      out.value->output_refs_ = refs;
    });
  auto& refs = v->output_refs_;
  refs.erase(
      std::find(refs.begin(), refs.end(), std::pair<Graph*, int>(this, static_cast<int>(i))));
  for (size_t k = i + 1; k < outputs_.size(); ++k)
    retarget(k, static_cast<int>(k), static_cast<int>(k - 1));
  outputs_.erase(outputs_.begin() + static_cast<std::ptrdiff_t>(i));
}

void Graph::set_input_type(size_t i, const onnx::TypeProto& type) {
  model_->touch();
  if (model_->journaling())
    model_->on_undo(
        [this, i, old = inputs_[i].info.type()] { *inputs_[i].info.mutable_type() = old; });
  *inputs_[i].info.mutable_type() = type;
  inputs_[i].value->drop_fact();
}

void Graph::set_output_type(size_t i, const onnx::TypeProto& type) {
  model_->touch();
  if (model_->journaling())
    model_->on_undo(
        [this, i, old = outputs_[i].info.type()] { *outputs_[i].info.mutable_type() = old; });
  *outputs_[i].info.mutable_type() = type;
  outputs_[i].value->drop_fact();
}

void Graph::move_output_name(Node* node, int index, Value* value) {
  model_->touch();
  Value* old = node->outputs_[index];
  model_->on_undo([node, index, old, value, producer = value->producer_,
                   producer_index = value->producer_index_] {
    node->outputs_[index] = old;
    old->producer_ = node;
    value->producer_ = producer;
    value->producer_index_ = producer_index;
    if (producer) producer->outputs_[producer_index] = value;
  });
  if (value->producer_) {
    // The previous producer keeps a (fresh, unused) output in its slot.
    Node* p = value->producer_;
    Value* fresh = p->graph_->new_value(model_->fresh_name(value->name_));
    fresh->producer_ = p;
    fresh->producer_index_ = value->producer_index_;
    p->outputs_[value->producer_index_] = fresh;
  }
  replace_all_uses(old, value);
  node->outputs_[index] = value;
  value->producer_ = node;
  value->producer_index_ = index;
  old->producer_ = nullptr;
  remove_value(old);
  // `value` may now be defined in this graph while it was owned by another scope.
  if (value->owner_ != this) adopt_value(value);
}

void Graph::adopt_value(Value* value) {
  Graph* prev = value->owner_;
  auto it = prev->by_name_.find(value->name_);
  const bool named = it != prev->by_name_.end() && it->second == value;
  if (named) prev->by_name_.erase(it);
  // The storage moves too: `prev` may be a subgraph whose node is removed later, which would
  // free the Value while this graph still uses it.
  auto owned = std::find_if(prev->values_.begin(), prev->values_.end(),
                            [value](const auto& p) { return p.get() == value; });
  const bool moved = owned != prev->values_.end();
  const size_t position = static_cast<size_t>(owned - prev->values_.begin());
  if (moved) {
    values_.push_back(std::move(*owned));
    prev->values_.erase(owned);
  }
  value->owner_ = this;
  Value*& slot = by_name_[value->name_];
  model_->on_undo([this, prev, value, named, moved, position, shadowed = slot] {
    if (shadowed)
      by_name_[value->name_] = shadowed;
    else
      by_name_.erase(value->name_);
    value->owner_ = prev;
    if (moved) {
      prev->values_.insert(prev->values_.begin() + static_cast<std::ptrdiff_t>(position),
                           std::move(values_.back()));
      values_.pop_back();
    }
    if (named) prev->by_name_[value->name_] = value;
  });
  slot = value;
}

int Graph::prune_orphan_value_info() {
  int n = static_cast<int>(orphan_info_.size());
  orphan_info_.clear();
  return n;
}

absl::Status Graph::finalize() {
  if (model_->journaling())
    return absl::FailedPreconditionError("finalize() while a transaction is open");
  for (const auto& n : nodes_)
    if (!n->dead_)
      for (auto& sub : n->subgraphs_) RETURN_IF_ERROR(sub.graph->finalize());
  RETURN_IF_ERROR(topo_sort());
  compact();
  return absl::OkStatus();
}

namespace {

// Producers in `g` that `node` depends on, including values captured by its subgraphs.
void collect_deps(const Graph* g, const Node* node, std::vector<Node*>& deps) {
  for (Value* v : node->inputs())
    if (v && v->producer() && v->producer()->graph() == g) deps.push_back(v->producer());
  for (const auto& sub : node->subgraphs()) {
    for (const auto& out : sub.graph->outputs())
      if (out.value->producer() && out.value->producer()->graph() == g)
        deps.push_back(out.value->producer());
    for (Node* inner : sub.graph->nodes()) collect_deps(g, inner, deps);
  }
}

}  // namespace

absl::Status Graph::topo_sort() {
  std::vector<Node*> live;
  live.reserve(live_nodes_);
  for (const auto& n : nodes_)
    if (!n->dead_) live.push_back(n.get());
  std::stable_sort(live.begin(), live.end(),
                   [](const Node* a, const Node* b) { return a->order_ < b->order_; });

  enum : uint8_t { kNew = 0, kActive = 1, kDone = 2 };
  for (Node* n : live) n->mark_ = kNew;
  auto state = [](Node* n) -> uint8_t& { return n->mark_; };
  std::vector<Node*> sorted;
  sorted.reserve(live.size());
  struct Frame {
    Node* node;
    std::vector<Node*> deps;
    size_t next = 0;
  };
  std::vector<Frame> stack;
  for (Node* root : live) {
    if (state(root) != kNew) continue;
    state(root) = kActive;
    stack.push_back({root, {}, 0});
    collect_deps(this, root, stack.back().deps);
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (f.next < f.deps.size()) {
        Node* dep = f.deps[f.next++];
        uint8_t& s = state(dep);
        if (s == kDone) continue;
        if (s == kActive)
          return absl::InvalidArgumentError(absl::StrCat("graph '", name(),
                                                         "' has a cycle through node '",
                                                         dep->name(), "' (", dep->op_type(), ")"));
        s = kActive;
        stack.push_back({dep, {}, 0});
        collect_deps(this, dep, stack.back().deps);
        continue;
      }
      state(f.node) = kDone;
      sorted.push_back(f.node);
      stack.pop_back();
    }
  }
  for (size_t i = 0; i < sorted.size(); ++i) sorted[i]->order_ = static_cast<int64_t>(i);
  next_order_ = static_cast<int64_t>(sorted.size());
  order_valid_ = false;
  return absl::OkStatus();
}

absl::Status Graph::reorder_nodes(const std::vector<Node*>& order) {
  if (order.size() != live_nodes_)
    return absl::InvalidArgumentError("reorder_nodes: not every live node once");
  // mark_: 1 = listed and not yet placed, 2 = placed.
  for (const auto& n : nodes_) n->mark_ = 0;
  for (Node* n : order) {
    if (!n || n->graph_ != this || n->dead_ || n->mark_ != 0)
      return absl::InvalidArgumentError("reorder_nodes: not every live node once");
    n->mark_ = 1;
  }
  std::vector<Node*> deps;
  for (Node* n : order) {
    deps.clear();
    collect_deps(this, n, deps);
    for (Node* d : deps)
      if (d != n && d->mark_ != 2)
        return absl::InvalidArgumentError(
            absl::StrCat("reorder_nodes: node '", n->name(), "' would run before its operands"));
    n->mark_ = 2;
  }
  for (size_t i = 0; i < order.size(); ++i) order[i]->order_ = static_cast<int64_t>(i);
  // Dead nodes (freed by the next compact) go last, in their current relative order.
  std::stable_partition(nodes_.begin(), nodes_.end(), [](const auto& n) { return !n->dead_; });
  std::sort(nodes_.begin(), nodes_.begin() + static_cast<std::ptrdiff_t>(order.size()),
            [](const auto& a, const auto& b) { return a->order_ < b->order_; });
  int64_t next = static_cast<int64_t>(order.size());
  for (size_t i = order.size(); i < nodes_.size(); ++i) nodes_[i]->order_ = next++;
  next_order_ = next;
  order_valid_ = false;
  return absl::OkStatus();
}

void Graph::compact() {
  std::vector<std::unique_ptr<Node>> kept;
  kept.reserve(live_nodes_);
  for (auto& n : nodes_)
    if (!n->dead_) kept.push_back(std::move(n));
  std::sort(kept.begin(), kept.end(),
            [](const auto& a, const auto& b) { return a->order_ < b->order_; });
  nodes_ = std::move(kept);
  initializers_.erase(std::remove_if(initializers_.begin(), initializers_.end(),
                                     [](Value* v) { return v->dead_ || !v->initializer_; }),
                      initializers_.end());
  // Values may be owned here while scoped elsewhere (move_output_name); free only dead ones.
  values_.erase(
      std::remove_if(values_.begin(), values_.end(), [](const auto& v) { return v->dead_; }),
      values_.end());
  order_valid_ = false;
}

// ---------------------------------------------------------------------------------------------
// Verification

namespace {

bool in_scope(const Graph* scope, const Graph* owner) {
  for (const Graph* g = scope; g; g = g->parent() ? g->parent()->graph() : nullptr)
    if (g == owner) return true;
  return false;
}

std::string describe(const Node* n) {
  return absl::StrCat("node '", n->name(), "' (", n->op_type(), ")");
}

}  // namespace

absl::Status Graph::verify() const {
  auto order = nodes();
  // Positions live in the nodes' scratch marks (dead or foreign nodes never match them).
  for (size_t i = 0; i < order.size(); ++i) order[i]->position_ = i;
  for (const auto& [name, v] : by_name_) {
    if (v->dead_) return absl::InternalError(absl::StrCat("dead value '", v->name_, "' in scope"));
    if (v->name_ != name || v->owner_ != this)
      return absl::InternalError(absl::StrCat("value '", v->name_, "' indexed as '",
                                              std::string(name), "' in the wrong graph"));
  }
  for (size_t i = 0; i < order.size(); ++i) {
    const Node* n = order[i];
    for (size_t k = 0; k < n->inputs_.size(); ++k) {
      const Value* v = n->inputs_[k];
      if (!v) continue;
      if (v->dead_)
        return absl::InternalError(
            absl::StrCat(describe(n), " input ", k, " refers to a removed value"));
      if (!in_scope(this, v->owner_))
        return absl::InternalError(
            absl::StrCat(describe(n), " input '", v->name_, "' is not in scope"));
      if (!v->producer_ && !v->graph_input_ && !v->initializer_ &&
          !v->owner_->rest_.sparse_initializer_size())
        return absl::InternalError(
            absl::StrCat("value '", v->name_, "' used by ", describe(n), " has no producer"));
      if (v->producer_ && v->producer_->graph_ == this) {
        const Node* p = v->producer_;
        if (p->dead_ || p->position_ >= i || order[p->position_] != p)
          return absl::InternalError(
              absl::StrCat(describe(n), " uses '", v->name_, "' before it is produced"));
      }
    }
    for (size_t k = 0; k < n->outputs_.size(); ++k) {
      const Value* v = n->outputs_[k];
      if (!v) continue;
      if (v->dead_ || v->producer_ != n || v->producer_index_ != (int)k)
        return absl::InternalError(
            absl::StrCat(describe(n), " output ", k, " has an inconsistent producer"));
      if (v->owner_ != this)
        return absl::InternalError(
            absl::StrCat(describe(n), " output '", v->name_, "' is not defined in its graph"));
    }
    for (const auto& sub : n->subgraphs_) RETURN_IF_ERROR(sub.graph->verify());
  }
  for (const auto& [name, v] : by_name_)
    if (v->producer_ && v->producer_->dead_)
      return absl::InternalError(absl::StrCat("value '", v->name_, "' has a removed producer"));
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const Value* v = outputs_[i].value;
    if (!v || v->dead_)
      return absl::InternalError(absl::StrCat("graph output ", i, " refers to a removed value"));
    if (!in_scope(this, v->owner_))
      return absl::InternalError(absl::StrCat("graph output '", v->name_, "' is not in scope"));
    if (!v->producer_ && !v->graph_input_ && !v->initializer_)
      return absl::InternalError(
          absl::StrCat("graph output '", v->name_, "' is produced by nothing"));
  }
  return absl::OkStatus();
}

absl::Status Graph::verify_use_lists(const std::vector<Graph*>& graphs) {
  // Use lists must be exactly the node input slots naming each value: every entry valid, no
  // duplicates, and as many entries as slots. Counting keeps this O(uses log uses) even for
  // values with very many uses (shared shape constants).
  for (const Graph* g : graphs)
    for (const auto& v : g->values_) v->scratch_ = 0;
  for (const Graph* g : graphs)
    for (const Node* n : g->nodes())
      for (const Value* v : n->inputs_)
        if (v) ++v->scratch_;
  std::vector<Use> sorted;
  auto check = [&](const Value* v) -> absl::Status {
    for (size_t pos = 0; pos < v->uses_.size(); ++pos) {
      const Use& u = v->uses_[pos];
      if (u.node->dead_ || u.node->input(u.index) != v ||
          u.node->use_pos_.size() <= static_cast<size_t>(u.index) ||
          u.node->use_pos_[u.index] != pos)
        return absl::InternalError(absl::StrCat("use list of '", v->name_, "' is stale"));
    }
    size_t expected = v->scratch_;
    if (v->uses_.size() != expected)
      return absl::InternalError(absl::StrCat("use list of '", v->name_, "' has ", v->uses_.size(),
                                              " entries for ", expected, " uses"));
    if (v->uses_.size() > 1) {
      sorted = v->uses_;
      auto less = [](const Use& a, const Use& b) {
        return std::tie(a.node, a.index) < std::tie(b.node, b.index);
      };
      std::sort(sorted.begin(), sorted.end(), less);
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
        return absl::InternalError(absl::StrCat("use list of '", v->name_, "' repeats a use"));
    }
    return absl::OkStatus();
  };
  for (const Graph* g : graphs)
    for (const auto& [name, v] : g->by_name_) RETURN_IF_ERROR(check(v));
  return absl::OkStatus();
}

}  // namespace graft::ir
