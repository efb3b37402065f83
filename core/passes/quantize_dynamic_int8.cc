// quantize_dynamic_int8: MatMul and Gemm by a constant float32 2-D weight become standard-op
// dynamic quantization (what ONNX Runtime's quantize_dynamic builds with QOperator-free ops):
//
//   x_q, x_scale, x_zp = DynamicQuantizeLinear(x)                       (opset 11)
//   y = Mul(Cast(MatMulInteger(x_q, W_q, x_zp, W_zp), FLOAT), Mul(x_scale, W_scale * alpha))
//   (Gemm with C: Add(y, beta * C))
//
// W_q is the weight quantized offline: int8 symmetric (zero point 0, range [-127, 127], scale
// max|w| / 127) by default, or uint8 asymmetric (range [min(0, min w), max(0, max w)] over 255
// steps, zero point round(-min / scale)); per tensor (scalar scale and zero point) or per output
// column (option per_channel: scale [N], zero point [N] for uint8, a scalar 0 for int8).
//
// LOSSY on purpose (PassInfo.lossy, by name only): the activation is rounded to 8 bits per run
// and the weight to 8 bits once. The error per output element is bounded by roughly
// K * (|x|max * s_w / 2 + |w|max * s_x / 2) where s = range / 255 (or / 127): about 0.5-1% of
// the product's magnitude on typical layers.
//
// quantize_conv (only when exclude_ops, by default {Conv}, leaves Conv out): Conv by a constant
// float32 weight becomes DynamicQuantizeLinear + ConvInteger + Cast + Mul, per output channel
// with per_channel, the bias added after the rescale (as ONNX Runtime's quantize_dynamic).
//
// quantize_gather (unless exclude_ops has Gather): a constant float32 Gather table (embeddings)
// is stored in 8 bits per tensor and the gathered rows go through DequantizeLinear.
//
// Left alone: a weight that is not a 2-D float32 constant, is smaller than min_weight_elements,
// holds a NaN or infinity, or whose scale would underflow float; an activation that is not float32;
// Gemm with transA = 1, a non-constant C with beta != 1, or attributes it does not know; a model
// whose opset is below 11 (DynamicQuantizeLinear) and cannot be raised (core/passes/opset.h:
// from opset 7 on it is raised to 13 first); excluded ops (exclude_ops) and nodes
// (exclude_nodes, by node name in any graph).
//
// Where: every graph the rule driver visits. If/Loop/Scan bodies are rewritten like the main
// graph (their activations have facts); function bodies in practice are not: a function's
// parameters have no element type (it is typed per call site), so the activation is not known to
// be float32 (run inline_functions first to quantize them).
//
// Memory: a weight is read in place (Float32View: an in-memory tensor as stored, an external one
// loaded for the rewrite only), twice (range, then values), through an index map for Gemm's
// transB; the only allocation per weight is the 1-byte result, moved into the new tensor.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/ir/tensor.h"
#include "core/passes/float32_view.h"
#include "core/passes/opset.h"
#include "core/passes/passes.h"
#include "core/passes/quantization.h"
#include "core/passes/rules.h"

namespace graft {

namespace {

using onnx::TensorProto;

constexpr char kPerChannel[] = "per_channel";
constexpr char kWeightType[] = "weight_type";
constexpr char kReduceRange[] = "reduce_range";

struct Config {
  WeightQuantization weights;
  int64_t min_elements = 4096;
  bool skip_matmul = false;
  bool skip_gemm = false;
  bool skip_gather = true;
  bool skip_conv = true;
  std::vector<std::string> exclude_nodes;  // sorted (the option's canonical order)
  uint64_t max_weight_bytes = 0;           // 0 = no limit
  uint64_t weight_bytes = 0;               // initializer bytes so far (start + what the pass added)
};

// The operands of a MatMul or Gemm the rule rewrites.
struct Operands {
  ir::Value* x = nullptr;
  ir::Value* w = nullptr;
  bool transpose_w = false;  // Gemm transB = 1: W is [N, K]
  double alpha = 1;          // folded into the weight's scale
  ir::Value* c = nullptr;    // Gemm's C, added after
  double beta = 1;
};

// Rewrites `node` (MatMul or Gemm, already matched into `ops`); false with nothing changed if the
// weight does not qualify.
bool quantize_node(ir::Node& node, const Operands& ops, Config& cfg, Rewriter& rw) {
  if (node.outputs().size() != 1 || !node.output(0)) return false;
  if (ops.x->elem_type() != TensorProto::FLOAT) return false;
  if (const auto r = ops.x->rank(); r && *r < 1) return false;
  const auto* h = constant_header(ops.w);
  if (!h || h->data_type() != TensorProto::FLOAT || h->dims_size() != 2) return false;
  const int64_t d0 = h->dims(0), d1 = h->dims(1);
  if (d0 <= 0 || d1 <= 0) return false;  // zero-size weight: nothing to gain
  const int64_t k = ops.transpose_w ? d1 : d0, n = ops.transpose_w ? d0 : d1;
  // The element count, checked on the declared dims before anything is read.
  if (d0 > (int64_t{1} << 40) / d1 || d0 * d1 < cfg.min_elements) return false;
  // The output must be float32 too (a wrong declaration would make Cast change the type).
  if (node.output(0)->elem_type() != 0 && node.output(0)->elem_type() != TensorProto::FLOAT)
    return false;
  // Budget: the new weight (1 byte per element) plus its scales.
  const uint64_t added = static_cast<uint64_t>(d0 * d1) + 8 * static_cast<uint64_t>(n) + 16;
  if (cfg.max_weight_bytes != 0 && cfg.weight_bytes + added > cfg.max_weight_bytes) return false;

  // Read in place (an external weight through the shared accessor, released after the rewrite);
  // Gemm's transB is a change of index, not a transposed copy.
  std::optional<QuantizedWeight> q;
  {
    auto w = float32_constant(ops.w);
    if (!w || w->size() != d0 * d1) return false;
    if (ops.transpose_w)
      q = quantize_weight([&](int64_t r, int64_t c) { return (*w)[c * d1 + r]; }, k, n,
                          cfg.weights);
    else
      q = quantize_weight([&](int64_t r, int64_t c) { return (*w)[r * d1 + c]; }, k, n,
                          cfg.weights);
  }
  if (!q) return false;
  // C: beta folded into a constant C, or C as is when beta is 1; otherwise left alone.
  std::optional<FloatConstant> c_const;
  if (ops.c && ops.beta != 1) {
    c_const = float_constant(ops.c);
    if (!c_const || c_const->dtype != TensorProto::FLOAT) return false;
    for (double& v : c_const->values) v *= ops.beta;
    if (!ir::fits_float_type(TensorProto::FLOAT, c_const->values)) return false;
  }
  std::vector<double> mult(q->scale.begin(), q->scale.end());
  for (double& s : mult) s *= ops.alpha;
  if (!ir::fits_float_type(TensorProto::FLOAT, mult)) return false;

  ir::Graph& g = *node.graph();
  const std::string name = node.output(0)->name();
  const int32_t wtype = cfg.weights.uint8 ? TensorProto::UINT8 : TensorProto::INT8;
  const int64_t groups = static_cast<int64_t>(q->scale.size());
  ir::Value* wq =
      rw.add_constant(g, byte_tensor(wtype, {k, n}, std::move(q->bytes)), name + "_W_quantized");
  // Zero point: per column only when it varies (uint8 per channel); int8 is symmetric (0).
  ir::Value* wzp = nullptr;
  if (cfg.weights.uint8 && cfg.weights.per_channel) {
    std::string zp(q->zero_point.begin(), q->zero_point.end());
    wzp = rw.add_constant(g, byte_tensor(wtype, {n}, std::move(zp)), name + "_W_zero_point");
  } else {
    wzp = rw.add_constant(
        g, byte_tensor(wtype, {}, std::string(1, static_cast<char>(q->zero_point[0]))),
        name + "_W_zero_point");
  }
  ir::Value* wscale = rw.add_constant(
      g,
      ir::make_float_tensor(TensorProto::FLOAT,
                            groups == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{groups},
                            mult),
      name + "_W_scale");
  auto add = [&](std::string_view op, const std::vector<ir::Value*>& inputs, size_t outputs) {
    return rw.add_node(g, op, inputs, outputs, &node);
  };
  ir::Node* dql = add("DynamicQuantizeLinear", {ops.x}, 3);
  ir::Node* mmi = add("MatMulInteger", {dql->output(0), wq, dql->output(2), wzp}, 1);
  ir::Node* cast = add("Cast", {mmi->output(0)}, 1);
  rw.set_attr(cast, int_attr("to", TensorProto::FLOAT));
  ir::Node* scale = add("Mul", {dql->output(1), wscale}, 1);
  ir::Node* out = add("Mul", {cast->output(0), scale->output(0)}, 1);
  if (ops.c) {
    ir::Value* c = ops.c;
    if (c_const)
      c = rw.add_constant(g,
                          ir::make_float_tensor(TensorProto::FLOAT, c_const->dims, c_const->values),
                          name + "_C_scaled");
    out = add("Add", {out->output(0), c}, 1);
  }
  if (!rw.replace_node(&node, {out->output(0)})) return false;
  cfg.weight_bytes += added;
  return true;
}

bool quantize_matmul(ir::Node& node, Config& cfg, Rewriter& rw) {
  if (cfg.skip_matmul || excluded_node(node, cfg.exclude_nodes) || node.inputs().size() != 2 ||
      !node.attributes().empty())
    return false;
  Operands ops{.x = node.input(0), .w = node.input(1)};
  if (!ops.x || !ops.w) return false;
  return quantize_node(node, ops, cfg, rw);
}

bool quantize_gemm(ir::Node& node, Config& cfg, Rewriter& rw) {
  if (cfg.skip_gemm || excluded_node(node, cfg.exclude_nodes) || node.inputs().size() < 2 ||
      node.inputs().size() > 3 || !only_attributes(node, {"alpha", "beta", "transA", "transB"}))
    return false;
  if (node.attr_int("transA", 0) != 0) return false;  // would need a runtime Transpose of x
  Operands ops{.x = node.input(0),
               .w = node.input(1),
               .transpose_w = node.attr_int("transB", 0) != 0,
               .alpha = node.attr_float("alpha", 1.0f),
               .c = node.inputs().size() == 3 ? node.input(2) : nullptr,
               .beta = node.attr_float("beta", 1.0f)};
  if (!ops.x || !ops.w || !std::isfinite(ops.alpha) || !std::isfinite(ops.beta)) return false;
  if (ops.c && ops.c->elem_type() != TensorProto::FLOAT) return false;
  // Gemm's A is 2-D by definition; MatMulInteger would broadcast a different rank.
  if (ops.x->rank() != 2) return false;
  return quantize_node(node, ops, cfg, rw);
}

// Conv(x, W[, B]) with a constant float32 weight W [M, C / group, k...] (ONNX Runtime's dynamic
// Conv): x_q, x_scale, x_zp = DynamicQuantizeLinear(x); y = Mul(Cast(ConvInteger(x_q, W_q,
// x_zp, W_zp), FLOAT), x_scale * W_scale) with the Conv's attributes; B (a constant) is added
// after the rescale, shaped [M, 1, ...] like the per-channel scale. Per channel = per output
// channel (W's axis 0).
bool quantize_conv(ir::Node& node, Config& cfg, Rewriter& rw) {
  if (cfg.skip_conv || excluded_node(node, cfg.exclude_nodes) || node.inputs().size() < 2 ||
      node.inputs().size() > 3 || node.outputs().size() != 1 || !node.output(0) ||
      !only_attributes(node, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}))
    return false;
  ir::Value* x = node.input(0);
  ir::Value* wv = node.input(1);
  ir::Value* bias = node.inputs().size() == 3 ? node.input(2) : nullptr;
  if (!x || !wv || x->elem_type() != TensorProto::FLOAT) return false;
  if (node.output(0)->elem_type() != 0 && node.output(0)->elem_type() != TensorProto::FLOAT)
    return false;
  const auto* h = constant_header(wv);
  if (!h || h->data_type() != TensorProto::FLOAT || h->dims_size() < 3) return false;
  // X's rank is W's for Conv and ConvInteger alike (both refuse another); it may be unknown.
  if (const auto r = x->rank(); r && *r != h->dims_size()) return false;
  std::vector<int64_t> dims(h->dims().begin(), h->dims().end());
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d <= 0 || d > (int64_t{1} << 40) / count) return false;
    count *= d;
  }
  const int64_t m = dims[0], per_m = count / m;
  if (count < cfg.min_elements) return false;
  std::optional<FloatConstant> b;
  if (bias) {
    b = float_constant(bias);
    if (!b || b->dtype != TensorProto::FLOAT || b->dims != std::vector<int64_t>{m}) return false;
  }
  const uint64_t added = static_cast<uint64_t>(count) + 12 * static_cast<uint64_t>(m) + 16;
  if (cfg.max_weight_bytes != 0 && cfg.weight_bytes + added > cfg.max_weight_bytes) return false;
  std::optional<QuantizedWeight> q;
  {
    auto w = float32_constant(wv);  // read in place, released after quantizing
    if (!w || w->size() != count) return false;
    // Columns are output channels: at(r, c) is element r of channel c, written back in W's order.
    q = quantize_weight([&](int64_t r, int64_t c) { return (*w)[c * per_m + r]; }, per_m, m,
                        cfg.weights,
                        /*column_major=*/true);
  }
  if (!q) return false;
  ir::Graph& g = *node.graph();
  const std::string name = node.output(0)->name();
  const int32_t wtype = cfg.weights.uint8 ? TensorProto::UINT8 : TensorProto::INT8;
  const int64_t groups = static_cast<int64_t>(q->scale.size());
  // [M, 1, ..., 1]: broadcasts along the output's channel axis.
  std::vector<int64_t> channel_shape(dims.size() - 1, 1);
  channel_shape[0] = m;
  ir::Value* wq =
      rw.add_constant(g, byte_tensor(wtype, dims, std::move(q->bytes)), name + "_W_quantized");
  ir::Value* wzp = nullptr;
  if (cfg.weights.uint8 && cfg.weights.per_channel) {
    std::string zp(q->zero_point.begin(), q->zero_point.end());
    wzp = rw.add_constant(g, byte_tensor(wtype, {m}, std::move(zp)), name + "_W_zero_point");
  } else {
    wzp = rw.add_constant(
        g, byte_tensor(wtype, {}, std::string(1, static_cast<char>(q->zero_point[0]))),
        name + "_W_zero_point");
  }
  std::vector<double> scale(q->scale.begin(), q->scale.end());
  ir::Value* wscale = rw.add_constant(
      g,
      ir::make_float_tensor(TensorProto::FLOAT,
                            groups == 1 ? std::vector<int64_t>{} : channel_shape, scale),
      name + "_W_scale");
  auto add = [&](std::string_view op, const std::vector<ir::Value*>& inputs, size_t outputs) {
    return rw.add_node(g, op, inputs, outputs, &node);
  };
  ir::Node* dql = add("DynamicQuantizeLinear", {x}, 3);
  ir::Node* ci = add("ConvInteger", {dql->output(0), wq, dql->output(2), wzp}, 1);
  for (const auto& a : node.attributes()) rw.set_attr(ci, a);
  ir::Node* cast = add("Cast", {ci->output(0)}, 1);
  rw.set_attr(cast, int_attr("to", TensorProto::FLOAT));
  ir::Node* s = add("Mul", {dql->output(1), wscale}, 1);
  ir::Node* out = add("Mul", {cast->output(0), s->output(0)}, 1);
  if (b) {
    ir::Value* bc = rw.add_constant(
        g, ir::make_float_tensor(TensorProto::FLOAT, channel_shape, b->values), name + "_B");
    out = add("Add", {out->output(0), bc}, 1);
  }
  if (!rw.replace_node(&node, {out->output(0)})) return false;
  cfg.weight_bytes += added;
  return true;
}

// Gather(W, ids) with a constant float32 table W (embeddings): the table is stored quantized per
// tensor and the gathered rows are dequantized, DequantizeLinear(Gather(W_q, ids), scale, zp)
// (the weight error only, no activation quantization): dequantization is elementwise with one
// scale, so it commutes with the gather.
bool quantize_gather(ir::Node& node, Config& cfg, Rewriter& rw) {
  if (excluded_node(node, cfg.exclude_nodes) || node.inputs().size() != 2 ||
      node.outputs().size() != 1 || !node.output(0) || !only_attributes(node, {"axis"}))
    return false;
  ir::Value* table = node.input(0);
  const auto* h = table ? constant_header(table) : nullptr;
  if (!h || h->data_type() != TensorProto::FLOAT || h->dims_size() < 1) return false;
  int64_t count = 1;
  for (int64_t d : h->dims()) {
    if (d <= 0 || d > (int64_t{1} << 40) / count) return false;
    count *= d;
  }
  if (count < cfg.min_elements) return false;
  const uint64_t added = static_cast<uint64_t>(count) + 16;
  if (cfg.max_weight_bytes != 0 && cfg.weight_bytes + added > cfg.max_weight_bytes) return false;
  WeightQuantization per_tensor = cfg.weights;
  per_tensor.per_channel = false;
  std::optional<QuantizedWeight> q;
  std::vector<int64_t> dims;
  {
    auto t = float32_constant(table);  // read in place, released after quantizing
    if (!t || t->size() != count) return false;
    dims = t->dims();
    q = quantize_weight([&](int64_t r, int64_t) { return (*t)[r]; }, count, 1, per_tensor);
  }
  if (!q) return false;
  ir::Graph& g = *node.graph();
  const std::string name = node.output(0)->name();
  const int32_t wtype = cfg.weights.uint8 ? TensorProto::UINT8 : TensorProto::INT8;
  ir::Value* wq =
      rw.add_constant(g, byte_tensor(wtype, dims, std::move(q->bytes)), name + "_W_quantized");
  ir::Value* wzp = rw.add_constant(
      g, byte_tensor(wtype, {}, std::string(1, static_cast<char>(q->zero_point[0]))),
      name + "_W_zero_point");
  ir::Value* ws = rw.add_constant(
      g, ir::make_float_tensor(TensorProto::FLOAT, {}, {static_cast<double>(q->scale[0])}),
      name + "_W_scale");
  ir::Node* gather = rw.add_node(g, "Gather", {wq, node.input(1)}, 1, &node);
  for (const auto& a : node.attributes()) rw.set_attr(gather, a);
  ir::Node* dq = rw.add_node(g, "DequantizeLinear", {gather->output(0), ws, wzp}, 1, &node);
  if (!rw.replace_node(&node, {dq->output(0)})) return false;
  cfg.weight_bytes += added;
  return true;
}

// The rules, configured by the pass's options and limits for one run.
std::vector<Rule> quantize_rules(ir::Model& model, const PassContext& ctx) {
  auto cfg = std::make_shared<Config>();
  cfg->weights.per_channel = ctx.bool_option(kPerChannel);
  cfg->weights.uint8 = ctx.enum_option(kWeightType) == "uint8";
  cfg->weights.reduce_range = !cfg->weights.uint8 && ctx.bool_option(kReduceRange);
  cfg->min_elements = ctx.int_option(kMinWeightElements);
  const std::vector<std::string>& exclude = ctx.list_option(kExcludeOps);
  cfg->skip_matmul = excluded_op(exclude, "MatMul");
  cfg->skip_gemm = excluded_op(exclude, "Gemm");
  cfg->skip_gather = excluded_op(exclude, "Gather");
  cfg->skip_conv = excluded_op(exclude, "Conv");
  cfg->exclude_nodes = ctx.list_option(kExcludeNodes);
  std::sort(cfg->exclude_nodes.begin(), cfg->exclude_nodes.end());  // already sorted; cheap
  cfg->max_weight_bytes = ctx.max_weight_bytes;
  cfg->weight_bytes = model.initializer_bytes();
  // DynamicQuantizeLinear exists from opset 11: an older model is raised first (below).
  std::vector<Rule> rules{
      {"quantize_matmul",
       {"MatMul"},
       [cfg](ir::Node& n, Rewriter& rw) { return quantize_matmul(n, *cfg, rw); },
       "",
       11},
      {"quantize_gemm",
       {"Gemm"},
       [cfg](ir::Node& n, Rewriter& rw) { return quantize_gemm(n, *cfg, rw); },
       "",
       11}};
  if (!cfg->skip_conv)
    rules.push_back({"quantize_conv",
                     {"Conv"},
                     [cfg](ir::Node& n, Rewriter& rw) { return quantize_conv(n, *cfg, rw); },
                     "",
                     11});
  if (!cfg->skip_gather)
    rules.push_back({"quantize_gather",
                     {"Gather"},
                     [cfg](ir::Node& n, Rewriter& rw) { return quantize_gather(n, *cfg, rw); },
                     "",
                     11});
  return rules;
}

// DynamicQuantizeLinear exists from opset 11: a model from opset 7 to 10 is raised (to 13, the
// oldest opset raise_opset writes) inside the pass's checkpoint, and left as it was when nothing
// is quantized; one that cannot be raised is left alone with the reason as a finding.
class QuantizeDynamicInt8 : public RulePass {
 public:
  QuantizeDynamicInt8()
      : RulePass("quantize_dynamic_int8", quantize_rules,
                 {"quantize_matmul", "quantize_gemm", "quantize_conv", "quantize_gather",
                  "raise_opset", kServingCpu}) {}

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override {
    auto run_rules = [&] {
      auto result = RulePass::run(model, ctx);
      note_serving_cpu(ctx, result);
      return result;
    };
    if (model.opset("") >= 11) return run_rules();
    return run_at_opset(model, kMinRaisableOpset, "DynamicQuantizeLinear", ctx.check_transactions,
                        run_rules);
  }
};

}  // namespace

PassInfo quantize_dynamic_int8_pass() {
  return describe<QuantizeDynamicInt8>(
      {.name = "quantize_dynamic_int8",
       .level = 3,
       .lossy = true,
       // Measured on BERT encoders and CNNs (docs/quantization.md): rel 0.007-0.04, cosine
       // >= 0.9998; a result several times worse than that is not what the pass is for.
       .gate = {.max_rel = 0.1, .min_cosine = 0.995},
       .by_name_only = true,
       .description =
           "MatMul/Gemm by a constant float32 2-D weight become DynamicQuantizeLinear + "
           "MatMulInteger (Conv, when asked: ConvInteger) with the weight quantized to 8 bits "
           "(lossy; by name only)",
       .options = {
           boolean_option(kPerChannel, false,
                          "one weight scale per output column (Conv: per output channel) "
                          "instead of per tensor"),
           // uint8 by default: ONNX Runtime's u8s8 (int8 weight) integer products on
           // x86 CPUs without VNNI saturate 16-bit intermediate sums, so its results there
           // differ from the exact int32 products the pipeline measures (4-14x the error
           // on BERT-style models); u8u8 products are exact everywhere.
           enum_option(kWeightType, "uint8", {"int8", "uint8"},
                       "uint8: asymmetric, exact under ONNX Runtime on every x86 CPU; "
                       "int8: symmetric, zero point 0 (ONNX Runtime saturates its "
                       "products on x86 without VNNI unless reduce_range)"),
           // int8 weights in 7 bits: no 16-bit sum of two products reaches saturation, so
           // ONNX Runtime's u8s8 kernels are exact on every x86 CPU, and they are the fast
           // path on CPUs with VNNI (docs/performance.md: 0.34x against uint8's 0.63x on
           // BERT-base at 128 tokens).
           serving_cpu_option(),
           boolean_option(kReduceRange, false,
                          "weight_type=int8 only: weights in [-64, 63] (7 bits), so ONNX "
                          "Runtime's u8s8 products do not saturate on x86 without VNNI, at "
                          "twice the weight rounding"),
           // Below 4096 elements the DynamicQuantizeLinear, Cast and Muls cost more per
           // run than the 8-bit product saves.
           min_weight_elements_option(),
           // Conv by default stays float: with one activation range per tensor,
           // computed at run time, CNN accuracy drops (ONNX Runtime quantizes it by
           // default; here exclude_ops= with no Conv asks for it).
           exclude_ops_option({"Conv"}, {"MatMul", "Gemm", "Gather", "Conv"},
                              "op types left in float (Gather: constant tables such as "
                              "embeddings, otherwise stored in 8 bits with the gathered rows "
                              "dequantized; Conv: ConvInteger per output channel)"),
           exclude_nodes_option()}});
}

}  // namespace graft
