// Reduction kernels: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL2,
// ReduceSumSquare, ArgMax, ArgMin and TopK.
//
// Values are compared and accumulated in a "key" type: double for float types (float16 and
// bfloat16 decoded), int64 for signed integers and bool, uint64 for unsigned integers, so
// integer results stay exact and float results are at least as precise as numpy's.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <absl/strings/str_cat.h>

#include "core/eval/kernel.h"
#include "core/eval/kernels.h"
#include "core/eval/kernels/common.h"
#include "core/ir/tensor.h"

namespace graft::eval {

namespace {

using onnx::TensorProto;

bool is_unsigned(int32_t dtype) {
  return dtype == TensorProto::UINT8 || dtype == TensorProto::UINT16 ||
         dtype == TensorProto::UINT32 || dtype == TensorProto::UINT64;
}

// Calls f(Tag<K>{}) with the key type of `dtype`, or fails for non-numeric types.
template <typename F>
absl::Status with_key(const KernelContext& ctx, int32_t dtype, F&& f) {
  if (is_float_type(dtype)) return f(Tag<double>{});
  if (is_unsigned(dtype)) return f(Tag<uint64_t>{});
  if (is_integer_type(dtype) || dtype == TensorProto::BOOL) return f(Tag<int64_t>{});
  return invalid(ctx, "unsupported element type ", dtype);
}

template <typename K>
K get_key(const Tensor& t, int64_t i) {
  if constexpr (std::is_same_v<K, double>) {
    return t.get_double(i);
  } else {
    return static_cast<K>(t.get_int64(i));  // uint64 keeps its bits through int64
  }
}

template <typename K>
void set_key(Tensor& t, int64_t i, K v) {
  if constexpr (std::is_same_v<K, double>) {
    t.set_double(i, v);
  } else {
    t.set_int64(i, static_cast<int64_t>(v));
  }
}

// Copies every element of `x` (any type, including strings) into output `i` with `dims`.
absl::Status copy_to_output(KernelContext& ctx, size_t i, const Tensor& x,
                            std::vector<int64_t> dims) {
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(i, x.dtype(), std::move(dims)));
  if (x.dtype() == TensorProto::STRING) {
    std::copy(x.strings().begin(), x.strings().end(), out->strings().begin());
  } else {
    std::copy(x.data<char>(), x.data<char>() + x.bytes(), out->data<char>());
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Reduce*

enum class Op { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

template <typename K>
K accumulate(Op op, K acc, K v) {
  if constexpr (std::is_integral_v<K>) {
    using W = std::make_unsigned_t<K>;  // wrap like fixed-width arithmetic instead of UB
    switch (op) {
      case Op::kSum:
      case Op::kMean:
      case Op::kLogSum:
        return static_cast<K>(static_cast<W>(acc) + static_cast<W>(v));
      case Op::kL1:
        return static_cast<K>(static_cast<W>(acc) +
                              static_cast<W>(v < 0 ? 0 - static_cast<W>(v) : static_cast<W>(v)));
      case Op::kLogSumExp:  // computed in double
        break;
      case Op::kProd:
        return static_cast<K>(static_cast<W>(acc) * static_cast<W>(v));
      case Op::kL2:
      case Op::kSumSquare:
        return static_cast<K>(static_cast<W>(acc) + static_cast<W>(v) * static_cast<W>(v));
      case Op::kMax:
        return v > acc ? v : acc;
      case Op::kMin:
        return v < acc ? v : acc;
    }
  } else {
    switch (op) {
      case Op::kSum:
      case Op::kMean:
      case Op::kLogSum:
        return acc + v;
      case Op::kL1:
        return acc + std::abs(v);
      case Op::kLogSumExp:  // the running maximum; the sum of exponentials is a second pass
        return (v > acc || std::isnan(v)) && !std::isnan(acc) ? v : acc;
      case Op::kProd:
        return acc * v;
      case Op::kL2:
      case Op::kSumSquare:
        return acc + v * v;
      case Op::kMax:  // NaN propagates like numpy's maximum.reduce
        return (v > acc || std::isnan(v)) && !std::isnan(acc) ? v : acc;
      case Op::kMin:
        return (v < acc || std::isnan(v)) && !std::isnan(acc) ? v : acc;
    }
  }
  return acc;
}

template <typename K>
K initial(Op op, int32_t dtype) {
  switch (op) {
    case Op::kProd:
      return 1;
    case Op::kMax:
    case Op::kLogSumExp:
      if constexpr (std::is_same_v<K, double>) {
        return -std::numeric_limits<double>::infinity();
      } else if constexpr (std::is_same_v<K, uint64_t>) {
        return 0;
      } else {
        return dtype == TensorProto::BOOL ? 0 : std::numeric_limits<int64_t>::min();
      }
    case Op::kMin:
      if constexpr (std::is_same_v<K, double>) {
        return std::numeric_limits<double>::infinity();
      } else {
        return std::numeric_limits<K>::max();
      }
    default:
      return 0;
  }
}

template <Op kOp>
absl::Status reduce_kernel(KernelContext& ctx) {
  const Tensor* xp = ctx.input(0);
  if (xp == nullptr) return invalid(ctx, "missing input 0");
  const Tensor& x = *xp;
  const int64_t r = x.rank();
  // Axes moved from an attribute to an optional input in opset 13 (ReduceSum) or 18 (the rest).
  const int64_t input_since = kOp == Op::kSum ? 13 : 18;
  std::vector<int64_t> axes;
  bool noop = false;
  if (ctx.opset >= input_since) {
    if (const Tensor* a = ctx.input(1)) {
      if (!is_integer_type(a->dtype()) || a->rank() > 1) return invalid(ctx, "bad axes");
      for (int64_t i = 0; i < a->size(); ++i) axes.push_back(a->get_int64(i));
    }
    noop = ctx.node.attr_int("noop_with_empty_axes", 0) != 0;
  } else if (auto a = ctx.node.attr_ints("axes")) {
    axes = *a;
  }
  const bool keepdims = ctx.node.attr_int("keepdims", 1) != 0;
  if (axes.empty() && noop) return copy_to_output(ctx, 0, x, x.dims());
  std::vector<bool> reduced(r, axes.empty());
  for (int64_t a : axes) {
    if (!normalize_axis(a, r) || reduced[a]) return invalid(ctx, "bad or repeated axis");
    reduced[a] = true;
  }
  std::vector<int64_t> kept_dims(r), out_dims;
  for (int64_t i = 0; i < r; ++i) {
    kept_dims[i] = reduced[i] ? 1 : x.dims()[i];
    if (keepdims || !reduced[i]) out_dims.push_back(kept_dims[i]);
  }
  ASSIGN_OR_RETURN(Tensor * out_t, ctx.make_output(0, x.dtype(), out_dims));
  Tensor& out = *out_t;
  const int64_t n_out = out.size();
  if (n_out == 0) return absl::OkStatus();
  const int64_t count = x.size() / n_out;  // elements reduced into each output
  // Output strides per input dim (0 for reduced dims).
  std::vector<int64_t> ostride(r, 0);
  for (int64_t i = r - 1, s = 1; i >= 0; --i) {
    if (!reduced[i]) ostride[i] = s;
    s *= kept_dims[i];
  }
  return with_key(ctx, x.dtype(), [&](auto tag) -> absl::Status {
    using K = typename decltype(tag)::type;
    // Calls f(output index, input index) for every input element.
    auto walk = [&](auto&& f) {
      const int64_t n = x.size();
      if (n == 0) return;
      if (r == 0) {
        f(int64_t{0}, int64_t{0});
        return;
      }
      const int64_t inner = x.dims()[r - 1], istep = ostride[r - 1];
      std::vector<int64_t> pos(r, 0);
      int64_t o = 0;
      for (int64_t i = 0; i < n; i += inner) {
        spend_work(static_cast<uint64_t>(inner));
        for (int64_t j = 0; j < inner; ++j) f(o + j * istep, i + j);
        for (int64_t d = r - 1; d-- > 0;) {
          if (++pos[d] < x.dims()[d]) {
            o += ostride[d];
            break;
          }
          o -= (pos[d] - 1) * ostride[d];
          pos[d] = 0;
        }
      }
    };
    if constexpr (kOp == Op::kLogSumExp) {
      // log(sum(exp(x))) = m + log(sum(exp(x - m))) with m the maximum, so large inputs do not
      // overflow.
      std::vector<double> mx(n_out, -std::numeric_limits<double>::infinity());
      std::vector<double> sum(n_out, 0.0);
      walk([&](int64_t o, int64_t i) { mx[o] = accumulate(kOp, mx[o], x.get_double(i)); });
      walk([&](int64_t o, int64_t i) {
        if (std::isfinite(mx[o])) sum[o] += std::exp(x.get_double(i) - mx[o]);
      });
      for (int64_t k = 0; k < n_out; ++k) {
        out.set_double(k, std::isfinite(mx[k]) ? mx[k] + std::log(sum[k]) : mx[k]);
      }
      return absl::OkStatus();
    }
    std::vector<K> acc(n_out, initial<K>(kOp, x.dtype()));
    walk([&](int64_t o, int64_t i) { acc[o] = accumulate(kOp, acc[o], get_key<K>(x, i)); });
    for (int64_t k = 0; k < n_out; ++k) {
      if constexpr (kOp == Op::kMean) {
        const double v = static_cast<double>(acc[k]);  // K carries the signedness
        out.set_double(k, v / static_cast<double>(count));
      } else if constexpr (kOp == Op::kL2) {
        out.set_double(k, std::sqrt(static_cast<double>(acc[k])));
      } else if constexpr (kOp == Op::kLogSum) {
        out.set_double(k, std::log(static_cast<double>(acc[k])));
      } else {
        set_key<K>(out, k, acc[k]);
      }
    }
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------------------
// ArgMax / ArgMin

template <bool kMax>
absl::Status arg_kernel(KernelContext& ctx) {
  const Tensor* xp = ctx.input(0);
  if (xp == nullptr) return invalid(ctx, "missing input 0");
  const Tensor& x = *xp;
  const int64_t r = x.rank();
  int64_t axis = ctx.node.attr_int("axis", 0);
  if (!normalize_axis(axis, r)) return invalid(ctx, "bad axis");
  const bool keepdims = ctx.node.attr_int("keepdims", 1) != 0;
  const bool last = ctx.opset >= 12 && ctx.node.attr_int("select_last_index", 0) != 0;
  const int64_t d = x.dims()[axis];
  if (d == 0) return invalid(ctx, "empty axis");
  std::vector<int64_t> dims = x.dims();
  if (keepdims) {
    dims[axis] = 1;
  } else {
    dims.erase(dims.begin() + axis);
  }
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, TensorProto::INT64, dims));
  int64_t* dst = out->data<int64_t>();
  const int64_t outer = product(x.dims(), 0, axis), inner = product(x.dims(), axis + 1, r);
  return with_key(ctx, x.dtype(), [&](auto tag) -> absl::Status {
    using K = typename decltype(tag)::type;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t in = 0; in < inner; ++in) {
        const int64_t base = o * d * inner + in;
        K best = get_key<K>(x, base);
        int64_t best_i = 0;
        for (int64_t j = 1; j < d; ++j) {
          const K v = get_key<K>(x, base + j * inner);
          bool better = kMax ? v > best : v < best;
          if constexpr (std::is_same_v<K, double>) {
            // The first NaN wins, like numpy.argmax.
            if (std::isnan(best)) continue;
            better = better || std::isnan(v);
          }
          if (better || (last && v == best)) {
            best = v;
            best_i = j;
          }
        }
        dst[o * inner + in] = best_i;
      }
    }
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------------------
// TopK

absl::Status top_k_kernel(KernelContext& ctx) {
  const Tensor* xp = ctx.input(0);
  if (xp == nullptr) return invalid(ctx, "missing input 0");
  const Tensor& x = *xp;
  const int64_t r = x.rank();
  int64_t k;
  if (ctx.opset < 10) {
    if (ctx.node.attr("k") == nullptr) return invalid(ctx, "missing k");
    k = ctx.node.attr_int("k", 0);
  } else {
    const Tensor* kt = ctx.input(1);
    if (kt == nullptr || kt->size() != 1 || kt->rank() > 1 || !is_integer_type(kt->dtype())) {
      return invalid(ctx, "K must be a 1-element integer tensor");
    }
    k = kt->get_int64(0);
  }
  int64_t axis = ctx.node.attr_int("axis", -1);
  if (!normalize_axis(axis, r)) return invalid(ctx, "bad axis");
  const bool largest = ctx.opset < 11 || ctx.node.attr_int("largest", 1) != 0;
  const int64_t d = x.dims()[axis];
  if (k < 0 || k > d) return invalid(ctx, "k=", k, " out of range for dim ", d);
  if (x.dtype() == TensorProto::STRING) return invalid(ctx, "strings are not supported");
  std::vector<int64_t> dims = x.dims();
  dims[axis] = k;
  ASSIGN_OR_RETURN(Tensor * values_t, ctx.make_output(0, x.dtype(), dims));
  Tensor& values = *values_t;
  Tensor indices_scratch;
  Tensor* indices = &indices_scratch;
  if (ctx.outputs.size() > 1) {
    ASSIGN_OR_RETURN(indices, ctx.make_output(1, TensorProto::INT64, dims));
  } else {
    ASSIGN_OR_RETURN(indices_scratch,
                     Tensor::zeros(TensorProto::INT64, dims, ctx.limits.max_tensor_bytes));
  }
  if (values.size() == 0) return absl::OkStatus();
  const int64_t outer = product(x.dims(), 0, axis), inner = product(x.dims(), axis + 1, r);
  const size_t es = x.element_size();
  return with_key(ctx, x.dtype(), [&](auto tag) -> absl::Status {
    using K = typename decltype(tag)::type;
    // Ties go to the lower index; NaN counts as larger than every number (numpy's sort order).
    auto before = [largest](const std::pair<K, int64_t>& a, const std::pair<K, int64_t>& b) {
      bool a_gt, b_gt;
      if constexpr (std::is_same_v<K, double>) {
        const bool an = std::isnan(a.first), bn = std::isnan(b.first);
        a_gt = (an && !bn) || (!an && !bn && a.first > b.first);
        b_gt = (bn && !an) || (!an && !bn && b.first > a.first);
      } else {
        a_gt = a.first > b.first;
        b_gt = b.first > a.first;
      }
      if (a_gt || b_gt) return largest ? a_gt : b_gt;
      return a.second < b.second;
    };
    std::vector<std::pair<K, int64_t>> slice(d);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t in = 0; in < inner; ++in) {
        const int64_t base = o * d * inner + in;
        for (int64_t j = 0; j < d; ++j) slice[j] = {get_key<K>(x, base + j * inner), j};
        std::partial_sort(slice.begin(), slice.begin() + k, slice.end(), before);
        const int64_t obase = o * k * inner + in;
        for (int64_t j = 0; j < k; ++j) {
          const int64_t src = base + slice[j].second * inner, dst = obase + j * inner;
          indices->data<int64_t>()[dst] = slice[j].second;
          std::copy(x.data<char>() + src * es, x.data<char>() + (src + 1) * es,
                    values.data<char>() + dst * es);
        }
      }
    }
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------------------
// CumSum

absl::Status cum_sum_kernel(KernelContext& ctx) {
  const Tensor* xp = ctx.input(0);
  const Tensor* axis_t = ctx.input(1);
  if (xp == nullptr || axis_t == nullptr) return invalid(ctx, "missing input");
  const Tensor& x = *xp;
  if (axis_t->size() != 1 || axis_t->rank() > 1 || !is_integer_type(axis_t->dtype())) {
    return invalid(ctx, "axis must be an integer scalar");
  }
  int64_t axis = axis_t->get_int64(0);
  if (!normalize_axis(axis, x.rank())) return invalid(ctx, "bad axis");
  const bool exclusive = ctx.node.attr_int("exclusive", 0) != 0;
  const bool reverse = ctx.node.attr_int("reverse", 0) != 0;
  ASSIGN_OR_RETURN(Tensor * out_t, ctx.make_output(0, x.dtype(), x.dims()));
  Tensor& out = *out_t;
  const int64_t d = x.dims()[axis];
  const int64_t outer = product(x.dims(), 0, axis), inner = product(x.dims(), axis + 1, x.rank());
  return with_key(ctx, x.dtype(), [&](auto tag) -> absl::Status {
    using K = typename decltype(tag)::type;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t in = 0; in < inner; ++in) {
        K acc = 0;
        for (int64_t step = 0; step < d; ++step) {
          const int64_t j = reverse ? d - 1 - step : step;
          const int64_t i = (o * d + j) * inner + in;
          const K v = get_key<K>(x, i);
          if (!exclusive) acc = accumulate(Op::kSum, acc, v);
          set_key<K>(out, i, acc);
          if (exclusive) acc = accumulate(Op::kSum, acc, v);
        }
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace

void register_reduce_kernels() {
  register_kernel("ReduceSum", 1, 0, reduce_kernel<Op::kSum>);
  register_kernel("ReduceMean", 1, 0, reduce_kernel<Op::kMean>);
  register_kernel("ReduceMax", 1, 0, reduce_kernel<Op::kMax>);
  register_kernel("ReduceMin", 1, 0, reduce_kernel<Op::kMin>);
  register_kernel("ReduceProd", 1, 0, reduce_kernel<Op::kProd>);
  register_kernel("ReduceL1", 1, 0, reduce_kernel<Op::kL1>);
  register_kernel("ReduceL2", 1, 0, reduce_kernel<Op::kL2>);
  register_kernel("ReduceLogSum", 1, 0, reduce_kernel<Op::kLogSum>);
  register_kernel("ReduceLogSumExp", 1, 0, reduce_kernel<Op::kLogSumExp>);
  register_kernel("ReduceSumSquare", 1, 0, reduce_kernel<Op::kSumSquare>);
  register_kernel("ArgMax", 1, 0, arg_kernel<true>);
  register_kernel("ArgMin", 1, 0, arg_kernel<false>);
  register_kernel("TopK", 1, 0, top_k_kernel);
  register_kernel("CumSum", 11, 0, cum_sum_kernel);
}

}  // namespace graft::eval
