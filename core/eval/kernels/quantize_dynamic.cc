// Dynamic quantization kernels: DynamicQuantizeLinear (opset 11) and MatMulInteger (opset 10),
// what quantize_dynamic_int8 produces.
//
// DynamicQuantizeLinear follows the ONNX reference step by step in float32: the range is
// [min(0, min x), max(0, max x)], scale = range / 255, zero point = saturate(round(-min /
// scale)), y = saturate(round(x / scale) + zero point), rounding half to even. Where the
// reference divides by zero (an all-zero or empty input: scale 0) the zero point and y are 0; a
// NaN element does not take part in the range and quantizes to the zero point, an infinite range
// gives an infinite scale (every y is the zero point).
//
// MatMulInteger: numpy matmul semantics on (A - a_zero_point) and (B - b_zero_point), int8 or
// uint8 operands, int32 result accumulated in int32 as the spec allows (wrapping, never
// undefined). Zero points are scalars (or [1]), or 1-D: per row of A (length M), per column of
// B (length N), of the operand's own type.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>

#include "core/eval/broadcast.h"
#include "core/eval/budget.h"
#include "core/eval/kernel.h"
#include "core/eval/kernels.h"
#include "core/eval/kernels/common.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

// ---------------------------------------------------------------------------------------------
// DynamicQuantizeLinear

absl::Status dynamic_quantize_linear(KernelContext& ctx) {
  const Tensor* x = ctx.input(0);
  if (x == nullptr) return invalid(ctx, "missing input 0");
  if (x->dtype() != TensorProto::FLOAT) return invalid(ctx, "input must be float32");
  const float* xp = x->data<float>();
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < x->size(); ++i) {
    poll_every(i);
    if (xp[i] < lo) lo = xp[i];
    if (xp[i] > hi) hi = xp[i];
  }
  const float scale = (hi - lo) / 255.0f;
  float zp = 0;
  if (scale > 0 && std::isfinite(scale)) {
    zp = std::clamp(std::nearbyint(0.0f - lo / scale), 0.0f, 255.0f);
  } else if (std::isinf(scale)) {
    // -lo / inf is 0 for a finite lo; an infinite lo gives NaN in the reference: keep 0 or 255.
    zp = std::isinf(lo) ? (std::isinf(hi) ? 0.0f : 255.0f) : 0.0f;
  }
  // Allocate after the checks: make_output charges the elements as work.
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, TensorProto::UINT8, x->dims()));
  ASSIGN_OR_RETURN(Tensor * ys, ctx.make_output(1, TensorProto::FLOAT, {}));
  ASSIGN_OR_RETURN(Tensor * yz, ctx.make_output(2, TensorProto::UINT8, {}));
  ys->data<float>()[0] = scale;
  yz->data<uint8_t>()[0] = static_cast<uint8_t>(zp);
  uint8_t* yp = y->data<uint8_t>();
  if (!(scale > 0)) {  // all-zero or empty input: every element is the zero point 0
    std::fill(yp, yp + x->size(), static_cast<uint8_t>(zp));
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < x->size(); ++i) {
    poll_every(i);
    float r = std::nearbyint(xp[i] / scale);
    if (std::isnan(r)) r = 0;
    r = std::clamp(r + zp, 0.0f, 255.0f);
    yp[i] = static_cast<uint8_t>(r);
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// MatMulInteger

int32_t load8(const Tensor& t, int64_t i) {
  return t.dtype() == TensorProto::UINT8 ? static_cast<int32_t>(t.data<uint8_t>()[i])
                                         : static_cast<int32_t>(t.data<int8_t>()[i]);
}

// Checks an optional zero point of `operand`'s type: a scalar or [1] (per tensor), or 1-D of
// length `per_axis_len` (per row of A / per column of B). Returns its length (1 when absent).
absl::StatusOr<int64_t> zero_point_len(const KernelContext& ctx, const Tensor* zp,
                                       const Tensor& operand, int64_t per_axis_len,
                                       const char* what) {
  if (zp == nullptr) return 1;
  if (zp->dtype() != operand.dtype())
    return invalid(ctx, absl::StrCat(what, " zero point type differs from its operand"));
  if (zp->rank() == 0) return 1;
  if (zp->rank() != 1) return invalid(ctx, absl::StrCat(what, " zero point must be 0-D or 1-D"));
  const int64_t len = zp->dims()[0];
  if (len == 1 || len == per_axis_len) return len;
  return invalid(
      ctx, absl::StrCat(what, " zero point has ", len, " elements, expected 1 or ", per_axis_len));
}

absl::Status matmul_integer(KernelContext& ctx) {
  const Tensor* a = ctx.input(0);
  const Tensor* b = ctx.input(1);
  if (a == nullptr || b == nullptr) return invalid(ctx, "missing input");
  if (!is_8bit(a->dtype()) || !is_8bit(b->dtype()))
    return invalid(ctx, "operands must be int8 or uint8");
  if (a->rank() < 1 || b->rank() < 1) return invalid(ctx, "scalar operand");
  std::vector<int64_t> ad = a->dims(), bd = b->dims();
  const bool a_vec = ad.size() == 1, b_vec = bd.size() == 1;
  if (a_vec) ad.insert(ad.begin(), 1);
  if (b_vec) bd.push_back(1);
  const int64_t m = ad[ad.size() - 2], k = ad.back(), n = bd.back();
  if (bd[bd.size() - 2] != k) return invalid(ctx, "inner dimensions differ");
  ASSIGN_OR_RETURN(const int64_t azl, zero_point_len(ctx, ctx.input(2), *a, m, "a"));
  ASSIGN_OR_RETURN(const int64_t bzl, zero_point_len(ctx, ctx.input(3), *b, n, "b"));
  std::vector<int64_t> abatch(ad.begin(), ad.end() - 2), bbatch(bd.begin(), bd.end() - 2);
  auto batch = broadcast_shape({abatch, bbatch});
  if (!batch.ok()) return invalid(ctx, std::string(batch.status().message()));
  std::vector<int64_t> out = *batch;
  if (!a_vec) out.push_back(m);
  if (!b_vec) out.push_back(n);
  const int64_t nbatch = element_count(*batch);
  // Refuse before allocating what the budget could never pay for (the product is a double: no
  // overflow whatever the dims).
  RETURN_IF_ERROR(ctx.afford(static_cast<double>(nbatch) * static_cast<double>(m) *
                             static_cast<double>(n) * static_cast<double>(k)));
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, TensorProto::INT32, out));
  if (y->size() == 0) return absl::OkStatus();  // nothing to compute (n may still be large)
  int32_t* yp = y->data<int32_t>();
  const Tensor* azp = ctx.input(2);
  const Tensor* bzp = ctx.input(3);
  std::vector<int32_t> bz(static_cast<size_t>(n), 0);
  for (int64_t j = 0; j < n; ++j)
    if (bzp != nullptr) bz[j] = load8(*bzp, bzl == 1 ? 0 : j);
  // Accumulate in uint32: two's complement wrapping, the int32 overflow the spec allows.
  std::vector<uint32_t> acc(static_cast<size_t>(n));
  BroadcastIterator it(*batch, {abatch, bbatch});
  int64_t yi = 0;
  for (int64_t bi = 0; bi < nbatch; ++bi, it.next()) {
    const int64_t a0 = it.offset(0) * m * k;
    const int64_t b0 = it.offset(1) * k * n;
    for (int64_t i = 0; i < m; ++i) {
      spend_work(static_cast<uint64_t>(n) * static_cast<uint64_t>(k));
      const int32_t az = azp != nullptr ? load8(*azp, azl == 1 ? 0 : i) : 0;
      std::fill(acc.begin(), acc.end(), 0u);
      for (int64_t l = 0; l < k; ++l) {
        const int32_t av = load8(*a, a0 + i * k + l) - az;  // |av| <= 255
        const int64_t row = b0 + l * n;
        for (int64_t j = 0; j < n; ++j) {
          const int32_t prod = av * (load8(*b, row + j) - bz[j]);  // |prod| <= 65025
          acc[j] += static_cast<uint32_t>(prod);
        }
      }
      for (int64_t j = 0; j < n; ++j) yp[yi++] = static_cast<int32_t>(acc[j]);
    }
  }
  return absl::OkStatus();
}

}  // namespace

void register_quantize_dynamic_kernels() {
  register_kernel("DynamicQuantizeLinear", 11, 0, dynamic_quantize_linear);
  register_kernel("MatMulInteger", 10, 0, matmul_integer);
}

}  // namespace graft::eval
