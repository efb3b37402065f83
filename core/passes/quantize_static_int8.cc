// quantize_static_int8: calibrated 8-bit quantization in the QDQ format (what ONNX Runtime's
// quantize_static writes, and what it fuses at load into QLinearConv, QLinearMatMul, QGemm,
// QLinearAdd, QLinearMul, QLinearConcat, QLinearAveragePool and friends):
//
//   x --QuantizeLinear--DequantizeLinear--> Conv(., DequantizeLinear(W_q, s_w, axis 0),
//                                               DequantizeLinear(B_q int32, s_x * s_w)) --Q--DQ-->
//
// Every tensor a quantized node reads or computes gets one QuantizeLinear/DequantizeLinear pair
// (all its readers then read the dequantized value), with the scale and zero point of the range
// the float model took on the calibration inputs (PassContext::calibration: the request's
// calibration sets, else the verification's random inputs). Constant weights are stored in 8
// bits: int8 symmetric per output channel (Conv; MatMul/Gemm per column), biases in int32 with
// scale s_x * s_w (zero point 0) as ONNX Runtime's QDQ fusions expect.
//
// Add, Mul, Concat, pools, Sigmoid, LeakyRelu and Softmax are quantized only between values
// computed in 8 bits (a residual sum of two convolutions, a SiLU x * Sigmoid(x) after one; not a
// bias Add, a LayerNorm's arithmetic or a mask): elsewhere 8 bits cost accuracy and a runtime's
// float fusions and gain no integer kernel. (ONNX Runtime runs the unary ones as lookup tables.)
//
// Ranges: minmax (the smallest and largest value over all calibration runs) or percentile (per
// run, the values at `percentile` and 100 - `percentile` percent of a strided sample of at most
// 65536 elements, averaged over the runs: outliers no longer stretch the scale). The range always
// holds 0, so zero padding and ReLU stay exact.
//
// Activations after a quantized op: a Relu (or a Clip with constant bounds) that is the only
// reader of a quantized node's output is removed when the output's quantization (uint8, range of
// the Relu's output, zero point 0) already saturates what it would cut: dequantized values are
// then all >= 0, so the Relu computed nothing. That is exact, not an approximation.
//
// Max pools read and write the same scale and zero point (a max commutes with a monotonic
// quantization, so the pair around it changes nothing). Ops that only move values are left as
// they are.
//
// LOSSY on purpose (run by name only): activations and weights are rounded to 8 bits. The
// pipeline measures the error at representative sizes against the pass's gate.
//
// Left alone: nodes whose inputs or outputs are not float32, that the calibration runs did not
// reach (If/Loop bodies; no range), weights with a NaN or infinity or a scale that would
// underflow, weights other nodes also read in float (a tied embedding's Gather: the model would
// hold both copies; option shared_weights quantizes them anyway), biases whose int32 values would
// overflow (the bias stays float), excluded op types and nodes. Needs opset 13 (per-axis
// DequantizeLinear): a model from opset 7 on is raised to it first (core/passes/opset.h), and
// left as it was when nothing is quantized. Without calibration inputs (the evaluator cannot
// run the model) the pass changes nothing and says why.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>

#include "core/base/status.h"
#include "core/eval/executor.h"
#include "core/ir/op_params.h"
#include "core/ir/tensor.h"
#include "core/passes/float32_view.h"
#include "core/passes/opset.h"
#include "core/passes/passes.h"
#include "core/passes/quantization.h"
#include "core/passes/rules.h"

namespace graft {

namespace {

// Per-channel DequantizeLinear (its axis) exists from opset 13.
constexpr int64_t kOpset = 13;

using onnx::TensorProto;

constexpr char kOpTypes[] = "op_types";
constexpr char kActivationType[] = "activation_type";
constexpr char kWeightType[] = "weight_type";
constexpr char kPerChannel[] = "per_channel";
constexpr char kReduceRange[] = "reduce_range";
constexpr char kMethod[] = "calibration";
constexpr char kPercentile[] = "percentile_e4";
constexpr char kSharedWeights[] = "shared_weights";
constexpr char kMinConvChannels[] = "min_conv_channels";

// The op types the pass can quantize (option op_types).
const std::vector<std::string>& quantizable_ops() {
  static const std::vector<std::string> ops = {"Add",
                                               "AveragePool",
                                               "Concat",
                                               "Conv",
                                               "Gather",
                                               "Gemm",
                                               "GlobalAveragePool",
                                               "GlobalMaxPool",
                                               "HardSigmoid",
                                               "HardSwish",
                                               "LeakyRelu",
                                               "MatMul",
                                               "MaxPool",
                                               "Mul",
                                               "Sigmoid",
                                               "Softmax"};
  return ops;
}

// The range a value took over the calibration runs.
struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  bool non_finite = false;  // a NaN or infinity: no usable range
  int runs = 0;
};
using Ranges = std::unordered_map<std::string, Range>;

struct Config {
  WeightQuantization weights;
  bool act_uint8 = true;
  bool shared_weights = false;             // quantize weights also read in float elsewhere
  int64_t min_conv_channels = 4;           // a dense Conv over fewer input channels stays float
  std::vector<std::string> ops;            // sorted
  std::vector<std::string> exclude_nodes;  // sorted
  Ranges ranges;                           // by value name (main graph)
  uint64_t max_weight_bytes = 0;
  uint64_t weight_bytes = 0;
};

int32_t act_type(const Config& cfg) {
  return cfg.act_uint8 ? TensorProto::UINT8 : TensorProto::INT8;
}

bool is_op(const ir::Node* n, std::string_view op) { return n != nullptr && n->is(op); }

// Runs the float model on the calibration inputs and records every float32 value's range.
// `percentile` (in 1e-4 percent units, e.g. 999900 = 99.99%) 0 means minmax.
absl::StatusOr<Ranges> calibrate(const ir::Model& model, const CalibrationInputs& calibration,
                                 int64_t percentile) {
  Ranges ranges;
  constexpr int64_t kSample = 65536;
  const eval::ValueObserver observe = [&](const ir::Value& v, const eval::Tensor& t) {
    if (t.dtype() != TensorProto::FLOAT || t.size() == 0) return;
    Range& r = ranges[v.name()];
    const float* p = t.data<float>();
    if (percentile == 0) {
      for (int64_t i = 0; i < t.size(); ++i) {
        const double x = p[i];
        if (!std::isfinite(x)) {
          r.non_finite = true;
          continue;
        }
        r.lo = std::min(r.lo, x);
        r.hi = std::max(r.hi, x);
      }
      return;
    }
    const int64_t stride = std::max<int64_t>(1, t.size() / kSample);
    std::vector<float> sample;
    sample.reserve(static_cast<size_t>(t.size() / stride + 1));
    for (int64_t i = 0; i < t.size(); i += stride) {
      if (!std::isfinite(p[i])) {
        r.non_finite = true;
        continue;
      }
      sample.push_back(p[i]);
    }
    if (sample.empty()) return;
    const double share = static_cast<double>(percentile) / 1e6;
    auto at = [&](double q) {
      const size_t k = std::min(sample.size() - 1,
                                static_cast<size_t>(q * static_cast<double>(sample.size() - 1)));
      std::nth_element(sample.begin(), sample.begin() + static_cast<std::ptrdiff_t>(k),
                       sample.end());
      return static_cast<double>(sample[k]);
    };
    const double lo = at(1 - share), hi = at(share);
    // Averaged over runs (the first run sets it).
    if (r.runs == 0) {
      r.lo = lo;
      r.hi = hi;
    } else {
      r.lo = (r.lo * r.runs + lo) / (r.runs + 1);
      r.hi = (r.hi * r.runs + hi) / (r.runs + 1);
    }
    ++r.runs;
  };
  for (const auto& feeds : *calibration.sets) {
    // Ranges of a partial run would be wrong for the rest.
    RETURN_IF_ERROR(eval::run_model(model, feeds, calibration.limits, nullptr, &observe));
  }
  return ranges;
}

// The scale and zero point of the QuantizeLinear/DequantizeLinear pair `dq` (a
// DequantizeLinear) uses, when they are constants of a per-tensor pair.
std::optional<ActivationQuantization> pair_params(const ir::Node& dq) {
  if (dq.inputs().size() < 2) return std::nullopt;
  auto s = float_constant(dq.input(1));
  if (!s || s->values.size() != 1) return std::nullopt;
  ActivationQuantization q;
  q.scale = static_cast<float>(s->values[0]);
  if (dq.inputs().size() > 2 && dq.input(2)) {
    auto zp = ir::constant_ints(dq.input(2));
    if (!zp || zp->size() != 1) return std::nullopt;
    q.zero_point = static_cast<int32_t>((*zp)[0]);
  }
  return q;
}

// The DequantizeLinear output an existing pair on `x` gives (x read by a QuantizeLinear whose
// only reader is a DequantizeLinear), or nullptr.
ir::Value* existing_pair(const ir::Value* x) {
  for (const auto& use : x->uses()) {
    const ir::Node* q = use.node;
    if (!is_op(q, "QuantizeLinear") || use.index != 0 || !q->output(0)) continue;
    const ir::Value* qo = q->output(0);
    if (qo->uses().size() != 1 || qo->is_graph_output()) continue;
    ir::Node* dq = qo->uses()[0].node;
    if (is_op(dq, "DequantizeLinear") && dq->output(0)) return dq->output(0);
  }
  return nullptr;
}

// True when `n`'s output holds only values within its first input's range: a view (Reshape,
// Transpose, Slice, ...) or a nearest or linear Resize (a cubic one can overshoot).
bool within_source(const ir::Node& n) {
  return n.is_onnx_domain() &&
         (ir::moves_values(n) || (n.is("Resize") && n.attr_string("mode", "nearest") != "cubic"));
}

// The quantization `x` has or would get: its pair's if it has one (or is a DequantizeLinear's
// output), else from its calibrated range.
std::optional<ActivationQuantization> params_of(const ir::Value* x, const Config& cfg,
                                                int depth = 0) {
  if (is_op(x->producer(), "DequantizeLinear")) return pair_params(*x->producer());
  if (const ir::Value* dq = existing_pair(x)) return pair_params(*dq->producer());
  // A view (Reshape, Transpose, Slice, ...) takes its source's quantization: its values are a
  // subset of the source's, and ONNX Runtime drops the pairs around a view only when their
  // scales are equal (ShuffleNet's channel split, a Slice, was left float between them). So does
  // a nearest or linear Resize, whose values stay within the source's range (a cubic one can
  // overshoot it).
  const ir::Node* p = x->producer();
  if (p != nullptr && within_source(*p) && depth < 8 && !p->inputs().empty() && p->input(0) &&
      p->input(0)->elem_type() == TensorProto::FLOAT)
    if (auto q = params_of(p->input(0), cfg, depth + 1)) return q;
  auto it = cfg.ranges.find(x->name());
  if (it == cfg.ranges.end() || it->second.non_finite || !(it->second.lo <= it->second.hi))
    return std::nullopt;
  return activation_params(it->second.lo, it->second.hi, cfg.act_uint8);
}

// `x` dequantized: `x` itself if a DequantizeLinear computes it; the pair's output if it has
// one; else a new QuantizeLinear/DequantizeLinear pair with `q`, which every reader of `x` in
// its graph (but the new QuantizeLinear) reads instead. Graph outputs keep the float value.
// A scalar scale and a zero point of the activations' type, as constants named `hint` + "_scale"
// and "_zero_point".
std::pair<ir::Value*, ir::Value*> scalar_params(double scale, int32_t zero_point, const Config& cfg,
                                                Rewriter& rw, ir::Graph& g,
                                                const std::string& hint) {
  return {
      rw.add_constant(g, ir::make_float_tensor(TensorProto::FLOAT, {}, {scale}), hint + "_scale"),
      rw.add_constant(g, zero_point_tensor(act_type(cfg), zero_point), hint + "_zero_point")};
}

ir::Value* dequantized(ir::Value* x, const ActivationQuantization& q, const Config& cfg,
                       Rewriter& rw, const ir::Node& origin) {
  if (is_op(x->producer(), "DequantizeLinear")) return x;
  if (ir::Value* dq = existing_pair(x)) return dq;
  ir::Graph& g = *origin.graph();
  const auto [scale, zp] = scalar_params(q.scale, q.zero_point, cfg, rw, g, x->name());
  const std::vector<ir::Use> readers = x->uses();
  ir::Node* qn = rw.add_node(g, "QuantizeLinear", {x, scale, zp}, 1, &origin);
  ir::Node* dqn = rw.add_node(g, "DequantizeLinear", {qn->output(0), scale, zp}, 1, &origin);
  for (const auto& use : readers)
    if (use.node->graph() == &g)
      rw.set_input(use.node, static_cast<size_t>(use.index), dqn->output(0));
  return dqn->output(0);
}

// True when every float32 input of `n` is dequantized and its output has its pair (or no
// reader: a graph output stays float): what the rules leave, so they do not run twice.
bool already_quantized(const ir::Node& n) {
  for (const ir::Value* in : n.inputs())
    if (in && in->elem_type() == TensorProto::FLOAT && !is_op(in->producer(), "DequantizeLinear"))
      return false;
  const ir::Value* y = n.outputs().empty() ? nullptr : n.output(0);
  return !y || y->elem_type() != TensorProto::FLOAT || y->uses().empty() || existing_pair(y) ||
         returned_as_graph_output(y);
}

// The output quantization of a quantized node's output `y`. When `y`'s only reader is a Relu
// or a Clip with constant bounds (not a graph output) and quantizing `y` with the range of that
// activation's output makes the activation an identity, the activation is removed (the
// pair saturates what it would cut) and `y` takes its place.
bool quantize_output(ir::Value* y, const Config& cfg, Rewriter& rw, const ir::Node& origin) {
  if (existing_pair(y) || y->uses().empty()) return true;  // a graph output only: float
  // Values the model returns stay float, also when they are moved first: a decoder's new keys
  // and values, appended to the cache that is its `present` output (their readers in the
  // graph, the attention among them, read them float; the MatMul computing them still runs in
  // 8 bits, its output in float).
  if (returned_as_graph_output(y)) return true;
  if (y->uses().size() == 1 && !y->is_graph_output()) {
    ir::Node* act = y->uses()[0].node;
    ir::Value* a = act->outputs().empty() ? nullptr : act->output(0);
    const bool relu = is_op(act, "Relu");
    const bool clip = is_op(act, "Clip") && act->opset() >= 11;
    if ((relu || clip) && a && !a->is_graph_output() && act->graph() == origin.graph()) {
      double lo = 0, hi = std::numeric_limits<double>::infinity();
      bool bounds = true;
      if (clip) {
        auto bound = [&](size_t i, double& out) {
          if (act->inputs().size() <= i || !act->input(i)) return true;
          auto c = float_constant(act->input(i));
          if (!c || c->values.size() != 1) return false;
          out = c->values[0];
          return true;
        };
        lo = -std::numeric_limits<double>::infinity();
        bounds = bound(1, lo) && bound(2, hi);
      }
      auto q = bounds ? params_of(a, cfg) : std::nullopt;
      if (q) {
        const double qmin = cfg.act_uint8 ? 0 : -128, qmax = cfg.act_uint8 ? 255 : 127;
        const double dq_lo = (qmin - q->zero_point) * static_cast<double>(q->scale);
        const double dq_hi = (qmax - q->zero_point) * static_cast<double>(q->scale);
        // Float rounding of the scale: a top value 1e-6 above a Clip's bound is no change.
        const double slack = 1e-6 * std::max(1.0, std::abs(hi));
        if (dq_lo >= lo && dq_hi <= hi + slack) {
          // The activation's readers read `y`'s pair.
          ir::Value* dq = dequantized(a, *q, cfg, rw, origin);
          rw.set_input(dq->producer()->input(0)->producer(), 0, y);
          return rw.erase(act);
        }
      }
    }
  }
  auto q = params_of(y, cfg);
  if (!q) return false;
  dequantized(y, *q, cfg, rw, origin);
  return true;
}

// Dequantizes every float32 input of `n` (activations: quantized_source checked them).
bool dequantize_inputs(ir::Node& n, const Config& cfg, Rewriter& rw) {
  for (size_t i = 0; i < n.inputs().size(); ++i) {
    ir::Value* x = n.input(i);
    if (!x || x->elem_type() != TensorProto::FLOAT) continue;
    if (is_op(x->producer(), "DequantizeLinear")) continue;
    if (x->is_constant() || is_op(x->producer(), "Constant"))
      return no_match(n, "a constant input (only activations are quantized here)");
    auto q = params_of(x, cfg);
    if (!q) return no_match(n, "an input has no calibrated range");
    rw.set_input(&n, i, dequantized(x, *q, cfg, rw, n));
  }
  return true;
}

bool float_output(const ir::Node& n) {
  return n.outputs().size() == 1 && n.output(0) && n.output(0)->elem_type() == TensorProto::FLOAT;
}

// Whether node `n` may be quantized as op type `op` (its own, or the one whose option covers a
// form of it: a written-out HardSwish, a Div or Sub relabelled like a Mul or Add).
bool allowed_as(const ir::Node& n, std::string_view op, const Config& cfg) {
  return std::binary_search(cfg.ops.begin(), cfg.ops.end(), op) &&
         !excluded_node(n, cfg.exclude_nodes);
}

bool allowed(const ir::Node& n, const Config& cfg) { return allowed_as(n, n.op_type(), cfg); }

// Whether a stem `n` stays in 8 bits although it is below min_conv_channels, measured under
// ONNX Runtime (bench/int8_cnn, AVX-512 VNNI):
//  - its output reaches a MaxPool through activations and normalizations, each read by the next
//    alone (ResNet, GoogLeNet, DenseNet, SqueezeNet, ShuffleNet): ONNX Runtime moves the
//    QuantizeLinear after a float stem before the MaxPool and runs an 8-bit MaxPool in NCHW
//    between Transposes (ResNet-18 0.32x -> 0.62x fp32, SqueezeNet 0.56x -> 1.50x);
//  - a Transpose reads it (ConvNeXt's patchify stem, normalized channels-last): float, its
//    output's error went over the gate (rel 0.234 > 0.2) and the whole pass was rolled back.
bool stem_stays_8_bit(const ir::Node& n) {
  static const std::unordered_set<std::string> kThrough = {
      "BatchNormalization", "Clip", "HardSigmoid", "HardSwish", "LeakyRelu", "Relu"};
  if (n.outputs().empty() || !n.output(0)) return true;
  for (const ir::Use& u : n.output(0)->uses())
    if (u.node->is("Transpose")) return true;
  const ir::Node* at = &n;
  for (int depth = 0; depth < 4; ++depth) {
    ir::Node* next = at->outputs().empty() ? nullptr : only_reader(at->output(0));
    if (next == nullptr || !next->is_onnx_domain()) return false;
    if (next->is("MaxPool")) return true;
    if (!kThrough.count(next->op_type())) return false;
    at = next;
  }
  return false;
}

// A dense Conv over fewer input channels than min_conv_channels (an image stem) stays float
// unless stem_stays_8_bit: its integer kernel is slower (MobileNetV3-Large's 3x3 stem: 333 us
// in int8 against 184 us in float, fused with its HardSwish).
bool float_stem(const ir::Node& n, const Config& cfg) {
  if (!n.is("Conv") || n.attr_int("group", 1) != 1 || n.inputs().size() < 2) return false;
  const auto* h = constant_header(n.input(1));
  return h && h->dims_size() >= 2 && h->dims(1) < cfg.min_conv_channels && !stem_stays_8_bit(n);
}

// True when `v` is computed in 8 bits already or will be: a DequantizeLinear's output, the
// output of a Conv, Gemm or MatMul the pass quantizes, or of an Add, Mul, Concat or pool whose
// own inputs are such values (through views and nearest or linear Resizes, and a Relu or Clip
// the output's quantization absorbs). `depth` bounds the walk.
bool quantized_source(const ir::Value* v, const Config& cfg, int depth = 0) {
  for (; depth < 8 && v != nullptr; ++depth) {
    const ir::Node* p = v->producer();
    if (p == nullptr || !p->is_onnx_domain()) return false;
    if (p->is("DequantizeLinear")) return true;
    if (p->is("Relu") || p->is("Clip") || within_source(*p)) {
      v = p->inputs().empty() ? nullptr : p->input(0);
      continue;
    }
    if (!allowed(*p, cfg) || float_stem(*p, cfg)) return false;
    if (p->is("Conv") || p->is("Gemm") || p->is("MatMul")) return true;
    for (const ir::Value* in : p->inputs())
      if (in && !quantized_source(in, cfg, depth + 1)) return false;
    return true;
  }
  return false;
}

// Add, Mul, Concat, average pools, Sigmoid, LeakyRelu, Softmax (only between values computed
// in 8 bits: a residual Add of two convolutions, not a bias Add or a LayerNorm's arithmetic,
// where 8 bits would cost accuracy and a runtime's float fusions), and MatMul of two
// activations: every float input and the output quantized.
bool quantize_elementwise(ir::Node& n, Config& cfg, Rewriter& rw) {
  if (!allowed(n, cfg)) return no_match(n, "excluded");
  if (!n.is("MatMul"))
    for (const ir::Value* x : n.inputs())
      if (x && !quantized_source(x, cfg))
        return no_match(n,
                        "an input is not computed in 8 bits (a constant, or a float op's output)");
  // Attention reading a KV cache: keys and values are also the `present` outputs, and ONNX
  // Runtime's level-'all' optimizer moves a pair on a transposed view of them onto the output
  // itself (llama_decoder_hf: present.0.key off by rel 0.21 under 'all', 0.08 under 'disabled').
  for (const ir::Value* x : n.inputs())
    if (const ir::Value* out = x ? viewed_graph_output(x) : nullptr)
      return no_match(n, absl::StrCat("an input is a view of the graph output '", out->name(),
                                      "' (a KV cache stays float)"));
  if (!float_output(n)) return no_match(n, "the output is not float32");
  if (already_quantized(n)) return no_match(n, "already quantized");
  if (!params_of(n.output(0), cfg)) return no_match(n, "the output has no calibrated range");
  for (const ir::Value* x : n.inputs())
    if (x && x->elem_type() != TensorProto::FLOAT && !n.is("Concat")) return false;
  if (!dequantize_inputs(n, cfg, rw)) return false;
  return quantize_output(n.output(0), cfg, rw, n);
}

// A scalar constant `c` stored in 8 bits exactly at the top of the type's range (uint8 255 or 0
// with zero point 255; int8 +-127), dequantized.
ir::Value* dequantized_scalar(double c, const Config& cfg, Rewriter& rw, ir::Graph& g,
                              const ir::Node& origin, const std::string& hint) {
  const int32_t type = act_type(cfg);
  const double steps = cfg.act_uint8 ? 255 : 127;
  int32_t q = 0, zp = 0;
  if (cfg.act_uint8)
    (c >= 0 ? q : zp) = 255;
  else
    q = c >= 0 ? 127 : -127;
  ir::Value* data = rw.add_constant(g, zero_point_tensor(type, q), hint + "_quantized");
  const auto [scale, zero] = scalar_params(std::abs(c) / steps, zp, cfg, rw, g, hint);
  return rw.add_node(g, "DequantizeLinear", {data, scale, zero}, 1, &origin)->output(0);
}

// HardSigmoid's alpha and beta (HardSwish's 1/6 and 1/2) when the rewrite can use them: alpha
// > 0, and both usable as 8-bit scales and shifts.
std::optional<std::pair<double, double>> hard_sigmoid_params(const ir::Node& n) {
  const bool swish = n.is("HardSwish");
  const double alpha = swish ? 1.0 / 6 : n.attr_float("alpha", 0.2f);
  const double beta = swish ? 0.5 : n.attr_float("beta", 0.5f);
  if (!(alpha > 0) || !std::isfinite(alpha) || !std::isfinite(beta) ||
      !(1 / (255 * alpha) > std::numeric_limits<float>::min()) || !(std::abs(beta / alpha) < 1e30))
    return std::nullopt;
  return std::make_pair(alpha, beta);
}

// The clip of HardSigmoid on u = v + beta / alpha: u quantized at scale 1 / (255 alpha) (zero
// point the type's lowest), read back at 1 / 255.
ir::Value* clipped_pair(ir::Value* u, double alpha, const Config& cfg, Rewriter& rw,
                        const ir::Node& origin) {
  ir::Graph& g = *origin.graph();
  const auto [q_scale, zero] =
      scalar_params(1 / (255 * alpha), cfg.act_uint8 ? 0 : -128, cfg, rw, g, origin.name());
  ir::Value* dq_scale = rw.add_constant(
      g, ir::make_float_tensor(TensorProto::FLOAT, {}, {1.0 / 255}), origin.name() + "_unit_scale");
  ir::Node* q = rw.add_node(g, "QuantizeLinear", {u, q_scale, zero}, 1, &origin);
  return rw.add_node(g, "DequantizeLinear", {q->output(0), dq_scale, zero}, 1, &origin)->output(0);
}

// The HardSigmoid that alone reads a Conv's output `y` (a squeeze-excitation gate), when
// quantize_weighted can fold it: the Conv adds beta / alpha through its bias and its output pair
// is the clip, so the gate costs no node at all.
ir::Node* foldable_hard_sigmoid(const ir::Node& n, const Config& cfg) {
  const ir::Value* y = n.output(0);
  if (!n.is("Conv") || y->uses().size() != 1 || y->is_graph_output()) return nullptr;
  ir::Node* h = y->uses()[0].node;
  if (!is_op(h, "HardSigmoid") || h->graph() != n.graph() || !allowed(*h, cfg) ||
      !hard_sigmoid_params(*h) || !float_output(*h) || returned_as_graph_output(h->output(0)))
    return nullptr;
  return h;
}

// HardSwish(x) = x * min(x + 3, 6) / 6 for x >= -3, and 0 below. Where x's 8-bit range reaches
// -3 or lower (trained MobileNetV3 and PP-LCNet blocks: their inputs span about -12 to 12) and
// only the HardSwish reads x, x's pair is re-scaled to [-3, hi] with its zero point k = 3 / s an
// integer: values below -3 saturate to -3, where HardSwish is 0 as it is below, and the range
// narrows. The same bytes q read with zero point 0 are then x + 3, so HardSwish is one Mul of two
// 8-bit values (QLinearMul) and no Add:
//
//   Mul(DQ(q, s, k), DQ(Clip(q, 0, 2k), s / 6, 0))     the Clip on the bytes is min(x + 3, 6)
//
// (no Clip when 2k > 255: x never reaches 3). Under ONNX Runtime that removes HardSwish's
// QLinearAdd, half its cost: MobileNetV3-Large 0.82x -> 0.78x float with every HardSwish written
// so (AVX-512 VNNI, 1 thread). Where x's range stays above -3 (random weights: x within +-0.6)
// the re-scaling would widen it (4x coarser steps, rel 0.02 -> 0.13), so the Add form is kept.
// Returns the DequantizeLinear outputs (x, min(x + 3, 6) / 6), or nulls when the form does not
// apply; `readers` are the nodes of the HardSwish that read x.
std::pair<ir::Value*, ir::Value*> shifted_hard_swish(ir::Value* x, const ActivationQuantization& qx,
                                                     std::initializer_list<const ir::Node*> readers,
                                                     const Config& cfg, Rewriter& rw,
                                                     const ir::Node& origin) {
  if (!cfg.act_uint8 || !is_op(x->producer(), "DequantizeLinear")) return {};
  ir::Node* dq = x->producer();
  ir::Node* q = dq->input(0) ? dq->input(0)->producer() : nullptr;
  if (!is_op(q, "QuantizeLinear") || q->inputs().size() < 3 || !q->output(0) ||
      q->output(0)->uses().size() != 1 || q->output(0)->is_graph_output() ||
      !only_read_by(x, readers))
    return {};
  const double lo = -double{qx.scale} * qx.zero_point;
  const double hi = double{qx.scale} * (255 - qx.zero_point);
  if (!(lo <= -3) || !(hi > 0)) return {};
  // k steps below 0, 255 - k above reaching hi (within float rounding of the calibrated scale).
  const int64_t k = static_cast<int64_t>(std::floor(255 * 3 / (3 + hi) * (1 + 1e-6)));
  if (k < 1 || k > 255) return {};
  const double scale = 3.0 / static_cast<double>(k);
  if (scale > 1.1 * qx.scale) return {};  // k rounded down a coarser step than x had
  ir::Graph& g = *origin.graph();
  const auto [s_value, z_value] =
      scalar_params(scale, static_cast<int32_t>(k), cfg, rw, g, origin.name() + "_shifted");
  for (ir::Node* n : {q, dq}) {
    rw.set_input(n, 1, s_value);
    rw.set_input(n, 2, z_value);
  }
  ir::Value* bytes = q->output(0);
  if (2 * k < 255) {
    ir::Value* low =
        rw.add_constant(g, zero_point_tensor(act_type(cfg), 0), origin.name() + "_low");
    ir::Value* high = rw.add_constant(
        g, zero_point_tensor(act_type(cfg), static_cast<int32_t>(2 * k)), origin.name() + "_six");
    bytes = rw.add_node(g, "Clip", {bytes, low, high}, 1, &origin)->output(0);
  }
  const auto [sixth, zero] = scalar_params(scale / 6, 0, cfg, rw, g, origin.name() + "_sixth");
  ir::Value* gate = rw.add_node(g, "DequantizeLinear", {bytes, sixth, zero}, 1, &origin)->output(0);
  return {dq->output(0), gate};
}

// HardSigmoid(v) = clip(alpha v + beta, 0, 1) = clip(alpha (v + beta / alpha), 0, 1), alpha > 0,
// written as integer arithmetic ONNX Runtime has (it has no integer HardSigmoid or HardSwish):
//
//   u = Add(DQ(v), DQ(beta / alpha))                   QLinearAdd
//   Q(u, scale 1 / (255 alpha), zero point qmin)       saturates at alpha u = 0 and 1: the clip
//   DQ(., scale 1 / 255, zero point qmin)              the same bytes read as values in [0, 1]
//
// DQ(Q(u)) = clamp(round(255 alpha u), 0, 255) / 255: HardSigmoid rounded to 1/255 steps.
// HardSwish(x) = x * HardSigmoid<1/6, 1/2>(x) becomes that and a Mul of two 8-bit values
// (QLinearMul), its output quantized with HardSwish's calibrated range. MobileNetV3's blocks then
// stay integer from one convolution to the next, where they ran in float between a
// DequantizeLinear and a QuantizeLinear.
//
// rewrite_hard_sigmoid replaces `n`, which computes HardSigmoid (or with `swish`, HardSwish) of
// `x` with `alpha` and `beta`, by that form. The checks every form shares come first.
bool rewrite_hard_sigmoid(ir::Node& n, ir::Value* x, double alpha, double beta, bool swish,
                          std::initializer_list<const ir::Node*> readers, Config& cfg,
                          Rewriter& rw) {
  if (!float_output(n) || x->elem_type() != TensorProto::FLOAT)
    return no_match(n, "the input or output is not float32");
  if (!quantized_source(x, cfg))
    return no_match(n, "the input is not computed in 8 bits (a constant, or a float op's output)");
  if (viewed_graph_output(x)) return no_match(n, "the input is a view of a graph output");
  auto qx = params_of(x, cfg);
  if (!qx) return no_match(n, "the input has no calibrated range");
  // A HardSigmoid the model returns stays float, as every returned value does.
  if (!swish && returned_as_graph_output(n.output(0)))
    return no_match(n, "the output is returned by the model (it stays float)");
  std::optional<ActivationQuantization> qy;
  if (swish) {
    qy = params_of(n.output(0), cfg);
    if (!qy) return no_match(n, "the output has no calibrated range");
  }
  ir::Graph& g = *n.graph();
  // x dequantized and HardSigmoid(x): the shifted bytes where they apply, else the Add form.
  auto [xd, hs] =
      swish ? shifted_hard_swish(x, *qx, readers, cfg, rw, n) : std::pair<ir::Value*, ir::Value*>{};
  if (!xd || !hs) {
    xd = dequantized(x, *qx, cfg, rw, n);
    ir::Value* u = xd;
    if (beta != 0) {
      ir::Value* shift = dequantized_scalar(beta / alpha, cfg, rw, g, n, n.name() + "_shift");
      u = rw.add_node(g, "Add", {xd, shift}, 1, &n)->output(0);
    }
    hs = clipped_pair(u, alpha, cfg, rw, n);
  }
  if (!swish) return rw.replace_node(&n, {hs});
  ir::Node* mul = rw.add_node(g, "Mul", {xd, hs}, 1, &n);
  if (!rw.replace_node(&n, {mul->output(0)})) return false;
  ir::Value* y = mul->output(0);
  if (existing_pair(y) || y->uses().empty() || returned_as_graph_output(y)) return true;
  dequantized(y, *qy, cfg, rw, *mul);
  return true;
}

bool quantize_hard_sigmoid(ir::Node& n, Config& cfg, Rewriter& rw) {
  if (!allowed(n, cfg)) return no_match(n, "excluded");
  if (n.inputs().size() != 1 || !n.input(0)) return false;
  auto params = hard_sigmoid_params(n);
  if (!params)
    return no_match(n, "alpha is not positive (or alpha, beta not usable as 8-bit scales)");
  return rewrite_hard_sigmoid(n, n.input(0), params->first, params->second, n.is("HardSwish"), {&n},
                              cfg, rw);
}

// The value v of `Add(v, c)` or `Add(c, v)`, c the scalar constant `shift`; nullptr otherwise.
ir::Value* shifted_by(const ir::Value* sum, double shift) {
  const ir::Node* add = sum ? sum->producer() : nullptr;
  if (!is_op(add, "Add") || add->inputs().size() != 2 || !add->input(0) || !add->input(1))
    return nullptr;
  for (size_t i = 0; i < 2; ++i)
    if (constant_scalar(add->input(1 - i)) == shift) return add->input(i);
  return nullptr;
}

// HardSwish as Paddle and older exporters write it, x * Clip(x + 3, 0, 6) / 6 (or * (1/6); the
// product in either order; Clip's bounds as attributes or inputs): the same integer form, the
// Div (or Mul) replaced and the nodes only it read removed. HardSwish in op_types turns it on.
bool quantize_written_hard_swish(ir::Node& n, Config& cfg, Rewriter& rw) {
  if (!allowed_as(n, "HardSwish", cfg) || n.inputs().size() != 2 || !n.input(0) || !n.input(1))
    return false;
  auto by = constant_scalar(n.input(1));
  if (!by || !(n.is("Div") ? *by == 6 : std::abs(*by * 6 - 1) < 1e-6)) return false;
  ir::Value* product = n.input(0);
  const ir::Node* mul = product->producer();
  if (!is_op(mul, "Mul") || mul->inputs().size() != 2 || !mul->input(0) || !mul->input(1) ||
      product->uses().size() != 1 || product->is_graph_output())
    return false;
  for (size_t i = 0; i < 2; ++i) {
    ir::Value* x = mul->input(i);
    const ir::Value* clipped = mul->input(1 - i);
    const ir::Node* clip = clipped->producer();
    if (!is_op(clip, "Clip") || clipped->uses().size() != 1 || clipped->is_graph_output() ||
        clip->inputs().empty() || !clip->input(0))
      continue;
    auto bounds = ir::clip_params(*clip);
    if (!bounds || bounds->min != 0.0 || bounds->max != 6.0) continue;
    const ir::Value* sum = clip->input(0);
    if (shifted_by(sum, 3.0) != x || sum->uses().size() != 1 || sum->is_graph_output()) continue;
    if (!rewrite_hard_sigmoid(n, x, 1.0 / 6, 0.5, /*swish=*/true, {mul, sum->producer()}, cfg, rw))
      return false;
    rw.erase_unread_producers(product);  // the Mul, Clip and Add
    return true;
  }
  return false;
}

// Mul, Div, Add or Sub of an 8-bit value by a scalar constant (PP-LCNetV3's learnable affine
// blocks, a scale before a convolution) costs no node: the bytes are read with another scale and
// zero point. For x = s (q - z): c x = (c s)(q - z), x / c = (s / c)(q - z), and
// x + b = s (q - (z - b / s)), the zero point rounded to an integer (at most s / 2 off, the
// rounding every 8-bit value has). c must be positive and the new zero point in the type's range.
bool relabel_scalar_affine(ir::Node& n, Config& cfg, Rewriter& rw) {
  const bool scale = n.is("Mul") || n.is("Div");
  if (!allowed_as(n, scale ? "Mul" : "Add", cfg) || n.inputs().size() != 2 || !n.input(0) ||
      !n.input(1) || !float_output(n))
    return false;
  // The constant: either operand of Mul and Add, the second of Div and Sub.
  const bool commutes = n.is("Mul") || n.is("Add");
  size_t xi = 0;
  std::optional<double> c = constant_scalar(n.input(1));
  if (!c && commutes) {
    c = constant_scalar(n.input(0));
    xi = 1;
  }
  ir::Value* x = n.input(xi);
  if (!c || !std::isfinite(*c) || x->elem_type() != TensorProto::FLOAT) return false;
  // Only bytes that exist already are relabelled: quantizing a float value for it (GPT-2's
  // attention scores before their scale, read from the KV cache in float) adds a rounding the
  // model did not have (GPT-2's worst output rel 0.200 -> 0.207, over the gate).
  if (!is_op(x->producer(), "DequantizeLinear") && !existing_pair(x))
    return no_match(n, "the input has no 8-bit pair (yet): a float value is not quantized for it");
  if (returned_as_graph_output(n.output(0)))
    return no_match(n, "the output is returned by the model (it stays float)");
  for (const auto& use : n.output(0)->uses())
    if (use.node->is("Clip"))
      return no_match(n, "read by a Clip (x + 3 of a written-out HardSwish, rewritten whole)");
  auto q = params_of(x, cfg);
  if (!q) return no_match(n, "the input has no calibrated range");
  double s = q->scale, z = q->zero_point;
  if (scale) {
    if (!(*c > 0)) return no_match(n, "a scale that is not positive");
    s = n.is("Mul") ? s * *c : s / *c;
  } else {
    z = std::nearbyint(z - (n.is("Add") ? *c : -*c) / s);
  }
  const double lo = cfg.act_uint8 ? 0 : -128, hi = cfg.act_uint8 ? 255 : 127;
  if (!(static_cast<float>(s) >= std::numeric_limits<float>::min()) ||
      !std::isfinite(static_cast<float>(s)) || !(z >= lo && z <= hi))
    return no_match(n, "the scale or zero point it would take is out of range");
  // The bytes of x's pair, read again.
  ir::Value* xd = dequantized(x, *q, cfg, rw, n);
  ir::Value* bytes = xd->producer()->input(0);
  ir::Graph& g = *n.graph();
  const auto [s_value, z_value] = scalar_params(s, static_cast<int32_t>(z), cfg, rw, g, n.name());
  ir::Node* dq = rw.add_node(g, "DequantizeLinear", {bytes, s_value, z_value}, 1, &n);
  if (!rw.replace_node(&n, {dq->output(0)})) return false;
  rw.erase_unread_producers(xd);
  return true;
}

// MaxPool, GlobalMaxPool and Gather of an 8-bit value: the output takes the input's scale and
// zero point (it holds some of the input's values), and ONNX Runtime runs the op on the bytes.
// A Gather gets the pair on each side itself: ONNX Runtime moves pairs across Reshape and
// Transpose on its own, but not across a Gather, which it runs on bytes only between a pair of
// equal parameters (a channel shuffle, optimize_transposes' channel_shuffle, left in float had
// 31 QuantizeLinear in ShuffleNetV2's graph at ONNX Runtime 1.30, none on bytes: 0.79x float
// against 0.73x).
bool quantize_value_subset(ir::Node& n, Config& cfg, Rewriter& rw) {
  if (!allowed(n, cfg)) return no_match(n, "excluded");
  const bool gather = n.is("Gather");
  if (n.outputs().size() != 1 || !float_output(n) || n.inputs().size() != (gather ? 2u : 1u) ||
      !n.input(0))
    return no_match(n, "indices output or not float32");
  if (already_quantized(n)) return no_match(n, "already quantized");
  ir::Value* x = n.input(0);
  if (!quantized_source(x, cfg))
    return no_match(n, gather ? "the data is not computed in 8 bits (a constant table, or a float "
                                "op's output)"
                              : "the input is computed in float (an image stem left float): a "
                                "float MaxPool is faster than quantizing before it");
  auto q = params_of(x, cfg);
  if (!q) return no_match(n, "the input has no calibrated range");
  rw.set_input(&n, 0, dequantized(x, *q, cfg, rw, n));
  ir::Value* y = n.output(0);
  if (!existing_pair(y) && !y->uses().empty()) dequantized(y, *q, cfg, rw, n);
  return true;
}

// The weight of a Conv (axis 0 = output channels), MatMul ([K, N], per column) or Gemm (per
// column, or per row with transB) quantized and dequantized; its scales are returned in
// `scales` (one per output channel, or one).
ir::Value* quantized_weight(ir::Node& n, ir::Value* w, int64_t& channels,
                            std::vector<float>& scales, Config& cfg, Rewriter& rw) {
  const auto* h = constant_header(w);
  if (!h || h->data_type() != TensorProto::FLOAT) return nullptr;
  std::vector<int64_t> dims(h->dims().begin(), h->dims().end());
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d <= 0 || d > (int64_t{1} << 40) / count) return nullptr;
    count *= d;
  }
  const bool conv = n.is("Conv");
  const bool trans_b = n.is("Gemm") && n.attr_int("transB", 0) != 0;
  if (!conv && dims.size() != 2) return nullptr;
  if (conv && dims.size() < 3) return nullptr;
  // Output channels along `axis` of W; the rest of an element's index is `per`.
  const int64_t axis = conv || trans_b ? 0 : 1;
  channels = dims[static_cast<size_t>(axis)];
  const int64_t per = count / channels;
  const uint64_t added = static_cast<uint64_t>(count) + 8 * static_cast<uint64_t>(channels) + 16;
  if (cfg.max_weight_bytes != 0 && cfg.weight_bytes + added > cfg.max_weight_bytes) return nullptr;
  std::optional<QuantizedWeight> q;
  {
    auto view = float32_constant(w);
    if (!view || view->size() != count) return nullptr;
    if (axis == 0)  // stored [channels, per]: column c is row c of storage
      q = quantize_weight([&](int64_t r, int64_t c) { return (*view)[c * per + r]; }, per, channels,
                          cfg.weights, /*column_major=*/true);
    else  // [K, N]
      q = quantize_weight([&](int64_t r, int64_t c) { return (*view)[r * channels + c]; }, per,
                          channels, cfg.weights);
  }
  if (!q) return nullptr;
  cfg.weight_bytes += added;
  ir::Graph& g = *n.graph();
  const int32_t wtype = cfg.weights.uint8 ? TensorProto::UINT8 : TensorProto::INT8;
  const bool per_channel = q->scale.size() > 1;
  ir::Value* data =
      rw.add_constant(g, byte_tensor(wtype, dims, std::move(q->bytes)), w->name() + "_quantized");
  std::vector<double> s(q->scale.begin(), q->scale.end());
  ir::Value* scale =
      rw.add_constant(g,
                      ir::make_float_tensor(
                          TensorProto::FLOAT,
                          per_channel ? std::vector<int64_t>{channels} : std::vector<int64_t>{}, s),
                      w->name() + "_scale");
  ir::Value* zp = nullptr;
  if (per_channel) {
    std::string z(q->zero_point.begin(), q->zero_point.end());
    zp =
        rw.add_constant(g, byte_tensor(wtype, {channels}, std::move(z)), w->name() + "_zero_point");
  } else {
    zp = rw.add_constant(g, zero_point_tensor(wtype, q->zero_point[0]), w->name() + "_zero_point");
  }
  ir::Node* dq = rw.add_node(g, "DequantizeLinear", {data, scale, zp}, 1, &n);
  if (per_channel) rw.set_attr(dq, int_attr("axis", axis));
  scales = std::move(q->scale);
  return dq->output(0);
}

// A bias [channels] as int32 with scale s_x * s_w[c], zero point 0; nullptr when a value does
// not fit int32 (or is not finite). `shift` is added to every value first; `b` nullptr stands
// for zeros.
ir::Value* quantized_bias(ir::Node& n, ir::Value* b, int64_t channels, float x_scale,
                          const std::vector<float>& w_scales, Config& cfg, Rewriter& rw,
                          double shift = 0) {
  std::vector<double> values(static_cast<size_t>(channels), 0.0);
  if (b != nullptr) {
    auto c = float_constant(b);
    if (!c || c->dtype != TensorProto::FLOAT || c->dims != std::vector<int64_t>{channels})
      return nullptr;
    values = std::move(c->values);
  }
  for (double& v : values) v += shift;
  const std::string hint = b != nullptr ? b->name() : n.name() + "_bias";
  std::string bytes(static_cast<size_t>(4 * channels), '\0');
  std::vector<double> scales(static_cast<size_t>(channels));
  for (int64_t i = 0; i < channels; ++i) {
    const double s = static_cast<double>(
        static_cast<float>(x_scale * w_scales[w_scales.size() == 1 ? 0 : static_cast<size_t>(i)]));
    if (!(s > 0) || !std::isfinite(s)) return nullptr;
    scales[static_cast<size_t>(i)] = s;
    const double v = std::nearbyint(values[static_cast<size_t>(i)] / s);
    if (!(std::abs(v) < 2147483647.0)) return nullptr;
    const int32_t q = static_cast<int32_t>(v);
    std::memcpy(bytes.data() + 4 * i, &q, 4);
  }
  ir::Graph& g = *n.graph();
  ir::Value* data = rw.add_constant(
      g, byte_tensor(TensorProto::INT32, {channels}, std::move(bytes)), hint + "_quantized");
  ir::Value* scale = rw.add_constant(
      g, ir::make_float_tensor(TensorProto::FLOAT, {channels}, scales), hint + "_scale");
  ir::Value* zp = rw.add_constant(g,
                                  byte_tensor(TensorProto::INT32, {channels},
                                              std::string(static_cast<size_t>(4 * channels), '\0')),
                                  hint + "_zero_point");
  ir::Node* dq = rw.add_node(g, "DequantizeLinear", {data, scale, zp}, 1, &n);
  rw.set_attr(dq, int_attr("axis", 0));
  cfg.weight_bytes += static_cast<uint64_t>(12 * channels);
  return dq->output(0);
}

// Conv, Gemm and MatMul by a constant weight: activation, weight, bias (int32) and output.
bool quantize_weighted(ir::Node& n, Config& cfg, Rewriter& rw) {
  if (!allowed(n, cfg)) return no_match(n, "excluded");
  if (!float_output(n)) return no_match(n, "the output is not float32");
  if (n.inputs().size() < 2 || !n.input(0) || !n.input(1)) return false;
  ir::Value* w = n.input(1);
  const bool const_weight = w->is_constant() || is_op(w->producer(), "Constant");
  if (!const_weight) return n.is("MatMul") ? quantize_elementwise(n, cfg, rw) : false;
  if (n.is("Conv") &&
      !only_attributes(n, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}))
    return no_match(n, "unknown attributes");
  if (n.is("Gemm")) {
    if (!only_attributes(n, {"alpha", "beta", "transA", "transB"}) ||
        n.attr_int("transA", 0) != 0 || n.attr_float("alpha", 1.0f) != 1.0f ||
        n.attr_float("beta", 1.0f) != 1.0f)
      return no_match(n, "Gemm with transA, alpha or beta");
  }
  if (float_stem(n, cfg))
    return no_match(n, absl::StrCat("a convolution over ", constant_header(w)->dims(1),
                                    " input channels (an image stem) stays float: its integer "
                                    "kernel is slower under ONNX Runtime (option "
                                    "min_conv_channels)"));
  ir::Value* x = n.input(0);
  if (x->elem_type() != TensorProto::FLOAT) return no_match(n, "the input is not float32");
  auto qx = params_of(x, cfg);
  if (!qx) return no_match(n, "the input has no calibrated range");
  if (!params_of(n.output(0), cfg)) return no_match(n, "the output has no calibrated range");
  // A weight other nodes read in float (a tied embedding's Gather) would be stored twice.
  for (const auto& use : w->uses())
    if (!cfg.shared_weights && use.node != &n &&
        !(use.index == 1 &&
          (use.node->is("MatMul") || use.node->is("Gemm") || use.node->is("Conv"))))
      return no_match(n,
                      "the weight is also read in float elsewhere (it would be stored twice; "
                      "option shared_weights)");
  if (w->is_graph_output()) return no_match(n, "the weight is a graph output");
  int64_t channels = 0;
  std::vector<float> w_scales;
  ir::Value* wd = quantized_weight(n, w, channels, w_scales, cfg, rw);
  if (!wd) return no_match(n, "the weight is not a finite float32 constant it can quantize");
  rw.set_input(&n, 1, wd);
  rw.set_input(&n, 0, dequantized(x, *qx, cfg, rw, n));
  if (ir::Node* gate = foldable_hard_sigmoid(n, cfg)) {
    // HardSigmoid(y) = clip(alpha (y + beta / alpha), 0, 1): the bias takes beta / alpha, the
    // output pair clips, and the gate's readers read it.
    const auto [alpha, beta] = *hard_sigmoid_params(*gate);
    ir::Value* b = n.inputs().size() > 2 ? n.input(2) : nullptr;
    ir::Value* bd = quantized_bias(n, b, channels, qx->scale, w_scales, cfg, rw, beta / alpha);
    if (bd == nullptr) return no_match(n, "the bias shifted by a HardSigmoid does not fit int32");
    if (n.inputs().size() > 2)
      rw.set_input(&n, 2, bd);
    else
      rw.set_inputs(&n, {n.input(0), n.input(1), bd});
    return rw.replace_node(gate, {clipped_pair(n.output(0), alpha, cfg, rw, *gate)});
  }
  if (n.inputs().size() > 2 && n.input(2)) {
    // Conv's B, Gemm's C when it is one value per output channel: int32; else left float.
    if (ir::Value* bd = quantized_bias(n, n.input(2), channels, qx->scale, w_scales, cfg, rw))
      rw.set_input(&n, 2, bd);
  }
  return quantize_output(n.output(0), cfg, rw, n);
}

// A node of the quantized op types that is still float: a Gather only when it reads a float
// activation (not a constant table, not shape arithmetic).
bool float_candidate(const ir::Node& n, const std::vector<std::string>& ops) {
  if (!n.is_onnx_domain() || !std::binary_search(ops.begin(), ops.end(), n.op_type()) ||
      already_quantized(n))
    return false;
  return !n.is("Gather") || (float_output(n) && n.input(0) && !is_constant_value(n.input(0)));
}

// True when some node the rules would take is not quantized yet (calibration is skipped when
// none is: a later round of the pipeline finds its own output).
bool has_work(const ir::Model& model, const std::vector<std::string>& ops) {
  for (const ir::Node* n : model.graph().nodes())
    if (float_candidate(*n, ops)) return true;
  return false;
}

// "left in float: Add 3, Conv 1 (...)": the main graph's nodes of the quantized op types the
// run left float, by type, or "" when there are none.
std::string left_in_float(const ir::Model& model, const std::vector<std::string>& ops) {
  std::map<std::string, int64_t> count;
  for (const ir::Node* n : model.graph().nodes())
    if (float_candidate(*n, ops)) ++count[n->op_type()];
  if (count.empty()) return "";
  std::string text = "left in float:";
  for (const auto& [op, k] : count) absl::StrAppend(&text, " ", op, " ", k, ",");
  text.pop_back();
  return absl::StrCat(text,
                      " (by design: a bias or a float op's input, an image stem; --explain "
                      "quantize_static_int8 gives each node's reason)");
}

// The pass's configuration for one run (ranges filled by QuantizeStaticInt8::run).
std::shared_ptr<Config> make_config(const ir::Model& model, const PassContext& ctx) {
  auto cfg = std::make_shared<Config>();
  cfg->weights.per_channel = ctx.bool_option(kPerChannel);
  cfg->weights.uint8 = ctx.enum_option(kWeightType) == "uint8";
  // auto: 7-bit weights only where 16-bit sums would saturate (x86 without VNNI).
  const std::string& reduce = ctx.enum_option(kReduceRange);
  cfg->weights.reduce_range =
      reduce == "true" || (reduce == "auto" && serving_cpu(ctx) == Int8Cpu::kAvx2);
  cfg->act_uint8 = ctx.enum_option(kActivationType) == "uint8";
  cfg->shared_weights = ctx.bool_option(kSharedWeights);
  cfg->min_conv_channels = ctx.int_option(kMinConvChannels);
  cfg->ops = ctx.list_option(kOpTypes);
  cfg->exclude_nodes = ctx.list_option(kExcludeNodes);
  cfg->max_weight_bytes = ctx.max_weight_bytes;
  cfg->weight_bytes = model.initializer_bytes();
  return cfg;
}

std::vector<Rule> quantize_rules(std::shared_ptr<Config> cfg) {
  auto rule = [cfg](bool (*f)(ir::Node&, Config&, Rewriter&)) {
    return [cfg, f](ir::Node& n, Rewriter& rw) { return f(n, *cfg, rw); };
  };
  return {
      {"quantize_weighted", {"Conv", "Gemm", "MatMul"}, rule(quantize_weighted), "", 13},
      {"quantize_value_subset",
       {"MaxPool", "GlobalMaxPool", "Gather"},
       rule(quantize_value_subset),
       "",
       13},
      {"quantize_hard_sigmoid", {"HardSigmoid", "HardSwish"}, rule(quantize_hard_sigmoid), "", 13},
      {"quantize_written_hard_swish", {"Div", "Mul"}, rule(quantize_written_hard_swish), "", 13},
      {"relabel_scalar_affine", {"Mul", "Div", "Add", "Sub"}, rule(relabel_scalar_affine), "", 13},
      {"quantize_elementwise",
       {"Add", "Mul", "Concat", "AveragePool", "GlobalAveragePool", "LeakyRelu", "Sigmoid",
        "Softmax"},
       rule(quantize_elementwise),
       "",
       13}};
}

// Raises the opset to 13 if below, calibrates, then runs the rules. When there is work but it
// cannot start (an opset that cannot be raised, no calibration inputs, a float model that does
// not run on them) the model is left as it is
// and a finding every report shows says why ("calibrate" at "model").
class QuantizeStaticInt8 : public RulePass {
 public:
  QuantizeStaticInt8()
      : RulePass("quantize_static_int8",
                 [this](ir::Model&, const PassContext&) { return quantize_rules(cfg_); },
                 {"quantize_weighted", "quantize_value_subset", "quantize_hard_sigmoid",
                  "quantize_written_hard_swish", "relabel_scalar_affine", "quantize_elementwise",
                  "calibrate", kServingCpu, "left_in_float"}) {}

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override {
    cfg_ = make_config(model, ctx);
    if (!has_work(model, cfg_->ops)) return PassResult{};
    auto refuse = [](std::string reason) {
      PassResult r;
      r.unmeasured = reason;
      r.add_model_finding("calibrate", "nothing quantized: " + std::move(reason));
      return r;
    };
    if (ctx.calibration == nullptr || ctx.calibration->sets == nullptr)
      return refuse("no calibration inputs (the evaluator cannot run the model at any size)");
    // Per-channel DequantizeLinear needs opset 13: an older model is raised first, inside this
    // pass's checkpoint, and left as it was when nothing is quantized.
    auto result = run_at_opset(
        model, kOpset, "per-channel DequantizeLinear", ctx.check_transactions,
        [&]() -> absl::StatusOr<PassResult> {
          const int64_t percentile =
              ctx.enum_option(kMethod) == "percentile" ? ctx.int_option(kPercentile) * 100 : 0;
          auto ranges = calibrate(model, *ctx.calibration, percentile);
          ctx.used_calibration = true;
          if (!ranges.ok())
            return refuse(absl::StrCat("the float model did not run on the calibration inputs: ",
                                       ranges.status().message()));
          cfg_->ranges = std::move(*ranges);
          auto result = RulePass::run(model, ctx);
          note_serving_cpu(ctx, result);
          if (std::string left = left_in_float(model, cfg_->ops);
              result.ok() && result->changed && !left.empty())
            result->add_model_finding("left_in_float", std::move(left));
          return result;
        });
    cfg_.reset();
    return result;
  }

 private:
  std::shared_ptr<Config> cfg_;
};

}  // namespace

PassInfo quantize_static_int8_pass() {
  return describe<QuantizeStaticInt8>(
      {.name = "quantize_static_int8",
       .level = 3,
       .lossy = true,
       .gate = {.max_rel = 0.2, .min_cosine = 0.98},
       .by_name_only = true,
       .description =
           "calibrated 8-bit quantization in QDQ form (QuantizeLinear/DequantizeLinear around "
           "Conv, MatMul, Gemm, Add, Mul, Concat, pools, Sigmoid, Softmax; HardSigmoid and "
           "HardSwish as integer Add/Mul; int8 per-channel weights, int32 biases), "
           "which ONNX Runtime fuses into QLinearConv/QLinearMatMul (lossy; by name only)",
       .options = {
           list_option(kOpTypes, quantizable_ops(), quantizable_ops(),
                       "op types to quantize (the others stay float)"),
           exclude_nodes_option("node names left in float"),
           enum_option(kActivationType, "uint8", {"int8", "uint8"},
                       "activations: uint8 asymmetric (a ReLU's output uses all 256 steps) or "
                       "int8 symmetric"),
           enum_option(kWeightType, "int8", {"int8", "uint8"},
                       "weights: int8 symmetric or uint8 asymmetric"),
           boolean_option(kPerChannel, true, "one weight scale per output channel"),
           integer_option(kMinConvChannels, 4, 0, std::numeric_limits<int32_t>::max(),
                          "a dense Conv over fewer input channels (an image stem) stays float, "
                          "unless it feeds a MaxPool or a Transpose (0: quantize every Conv)"),
           boolean_option(kSharedWeights, false,
                          "also quantize a weight other nodes read in float (a tied embedding's "
                          "LM head): faster, but the model holds both copies"),
           serving_cpu_option(),
           enum_option(kReduceRange, "auto", {"auto", "true", "false"},
                       "int8 weights in [-64, 63]: no saturation in the 16-bit sums of "
                       "x86 CPUs without VNNI, at twice the weight rounding (auto: when "
                       "serving_cpu is avx2)"),
           enum_option(kMethod, "minmax", {"minmax", "percentile"},
                       "activation ranges: the extremes seen, or percentiles (outliers clipped)"),
           integer_option(kPercentile, 9999, 5000, 10000,
                          "calibration=percentile: the percentile in units of 0.01% (9999 = "
                          "99.99%)")}});
}

}  // namespace graft
