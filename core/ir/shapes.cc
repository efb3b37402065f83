// Shape facts: combining sources and running libonnx's inference; Graft's own rules are in
// shape_rules/ (shape_rules.h).
#include "core/ir/shapes.h"

#include <algorithm>
#include <exception>
#include <map>

#include <absl/strings/str_cat.h>

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include "core/ir/model.h"
#include "core/ir/onnx_guard.h"
#include "core/ir/op_params.h"
#include "core/ir/saturating.h"
#include "core/ir/shape_rules.h"
#include "core/ir/tensor.h"

namespace graft::ir {

using onnx::TensorProto;

// ---------------------------------------------------------------------------------------------
// TensorFact

TensorFact TensorFact::from_type(const onnx::TypeProto& type) {
  TensorFact f;
  if (!type.has_tensor_type()) return f;
  const auto& tt = type.tensor_type();
  f.elem_type = tt.elem_type();
  if (!tt.has_shape()) return f;
  f.has_rank = true;
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value() && d.dim_value() >= 0)
      f.dims.push_back(Dim::of(d.dim_value()));
    else if (d.has_dim_param() && !d.dim_param().empty())
      f.dims.push_back(Dim::named(d.dim_param()));
    else
      f.dims.push_back(Dim{});
  }
  return f;
}

std::optional<int64_t> TensorFact::dim(int64_t axis) const {
  if (!has_rank) return std::nullopt;
  auto a = normalize_axis(axis, static_cast<int64_t>(dims.size()));
  if (!a || !dims[static_cast<size_t>(*a)].known()) return std::nullopt;
  return dims[static_cast<size_t>(*a)].value;
}

std::optional<std::vector<int64_t>> TensorFact::static_shape() const {
  if (!has_rank) return std::nullopt;
  std::vector<int64_t> out;
  out.reserve(dims.size());
  for (const Dim& d : dims) {
    if (!d.known()) return std::nullopt;
    out.push_back(d.value);
  }
  return out;
}

std::optional<std::vector<int64_t>> TensorFact::dims_or_minus_one() const {
  if (!has_rank) return std::nullopt;
  std::vector<int64_t> out;
  for (const Dim& d : dims) out.push_back(d.known() ? d.value : -1);
  return out;
}

std::optional<int64_t> TensorFact::element_count() const {
  auto s = static_shape();
  if (!s) return std::nullopt;
  return ir::element_count(*s);
}

bool TensorFact::complete() const { return elem_type != 0 && static_shape().has_value(); }

void TensorFact::to_type(onnx::TypeProto* type) const {
  auto* tt = type->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  if (!has_rank) {
    tt->clear_shape();
    return;
  }
  auto* shape = tt->mutable_shape();
  shape->clear_dim();
  for (const Dim& d : dims) {
    auto* out = shape->add_dim();
    if (d.known())
      out->set_dim_value(d.value);
    else if (d.is_named())
      out->set_dim_param(d.symbol);
  }
}

std::string TensorFact::to_string() const {
  std::string s = elem_type == 0        ? "?"
                  : elem_type == kInt4  ? "INT4"
                  : elem_type == kUint4 ? "UINT4"
                                        : TensorProto::DataType_Name(elem_type);
  if (!has_rank) return s + "[*]";
  s += "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += dims[i].known() ? std::to_string(dims[i].value)
                         : (dims[i].is_named() ? dims[i].symbol : std::string("?"));
  }
  return s + "]";
}

TensorFact merge_facts(const TensorFact& a, const TensorFact& b, bool* conflict) {
  bool bad = false;
  TensorFact out;
  if (a.elem_type && b.elem_type && a.elem_type != b.elem_type)
    bad = true;
  else
    out.elem_type = a.elem_type ? a.elem_type : b.elem_type;
  if (a.has_rank && b.has_rank) {
    if (a.dims.size() != b.dims.size()) {
      bad = true;
    } else {
      out.has_rank = true;
      out.dims.resize(a.dims.size());
      for (size_t i = 0; i < a.dims.size(); ++i) {
        const Dim& x = a.dims[i];
        const Dim& y = b.dims[i];
        if (x.known() && y.known() && x.value != y.value) {
          bad = true;  // left unknown
        } else if (x.known() || y.known()) {
          out.dims[i] = x.known() ? x : y;
        } else if (x.is_named() || (x.is_symbol() && !y.is_named())) {
          out.dims[i] = x;  // two different names for one dim: either is true (a dim_param
                            // rather than an anonymous one)
        } else {
          out.dims[i] = y;
        }
      }
    }
  } else if (a.has_rank || b.has_rank) {
    out.has_rank = true;
    out.dims = a.has_rank ? a.dims : b.dims;
  }
  if (conflict && bad) *conflict = true;
  return out;
}

// ---------------------------------------------------------------------------------------------
// libonnx's inference

bool libonnx_knows(const Model& model) {
  const auto& rest = model.rest();
  if (rest.ir_version() > onnx::Version::IR_VERSION) return false;
  const auto& schemas = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  for (const auto& op : rest.opset_import()) {
    std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
    auto it = schemas.find(domain);
    // Custom domains have no schemas: inference leaves their nodes' outputs unknown.
    if (it == schemas.end()) continue;
    if (op.version() > it->second.second) return false;
  }
  return true;
}

namespace {

// Initializers above this size become data-less stubs (same type and dims) in the copy given to
// inference: shape-carrying tensors are tiny, weights need not be copied.
constexpr uint64_t kStubBytes = 4096;

}  // namespace

void strip_declarations(onnx::GraphProto* g) {
  g->clear_value_info();
  for (auto& out : *g->mutable_output())
    if (out.has_type() && out.type().has_tensor_type())
      out.mutable_type()->mutable_tensor_type()->clear_shape();
  for (auto& n : *g->mutable_node())
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) strip_declarations(a.mutable_g());
      for (auto& sub : *a.mutable_graphs()) strip_declarations(&sub);
    }
}

TensorFact inferred_fact(const onnx::TypeProto& t) {
  TensorFact f = TensorFact::from_type(t);
  for (Dim& d : f.dims)
    if (d.is_symbol() && d.symbol.rfind("unk__", 0) == 0) d = Dim{};
  return f;
}

// Gives each unknown dim of `v`'s fact an anonymous symbol of its own (Dim::anon): the size of
// that dim of that value, which rules copy to every value that has it too. Keyed by the value's
// address: unique among live values, and facts holding it are recomputed when the model changes
// (a fact with an anonymous dim is never complete).
static void name_unknown_dims(const Value* v, TensorFact* f) {
  if (!f->has_rank) return;
  for (size_t i = 0; i < f->dims.size(); ++i) {
    Dim& d = f->dims[i];
    if (d.known() || d.is_symbol()) continue;
    d = Dim::anon(absl::StrCat(reinterpret_cast<uintptr_t>(v), ":", i));
  }
}

class FactEngine {
 public:
  static void run_inference(Model& m);
  static const TensorFact& get(const Value* v);
  // The fact as last computed (rules read their inputs' after get() made them fresh).
  static const TensorFact& cached(const Value* v) { return v->fact_; }

 private:
  static void assign(Graph& g, const onnx::GraphProto& gp);
  static bool fresh(const Value* v, uint64_t gen) {
    return v->fact_gen_ == gen || (v->fact_gen_ != 0 && v->fact_.complete());
  }
  static void deps(const Value* v, std::vector<const Value*>* out);
  // Calls f on each value `n`'s outputs are computed from: its inputs and its subgraphs' outputs.
  template <typename F>
  static void for_each_dep(const Node& n, F&& f) {
    for (const Value* in : n.inputs())
      if (in) f(in);
    for (const auto& sub : n.subgraphs())
      for (const auto& o : sub.graph->outputs()) f(o.value);
  }
  static void compute(const Node& n, uint64_t gen);
  static TensorFact source_fact(const Value* v);
};

// A declared (or data-less stub) 1-D integer tensor of a billion entries would make libonnx
// allocate a billion dims (onnx_guard.h's kMaxShapeTensorLength). Models with such a tensor get
// no libonnx inference; Graft's rules cap the ranks they make.

bool has_huge_shape_tensor(const Model& m) {
  auto huge = [](const onnx::TypeProto& t) {
    if (!t.has_tensor_type() || !t.tensor_type().has_shape()) return false;
    const auto& shape = t.tensor_type().shape();
    return shape.dim_size() == 1 && shape.dim(0).has_dim_value() &&
           shape.dim(0).dim_value() > kMaxShapeTensorLength;
  };
  for (const Graph* g : m.all_graphs()) {
    for (const auto& in : g->inputs())
      if (huge(in.info.type())) return true;
    for (const auto& out : g->outputs())
      if (huge(out.info.type())) return true;
    for (const Value* v : g->initializers()) {
      const TensorProto& t = *v->initializer();
      if (t.dims_size() == 1 && t.dims(0) > kMaxShapeTensorLength &&
          (t.data_type() == TensorProto::INT64 || t.data_type() == TensorProto::INT32))
        return true;
    }
    for (const Node* n : g->nodes())
      for (const Value* o : n->outputs())
        if (o && o->value_info() && huge(o->value_info()->type())) return true;
  }
  return false;
}

// Deep call chains, cycles, or calls that expand to too many nodes: libonnx infers a function's
// body once per call, at every depth, so F0 calling F1 twice, F1 calling F2 twice, ... costs
// 2^depth body inferences (a hang on a model of a few dozen nodes).
bool has_deep_function_calls(const Model& m) {
  constexpr size_t kMaxDepth = 64;
  constexpr uint64_t kMaxExpandedNodes = uint64_t{1} << 20;
  const auto& fns = m.functions();
  if (fns.empty()) return false;
  std::map<std::pair<std::string, std::string>, size_t> index;
  for (size_t i = 0; i < fns.size(); ++i)
    index.emplace(std::make_pair(fns[i].rest.domain(), fns[i].rest.name()), i);
  // Functions called (once per call) and nodes of a graph and its subgraphs.
  auto calls_in = [&](const Graph* root, std::vector<size_t>* called, uint64_t* own) {
    std::vector<const Graph*> graphs{root};
    while (!graphs.empty()) {
      const Graph* g = graphs.back();
      graphs.pop_back();
      if (!g) continue;
      for (const Node* n : g->nodes()) {
        ++*own;
        auto it = index.find({n->domain(), n->op_type()});
        if (it != index.end()) called->push_back(it->second);
        for (const auto& s : n->subgraphs()) graphs.push_back(s.graph.get());
      }
    }
  };
  std::vector<std::vector<size_t>> callees(fns.size());
  std::vector<uint64_t> expanded(fns.size(), 0);  // own nodes, then with every call expanded
  for (size_t i = 0; i < fns.size(); ++i) calls_in(fns[i].body.get(), &callees[i], &expanded[i]);
  // Longest call chain from each function, depth first without recursion; a function met again
  // while on the current path is a cycle.
  enum : uint8_t { kNew, kOnPath, kDone };
  std::vector<uint8_t> state(fns.size(), kNew);
  std::vector<size_t> depth(fns.size(), 1);
  for (size_t root = 0; root < fns.size(); ++root) {
    if (state[root] != kNew) continue;
    std::vector<std::pair<size_t, size_t>> stack{{root, 0}};  // function, next callee
    state[root] = kOnPath;
    while (!stack.empty()) {
      auto& [f, next] = stack.back();
      if (next < callees[f].size()) {
        const size_t c = callees[f][next++];
        if (state[c] == kOnPath) return true;
        if (state[c] == kNew) {
          state[c] = kOnPath;
          stack.emplace_back(c, 0);
        }
        continue;
      }
      for (size_t c : callees[f]) {
        depth[f] = std::max(depth[f], depth[c] + 1);
        expanded[f] = sat_add(expanded[f], expanded[c]);
      }
      if (depth[f] > kMaxDepth || expanded[f] > kMaxExpandedNodes) return true;
      state[f] = kDone;
      stack.pop_back();
    }
  }
  std::vector<size_t> called;
  uint64_t total = 0;
  calls_in(&m.graph(), &called, &total);
  for (size_t c : called) total = sat_add(total, expanded[c]);
  return total > kMaxExpandedNodes;
}

void FactEngine::run_inference(Model& m) {
  m.inference_done_ = true;
  if (!libonnx_knows(m) || has_huge_shape_tensor(m) || has_deep_function_calls(m)) return;
  auto copy = m.clone();
  // libonnx types a sparse initializer as a sparse tensor, which no operator takes.
  for (Graph* g : copy->all_graphs())
    for (Value* v : g->initializers()) v->set_stored_sparse(false);
  for (Value* v : copy->graph().initializers()) {
    const TensorProto& t = *v->initializer();
    if (tensor_bytes(t) <= kStubBytes && !is_external(t)) continue;
    TensorProto stub;
    stub.set_data_type(t.data_type());
    *stub.mutable_dims() = t.dims();
    v->set_initializer(std::move(stub));
  }
  onnx::ModelProto proto = copy->release_proto();
  // Inference starts from the graph inputs and operators alone (see strip_declarations).
  strip_declarations(proto.mutable_graph());
  try {
    onnx::ShapeInferenceOptions options{/*check_type=*/false, /*error_mode=*/0,
                                        /*enable_data_propagation=*/false};
    onnx::shape_inference::InferShapes(proto, guarded_schemas(), options);
  } catch (const std::exception&) {
    return;  // e.g. a declared output type contradicting the operators: no inferred facts
  }
  assign(m.graph(), proto.graph());
}

// Attaches inferred facts to the node outputs of `g` (saved as `gp`, nodes in the same order),
// then to the values of If branches. Loop and Scan bodies are skipped (see shapes.h).
void FactEngine::assign(Graph& g, const onnx::GraphProto& gp) {
  auto take = [&](const onnx::ValueInfoProto& info) {
    if (!info.has_type()) return;
    Value* v = g.find_local(info.name());
    if (v && v->producer() && !v->dead())
      v->inferred_ = std::make_unique<TensorFact>(inferred_fact(info.type()));
  };
  for (const auto& info : gp.value_info()) take(info);
  for (const auto& info : gp.output()) take(info);
  std::vector<Node*> nodes = g.nodes();
  if (static_cast<int>(nodes.size()) != gp.node_size()) return;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Node* n = nodes[i];
    const onnx::NodeProto& np = gp.node(static_cast<int>(i));
    if (np.op_type() != n->op_type()) return;
    if (!n->is("If")) continue;
    for (const auto& sub : n->subgraphs())
      for (const auto& a : np.attribute())
        if (a.name() == sub.attr_name && a.has_g()) assign(*sub.graph, a.g());
  }
}

const TensorFact& FactEngine::get(const Value* v) {
  Model* m = v->owner()->model();
  const uint64_t gen = m->generation();
  if (fresh(v, gen)) return v->fact_;
  // Depth-first over the stale values `v` depends on, without recursion (chains can be long).
  std::vector<const Value*> stack{v};
  std::vector<const Value*> needed;
  while (!stack.empty()) {
    const Value* t = stack.back();
    if (fresh(t, gen)) {
      t->fact_busy_ = false;
      stack.pop_back();
      continue;
    }
    if (!t->fact_busy_) {
      t->fact_busy_ = true;
      needed.clear();
      deps(t, &needed);
      bool pushed = false;
      for (const Value* d : needed)
        if (!fresh(d, gen) && !d->fact_busy_) {
          stack.push_back(d);
          pushed = true;
        }
      if (pushed) continue;
    }
    // Every dependency is fresh (or on a cycle, which leaves it as it is).
    if (const Node* p = t->producer(); p && !t->is_constant() && !t->is_graph_input()) {
      compute(*p, gen);
    } else {
      t->fact_ = source_fact(t);
      name_unknown_dims(t, &t->fact_);
      t->fact_exact_ = true;  // a source: nothing but its declaration tells more
    }
    t->fact_gen_ = gen;
    t->fact_busy_ = false;
    stack.pop_back();
  }
  return v->fact_;
}

void FactEngine::deps(const Value* v, std::vector<const Value*>* out) {
  if (v->is_constant() || v->is_graph_input()) return;
  if (const Node* p = v->producer()) for_each_dep(*p, [out](const Value* d) { out->push_back(d); });
}

// What is known of a value without a producer: a graph input's declaration, an initializer's
// tensor, the iteration count and condition of a Loop body.
TensorFact FactEngine::source_fact(const Value* v) {
  if (v->is_constant()) {
    const TensorProto& t = *v->initializer();
    std::vector<Dim> dims;
    for (int64_t d : t.dims()) dims.push_back(Dim::of(d));
    return TensorFact::of_rank(t.data_type(), std::move(dims));
  }
  TensorFact declared;
  const onnx::TypeProto* t = v->type();
  // A graph input with an initializer is described by its declaration only: the initializer is a
  // default a caller may override with another shape.
  if (t && t != v->initializer_type_.get()) declared = TensorFact::from_type(*t);
  const Graph* g = v->owner();
  if (v->is_graph_input() && g->parent() && g->parent()->is("Loop")) {
    const auto& ins = g->inputs();
    TensorFact known;
    if (!ins.empty() && ins[0].value == v) known = TensorFact::of_rank(TensorProto::INT64, {});
    if (ins.size() > 1 && ins[1].value == v) known = TensorFact::of_rank(TensorProto::BOOL, {});
    if (known.has_rank) {
      bool conflict = false;
      TensorFact merged = merge_facts(known, declared, &conflict);
      return conflict ? known : merged;
    }
  }
  return declared;
}

namespace {

// The fact of output `output` of `n` from Graft's rules (shape_rules.h). Sets *partial where the
// rule could not tell all that libonnx might.
TensorFact rule_fact(const Node& n, size_t output, bool* partial) {
  const ShapeRule rule = find_shape_rule(n.domain(), n.op_type());
  return rule ? rule(n, output, partial) : shape_rules::unknown(partial);
}

}  // namespace

const TensorFact& shape_rules::computed_fact(const Value* v) {
  static const TensorFact kUnknown{};
  return v ? FactEngine::cached(v) : kUnknown;
}

void FactEngine::compute(const Node& n, uint64_t gen) {
  // A fact is exact when every rule on the way from the graph's sources told all it could:
  // its unknown dims come from unknown or symbolic dims of sources, and libonnx would not know
  // them either.
  bool inputs_exact = true;
  for_each_dep(n, [&](const Value* d) { inputs_exact = inputs_exact && d->fact_exact_; });
  for (size_t i = 0; i < n.outputs().size(); ++i) {
    Value* o = n.outputs()[i];
    if (!o) continue;
    bool partial = !inputs_exact;
    TensorFact inferred = rule_fact(n, i, &partial);
    // libonnx's inference runs (once, over the whole model) only when Graft's rules leave a fact
    // incomplete and may have missed something: on models the rules cover, it is never paid for.
    Model& m = *n.graph()->model();
    if (partial && !inferred.complete() && !m.inference_done_) run_inference(m);
    o->fact_exact_ = !partial || inferred.complete();
    // Two inferences disagreeing: trust neither where they do (merge_facts leaves those dims
    // unknown).
    if (o->inferred_) inferred = merge_facts(*o->inferred_, inferred, nullptr);
    // A node output's own declaration (value_info) is not used: it is the exporter's claim, and
    // what it adds beyond Graft's rules and libonnx's inference (which starts from the operators
    // alone) is exactly what nobody checked — a batch size fixed at export, a dim of an op whose
    // output size depends on data. Only graph inputs (the interface) and constants are sources.
    name_unknown_dims(o, &inferred);
    o->fact_ = std::move(inferred);
    o->fact_gen_ = gen;
  }
}

const TensorFact& fact_of(const Value& v) { return FactEngine::get(&v); }

bool fact_exact(const Value& v) {
  FactEngine::get(&v);
  return v.fact_exact_;
}

int refine_value_info(Model& model) {
  int refined = 0;
  for (Graph* g : model.all_graphs()) {
    for (Node* n : g->nodes()) {
      for (Value* v : n->outputs()) {
        const onnx::ValueInfoProto* info = v ? v->value_info() : nullptr;
        if (!info || !info->has_type() || !info->type().has_tensor_type()) continue;
        const TensorFact declared = TensorFact::from_type(info->type());
        // Anonymous dims say nothing a declaration can hold.
        TensorFact fact = v->fact();
        for (Dim& d : fact.dims)
          if (d.anonymous) d = Dim{};
        bool conflict = false;
        const TensorFact merged = merge_facts(declared, fact, &conflict);
        if (conflict || merged == declared) continue;
        onnx::TypeProto type = info->type();  // keeps denotations and the like
        merged.to_type(&type);
        v->set_type(type);
        ++refined;
      }
    }
  }
  return refined;
}

void Model::disable_shape_inference() {
  refresh_shape_inference();
  inference_done_ = true;
}

void Model::refresh_shape_inference() {
  inference_done_ = false;
  for (Graph* g : all_graphs())
    for (const auto& v : g->values_) {
      v->inferred_.reset();
      v->fact_gen_ = 0;
    }
  touch();
}

}  // namespace graft::ir
