// Inference BatchNormalization is a per-channel affine map y = s * x + t, so when it directly
// follows an op that is linear per output channel (Conv, ConvTranspose, Gemm, 2-D MatMul with
// constant weights) it can be folded into that op's weights and bias, saving a full pass over the
// activations at run time.
//
// The folded weights always go into NEW initializers: the original ones may be shared by other
// nodes. The BN's output value (and so its name, which may be a graph output) is kept: the fused
// node produces it.
#include <cmath>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "core/ir/tensor.h"
#include "core/passes/passes.h"

namespace graft {

namespace {

using onnx::TensorProto;

bool is_float_type(int32_t t) {
  return t == TensorProto::FLOAT || t == TensorProto::DOUBLE || t == TensorProto::FLOAT16;
}

// A constant with a float payload we can read and rewrite in the same data type.
struct Constant {
  int32_t dtype = 0;
  std::vector<int64_t> dims;
  std::vector<double> values;
};

std::optional<Constant> read_constant(const ir::Value* v) {
  if (!v || !v->is_constant() || !is_float_type(v->initializer()->data_type())) return std::nullopt;
  auto values = ir::read_doubles(*v->initializer());
  if (!values) return std::nullopt;  // external data or a malformed payload
  const auto& t = *v->initializer();
  return Constant{t.data_type(), std::vector<int64_t>(t.dims().begin(), t.dims().end()),
                  std::move(*values)};
}

// Rank from the initializer or the declared type; symbolic dims still count toward the rank.
std::optional<int> known_rank(const ir::Value* v) {
  if (!v) return std::nullopt;
  if (v->initializer()) return v->initializer()->dims_size();
  const onnx::TypeProto* t = v->type();
  if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) return std::nullopt;
  return t->tensor_type().shape().dim_size();
}

// Fused parameters are computed in double; one that does not fit the weights' type would be
// stored as an infinity (e.g. a float16 weight times a large BN scale) and change finite outputs.
bool fits(int32_t dtype, std::initializer_list<const std::vector<double>*> parameters) {
  for (const auto* values : parameters)
    if (!ir::fits_float_type(dtype, *values)) return false;
  return true;
}

bool only_attrs(const ir::Node& n, std::initializer_list<std::string_view> allowed) {
  for (const auto& a : n.attributes()) {
    bool known = false;
    for (std::string_view name : allowed) known = known || a.name() == name;
    if (!known) return false;
  }
  return true;
}

// The per-channel map y = scale * x + shift an inference BatchNormalization computes.
struct ChannelAffine {
  std::vector<double> scale;
  std::vector<double> shift;
};

// Reads `bn` as an inference-mode BN over `channels` channels, or nullopt if it is anything else
// (training mode, per-activation statistics, extra outputs, non-constant statistics...).
std::optional<ChannelAffine> inference_batchnorm(const ir::Node& bn, int64_t channels) {
  const int64_t opset = bn.opset();
  if (opset < 1 || bn.inputs().size() != 5) return std::nullopt;
  // Extra outputs (running or saved statistics) only exist in training mode.
  if (!bn.output(0)) return std::nullopt;
  for (size_t i = 1; i < bn.outputs().size(); ++i)
    if (bn.output(i)) return std::nullopt;
  for (const auto& a : bn.attributes()) {
    const std::string& name = a.name();
    if (name == "epsilon" || name == "momentum") continue;
    if (name == "consumed_inputs" && opset < 6) continue;
    if (name == "is_test" && opset < 7) continue;
    if (name == "spatial" && opset < 9) continue;
    if (name == "training_mode" && opset >= 14) continue;
    return std::nullopt;
  }
  // Before opset 7 the default is training mode; later the outputs (checked above) decide, and
  // from opset 14 the attribute does too.
  if (opset < 7 && bn.attr_int("is_test", 0) == 0) return std::nullopt;
  if (opset < 9 && bn.attr_int("spatial", 1) != 1) return std::nullopt;
  if (opset >= 14 && bn.attr_int("training_mode", 0) != 0) return std::nullopt;
  const auto* eps_attr = bn.attr("epsilon");
  if (eps_attr && !eps_attr->has_f()) return std::nullopt;  // e.g. an attribute reference
  const double epsilon = bn.attr_float("epsilon", 1e-5f);

  std::vector<double> params[4];  // scale, bias, mean, var
  for (int i = 0; i < 4; ++i) {
    auto c = read_constant(bn.input(i + 1));
    if (!c || c->dims != std::vector<int64_t>{channels}) return std::nullopt;
    params[i] = std::move(c->values);
  }
  ChannelAffine out;
  out.scale.resize(channels);
  out.shift.resize(channels);
  for (int64_t c = 0; c < channels; ++c) {
    const double denom = params[3][c] + epsilon;
    if (!(denom > 0) || !std::isfinite(denom)) return std::nullopt;
    out.scale[c] = params[0][c] / std::sqrt(denom);
    out.shift[c] = params[1][c] - params[2][c] * out.scale[c];
  }
  return out;
}

class FuseConvBatchnorm final : public Pass {
 public:
  std::string_view name() const override { return "fuse_conv_batchnorm"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    PassResult result;
    // New initializers that are not graph inputs are only valid from IR version 4 on.
    if (model.rest().ir_version() < 4) return result;
    for (ir::Graph* g : model.all_graphs()) {
      for (ir::Node* bn : g->nodes()) {
        if (bn->dead() || !bn->is("BatchNormalization")) continue;
        if (fuse(*g, bn)) result.add();
      }
    }
    return result;
  }

 private:
  bool fuse(ir::Graph& g, ir::Node* bn) {
    ir::Value* x = bn->input(0);
    ir::Value* y = bn->output(0);
    if (!x || !y || y->use_count() == 0) return false;  // a dead BN is prune's business
    ir::Node* producer = x->producer();
    if (!producer || producer->dead() || producer->graph() != &g) return false;
    // The pre-BN activation must not be observable anywhere else.
    if (x->uses().size() != 1 || x->is_graph_output() || producer->outputs().size() != 1)
      return false;
    if (producer->is("Conv") || producer->is("ConvTranspose")) return fold_conv(g, producer, bn);
    if (producer->is("Gemm")) return fold_gemm(g, producer, bn);
    if (producer->is("MatMul")) return fold_matmul(g, producer, bn);
    return false;
  }

  // Conv: W [M, C/group, k...], output channel m is W's axis 0.
  // ConvTranspose: W [C, M/group, k...]; W[c, j] feeds output channel
  // (c / (C/group)) * M/group + j.
  bool fold_conv(ir::Graph& g, ir::Node* conv, ir::Node* bn) {
    const bool transpose = conv->is("ConvTranspose");
    if (transpose ? !only_attrs(*conv, {"auto_pad", "dilations", "group", "kernel_shape",
                                        "output_padding", "output_shape", "pads", "strides"})
                  : !only_attrs(*conv, {"auto_pad", "dilations", "group", "kernel_shape", "pads",
                                        "strides"}))
      return false;
    if (conv->inputs().size() < 2 || conv->inputs().size() > 3) return false;
    auto w = read_constant(conv->input(1));
    if (!w || w->dims.size() < 3) return false;
    const int64_t group = conv->attr_int("group", 1);
    if (group < 1) return false;
    int64_t out_channels = w->dims[0];
    int64_t in_per_group = 0;
    if (transpose) {
      if (w->dims[0] % group != 0) return false;
      in_per_group = w->dims[0] / group;
      out_channels = w->dims[1] * group;
    }
    if (out_channels <= 0) return false;
    std::optional<Constant> b;
    if (conv->input(2)) {
      b = read_constant(conv->input(2));
      if (!b || b->dims != std::vector<int64_t>{out_channels}) return false;
    }
    auto affine = inference_batchnorm(*bn, out_channels);
    if (!affine) return false;

    // Elements per W[i, j] slice (the kernel window).
    int64_t window = 1;
    for (size_t d = 2; d < w->dims.size(); ++d) window *= w->dims[d];
    const int64_t per_row = w->dims[1] * window;  // elements per W[i]
    std::vector<double> folded = w->values;
    for (size_t i = 0; i < folded.size(); ++i) {
      const int64_t row = static_cast<int64_t>(i) / per_row;
      int64_t channel = row;
      if (transpose) {
        const int64_t j = (static_cast<int64_t>(i) % per_row) / window;
        channel = (row / in_per_group) * w->dims[1] + j;
      }
      folded[i] *= affine->scale[channel];
    }
    std::vector<double> bias(out_channels);
    for (int64_t m = 0; m < out_channels; ++m)
      bias[m] = (b ? b->values[m] : 0.0) * affine->scale[m] + affine->shift[m];

    if (!fits(w->dtype, {&folded, &bias})) return false;
    ir::Value* old_w = conv->input(1);
    ir::Value* old_b = conv->input(2);
    conv->set_input(1, g.add_initializer(old_w->name() + "_bn",
                                         ir::make_float_tensor(w->dtype, w->dims, folded)));
    conv->set_input(2, g.add_initializer(old_b ? old_b->name() + "_bn" : old_w->name() + "_bias",
                                         ir::make_float_tensor(w->dtype, {out_channels}, bias)));
    replace_bn(g, conv, bn, {old_w, old_b});
    return true;
  }

  // Gemm: Y = alpha * A' * B' + beta * C with Y [M, N]; BN scales column n of Y, which is
  // column n of B' (row n of B when transB) and column n of beta * C.
  bool fold_gemm(ir::Graph& g, ir::Node* gemm, ir::Node* bn) {
    // Before opset 7, C broadcasting needs the `broadcast` attribute; leave those alone.
    if (gemm->opset() < 7 || !only_attrs(*gemm, {"alpha", "beta", "transA", "transB"}))
      return false;
    if (gemm->inputs().size() < 2 || gemm->inputs().size() > 3) return false;
    for (const char* name : {"alpha", "beta"})
      if (gemm->attr(name) && !gemm->attr(name)->has_f()) return false;
    for (const char* name : {"transA", "transB"})
      if (gemm->attr(name) && !gemm->attr(name)->has_i()) return false;
    const bool trans_b = gemm->attr_int("transB", 0) != 0;
    auto b = read_constant(gemm->input(1));
    if (!b || b->dims.size() != 2) return false;
    const int64_t n_cols = trans_b ? b->dims[0] : b->dims[1];
    if (n_cols <= 0) return false;

    // C, if present, as rows x cols with cols in {1, N}: scalar, [1], [N], [1, N], [R, 1], [R, N].
    std::optional<Constant> c;
    int64_t c_rows = 1, c_cols = 1;
    if (gemm->input(2)) {
      c = read_constant(gemm->input(2));
      if (!c || c->dims.size() > 2) return false;
      if (!c->dims.empty()) c_cols = c->dims.back();
      if (c->dims.size() == 2) c_rows = c->dims[0];
      if (c_rows < 1 || (c_cols != 1 && c_cols != n_cols)) return false;
    }
    auto affine = inference_batchnorm(*bn, n_cols);
    if (!affine) return false;
    const double beta = gemm->attr_float("beta", 1.0f);

    std::vector<double> folded_b = b->values;
    for (int64_t r = 0; r < b->dims[0]; ++r)
      for (int64_t col = 0; col < b->dims[1]; ++col)
        folded_b[r * b->dims[1] + col] *= affine->scale[trans_b ? r : col];
    // beta is folded into the new C, so the Gemm's beta becomes 1.
    std::vector<double> folded_c(c_rows * n_cols);
    for (int64_t r = 0; r < c_rows; ++r) {
      for (int64_t n = 0; n < n_cols; ++n) {
        const double cv = c ? c->values[r * c_cols + (c_cols == 1 ? 0 : n)] : 0.0;
        folded_c[r * n_cols + n] = beta * cv * affine->scale[n] + affine->shift[n];
      }
    }
    std::vector<int64_t> c_dims =
        c_rows == 1 ? std::vector<int64_t>{n_cols} : std::vector<int64_t>{c_rows, n_cols};

    if (!fits(b->dtype, {&folded_b, &folded_c})) return false;
    ir::Value* old_b = gemm->input(1);
    ir::Value* old_c = gemm->input(2);
    gemm->set_input(1, g.add_initializer(old_b->name() + "_bn",
                                         ir::make_float_tensor(b->dtype, b->dims, folded_b)));
    gemm->set_input(2, g.add_initializer(old_c ? old_c->name() + "_bn" : old_b->name() + "_bias",
                                         ir::make_float_tensor(b->dtype, c_dims, folded_c)));
    gemm->remove_attr("beta");
    replace_bn(g, gemm, bn, {old_b, old_c});
    return true;
  }

  // MatMul(A [M, K], W [K, N]) + BN over axis 1 (= N only because the product is 2-D) becomes
  // Gemm(A, W * s, t). With a higher-rank A, BN's channel axis is not W's column axis.
  bool fold_matmul(ir::Graph& g, ir::Node* matmul, ir::Node* bn) {
    if (matmul->opset() < 7 || !matmul->attributes().empty() || matmul->inputs().size() != 2)
      return false;
    ir::Value* a = matmul->input(0);
    if (!a) return false;
    const auto a_rank = known_rank(a);
    const auto y_rank = known_rank(matmul->output(0));
    if (!(a_rank == 2 || (!a_rank && y_rank == 2))) return false;
    auto w = read_constant(matmul->input(1));
    if (!w || w->dims.size() != 2 || w->dims[1] <= 0) return false;
    if (a->elem_type() != 0 && a->elem_type() != w->dtype) return false;
    const int64_t n_cols = w->dims[1];
    auto affine = inference_batchnorm(*bn, n_cols);
    if (!affine) return false;

    std::vector<double> folded = w->values;
    for (size_t i = 0; i < folded.size(); ++i) folded[i] *= affine->scale[i % n_cols];
    if (!fits(w->dtype, {&folded, &affine->shift})) return false;
    ir::Value* old_w = matmul->input(1);
    ir::Value* new_w =
        g.add_initializer(old_w->name() + "_bn", ir::make_float_tensor(w->dtype, w->dims, folded));
    ir::Value* bias = g.add_initializer(old_w->name() + "_bias",
                                        ir::make_float_tensor(w->dtype, {n_cols}, affine->shift));
    ir::Node* gemm = g.add_node("Gemm", {a, new_w, bias}, {bn->output(0)->name()});
    replace_bn(g, gemm, bn, {old_w});
    g.remove_node(matmul);
    return true;
  }

  // Makes `fused` produce the BN's output value in place of its own output, removes the BN and
  // drops constants nothing uses any more.
  static void replace_bn(ir::Graph& g, ir::Node* fused, ir::Node* bn,
                         std::vector<ir::Value*> dropped) {
    ir::Value* y = bn->output(0);
    for (size_t i = 1; i < bn->inputs().size(); ++i) dropped.push_back(bn->input(i));
    // Removing the BN first leaves `y` alive (it still has uses) without a producer, and the
    // fused node's old output without uses.
    g.remove_node(bn);
    g.move_output_name(fused, 0, y);
    for (ir::Value* v : dropped)
      if (v && !v->dead() && v->is_constant() && v->use_count() == 0) v->owner()->remove_value(v);
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_conv_batchnorm() { return std::make_unique<FuseConvBatchnorm>(); }

PassInfo fuse_conv_batchnorm_pass() {
  return {.name = "fuse_conv_batchnorm",
          .level = 2,
          .description =
              "fold inference BatchNormalization into a preceding Conv/ConvTranspose/Gemm/MatMul",
          .options = {},
          .create = make_fuse_conv_batchnorm};
}

}  // namespace graft
