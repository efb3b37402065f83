// Older opset versions of common ops, forwarded to the current kernels, and simple ops that
// old exporters use: inverse/hyperbolic trigonometry, Softsign, IsNaN/IsInf, ThresholdedRelu,
// Shrink, Celu, PRelu, Hardmax, InstanceNormalization, LRN, MeanVarianceNormalization.
//
// Forwarding: before opset 6 element-wise ops carried a `consumed_inputs` attribute (an
// in-place hint without effect on values), and before opset 7 binary ops broadcast only with
// `broadcast = 1`, aligning B with A's dims from `axis` (default: trailing). Those versions
// reshape B into numpy-broadcastable form and call the opset-7 kernel.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>

#include "core/eval/broadcast.h"
#include "core/eval/kernel.h"
#include "core/eval/kernels.h"
#include "core/eval/kernels/common.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

absl::StatusOr<const Tensor*> float_input(const KernelContext& ctx, size_t i) {
  const Tensor* t = ctx.input(i);
  if (t == nullptr) return invalid(ctx, absl::StrCat("missing input ", i));
  if (!is_float_type(t->dtype())) return unimplemented(ctx, "non-float element type");
  return t;
}

// Runs the kernel registered for this op at opset `target` on the same node and inputs.
absl::Status forward(KernelContext& ctx, int target, std::vector<const Tensor*> inputs) {
  const Kernel* kernel = find_kernel(ctx.node.op_type(), "", target);
  if (kernel == nullptr) return unimplemented(ctx, "no kernel to forward to");
  KernelContext inner{ctx.node, target, std::move(inputs), {}, ctx.limits};
  inner.outputs.resize(ctx.outputs.size());
  RETURN_IF_ERROR((*kernel)(inner));
  ctx.outputs = std::move(inner.outputs);
  return absl::OkStatus();
}

void register_forward(const std::string& op, int since, int until, int target) {
  register_kernel(op, since, until,
                  [target](KernelContext& ctx) { return forward(ctx, target, ctx.inputs); });
}

// Binary ops before opset 7: without `broadcast`, shapes must match; with it, B's dims align
// with A's starting at `axis`.
absl::Status legacy_binary(KernelContext& ctx) {
  const Tensor* a = ctx.input(0);
  const Tensor* b = ctx.input(1);
  if (a == nullptr || b == nullptr) return invalid(ctx, "missing input");
  if (ctx.node.attr_int("broadcast", 0) == 0) {
    if (a->dims() != b->dims()) return invalid(ctx, "shapes differ and broadcast is 0");
    return forward(ctx, 7, {a, b});
  }
  const int64_t rank_a = a->rank(), rank_b = b->rank();
  if (rank_b > rank_a) return invalid(ctx, "B has a higher rank than A");
  int64_t axis = rank_a - rank_b;
  if (const auto* attr = ctx.node.attr("axis")) {
    axis = attr->i();
    if (axis < 0) axis += rank_a;
  }
  // A one-element B is a scalar whatever its shape.
  if (b->size() == 1) axis = rank_a - rank_b;
  // Compared without adding: `axis` comes from the model (an int64 attribute) and may be huge.
  if (axis < 0 || axis > rank_a - rank_b) return invalid(ctx, "axis out of range");
  std::vector<int64_t> dims(static_cast<size_t>(rank_a - axis), 1);
  for (int64_t i = 0; i < rank_b; ++i) dims[i] = b->dims()[i];
  if (b->dtype() == TensorProto::STRING) return unimplemented(ctx, "string input");
  ASSIGN_OR_RETURN(Tensor reshaped, Tensor::zeros(b->dtype(), dims, ctx.limits.max_tensor_bytes));
  std::memcpy(reshaped.data<char>(), b->data<char>(), b->bytes());
  return forward(ctx, 7, {a, &reshaped});
}

// y = f(x) for float tensors, computed in double.
template <typename F>
absl::Status float_map(KernelContext& ctx, F f) {
  ASSIGN_OR_RETURN(const Tensor* x, float_input(ctx, 0));
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x->dtype(), x->dims()));
  for (int64_t i = 0; i < x->size(); ++i) y->set_double(i, f(x->get_double(i)));
  return absl::OkStatus();
}

void register_float_map(const std::string& op, int since, double (*f)(double)) {
  register_kernel(op, since, 0, [f](KernelContext& ctx) { return float_map(ctx, f); });
}

absl::Status is_nan_or_inf(KernelContext& ctx, bool nan) {
  ASSIGN_OR_RETURN(const Tensor* x, float_input(ctx, 0));
  const bool neg = ctx.node.attr_int("detect_negative", 1) != 0;
  const bool pos = ctx.node.attr_int("detect_positive", 1) != 0;
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, TensorProto::BOOL, x->dims()));
  for (int64_t i = 0; i < x->size(); ++i) {
    const double v = x->get_double(i);
    const bool hit = nan ? std::isnan(v) : std::isinf(v) && (v > 0 ? pos : neg);
    y->data<bool>()[i] = hit;
  }
  return absl::OkStatus();
}

absl::Status shrink(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  if (x == nullptr) return invalid(ctx, "missing input");
  if (!is_float_type(x->dtype()) && !is_integer_type(x->dtype()))
    return unimplemented(ctx, "unsupported element type");
  const double lambd = ctx.node.attr_float("lambd", 0.5f);
  const double bias = ctx.node.attr_float("bias", 0.0f);
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x->dtype(), x->dims()));
  for (int64_t i = 0; i < x->size(); ++i) {
    const double v = x->get_double(i);
    y->set_double(i, v < -lambd ? v + bias : v > lambd ? v - bias : 0.0);
  }
  return absl::OkStatus();
}

// PRelu: slope broadcasts to X (unidirectionally from opset 7). Before, a slope that does not
// broadcast but has one value per channel (X's dim 1) applies per channel.
absl::Status prelu(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* x, float_input(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* s, float_input(ctx, 1));
  const Tensor& xt = *x;
  const Tensor& st = *s;
  std::vector<int64_t> slope_dims = st.dims();
  if (!broadcastable_to(slope_dims, xt.dims())) {
    if (ctx.opset < 7 && xt.rank() >= 2 && st.size() == xt.dims()[1]) {
      slope_dims.assign(static_cast<size_t>(xt.rank() - 1), 1);
      slope_dims[0] = xt.dims()[1];
    } else {
      return invalid(ctx, "slope does not broadcast to X");
    }
  }
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, xt.dtype(), xt.dims()));
  BroadcastIterator it(xt.dims(), {slope_dims});
  for (int64_t i = 0; i < xt.size(); ++i, it.next()) {
    const double v = xt.get_double(i);
    y->set_double(i, v < 0 ? st.get_double(it.offset(0)) * v : v);
  }
  return absl::OkStatus();
}

// Splits `dims` around `axis` into (outer, n, inner) element counts.
void split_dims(const std::vector<int64_t>& dims, int64_t axis, int64_t* outer, int64_t* n,
                int64_t* inner) {
  *outer = 1;
  *inner = 1;
  for (int64_t d = 0; d < axis; ++d) *outer *= dims[d];
  *n = dims[axis];
  for (size_t d = axis + 1; d < dims.size(); ++d) *inner *= dims[d];
}

// Hardmax: 1 at the first maximum along `axis` (opset 13), or over the flattened trailing dims
// from `axis` (before 13, default axis 1).
absl::Status hardmax(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* x, float_input(ctx, 0));
  const Tensor& xt = *x;
  const int64_t rank = xt.rank();
  int64_t axis = ctx.node.attr_int("axis", ctx.opset >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= std::max<int64_t>(rank, 1)) return invalid(ctx, "axis out of range");
  int64_t outer, n, inner;
  if (rank == 0) {
    outer = n = inner = 1;
  } else if (ctx.opset >= 13) {
    split_dims(xt.dims(), axis, &outer, &n, &inner);
  } else {
    outer = 1;
    for (int64_t d = 0; d < axis; ++d) outer *= xt.dims()[d];
    n = outer == 0 ? 0 : xt.size() / outer;
    inner = 1;
  }
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, xt.dtype(), xt.dims()));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < inner; ++k) {
      int64_t best = -1;
      double best_v = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double v = xt.get_double((o * n + j) * inner + k);
        if (best < 0 || v > best_v) {
          best = j;
          best_v = v;
        }
      }
      if (best >= 0) y->set_double((o * n + best) * inner + k, 1.0);
    }
  return absl::OkStatus();
}

absl::Status instance_norm(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* x, float_input(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* scale, float_input(ctx, 1));
  ASSIGN_OR_RETURN(const Tensor* bias, float_input(ctx, 2));
  const Tensor& xt = *x;
  if (xt.rank() < 2) return invalid(ctx, "input rank must be at least 2");
  const int64_t batch = xt.dims()[0], channels = xt.dims()[1];
  const int64_t spatial = channels * batch == 0 ? 0 : xt.size() / (batch * channels);
  if (scale->size() != channels || bias->size() != channels)
    return invalid(ctx, "scale and B need one value per channel");
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, xt.dtype(), xt.dims()));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t c = 0; c < channels; ++c) {
      const int64_t base = (b * channels + c) * spatial;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < spatial; ++i) mean += xt.get_double(base + i);
      mean /= static_cast<double>(std::max<int64_t>(spatial, 1));
      for (int64_t i = 0; i < spatial; ++i) {
        const double d = xt.get_double(base + i) - mean;
        var += d * d;
      }
      var /= static_cast<double>(std::max<int64_t>(spatial, 1));
      const double k = scale->get_double(c) / std::sqrt(var + eps);
      for (int64_t i = 0; i < spatial; ++i)
        y->set_double(base + i, (xt.get_double(base + i) - mean) * k + bias->get_double(c));
    }
  return absl::OkStatus();
}

absl::Status lrn(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* x, float_input(ctx, 0));
  const Tensor& xt = *x;
  if (xt.rank() < 2) return invalid(ctx, "input rank must be at least 2");
  const auto* size_attr = ctx.node.attr("size");
  if (size_attr == nullptr || size_attr->i() < 1) return invalid(ctx, "size must be positive");
  const int64_t size = size_attr->i();
  const double alpha = ctx.node.attr_float("alpha", 1e-4f);
  const double beta = ctx.node.attr_float("beta", 0.75f);
  const double bias = ctx.node.attr_float("bias", 1.0f);
  int64_t outer, channels, inner;
  split_dims(xt.dims(), 1, &outer, &channels, &inner);
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, xt.dtype(), xt.dims()));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t k = 0; k < inner; ++k) {
        double sum = 0;
        for (int64_t j = std::max<int64_t>(0, c - before);
             j <= std::min<int64_t>(channels - 1, c + after); ++j) {
          const double v = xt.get_double((o * channels + j) * inner + k);
          sum += v * v;
        }
        const int64_t i = (o * channels + c) * inner + k;
        y->set_double(i, xt.get_double(i) / std::pow(bias + alpha / size * sum, beta));
      }
  return absl::OkStatus();
}

// (X - mean) / (std + 1e-9) over `axes` (default N, H, W), as the ONNX function body computes.
absl::Status mean_variance_norm(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* x, float_input(ctx, 0));
  const Tensor& xt = *x;
  const int64_t rank = xt.rank();
  std::vector<int64_t> axes = ctx.node.attr_ints("axes").value_or(std::vector<int64_t>{0, 2, 3});
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t a : axes) {
    if (a < 0) a += rank;
    if (a < 0 || a >= rank) return invalid(ctx, "axes out of range");
    reduced[a] = true;
  }
  // Group index of each element: its coordinates on the kept axes.
  std::vector<int64_t> group_dims;
  for (int64_t d = 0; d < rank; ++d) group_dims.push_back(reduced[d] ? 1 : xt.dims()[d]);
  const int64_t groups = element_count(group_dims);
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, xt.dtype(), xt.dims()));
  std::vector<double> sum(static_cast<size_t>(groups), 0.0), sq(sum), count(sum);
  auto for_each = [&](auto f) {
    BroadcastIterator it(xt.dims(), {group_dims});
    for (int64_t i = 0; i < xt.size(); ++i, it.next()) f(i, it.offset(0));
  };
  for_each([&](int64_t i, int64_t g) {
    const double v = xt.get_double(i);
    sum[g] += v;
    sq[g] += v * v;
    count[g] += 1;
  });
  for_each([&](int64_t i, int64_t g) {
    const double mean = sum[g] / count[g];
    const double var = std::max(0.0, sq[g] / count[g] - mean * mean);
    y->set_double(i, (xt.get_double(i) - mean) / (std::sqrt(var) + 1e-9));
  });
  return absl::OkStatus();
}

}  // namespace

void register_extra_kernels() {
  // consumed_inputs (opsets 1-5) only hinted at in-place reuse.
  for (const char* op : {"Relu", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "Sigmoid",    "Tanh",
                         "Neg",  "Abs",       "Exp", "Log",  "Sqrt",        "Reciprocal", "Floor",
                         "Ceil", "Clip",      "Sum", "Max",  "Min",         "Mean"}) {
    register_forward(op, 1, 5, 6);
  }
  for (const char* op :
       {"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less"}) {
    register_kernel(op, 1, 6, legacy_binary);
  }
  register_float_map("Tan", 7, [](double x) { return std::tan(x); });
  register_float_map("Asin", 7, [](double x) { return std::asin(x); });
  register_float_map("Acos", 7, [](double x) { return std::acos(x); });
  register_float_map("Atan", 7, [](double x) { return std::atan(x); });
  register_float_map("Sinh", 9, [](double x) { return std::sinh(x); });
  register_float_map("Cosh", 9, [](double x) { return std::cosh(x); });
  register_float_map("Asinh", 9, [](double x) { return std::asinh(x); });
  register_float_map("Acosh", 9, [](double x) { return std::acosh(x); });
  register_float_map("Atanh", 9, [](double x) { return std::atanh(x); });
  register_float_map("Softsign", 1, [](double x) { return x / (1 + std::abs(x)); });
  register_kernel("ThresholdedRelu", 10, 0, [](KernelContext& ctx) {
    const double alpha = ctx.node.attr_float("alpha", 1.0f);
    return float_map(ctx, [alpha](double x) { return x > alpha ? x : 0.0; });
  });
  register_kernel("Celu", 12, 0, [](KernelContext& ctx) {
    const double alpha = ctx.node.attr_float("alpha", 1.0f);
    if (alpha == 0) return invalid(ctx, "alpha must not be 0");
    return float_map(ctx, [alpha](double x) {
      return std::max(0.0, x) + std::min(0.0, alpha * (std::exp(x / alpha) - 1));
    });
  });
  register_kernel("IsNaN", 9, 0, [](KernelContext& ctx) { return is_nan_or_inf(ctx, true); });
  register_kernel("IsInf", 10, 0, [](KernelContext& ctx) { return is_nan_or_inf(ctx, false); });
  register_kernel("Shrink", 9, 0, shrink);
  register_kernel("PRelu", 1, 0, prelu);
  register_kernel("Hardmax", 1, 0, hardmax);
  register_kernel("InstanceNormalization", 1, 0, instance_norm);
  register_kernel("LRN", 1, 0, lrn);
  register_kernel("MeanVarianceNormalization", 9, 0, mean_variance_norm);
}

}  // namespace graft::eval
