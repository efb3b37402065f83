// Neural-network kernels: MatMul, Gemm, Softmax/LogSoftmax, BatchNormalization,
// LayerNormalization, RMSNormalization, Conv, ConvInteger, ConvTranspose, pools,
// (De)QuantizeLinear, Resize (and Upsample, Resize-10) and Einsum.
//
// Floating-point kernels convert their operands to double once, accumulate in double and round
// to the output type at the end, so results stay within the ONNX backend tolerance whatever the
// summation order. Integer MatMul/Gemm/Einsum accumulate in (wrapping) 64-bit integers.
#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>

#include "core/eval/broadcast.h"
#include "core/eval/budget.h"
#include "core/eval/gemm.h"
#include "core/eval/kernel.h"
#include "core/eval/kernels.h"
#include "core/eval/kernels/common.h"
#include "core/ir/op_params.h"
#include "core/ir/tensor.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

// Attribute values (pads, strides, sizes, ...) beyond this are rejected so that shape arithmetic
// can never overflow int64.
constexpr int64_t kMaxDim = int64_t{1} << 30;

// Refuses at once a kernel call whose multiply-adds the run's work budget cannot pay for (a
// crafted model must not hang folding or verification); the loops then charge it as they go.
absl::Status check_work(const KernelContext& ctx, double work) { return ctx.afford(work); }

absl::StatusOr<int64_t> norm_axis(const KernelContext& ctx, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) {
    return invalid(ctx, absl::StrCat("axis ", axis, " out of range for rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

// Integer accumulation wraps like two's complement hardware instead of being undefined.
inline int64_t mul_add(int64_t acc, int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(acc) +
                              static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
inline double mul_add(double acc, double a, double b) { return acc + a * b; }

bool matmul_type_ok(int32_t t) {
  return is_float_type(t) || t == TensorProto::INT32 || t == TensorProto::INT64 ||
         t == TensorProto::UINT32 || t == TensorProto::UINT64;
}

template <typename T>
Scratch<T> values(const Tensor& t) {
  if constexpr (std::is_same_v<T, double>) {
    return to_doubles(t);
  } else {
    return to_ints(t);
  }
}

// ---------------------------------------------------------------------------------------------
// MatMul

template <typename T>
absl::Status matmul_impl(KernelContext& ctx, const Tensor& a, const Tensor& b) {
  std::vector<int64_t> ad = a.dims(), bd = b.dims();
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  if (bd[bd.size() - 2] != k) return invalid(ctx, "inner dimensions differ");
  std::vector<int64_t> abatch(ad.begin(), ad.end() - 2), bbatch(bd.begin(), bd.end() - 2);
  ASSIGN_OR_RETURN(std::vector<int64_t> batch, broadcast_shape({abatch, bbatch}));
  std::vector<int64_t> out = batch;
  if (!a_vec) out.push_back(m);
  if (!b_vec) out.push_back(n);
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, a.dtype(), out));
  const int64_t nbatch = element_count(batch);
  RETURN_IF_ERROR(check_work(ctx, static_cast<double>(nbatch) * m * n * k));
  if constexpr (std::is_same_v<T, double>) {
    if (use_blas(m, n, k, k, n)) {
      // A batch of A's against one B (weights) is one product of (batch * m) rows.
      const bool one_b = element_count(bbatch) == 1 && abatch == batch;
      const int64_t products = one_b ? 1 : nbatch, rows = one_b ? nbatch * m : m;
      if (rows <= std::numeric_limits<int32_t>::max()) {
        BroadcastIterator it(batch, {abatch, bbatch});
        for (int64_t bi = 0; bi < products; ++bi, it.next()) {
          const GemmOperand pa = tensor_operand(a, it.offset(0) * m * k, false, k);
          const GemmOperand pb = tensor_operand(b, it.offset(1) * k * n, false, n);
          const int64_t y0 = bi * rows * n;
          gemm_by_blocks(
              rows, n, k, 1.0, pa, pb,
              [](int64_t, int64_t r, int64_t, int64_t cn, double* c) {
                std::fill(c, c + r * cn, 0.0);
              },
              [&](int64_t row0, int64_t r, int64_t col0, int64_t cn, const double* c) {
                for (int64_t i = 0; i < r; ++i)
                  for (int64_t j = 0; j < cn; ++j)
                    store(y, y0 + (row0 + i) * n + col0 + j, c[i * cn + j]);
              });
        }
        return absl::OkStatus();
      }
    }
  }
  // The reference loops. One output row at a time, l outer and j inner: each element still sums its
  // products in order of l (the same result as a dot product per element), but B is read row by
  // row.
  const Scratch<T> av = values<T>(a), bv = values<T>(b);
  Scratch<T> acc(static_cast<size_t>(n));
  BroadcastIterator it(batch, {abatch, bbatch});
  int64_t yi = 0;
  for (int64_t bi = 0; bi < nbatch; ++bi, it.next()) {
    const T* pa = av.data() + it.offset(0) * m * k;
    const T* pb = bv.data() + it.offset(1) * k * n;
    for (int64_t i = 0; i < m; ++i) {
      spend_work(static_cast<uint64_t>(n) * static_cast<uint64_t>(k));
      std::fill(acc.begin(), acc.end(), T{0});
      for (int64_t l = 0; l < k; ++l) {
        const T a_il = pa[i * k + l];
        const T* row = pb + l * n;
        for (int64_t j = 0; j < n; ++j) acc[j] = mul_add(acc[j], a_il, row[j]);
      }
      for (int64_t j = 0; j < n; ++j) store(y, yi++, acc[j]);
    }
  }
  return absl::OkStatus();
}

absl::Status matmul(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* a, required(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* b, required(ctx, 1));
  if (a->dtype() != b->dtype()) return invalid(ctx, "operand types differ");
  if (!matmul_type_ok(a->dtype())) return unimplemented(ctx, "element type");
  if (a->rank() < 1 || b->rank() < 1) return invalid(ctx, "scalar operand");
  if (is_float_type(a->dtype())) return matmul_impl<double>(ctx, *a, *b);
  return matmul_impl<int64_t>(ctx, *a, *b);
}

// ---------------------------------------------------------------------------------------------
// Gemm

template <typename T>
absl::Status gemm_impl(KernelContext& ctx, const Tensor& a, const Tensor& b, const Tensor* c) {
  const bool ta = ctx.node.attr_int("transA", 0) != 0;
  const bool tb = ctx.node.attr_int("transB", 0) != 0;
  const double alpha = ctx.node.attr_float("alpha", 1.0f);
  const double beta = ctx.node.attr_float("beta", 1.0f);
  const int64_t m = ta ? a.dims()[1] : a.dims()[0];
  const int64_t k = ta ? a.dims()[0] : a.dims()[1];
  const int64_t kb = tb ? b.dims()[1] : b.dims()[0];
  const int64_t n = tb ? b.dims()[0] : b.dims()[1];
  if (k != kb) return invalid(ctx, "inner dimensions differ");
  if (c != nullptr && !broadcastable_to(c->dims(), {m, n})) {
    return invalid(ctx, "C does not broadcast to (M, N)");
  }
  if (c != nullptr && ctx.opset < 7 && ctx.node.attr_int("broadcast", 0) == 0 &&
      c->dims() != std::vector<int64_t>{m, n}) {
    return invalid(ctx, "C must be (M, N) without broadcast=1");
  }
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, a.dtype(), {m, n}));
  RETURN_IF_ERROR(check_work(ctx, static_cast<double>(m) * n * k));
  Scratch<T> cv;
  if (c != nullptr) cv = values<T>(*c);
  std::vector<int64_t> cdims = c != nullptr ? c->dims() : std::vector<int64_t>{};
  if constexpr (std::is_same_v<T, double>) {
    // alpha = 0 stays with the loops: dgemm would skip the product, and with it the NaN that an
    // infinite or NaN operand gives; so does a non-finite alpha, which dgemm applies to partial
    // sums (an infinite alpha could make NaN of an infinite result).
    if (alpha != 0 && std::isfinite(alpha) && use_blas(m, n, k, ta ? m : k, tb ? k : n)) {
      // C broadcast to (M, N): element (i, j) at i * c_row + j * c_col.
      const std::vector<int64_t> cd2 = [&] {
        std::vector<int64_t> d(2 - std::min<size_t>(2, cdims.size()), 1);
        d.insert(d.end(), cdims.begin(), cdims.end());
        return d;
      }();
      const int64_t c_row = cd2[0] == 1 ? 0 : cd2[1], c_col = cd2[1] == 1 ? 0 : 1;
      gemm_by_blocks(
          m, n, k, alpha, tensor_operand(a, 0, ta, ta ? m : k),
          tensor_operand(b, 0, tb, tb ? k : n),
          [&](int64_t row0, int64_t r, int64_t col0, int64_t cn, double* buf) {
            for (int64_t i = 0; i < r; ++i)
              for (int64_t j = 0; j < cn; ++j)
                buf[i * cn + j] =
                    c == nullptr ? 0.0 : beta * cv[(row0 + i) * c_row + (col0 + j) * c_col];
          },
          [&](int64_t row0, int64_t r, int64_t col0, int64_t cn, const double* buf) {
            for (int64_t i = 0; i < r; ++i)
              for (int64_t j = 0; j < cn; ++j) store(y, (row0 + i) * n + col0 + j, buf[i * cn + j]);
          });
      return absl::OkStatus();
    }
  }
  // The reference loops.
  const Scratch<T> av = values<T>(a), bv = values<T>(b);
  BroadcastIterator it({m, n}, {cdims});
  for (int64_t i = 0; i < m; ++i) {
    spend_work(static_cast<uint64_t>(n) * static_cast<uint64_t>(k));
    for (int64_t j = 0; j < n; ++j, it.next()) {
      T acc = 0;
      for (int64_t l = 0; l < k; ++l) {
        acc = mul_add(acc, av[ta ? l * m + i : i * k + l], bv[tb ? j * k + l : l * n + j]);
      }
      if constexpr (std::is_same_v<T, double>) {
        acc *= alpha;
        if (c != nullptr) acc += beta * cv[it.offset(0)];
      } else {  // alpha = beta = 1 (checked by the caller)
        if (c != nullptr) acc = mul_add(acc, cv[it.offset(0)], T{1});
      }
      store(y, i * n + j, acc);
    }
  }
  return absl::OkStatus();
}

absl::Status gemm(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* a, required(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* b, required(ctx, 1));
  const Tensor* c = ctx.input(2);
  if (a->rank() != 2 || b->rank() != 2) return invalid(ctx, "A and B must be 2-D");
  if (a->dtype() != b->dtype() || (c != nullptr && c->dtype() != a->dtype())) {
    return invalid(ctx, "operand types differ");
  }
  if (!matmul_type_ok(a->dtype())) return unimplemented(ctx, "element type");
  if (is_float_type(a->dtype())) return gemm_impl<double>(ctx, *a, *b, c);
  // Integer Gemm with non-unit alpha/beta has no well-defined rounding; only exact cases.
  if (ctx.node.attr_float("alpha", 1.0f) != 1.0f || ctx.node.attr_float("beta", 1.0f) != 1.0f) {
    return unimplemented(ctx, "integer Gemm with alpha/beta");
  }
  return gemm_impl<int64_t>(ctx, *a, *b, c);
}

// ---------------------------------------------------------------------------------------------
// Softmax / LogSoftmax

absl::Status softmax_impl(KernelContext& ctx, bool log) {
  ASSIGN_OR_RETURN(const Tensor* x, required(ctx, 0));
  RETURN_IF_ERROR(require_float(ctx, *x));
  const int64_t rank = x->rank();
  if (rank == 0) return invalid(ctx, "scalar input");
  const bool coerce_2d = ctx.opset < 13;
  ASSIGN_OR_RETURN(int64_t axis,
                   norm_axis(ctx, ctx.node.attr_int("axis", coerce_2d ? 1 : -1), rank));
  const auto& d = x->dims();
  // Before opset 13 the input is flattened to 2-D at `axis` and normalised over the trailing
  // block; from 13 on only the single axis is normalised.
  const int64_t outer = product(d, 0, axis);
  const int64_t len = coerce_2d ? product(d, axis, rank) : d[axis];
  const int64_t inner = coerce_2d ? 1 : product(d, axis + 1, rank);
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x->dtype(), d));
  if (y->size() == 0) return absl::OkStatus();  // no rows (and no buffer to offset into)
  Scratch<double> v = to_doubles(*x);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      double* base = v.data() + o * len * inner + in;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < len; ++i) mx = std::max(mx, base[i * inner]);
      double sum = 0;
      for (int64_t i = 0; i < len; ++i) sum += std::exp(base[i * inner] - mx);
      const double lsum = std::log(sum);
      for (int64_t i = 0; i < len; ++i) {
        double& e = base[i * inner];
        e = log ? e - mx - lsum : std::exp(e - mx) / sum;
      }
    }
  }
  store_all(y, v);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// BatchNormalization (inference) and LayerNormalization

absl::Status batch_norm(KernelContext& ctx) {
  if (ctx.node.attr_int("training_mode", 0) != 0) return unimplemented(ctx, "training mode");
  // Before opset 7, is_test=0 meant normalising with the batch statistics.
  if (ctx.opset < 7 && ctx.node.attr_int("is_test", 0) == 0) {
    return unimplemented(ctx, "is_test=0");
  }
  if (ctx.opset < 9 && ctx.node.attr_int("spatial", 1) != 1) {
    return unimplemented(ctx, "spatial=0");
  }
  for (size_t i = 1; i < ctx.outputs.size(); ++i) {
    if (ctx.node.output(i) != nullptr) return unimplemented(ctx, "training outputs");
  }
  ASSIGN_OR_RETURN(const Tensor* x, required(ctx, 0));
  RETURN_IF_ERROR(require_float(ctx, *x));
  if (x->rank() < 2) return invalid(ctx, "input rank below 2");
  const int64_t ch = x->dims()[1];
  std::vector<Scratch<double>> p;
  for (size_t i = 1; i <= 4; ++i) {
    ASSIGN_OR_RETURN(const Tensor* t, required(ctx, i));
    RETURN_IF_ERROR(require_float(ctx, *t));
    if (t->rank() != 1 || t->dims()[0] != ch) return invalid(ctx, "parameter shape is not (C)");
    p.push_back(to_doubles(*t));
  }
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x->dtype(), x->dims()));
  const int64_t n = x->dims()[0], inner = product(x->dims(), 2, x->dims().size());
  Scratch<double> v = to_doubles(*x);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t c = 0; c < ch; ++c) {
      const double scale = p[0][c] / std::sqrt(p[3][c] + eps);
      const double shift = p[1][c] - p[2][c] * scale;
      double* base = v.data() + (b * ch + c) * inner;
      for (int64_t i = 0; i < inner; ++i) base[i] = base[i] * scale + shift;
    }
  }
  store_all(y, v);
  return absl::OkStatus();
}

// What LayerNormalization and RMSNormalization share: X and Scale (float), the normalized axes
// [axis, rank) of X, stash_type and epsilon, and Scale broadcasting to the normalized shape.
struct NormBlock {
  const Tensor* x = nullptr;
  const Tensor* scale = nullptr;
  std::vector<int64_t> norm_shape;  // X's dims [axis, rank)
  int64_t axis = 0;
  int64_t outer = 0, len = 0;  // blocks, and elements per block
  int32_t stash = 0;
  double eps = 0;
};

absl::StatusOr<NormBlock> norm_block(KernelContext& ctx) {
  NormBlock b;
  ASSIGN_OR_RETURN(b.x, required(ctx, 0));
  ASSIGN_OR_RETURN(b.scale, required(ctx, 1));
  RETURN_IF_ERROR(require_float(ctx, *b.x));
  RETURN_IF_ERROR(require_float(ctx, *b.scale));
  const int64_t rank = b.x->rank();
  if (rank == 0) return invalid(ctx, "scalar input");
  ASSIGN_OR_RETURN(b.axis, norm_axis(ctx, ctx.node.attr_int("axis", -1), rank));
  b.stash = static_cast<int32_t>(ctx.node.attr_int("stash_type", 1));
  if (!is_float_type(b.stash)) return invalid(ctx, "stash_type is not a float type");
  b.eps = ctx.node.attr_float("epsilon", 1e-5f);
  const auto& d = b.x->dims();
  b.norm_shape.assign(d.begin() + b.axis, d.end());
  if (!broadcastable_to(b.scale->dims(), b.norm_shape))
    return invalid(ctx, "Scale does not broadcast to the normalized shape");
  b.outer = product(d, 0, b.axis);
  b.len = product(d, b.axis, rank);
  return b;
}

// `t` (broadcastable to the normalized shape) read at each of a block's positions, once.
Scratch<double> per_position(const Tensor& t, const NormBlock& b) {
  Scratch<double> out(b.len);
  const Scratch<double> values = to_doubles(t);
  BroadcastIterator it(b.norm_shape, {t.dims()});
  for (int64_t i = 0; i < b.len; ++i, it.next()) out[i] = values[it.offset(0)];
  return out;
}

absl::Status layer_norm(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const NormBlock b, norm_block(ctx));
  const Tensor* bias = ctx.input(2);
  if (bias != nullptr) {
    RETURN_IF_ERROR(require_float(ctx, *bias));
    if (!broadcastable_to(bias->dims(), b.norm_shape))
      return invalid(ctx, "B does not broadcast to the normalized shape");
  }
  const auto& d = b.x->dims();
  const int64_t outer = b.outer, len = b.len;
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, b.x->dtype(), d));
  std::vector<int64_t> stat_dims(d.begin(), d.begin() + b.axis);
  stat_dims.resize(d.size(), 1);
  Tensor* mean_out = nullptr;
  Tensor* inv_out = nullptr;
  if (ctx.node.output(1) != nullptr) {
    ASSIGN_OR_RETURN(mean_out, ctx.make_output(1, b.stash, stat_dims));
  }
  if (ctx.node.output(2) != nullptr) {
    ASSIGN_OR_RETURN(inv_out, ctx.make_output(2, b.stash, stat_dims));
  }
  const Scratch<double> sv = per_position(*b.scale, b);
  const Scratch<double> bv = bias != nullptr ? per_position(*bias, b) : Scratch<double>(len, 0.0);
  Scratch<double> v = to_doubles(*b.x);
  // The definition's steps, each rounded to stash_type (its first stage) and then to X's type:
  // the sums accumulate in double, as ReduceMean's kernel does, so a decomposed block and this
  // op round and overflow alike (d * d beyond float's range is infinity in both).
  const int32_t stash = b.stash, type = b.x->dtype();
  const auto u = [stash](double x) { return round_to_type(stash, x); };
  const double eps = u(b.eps);
  for (int64_t o = 0; o < outer; ++o) {
    double* base = v.data() + o * len;
    double sum = 0;
    for (int64_t i = 0; i < len; ++i) sum += (base[i] = u(base[i]));
    const double mean = u(sum / static_cast<double>(len));
    double sum_sq = 0;
    for (int64_t i = 0; i < len; ++i) {
      base[i] = u(base[i] - mean);
      sum_sq += u(base[i] * base[i]);
    }
    const double var = u(sum_sq / static_cast<double>(len));
    const double inv = u(1.0 / u(std::sqrt(u(var + eps))));
    for (int64_t i = 0; i < len; ++i) {
      const double normalized = round_to_type(type, u(base[i] * inv));
      base[i] = round_to_type(type, normalized * sv[i]) + bv[i];
    }
    if (mean_out != nullptr) store(mean_out, o, mean);
    if (inv_out != nullptr) store(inv_out, o, inv);
  }
  store_all(y, v);
  return absl::OkStatus();
}

// RMSNormalization (opset 23): Y = X / sqrt(mean(X^2 over axes [axis, rank)) + epsilon) * Scale,
// Y of Scale's type.
absl::Status rms_norm(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const NormBlock b, norm_block(ctx));
  const int64_t outer = b.outer, len = b.len;
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, b.scale->dtype(), b.x->dims()));
  if (y->size() == 0) return absl::OkStatus();
  const Scratch<double> sv = per_position(*b.scale, b);
  Scratch<double> v = to_doubles(*b.x);
  // As LayerNormalization: the definition's steps rounded to stash_type, then to X's type.
  const int32_t stash = b.stash, type = b.x->dtype();
  const auto u = [stash](double x) { return round_to_type(stash, x); };
  const double eps = u(b.eps);
  for (int64_t o = 0; o < outer; ++o) {
    double* base = v.data() + o * len;
    double sum_sq = 0;
    for (int64_t i = 0; i < len; ++i) {
      base[i] = u(base[i]);
      sum_sq += u(base[i] * base[i]);
    }
    const double rms = u(std::sqrt(u(u(sum_sq / static_cast<double>(len)) + eps)));
    for (int64_t i = 0; i < len; ++i) base[i] = round_to_type(type, u(base[i] / rms)) * sv[i];
  }
  store_all(y, v);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Convolution / pooling geometry

struct Geometry {
  size_t n = 0;  // spatial rank
  std::vector<int64_t> in, out, kernel, strides, dilations, pad_begin, pad_end;
  int64_t in_size = 1, out_size = 1, kernel_size = 1;
};

absl::StatusOr<std::vector<int64_t>> ints_attr(const KernelContext& ctx, const char* name,
                                               size_t count, int64_t def, int64_t lo) {
  std::optional<std::vector<int64_t>> v = ctx.node.attr_ints(name);
  if (!v.has_value()) return std::vector<int64_t>(count, def);
  if (v->size() != count) return invalid(ctx, absl::StrCat(name, " has the wrong length"));
  for (int64_t x : *v) {
    if (x < lo || x > kMaxDim) return invalid(ctx, absl::StrCat(name, " value out of range"));
  }
  return *v;
}

// Output extent and padding of a sliding window (Conv and the pools), per the ONNX formulas.
absl::StatusOr<Geometry> window_geometry(const KernelContext& ctx, std::vector<int64_t> in,
                                         std::vector<int64_t> kernel, bool ceil_mode,
                                         bool has_dilations) {
  Geometry g;
  g.n = in.size();
  g.in = std::move(in);
  g.kernel = std::move(kernel);
  for (int64_t k : g.kernel) {
    if (k < 1 || k > kMaxDim) return invalid(ctx, "kernel dimension out of range");
  }
  ASSIGN_OR_RETURN(g.strides, ints_attr(ctx, "strides", g.n, 1, 1));
  if (has_dilations) {
    ASSIGN_OR_RETURN(g.dilations, ints_attr(ctx, "dilations", g.n, 1, 1));
  } else {
    g.dilations.assign(g.n, 1);
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> pads, ints_attr(ctx, "pads", 2 * g.n, 0, 0));
  const std::string auto_pad = ctx.node.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" &&
      auto_pad != "SAME_LOWER")
    return invalid(ctx, "unknown auto_pad");
  g.pad_begin.assign(pads.begin(), pads.begin() + g.n);
  g.pad_end.assign(pads.begin() + g.n, pads.end());
  g.out.resize(g.n);
  for (size_t d = 0; d < g.n; ++d) {
    const int64_t eff = (g.kernel[d] - 1) * g.dilations[d] + 1, s = g.strides[d];
    std::optional<int64_t> out = ir::window_extent(
        g.in[d], g.kernel[d], s, g.dilations[d], g.pad_begin[d], g.pad_end[d], auto_pad, ceil_mode);
    if (!out) return invalid(ctx, "window larger than padded input");
    g.out[d] = *out;
    if (auto_pad == "VALID") {
      g.pad_begin[d] = g.pad_end[d] = 0;
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t total = std::max<int64_t>(0, (g.out[d] - 1) * s + eff - g.in[d]);
      g.pad_begin[d] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      g.pad_end[d] = total - g.pad_begin[d];
    }
    g.in_size *= g.in[d];
    g.out_size *= g.out[d];
    g.kernel_size *= g.kernel[d];
  }
  return g;
}

struct WindowPoint {
  int64_t kpos;        // linear kernel position
  int64_t offset;      // row-major spatial input offset, -1 outside the input
  int64_t col_offset;  // column-major spatial input offset (MaxPool storage_order=1)
  bool in_padded;      // inside the padded input (AveragePool count_include_pad)
};

// The window points of output spatial position `o` (multi-index), written into `pts`.
void window_points(const Geometry& g, const std::vector<int64_t>& o, std::vector<int64_t>& kidx,
                   std::vector<WindowPoint>& pts) {
  pts.clear();
  std::fill(kidx.begin(), kidx.end(), 0);
  for (int64_t kpos = 0; kpos < g.kernel_size; ++kpos) {
    bool inside = true, padded = true;
    int64_t off = 0, col = 0, col_stride = 1;
    for (size_t d = 0; d < g.n; ++d) {
      const int64_t c = o[d] * g.strides[d] - g.pad_begin[d] + kidx[d] * g.dilations[d];
      if (c < 0 || c >= g.in[d]) inside = false;
      if (c < -g.pad_begin[d] || c >= g.in[d] + g.pad_end[d]) padded = false;
      off = off * g.in[d] + c;
      col += c * col_stride;
      col_stride *= g.in[d];
    }
    pts.push_back({kpos, inside ? off : -1, col, padded});
    for (size_t d = g.n; d-- > 0;) {
      if (++kidx[d] < g.kernel[d]) break;
      kidx[d] = 0;
    }
  }
}

void next_index(std::vector<int64_t>& idx, const std::vector<int64_t>& dims) {
  for (size_t d = dims.size(); d-- > 0;) {
    if (++idx[d] < dims[d]) return;
    idx[d] = 0;
  }
}

// ---------------------------------------------------------------------------------------------
// Conv and ConvInteger

// ConvInteger's zero point of `operand`: absent (0), one element, or (w only, `per_channel` > 0)
// one per output channel. Returns its values as doubles (size 1 or per_channel).
absl::StatusOr<std::vector<double>> conv_zero_point(const KernelContext& ctx, const Tensor* zp,
                                                    const Tensor& operand, int64_t per_channel,
                                                    const char* what) {
  if (zp == nullptr) return std::vector<double>{0.0};
  if (zp->dtype() != operand.dtype())
    return invalid(ctx, absl::StrCat(what, " zero point type differs from its operand"));
  if (zp->rank() > 1) return invalid(ctx, absl::StrCat(what, " zero point must be 0-D or 1-D"));
  if (zp->size() != 1 && (per_channel == 0 || zp->rank() != 1 || zp->size() != per_channel))
    return invalid(ctx, absl::StrCat(what, " zero point has ", zp->size(), " elements"));
  std::vector<double> v(static_cast<size_t>(zp->size()));
  for (int64_t i = 0; i < zp->size(); ++i) v[i] = zp->get_double(i);
  return v;
}

// Conv on floats, or (integer) ConvInteger: 8-bit operands minus their zero points, an int32
// result. Integer sums are exact in double (each term at most 255 * 255, and the work budget
// bounds their count far below 2^53 / 65025), then wrapped to int32 as the spec's int32
// accumulation would; padding contributes 0 (x's zero point minus itself, as in the reference).
absl::Status conv_impl(KernelContext& ctx, bool integer) {
  ASSIGN_OR_RETURN(const Tensor* x, required(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* w, required(ctx, 1));
  const Tensor* b = integer ? nullptr : ctx.input(2);
  if (integer) {
    if (!is_8bit(x->dtype()) || !is_8bit(w->dtype()))
      return invalid(ctx, "operands must be int8 or uint8");
  } else {
    RETURN_IF_ERROR(require_float(ctx, *x));
    if (w->dtype() != x->dtype() || (b != nullptr && b->dtype() != x->dtype())) {
      return invalid(ctx, "operand types differ");
    }
  }
  if (x->rank() < 3 || w->rank() != x->rank()) return invalid(ctx, "bad X/W rank");
  const int64_t group = ctx.node.attr_int("group", 1);
  const auto& xd = x->dims();
  const auto& wd = w->dims();
  const int64_t batch = xd[0], cin = xd[1], cout = wd[0];
  if (group < 1 || cin % group != 0 || cout % group != 0 || wd[1] != cin / group) {
    return invalid(ctx, "channel counts do not match group");
  }
  if (b != nullptr && (b->rank() != 1 || b->dims()[0] != cout)) {
    return invalid(ctx, "bias shape is not (M)");
  }
  std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
  if (auto ks = ctx.node.attr_ints("kernel_shape"); ks.has_value() && *ks != kernel) {
    return invalid(ctx, "kernel_shape does not match W");
  }
  ASSIGN_OR_RETURN(Geometry g, window_geometry(ctx, std::vector<int64_t>(xd.begin() + 2, xd.end()),
                                               kernel, false, true));
  std::vector<double> xz{0.0}, wz{0.0};
  if (integer) {
    ASSIGN_OR_RETURN(xz, conv_zero_point(ctx, ctx.input(2), *x, 0, "x"));
    ASSIGN_OR_RETURN(wz, conv_zero_point(ctx, ctx.input(3), *w, cout, "w"));
  }
  std::vector<int64_t> out_dims = {batch, cout};
  out_dims.insert(out_dims.end(), g.out.begin(), g.out.end());
  ASSIGN_OR_RETURN(Tensor * y,
                   ctx.make_output(0, integer ? TensorProto::INT32 : x->dtype(), out_dims));
  const int64_t cg = cin / group, mg = cout / group;
  RETURN_IF_ERROR(
      check_work(ctx, static_cast<double>(y->size()) * cg * static_cast<double>(g.kernel_size)));
  // W is converted to double here only for ConvInteger (which subtracts its zero points) and the
  // reference loops: dgemm's blocks convert the rows of W they read (gemm.h).
  const int64_t kk = g.kernel_size, rows = cg * kk, total = batch * g.out_size;
  const int64_t blas_tile = std::min<int64_t>(
      total, std::max<int64_t>(16, kGemmScratchDoubles / std::max<int64_t>(rows, 1)));
  const bool blas = use_blas(mg, blas_tile, rows, rows, blas_tile);
  Scratch<double> xv = to_doubles(*x);
  Scratch<double> wv = blas && !integer ? Scratch<double>() : to_doubles(*w);
  if (integer) {
    for (double& v : xv) v -= xz[0];
    const int64_t per_m = static_cast<int64_t>(wv.size()) / std::max<int64_t>(cout, 1);
    for (int64_t m = 0; m < cout; ++m)
      for (int64_t j = 0; j < per_m; ++j) wv[m * per_m + j] -= wz[wz.size() == 1 ? 0 : m];
  }
  Scratch<double> bv = b != nullptr ? to_doubles(*b) : Scratch<double>(cout, 0.0);
  // A tile of output positions at a time (batch and spatial positions flattened, so small
  // feature maps still make long tiles): their window values are gathered into `cols` (one row
  // per input channel and kernel point, as W is laid out), then each output channel is a sum of
  // rows scaled by its weights, with unit-stride inner loops. Per output the terms are added in
  // the same order as a plain loop nest (channel, then kernel point); points in the padding
  // contribute 0 * w.
  //
  // With dgemm (gemm.h) each group's outputs of a tile are one product, W's rows of the group
  // (mg x rows) times `cols` (rows x tile), on tiles of up to kGemmScratchDoubles gathered values
  // (at least 16 positions) so the products are large and `cols` stays bounded whatever the model.
  const int64_t tile = blas ? blas_tile : std::min<int64_t>(total, 256);
  Scratch<double> cols(static_cast<size_t>(rows * tile)), acc(static_cast<size_t>(blas ? 0 : tile));
  Scratch<int64_t> offsets(static_cast<size_t>(kk * tile)), nbs(tile), ops(tile);
  std::vector<int64_t> o(g.n, 0), kidx(g.n, 0);
  std::vector<WindowPoint> pts;
  pts.reserve(g.kernel_size);
  // A window entirely inside the input has its points at fixed distances from its first one.
  std::vector<int64_t> in_stride(g.n, 1), kernel_offset(kk);
  for (size_t d = g.n - 1; d-- > 0;) in_stride[d] = in_stride[d + 1] * g.in[d + 1];
  for (int64_t k = 0; k < kk; ++k) {
    int64_t rest = k, off = 0;
    for (size_t d = g.n; d-- > 0;) {
      off += (rest % g.kernel[d]) * g.dilations[d] * in_stride[d];
      rest /= g.kernel[d];
    }
    kernel_offset[k] = off;
  }
  for (int64_t p0 = 0; p0 < total; p0 += tile) {
    const int64_t tn = std::min(tile, total - p0);
    for (int64_t t = 0; t < tn; ++t, next_index(o, g.out)) {  // o wraps to 0 with each image
      nbs[t] = (p0 + t) / g.out_size;
      ops[t] = (p0 + t) % g.out_size;
      bool inside = true;
      int64_t base = 0;
      for (size_t d = 0; d < g.n; ++d) {
        const int64_t start = o[d] * g.strides[d] - g.pad_begin[d];
        inside = inside && start >= 0 && start + (g.kernel[d] - 1) * g.dilations[d] < g.in[d];
        base += start * in_stride[d];
      }
      if (inside) {
        for (int64_t k = 0; k < kk; ++k) offsets[k * tile + t] = base + kernel_offset[k];
      } else {
        window_points(g, o, kidx, pts);
        for (const WindowPoint& p : pts) offsets[p.kpos * tile + t] = p.offset;
      }
    }
    for (int64_t gr = 0; gr < group; ++gr) {
      for (int64_t c = 0; c < cg; ++c) {
        const double* xc = xv.data() + (gr * cg + c) * g.in_size;
        for (int64_t k = 0; k < kk; ++k) {
          double* row = cols.data() + (c * kk + k) * tile;
          const int64_t* off = offsets.data() + k * tile;
          for (int64_t t = 0; t < tn; ++t)
            row[t] = off[t] >= 0 ? xc[nbs[t] * cin * g.in_size + off[t]] : 0.0;
        }
      }
      if (blas) {
        gemm_by_blocks(
            mg, tn, rows, 1.0,
            integer ? GemmOperand{wv.data() + gr * mg * rows, false, rows}
                    : tensor_operand(*w, gr * mg * rows, false, rows),
            {cols.data(), false, tile},
            [&](int64_t m0, int64_t r, int64_t, int64_t cn, double* c) {
              for (int64_t i = 0; i < r; ++i)
                std::fill(c + i * cn, c + (i + 1) * cn, bv[gr * mg + m0 + i]);
            },
            [&](int64_t m0, int64_t r, int64_t t0, int64_t cn, const double* c) {
              for (int64_t i = 0; i < r; ++i) {
                const int64_t m = gr * mg + m0 + i;
                const double* ci = c + i * cn;
                if (integer) {
                  int32_t* yp = y->data<int32_t>();
                  for (int64_t t = 0; t < cn; ++t)
                    yp[(nbs[t0 + t] * cout + m) * g.out_size + ops[t0 + t]] =
                        static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(ci[t])));
                } else {
                  for (int64_t t = 0; t < cn; ++t)
                    store(y, (nbs[t0 + t] * cout + m) * g.out_size + ops[t0 + t], ci[t]);
                }
              }
            });
        continue;
      }
      spend_work(static_cast<uint64_t>(mg) * static_cast<uint64_t>(rows) *
                 static_cast<uint64_t>(tn));
      for (int64_t m = gr * mg; m < (gr + 1) * mg; ++m) {
        std::fill(acc.begin(), acc.begin() + tn, bv[m]);
        const double* wp = wv.data() + m * rows;
        for (int64_t j = 0; j < rows; ++j) {
          const double wj = wp[j];
          const double* row = cols.data() + j * tile;
          for (int64_t t = 0; t < tn; ++t) acc[t] += wj * row[t];
        }
        if (integer) {
          int32_t* yp = y->data<int32_t>();
          for (int64_t t = 0; t < tn; ++t)
            yp[(nbs[t] * cout + m) * g.out_size + ops[t]] =
                static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(acc[t])));
        } else {
          for (int64_t t = 0; t < tn; ++t)
            store(y, (nbs[t] * cout + m) * g.out_size + ops[t], acc[t]);
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status conv(KernelContext& ctx) { return conv_impl(ctx, false); }
absl::Status conv_integer(KernelContext& ctx) { return conv_impl(ctx, true); }

// ---------------------------------------------------------------------------------------------
// ConvTranspose

absl::Status conv_transpose(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* x, required(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* w, required(ctx, 1));
  const Tensor* b = ctx.input(2);
  RETURN_IF_ERROR(require_float(ctx, *x));
  if (w->dtype() != x->dtype() || (b != nullptr && b->dtype() != x->dtype())) {
    return invalid(ctx, "operand types differ");
  }
  if (x->rank() < 3 || w->rank() != x->rank()) return invalid(ctx, "bad X/W rank");
  const int64_t group = ctx.node.attr_int("group", 1);
  const auto& xd = x->dims();
  const auto& wd = w->dims();
  const size_t n = xd.size() - 2;
  const int64_t batch = xd[0], cin = xd[1];
  if (group < 1 || cin % group != 0 || wd[0] != cin) {
    return invalid(ctx, "channel counts do not match group");
  }
  const int64_t mg = wd[1], cout = mg * group, cg = cin / group;
  if (b != nullptr && (b->rank() != 1 || b->dims()[0] != cout)) {
    return invalid(ctx, "bias shape is not (M)");
  }
  std::vector<int64_t> kernel(wd.begin() + 2, wd.end());
  if (auto ks = ctx.node.attr_ints("kernel_shape"); ks.has_value() && *ks != kernel) {
    return invalid(ctx, "kernel_shape does not match W");
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> strides, ints_attr(ctx, "strides", n, 1, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> dil, ints_attr(ctx, "dilations", n, 1, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> pads, ints_attr(ctx, "pads", 2 * n, 0, 0));
  ASSIGN_OR_RETURN(std::vector<int64_t> opad, ints_attr(ctx, "output_padding", n, 0, 0));
  const std::string auto_pad = ctx.node.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" &&
      auto_pad != "SAME_LOWER") {
    return invalid(ctx, "unknown auto_pad");
  }
  std::optional<std::vector<int64_t>> oshape = ctx.node.attr_ints("output_shape");
  if (oshape.has_value()) {
    // Either the spatial dims or the full output shape.
    if (oshape->size() == n + 2) oshape->erase(oshape->begin(), oshape->begin() + 2);
    if (oshape->size() != n) return invalid(ctx, "output_shape has the wrong length");
    for (int64_t v : *oshape) {
      if (v < 0 || v > kMaxDim) return invalid(ctx, "output_shape value out of range");
    }
  }
  std::vector<int64_t> in(xd.begin() + 2, xd.end()), out(n), pb(n), pe(n);
  for (size_t d = 0; d < n; ++d) {
    if (kernel[d] > kMaxDim) return invalid(ctx, "kernel too large");
    const int64_t full = strides[d] * (in[d] - 1) + opad[d] + (kernel[d] - 1) * dil[d] + 1;
    if (oshape.has_value() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out[d] = oshape.has_value() ? (*oshape)[d] : in[d] * strides[d];
      // A larger requested output than the full result is zero-filled at the end (like
      // output_padding), hence the clamp.
      const int64_t total = std::max<int64_t>(0, full - out[d]);
      if (auto_pad == "SAME_UPPER") {
        pb[d] = total / 2;
      } else {
        pb[d] = total - total / 2;
      }
      pe[d] = total - pb[d];
    } else {
      if (auto_pad == "VALID") {
        pb[d] = pe[d] = 0;
      } else {
        pb[d] = pads[d];
        pe[d] = pads[n + d];
      }
      out[d] = full - pb[d] - pe[d];
      if (out[d] < 0) return invalid(ctx, "negative output size");
    }
  }
  std::vector<int64_t> out_dims = {batch, cout};
  out_dims.insert(out_dims.end(), out.begin(), out.end());
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x->dtype(), out_dims));
  const int64_t in_size = product(in, 0, n), out_size = product(out, 0, n);
  const int64_t kernel_size = product(kernel, 0, n);
  RETURN_IF_ERROR(
      check_work(ctx, static_cast<double>(x->size()) * mg * static_cast<double>(kernel_size)));
  const Scratch<double> xv = to_doubles(*x), wv = to_doubles(*w);
  Scratch<double> acc(static_cast<size_t>(y->size()), 0.0);
  // Scatter every input element through the kernel; per input position, the output offsets of
  // the kernel points are computed once and shared by all channels.
  std::vector<int64_t> ii(n, 0), kidx(n, 0), offs(kernel_size);
  for (int64_t ip = 0; ip < in_size; ++ip, next_index(ii, in)) {
    std::fill(kidx.begin(), kidx.end(), 0);
    for (int64_t kp = 0; kp < kernel_size; ++kp, next_index(kidx, kernel)) {
      int64_t off = 0;
      for (size_t d = 0; d < n; ++d) {
        const int64_t c = ii[d] * strides[d] - pb[d] + kidx[d] * dil[d];
        if (c < 0 || c >= out[d]) {
          off = -1;
          break;
        }
        off = off * out[d] + c;
      }
      offs[kp] = off;
    }
    spend_work(static_cast<uint64_t>(batch) * static_cast<uint64_t>(cin) *
               static_cast<uint64_t>(mg) * static_cast<uint64_t>(kernel_size));
    for (int64_t nb = 0; nb < batch; ++nb) {
      for (int64_t gr = 0; gr < group; ++gr) {
        for (int64_t c = 0; c < cg; ++c) {
          const int64_t ci = gr * cg + c;
          const double xval = xv[(nb * cin + ci) * in_size + ip];
          for (int64_t m = 0; m < mg; ++m) {
            const double* wp = wv.data() + (ci * mg + m) * kernel_size;
            double* yp = acc.data() + (nb * cout + gr * mg + m) * out_size;
            for (int64_t kp = 0; kp < kernel_size; ++kp) {
              if (offs[kp] >= 0) yp[offs[kp]] += xval * wp[kp];
            }
          }
        }
      }
    }
  }
  if (b != nullptr) {
    const Scratch<double> bv = to_doubles(*b);
    for (int64_t nb = 0; nb < batch; ++nb) {
      for (int64_t m = 0; m < cout; ++m) {
        double* yp = acc.data() + (nb * cout + m) * out_size;
        for (int64_t i = 0; i < out_size; ++i) yp[i] += bv[m];
      }
    }
  }
  store_all(y, acc);
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Pools

bool pool_type_ok(int32_t t) {
  return is_float_type(t) || t == TensorProto::INT8 || t == TensorProto::UINT8;
}

absl::Status pool(KernelContext& ctx, bool is_max) {
  ASSIGN_OR_RETURN(const Tensor* x, required(ctx, 0));
  if (is_max ? !pool_type_ok(x->dtype()) : !is_float_type(x->dtype())) {
    return unimplemented(ctx, "element type");
  }
  if (x->rank() < 3) return invalid(ctx, "input rank below 3");
  const auto& xd = x->dims();
  const size_t n = xd.size() - 2;
  std::optional<std::vector<int64_t>> kernel = ctx.node.attr_ints("kernel_shape");
  if (!kernel.has_value() || kernel->size() != n) return invalid(ctx, "bad kernel_shape");
  const bool ceil_mode = ctx.node.attr_int("ceil_mode", 0) != 0;
  if (!is_max) {
    std::optional<std::vector<int64_t>> dil = ctx.node.attr_ints("dilations");
    if (dil.has_value() &&
        std::any_of(dil->begin(), dil->end(), [](int64_t v) { return v != 1; })) {
      return unimplemented(ctx, "AveragePool dilations");
    }
  }
  // AveragePool gained dilations only after the opsets this evaluator knows.
  ASSIGN_OR_RETURN(Geometry g, window_geometry(ctx, std::vector<int64_t>(xd.begin() + 2, xd.end()),
                                               *kernel, ceil_mode, is_max));
  const bool count_pad = ctx.node.attr_int("count_include_pad", 0) != 0;
  const int64_t storage_order = ctx.node.attr_int("storage_order", 0);
  if (storage_order != 0 && storage_order != 1) return invalid(ctx, "bad storage_order");
  std::vector<int64_t> out_dims = {xd[0], xd[1]};
  out_dims.insert(out_dims.end(), g.out.begin(), g.out.end());
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x->dtype(), out_dims));
  Tensor* indices = nullptr;
  if (is_max && ctx.node.output(1) != nullptr) {
    ASSIGN_OR_RETURN(indices, ctx.make_output(1, TensorProto::INT64, out_dims));
  }
  const int64_t planes = xd[0] * xd[1];
  RETURN_IF_ERROR(
      check_work(ctx, static_cast<double>(y->size()) * static_cast<double>(g.kernel_size)));
  const Scratch<double> xv = to_doubles(*x);
  std::vector<int64_t> o(g.n, 0), kidx(g.n, 0);
  std::vector<WindowPoint> pts;
  pts.reserve(g.kernel_size);
  for (int64_t op = 0; op < g.out_size; ++op, next_index(o, g.out)) {
    window_points(g, o, kidx, pts);
    spend_work(static_cast<uint64_t>(planes) * pts.size());
    for (int64_t pl = 0; pl < planes; ++pl) {
      const double* xp = xv.data() + pl * g.in_size;
      const int64_t yi = pl * g.out_size + op;
      if (is_max) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t arg = -1;
        for (const WindowPoint& p : pts) {
          if (p.offset >= 0 && (arg < 0 || xp[p.offset] > best)) {
            best = xp[p.offset];
            arg = storage_order == 0 ? p.offset : p.col_offset;
          }
        }
        store(y, yi, best);
        if (indices != nullptr) {
          indices->data<int64_t>()[yi] = arg < 0 ? -1 : pl * g.in_size + arg;
        }
      } else {
        double sum = 0;
        int64_t count = 0;
        for (const WindowPoint& p : pts) {
          if (p.offset >= 0) sum += xp[p.offset];
          if (count_pad ? p.in_padded : p.offset >= 0) ++count;
        }
        store(y, yi,
              count > 0 ? sum / static_cast<double>(count)
                        : std::numeric_limits<double>::quiet_NaN());
      }
    }
  }
  return absl::OkStatus();
}

absl::Status global_pool(KernelContext& ctx, bool is_max) {
  ASSIGN_OR_RETURN(const Tensor* x, required(ctx, 0));
  RETURN_IF_ERROR(require_float(ctx, *x));
  if (x->rank() < 2) return invalid(ctx, "input rank below 2");
  const auto& xd = x->dims();
  std::vector<int64_t> out_dims(xd.size(), 1);
  out_dims[0] = xd[0];
  out_dims[1] = xd[1];
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x->dtype(), out_dims));
  const int64_t planes = xd[0] * xd[1], inner = product(xd, 2, xd.size());
  const Scratch<double> xv = to_doubles(*x);
  for (int64_t pl = 0; pl < planes; ++pl) {
    const double* xp = xv.data() + pl * inner;
    double r = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
    for (int64_t i = 0; i < inner; ++i) r = is_max ? std::max(r, xp[i]) : r + xp[i];
    if (!is_max) {
      r = inner > 0 ? r / static_cast<double>(inner) : std::numeric_limits<double>::quiet_NaN();
    }
    store(y, pl, r);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// QuantizeLinear / DequantizeLinear
//
// The scale's shape sets the granularity: a scalar (or a one-element 1-D scale) is per tensor;
// from opset 13 a 1-D scale as long as x's dim `axis` is per axis; from opset 21, with
// `block_size` B > 0, a scale of x's rank is blocked: its dim `axis` is ceil(x.dims[axis] / B),
// every other dim is x's, and the element at coordinate d along `axis` uses the scale at d / B.
// The zero point has the scale's shape and the quantized type. Quantized types: int8, uint8
// (opset 10; DequantizeLinear's x also int32), int16, uint16, int4, uint4 (21); float8 is not
// evaluated (Unimplemented). Scales: float (10), float16 and bfloat16 (19); the float output has
// the scale's type (DequantizeLinear's output_dtype from opset 23 overrides it). QuantizeLinear's
// output type is its zero point's, else output_dtype (21), else uint8. Every mismatch of shape,
// type or attribute is InvalidArgument.

// Element i of x -> index of its scale and zero point.
struct QuantGrid {
  enum Kind { kTensor, kAxis, kBlocked };
  Kind kind = kTensor;
  int64_t dim = 1, inner = 1;     // x's extent along `axis` and the product of the dims after it
  int64_t blocks = 1, block = 1;  // kBlocked: the scale's extent along `axis`, block_size
  int64_t index(int64_t i) const {
    switch (kind) {
      case kTensor:
        return 0;
      case kAxis:
        return (i / inner) % dim;
      case kBlocked: {
        const int64_t outer = i / (dim * inner), d = (i / inner) % dim, in = i % inner;
        return (outer * blocks + d / block) * inner + in;
      }
    }
    return 0;
  }
};

absl::StatusOr<QuantGrid> quant_grid(const KernelContext& ctx, const Tensor& x, const Tensor& scale,
                                     const Tensor* zp) {
  if (zp != nullptr && zp->dims() != scale.dims())
    return invalid(ctx, "scale and zero point shapes differ");
  const onnx::AttributeProto* bs = ctx.node.attr("block_size");
  if (bs != nullptr && ctx.opset < 21)
    return invalid(ctx, absl::StrCat("block_size is an attribute from opset 21, not ", ctx.opset));
  const int64_t block = ctx.node.attr_int("block_size", 0);
  if (block < 0) return invalid(ctx, absl::StrCat("block_size must be positive, got ", block));
  QuantGrid q;
  if (scale.rank() == 0 || (scale.rank() == 1 && scale.dims()[0] == 1)) return q;
  if (block == 0 && (scale.rank() != 1 || ctx.opset < 13))
    return invalid(ctx, ctx.opset < 13 ? "scale must be a scalar before opset 13"
                                       : "scale must be a scalar or 1-D without block_size");
  if (block > 0 && scale.rank() != x.rank())
    return invalid(ctx, absl::StrCat("blocked quantization needs a scale of x's rank ", x.rank(),
                                     ", got rank ", scale.rank()));
  ASSIGN_OR_RETURN(int64_t axis, norm_axis(ctx, ctx.node.attr_int("axis", 1), x.rank()));
  q.dim = x.dims()[axis];
  q.inner = product(x.dims(), axis + 1, x.dims().size());
  if (block == 0) {
    if (scale.dims()[0] != q.dim)
      return invalid(ctx, absl::StrCat("per-axis scale has ", scale.dims()[0], " elements, x has ",
                                       q.dim, " along axis ", axis));
    q.kind = QuantGrid::kAxis;
    return q;
  }
  for (int64_t j = 0; j < x.rank(); ++j) {
    const int64_t want = j == axis ? q.dim / block + (q.dim % block != 0) : x.dims()[j];
    if (scale.dims()[j] != want)
      return invalid(ctx, absl::StrCat("blocked scale dim ", j, " is ", scale.dims()[j],
                                       ", expected ", want, " (x dim ", x.dims()[j],
                                       j == axis ? absl::StrCat(", block_size ", block) : "", ")"));
  }
  q.kind = QuantGrid::kBlocked;
  q.blocks = scale.dims()[axis];
  q.block = block;
  return q;
}

// The range of a quantized integer type usable at `opset`; nullopt for other types.
std::optional<std::pair<int64_t, int64_t>> quantized_range(int32_t dtype, int64_t opset) {
  switch (dtype) {
    case TensorProto::INT8:
      return std::pair<int64_t, int64_t>{-128, 127};
    case TensorProto::UINT8:
      return std::pair<int64_t, int64_t>{0, 255};
    case TensorProto::INT16:
      if (opset < 21) return std::nullopt;
      return std::pair<int64_t, int64_t>{-32768, 32767};
    case TensorProto::UINT16:
      if (opset < 21) return std::nullopt;
      return std::pair<int64_t, int64_t>{0, 65535};
    case ir::kInt4:
      if (opset < 21) return std::nullopt;
      return std::pair<int64_t, int64_t>{-8, 7};
    case ir::kUint4:
      if (opset < 21) return std::nullopt;
      return std::pair<int64_t, int64_t>{0, 15};
    default:
      return std::nullopt;
  }
}

// Scales (and DequantizeLinear's output) are float, and from opset 19 float16 or bfloat16 too.
bool scale_type_ok(int32_t dtype, int64_t opset) {
  return dtype == TensorProto::FLOAT ||
         (opset >= 19 && (dtype == TensorProto::FLOAT16 || dtype == TensorProto::BFLOAT16));
}

std::string type_text(int32_t dtype) { return ir::dtype_name(dtype); }

absl::Status quantize(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* x, required(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* scale, required(ctx, 1));
  const Tensor* zp = ctx.input(2);
  const int32_t xt = x->dtype();
  if (xt != TensorProto::INT32 && !scale_type_ok(xt, ctx.opset))
    return unimplemented(ctx, absl::StrCat("input element type ", type_text(xt)));
  if (!scale_type_ok(scale->dtype(), ctx.opset))
    return unimplemented(ctx, absl::StrCat("scale element type ", type_text(scale->dtype())));
  const onnx::AttributeProto* od = ctx.node.attr("output_dtype");
  if (od != nullptr && ctx.opset < 21)
    return invalid(ctx, "output_dtype is an attribute from opset 21");
  int32_t out_type = zp != nullptr ? zp->dtype() : TensorProto::UINT8;
  if (od != nullptr && od->i() != 0) {
    if (zp != nullptr && od->i() != zp->dtype())
      return invalid(ctx, absl::StrCat("output_dtype ", od->i(), " is not the zero point's type ",
                                       type_text(zp->dtype())));
    if (od->i() < 0 || od->i() > std::numeric_limits<int32_t>::max())
      return invalid(ctx, absl::StrCat("output_dtype ", od->i(), " is not a data type"));
    out_type = static_cast<int32_t>(od->i());
  }
  const auto range = quantized_range(out_type, ctx.opset);
  if (!range)
    return unimplemented(
        ctx, absl::StrCat("output element type ", type_text(out_type), " at opset ", ctx.opset));
  ASSIGN_OR_RETURN(QuantGrid q, quant_grid(ctx, *x, *scale, zp));
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, out_type, x->dims()));
  const auto lo = static_cast<double>(range->first), hi = static_cast<double>(range->second);
  const int32_t st = scale->dtype();
  for (int64_t i = 0; i < x->size(); ++i) {
    poll_every(i);
    const int64_t qi = q.index(i);
    // Divide in float like the ONNX reference (in the scale's type: a float16 quotient is
    // rounded to float16), so ties round the same way; then round half to even.
    const auto xv = static_cast<float>(x->get_double(i));
    const auto sv = static_cast<float>(scale->get_double(qi));
    double r = std::nearbyint(round_to_type(st, static_cast<double>(xv / sv)));
    if (zp != nullptr) r += static_cast<double>(zp->get_int64(qi));
    if (std::isnan(r)) r = 0;
    y->set_int64(i, static_cast<int64_t>(std::clamp(r, lo, hi)));
  }
  return absl::OkStatus();
}

absl::Status dequantize(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* x, required(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* scale, required(ctx, 1));
  const Tensor* zp = ctx.input(2);
  const int32_t xt = x->dtype();
  if (xt != TensorProto::INT32 && !quantized_range(xt, ctx.opset))
    return unimplemented(
        ctx, absl::StrCat("input element type ", type_text(xt), " at opset ", ctx.opset));
  if (!scale_type_ok(scale->dtype(), ctx.opset))
    return unimplemented(ctx, absl::StrCat("scale element type ", type_text(scale->dtype())));
  if (zp != nullptr && zp->dtype() != xt)
    return invalid(ctx, absl::StrCat("zero point type ", type_text(zp->dtype()),
                                     " is not x's type ", type_text(xt)));
  int32_t out_type = scale->dtype();
  if (const onnx::AttributeProto* od = ctx.node.attr("output_dtype")) {
    if (ctx.opset < 23) return invalid(ctx, "output_dtype is an attribute from opset 23");
    if (od->i() != 0) {
      if (od->i() < 0 || od->i() > std::numeric_limits<int32_t>::max() ||
          !scale_type_ok(static_cast<int32_t>(od->i()), ctx.opset))
        return invalid(ctx, absl::StrCat("output_dtype ", od->i(), " is not a float type"));
      out_type = static_cast<int32_t>(od->i());
    }
  }
  ASSIGN_OR_RETURN(QuantGrid q, quant_grid(ctx, *x, *scale, zp));
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, out_type, x->dims()));
  const bool float_out = out_type == TensorProto::FLOAT && scale->dtype() == TensorProto::FLOAT;
  const float* sp = float_out ? scale->data<float>() : nullptr;
  for (int64_t i = 0; i < x->size(); ++i) {
    poll_every(i);
    const int64_t qi = q.index(i);
    const int64_t v = x->get_int64(i) - (zp != nullptr ? zp->get_int64(qi) : 0);
    if (float_out) {
      y->data<float>()[i] = static_cast<float>(v) * sp[qi];
    } else {
      // In float, like the reference, then rounded to the output type.
      y->set_double(i, static_cast<double>(static_cast<float>(v) *
                                           static_cast<float>(scale->get_double(qi))));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Resize

// Interpolation taps of one output coordinate along one axis.
struct Taps {
  int64_t first = 0;  // offset into the per-axis tap arrays
  int64_t count = 0;  // 0 = outside the crop region (extrapolation_value)
};

// How a Resize samples: its attributes (Resize 11+), or the fixed mapping of Upsample and
// Resize-10.
struct ResizeParams {
  std::string mode, ctm, nearest_mode;
  double cubic_a = -0.75;
  bool exclude_outside = false;
  double extrapolation = 0;
};

absl::Status resize_with(KernelContext& ctx, const Tensor* roi, const Tensor* scales,
                         const Tensor* sizes, const ResizeParams& p);

absl::Status resize(KernelContext& ctx) {
  ResizeParams p;
  p.mode = ctx.node.attr_string("mode", "nearest");
  p.ctm = ctx.node.attr_string("coordinate_transformation_mode", "half_pixel");
  p.nearest_mode = ctx.node.attr_string("nearest_mode", "round_prefer_floor");
  p.cubic_a = ctx.node.attr_float("cubic_coeff_a", -0.75f);
  p.exclude_outside = ctx.node.attr_int("exclude_outside", 0) != 0;
  p.extrapolation = ctx.node.attr_float("extrapolation_value", 0.0f);
  return resize_with(ctx, ctx.input(1), ctx.input(2), ctx.input(3), p);
}

// Upsample (7: scales attribute, 9: input) and Resize-10 (X, scales): x_in = x_out / scale,
// nearest rounded down, as ONNX's reference and version converter define them.
absl::Status upsample(KernelContext& ctx) {
  ResizeParams p;
  p.mode = ctx.node.attr_string("mode", "nearest");
  if (p.mode == "bilinear") p.mode = "linear";
  if (p.mode == "cubic") return invalid(ctx, "mode");
  p.ctm = "asymmetric";
  p.nearest_mode = "floor";
  const Tensor* scales = ctx.input(1);
  Tensor from_attribute;
  if (scales == nullptr && ctx.node.op_type() == "Upsample") {
    const auto* a = ctx.node.attr("scales");
    if (a == nullptr) return invalid(ctx, "no scales");
    ASSIGN_OR_RETURN(from_attribute,
                     Tensor::zeros(TensorProto::FLOAT, {static_cast<int64_t>(a->floats_size())},
                                   ctx.limits.max_tensor_bytes));
    for (int i = 0; i < a->floats_size(); ++i) from_attribute.set_double(i, a->floats(i));
    scales = &from_attribute;
  }
  return resize_with(ctx, nullptr, scales, nullptr, p);
}

absl::Status resize_with(KernelContext& ctx, const Tensor* roi, const Tensor* scales,
                         const Tensor* sizes, const ResizeParams& p) {
  ASSIGN_OR_RETURN(const Tensor* x, required(ctx, 0));
  RETURN_IF_ERROR(require_float(ctx, *x));
  const size_t rank = x->dims().size();
  const std::string& mode = p.mode;
  const std::string& ctm = p.ctm;
  const std::string& nearest_mode = p.nearest_mode;
  const double cubic_a = p.cubic_a;
  const bool exclude_outside = p.exclude_outside;
  const double extrapolation = p.extrapolation;
  if (mode != "nearest" && mode != "linear" && mode != "cubic") return invalid(ctx, "mode");
  if (ctm != "half_pixel" && ctm != "pytorch_half_pixel" && ctm != "align_corners" &&
      ctm != "asymmetric" && ctm != "tf_half_pixel_for_nn" && ctm != "tf_crop_and_resize") {
    return unimplemented(ctx, "coordinate_transformation_mode");
  }
  if (nearest_mode != "round_prefer_floor" && nearest_mode != "round_prefer_ceil" &&
      nearest_mode != "floor" && nearest_mode != "ceil") {
    return invalid(ctx, "nearest_mode");
  }
  if (rank == 0) return invalid(ctx, "scalar input");
  std::vector<int64_t> out(rank);
  Scratch<double> scale(rank);
  // The resized length the coordinate transforms use: with `scales` it is in*scale, unrounded
  // (as in the ONNX reference the test data come from), not the integer output size.
  Scratch<double> rlen(rank);
  if (sizes != nullptr && sizes->size() > 0) {
    if (scales != nullptr && scales->size() > 0) return invalid(ctx, "both scales and sizes");
    if (sizes->dtype() != TensorProto::INT64 || sizes->size() != static_cast<int64_t>(rank)) {
      return invalid(ctx, "sizes must be int64 of length rank");
    }
    for (size_t d = 0; d < rank; ++d) {
      out[d] = sizes->data<int64_t>()[d];
      if (out[d] < 0 || out[d] > kMaxDim) return invalid(ctx, "sizes value out of range");
      scale[d] = x->dims()[d] > 0 ? static_cast<double>(out[d]) / x->dims()[d] : 1.0;
      rlen[d] = static_cast<double>(out[d]);
    }
  } else {
    if (scales == nullptr || scales->dtype() != TensorProto::FLOAT ||
        scales->size() != static_cast<int64_t>(rank)) {
      return invalid(ctx, "scales must be float of length rank");
    }
    for (size_t d = 0; d < rank; ++d) {
      scale[d] = scales->data<float>()[d];
      const double o = std::floor(x->dims()[d] * scale[d]);
      if (!(scale[d] > 0) || !(o <= static_cast<double>(kMaxDim))) {
        return invalid(ctx, "scales value out of range");
      }
      out[d] = static_cast<int64_t>(o);
      rlen[d] = x->dims()[d] * scale[d];
    }
  }
  Scratch<double> roi_v;
  if (ctm == "tf_crop_and_resize") {
    if (roi == nullptr || roi->size() != static_cast<int64_t>(2 * rank) ||
        !is_float_type(roi->dtype())) {
      return invalid(ctx, "roi must have 2*rank values");
    }
    roi_v = to_doubles(*roi);
  }
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x->dtype(), out));
  if (y->size() == 0) return absl::OkStatus();
  const auto& in = x->dims();
  for (int64_t v : in) {
    if (v == 0) return invalid(ctx, "empty input with non-empty output");
  }

  // Per axis and output coordinate: the input indices and weights it reads.
  std::vector<std::vector<Taps>> taps(rank);
  std::vector<std::vector<int64_t>> tap_idx(rank);
  std::vector<Scratch<double>> tap_w(rank);
  int64_t max_taps = 1;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t len = in[d];
    taps[d].resize(out[d]);
    for (int64_t o = 0; o < out[d]; ++o) {
      double xo;
      if (ctm == "half_pixel") {
        xo = (o + 0.5) / scale[d] - 0.5;
      } else if (ctm == "pytorch_half_pixel") {
        xo = rlen[d] > 1 ? (o + 0.5) / scale[d] - 0.5 : 0.0;
      } else if (ctm == "align_corners") {
        xo = rlen[d] == 1 ? 0.0 : o * static_cast<double>(len - 1) / (rlen[d] - 1);
      } else if (ctm == "asymmetric") {
        xo = o / scale[d];
      } else if (ctm == "tf_half_pixel_for_nn") {
        xo = (o + 0.5) / scale[d];
      } else {  // tf_crop_and_resize
        const double start = roi_v[d], end = roi_v[rank + d];
        xo = rlen[d] > 1 ? start * (len - 1) + o * (end - start) * (len - 1) / (rlen[d] - 1)
                         : 0.5 * (start + end) * (len - 1);
      }
      Taps& t = taps[d][o];
      t.first = static_cast<int64_t>(tap_idx[d].size());
      if (ctm == "tf_crop_and_resize" && (xo < 0 || xo > len - 1)) {
        t.count = 0;
        continue;
      }
      if (mode == "nearest") {
        double r;
        const double fl = std::floor(xo);
        if (nearest_mode == "floor") {
          r = fl;
        } else if (nearest_mode == "ceil") {
          r = std::ceil(xo);
        } else if (xo - fl == 0.5) {
          r = nearest_mode == "round_prefer_ceil" ? fl + 1 : fl;
        } else {
          r = std::round(xo);
        }
        r = std::clamp(r, 0.0, static_cast<double>(len - 1));
        tap_idx[d].push_back(static_cast<int64_t>(r));
        tap_w[d].push_back(1.0);
        t.count = 1;
        continue;
      }
      const double fl = std::floor(xo);
      const double ratio = xo - fl;
      const int64_t base = static_cast<int64_t>(fl);
      if (mode == "linear") {
        const double w[2] = {1.0 - ratio, ratio};
        for (int j = 0; j < 2; ++j) {
          tap_idx[d].push_back(std::clamp<int64_t>(base + j, 0, len - 1));
          tap_w[d].push_back(w[j]);
        }
        t.count = 2;
      } else {
        const double a = cubic_a;
        const double r1 = ratio + 1, r2 = 1 - ratio, r3 = 2 - ratio;
        double w[4] = {((a * r1 - 5 * a) * r1 + 8 * a) * r1 - 4 * a,
                       ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
                       ((a + 2) * r2 - (a + 3)) * r2 * r2 + 1,
                       ((a * r3 - 5 * a) * r3 + 8 * a) * r3 - 4 * a};
        if (exclude_outside) {
          double sum = 0;
          for (int j = 0; j < 4; ++j) {
            const int64_t idx = base - 1 + j;
            if (idx < 0 || idx >= len) w[j] = 0;
            sum += w[j];
          }
          for (double& v : w) v = sum != 0 ? v / sum : 0;
        }
        for (int j = 0; j < 4; ++j) {
          tap_idx[d].push_back(std::clamp<int64_t>(base - 1 + j, 0, len - 1));
          tap_w[d].push_back(w[j]);
        }
        t.count = 4;
      }
    }
    max_taps *= (mode == "nearest" ? 1 : mode == "linear" ? 2 : 4);
  }
  RETURN_IF_ERROR(check_work(ctx, static_cast<double>(y->size()) * max_taps));

  const Scratch<double> xv = to_doubles(*x);
  std::vector<int64_t> in_strides(rank, 1);
  for (size_t d = rank - 1; d-- > 0;) in_strides[d] = in_strides[d + 1] * in[d + 1];
  std::vector<int64_t> o(rank, 0), t(rank, 0);
  for (int64_t yi = 0; yi < y->size(); ++yi, next_index(o, out)) {
    spend_work(static_cast<uint64_t>(max_taps));
    bool outside = false;
    for (size_t d = 0; d < rank; ++d) outside |= taps[d][o[d]].count == 0;
    if (outside) {
      store(y, yi, extrapolation);
      continue;
    }
    // Sum over the tensor product of the per-axis taps.
    std::fill(t.begin(), t.end(), 0);
    double acc = 0;
    while (true) {
      double w = 1;
      int64_t off = 0;
      for (size_t d = 0; d < rank; ++d) {
        const int64_t k = taps[d][o[d]].first + t[d];
        w *= tap_w[d][k];
        off += tap_idx[d][k] * in_strides[d];
      }
      if (w != 0) acc += w * xv[off];
      size_t d = rank;
      while (d-- > 0) {
        if (++t[d] < taps[d][o[d]].count) break;
        t[d] = 0;
      }
      if (d == static_cast<size_t>(-1)) break;
    }
    store(y, yi, acc);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Einsum

constexpr int kLetters = 52;

int label_of(char c) {
  if (c >= 'a' && c <= 'z') return c - 'a';
  if (c >= 'A' && c <= 'Z') return 26 + (c - 'A');
  return -1;
}

// One einsum term: its labels, ellipsis dims as labels kLetters + j (right-aligned).
absl::StatusOr<std::vector<int>> parse_term(const KernelContext& ctx, const std::string& s,
                                            int64_t rank, int64_t* ell_rank) {
  std::vector<int> labels;
  int64_t letters = 0;
  bool ell = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '.') {
      if (ell || s.compare(i, 3, "...") != 0) return invalid(ctx, "bad ellipsis");
      ell = true;
      labels.push_back(-1);
      i += 2;
    } else if (label_of(s[i]) >= 0) {
      labels.push_back(label_of(s[i]));
      ++letters;
    } else {
      return invalid(ctx, "bad character in equation");
    }
  }
  if (rank < 0) {  // output term: ellipsis expands to the broadcast ellipsis rank
    rank = letters + (ell ? *ell_rank : 0);
  }
  const int64_t er = rank - letters;
  if (er < 0 || (!ell && er != 0)) return invalid(ctx, "term does not match operand rank");
  std::vector<int> expanded;
  for (int l : labels) {
    if (l >= 0) {
      expanded.push_back(l);
    } else {
      // Right-aligned numbering so operands with fewer ellipsis dims broadcast.
      for (int64_t j = 0; j < er; ++j) expanded.push_back(kLetters + static_cast<int>(er - 1 - j));
    }
  }
  if (ell) *ell_rank = std::max(*ell_rank, er);
  return expanded;
}

template <typename T>
absl::Status einsum_impl(KernelContext& ctx, const std::vector<std::vector<int>>& terms,
                         const std::vector<int>& out_labels, const std::vector<int64_t>& dim_of,
                         const std::vector<int>& all_labels) {
  const size_t ni = terms.size();
  std::vector<int64_t> out_dims;
  for (int l : out_labels) out_dims.push_back(dim_of[l]);
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, ctx.inputs[0]->dtype(), out_dims));
  const int nl = static_cast<int>(all_labels.size());
  double work = 1;
  for (int l : all_labels) work *= static_cast<double>(dim_of[l]);
  RETURN_IF_ERROR(check_work(ctx, work * static_cast<double>(ni)));
  // Strides of every operand (and the output) along every label; repeated labels add up, which
  // walks diagonals; broadcast (size-1) dims get stride 0.
  std::vector<std::vector<int64_t>> strides(ni + 1, std::vector<int64_t>(nl, 0));
  std::vector<int> pos(kLetters + 64, -1);
  for (int i = 0; i < nl; ++i) pos[all_labels[i]] = i;
  for (size_t k = 0; k <= ni; ++k) {
    const std::vector<int>& term = k < ni ? terms[k] : out_labels;
    const std::vector<int64_t> dims = k < ni ? ctx.inputs[k]->dims() : out_dims;
    int64_t s = 1;
    for (size_t j = term.size(); j-- > 0;) {
      if (dims[j] != 1 || dim_of[term[j]] == 1) strides[k][pos[term[j]]] += s;
      s *= dims[j];
    }
  }
  std::vector<Scratch<T>> vals;
  for (size_t k = 0; k < ni; ++k) vals.push_back(values<T>(*ctx.inputs[k]));
  Scratch<T> acc(static_cast<size_t>(y->size()), T{0});
  if (y->size() > 0 && work > 0) {
    std::vector<int64_t> idx(nl, 0), off(ni + 1, 0);
    while (true) {
      spend_work(ni);
      T p = vals[0][off[0]];
      for (size_t k = 1; k < ni; ++k) p = mul_add(T{0}, p, vals[k][off[k]]);
      acc[off[ni]] = mul_add(acc[off[ni]], p, T{1});
      int l = nl;
      while (l-- > 0) {
        const int64_t dl = dim_of[all_labels[l]];
        if (++idx[l] < dl) {
          for (size_t k = 0; k <= ni; ++k) off[k] += strides[k][l];
          break;
        }
        idx[l] = 0;
        for (size_t k = 0; k <= ni; ++k) off[k] -= strides[k][l] * (dl - 1);
      }
      if (l < 0) break;
    }
  }
  for (int64_t i = 0; i < y->size(); ++i) store(y, i, acc[i]);
  return absl::OkStatus();
}

absl::Status einsum(KernelContext& ctx) {
  std::string eq;
  for (char c : ctx.node.attr_string("equation", "")) {
    if (c != ' ') eq += c;
  }
  if (ctx.inputs.empty()) return invalid(ctx, "no inputs");
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    ASSIGN_OR_RETURN(const Tensor* t, required(ctx, k));
    if (t->dtype() != ctx.inputs[0]->dtype()) return invalid(ctx, "operand types differ");
  }
  const int32_t dtype = ctx.inputs[0]->dtype();
  if (!matmul_type_ok(dtype)) return unimplemented(ctx, "element type");
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    const size_t comma = lhs.find(',', start);
    parts.push_back(lhs.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (parts.size() != ctx.inputs.size()) return invalid(ctx, "term count != input count");
  int64_t ell_rank = 0;
  std::vector<std::vector<int>> terms;
  for (size_t k = 0; k < parts.size(); ++k) {
    ASSIGN_OR_RETURN(std::vector<int> t,
                     parse_term(ctx, parts[k], ctx.inputs[k]->rank(), &ell_rank));
    terms.push_back(std::move(t));
  }
  std::vector<int64_t> dim_of(kLetters + 64, -1);
  std::vector<int> count(kLetters + 64, 0);
  for (size_t k = 0; k < terms.size(); ++k) {
    const auto& dims = ctx.inputs[k]->dims();
    for (size_t j = 0; j < terms[k].size(); ++j) {
      const int l = terms[k][j];
      if (l >= kLetters + 64) return unimplemented(ctx, "too many ellipsis dims");
      ++count[l];
      if (dim_of[l] < 0 || dim_of[l] == 1) {
        dim_of[l] = dims[j];
      } else if (dims[j] != dim_of[l] && dims[j] != 1) {
        return invalid(ctx, "label dimensions differ");
      }
    }
  }
  std::vector<int> out_labels;
  if (arrow != std::string::npos) {
    ASSIGN_OR_RETURN(out_labels, parse_term(ctx, eq.substr(arrow + 2), -1, &ell_rank));
    std::vector<bool> seen(kLetters + 64, false);
    for (int l : out_labels) {
      if (seen[l] || dim_of[l] < 0) return invalid(ctx, "bad output label");
      seen[l] = true;
    }
  } else {
    for (int64_t j = ell_rank; j-- > 0;) out_labels.push_back(kLetters + static_cast<int>(j));
    // Implicit output: labels used exactly once, in alphabetical (ASCII) order.
    for (int l = 26; l < 52; ++l) {
      if (count[l] == 1) out_labels.push_back(l);
    }
    for (int l = 0; l < 26; ++l) {
      if (count[l] == 1) out_labels.push_back(l);
    }
  }
  for (int l : out_labels) {
    if (dim_of[l] < 0) dim_of[l] = 1;  // ellipsis dims no operand has
  }
  std::vector<int> all = out_labels;
  for (int l = 0; l < kLetters + 64; ++l) {
    if (dim_of[l] >= 0 && std::find(all.begin(), all.end(), l) == all.end()) all.push_back(l);
  }
  if (is_float_type(dtype)) return einsum_impl<double>(ctx, terms, out_labels, dim_of, all);
  return einsum_impl<int64_t>(ctx, terms, out_labels, dim_of, all);
}

}  // namespace

void register_nn_kernels() {
  register_kernel("MatMul", 1, 0, matmul);
  register_kernel("Gemm", 1, 0, gemm);
  register_kernel("Softmax", 1, 0, [](KernelContext& ctx) { return softmax_impl(ctx, false); });
  register_kernel("LogSoftmax", 1, 0, [](KernelContext& ctx) { return softmax_impl(ctx, true); });
  register_kernel("BatchNormalization", 1, 0, batch_norm);
  register_kernel("LayerNormalization", 17, 0, layer_norm);
  register_kernel("RMSNormalization", 23, 0, rms_norm);
  register_kernel("Conv", 1, 0, conv);
  register_kernel("ConvTranspose", 1, 0, conv_transpose);
  register_kernel("ConvInteger", 10, 0, conv_integer);
  register_kernel("MaxPool", 1, 0, [](KernelContext& ctx) { return pool(ctx, true); });
  register_kernel("AveragePool", 1, 0, [](KernelContext& ctx) { return pool(ctx, false); });
  register_kernel("GlobalAveragePool", 1, 0,
                  [](KernelContext& ctx) { return global_pool(ctx, false); });
  register_kernel("GlobalMaxPool", 1, 0, [](KernelContext& ctx) { return global_pool(ctx, true); });
  register_kernel("QuantizeLinear", 10, 0, quantize);
  register_kernel("DequantizeLinear", 10, 0, dequantize);
  register_kernel("Resize", 11, 0, resize);
  register_kernel("Resize", 10, 10, upsample);
  register_kernel("Upsample", 7, 0, upsample);
  register_kernel("Einsum", 12, 0, einsum);
}

}  // namespace graft::eval
