// Folding per-channel affine maps into the op before them. Inference BatchNormalization, a Mul
// by a per-channel constant and an Add of a per-channel constant are all y -> s * y + t per
// channel, so when one directly follows an op that is linear per output channel (Conv,
// ConvTranspose, Gemm, 2-D MatMul with constant weights) it can be folded into that op's weights
// and bias (weights.h), saving a full pass over the activations at run time.
//
// The folded weights always go into NEW constants: the original ones may be shared by other
// nodes. The affine node's output value (and so its name, which may be a graph output) is kept:
// the fused node produces it. The op's output must have no other reader.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/passes/passes.h"
#include "core/passes/rules.h"
#include "core/passes/weights.h"

namespace graft {

namespace {

// The per-channel map y = scale * x + shift an inference BatchNormalization computes.
struct ChannelAffine {
  std::vector<double> scale;
  std::vector<double> shift;
};

// Reads `bn` as an inference-mode BN over `channels` channels, or nullopt if it is anything else
// (training mode, per-activation statistics, extra outputs, non-constant statistics...).
std::optional<ChannelAffine> inference_batchnorm(const ir::Node& bn, int64_t channels) {
  const int64_t opset = bn.opset();
  if (opset < 1 || bn.inputs().size() != 5) return no_match(bn, "not five inputs");
  // Extra outputs (running or saved statistics) only exist in training mode.
  if (!bn.output(0)) return std::nullopt;
  for (size_t i = 1; i < bn.outputs().size(); ++i)
    if (bn.output(i)) return no_match(bn, "training mode (extra outputs)");
  for (const auto& a : bn.attributes()) {
    const std::string& name = a.name();
    if (name == "epsilon" || name == "momentum") continue;
    if (name == "consumed_inputs" && opset < 6) continue;
    if (name == "is_test" && opset < 7) continue;
    if (name == "spatial" && opset < 9) continue;
    if (name == "training_mode" && opset >= 14) continue;
    return no_match(bn, "an attribute the fold does not handle");
  }
  // Before opset 7 the default is training mode; later the outputs (checked above) decide, and
  // from opset 14 the attribute does too.
  if (opset < 7 && bn.attr_int("is_test", 0) == 0) return no_match(bn, "training mode");
  if (opset < 9 && bn.attr_int("spatial", 1) != 1) return no_match(bn, "spatial = 0");
  if (opset >= 14 && bn.attr_int("training_mode", 0) != 0) return no_match(bn, "training mode");
  const auto* eps_attr = bn.attr("epsilon");
  if (eps_attr && !eps_attr->has_f())  // e.g. an attribute reference
    return no_match(bn, "epsilon is not a float value");
  const double epsilon = bn.attr_float("epsilon", 1e-5f);

  std::vector<double> params[4];  // scale, bias, mean, var
  for (int i = 0; i < 4; ++i) {
    auto c = float_constant(bn.input(i + 1));
    if (!c || c->dims != std::vector<int64_t>{channels})
      return no_match(bn, "scale, B, mean and var are not constants of the op's channel count");
    params[i] = std::move(c->values);
  }
  ChannelAffine out;
  out.scale.resize(channels);
  out.shift.resize(channels);
  for (int64_t c = 0; c < channels; ++c) {
    const double denom = params[3][c] + epsilon;
    if (!(denom > 0) || !std::isfinite(denom))
      return no_match(bn, "var + epsilon is not positive and finite in every channel");
    out.scale[c] = params[0][c] / std::sqrt(denom);
    out.shift[c] = params[1][c] - params[2][c] * out.scale[c];
  }
  return out;
}

// The linear op producing `v` when nothing else reads its output, in `reader`'s graph.
std::optional<LinearOp> linear_producer(const ir::Value* v, const ir::Node& reader) {
  if (!single_use(v)) return std::nullopt;
  ir::Node* p = v->producer();
  if (!p || p->dead() || p->graph() != reader.graph()) return std::nullopt;
  return read_linear(*p);
}

// Replaces `affine` (whose output is op's output mapped per channel) by the folded op.
bool fold(Rewriter& rw, ir::Node& affine, const LinearOp& op, const std::vector<double>& scale,
          const std::vector<double>& shift) {
  ir::Value* folded = fold_channel_affine(rw, op, scale, shift);
  if (!folded || !rw.replace_node(&affine, {folded})) return false;
  rw.erase(op.node);  // a MatMul replaced by a Gemm
  return true;
}

bool batchnorm(ir::Node& bn, Rewriter& rw) {
  if (!bn.output(0) || bn.output(0)->use_count() == 0) return false;  // prune's business
  auto op = linear_producer(bn.input(0), bn);
  if (!op)
    return no_match(bn,
                    "X is not the only use of a Conv, ConvTranspose, Gemm or 2-D MatMul with "
                    "constant weights in the same graph");
  auto affine = inference_batchnorm(bn, op->channels);
  return affine && fold(rw, bn, *op, affine->scale, affine->shift);
}

// Mul(y, c) and Add(y, c) with c constant per output channel.
bool scale_or_shift(ir::Node& n, Rewriter& rw) {
  // Before opset 7 broadcasting needs attributes; those nodes are left alone.
  if (n.opset() < 7 || !n.attributes().empty() || n.inputs().size() != 2) return false;
  for (int side = 0; side < 2; ++side) {
    auto op = linear_producer(n.input(side), n);
    if (!op) continue;
    // MatMul + Add is fuse_matmul_add's: it reuses the bias constant as Gemm's C, where a fold
    // would write a copy for dedup_initializers to merge in one more pipeline round.
    if (op->kind == LinearOp::kMatMul && n.op_type() == "Add") continue;
    auto c = per_channel(*op, n.input(1 - side));
    if (!c) continue;
    if (n.op_type() == "Mul") return fold(rw, n, *op, *c, {});
    return fold(rw, n, *op, std::vector<double>(c->size(), 1.0), *c);
  }
  return false;
}

std::vector<Rule> affine_rules() {
  return {{"batchnorm", {"BatchNormalization"}, batchnorm},
          {"mul_scale", {"Mul"}, scale_or_shift},
          {"add_bias", {"Add"}, scale_or_shift}};
}

}  // namespace

PassInfo fuse_conv_batchnorm_pass() {
  return describe(
      {.name = "fuse_conv_batchnorm",
       .level = 2,
       .description =
           "fold inference BatchNormalization, and Mul or Add of a per-channel constant, into a "
           "preceding Conv/ConvTranspose/Gemm/MatMul (MatMul + Add is fuse_matmul_add's); a "
           "constant-mode Pad into the Conv/AveragePool/MaxPool it feeds",
       .options = {}},
      {affine_rules, pad_fusion_rules});
}

}  // namespace graft
