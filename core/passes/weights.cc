#include "core/passes/weights.h"

#include <cmath>
#include <cstring>

#include <absl/strings/str_cat.h>

#include "core/ir/tensor.h"

namespace graft {

namespace {

bool read_conv(LinearOp& op) {
  ir::Node& n = *op.node;
  const bool transpose = op.kind == LinearOp::kConvTranspose;
  if (transpose ? !only_attributes(n, {"auto_pad", "dilations", "group", "kernel_shape",
                                       "output_padding", "output_shape", "pads", "strides"})
                : !only_attributes(
                      n, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}))
    return false;
  if (n.inputs().size() < 2 || n.inputs().size() > 3) return false;
  auto w = float_constant_type(n.input(1));
  if (!w || w->dims.size() < 3) return false;
  const int64_t group = n.attr_int("group", 1);
  if (group < 1) return false;
  // Conv: W [M, C/group, k...], output channel m is W's axis 0. ConvTranspose: W [C, M/group,
  // k...]; W[c, j] feeds output channel (c / (C/group)) * M/group + j.
  int64_t channels = w->dims[0];
  if (transpose) {
    if (w->dims[0] % group != 0) return false;
    channels = w->dims[1] * group;
  }
  if (channels <= 0) return false;
  if (n.input(2)) {
    op.bias = float_constant(n.input(2));
    if (!op.bias || op.bias->dims != std::vector<int64_t>{channels} || op.bias->dtype != w->dtype)
      return false;
  }
  op.channels = channels;
  op.output_rank = static_cast<int64_t>(w->dims.size());
  op.channel_axis = 1;
  op.weight = std::move(*w);
  return true;
}

bool read_gemm(LinearOp& op) {
  ir::Node& n = *op.node;
  // Before opset 7, C broadcasting needs the `broadcast` attribute; leave those alone.
  if (n.opset() < 7 || !only_attributes(n, {"alpha", "beta", "transA", "transB"})) return false;
  if (n.inputs().size() < 2 || n.inputs().size() > 3) return false;
  for (const char* name : {"alpha", "beta"})
    if (n.attr(name) && !n.attr(name)->has_f()) return false;
  for (const char* name : {"transA", "transB"})
    if (n.attr(name) && !n.attr(name)->has_i()) return false;
  auto b = float_constant_type(n.input(1));
  if (!b || b->dims.size() != 2) return false;
  const int64_t cols = n.attr_int("transB", 0) ? b->dims[0] : b->dims[1];
  if (cols <= 0) return false;
  if (n.input(2)) {
    // C as rows x cols with cols in {1, N}: scalar, [1], [N], [1, N], [R, 1], [R, N].
    op.bias = float_constant(n.input(2));
    if (!op.bias || op.bias->dims.size() > 2 || op.bias->dtype != b->dtype) return false;
    const int64_t c_cols = op.bias->dims.empty() ? 1 : op.bias->dims.back();
    const int64_t c_rows = op.bias->dims.size() == 2 ? op.bias->dims[0] : 1;
    if (c_rows < 1 || (c_cols != 1 && c_cols != cols)) return false;
  }
  op.channels = cols;
  op.output_rank = 2;
  op.channel_axis = 1;
  op.weight = std::move(*b);
  return true;
}

bool read_matmul(LinearOp& op) {
  ir::Node& n = *op.node;
  if (n.opset() < 7 || !n.attributes().empty() || n.inputs().size() != 2 || !n.input(0))
    return false;
  // With a higher-rank A the output's channel axis is still W's columns, but Gemm (which the
  // folded MatMul becomes) only takes 2-D operands.
  if (n.input(0)->rank() != 2) return false;
  auto w = float_constant_type(n.input(1));
  if (!w || w->dims.size() != 2 || w->dims[1] <= 0) return false;
  const int32_t a_type = n.input(0)->elem_type();
  if (a_type != 0 && a_type != w->dtype) return false;
  op.channels = w->dims[1];
  op.output_rank = 2;
  op.channel_axis = 1;
  op.weight = std::move(*w);
  return true;
}

// The name hint for a folded version of `v`.
std::string folded_name(const ir::Value* v, const char* suffix) {
  return absl::StrCat(v->name(), suffix);
}

}  // namespace

std::optional<LinearOp> read_linear(ir::Node& node) {
  LinearOp op;
  op.node = &node;
  bool ok = false;
  if (node.is("Conv")) {
    op.kind = LinearOp::kConv;
    ok = read_conv(op);
  } else if (node.is("ConvTranspose")) {
    op.kind = LinearOp::kConvTranspose;
    ok = read_conv(op);
  } else if (node.is("Gemm")) {
    op.kind = LinearOp::kGemm;
    ok = read_gemm(op);
  } else if (node.is("MatMul")) {
    op.kind = LinearOp::kMatMul;
    ok = read_matmul(op);
  }
  if (!ok || node.outputs().size() != 1 || !node.output(0)) return std::nullopt;
  return op;
}

std::optional<std::vector<double>> per_channel(const LinearOp& op, const ir::Value* v) {
  auto c = float_constant(v);
  if (!c || c->dtype != op.weight.dtype) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(c->dims.size());
  if (rank > op.output_rank) return std::nullopt;
  // Aligned from the right: the channel axis may be C or 1, every other axis 1.
  int64_t along = 1;
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t axis = op.output_rank - rank + i;
    const int64_t d = c->dims[static_cast<size_t>(i)];
    if (axis == op.channel_axis && (d == op.channels || d == 1))
      along = d;
    else if (d != 1)
      return std::nullopt;
  }
  std::vector<double> out(static_cast<size_t>(op.channels));
  for (int64_t ch = 0; ch < op.channels; ++ch)
    out[static_cast<size_t>(ch)] = c->values[along == 1 ? 0 : static_cast<size_t>(ch)];
  return out;
}

namespace {

// Calls f(offset, count, channel) for each run of W's elements (row-major) that belong to one
// output channel; false if W's dims do not describe a layout (an overflowing element count).
template <typename F>
bool for_each_channel_run(const LinearOp& op, F&& f) {
  const std::vector<int64_t>& dims = op.weight.dims;
  if (op.kind == LinearOp::kConv || op.kind == LinearOp::kConvTranspose) {
    // Elements per W[i, j] (the kernel window) and per W[i]. Beside a zero dim the others'
    // product can overflow even though the tensor is valid (and empty).
    const auto window = ir::element_count(std::vector<int64_t>(dims.begin() + 2, dims.end()));
    const auto row_size = window ? ir::element_count({dims[1], *window}) : std::nullopt;
    if (!row_size) return false;
    // Conv: a row of W is output channel `row`.
    if (op.kind == LinearOp::kConv) {
      for (int64_t row = 0; row < dims[0]; ++row) f(row * *row_size, *row_size, row);
      return true;
    }
    // ConvTranspose: W[row, j] is a window of `window` elements of channel j within the row's
    // group.
    const int64_t in_per_group = dims[0] / op.node->attr_int("group", 1);
    for (int64_t row = 0; row < dims[0]; ++row)
      for (int64_t j = 0; j < dims[1]; ++j)
        f(row * *row_size + j * *window, *window, (row / in_per_group) * dims[1] + j);
    return true;
  }
  if (op.kind == LinearOp::kGemm && op.node->attr_int("transB", 0) != 0) {
    // B' = B^T: channel n is row n of B.
    for (int64_t r = 0; r < dims[0]; ++r) f(r * dims[1], dims[1], r);
    return true;
  }
  // Gemm without transB and MatMul: channel n is column n of B.
  for (int64_t r = 0; r < dims[0]; ++r)
    for (int64_t col = 0; col < dims[1]; ++col) f(r * dims[1] + col, int64_t{1}, col);
  return true;
}

// W with each element multiplied by its output channel's scale: the product is computed in
// double and rounded once to W's type. nullopt when W's payload does not match its dims or a
// product does not fit the type (e.g. a float16 weight times a large scale would be stored as an
// infinity and change finite outputs).
std::optional<onnx::TensorProto> scaled_weight(const LinearOp& op,
                                               const std::vector<double>& scale) {
  const FloatConstantType& w = op.weight;
  const auto count = ir::element_count(w.dims);
  if (!count) return std::nullopt;
  auto t = constant_proto(op.node->input(1), kMaxExternalWeightBytes);
  if (t && w.dtype == onnx::TensorProto::FLOAT &&
      t->data_location() == onnx::TensorProto::DEFAULT &&
      t->raw_data().size() == static_cast<size_t>(*count) * sizeof(float)) {
    // The common case, without a round trip through doubles: the same arithmetic.
    std::vector<float> values(static_cast<size_t>(*count));
    if (!values.empty()) std::memcpy(values.data(), t->raw_data().data(), t->raw_data().size());
    const bool laid_out = for_each_channel_run(op, [&](int64_t offset, int64_t n, int64_t channel) {
      const double s = scale[static_cast<size_t>(channel)];
      float* p = values.data() + offset;
      for (int64_t k = 0; k < n; ++k) p[k] = static_cast<float>(static_cast<double>(p[k]) * s);
    });
    if (!laid_out) return std::nullopt;
    for (float v : values)
      if (!std::isfinite(v)) return std::nullopt;  // an overflow (or a NaN or infinite weight)
    return ir::make_float32_tensor(w.dims, values);
  }
  t = ir::LoadedTensor();  // an external payload is not held twice
  auto decoded = float_constant(op.node->input(1));
  if (!decoded || static_cast<int64_t>(decoded->values.size()) != *count) return std::nullopt;
  std::vector<double>& values = decoded->values;
  if (!for_each_channel_run(op, [&](int64_t offset, int64_t n, int64_t channel) {
        const double s = scale[static_cast<size_t>(channel)];
        for (int64_t k = 0; k < n; ++k) values[static_cast<size_t>(offset + k)] *= s;
      }))
    return std::nullopt;
  if (!ir::fits_float_type(w.dtype, values)) return std::nullopt;
  return ir::make_float_tensor(w.dtype, w.dims, values);
}

}  // namespace

ir::Value* fold_channel_affine(Rewriter& rw, const LinearOp& op, const std::vector<double>& scale,
                               const std::vector<double>& shift) {
  const FloatConstantType& w = op.weight;
  const int64_t channels = op.channels;
  auto shift_of = [&](int64_t c) { return shift.empty() ? 0.0 : shift[static_cast<size_t>(c)]; };
  ir::Node& n = *op.node;
  // A pure shift leaves the weights as they are (and does not decode them).
  bool unit = true;
  for (double s : scale) unit = unit && s == 1.0;
  std::optional<onnx::TensorProto> weight;
  if (!unit && !(weight = scaled_weight(op, scale))) return nullptr;

  std::vector<double> bias;
  std::vector<int64_t> bias_dims{channels};
  if (op.kind == LinearOp::kConv || op.kind == LinearOp::kConvTranspose) {
    bias.resize(static_cast<size_t>(channels));
    for (int64_t m = 0; m < channels; ++m)
      bias[static_cast<size_t>(m)] = (op.bias ? op.bias->values[static_cast<size_t>(m)] : 0.0) *
                                         scale[static_cast<size_t>(m)] +
                                     shift_of(m);
  } else if (op.kind == LinearOp::kGemm) {
    // Y = alpha * A' * B' + beta * C; channel n is column n of B' and of beta * C. beta goes
    // into the new C, so the Gemm's beta becomes 1.
    const double beta = n.attr_float("beta", 1.0f);
    int64_t c_rows = 1, c_cols = 1;
    if (op.bias) {
      if (!op.bias->dims.empty()) c_cols = op.bias->dims.back();
      if (op.bias->dims.size() == 2) c_rows = op.bias->dims[0];
    }
    bias.resize(static_cast<size_t>(c_rows * channels));
    for (int64_t r = 0; r < c_rows; ++r)
      for (int64_t c = 0; c < channels; ++c) {
        const double cv =
            op.bias ? op.bias->values[static_cast<size_t>(r * c_cols + (c_cols == 1 ? 0 : c))]
                    : 0.0;
        bias[static_cast<size_t>(r * channels + c)] =
            beta * cv * scale[static_cast<size_t>(c)] + shift_of(c);
      }
    if (c_rows != 1) bias_dims = {c_rows, channels};
  } else {
    bias.resize(static_cast<size_t>(channels));
    for (int64_t c = 0; c < channels; ++c) bias[static_cast<size_t>(c)] = shift_of(c);
  }
  // Computed in double; one that does not fit the weights' type would be stored as an infinity.
  if (!ir::fits_float_type(w.dtype, bias)) return nullptr;

  ir::Graph& g = *n.graph();
  ir::Value* old_w = n.input(1);
  ir::Value* old_b = n.input(2);
  ir::Value* new_w =
      unit ? old_w : rw.add_constant(g, std::move(*weight), folded_name(old_w, "_scaled"));
  ir::Value* new_b =
      rw.add_constant(g, ir::make_float_tensor(w.dtype, bias_dims, bias),
                      old_b ? folded_name(old_b, "_shifted") : folded_name(old_w, "_bias"));
  if (op.kind == LinearOp::kMatMul) {
    ir::Node* gemm = rw.add_node(g, "Gemm", {n.input(0), new_w, new_b}, 1, &n);
    return gemm->output(0);  // the MatMul goes once the caller's replacement leaves it unread
  }
  rw.set_input(&n, 1, new_w);
  rw.set_input(&n, 2, new_b);
  if (op.kind == LinearOp::kGemm) rw.remove_attr(&n, "beta");
  rw.erase_if_unused(old_w);
  rw.erase_if_unused(old_b);
  return n.output(0);
}

std::optional<std::pair<int64_t, int64_t>> constant_matrix_dims(const ir::Value* w,
                                                                int64_t min_elements) {
  const auto* h = w ? constant_header(w) : nullptr;
  if (!h || h->data_type() != onnx::TensorProto::FLOAT || h->dims_size() != 2) return std::nullopt;
  const int64_t rows = h->dims(0), cols = h->dims(1);
  if (rows <= 0 || cols <= 0 || rows > (int64_t{1} << 40) / cols) return std::nullopt;
  if (rows * cols < min_elements) return std::nullopt;
  if (ir::is_external(*h) && !ir::external_data_of(w)) return std::nullopt;
  return std::pair<int64_t, int64_t>{rows, cols};
}

std::optional<WeightRef> read_matmul_weight(ir::Value* w, bool trans_b, int64_t min_elements) {
  WeightRef ref;
  ref.source = w;
  ref.transposed = trans_b;
  if (ir::Node* t = producer(w, "Transpose"); t && !trans_b) {
    auto perm = transpose_perm(*t, 2);
    if (!perm || *perm != std::vector<int64_t>{1, 0} || !t->input(0)) return std::nullopt;
    ref.source = t->input(0);
    ref.transposed = true;
    ref.transpose = t;
  }
  auto dims = constant_matrix_dims(ref.source, min_elements);
  if (!dims) return std::nullopt;
  ref.k = ref.transposed ? dims->second : dims->first;
  ref.n = ref.transposed ? dims->first : dims->second;
  return ref;
}

}  // namespace graft
