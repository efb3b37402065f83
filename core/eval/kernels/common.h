// Helpers the kernel files share (core/eval/kernels/*.cc): errors that name the op, the checks
// on an input every kernel starts with, and reading and writing elements as double (the type
// floating-point kernels compute in).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>

#include "core/base/status.h"
#include "core/eval/budget.h"
#include "core/eval/kernel.h"
#include "core/eval/tensor.h"

namespace graft::eval {

namespace detail {
// A part as absl::StrCat takes it: Debian's absl::string_view is not std::string_view.
template <typename T>
const T& message_part(const T& part) {
  return part;
}
inline absl::string_view message_part(std::string_view part) { return {part.data(), part.size()}; }
}  // namespace detail

// InvalidArgument (a malformed node or operand) and Unimplemented (a valid one the evaluator
// does not run), both "<op type>: " followed by the parts StrCat'ed, e.g.
// invalid(ctx, "axis ", a, " out of range").
template <typename... Parts>
absl::Status invalid(const KernelContext& ctx, const Parts&... parts) {
  return absl::InvalidArgumentError(
      absl::StrCat(ctx.node.op_type(), ": ", detail::message_part(parts)...));
}
template <typename... Parts>
absl::Status unimplemented(const KernelContext& ctx, const Parts&... parts) {
  return absl::UnimplementedError(
      absl::StrCat(ctx.node.op_type(), ": ", detail::message_part(parts)...));
}

// Input `i`, present and not of type string.
inline absl::StatusOr<const Tensor*> required(const KernelContext& ctx, size_t i) {
  const Tensor* t = ctx.input(i);
  if (t == nullptr) return invalid(ctx, "missing input ", i);
  if (t->dtype() == onnx::TensorProto::STRING) return unimplemented(ctx, "string input");
  return t;
}

// A positive INT attribute of at most `max` (absent: 0, refused), e.g. a head count.
inline absl::StatusOr<int64_t> positive_attr(const KernelContext& ctx, const char* name,
                                             int64_t max = int64_t{1} << 20) {
  const int64_t v = ctx.node.attr_int(name, 0);
  if (v <= 0 || v > max) return invalid(ctx, absl::StrCat(name, " must be in 1..", max));
  return v;
}

inline absl::Status require_float(const KernelContext& ctx, const Tensor& t) {
  if (!is_float_type(t.dtype())) return unimplemented(ctx, "non-float element type");
  return absl::OkStatus();
}

// A type as a value, for kernels that pick a C++ type from an element type: f(Tag<T>{}).
template <typename T>
struct Tag {
  using type = T;
};

inline bool is_8bit(int32_t t) {
  return t == onnx::TensorProto::UINT8 || t == onnx::TensorProto::INT8;
}

// The product of dims [begin, end) (those that exist).
inline int64_t product(const std::vector<int64_t>& dims, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < dims.size(); ++i) p *= dims[i];
  return p;
}

// Maps `axis` from [-rank, rank) (or [-rank, rank] with `inclusive`) to [0, rank).
inline bool normalize_axis(int64_t& axis, int64_t rank, bool inclusive = false) {
  int64_t hi = inclusive ? rank : rank - 1;
  if (axis < -rank || axis > hi) return false;
  if (axis < 0) axis += rank;
  return true;
}

// `t`'s elements as doubles (float16 decoded), in scratch memory charged to the run's budget.
// (Reserved, then filled: not zeroed first, which for the weights of a large MatMul or Conv took
// as long as the conversion.)
inline Scratch<double> to_doubles(const Tensor& t) {
  Scratch<double> v;
  v.reserve(static_cast<size_t>(t.size()));
  if (t.dtype() == onnx::TensorProto::FLOAT) {
    const float* p = t.data<float>();
    v.assign(p, p + t.size());
  } else if (t.dtype() == onnx::TensorProto::DOUBLE) {
    const double* p = t.data<double>();
    v.assign(p, p + t.size());
  } else {
    for (int64_t i = 0; i < t.size(); ++i) v.push_back(t.get_double(i));
  }
  return v;
}

// `t`'s elements as int64 (any numeric or bool type), in charged scratch memory.
inline Scratch<int64_t> to_ints(const Tensor& t) {
  Scratch<int64_t> v(static_cast<size_t>(t.size()));
  for (int64_t i = 0; i < t.size(); ++i) v[i] = t.get_int64(i);
  return v;
}

// Element i of `t` set to `v`, rounded to `t`'s type.
inline void store(Tensor* t, int64_t i, double v) {
  if (t->dtype() == onnx::TensorProto::FLOAT) {
    t->data<float>()[i] = static_cast<float>(v);
  } else if (t->dtype() == onnx::TensorProto::DOUBLE) {
    t->data<double>()[i] = v;
  } else {
    t->set_double(i, v);
  }
}
inline void store(Tensor* t, int64_t i, int64_t v) { t->set_int64(i, v); }

// GELU as ONNX's Gelu defines it (opset 20), exact (erf) and approximate (tanh); ONNX Runtime's
// Gelu/BiasGelu and FastGelu compute the same formulas.
inline double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
inline double gelu_tanh(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

inline void store_all(Tensor* t, const Scratch<double>& v) {
  for (int64_t i = 0; i < t->size(); ++i) store(t, i, v[i]);
}

// ---------------------------------------------------------------------------------- attention

// Scaled dot-product attention over heads, shared by ONNX's Attention (opset 23) and ONNX
// Runtime's Attention: q (B, N, S, H), k (B, Nkv, T, H), v (B, Nkv, T, Hv) as doubles, query head
// n reading key/value head n / (N / Nkv); scores scale * q k^T, softcapped (c * tanh(s / c)) when
// `softcap` > 0, plus the additive `bias_at(b, n, i, j)` (masks as additive values), softmax over
// the keys, times v. out is (B, S, N * Hv), or (B, N, S, Hv) when `heads_first`. A query row
// whose every score is -inf is a row of zeros when `zero_masked_rows` (ONNX's Attention), NaN
// otherwise (what the softmax gives).
struct Heads {
  int64_t batch, heads, kv_heads, seq, total, head, vhead;
};

struct AttendOptions {
  double scale = 1.0;
  double softcap = 0.0;
  bool heads_first = false;
  bool zero_masked_rows = false;
};

template <typename BiasAt>
absl::Status attend(KernelContext& ctx, const Heads& h, const Scratch<double>& q,
                    const Scratch<double>& k, const Scratch<double>& v, const AttendOptions& o,
                    BiasAt bias_at, Tensor* out) {
  RETURN_IF_ERROR(ctx.afford(static_cast<double>(h.batch) * h.heads * h.seq * h.total *
                             (h.head + h.vhead + 4)));
  const int64_t group = h.heads / h.kv_heads;
  Scratch<double> scores(h.total);
  for (int64_t b = 0; b < h.batch; ++b)
    for (int64_t n = 0; n < h.heads; ++n) {
      const int64_t kvn = n / group;
      const double* qb = q.data() + (b * h.heads + n) * h.seq * h.head;
      const double* kb = k.data() + (b * h.kv_heads + kvn) * h.total * h.head;
      const double* vb = v.data() + (b * h.kv_heads + kvn) * h.total * h.vhead;
      for (int64_t i = 0; i < h.seq; ++i) {
        double top = -INFINITY;
        for (int64_t j = 0; j < h.total; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < h.head; ++e) dot += qb[i * h.head + e] * kb[j * h.head + e];
          double s = o.scale * dot;
          if (o.softcap > 0) s = o.softcap * std::tanh(s / o.softcap);
          scores[j] = s + bias_at(b, n, i, j);
          top = std::max(top, scores[j]);
        }
        const bool masked = o.zero_masked_rows && top == -INFINITY;
        double sum = 0;
        if (!masked)
          for (int64_t j = 0; j < h.total; ++j) sum += (scores[j] = std::exp(scores[j] - top));
        for (int64_t e = 0; e < h.vhead; ++e) {
          double acc = 0;
          if (!masked)
            for (int64_t j = 0; j < h.total; ++j) acc += scores[j] * vb[j * h.vhead + e];
          const int64_t at = o.heads_first ? ((b * h.heads + n) * h.seq + i) * h.vhead + e
                                           : ((b * h.seq + i) * h.heads + n) * h.vhead + e;
          store(out, at, masked ? 0.0 : acc / sum);
        }
      }
      spend_work(static_cast<uint64_t>(h.seq * h.total * (h.head + h.vhead)));
    }
  return absl::OkStatus();
}

}  // namespace graft::eval
