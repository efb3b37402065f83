// Transposes pushed down through the ops they feed until they meet another Transpose (and cancel
// or merge) or a constant (which takes the transpose into its data), in the spirit of ONNX
// Runtime's TransposeOptimizer. Exporters from NHWC frameworks (TensorFlow, TFLite, Keras) wrap
// every layout-sensitive op in NHWC->NCHW / NCHW->NHWC pairs, with elementwise ops, reductions,
// Concat, Pad and Slice between them; moving each Transpose down lets the pairs cancel.
//
// One rule, rooted at a Transpose T = Transpose(x, p): starting from T's result, it follows the
// readers of every value that would carry a transpose. A reader joins the moved region when the
// op is one below (opset and attributes understood), all its other data operands are constants,
// scalars, values of the region carrying the same permutation, Transposes by that same
// permutation (absorbed; one that other nodes read stays for them), or values that movable ops
// compute from such Transposes, which join the region with their producers (so the branches
// of residual blocks that each end in Transpose(p) move down together: Add(Transpose(a),
// Mul(Transpose(b), c)) becomes Transpose(Add(a, Mul(b, c'))) along the whole stream, until it
// meets the Transpose back). Each op of the region is rebuilt on untransposed operands with its
// axes remapped, and a value leaving the region gets Transpose(new value, q) back: for a reader
// outside the region, a graph output, or a reader in another graph. A Transpose reading a
// region value merges with it (the identity vanishes). The rewrite is made only when it strictly
// lowers the number of Transposes in the graph, or keeps it and transposes fewer elements (all
// sizes known).
//
// Ops moved (q: the permutation the value carries, axes remapped a -> q[a]):
//  - unary elementwise ops (Relu, Sigmoid, Tanh, Neg, Abs, Exp, Log, Sqrt, Erf, Cast, Clip with
//    constant bounds, LeakyRelu, HardSigmoid, Softplus, ...) and Identity;
//  - broadcasting binary and variadic ops (Add, Sub, Mul, Div, Pow, Max, Min, Sum, Mean, Where,
//    comparisons, logical ops, PRelu, Mod, BitShift): a constant operand is unsqueezed to the
//    full rank and transposed by q's inverse (a new constant, made only when the old one has no
//    other reader or is at most kSmallConstantBytes; one element needs no change);
//  - Reduce* (axes attribute, or input from 13/18), ArgMax/ArgMin, Softmax/LogSoftmax/Hardmax
//    from opset 13 (before, they flatten at `axis` and are not per-axis ops), Concat, Split, Pad
//    (without an axes input), Slice (constant parameters), Squeeze (explicit axes), Unsqueeze.
//    keepdims = 0, Squeeze and Unsqueeze change the permutation the result carries.
//
// Exactness: Transpose only moves elements, and each moved op computes the same values on them
// (elementwise ops element by element; Concat, Split, Pad, Slice, Squeeze, Unsqueeze move
// elements; ArgMax/ArgMin, Softmax-13 and single-axis reductions work along one axis whose order
// is kept). The one accepted difference: a ReduceSum/Mean/Prod/L1/L2/LogSum/LogSumExp/SumSquare
// over several axes visits the same elements in another memory order, so a float sum may round
// differently (reassociation, as ONNX Runtime's transpose optimizer accepts).
//
// A second rule, transpose_tied_constant, stores a weight that is read both transposed and by
// row Gathers (a language model's tied embedding) transposed instead (see the rule).
//
// A third rule, channel_shuffle, turns ShuffleNet's Reshape-Transpose-Reshape channel shuffle
// into a Gather along the channel axis (see the rule).
//
// Ranks come from the facts of x and of absorbed Transposes' inputs;
// permutations are checked (ir::transpose_perm); axes are normalized against the known rank.
// Transpose pairs directly in a row are simplify_arithmetic's transpose_chain, a Transpose by
// the identity eliminate_noop's and a Transpose of a constant fold_constants'.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <absl/strings/str_cat.h>

#include "core/eval/tensor.h"
#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/rules.h"

namespace graft {

namespace {

using Perm = std::vector<int64_t>;

// The moved region is bounded so a rule stays cheap on huge fan-outs.
constexpr size_t kMaxRegionNodes = 64;
constexpr size_t kMaxVisitedUses = 512;

enum class Kind {
  kUnary,      // slot 0 moves; other inputs (Clip's bounds) are scalars
  kBroadcast,  // every input is a broadcast operand
  kReduce,
  kArgReduce,
  kConcat,
  kSplit,
  kPad,
  kSlice,
  kSqueeze,
  kUnsqueeze,
  kAxisOp,  // Softmax, LogSoftmax, Hardmax from 13
  // Layout-sensitive ops, moved only by convert_layout (PipelineConfig::layout_sensitive_ops):
  kResize,      // Resize from 11: constant scales or sizes remapped
  kGlobalPool,  // GlobalAveragePool/GlobalMaxPool: ReduceMean/ReduceMax over the moved axes
};

struct OpInfo {
  Kind kind;
  int64_t min_opset;
  std::vector<std::string_view> attributes;  // every attribute the rule understands
};

const OpInfo* op_info(const ir::Node& n, bool layout_sensitive) {
  static const std::unordered_map<std::string_view, OpInfo> kOps = [] {
    std::unordered_map<std::string_view, OpInfo> ops;
    for (std::string_view op :
         {"Relu",       "Sigmoid", "Tanh",  "Neg",      "Abs",       "Exp",      "Log",     "Sqrt",
          "Reciprocal", "Floor",   "Ceil",  "Round",    "Sign",      "Erf",      "Not",     "Sin",
          "Cos",        "Tan",     "Asin",  "Acos",     "Atan",      "Sinh",     "Cosh",    "Asinh",
          "Acosh",      "Atanh",   "IsNaN", "Softsign", "HardSwish", "Softplus", "Identity"})
      ops.emplace(op, OpInfo{Kind::kUnary, 6, {}});
    for (std::string_view op : {"LeakyRelu", "Elu", "Celu", "ThresholdedRelu"})
      ops.emplace(op, OpInfo{Kind::kUnary, 6, {"alpha"}});
    ops.emplace("Selu", OpInfo{Kind::kUnary, 6, {"alpha", "gamma"}});
    ops.emplace("HardSigmoid", OpInfo{Kind::kUnary, 6, {"alpha", "beta"}});
    ops.emplace("Shrink", OpInfo{Kind::kUnary, 9, {"bias", "lambd"}});
    ops.emplace("IsInf", OpInfo{Kind::kUnary, 10, {"detect_negative", "detect_positive"}});
    ops.emplace("Cast", OpInfo{Kind::kUnary, 6, {"to", "saturate"}});
    ops.emplace("Clip", OpInfo{Kind::kUnary, 6, {"min", "max"}});  // no attributes from 11
    // Numpy broadcasting from opset 7 (Max/Min/Sum/Mean from 8).
    for (std::string_view op : {"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater",
                                "And", "Or", "Xor", "PRelu"})
      ops.emplace(op, OpInfo{Kind::kBroadcast, 7, {}});
    for (std::string_view op : {"LessOrEqual", "GreaterOrEqual"})
      ops.emplace(op, OpInfo{Kind::kBroadcast, 12, {}});
    for (std::string_view op : {"Max", "Min", "Sum", "Mean"})
      ops.emplace(op, OpInfo{Kind::kBroadcast, 8, {}});
    ops.emplace("Where", OpInfo{Kind::kBroadcast, 9, {}});
    ops.emplace("Mod", OpInfo{Kind::kBroadcast, 10, {"fmod"}});
    ops.emplace("BitShift", OpInfo{Kind::kBroadcast, 11, {"direction"}});
    for (std::string_view op :
         {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"})
      ops.emplace(op, OpInfo{Kind::kReduce, 1, {"axes", "keepdims", "noop_with_empty_axes"}});
    for (std::string_view op : {"ArgMax", "ArgMin"})
      ops.emplace(op, OpInfo{Kind::kArgReduce, 1, {"axis", "keepdims", "select_last_index"}});
    ops.emplace("Concat", OpInfo{Kind::kConcat, 4, {"axis"}});
    ops.emplace("Split", OpInfo{Kind::kSplit, 2, {"axis", "split", "num_outputs"}});
    ops.emplace("Pad", OpInfo{Kind::kPad, 2, {"mode", "pads", "value"}});
    ops.emplace("Slice", OpInfo{Kind::kSlice, 1, {"starts", "ends", "axes"}});
    ops.emplace("Squeeze", OpInfo{Kind::kSqueeze, 1, {"axes"}});
    ops.emplace("Unsqueeze", OpInfo{Kind::kUnsqueeze, 1, {"axes"}});
    for (std::string_view op : {"Softmax", "LogSoftmax", "Hardmax"})
      ops.emplace(op, OpInfo{Kind::kAxisOp, 13, {"axis"}});
    return ops;
  }();
  static const std::unordered_map<std::string_view, OpInfo> kLayoutSensitive = {
      {"Resize",
       {Kind::kResize,
        11,
        {"coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
         "extrapolation_value", "mode", "nearest_mode", "antialias", "keep_aspect_ratio_policy"}}},
      {"GlobalAveragePool", {Kind::kGlobalPool, 1, {}}},
      {"GlobalMaxPool", {Kind::kGlobalPool, 1, {}}}};
  if (!n.is_onnx_domain()) return nullptr;
  const OpInfo* info = nullptr;
  if (auto it = kOps.find(n.op_type()); it != kOps.end()) {
    info = &it->second;
  } else if (auto ls = kLayoutSensitive.find(n.op_type());
             layout_sensitive && ls != kLayoutSensitive.end()) {
    info = &ls->second;
  }
  if (!info || n.opset() < info->min_opset) return nullptr;
  for (const auto& a : n.attributes())
    if (std::find(info->attributes.begin(), info->attributes.end(), a.name()) ==
        info->attributes.end())
      return nullptr;
  return info;
}

bool is_identity(const Perm& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

Perm inverse(const Perm& p) {
  Perm inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  return inv;
}

// The permutation a value carries after the axes `removed` (of the transposed value, sorted and
// in range) are dropped from one that carries q: the remaining x axes keep their order.
Perm drop_axes(const Perm& q, const std::vector<int64_t>& removed) {
  const size_t r = q.size();
  std::vector<bool> gone(r, false);
  for (int64_t a : removed) gone[static_cast<size_t>(q[static_cast<size_t>(a)])] = true;
  std::vector<int64_t> index(r, 0);
  int64_t k = 0;
  for (size_t j = 0; j < r; ++j)
    if (!gone[j]) index[j] = k++;
  Perm out;
  for (size_t i = 0; i < r; ++i)
    if (!std::binary_search(removed.begin(), removed.end(), static_cast<int64_t>(i)))
      out.push_back(index[static_cast<size_t>(q[i])]);
  return out;
}

// The permutation of Unsqueeze(v, axes) when v carries q: the new 1-dims stay where they are,
// the i-th free position takes the q[i]-th free position's dim.
Perm insert_axes(const Perm& q, const std::vector<int64_t>& axes) {
  const size_t out_rank = q.size() + axes.size();
  std::vector<int64_t> free;
  Perm out(out_rank, 0);
  for (size_t k = 0; k < out_rank; ++k) {
    if (std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(k)))
      out[k] = static_cast<int64_t>(k);
    else
      free.push_back(static_cast<int64_t>(k));
  }
  for (size_t i = 0; i < q.size(); ++i)
    out[static_cast<size_t>(free[i])] = free[static_cast<size_t>(q[i])];
  return out;
}

// Axes normalized for `rank` and mapped through q (sorted), or nullopt if out of range/repeated.
std::optional<std::vector<int64_t>> map_axes(const std::vector<int64_t>& axes, const Perm& q) {
  auto normal = ir::normalize_axes(axes, static_cast<int64_t>(q.size()));
  if (!normal) return std::nullopt;
  std::vector<int64_t> mapped;
  for (int64_t a : *normal) mapped.push_back(q[static_cast<size_t>(a)]);
  std::sort(mapped.begin(), mapped.end());
  return mapped;
}

// Edits the rebuilt node's parameters (axes, pads...) for the new layout.
using Edit = std::function<void(ir::Node& rebuilt, Rewriter& rw)>;

struct Moved {
  ir::Node* node;
  std::string op_type;          // of the rebuilt node: the old one's when empty
  std::vector<Perm> out_perms;  // per output
  Edit edit;
};

// The plan of one rewrite: what moves and what it costs.
class Plan {
 public:
  Plan(ir::Node& root, Perm p, bool layout_sensitive)
      : root_(root), g_(*root.graph()), layout_sensitive_(layout_sensitive) {
    s_.perm_of.emplace(root.output(0), std::move(p));
    s_.values.push_back(root.output(0));
  }

  bool build();
  bool worth_it() const;
  // Computes the transposed constants; false (nothing changed) if one cannot be read.
  bool prepare();
  bool apply(Rewriter& rw);

 private:
  using Slot = std::pair<const ir::Node*, size_t>;
  // What a node's operands need once it is in the region.
  struct Operands {
    std::vector<std::pair<Slot, std::vector<int64_t>>> constants;  // slot, dims to read it as
    std::vector<std::pair<Slot, ir::Node*>> absorbed;
  };
  bool plan_node(ir::Node& n, const Perm& q);
  // Plans the producer of `v`, a data operand of a node joining the region that is not yet a
  // region value, so that `v` carries q too: a movable op whose own data operands are region
  // values, same-permutation Transposes (at least one of these), constants, scalars, or such
  // producers in turn. Another Transpose's way down then joins this one's (the residual stream
  // of a block whose branch ends in a Transpose). False, with nothing planned, if it cannot.
  bool plan_upstream(ir::Value* v, const Perm& q);
  // Checks a data operand of `n` at `slot` that is not a region value.
  bool plan_operand(ir::Node& n, size_t slot, const Perm& q, bool broadcast, Operands* ops);
  std::optional<Edit> plan_params(ir::Node& n, Kind kind, const Perm& q,
                                  std::vector<Perm>* out_perms);
  bool in_region(const ir::Node* n) const { return s_.region.count(n) > 0; }
  // A region value read outside the region (or a graph output) gets a Transpose back.
  bool needs_transpose(const ir::Value* v) const;

  ir::Node& root_;
  ir::Graph& g_;
  const bool layout_sensitive_;  // kResize and kGlobalPool move too
  struct NewConstant {
    std::vector<int64_t> dims;  // the constant's dims with leading 1s up to the rank
    Perm perm;                  // inverse of the permutation its reader's operand carries
    onnx::TensorProto tensor;   // computed by prepare()
  };
  // Everything planned so far: copied before a tentative step (plan_upstream) and restored when
  // the node that needed it is refused after all.
  struct State {
    std::unordered_map<const ir::Value*, Perm> perm_of;  // region values (old)
    std::vector<const ir::Value*> values;                // in order of discovery
    std::vector<Moved> moved;                            // in topological order
    std::unordered_set<const ir::Node*> region;
    std::unordered_set<const ir::Node*> decided;  // readers in the region or merged
    std::vector<ir::Node*> merged;                // Transposes reading a region value
    std::vector<Perm> merged_perms;               // theirs composed with the value's
    std::map<Slot, NewConstant> new_constants;
    std::map<Slot, ir::Node*> absorbed;     // operand Transposes
    std::vector<ir::Node*> absorbed_nodes;  // each once, in order (edits stay deterministic)
  };
  State s_;
  // Puts back the plan saved in `saved`, if any, when it goes out of scope.
  struct Restore {
    State& state;
    std::optional<State>& saved;
    ~Restore() {
      if (saved) state = std::move(*saved);
    }
  };
};

bool Plan::build() {
  size_t visited = 0;
  for (size_t i = 0; i < s_.values.size(); ++i) {
    const ir::Value* v = s_.values[i];
    const Perm q = s_.perm_of.at(v);
    if (is_identity(q)) continue;  // its readers read the new value as it is
    const std::vector<ir::Use> uses = v->uses();
    for (const ir::Use& u : uses) {
      if (++visited > kMaxVisitedUses) return false;
      ir::Node* r = u.node;
      if (s_.decided.count(r) || r->graph() != &g_) continue;
      if (r->is("Transpose")) {
        s_.decided.insert(r);
        auto p2 = ir::transpose_perm(*r, static_cast<int64_t>(q.size()));
        if (!p2 || p2->size() != q.size() || r->outputs().size() != 1 || !r->output(0)) continue;
        Perm combined(q.size());
        for (size_t j = 0; j < q.size(); ++j) combined[j] = q[static_cast<size_t>((*p2)[j])];
        s_.merged.push_back(r);
        s_.merged_perms.push_back(std::move(combined));
        continue;
      }
      // A node refused now may join later, from another operand found in the region since
      // (a join: Where(m, f(t), t) is reached from t before f(t) is planned).
      if (s_.region.size() >= kMaxRegionNodes || !plan_node(*r, q)) continue;
      s_.decided.insert(r);
      s_.region.insert(r);
      const Moved& m = s_.moved.back();
      for (size_t k = 0; k < r->outputs().size(); ++k) {
        ir::Value* out = r->output(k);
        if (!out) continue;
        s_.perm_of.emplace(out, m.out_perms[k]);
        s_.values.push_back(out);
      }
    }
  }
  return !s_.moved.empty() || !s_.merged.empty();
}

bool Plan::plan_node(ir::Node& n, const Perm& q) {
  const OpInfo* info = op_info(n, layout_sensitive_);
  if (!info || n.outputs().empty()) return false;
  const size_t r = q.size();
  // Data operands: which inputs move with the transpose.
  std::vector<size_t> data;
  switch (info->kind) {
    case Kind::kBroadcast:
    case Kind::kConcat:
      for (size_t s = 0; s < n.inputs().size(); ++s) data.push_back(s);
      break;
    default:
      data.push_back(0);
  }
  Operands operands;
  // The plan before the first operand planned upstream, restored if `n` is refused after all.
  std::optional<State> saved;
  Restore restore{s_, saved};
  for (size_t s = 0; s < n.inputs().size(); ++s) {
    ir::Value* in = n.input(s);
    const bool is_data = std::find(data.begin(), data.end(), s) != data.end();
    if (!is_data) {
      // Parameters must not come from the region (they are read as they are).
      if (in && s_.perm_of.count(in)) return false;
      continue;
    }
    if (!in) return false;
    if (auto it = s_.perm_of.find(in); it != s_.perm_of.end()) {
      if (it->second != q) return false;
      continue;
    }
    if (plan_operand(n, s, q, info->kind == Kind::kBroadcast, &operands)) continue;
    if (!saved) saved = s_;
    if (!plan_upstream(in, q)) return false;
  }
  if (r == 0) return false;
  std::vector<Perm> out_perms;
  auto edit = plan_params(n, info->kind, q, &out_perms);
  if (!edit || out_perms.size() != n.outputs().size()) return false;
  std::string op_type;
  if (info->kind == Kind::kGlobalPool)
    op_type = n.op_type() == "GlobalAveragePool" ? "ReduceMean" : "ReduceMax";
  s_.moved.push_back(Moved{&n, std::move(op_type), std::move(out_perms), std::move(*edit)});
  for (auto& [slot, dims] : operands.constants)
    s_.new_constants.emplace(slot, NewConstant{std::move(dims), inverse(q), {}});
  for (auto& [slot, t] : operands.absorbed) {
    s_.absorbed.emplace(slot, t);
    if (std::find(s_.absorbed_nodes.begin(), s_.absorbed_nodes.end(), t) == s_.absorbed_nodes.end())
      s_.absorbed_nodes.push_back(t);
  }
  saved.reset();
  return true;
}

bool Plan::plan_upstream(ir::Value* v, const Perm& q) {
  ir::Node* p = v->producer();
  if (!p || p->dead() || p->graph() != &g_ || p == &root_ || s_.decided.count(p) ||
      s_.region.size() >= kMaxRegionNodes)
    return false;
  // The root reads its input as it is: a producer of it cannot take a transpose.
  for (ir::Value* out : p->outputs())
    if (out && out == root_.input(0)) return false;
  if (!plan_node(*p, q)) return false;
  const Moved& m = s_.moved.back();
  // Anchored: something it reads carries q (else it would only move constants around).
  bool anchored = false;
  for (size_t s = 0; s < p->inputs().size(); ++s) {
    const ir::Value* in = p->input(s);
    anchored = anchored || (in && s_.perm_of.count(in)) || s_.absorbed.count(Slot(p, s));
  }
  bool carries_q = false;
  for (size_t k = 0; k < p->outputs().size(); ++k)
    if (p->output(k) == v) carries_q = m.out_perms[k] == q;
  if (!anchored || !carries_q) return false;  // plan_node's caller restores the plan
  s_.decided.insert(p);
  s_.region.insert(p);
  for (size_t k = 0; k < p->outputs().size(); ++k) {
    ir::Value* out = p->output(k);
    if (!out) continue;
    s_.perm_of.emplace(out, m.out_perms[k]);
    s_.values.push_back(out);
  }
  return true;
}

bool Plan::plan_operand(ir::Node& n, size_t slot, const Perm& q, bool broadcast, Operands* ops) {
  ir::Value* in = n.input(slot);
  const int64_t r = static_cast<int64_t>(q.size());
  // A Transpose by the same permutation: its input is read directly.
  if (ir::Node* t = producer(in, "Transpose");
      t && t->graph() == &g_ && !s_.perm_of.count(t->input(0))) {
    ir::Value* x = t->input(0);
    auto p = ir::transpose_perm(*t, r);
    if (p && *p == q && x->rank() == r) {
      ops->absorbed.emplace_back(Slot(&n, slot), t);
      return true;
    }
  }
  if (const onnx::TensorProto* c = constant_header(in)) {
    const int64_t k = c->dims_size();
    if (k > r || (!broadcast && k != r)) return false;
    std::vector<int64_t> dims(static_cast<size_t>(r - k), 1);
    dims.insert(dims.end(), c->dims().begin(), c->dims().end());
    int64_t count = 1;
    for (int64_t d : dims)
      if (d < 0 || __builtin_mul_overflow(count, d, &count)) return false;
    // One element (or only 1-dims) reads the same in any layout.
    if (std::count(dims.begin(), dims.end(), 1) == r) return true;
    // A new constant as large as the old one: only where the old one goes away, or is small.
    // An external constant is sized by its header here and read only by prepare().
    const std::optional<uint64_t> payload = ir::payload_bytes(*c);
    if (!payload || (ir::is_external(*c) && !ir::external_data_of(in))) return false;
    const uint64_t bytes = *payload;
    if (bytes > kMaxConstantBytes || (!single_use(in) && bytes > kSmallConstantBytes)) return false;
    ops->constants.emplace_back(Slot(&n, slot), std::move(dims));
    return true;
  }
  // A scalar broadcasts the same way in any layout.
  if (!broadcast || in->rank() != 0) return false;
  return true;
}

// The parameter edits and output permutations of `n` moved under a value carrying q.
std::optional<Edit> Plan::plan_params(ir::Node& n, Kind kind, const Perm& q,
                                      std::vector<Perm>* out_perms) {
  const int64_t r = static_cast<int64_t>(q.size());
  const int64_t opset = n.opset();
  auto same = [&] { out_perms->assign(n.outputs().size(), q); };
  auto ints_input = [](size_t slot, std::vector<int64_t> values, std::string hint) -> Edit {
    return [slot, values = std::move(values), hint = std::move(hint)](ir::Node& m, Rewriter& rw) {
      std::vector<ir::Value*> inputs(m.inputs().begin(), m.inputs().end());
      if (inputs.size() <= slot) inputs.resize(slot + 1, nullptr);
      const int64_t len = static_cast<int64_t>(values.size());
      inputs[slot] = rw.add_constant(*m.graph(), ir::make_int64_tensor({len}, values),
                                     m.output(0)->name() + hint);
      rw.set_inputs(&m, inputs);
    };
  };
  auto ints_attribute = [](std::string name, std::vector<int64_t> values) -> Edit {
    return [name = std::move(name), values = std::move(values)](ir::Node& m, Rewriter& rw) {
      rw.set_attr(&m, ints_attr(name, values));
    };
  };
  auto int_attribute = [](std::string name, int64_t value) -> Edit {
    return [name = std::move(name), value](ir::Node& m, Rewriter& rw) {
      rw.set_attr(&m, int_attr(name, value));
    };
  };
  const Edit nothing = [](ir::Node&, Rewriter&) {};
  switch (kind) {
    case Kind::kUnary:
      if (n.is("Clip")) {
        if (opset >= 11 && !n.attributes().empty()) return std::nullopt;
        if (!ir::clip_params(n)) return std::nullopt;
      }
      if (n.outputs().size() != 1) return std::nullopt;
      same();
      return nothing;
    case Kind::kBroadcast:
      if (n.outputs().size() != 1) return std::nullopt;
      same();
      return nothing;
    case Kind::kAxisOp:
    case Kind::kConcat:
    case Kind::kSplit: {
      if (kind == Kind::kConcat && !n.attr("axis")) return std::nullopt;
      int64_t axis = n.attr_int("axis", kind == Kind::kAxisOp ? -1 : 0);
      if (kind == Kind::kSplit) {
        auto p = ir::split_params(n);
        if (!p) return std::nullopt;
        axis = p->axis;
      } else if (n.outputs().size() != 1) {
        return std::nullopt;
      }
      auto a = ir::normalize_axis(axis, r);
      if (!a) return std::nullopt;
      same();
      return int_attribute("axis", q[static_cast<size_t>(*a)]);
    }
    case Kind::kArgReduce: {
      if (n.outputs().size() != 1) return std::nullopt;
      auto a = ir::normalize_axis(n.attr_int("axis", 0), r);
      if (!a) return std::nullopt;
      if (n.attr_int("keepdims", 1) != 0)
        same();
      else
        out_perms->push_back(drop_axes(q, {*a}));
      return int_attribute("axis", q[static_cast<size_t>(*a)]);
    }
    case Kind::kReduce: {
      auto p = ir::reduce_params(n);
      const bool axes_input = opset >= (n.is("ReduceSum") ? 13 : 18);
      if (!p || n.outputs().size() != 1 || n.inputs().size() > (axes_input ? 2u : 1u))
        return std::nullopt;
      if (!axes_input && n.attr("noop_with_empty_axes")) return std::nullopt;
      if (!p->axes) {
        // Every axis (or none, as an identity): nothing to remap.
        if (p->keepdims || p->noop_with_empty_axes)
          same();
        else
          out_perms->push_back({});
        return nothing;
      }
      auto normal = ir::normalize_axes(*p->axes, r);
      auto mapped = map_axes(*p->axes, q);
      if (!normal || !mapped) return std::nullopt;
      std::sort(normal->begin(), normal->end());
      if (p->keepdims)
        same();
      else
        out_perms->push_back(drop_axes(q, *normal));
      return axes_input ? ints_input(1, *mapped, "_axes") : ints_attribute("axes", *mapped);
    }
    case Kind::kPad: {
      auto p = ir::pad_params(n);
      if (!p || p->axes || n.outputs().size() != 1 || p->pads.size() != static_cast<size_t>(2 * r))
        return std::nullopt;
      std::vector<int64_t> pads(p->pads.size());
      for (size_t i = 0; i < q.size(); ++i) {
        pads[static_cast<size_t>(q[i])] = p->pads[i];
        pads[static_cast<size_t>(q[i]) + q.size()] = p->pads[i + q.size()];
      }
      same();
      return opset >= 11 ? ints_input(1, pads, "_pads") : ints_attribute("pads", pads);
    }
    case Kind::kSlice: {
      auto p = ir::slice_params(n);
      if (!p || n.outputs().size() != 1 || p->axes.size() != p->starts.size()) return std::nullopt;
      std::vector<int64_t> axes;
      for (int64_t a : p->axes) {
        auto normal = ir::normalize_axis(a, r);
        if (!normal) return std::nullopt;
        axes.push_back(q[static_cast<size_t>(*normal)]);
      }
      same();
      return opset >= 10 ? ints_input(3, axes, "_axes") : ints_attribute("axes", axes);
    }
    case Kind::kSqueeze: {
      auto p = ir::squeeze_axes(n);
      if (!p || p->all || p->axes.empty() || n.outputs().size() != 1) return std::nullopt;
      auto normal = ir::normalize_axes(p->axes, r);
      auto mapped = map_axes(p->axes, q);
      if (!normal || !mapped) return std::nullopt;
      std::sort(normal->begin(), normal->end());
      out_perms->push_back(drop_axes(q, *normal));
      return opset >= 13 ? ints_input(1, *mapped, "_axes") : ints_attribute("axes", *mapped);
    }
    case Kind::kResize: {
      // Resize interpolates each axis on its own (nearest, linear, cubic; antialiased too), so
      // it computes the same on the untransposed value with its per-axis parameters moved.
      // tf_crop_and_resize reads roi per axis as well: not taken.
      auto p = ir::resize_params(n);
      if (!p || n.outputs().size() != 1 ||
          n.attr_string("coordinate_transformation_mode", "") == "tf_crop_and_resize")
        return std::nullopt;
      same();
      if (p->sizes) {
        if (p->sizes->size() != q.size()) return std::nullopt;
        std::vector<int64_t> sizes(q.size());
        for (size_t i = 0; i < q.size(); ++i) sizes[static_cast<size_t>(q[i])] = (*p->sizes)[i];
        return ints_input(3, sizes, "_sizes");
      }
      if (p->scales->size() != q.size()) return std::nullopt;
      std::vector<float> scales(q.size());
      for (size_t i = 0; i < q.size(); ++i)
        scales[static_cast<size_t>(q[i])] = static_cast<float>((*p->scales)[i]);
      return [scales](ir::Node& m, Rewriter& rw) {
        const int64_t len = static_cast<int64_t>(scales.size());
        rw.set_input(&m, 2,
                     rw.add_constant(*m.graph(), ir::make_float32_tensor({len}, scales),
                                     m.output(0)->name() + "_scales"));
      };
    }
    case Kind::kGlobalPool: {
      // Rebuilt as ReduceMean/ReduceMax (keepdims) over the axes the spatial ones move to.
      if (n.outputs().size() != 1 || r < 3) return std::nullopt;
      std::vector<int64_t> axes;
      for (int64_t a = 2; a < r; ++a) axes.push_back(q[static_cast<size_t>(a)]);
      std::sort(axes.begin(), axes.end());
      same();
      return opset >= 18 ? ints_input(1, axes, "_axes") : ints_attribute("axes", axes);
    }
    case Kind::kUnsqueeze: {
      auto axes = ir::unsqueeze_axes(n);
      if (!axes || axes->empty() || n.outputs().size() != 1) return std::nullopt;
      auto normal = ir::normalize_axes(*axes, r + static_cast<int64_t>(axes->size()));
      if (!normal) return std::nullopt;
      std::sort(normal->begin(), normal->end());
      out_perms->push_back(insert_axes(q, *normal));
      return nothing;  // the new 1-dims stay at the same positions
    }
  }
  return std::nullopt;
}

bool Plan::needs_transpose(const ir::Value* v) const {
  if (v->is_graph_output()) return true;
  for (const ir::Use& u : v->uses())
    if (!in_region(u.node) &&
        std::find(s_.merged.begin(), s_.merged.end(), u.node) == s_.merged.end())
      return true;
  return false;
}

bool Plan::worth_it() const {
  // Before: the root, the merged Transposes and absorbed ones only the region reads.
  int64_t before = 1 + static_cast<int64_t>(s_.merged.size());
  int64_t after = 0;
  uint64_t before_elems = 0, after_elems = 0;
  bool sizes_known = true;
  auto add = [&](uint64_t* total, const ir::Value* v) {
    const std::optional<int64_t> n = v->fact().element_count();
    if (!n)
      sizes_known = false;
    else
      *total += static_cast<uint64_t>(*n);
  };
  add(&before_elems, root_.output(0));
  for (const ir::Node* t : s_.absorbed_nodes) {
    bool only_region = !t->output(0)->is_graph_output();
    for (const ir::Use& u : t->output(0)->uses()) only_region = only_region && in_region(u.node);
    if (only_region) {
      ++before;
      add(&before_elems, t->output(0));
    }
  }
  for (size_t i = 0; i < s_.merged.size(); ++i) {
    add(&before_elems, s_.merged[i]->output(0));
    if (!is_identity(s_.merged_perms[i])) {
      ++after;
      add(&after_elems, s_.merged[i]->output(0));
    }
  }
  for (const ir::Value* v : s_.values) {
    if (is_identity(s_.perm_of.at(v)) || !needs_transpose(v)) continue;
    ++after;
    add(&after_elems, v);
  }
  if (after != before) return after < before;
  return sizes_known && after_elems < before_elems;
}

bool Plan::prepare() {
  for (auto& [slot, c] : s_.new_constants) {
    auto t = constant_tensor(slot.first->input(slot.second));
    if (!t) return false;
    auto moved = eval::transposed(*t, c.dims, c.perm, kMaxConstantBytes);
    if (!moved.ok()) return false;
    c.tensor = moved->to_proto();
  }
  return true;
}

bool Plan::apply(Rewriter& rw) {
  std::unordered_map<const ir::Value*, ir::Value*> new_of;
  new_of[root_.output(0)] = root_.input(0);
  // One new constant for every reader of the same constant read the same way.
  std::map<std::tuple<const ir::Value*, std::vector<int64_t>, Perm>, ir::Value*> transposed;
  for (Moved& m : s_.moved) {
    ir::Node& old = *m.node;
    std::vector<ir::Value*> inputs;
    for (size_t s = 0; s < old.inputs().size(); ++s) {
      ir::Value* in = old.input(s);
      const auto key = std::make_pair(static_cast<const ir::Node*>(&old), s);
      if (auto it = new_of.find(in); in && it != new_of.end()) {
        inputs.push_back(it->second);
      } else if (auto c = s_.new_constants.find(key); c != s_.new_constants.end()) {
        ir::Value*& made = transposed[{in, c->second.dims, c->second.perm}];
        if (!made)
          made = rw.add_constant(g_, std::move(c->second.tensor), in->name() + "_transposed");
        inputs.push_back(made);
      } else if (auto t = s_.absorbed.find(key); t != s_.absorbed.end()) {
        inputs.push_back(t->second->input(0));
      } else {
        inputs.push_back(in);
      }
    }
    ir::Node* rebuilt = rw.add_node(g_, m.op_type.empty() ? old.op_type() : m.op_type, inputs,
                                    old.outputs().size(), &old);
    for (const auto& a : old.attributes()) rw.set_attr(rebuilt, a);
    m.edit(*rebuilt, rw);
    for (size_t k = 0; k < old.outputs().size(); ++k)
      if (old.output(k)) new_of[old.output(k)] = rebuilt->output(k);
  }
  for (size_t i = 0; i < s_.merged.size(); ++i) {
    ir::Node* t = s_.merged[i];
    ir::Value* v = new_of.at(t->input(0));
    if (is_identity(s_.merged_perms[i]) && rw.replace_node(t, {v}, /*allow_identity=*/false))
      continue;
    rw.set_input(t, 0, v);
    rw.set_attr(t, ints_attr("perm", s_.merged_perms[i]));
  }
  for (const ir::Value* cv : s_.values) {
    if (cv == root_.output(0)) continue;  // the root stays for readers outside the region
    ir::Value* v = const_cast<ir::Value*>(cv);
    if (v->dead() || !needs_transpose(v)) continue;
    const Perm& q = s_.perm_of.at(v);
    ir::Value* nv = new_of.at(v);
    if (is_identity(q)) {
      rw.replace_all_uses(v, nv);
      continue;
    }
    ir::Node* back = rw.add_node(g_, "Transpose", {nv}, 1, v->producer());
    rw.set_attr(back, ints_attr("perm", q));
    rw.replace_all_uses(v, back->output(0));
  }
  for (auto it = s_.moved.rbegin(); it != s_.moved.rend(); ++it) rw.erase(it->node);
  for (ir::Node* t : s_.absorbed_nodes) rw.erase(t);
  rw.erase(&root_);
  return true;
}

// Transpose(x, p) moved down through the ops it feeds (see the top of the file).
bool push_transpose(ir::Node& t, Rewriter& rw, bool layout_sensitive) {
  ir::Value* x = t.input(0);
  if (!x || t.outputs().size() != 1 || !t.output(0) || t.output(0)->uses().empty()) return false;
  std::optional<int64_t> rank = x->rank();
  auto p = ir::transpose_perm(t, rank);
  if (!p || p->empty() || is_identity(*p)) return false;
  if (x->rank() != static_cast<int64_t>(p->size()))
    return no_match(t, "its input's rank is not known to match the permutation");
  Plan plan(t, *p, layout_sensitive);
  if (!plan.build())
    return no_match(t,
                    "no reader it can move through (elementwise, broadcasting with a constant, "
                    "reductions, Concat, Split, Pad, Slice, Squeeze/Unsqueeze, Softmax) or "
                    "Transpose to merge with");
  if (!plan.worth_it())
    return no_match(t, "moving it would not leave fewer Transposes, or as many on fewer elements");
  if (!plan.prepare())
    return no_match(
        t, "a constant it would move through cannot be read or permuted within the size limit");
  return plan.apply(rw);
}

// Largest weight transpose_tied_constant rewrites: it holds the weight decoded, transposed and
// encoded at once for a moment, so a model's largest embedding tables fit but nothing unbounded.
constexpr uint64_t kMaxRelayoutBytes = 512ull << 20;

// transpose_tied_constant: a 2-D constant W [N, K] read by Transpose(W, [1, 0]) and by
// Gather(W, idx, axis 0) nodes only: the tied embedding of a language model, whose token Gather
// reads rows of W and whose output projection MatMul(x, Transpose(W)) reads it transposed.
// Folding the Transpose would store the weight twice (fold_constants' growth cap refuses), and
// keeping it transposes all of W on every run. Instead W is replaced by its transpose Wt [K, N]
// (the same bytes, so the model does not grow): the Transposes' readers read Wt directly, and
// each Gather becomes Transpose(Gather(Wt, idx, axis 1), [1, ..., r, 0]) (r = rank of idx;
// none for a scalar idx), which moves only the gathered rows (numel(idx) * K elements, as many
// as the Gather writes) instead of N * K. The output projection is then a MatMul by a constant,
// which runtimes pre-pack. Skipped when idx is known to hold N or more elements (the moved
// Transpose would not be smaller). Exact: only elements move.
bool transpose_tied_constant(ir::Node& t, Rewriter& rw) {
  ir::Value* w = t.input(0);
  if (!w || t.outputs().size() != 1 || !t.output(0) || w->is_graph_output() || w->rank() != 2)
    return false;
  const auto p = ir::transpose_perm(t, 2);
  if (!is_constant_value(w) || !p || *p != Perm{1, 0}) return false;
  const auto n = known_dim(w, 0), k = known_dim(w, 1);
  if (!n || !k) return false;
  std::vector<ir::Node*> transposes, gathers;
  for (const ir::Use& u : w->uses()) {
    ir::Node* r = u.node;
    if (r->graph() != w->owner() || r->opset() != t.opset() || u.index != 0) return false;
    if (r->op_type() == "Transpose" && r->domain().empty()) {
      if (r->outputs().size() != 1 || ir::transpose_perm(*r, 2) != p) return false;
      transposes.push_back(r);
    } else if (r->op_type() == "Gather" && r->domain().empty()) {
      if (!only_attributes(*r, {"axis"}) || r->inputs().size() != 2 || r->outputs().size() != 1)
        return false;
      const int64_t axis = r->attr_int("axis", 0);
      const auto rank = r->input(1) ? r->input(1)->rank() : std::nullopt;
      const auto count = r->input(1) ? r->input(1)->fact().element_count() : std::nullopt;
      if ((axis != 0 && axis != -2) || !rank || (count && *count >= *n)) return false;
      gathers.push_back(r);
    } else {
      return false;
    }
  }
  auto value = constant_tensor(w, kMaxRelayoutBytes);
  if (!value) return false;
  auto wt = eval::transposed(*value, {*n, *k}, *p, kMaxRelayoutBytes);
  if (!wt.ok()) return false;
  value.reset();
  ir::Graph& g = *w->owner();
  ir::Value* c = rw.add_constant(g, wt->to_proto(), w->name() + "_transposed");
  for (ir::Node* r : gathers) {
    ir::Node* gather = rw.add_node(g, "Gather", {c, r->input(1)}, 1, r);
    rw.set_attr(gather, int_attr("axis", 1));
    const int64_t rank = *r->input(1)->rank();
    ir::Value* out = gather->output(0);
    if (rank > 0) {
      Perm back;
      for (int64_t i = 1; i <= rank; ++i) back.push_back(i);
      back.push_back(0);
      ir::Node* tr = rw.add_node(g, "Transpose", {out}, 1, r);
      rw.set_attr(tr, ints_attr("perm", back));
      out = tr->output(0);
    }
    rw.replace_node(r, {out});  // cannot refuse: Identity allowed, replacement live
  }
  for (ir::Node* r : transposes) rw.replace_node(r, {c});
  return true;
}

// Fewest elements each index of a permutation Gather must move (the product of the dims after
// its axis): on NCHW channels that is a plane of H * W; along the innermost axis (1 element per
// index) a Gather copies element by element and measured slower than the Transpose it replaces
// (ShuffleNetV2's shuffle in NHWC under ONNX Runtime 1.30: 1.35x the model's float time).
constexpr int64_t kMinShuffleRun = 16;
// Most indices a channel_shuffle Gather holds (its constant is built in memory from the model's
// declared dims, which are hostile): far above any channel count (ShuffleNetV2: 116 to 464).
constexpr int64_t kMaxShuffleIndices = int64_t{1} << 16;

// channel_shuffle: Reshape(Transpose(Reshape(x, s1), p), s2) where the first Reshape splits one
// axis `a` of x into factors f0..fk-1, the Transpose permutes only those factors, and the last
// Reshape merges them back into x's shape: ShuffleNet's channel shuffle
// ([N, G*K, H, W] -> [N, G, K, H, W] -> [N, K, G, H, W] -> [N, G*K, H, W]). It is a permutation
// of x along `a`, so it becomes Gather(x, idx, axis = a) with idx a constant of x's size along
// `a`: one node instead of three, and one that does not stop a layout change. ONNX Runtime's
// NHWC int8 convolutions leave Transposes on each side of a Reshape it cannot see through (47 in
// ShuffleNetV2's int8 graph); the Gather it runs on the 8-bit values (its QDQ handling drops the
// pair around a Gather) left 34. Exact: only elements move. Requires x's dims to be facts along
// `a` and after it (the moved run at least kMinShuffleRun elements), the others the same as the
// result's by fact; both Reshapes and the Transpose read only by the chain.
bool channel_shuffle(ir::Node& r2, Rewriter& rw) {
  if (r2.opset() < 5 || !only_attributes(r2, {"allowzero"}) || r2.outputs().size() != 1 ||
      !r2.input(0))
    return false;
  ir::Node* t = absorbed_producer(r2.input(0), "Transpose", r2);
  ir::Node* r1 = t && t->input(0) ? absorbed_producer(t->input(0), "Reshape", r2) : nullptr;
  if (!r1 || !only_attributes(*r1, {"allowzero"}) || !r1->input(0)) return false;
  ir::Value* x = r1->input(0);
  const ir::TensorFact& fx = x->fact();
  const ir::TensorFact& fs = r1->output(0)->fact();
  const ir::TensorFact& fy = r2.output(0)->fact();
  if (!fx.has_rank || !fs.has_rank || !fy.has_rank || fx.dims.size() != fy.dims.size() ||
      fs.dims.size() <= fx.dims.size())
    return no_match(
        r2, "the chain's ranks are not facts, or it does not split one axis in two or more");
  const size_t rank = fx.dims.size();
  const size_t k = fs.dims.size() - rank + 1;  // factors of the split axis
  for (size_t i = 0; i < rank; ++i)
    if (!fx.dims[i].same_as(fy.dims[i]))
      return no_match(r2, "the result's shape is not known to be the input's");
  size_t a = 0;  // the split axis: the first dim the split Reshape changes
  while (a < rank && fx.dims[a].same_as(fs.dims[a])) ++a;
  if (a == rank) return false;
  int64_t run = 1;
  for (size_t i = a + 1; i < rank; ++i) {
    if (!fx.dims[i].same_as(fs.dims[i + k - 1]))
      return no_match(r2, "the first Reshape changes more than one axis");
    if (!fx.dims[i].known() || __builtin_mul_overflow(run, fx.dims[i].value, &run))
      return no_match(r2, "the dims after the shuffled axis are not known");
  }
  if (!fx.dims[a].known()) return no_match(r2, "the shuffled axis' size is not known");
  std::vector<int64_t> factors(k);
  int64_t product = 1;
  for (size_t j = 0; j < k; ++j) {
    const ir::Dim& d = fs.dims[a + j];
    if (!d.known() || d.value < 1 || __builtin_mul_overflow(product, d.value, &product))
      return false;
    factors[j] = d.value;
  }
  if (product != fx.dims[a].value) return false;
  if (product > kMaxShuffleIndices)
    return no_match(r2, absl::StrCat("the shuffled axis has ", product, " entries, more than ",
                                     kMaxShuffleIndices, " indices"));
  auto p = ir::transpose_perm(*t, static_cast<int64_t>(fs.dims.size()));
  if (!p || p->size() != fs.dims.size()) return false;
  bool moves = false;
  for (size_t i = 0; i < p->size(); ++i) {
    const bool in_factors = i >= a && i < a + k;
    const int64_t src = (*p)[i];
    if (!in_factors && src != static_cast<int64_t>(i))
      return no_match(r2, "the Transpose moves an axis other than the split one's factors");
    if (in_factors && (src < static_cast<int64_t>(a) || src >= static_cast<int64_t>(a + k)))
      return no_match(r2, "the Transpose moves an axis other than the split one's factors");
    moves = moves || src != static_cast<int64_t>(i);
  }
  if (!moves) return false;  // merge_reshape and eliminate_noop's
  if (run < kMinShuffleRun)
    return no_match(
        r2, absl::StrCat("each index would move ", run,
                         " elements, fewer than a Transpose pays for (", kMinShuffleRun, ")"));
  // Output position along `a`: the permuted factors' index (j0..jk-1) in row-major order over
  // the dims factors[p[a + i] - a]; it reads x at the factors' own row-major index, where factor
  // p[a + i] - a has index ji.
  std::vector<int64_t> out_dims(k), src_stride(k);
  for (size_t j = k; j-- > 0;) src_stride[j] = j + 1 < k ? src_stride[j + 1] * factors[j + 1] : 1;
  for (size_t i = 0; i < k; ++i) out_dims[i] = factors[(*p)[a + i] - static_cast<int64_t>(a)];
  std::vector<int64_t> idx(static_cast<size_t>(product));
  std::vector<int64_t> j(k, 0);
  for (int64_t o = 0; o < product; ++o) {
    int64_t src = 0;
    for (size_t i = 0; i < k; ++i) src += j[i] * src_stride[(*p)[a + i] - static_cast<int64_t>(a)];
    idx[static_cast<size_t>(o)] = src;
    for (size_t i = k; i-- > 0;) {  // next output index, row-major
      if (++j[i] < out_dims[i]) break;
      j[i] = 0;
    }
  }
  ir::Graph& g = *r2.graph();
  ir::Value* indices = rw.add_constant(g, ir::make_int64_tensor({product}, idx), "shuffle_indices");
  ir::Node* gather = rw.add_node(g, "Gather", {x, indices}, 1, &r2);
  rw.set_attr(gather, int_attr("axis", static_cast<int64_t>(a)));
  if (!rw.replace_node(&r2, {gather->output(0)})) {
    rw.erase(gather);
    return false;
  }
  rw.erase(t);
  rw.erase(r1);
  return true;
}

std::vector<Rule> transpose_rules() {
  return {{"push_transpose",
           {"Transpose"},
           [](ir::Node& t, Rewriter& rw) { return push_transpose(t, rw, false); }},
          {"transpose_tied_constant", {"Transpose"}, transpose_tied_constant},
          {"channel_shuffle", {"Reshape"}, channel_shuffle}};
}

}  // namespace

std::vector<Rule> layout_sensitive_transpose_rules() {
  return {{"push_transpose", {"Transpose"}, [](ir::Node& t, Rewriter& rw) {
             return push_transpose(t, rw, true);
           }}};
}

PassInfo optimize_transposes_pass() {
  return describe(
      {.name = "optimize_transposes",
       .level = 2,
       .description = "Transposes pushed down through elementwise ops, reductions, Concat, "
                      "Split, Pad, Slice, Squeeze/Unsqueeze and Softmax until they cancel, "
                      "merge or fold into constants (only when fewer Transposes remain); a "
                      "weight read transposed and by Gathers (a tied embedding) is stored "
                      "transposed instead; a channel shuffle (Reshape, Transpose of the split "
                      "axis' factors, Reshape back) becomes one Gather along that axis",
       .options = {}},
      {transpose_rules});
}

}  // namespace graft
