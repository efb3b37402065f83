// convert_fp16: float32 weights and computation become float16 (lossy: the pipeline verifies
// the result with a tolerance instead of the exact passes' one).
//
// Every tensor(float) value gets a "home" type: float16 where it is computed by a converted
// node (or it is a constant some converted node reads), float32 where a kept node computes it
// (block list, other domains, ops with a dtype attribute, nodes whose types are unknown) or it
// is an interface kept in float (graph inputs with keep_io_types, function parameters). Each
// reader wants a type (converted node: float16; kept node: float32; a Cast reads anything;
// graph outputs: the interface type); where a reader wants the other type, one Cast per value
// and direction is inserted. A graph output whose value changes type keeps its name on the
// boundary Cast. Cast(to=FLOAT) in the converted region becomes Cast(to=FLOAT16); casts left
// changing nothing (same type, or float16 -> float32 -> float16) are removed.
//
// Kept nodes: ops of the option block_ops (default: default_block_ops below; a value replaces
// the list, an empty one keeps none but the ops whose schema wants float32, float_only) and
// nodes named in block_nodes, besides what the pass cannot convert (other domains, dtype
// attributes, unknown types).
//
// Subgraphs (If/Loop/Scan) of a converted node are converted with float16 formal inputs and
// outputs; outer values they capture are read in their outer type (with a Cast where needed).
// A model-local function whose every call is converted (and agrees on its types) is converted
// like a subgraph: float16 parameters, results and constants, its calls read and produce
// float16 (plan_functions). Any other function stays float32 and its calls are kept nodes
// (Casts around them); a function is never duplicated per precision. Values of other types
// (int, bool, double) are untouched.
//
// Constants: float32 initializers and Constant values become float16 tensors. A constant that
// float16 cannot hold keeps every node reading it in float32 (and itself float32), each reported
// as a "kept_float32" finding with the reason:
//   - finite values beyond float16's range (+-65504): clamping them changes what the node
//     computes (a BatchNormalization variance of 1e7, a scale, a weight);
//   - more than kMaxConstantLoss of its magnitude lost to rounding and subnormal flush (an
//     epsilon of 1e-12 becomes 0).
// One case is clamped, because clamping provably changes nothing: an additive mask, a constant
// whose out-of-range values are all negative (-1e9, float32's lowest) read only by Add or Where
// nodes whose results reach a Softmax through shape ops, Adds and Wheres; exp of -65504 is 0 like
// exp of -1e9 (rule counter "clamped_values"). Nonzero values that round to zero are counted
// ("flushed_values"). External weights are read through the model's ExternalData and become
// ordinary in-memory initializers.
//
// Activations (automatic mixed precision): when the pipeline gives the pass inputs to run the
// model on (PassContext::calibration: the verification's input sets), the float32 model runs on
// the reference evaluator first and each value's largest magnitude is recorded. A node with a
// float32 input or output beyond the option max_activation (default 16384, a quarter of
// float16's range: room for inputs larger than the calibration's) stays float32, reported as a
// "kept_float32" finding; Casts are inserted at the borders of the float32 regions this makes.
// Values the runs did not reach (a branch not taken) are not judged. Without calibration inputs
// only the constants are judged.
//
// Runtimes: a node whose float16 form a runtime users serve with is known to fail on stays
// float32, reported as a "kept_float32" finding with the runtime's failure (runtime_risk: ONNX
// Runtime 1.30's crash on a batch-moving float16 Transpose read by a MatMul).
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "core/eval/executor.h"
#include "core/ir/op_params.h"
#include "core/ir/shapes.h"
#include "core/ir/tensor.h"
#include "core/passes/float32_view.h"
#include "core/passes/passes.h"
#include "core/passes/queries.h"
#include "core/passes/rewriter.h"

namespace graft {
namespace {

constexpr int32_t kF32 = onnx::TensorProto::FLOAT;
constexpr int32_t kF16 = onnx::TensorProto::FLOAT16;
// Largest external weight read for conversion (one at a time, released after).
constexpr uint64_t kMaxConvertBytes = uint64_t{4} << 30;
// The most of a constant's magnitude (HalfLoss::lost_share) float16 may lose before its readers
// stay float32: 1%, about 20 times what normal float16 rounding loses at worst.
constexpr double kMaxConstantLoss = 0.01;

// Ops kept in float32 (Casts around them): inputs their schema wants float (Resize/Upsample
// scales and roi, Range, NonMaxSuppression boxes, quantization scales), random generators,
// and numerically fragile ops (accumulating reductions and their overflow-prone relatives).
std::vector<std::string> default_block_ops() {
  return {"Resize",
          "Upsample",
          "Range",
          "NonMaxSuppression",
          "RoiAlign",
          "TopK",
          "CumSum",
          "RandomNormal",
          "RandomUniform",
          "RandomNormalLike",
          "RandomUniformLike",
          "Multinomial",
          "Bernoulli",
          "ReduceMean",
          "ReduceSum",
          "ReduceSumSquare",
          "ReduceProd",
          "ReduceLogSum",
          "ReduceLogSumExp",
          "ReduceL1",
          "ReduceL2",
          "Pow",
          "Exp",
          "QuantizeLinear",
          "DequantizeLinear",
          "DynamicQuantizeLinear",
          "STFT",
          "DFT",
          "MelWeightMatrix",
          "HannWindow",
          "HammingWindow",
          "BlackmanWindow",
          "SoftmaxCrossEntropyLoss",
          "NegativeLogLikelihoodLoss"};
}

// Ops kept in float32 whatever block_ops says: their schema has no float16 for an operand the
// pass would convert (Resize/Upsample scales, Range, NonMaxSuppression, the quantization ops'
// inputs and scales; CumSum before opset 14).
bool float_only(const ir::Node& n) {
  static const std::set<std::string, std::less<>> ops = {"Resize",
                                                         "Upsample",
                                                         "Range",
                                                         "NonMaxSuppression",
                                                         "QuantizeLinear",
                                                         "DequantizeLinear",
                                                         "DynamicQuantizeLinear"};
  return ops.count(n.op_type()) || (n.op_type() == "CumSum" && n.opset() < 14);
}

enum class Want { kAny, kHalf, kFloat };

struct Settings {
  bool keep_io = true;
  double max_activation = 16384;                   // 0: activations not judged
  std::set<std::string, std::less<>> block_ops;    // op types kept in float32 (ONNX domain)
  std::set<std::string, std::less<>> block_nodes;  // node names kept in float32
};

int32_t type_of(Want w) { return w == Want::kHalf ? kF16 : kF32; }

onnx::TypeProto with_elem(const onnx::TypeProto& t, int32_t elem) {
  onnx::TypeProto out = t;
  out.mutable_tensor_type()->set_elem_type(elem);
  return out;
}

struct GraphRole {
  bool converted = false;  // nodes may be converted
  bool io_float = false;   // formal inputs and outputs stay float32
};

// One run of the pass over a model: its state lives as long as the run (a pass object runs in
// several rounds, and nothing may carry over from one to the next).
class Conversion {
 public:
  explicit Conversion(Settings settings) : settings_(std::move(settings)) {}

  PassResult run(ir::Model& model, const CalibrationInputs* calibration) {
    PassResult result;
    Rewriter rw(model);
    if (calibration && calibration->sets && settings_.max_activation > 0)
      result.used_calibration = measure_activations(model, *calibration);

    // 1. Snapshot roles, node classes and element types before any edit; functions whose
    // every call is converted are converted with float16 parameters (plan_functions).
    plan_functions(model);

    // 2. Home type of each float value.
    std::vector<ir::Value*> floats;
    for (ir::Value* v : values_) {
      if (type_[v] != kF32) continue;
      floats.push_back(v);
      home_[v] = home_of(v);
    }

    // 3. Retype the values whose home is float16.
    for (ir::Value* v : floats) {
      if (home_[v] == Want::kHalf && !retype(v, rw, result)) home_[v] = Want::kFloat;
    }
    for (ir::Value* v : floats) {
      for (const auto& [g, i] : v->output_refs()) {
        if (want_output(g) != Want::kHalf) continue;
        const auto& info = g->outputs()[i].info;
        if (info.has_type() && info.type().tensor_type().elem_type() == kF32) {
          g->set_output_type(i, with_elem(info.type(), kF16));
          result.changed = true;
        }
      }
    }

    // 4. Casts where a reader wants the other type.
    for (ir::Value* v : floats) insert_casts(v, rw, result);

    // 5. Casts that change nothing.
    remove_noop_casts(rw, result);
    report_kept(result);
    // Values changed type in place: facts (libonnx's inference among them) describe the float32
    // model; they are recomputed from the new declarations and tensors.
    if (result.changed) model.refresh_shape_inference();
    return result;
  }

 private:
  void visit(ir::Graph& g, GraphRole role) {
    roles_[&g] = role;
    for (const auto& in : g.inputs()) note(in.value);
    for (ir::Value* v : g.initializers()) note(v);
    for (ir::Node* n : g.nodes()) {
      for (ir::Value* v : n->inputs()) note(v);
      for (ir::Value* v : n->outputs()) note(v);
    }
    for (ir::Node* n : g.nodes()) {
      bool conv = role.converted && convertible(*n);
      if (conv) {
        std::string why = constant_risk(*n);
        if (why.empty()) why = activation_risk(*n);
        if (why.empty()) why = runtime_risk(*n);
        if (!why.empty()) {
          conv = false;
          kept_[n] = std::move(why);
        }
      }
      converted_[n] = conv;
      for (const auto& sub : n->subgraphs()) visit(*sub.graph, {.converted = conv});
    }
  }

  void note(ir::Value* v) {
    if (!v || type_.count(v)) return;
    type_[v] = v->elem_type();
    values_.push_back(v);
  }

  bool convertible(const ir::Node& n) const {
    if (!n.name().empty() && settings_.block_nodes.count(n.name())) return false;
    if (!n.is_onnx_domain()) return half_call(n);
    if (settings_.block_ops.count(n.op_type()) || float_only(n)) return false;
    if (n.is("Cast")) return true;
    if (n.attr("dtype") || n.attr("output_datatype")) return false;
    if (n.is("Constant") && !n.attr("value")) return false;
    // Its Mean and InvStdDev outputs have stash_type (float32), not the input's type.
    if (n.is("LayerNormalization") && (n.output(1) || n.output(2))) return false;
    for (const ir::Value* v : n.inputs())
      if (v && type_.at(v) == 0) return false;
    for (const ir::Value* v : n.outputs())
      if (v && type_.at(v) == 0) return false;
    return true;
  }

  // The largest magnitude of every float32 value over the calibration runs (float32 values
  // only: in a later round the converted part is float16 already). A run that fails leaves the
  // ranges it recorded so far.
  // True when it ran the model.
  bool measure_activations(const ir::Model& model, const CalibrationInputs& calibration) {
    bool any_float = false;
    for (const ir::Graph* g : model.all_graphs())
      for (const ir::Node* n : g->nodes())
        for (const ir::Value* v : n->outputs()) any_float |= v && v->elem_type() == kF32;
    if (!any_float) return false;
    const eval::ValueObserver observe = [this](const ir::Value& v, const eval::Tensor& t) {
      if (t.dtype() != kF32) return;
      Range& seen = range_[&v];
      for (int64_t i = 0; i < t.size(); ++i) {
        const double x = t.get_double(i);
        if (x < 0) {
          seen.negative = std::max(seen.negative, -x);
        } else if (!(x <= seen.positive)) {
          seen.positive = std::isnan(x) ? HUGE_VAL : x;  // NaN counts as unbounded
        }
      }
    };
    for (const auto& feeds : *calibration.sets) {
      auto outputs = eval::run_model(model, feeds, calibration.limits, nullptr, &observe);
      if (!outputs.ok()) break;
    }
    return true;
  }

  // Why `n` must compute in float32 for the values the calibration runs saw, or "". Constants
  // are constant_risk's; large negative values on their way to a Softmax are masks (see the
  // file comment), which float16's -65504 serves as well.
  std::string activation_risk(const ir::Node& n) const {
    if (range_.empty()) return "";
    auto check = [&](const ir::Value* v, const char* what) -> std::string {
      if (!v || type_.at(v) != kF32 || v->is_constant()) return "";
      if (v->producer() && v->producer()->is("Constant")) return "";
      auto it = range_.find(v);
      if (it == range_.end()) return "";
      const double limit = settings_.max_activation;
      double m = it->second.positive;
      if (it->second.negative > limit && !reaches_softmax(v, 8))
        m = std::max(m, it->second.negative);
      if (m <= limit) return "";
      return absl::StrCat(what, " '", v->name(), "' reaches |x| = ", m,
                          " on the calibration inputs (max_activation ", limit, ")");
    };
    for (const ir::Value* v : n.outputs())
      if (std::string why = check(v, "output"); !why.empty()) return why;
    for (const ir::Value* v : n.inputs())
      if (std::string why = check(v, "input"); !why.empty()) return why;
    return "";
  }

  // Why `n` stays float32 because a runtime fails on its float16 form, or "" (see the file
  // comment): a Transpose that moves the leading axis behind the others ([1, ..., r-2, 0, r-1]
  // or [1, ..., r-1, 0], rank >= 3), read by a MatMul as its first operand, is fused by ONNX
  // Runtime's level-'all' CPU optimizer into a batch-transposing FusedMatMul, and for a float16
  // Transpose (with or without a Cast to float32 between) that ends the process with SIGSEGV
  // (onnxruntime 1.30; bench/lossy_coverage: ocr_rec_opset11). In float32 it loads and runs.
  static std::string runtime_risk(const ir::Node& n) {
    if (!n.is("Transpose") || !n.output(0)) return "";
    const auto perm = ir::transpose_perm(n);
    if (!perm || perm->size() < 3) return "";
    const int64_t r = static_cast<int64_t>(perm->size());
    bool batch = true, batch_and_last = true;
    for (int64_t i = 0; i + 2 < r; ++i) batch = batch_and_last = batch && (*perm)[i] == i + 1;
    batch = batch && (*perm)[r - 2] == 0 && (*perm)[r - 1] == r - 1;
    batch_and_last = batch_and_last && (*perm)[r - 2] == r - 1 && (*perm)[r - 1] == 0;
    if (!batch && !batch_and_last) return "";
    // Readers through Casts too: the pass's own boundary Casts on a later run, or ONNX
    // Runtime's (it runs a float16 MatMul in float32 between Casts) crash it the same way.
    std::vector<const ir::Value*> values = {n.output(0)};
    for (size_t i = 0; i < values.size() && i < 8; ++i)
      for (const auto& u : values[i]->uses()) {
        if (!u.node->is_onnx_domain()) continue;
        if (u.node->is("Cast") && u.node->output(0)) values.push_back(u.node->output(0));
        if (u.index == 0 && u.node->is("MatMul"))
          return absl::StrCat("its perm [", absl::StrJoin(*perm, ", "), "] read by MatMul '",
                              u.node->name().empty() ? u.node->output(0)->name() : u.node->name(),
                              "' is fused by ONNX Runtime's level-'all' CPU optimizer into a "
                              "FusedMatMul that crashes in float16 (onnxruntime 1.30)");
      }
    return "";
  }

  // Why a float32 constant `n` reads cannot become float16 without changing what `n` computes,
  // or "" (see the file comment).
  const std::string& constant_risk(const ir::Node& n) {
    static const std::string kNone;
    for (const ir::Value* v : n.inputs()) {
      if (!v || type_.at(v) != kF32) continue;
      auto [it, added] = risk_.try_emplace(v);
      if (added) it->second = risk_of(v);
      if (!it->second.empty()) return it->second;
    }
    return kNone;
  }

  std::string risk_of(const ir::Value* v) {
    auto view = float32_constant(v);
    if (!view) return "";
    const HalfLoss loss = half_loss(*view);
    if (loss.out_of_range > 0) {
      if (loss.out_of_range_positive == 0 && additive_mask(v)) return "";
      return absl::StrCat("constant '", v->name(), "' has ", loss.out_of_range, " of ",
                          view->size(), " values beyond float16's range (largest |x| ",
                          loss.max_abs, ")");
    }
    if (loss.lost_share > kMaxConstantLoss)
      return absl::StrCat("constant '", v->name(), "' would lose ", loss.lost_share * 100,
                          "% of its magnitude in float16 (", loss.flushed, " of ", view->size(),
                          " values flush to zero)");
    return "";
  }

  // Whether every reader of `v` is an Add, or a Where choosing it, whose result reaches a
  // Softmax through ops that move or add values without scaling them.
  static bool additive_mask(const ir::Value* v) {
    if (v->uses().empty()) return false;
    for (const auto& u : v->uses()) {
      const bool add = u.node->is("Add") || (u.node->is("Where") && u.index > 0);
      if (!add || !reaches_softmax(u.node->output(0), 8)) return false;
    }
    return true;
  }

  static bool reaches_softmax(const ir::Value* v, int depth) {
    if (!v || depth == 0 || v->uses().empty() || !v->output_refs().empty()) return false;
    for (const auto& u : v->uses()) {
      const ir::Node* n = u.node;
      if (n->is("Softmax") || n->is("LogSoftmax")) continue;
      const bool through = ir::moves_values(*n) || n->is("Add") || n->is("Where") ||
                           n->is("Cast") || n->is("Concat");
      if (!through || !reaches_softmax(n->output(0), depth - 1)) return false;
    }
    return true;
  }

  // The nodes kept float32 because of their constants, as findings every report shows.
  void report_kept(PassResult& result) const {
    std::vector<std::pair<const ir::Node*, const std::string*>> kept;
    for (const auto& [n, why] : kept_) kept.emplace_back(n, &why);
    std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
      return a.first->output(0)->name() < b.first->output(0)->name();
    });
    for (const auto& [n, why] : kept) {
      const ir::Graph* g = n->graph();
      result.explanations.push_back({.rule = "kept_float32",
                                     .node = n->name().empty() ? n->output(0)->name() : n->name(),
                                     .op = n->op_type(),
                                     .graph = g == &g->model()->graph() ? "" : g->name(),
                                     .reason = *why});
    }
    result.always_explained = !kept.empty();
  }

  bool is_converted(const ir::Node* n) const {
    auto it = converted_.find(n);
    return it != converted_.end() && it->second;
  }

  Want want_use(const ir::Node* n) const {
    if (!is_converted(n)) return Want::kFloat;
    if (n->is("Cast")) return Want::kAny;
    return Want::kHalf;
  }

  Want want_output(const ir::Graph* g) const {
    auto it = roles_.find(g);
    if (it == roles_.end() || !it->second.converted || it->second.io_float) return Want::kFloat;
    return Want::kHalf;
  }

  // Readers choose: float16 if one of them computes in float16, unless the value is an output
  // of its own graph kept in float32 (its name is interface: no Cast could take it).
  Want chosen_by_readers(const ir::Value* v) const {
    for (const auto& [g, i] : v->output_refs())
      if (g == v->owner() && want_output(g) == Want::kFloat) return Want::kFloat;
    for (const auto& u : v->uses())
      if (want_use(u.node) == Want::kHalf) return Want::kHalf;
    for (const auto& [g, i] : v->output_refs())
      if (want_output(g) == Want::kHalf) return Want::kHalf;
    return Want::kFloat;
  }

  Want home_of(const ir::Value* v) const {
    const ir::Graph* g = v->owner();
    if (v->is_graph_input()) return want_output(g) == Want::kHalf ? Want::kHalf : Want::kFloat;
    const ir::Node* p = v->producer();
    if (!p) {
      if (!v->is_constant()) return Want::kFloat;
      const onnx::TensorProto* h = ir::constant_header(v);
      if (!h || (ir::is_external(*h) && !ir::external_data_of(v))) return Want::kFloat;
      return chosen_by_readers(v);
    }
    if (!is_converted(p)) return Want::kFloat;
    if (p->is("Cast") || p->is("Constant")) return chosen_by_readers(v);
    return Want::kHalf;
  }

  // Makes `v` a float16 value (its tensor, its producer's attribute, its declarations). False,
  // with nothing changed, when its constant cannot be read.
  bool retype(ir::Value* v, Rewriter& rw, PassResult& result) {
    ir::Graph* g = v->owner();
    ir::Node* p = v->producer();
    if (v->is_initializer() || (p && p->is("Constant"))) {
      ir::LoadedTensor t = ir::constant_proto(v, kMaxConvertBytes);
      if (!t && v->is_initializer()) {
        // An overridable initializer (a graph input): constant_proto does not read it.
        if (!ir::is_external(*v->initializer())) t = ir::LoadedTensor(v->initializer());
      }
      if (!t) return false;
      int64_t clamped = 0, flushed = 0;
      auto half = ir::float_to_half_tensor(*t, &clamped, &flushed);
      if (!half) return false;
      if (clamped) result.rules["clamped_values"] += clamped;
      if (flushed) result.rules["flushed_values"] += flushed;
      if (p) {
        half->clear_name();
        rw.set_attr(p, constant_value_attr(std::move(*half)));
        result.rules["converted_constants"] += 1;
      } else {
        v->set_initializer(std::move(*half));
        result.rules["converted_initializers"] += 1;
      }
    } else if (p && p->is("Cast")) {
      rw.set_attr(p, int_attr("to", kF16));
      retargeted_.insert(p);
      result.rules["retargeted_casts"] += 1;
    } else if (p && p->is("ConstantOfShape")) {
      onnx::TensorProto value;
      if (const auto* a = p->attr("value"); a && a->has_t()) {
        auto half = ir::float_to_half_tensor(a->t());
        if (!half) return false;
        value = std::move(*half);
      } else {
        value.set_data_type(kF16);
        value.add_dims(1);
        value.set_raw_data(std::string(2, '\0'));
      }
      // ConstantOfShape's "value" attribute has the same form as Constant's.
      rw.set_attr(p, constant_value_attr(std::move(value)));
    }
    if (v->is_graph_input()) {
      for (size_t i = 0; i < g->inputs().size(); ++i) {
        const auto& in = g->inputs()[i];
        if (in.value == v && in.info.has_type())
          g->set_input_type(i, with_elem(in.info.type(), kF16));
      }
    }
    if (const auto* info = v->value_info();
        info && info->has_type() && info->type().tensor_type().elem_type() == kF32)
      v->set_type(with_elem(info->type(), kF16));
    // A Cast reading v may now change nothing (Cast(v, FLOAT16)).
    for (const auto& u : v->uses())
      if (u.node->is("Cast")) readers_.insert(u.node);
    result.add();
    return true;
  }

  void insert_casts(ir::Value* v, Rewriter& rw, PassResult& result) {
    const Want home = home_[v];
    ir::Graph* g = v->owner();
    std::vector<ir::Use> uses = v->uses();
    ir::Value* at_home = v;
    // A graph output of v's own graph wanting the other type: the Cast takes v's name.
    for (const auto& [og, i] : std::vector(v->output_refs())) {
      if (og != g || want_output(og) == home) continue;
      ir::Node* p = v->producer();
      if (!p || at_home != v) continue;  // unreachable by home_of's choice
      const int k = v->producer_index();
      ir::Node* c = rw.add_node(*g, "Cast", {v}, 1, p);
      rw.set_attr(c, int_attr("to", type_of(want_output(og))));
      g->move_output_name(c, 0, v);
      at_home = p->output(k);
      rw.set_input(c, 0, at_home);
      for (const auto& u : uses) rw.set_input(u.node, u.index, at_home);
      if (const auto* info = v->value_info(); info && info->has_type())
        v->set_type(with_elem(info->type(), type_of(want_output(og))));
      home_[at_home] = home;
      type_[at_home] = type_of(home);
      type_[v] = type_of(want_output(og));
      added_.insert(c);
      result.rules["boundary_casts"] += 1;
      result.add();
    }
    // After a split, v itself is the other type (the readers wanting it may share it).
    ir::Value* cast = at_home != v ? v : nullptr;
    auto other = [&]() {
      if (!cast) {
        const Want to = home == Want::kHalf ? Want::kFloat : Want::kHalf;
        ir::Node* c = rw.add_node(*at_home->owner(), "Cast", {at_home}, 1, at_home->producer());
        rw.set_attr(c, int_attr("to", type_of(to)));
        cast = c->output(0);
        type_[cast] = type_of(to);
        added_.insert(c);
        result.rules["casts_added"] += 1;
        result.add();
      }
      return cast;
    };
    for (const auto& u : uses) {
      const Want w = want_use(u.node);
      if (w == Want::kAny || w == home) continue;
      rw.set_input(u.node, u.index, other());
    }
    for (const auto& [og, i] : std::vector(at_home->output_refs())) {
      if (og == g) continue;
      const Want w = want_output(og);
      if (w == home) continue;
      og->set_output(i, other());
      result.changed = true;
    }
  }

  int32_t type_after(const ir::Value* v) const {
    auto h = home_.find(v);
    if (h != home_.end()) return type_of(h->second);
    auto t = type_.find(v);
    return t == type_.end() ? 0 : t->second;
  }

  void remove_noop_casts(Rewriter& rw, PassResult& result) {
    std::vector<ir::Node*> casts(added_.begin(), added_.end());
    casts.insert(casts.end(), retargeted_.begin(), retargeted_.end());
    casts.insert(casts.end(), readers_.begin(), readers_.end());
    // Readers of the casts this pass made or changed, too (a Cast16 after a new Cast32).
    for (ir::Node* c : std::vector(casts))
      for (const auto& u : c->output(0)->uses())
        if (u.node->is("Cast")) casts.push_back(u.node);
    std::sort(casts.begin(), casts.end(), [](const ir::Node* a, const ir::Node* b) {
      return a->output(0)->name() < b->output(0)->name();
    });
    casts.erase(std::unique(casts.begin(), casts.end()), casts.end());
    for (ir::Node* c : casts) {
      if (c->dead()) continue;
      const int32_t to = static_cast<int32_t>(c->attr_int("to", 0));
      ir::Value* x = c->input(0);
      ir::Value* same = nullptr;
      if (type_after(x) == to) {
        same = x;
      } else if (to == kF16 && x->producer() && x->producer()->is("Cast") &&
                 x->producer()->attr_int("to", 0) == kF32 &&
                 type_after(x->producer()->input(0)) == kF16) {
        same = x->producer()->input(0);  // float16 -> float32 -> float16: exact
      }
      if (!same) continue;
      if (rw.replace_node(c, {same}, /*allow_identity=*/false)) {
        result.rules["casts_removed"] += 1;
        result.add();
      }
    }
  }

  // The function a node calls (model-local, same domain and name), nullptr otherwise.
  ir::Function* callee(const ir::Node& n) const {
    if (n.is_onnx_domain()) return nullptr;
    auto it = functions_.find({n.domain(), n.op_type()});
    return it == functions_.end() ? nullptr : it->second;
  }

  bool half_call(const ir::Node& n) const {
    ir::Function* f = callee(n);
    return f && half_.count(f);
  }

  void snapshot(ir::Model& model) {
    roles_.clear();
    kept_.clear();
    converted_.clear();
    type_.clear();
    values_.clear();
    visit(model.graph(), {.converted = true, .io_float = settings_.keep_io});
    for (auto& fn : model.functions()) {
      // A function left float32: its body keeps float32 parameters; it is converted inside
      // only where its parameters' types are known, which they are not (types are per call).
      const GraphRole role = half_.count(&fn)
                                 ? GraphRole{.converted = true, .io_float = false}
                                 : GraphRole{.converted = !blocked_.count(&fn), .io_float = true};
      visit(*fn.body, role);
    }
  }

  // Model-local functions. A function body has no types of its own (ONNX types its values per
  // call), so the body is converted only when every call agrees: each call site is a converted
  // node (not in a kept subgraph, not named in block_nodes, not inside another function's body)
  // and passes the same element types, and with its parameters declared with them every value
  // of the body has a known element type (facts from Graft's rules) and its results have the
  // types the calls' outputs have. Then its parameters and results become float16 and the calls
  // read and produce float16 like any converted node. Otherwise the function stays float32
  // and its calls get Casts like a kept op (the calls' types must be known for that; unknown
  // ones are left alone, as any node of unknown types). Functions called with different
  // precisions are not duplicated: float32 is what such a call's readers and writers are cast
  // to.
  void plan_functions(ir::Model& model) {
    functions_.clear();
    half_.clear();
    blocked_.clear();
    for (auto& fn : model.functions()) functions_[{fn.rest.domain(), fn.rest.name()}] = &fn;
    const bool callable = !functions_.empty() && !ir::has_deep_function_calls(model);
    std::unordered_map<ir::Function*, std::vector<ir::Node*>> calls;
    std::unordered_set<ir::Function*> nested;
    if (callable) {
      for (ir::Graph* g : model.all_graphs())
        for (ir::Node* n : g->nodes())
          if (ir::Function* f = callee(*n)) {
            calls[f].push_back(n);
            if (root_is_function(*g)) nested.insert(f);
            if (!n->name().empty() && settings_.block_nodes.count(n->name())) blocked_.insert(f);
          }
      for (auto& fn : model.functions()) {
        auto it = calls.find(&fn);
        if (it == calls.end() || nested.count(&fn) || blocked_.count(&fn)) continue;
        if (declare_parameters(fn, it->second)) half_.insert(&fn);
      }
    }
    // A call site in a kept region makes its function float32, which may keep other calls:
    // repeat until every planned function has only converted calls (each round drops one).
    for (;;) {
      snapshot(model);
      ir::Function* drop = nullptr;
      for (ir::Function* f : half_)
        for (ir::Node* n : calls[f])
          if (!is_converted(n)) drop = f;
      if (!drop) break;
      half_.erase(drop);
      blocked_.insert(drop);
      undeclare_parameters(*drop);
    }
  }

  static bool root_is_function(const ir::Graph& g) {
    const ir::Graph* r = &g;
    while (r->parent()) r = r->parent()->graph();
    return r != &g.model()->graph();
  }

  // Declares the body's parameters with the element types every call passes (false, with the
  // declarations as they were, when the calls disagree or the body is not fully typed).
  bool declare_parameters(ir::Function& fn, const std::vector<ir::Node*>& sites) {
    ir::Graph& body = *fn.body;
    const auto& ins = body.inputs();
    const auto& outs = body.outputs();
    std::vector<int32_t> in_types(ins.size(), 0), out_types(outs.size(), 0);
    bool any_float = false;
    for (ir::Node* n : sites) {
      if (n->inputs().size() > ins.size() || n->outputs().size() > outs.size()) return false;
      for (size_t i = 0; i < ins.size(); ++i) {
        const ir::Value* v = n->input(i);
        const int32_t t = v ? v->elem_type() : 0;
        if (t == 0 || (in_types[i] != 0 && in_types[i] != t)) return false;
        in_types[i] = t;
        any_float |= t == kF32;
      }
      for (size_t i = 0; i < outs.size(); ++i) {
        const ir::Value* v = n->output(i);
        const int32_t t = v ? v->elem_type() : 0;
        if (t == 0 || (out_types[i] != 0 && out_types[i] != t)) return false;
        out_types[i] = t;
        any_float |= t == kF32;
      }
    }
    if (!any_float) return false;
    std::vector<std::optional<onnx::TypeProto>> before;
    for (size_t i = 0; i < ins.size(); ++i) {
      before.push_back(ins[i].info.has_type() ? std::optional(ins[i].info.type()) : std::nullopt);
      onnx::TypeProto t;
      t.mutable_tensor_type()->set_elem_type(in_types[i]);
      if (ins[i].info.has_type() && ins[i].info.type().tensor_type().elem_type() == in_types[i])
        continue;
      body.set_input_type(i, t);
    }
    saved_[&fn] = std::move(before);
    bool typed = true;
    for (size_t i = 0; i < outs.size() && typed; ++i)
      typed = outs[i].value && outs[i].value->elem_type() == out_types[i];
    std::vector<ir::Graph*> graphs{&body};
    for (size_t k = 0; k < graphs.size() && typed; ++k) {
      for (ir::Node* n : graphs[k]->nodes()) {
        for (const ir::Value* v : n->inputs()) typed &= !v || v->elem_type() != 0;
        for (const ir::Value* v : n->outputs()) typed &= !v || v->elem_type() != 0;
        for (const auto& sub : n->subgraphs()) graphs.push_back(sub.graph.get());
      }
    }
    if (!typed) undeclare_parameters(fn);
    return typed;
  }

  void undeclare_parameters(ir::Function& fn) {
    auto it = saved_.find(&fn);
    if (it == saved_.end()) return;
    ir::Graph& body = *fn.body;
    for (size_t i = 0; i < it->second.size(); ++i) {
      const auto& was = it->second[i];
      const auto& info = body.inputs()[i].info;
      if (was ? (info.has_type() && info.type().SerializeAsString() == was->SerializeAsString())
              : !info.has_type())
        continue;
      body.set_input_type(i, was ? *was : onnx::TypeProto());
    }
    saved_.erase(it);
  }

  const Settings settings_;
  std::map<std::pair<std::string, std::string>, ir::Function*> functions_;
  std::unordered_set<ir::Function*> half_, blocked_;
  std::unordered_map<ir::Function*, std::vector<std::optional<onnx::TypeProto>>> saved_;
  std::unordered_map<const ir::Graph*, GraphRole> roles_;
  std::unordered_map<const ir::Node*, bool> converted_;
  std::unordered_map<const ir::Value*, int32_t> type_;
  std::vector<ir::Value*> values_;
  std::unordered_map<const ir::Value*, Want> home_;
  std::unordered_set<ir::Node*> added_, retargeted_, readers_;
  // Constants float16 cannot hold (constant_risk, by value: the reason, "" when safe) and the
  // nodes kept float32 because of them.
  std::unordered_map<const ir::Value*, std::string> risk_;
  std::map<const ir::Node*, std::string> kept_;
  // measure_activations: the largest positive value and the largest magnitude of a negative one.
  struct Range {
    double positive = 0, negative = 0;
  };
  std::unordered_map<const ir::Value*, Range> range_;
};

class ConvertFp16 : public Pass {
 public:
  std::string_view name() const override { return "convert_fp16"; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override {
    Settings settings;
    settings.keep_io = ctx.bool_option("keep_io_types");
    for (const std::string& op : ctx.list_option("block_ops")) settings.block_ops.insert(op);
    for (const std::string& n : ctx.list_option("block_nodes")) settings.block_nodes.insert(n);
    settings.max_activation = static_cast<double>(ctx.int_option("max_activation"));
    return Conversion(std::move(settings)).run(model, ctx.calibration);
  }
};

}  // namespace

PassInfo convert_fp16_pass() {
  return describe<ConvertFp16>(
      {.name = "convert_fp16",
       .level = 3,
       .lossy = true,
       // float16 rounds each value by at most 2^-11 of its magnitude; a model whose outputs
       // move by 1% of their range or turn in direction has lost more than rounding.
       .gate = {.max_rel = 0.01, .min_cosine = 0.9995},
       .description = "float32 weights and computation to float16 (Casts at kept ops and I/O)",
       .options = {
           boolean_option("keep_io_types", true,
                          "graph inputs and outputs stay float32 (Casts at the "
                          "boundary); false converts them too"),
           list_option("block_ops", default_block_ops(), {},
                       "op types (ONNX domain) kept in float32 with Casts around "
                       "them; replaces the default list (empty: none kept)"),
           list_option("block_nodes", {}, {}, "node names kept in float32 with Casts around them"),
           integer_option("max_activation", 16384, 0, 65504,
                          "nodes with a float32 input or output whose magnitude "
                          "passes this on the verification inputs stay float32 (0: "
                          "activations not judged)")}});
}

}  // namespace graft
