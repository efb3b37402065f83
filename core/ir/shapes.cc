// Shape facts: combining sources, running libonnx's inference, and Graft's own rules.
#include "core/ir/shapes.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include <absl/strings/str_cat.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include "core/ir/model.h"
#include "core/ir/onnx_guard.h"
#include "core/ir/op_params.h"
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
    else if (d.is_symbol())
      out->set_dim_param(d.symbol);
  }
}

std::string TensorFact::to_string() const {
  std::string s = elem_type == 0 ? "?" : TensorProto::DataType_Name(elem_type);
  if (!has_rank) return s + "[*]";
  s += "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += ",";
    s += dims[i].known() ? std::to_string(dims[i].value)
                         : (dims[i].is_symbol() ? dims[i].symbol : std::string("?"));
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
        } else if (x.is_symbol()) {
          out.dims[i] = x;  // two different names for one dim: either is true
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
  auto sat_add = [](uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; };
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

namespace {

// MaxPool, AveragePool, LpPool and their Global forms (op types of the default domain).
bool is_pool(const std::string& op) {
  static const std::set<std::string, std::less<>> kPools = {
      "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"};
  return kPools.count(op) > 0;
}

}  // namespace

void FactEngine::run_inference(Model& m) {
  m.inference_done_ = true;
  if (!libonnx_knows(m) || has_huge_shape_tensor(m) || has_deep_function_calls(m)) return;
  auto copy = m.clone();
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

// Sets *partial where the rule could not tell all that libonnx might.
TensorFact rule_fact(const Node& n, size_t output, bool* partial);  // below

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
        bool conflict = false;
        const TensorFact merged = merge_facts(declared, v->fact(), &conflict);
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

// ---------------------------------------------------------------------------------------------
// Graft's rules: the fact of output `output` of `n` from its inputs' facts (already fresh).

namespace {

const TensorFact kUnknown{};

// Checked arithmetic on dims: sizes come from the model, so a product or sum may not fit.
Dim checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, &r) ? Dim::of(r) : Dim{};
}
Dim checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  return !__builtin_add_overflow(a, b, &r) && r >= 0 ? Dim::of(r) : Dim{};
}

const TensorFact& cached(const Value* v) { return v ? FactEngine::cached(v) : kUnknown; }

const TensorFact& in_fact(const Node& n, size_t i) { return cached(n.input(i)); }

TensorFact with_type(TensorFact f, int32_t t) {
  f.elem_type = t;
  return f;
}

// Ranks this large only come from crafted models (a declared shape tensor of a billion
// entries); a fact is not worth allocating for them.
constexpr int64_t kMaxRank = 1024;

// What a rule returns where it cannot tell more than libonnx might (an operand that is not
// constant, an op or attribute it does not know, an invalid model): marks the fact partial, so
// that libonnx's inference is asked.
TensorFact unknown(bool* partial) {
  *partial = true;
  return {};
}

// Where a rule's parameter operands are all constant (or it has none) and it still could not read
// them, libonnx might: it reads initializers and Constant nodes (not computed values: Graft runs
// it without data propagation).
void may_know_more(const Node& n, bool* partial) {
  for (size_t i = 1; i < n.inputs().size(); ++i)
    if (n.input(i) && !constant_in_memory(n.input(i))) return;
  *partial = true;
}

TensorFact rank_only(int32_t t, int64_t rank) {
  if (rank < 0 || rank > kMaxRank) return TensorFact{t, false, {}};
  return TensorFact::of_rank(t, std::vector<Dim>(static_cast<size_t>(rank)));
}

// Multidirectional (numpy) broadcasting of the inputs' shapes.
TensorFact broadcast(const std::vector<const TensorFact*>& ins, int32_t elem_type) {
  TensorFact out;
  out.elem_type = elem_type;
  size_t rank = 0;
  for (const TensorFact* f : ins) {
    if (!f->has_rank) return out;
    rank = std::max(rank, f->dims.size());
  }
  out.has_rank = true;
  out.dims.assign(rank, Dim{});
  for (size_t k = 0; k < rank; ++k) {
    // Dims aligned from the right; a missing dim is 1.
    std::optional<Dim> result;
    bool unknown = false;
    for (const TensorFact* f : ins) {
      if (f->dims.size() + k < rank) continue;
      const Dim& d = f->dims[f->dims.size() - rank + k];
      if (d.known() && d.value == 1) continue;
      if (!d.known() && !d.is_symbol()) {
        unknown = true;
        continue;
      }
      if (!result) {
        result = d;
      } else if (result->known() && d.known()) {
        if (result->value != d.value) return TensorFact{elem_type, false, {}};  // invalid
      } else if (d.known()) {
        result = d;  // a symbol broadcast against N > 1 must be N (or 1)
      } else if (!result->known() && result->symbol != d.symbol) {
        unknown = true;
      }
    }
    if (!result)
      out.dims[k] = unknown ? Dim{} : Dim::of(1);
    else if (unknown && !result->known())
      out.dims[k] = Dim{};  // the unknown one may be the larger
    else
      out.dims[k] = *result;
  }
  return out;
}

bool one_of(const std::string& op, std::initializer_list<const char*> ops) {
  for (const char* o : ops)
    if (op == o) return true;
  return false;
}

// Ops whose first output has the shape and type of their first input.
bool same_as_input(const std::string& op) {
  return one_of(op, {"Identity",  "Abs",      "Neg",         "Exp",        "Log",
                     "Sqrt",      "Reciprocal", "Floor",     "Ceil",       "Round",
                     "Relu",      "Sigmoid",  "Tanh",        "Erf",        "Sin",
                     "Cos",       "Tan",      "Asin",        "Acos",       "Atan",
                     "Sinh",      "Cosh",     "Asinh",       "Acosh",      "Atanh",
                     "Sign",      "Softplus", "Softsign",    "Softmax",    "LogSoftmax",
                     "Hardmax",   "Elu",      "Selu",        "Celu",       "LeakyRelu",
                     "ThresholdedRelu", "HardSigmoid", "HardSwish", "Gelu", "Mish",
                     "Shrink",    "Clip",     "Dropout",     "BatchNormalization",
                     "LayerNormalization", "InstanceNormalization", "LpNormalization",
                     "MeanVarianceNormalization", "LRN", "CumSum", "Trilu",
                     "ReverseSequence", "ScatterND", "ScatterElements", "Scatter",
                     "PRelu",     "BitwiseNot"});
}

bool broadcasting(const std::string& op) {
  return one_of(op, {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean",
                     "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor"});
}

bool comparison(const std::string& op) {
  return one_of(op, {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or",
                     "Xor"});
}

std::optional<int64_t> product(const std::vector<Dim>& dims, size_t begin, size_t end) {
  std::vector<int64_t> v;
  for (size_t i = begin; i < end; ++i) {
    if (!dims[i].known()) return std::nullopt;
    v.push_back(dims[i].value);
  }
  return element_count(v);
}

// The -1 entry of a Reshape from `in` to `out` whose unknown sizes cancel: every output dim that
// is not known is a copy of an input axis (a 0 entry) or the same symbol as an input dim, and the
// input dims left over are known. [batch, 3, 4, 5] to [0, -1] gives 60.
Dim cancelled_dim(const std::vector<Dim>& in, const std::vector<Dim>& out,
                  const std::vector<int>& copied_from, int minus_one) {
  std::vector<bool> used(in.size(), false);
  int64_t out_known = 1, in_known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int>(i) == minus_one) continue;
    if (copied_from[i] >= 0 && !used[static_cast<size_t>(copied_from[i])]) {
      used[static_cast<size_t>(copied_from[i])] = true;
      continue;
    }
    if (out[i].known()) {
      Dim m = checked_mul(out_known, out[i].value);
      if (!m.known()) return Dim{};
      out_known = m.value;
      continue;
    }
    bool found = false;
    for (size_t j = 0; j < in.size() && !found; ++j)
      if (!used[j] && !in[j].known() && in[j].same_as(out[i])) used[j] = found = true;
    if (!found) return Dim{};
  }
  for (size_t j = 0; j < in.size(); ++j) {
    if (used[j]) continue;
    if (!in[j].known()) return Dim{};
    Dim m = checked_mul(in_known, in[j].value);
    if (!m.known()) return Dim{};
    in_known = m.value;
  }
  if (out_known <= 0 || in_known % out_known != 0) return Dim{};
  return Dim::of(in_known / out_known);
}

TensorFact reshape_fact(const Node& n, const TensorFact& x, bool* partial) {
  auto shape = constant_ints(n.input(1));
  if (n.opset() < 5) shape = n.attr_ints("shape");
  if (!shape) {
    // The output's rank is the shape tensor's length.
    const TensorFact& s = in_fact(n, 1);
    if (n.opset() >= 5 && s.has_rank && s.dims.size() == 1 && s.dims[0].known())
      return rank_only(x.elem_type, s.dims[0].value);
    return TensorFact{x.elem_type, false, {}};
  }
  const bool allowzero = n.attr_int("allowzero", 0) != 0;
  std::vector<Dim> dims;
  std::vector<int> copied_from(shape->size(), -1);  // the input axis a 0 entry copies
  int minus_one = -1;
  for (size_t i = 0; i < shape->size(); ++i) {
    int64_t s = (*shape)[i];
    if (s == 0 && !allowzero) {
      if (!x.has_rank || i >= x.dims.size()) return rank_only(x.elem_type, shape->size());
      dims.push_back(x.dims[i]);
      copied_from[i] = static_cast<int>(i);
    } else if (s == -1) {
      if (minus_one >= 0) return with_type(unknown(partial), x.elem_type);
      minus_one = static_cast<int>(i);
      dims.push_back(Dim{});
    } else if (s < 0) {
      return with_type(unknown(partial), x.elem_type);
    } else {
      dims.push_back(Dim::of(s));
    }
  }
  if (minus_one >= 0) {
    auto total = x.element_count();
    std::optional<int64_t> rest = product(dims, 0, static_cast<size_t>(minus_one));
    std::optional<int64_t> tail =
        product(dims, static_cast<size_t>(minus_one) + 1, dims.size());
    const Dim known = rest && tail ? checked_mul(*rest, *tail) : Dim{};
    if (total && known.known() && known.value > 0 && *total % known.value == 0)
      dims[static_cast<size_t>(minus_one)] = Dim::of(*total / known.value);
    else if (x.has_rank)
      dims[static_cast<size_t>(minus_one)] = cancelled_dim(x.dims, dims, copied_from, minus_one);
  }
  return TensorFact::of_rank(x.elem_type, std::move(dims));
}

TensorFact slice_fact(const Node& n, const TensorFact& x, bool* partial) {
  TensorFact out{x.elem_type, x.has_rank, {}};
  if (!x.has_rank) return out;
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  auto p = slice_params(n);
  if (!p) {
    may_know_more(n, partial);
    out.dims.assign(x.dims.size(), Dim{});
    return out;
  }
  out.dims = x.dims;
  for (size_t i = 0; i < p->starts.size(); ++i) {
    auto axis = normalize_axis(p->axes[i], rank);
    if (!axis) return with_type(unknown(partial), x.elem_type);
    Dim& d = out.dims[static_cast<size_t>(*axis)];
    if (!d.known()) {
      d = Dim{};
      continue;
    }
    const int64_t size = d.value, step = p->steps[i];
    if (step == INT64_MIN) {
      d = Dim{};
      continue;
    }
    auto clampv = [](int64_t v, int64_t lo, int64_t hi) { return std::min(std::max(v, lo), hi); };
    int64_t start = p->starts[i], end = p->ends[i];
    if (start < 0) start = start < -size ? 0 : start + size;  // careful with INT64_MIN
    if (end < 0) end = end < -size ? -1 : end + size;
    int64_t len;
    if (step > 0) {
      start = clampv(start, 0, size);
      end = clampv(end, 0, size);
      len = end > start ? (end - start + step - 1) / step : 0;
    } else {
      start = clampv(start, 0, size - 1);
      end = clampv(end, -1, size - 1);
      len = start > end ? (start - end + (-step) - 1) / (-step) : 0;
    }
    d = Dim::of(len);
  }
  return out;
}

TensorFact matmul_fact(const TensorFact& a, const TensorFact& b) {
  int32_t t = a.elem_type ? a.elem_type : b.elem_type;
  if (!a.has_rank || !b.has_rank || a.dims.empty() || b.dims.empty()) return TensorFact{t, false, {}};
  std::vector<Dim> ad = a.dims, bd = b.dims;
  const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
  if (a1) ad.insert(ad.begin(), Dim::of(1));
  if (b1) bd.push_back(Dim::of(1));
  TensorFact ab = TensorFact::of_rank(t, std::vector<Dim>(ad.begin(), ad.end() - 2));
  TensorFact bb = TensorFact::of_rank(t, std::vector<Dim>(bd.begin(), bd.end() - 2));
  TensorFact out = broadcast({&ab, &bb}, t);
  if (!out.has_rank) return out;
  if (!a1) out.dims.push_back(ad[ad.size() - 2]);
  if (!b1) out.dims.push_back(bd.back());
  return out;
}

TensorFact reduce_fact(const Node& n, const TensorFact& x, int32_t elem_type, bool* partial) {
  TensorFact out{elem_type, false, {}};
  if (!x.has_rank) return out;
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  std::optional<std::vector<int64_t>> axes;
  bool keepdims = true;
  if (n.op_type() == "ArgMax" || n.op_type() == "ArgMin") {
    axes = std::vector<int64_t>{n.attr_int("axis", 0)};
    keepdims = n.attr_int("keepdims", 1) != 0;
  } else {
    auto p = reduce_params(n);
    if (!p) {
      may_know_more(n, partial);
      return out;
    }
    if (!p->axes && p->noop_with_empty_axes) return with_type(x, elem_type);
    axes = p->axes;
    keepdims = p->keepdims;
  }
  std::vector<bool> reduced(x.dims.size(), !axes.has_value());
  if (axes) {
    auto norm = normalize_axes(*axes, rank);
    if (!norm) return with_type(unknown(partial), elem_type);
    for (int64_t a : *norm) reduced[static_cast<size_t>(a)] = true;
  }
  out.has_rank = true;
  for (size_t i = 0; i < x.dims.size(); ++i) {
    if (!reduced[i])
      out.dims.push_back(x.dims[i]);
    else if (keepdims)
      out.dims.push_back(Dim::of(1));
  }
  return out;
}

}  // namespace

TensorFact rule_fact(const Node& n, size_t output, bool* partial) {
  if (!n.is_onnx_domain()) return unknown(partial);
  const std::string& op = n.op_type();
  const TensorFact& x = in_fact(n, 0);
  if (op == "Constant") {
    const onnx::AttributeProto* a = n.attributes().empty() ? nullptr : &n.attributes()[0];
    if (!a || n.attributes().size() != 1) return unknown(partial);
    if (a->name() == "value" && a->has_t()) {
      std::vector<Dim> dims;
      for (int64_t d : a->t().dims()) dims.push_back(Dim::of(d));
      return TensorFact::of_rank(a->t().data_type(), std::move(dims));
    }
    if (a->name() == "value_float") return TensorFact::of_rank(TensorProto::FLOAT, {});
    if (a->name() == "value_int") return TensorFact::of_rank(TensorProto::INT64, {});
    if (a->name() == "value_floats")
      return TensorFact::of_rank(TensorProto::FLOAT, {Dim::of(a->floats_size())});
    if (a->name() == "value_ints")
      return TensorFact::of_rank(TensorProto::INT64, {Dim::of(a->ints_size())});
    return unknown(partial);
  }
  if (op == "Dropout" && output == 1) {
    TensorFact mask = x;
    mask.elem_type = TensorProto::BOOL;
    return mask;
  }
  if ((op == "BatchNormalization" || op == "LayerNormalization") && output > 0)
    return unknown(partial);
  if (same_as_input(op)) return output == 0 ? x : TensorFact{};
  if (op == "RMSNormalization") {
    // Y has X's shape and Scale's element type.
    if (output > 0) return TensorFact{};
    const int32_t type = in_fact(n, 1).elem_type;
    if (type == 0) *partial = true;
    return with_type(x, type);
  }
  if (op == "Cast") {
    auto to = cast_to(n);
    if (!to) *partial = true;
    return with_type(x, to ? *to : 0);
  }
  if (op == "CastLike") return with_type(x, in_fact(n, 1).elem_type);
  if (op == "Not" || op == "IsNaN" || op == "IsInf") return with_type(x, TensorProto::BOOL);
  if (broadcasting(op) || comparison(op) || op == "Where") {
    std::vector<const TensorFact*> ins;
    for (size_t i = 0; i < n.inputs().size(); ++i) ins.push_back(&in_fact(n, i));
    if (ins.empty()) return unknown(partial);
    int32_t t = comparison(op) ? TensorProto::BOOL
                               : (op == "Where" ? in_fact(n, 1).elem_type : x.elem_type);
    return broadcast(ins, t);
  }
  if (op == "Shape") {
    if (!x.has_rank) return TensorFact::of_rank(TensorProto::INT64, {Dim{}});
    int64_t rank = static_cast<int64_t>(x.dims.size());
    int64_t start = n.attr_int("start", 0), end = n.attr_int("end", rank);
    if (start < 0) start = std::max<int64_t>(0, start + rank);
    if (end < 0) end = std::max<int64_t>(0, end + rank);
    start = std::min(start, rank);
    end = std::min(end, rank);
    return TensorFact::of_rank(TensorProto::INT64, {Dim::of(std::max<int64_t>(0, end - start))});
  }
  if (op == "Size") return TensorFact::of_rank(TensorProto::INT64, {});
  if (op == "Reshape") return reshape_fact(n, x, partial);
  if (op == "Flatten") {
    if (!x.has_rank) return TensorFact::of_rank(x.elem_type, {Dim{}, Dim{}});
    auto axis = n.attr_int("axis", 1);
    auto a = axis == static_cast<int64_t>(x.dims.size())
                 ? std::optional<int64_t>(axis)
                 : normalize_axis(axis, static_cast<int64_t>(x.dims.size()));
    if (!a) return unknown(partial);
    auto outer = product(x.dims, 0, static_cast<size_t>(*a));
    auto inner = product(x.dims, static_cast<size_t>(*a), x.dims.size());
    return TensorFact::of_rank(x.elem_type, {outer ? Dim::of(*outer) : Dim{},
                                             inner ? Dim::of(*inner) : Dim{}});
  }
  if (op == "Transpose") {
    if (!x.has_rank) return with_type(TensorFact{}, x.elem_type);
    const size_t rank = x.dims.size();
    std::vector<int64_t> perm;
    if (auto p = n.attr_ints("perm")) {
      perm = *p;
    } else {
      for (size_t i = 0; i < rank; ++i) perm.push_back(static_cast<int64_t>(rank - 1 - i));
    }
    if (perm.size() != rank) return unknown(partial);
    std::vector<Dim> dims;
    for (int64_t p : perm) {
      if (p < 0 || p >= static_cast<int64_t>(rank)) return unknown(partial);
      dims.push_back(x.dims[static_cast<size_t>(p)]);
    }
    return TensorFact::of_rank(x.elem_type, std::move(dims));
  }
  if (op == "Squeeze") {
    auto p = squeeze_axes(n);
    if (!p) may_know_more(n, partial);
    if (!x.has_rank || !p) return with_type(TensorFact{}, x.elem_type);
    std::vector<Dim> dims;
    if (p->all) {
      for (const Dim& d : x.dims) {
        if (!d.known()) return with_type(unknown(partial), x.elem_type);
        if (d.value != 1) dims.push_back(d);
      }
    } else {
      auto axes = normalize_axes(p->axes, static_cast<int64_t>(x.dims.size()));
      if (!axes) return unknown(partial);
      for (size_t i = 0; i < x.dims.size(); ++i)
        if (std::find(axes->begin(), axes->end(), static_cast<int64_t>(i)) == axes->end())
          dims.push_back(x.dims[i]);
    }
    return TensorFact::of_rank(x.elem_type, std::move(dims));
  }
  if (op == "Unsqueeze") {
    auto axes = unsqueeze_axes(n);
    if (!axes) may_know_more(n, partial);
    if (!x.has_rank || !axes) return with_type(TensorFact{}, x.elem_type);
    const int64_t rank = static_cast<int64_t>(x.dims.size() + axes->size());
    auto norm = normalize_axes(*axes, rank);
    if (!norm) return unknown(partial);
    std::vector<Dim> dims;
    size_t next = 0;
    for (int64_t i = 0; i < rank; ++i) {
      if (std::find(norm->begin(), norm->end(), i) != norm->end())
        dims.push_back(Dim::of(1));
      else
        dims.push_back(x.dims[next++]);
    }
    return TensorFact::of_rank(x.elem_type, std::move(dims));
  }
  if (op == "Concat") {
    TensorFact out{x.elem_type, false, {}};
    int64_t axis = n.attr_int("axis", 0);
    int64_t total = 0;
    bool total_known = true;
    for (size_t i = 0; i < n.inputs().size(); ++i) {
      const TensorFact& f = in_fact(n, i);
      if (!out.elem_type) out.elem_type = f.elem_type;
      if (!f.has_rank) {
        total_known = false;
        continue;
      }
      auto a = normalize_axis(axis, static_cast<int64_t>(f.dims.size()));
      if (!a) return unknown(partial);
      const Dim along = f.dims[static_cast<size_t>(*a)];
      if (!along.known() || __builtin_add_overflow(total, along.value, &total))
        total_known = false;
      TensorFact others = TensorFact::of_rank(out.elem_type, f.dims);
      others.dims[static_cast<size_t>(*a)] = Dim{};
      bool conflict = false;
      out = merge_facts(out, others, &conflict);
      if (conflict) return unknown(partial);
    }
    if (out.has_rank) {
      auto a = normalize_axis(axis, static_cast<int64_t>(out.dims.size()));
      if (a && total_known) out.dims[static_cast<size_t>(*a)] = Dim::of(total);
    }
    return out;
  }
  if (op == "Gather") {
    const TensorFact& idx = in_fact(n, 1);
    if (!x.has_rank || !idx.has_rank) return with_type(TensorFact{}, x.elem_type);
    auto a = normalize_axis(n.attr_int("axis", 0), static_cast<int64_t>(x.dims.size()));
    if (!a) return unknown(partial);
    std::vector<Dim> dims(x.dims.begin(), x.dims.begin() + *a);
    dims.insert(dims.end(), idx.dims.begin(), idx.dims.end());
    dims.insert(dims.end(), x.dims.begin() + *a + 1, x.dims.end());
    return TensorFact::of_rank(x.elem_type, std::move(dims));
  }
  if (op == "Slice") return slice_fact(n, x, partial);
  if (op == "MatMul") return matmul_fact(x, in_fact(n, 1));
  // The quantization ops (what quantize_dynamic_int8 writes): MatMulInteger is MatMul with an
  // int32 result; DynamicQuantizeLinear gives uint8 of X's shape and two scalars; QuantizeLinear
  // has X's shape and its zero point's type (uint8 without one); DequantizeLinear X's shape and
  // its scale's type.
  if (op == "MatMulInteger") return with_type(matmul_fact(x, in_fact(n, 1)), TensorProto::INT32);
  if (op == "DynamicQuantizeLinear") {
    if (output == 0) return with_type(x, TensorProto::UINT8);
    return TensorFact::of_rank(output == 1 ? TensorProto::FLOAT : TensorProto::UINT8, {});
  }
  if (op == "QuantizeLinear" || op == "DequantizeLinear") {
    if (n.attr("output_dtype")) return unknown(partial);  // opset 21's, not read here
    int32_t type = TensorProto::UINT8;
    if (op == "DequantizeLinear")
      type = in_fact(n, 1).elem_type;
    else if (n.inputs().size() > 2 && n.input(2))
      type = in_fact(n, 2).elem_type;
    if (type == 0) *partial = true;
    return with_type(x, type);
  }
  if (op == "Gemm") {
    const TensorFact& b = in_fact(n, 1);
    Dim m, k;
    if (x.has_rank && x.dims.size() == 2) m = x.dims[n.attr_int("transA", 0) ? 1 : 0];
    if (b.has_rank && b.dims.size() == 2) k = b.dims[n.attr_int("transB", 0) ? 0 : 1];
    return TensorFact::of_rank(x.elem_type, {m, k});
  }
  if (op == "Expand") {
    auto shape = constant_ints(n.input(1));
    const TensorFact& s = in_fact(n, 1);
    if (!shape) {
      // A target of known length: x's dims other than 1 survive the broadcast.
      if (x.has_rank && s.has_rank && s.dims.size() == 1 && s.dims[0].known()) {
        const TensorFact target = rank_only(x.elem_type, s.dims[0].value);
        return target.has_rank ? broadcast({&x, &target}, x.elem_type) : target;
      }
      return with_type(TensorFact{}, x.elem_type);
    }
    std::vector<Dim> dims;
    for (int64_t d : *shape) dims.push_back(Dim::of(d));
    TensorFact target = TensorFact::of_rank(x.elem_type, std::move(dims));
    return broadcast({&x, &target}, x.elem_type);
  }
  if (op == "ConstantOfShape") {
    int32_t t = TensorProto::FLOAT;
    if (const onnx::AttributeProto* v = n.attr("value"); v && v->has_t()) t = v->t().data_type();
    auto shape = constant_ints(n.input(0));
    if (!shape) {
      if (x.has_rank && x.dims.size() == 1 && x.dims[0].known())
        return rank_only(t, x.dims[0].value);
      return with_type(TensorFact{}, t);
    }
    std::vector<Dim> dims;
    for (int64_t d : *shape) dims.push_back(Dim::of(d));
    return TensorFact::of_rank(t, std::move(dims));
  }
  if (op == "Range") {
    if (constant_in_memory(n.input(0))) may_know_more(n, partial);  // libonnx computes its length
    return TensorFact::of_rank(x.elem_type, {Dim{}});
  }
  if (op == "NonZero")
    return TensorFact::of_rank(TensorProto::INT64,
                               {x.has_rank ? Dim::of(static_cast<int64_t>(x.dims.size())) : Dim{},
                                Dim{}});
  if (one_of(op, {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
                  "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}))
    return reduce_fact(n, x, x.elem_type, partial);
  if (op == "ArgMax" || op == "ArgMin") return reduce_fact(n, x, TensorProto::INT64, partial);
  if (op == "Tile") {
    auto repeats = constant_ints(n.input(1));
    if (!repeats) may_know_more(n, partial);
    if (!x.has_rank) return with_type(TensorFact{}, x.elem_type);
    if (!repeats || repeats->size() != x.dims.size())
      return rank_only(x.elem_type, static_cast<int64_t>(x.dims.size()));
    std::vector<Dim> dims;
    for (size_t i = 0; i < x.dims.size(); ++i) {
      int64_t r = (*repeats)[i];
      if ((*repeats)[i] == 1)
        dims.push_back(x.dims[i]);
      else
        dims.push_back(x.dims[i].known() ? checked_mul(x.dims[i].value, r) : Dim{});
    }
    return TensorFact::of_rank(x.elem_type, std::move(dims));
  }
  if (op == "Pad") {
    if (!x.has_rank) return with_type(TensorFact{}, x.elem_type);
    const int64_t rank = static_cast<int64_t>(x.dims.size());
    auto p = pad_params(n);
    if (!p) may_know_more(n, partial);
    if (p && p->axes) *partial = true;  // Graft's rule does not place pads by axes
    if (!p || p->axes || static_cast<int64_t>(p->pads.size()) != 2 * rank)
      return rank_only(x.elem_type, rank);
    std::vector<Dim> dims;
    for (int64_t i = 0; i < rank; ++i) {
      const int64_t before = p->pads[static_cast<size_t>(i)];
      const int64_t after = p->pads[static_cast<size_t>(i + rank)];
      const Dim& d = x.dims[static_cast<size_t>(i)];
      int64_t add = 0;
      if (__builtin_add_overflow(before, after, &add)) {
        dims.push_back(Dim{});
        continue;
      }
      dims.push_back(add == 0 ? d : (d.known() ? checked_add(d.value, add) : Dim{}));
    }
    return TensorFact::of_rank(x.elem_type, std::move(dims));
  }
  if (op == "Split") {
    auto p = split_params(n);
    if (!p) may_know_more(n, partial);
    if (!x.has_rank) return with_type(TensorFact{}, x.elem_type);
    TensorFact out = x;
    auto a = normalize_axis(p ? p->axis : 0, static_cast<int64_t>(x.dims.size()));
    if (!a) return unknown(partial);
    Dim& d = out.dims[static_cast<size_t>(*a)];
    if (p && p->sizes && output < p->sizes->size())
      d = Dim::of((*p->sizes)[output]);
    else if (p && !p->sizes && d.known() && p->parts > 0 && d.value % p->parts == 0)
      d = Dim::of(d.value / p->parts);
    else
      d = Dim{};
    return out;
  }
  // ConvInteger is Conv on integers with an int32 result.
  const bool conv = op == "Conv" || op == "ConvInteger";
  if (conv || op == "ConvTranspose" || is_pool(op)) {
    if (output > 0 && !(op == "MaxPool" && output == 1)) return unknown(partial);
    // MaxPool's Indices are int64.
    const int32_t type = output == 1            ? TensorProto::INT64
                         : op == "ConvInteger" ? TensorProto::INT32
                                               : x.elem_type;
    if (!x.has_rank || x.dims.size() < 2) return with_type(TensorFact{}, type);
    TensorFact out = rank_only(type, static_cast<int64_t>(x.dims.size()));
    if (!out.has_rank) return out;
    out.dims[0] = x.dims[0];
    const TensorFact& w = in_fact(n, 1);
    if (conv && w.has_rank && !w.dims.empty())
      out.dims[1] = w.dims[0];
    else if (op == "ConvTranspose" && w.has_rank && w.dims.size() > 1 && w.dims[1].known())
      out.dims[1] = checked_mul(w.dims[1].value, n.attr_int("group", 1));
    else if (!conv && op != "ConvTranspose")
      out.dims[1] = x.dims[1];
    if (op.rfind("Global", 0) == 0) {
      for (size_t i = 2; i < out.dims.size(); ++i) out.dims[i] = Dim::of(1);
      return out;
    }
    // Spatial dims of Conv and the pools without ceil_mode (ConvTranspose's and the rest are
    // left to libonnx, which only knows them from known input dims).
    bool any_known = false;
    for (size_t i = 2; i < x.dims.size(); ++i) any_known = any_known || x.dims[i].known();
    if (!any_known) return out;
    const size_t spatial = x.dims.size() - 2;
    std::optional<std::vector<int64_t>> kernel = n.attr_ints("kernel_shape");
    if (!kernel && conv && w.has_rank && w.dims.size() == x.dims.size()) {
      kernel.emplace();
      for (size_t i = 2; i < w.dims.size(); ++i) kernel->push_back(w.dims[i].value);
    }
    auto ints = [&](const char* name, int64_t def, size_t count) {
      auto v = n.attr_ints(name);
      return v ? *v : std::vector<int64_t>(count, def);
    };
    const std::vector<int64_t> strides = ints("strides", 1, spatial);
    const std::vector<int64_t> dilations = ints("dilations", 1, spatial);
    const std::vector<int64_t> pads = ints("pads", 0, 2 * spatial);
    const bool dilated = conv || op == "MaxPool";  // the others' arrived after opset 17
    if (op == "ConvTranspose" || n.attr_int("ceil_mode", 0) != 0 || !kernel ||
        kernel->size() != spatial || strides.size() != spatial || dilations.size() != spatial ||
        pads.size() != 2 * spatial || (!dilated && n.attr("dilations"))) {
      *partial = true;
      return out;
    }
    const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
    for (size_t i = 0; i < spatial; ++i) {
      const Dim& in = x.dims[i + 2];
      if (!in.known()) continue;
      auto extent = window_extent(in.value, (*kernel)[i], strides[i], dilations[i], pads[i],
                                  pads[i + spatial], auto_pad, false);
      if (extent)
        out.dims[i + 2] = Dim::of(*extent);
      else
        *partial = true;
    }
    return out;
  }
  if (op == "Resize" || op == "Upsample") {
    if (!x.has_rank) return with_type(TensorFact{}, x.elem_type);
    const int64_t rank = static_cast<int64_t>(x.dims.size());
    auto p = resize_params(n);
    if (!p) may_know_more(n, partial);
    // Resize-18's axes and aspect-ratio policy, and crops, are not modelled.
    if (!p || n.attr("axes") || n.attr("keep_aspect_ratio_policy") ||
        n.attr_string("coordinate_transformation_mode", "") == "tf_crop_and_resize") {
      if (p) *partial = true;
      return rank_only(x.elem_type, rank);
    }
    std::vector<Dim> dims;
    if (p->sizes) {
      if (static_cast<int64_t>(p->sizes->size()) != rank) return unknown(partial);
      for (int64_t d : *p->sizes) dims.push_back(d >= 0 ? Dim::of(d) : Dim{});
    } else {
      if (static_cast<int64_t>(p->scales->size()) != rank) return unknown(partial);
      for (int64_t i = 0; i < rank; ++i) {
        const Dim& in = x.dims[static_cast<size_t>(i)];
        const double scale = (*p->scales)[static_cast<size_t>(i)];
        if (scale == 1.0) {
          dims.push_back(in);
          continue;
        }
        if (!in.known() || !(scale > 0) || !(scale < 1e9)) {
          if (in.known()) *partial = true;
          dims.push_back(Dim{});
          continue;
        }
        // floor(in * scale); runtimes compute it in float or double: where those disagree (a
        // product at an integer boundary), the dim is left unknown.
        const double wide = std::floor(static_cast<double>(in.value) * scale);
        const double narrow = std::floor(static_cast<float>(in.value) * static_cast<float>(scale));
        if (wide != narrow || wide > 4e18) {
          *partial = true;
          dims.push_back(Dim{});
        } else {
          dims.push_back(Dim::of(static_cast<int64_t>(wide)));
        }
      }
    }
    return TensorFact::of_rank(x.elem_type, std::move(dims));
  }
  if (op == "RNN" || op == "GRU" || op == "LSTM") {
    // X is [seq, batch, input] ([batch, seq, input] with layout 1); Y is [seq, directions, batch,
    // hidden] ([batch, seq, directions, hidden]), Y_h and Y_c [directions, batch, hidden]
    // ([batch, directions, hidden]).
    const int64_t hidden = n.attr_int("hidden_size", 0);
    const int64_t layout = n.opset() >= 14 ? n.attr_int("layout", 0) : 0;
    if (hidden <= 0 || (layout != 0 && layout != 1) || output > (op == "LSTM" ? 2u : 1u))
      return unknown(partial);
    const Dim dirs = Dim::of(n.attr_string("direction", "forward") == "bidirectional" ? 2 : 1);
    Dim seq, batch;
    if (x.has_rank && x.dims.size() == 3) {
      seq = x.dims[layout == 0 ? 0 : 1];
      batch = x.dims[layout == 0 ? 1 : 0];
    }
    std::vector<Dim> dims;
    if (output == 0)
      dims = layout == 0 ? std::vector<Dim>{seq, dirs, batch, Dim::of(hidden)}
                         : std::vector<Dim>{batch, seq, dirs, Dim::of(hidden)};
    else
      dims = layout == 0 ? std::vector<Dim>{dirs, batch, Dim::of(hidden)}
                         : std::vector<Dim>{batch, dirs, Dim::of(hidden)};
    return TensorFact::of_rank(x.elem_type, std::move(dims));
  }
  if (op == "If") {
    // Both branches' outputs describe it; where they differ, less is known.
    TensorFact out;
    bool first = true;
    for (const auto& sub : n.subgraphs()) {
      const auto& outs = sub.graph->outputs();
      if (output >= outs.size()) return unknown(partial);
      const TensorFact& f = cached(outs[output].value);
      if (first) {
        out = f;
        first = false;
        continue;
      }
      TensorFact meet;
      meet.elem_type = out.elem_type == f.elem_type ? f.elem_type : 0;
      if (out.has_rank && f.has_rank && out.dims.size() == f.dims.size()) {
        meet.has_rank = true;
        for (size_t i = 0; i < f.dims.size(); ++i)
          meet.dims.push_back(out.dims[i] == f.dims[i] ? f.dims[i] : Dim{});
      }
      out = meet;
    }
    return out;
  }
  if (op == "Loop" || op == "Scan") {
    // Only element types: carried values may change shape between iterations.
    *partial = true;
    for (const auto& sub : n.subgraphs()) {
      const auto& outs = sub.graph->outputs();
      const size_t skip = op == "Loop" ? 1 : 0;  // Loop's body also outputs its condition
      if (output + skip < outs.size())
        return with_type(TensorFact{}, cached(outs[output + skip].value).elem_type);
    }
    return unknown(partial);
  }
  return unknown(partial);
}

}  // namespace graft::ir
