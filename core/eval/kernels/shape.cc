// Shape and data-movement kernels: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Transpose,
// Concat, Split, Slice, Gather, GatherElements, GatherND, ScatterND, Expand, Tile, Range,
// ConstantOfShape, Constant, Pad and NonZero.
//
// Data movement is type-agnostic: elements are copied as unsigned integers of their byte size
// (or as std::string for STRING tensors), so one template instance serves every element type of
// that size. Only ScatterND reductions and Range compute with values.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "core/eval/broadcast.h"
#include "core/eval/kernel.h"
#include "core/eval/kernels.h"
#include "core/eval/kernels/common.h"
#include "core/ir/tensor.h"

namespace graft::eval {

namespace {

using onnx::TensorProto;

// Copy unit of a 16-byte element (complex128).
struct Bytes16 {
  uint64_t lo, hi;
};

// Calls f(Tag<U>{}) with U an element type of the same size as `dtype`'s elements.
template <typename F>
absl::Status by_element(int32_t dtype, F&& f) {
  if (dtype == TensorProto::STRING) return f(Tag<std::string>{});
  switch (storage_size(dtype)) {  // the 4-bit types are held one per byte
    case 1:
      return f(Tag<uint8_t>{});
    case 2:
      return f(Tag<uint16_t>{});
    case 4:
      return f(Tag<uint32_t>{});
    case 8:
      return f(Tag<uint64_t>{});
    case 16:
      return f(Tag<Bytes16>{});
    default:
      return absl::UnimplementedError(absl::StrCat("unsupported element type ", dtype));
  }
}

template <typename U>
U* elems(Tensor& t) {
  if constexpr (std::is_same_v<U, std::string>) {
    return t.strings().data();
  } else {
    return t.data<U>();
  }
}

template <typename U>
const U* elems(const Tensor& t) {
  if constexpr (std::is_same_v<U, std::string>) {
    return t.strings().data();
  } else {
    return t.data<U>();
  }
}

std::vector<int64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

// Integer values of a 0-D or 1-D integer tensor (shape, axes, pads, repeats inputs).
absl::StatusOr<std::vector<int64_t>> read_ints(const KernelContext& ctx, const Tensor* t,
                                               const char* what) {
  if (t == nullptr) return invalid(ctx, "missing input '", what, "'");
  if (!is_integer_type(t->dtype())) return invalid(ctx, "'", what, "' must be an integer tensor");
  if (t->rank() > 1) return invalid(ctx, "'", what, "' must be 1-D");
  std::vector<int64_t> v(t->size());
  for (int64_t i = 0; i < t->size(); ++i) v[i] = t->get_int64(i);
  return v;
}

absl::Status require_input(const KernelContext& ctx, size_t i) {
  if (ctx.input(i) == nullptr) return invalid(ctx, "missing input ", i);
  return absl::OkStatus();
}

// out[k] = in[base + sum_d index_d * strides[d]] for every index of `dims` in row-major order.
// Strides may be zero (broadcast) or negative (reversed slices).
template <typename U>
void strided_copy(U* out, const U* in, const std::vector<int64_t>& dims,
                  const std::vector<int64_t>& strides, int64_t base) {
  const size_t r = dims.size();
  for (int64_t d : dims) {
    if (d == 0) return;
  }
  if (r == 0) {
    out[0] = in[base];
    return;
  }
  const int64_t inner = dims[r - 1], step = strides[r - 1];
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < r; ++d) outer *= dims[d];
  std::vector<int64_t> index(r, 0);
  int64_t off = base;
  for (; outer > 0; --outer) {
    if (step == 1) {
      std::copy(in + off, in + off + inner, out);
      out += inner;
    } else {
      for (int64_t j = 0; j < inner; ++j) *out++ = in[off + j * step];
    }
    for (size_t d = r - 1; d-- > 0;) {
      if (++index[d] < dims[d]) {
        off += strides[d];
        break;
      }
      off -= (dims[d] - 1) * strides[d];
      index[d] = 0;
    }
  }
}

// Output 0: `x`'s type, shape `out_dims`, filled by walking `x` through the strided view
// (view_dims, strides, base). Transposes, slices, broadcasts and tilings are all such views.
absl::Status copy_view(KernelContext& ctx, const Tensor& x, const std::vector<int64_t>& out_dims,
                       const std::vector<int64_t>& view_dims, const std::vector<int64_t>& strides,
                       int64_t base = 0) {
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, x.dtype(), out_dims));
  return by_element(x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    strided_copy(elems<U>(*out), elems<U>(x), view_dims, strides, base);
    return absl::OkStatus();
  });
}

// Output `i` with `dims` holding a copy of all elements of `x` (Reshape and friends).
absl::Status copy_with_dims(KernelContext& ctx, size_t i, const Tensor& x,
                            std::vector<int64_t> dims) {
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(i, x.dtype(), std::move(dims)));
  if (out->size() != x.size()) return invalid(ctx, "element count changed");
  return by_element(x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    std::copy(elems<U>(x), elems<U>(x) + x.size(), elems<U>(*out));
    return absl::OkStatus();
  });
}

bool checked_mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// ---------------------------------------------------------------------------------------------

absl::Status shape_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  const int64_t r = x.rank();
  int64_t start = 0, end = r;
  if (ctx.opset >= 15) {
    start = ctx.node.attr_int("start", 0);
    if (ctx.node.attr("end") != nullptr) end = ctx.node.attr_int("end", r);
    auto clampdim = [r](int64_t v) {
      if (v < 0) v += r;
      return std::clamp<int64_t>(v, 0, r);
    };
    start = clampdim(start);
    end = clampdim(end);
  }
  const int64_t n = std::max<int64_t>(0, end - start);
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, TensorProto::INT64, {n}));
  for (int64_t i = 0; i < n; ++i) out->data<int64_t>()[i] = x.dims()[start + i];
  return absl::OkStatus();
}

absl::Status size_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, TensorProto::INT64, {}));
  out->data<int64_t>()[0] = ctx.input(0)->size();
  return absl::OkStatus();
}

absl::Status reshape_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  std::vector<int64_t> shape;
  if (ctx.opset < 5) {
    auto attr = ctx.node.attr_ints("shape");
    if (!attr) return invalid(ctx, "missing 'shape' attribute");
    shape = *attr;
  } else {
    ASSIGN_OR_RETURN(shape, read_ints(ctx, ctx.input(1), "shape"));
  }
  const bool allowzero = ctx.opset >= 14 && ctx.node.attr_int("allowzero", 0) != 0;
  int64_t infer = -1, known = 1;
  bool has_zero = false;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t& d = shape[i];
    if (d == 0 && !allowzero) {
      if (static_cast<int64_t>(i) >= x.rank()) return invalid(ctx, "0 copies a missing dim");
      d = x.dims()[i];
    }
    if (d == -1) {
      if (infer >= 0) return invalid(ctx, "more than one -1 in shape");
      infer = static_cast<int64_t>(i);
      continue;
    }
    if (d < -1) return invalid(ctx, "invalid dim ", d);
    if (d == 0) has_zero = true;
    if (!checked_mul(known, d, &known)) return invalid(ctx, "shape overflows");
  }
  if (allowzero && has_zero && infer >= 0) return invalid(ctx, "-1 with a zero dim (allowzero)");
  if (infer >= 0) {
    if (known == 0 || x.size() % known != 0) {
      return invalid(ctx, "cannot infer -1 from ", x.size(), " elements");
    }
    shape[infer] = x.size() / known;
  } else if (known != x.size()) {
    return invalid(ctx, "shape [", absl::StrJoin(shape, ","), "] does not hold ", x.size(),
                   " elements");
  }
  return copy_with_dims(ctx, 0, x, std::move(shape));
}

absl::Status flatten_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  int64_t axis = ctx.node.attr_int("axis", 1);
  if (!normalize_axis(axis, x.rank(), /*inclusive=*/true)) return invalid(ctx, "bad axis");
  return copy_with_dims(ctx, 0, x,
                        {product(x.dims(), 0, axis), product(x.dims(), axis, x.dims().size())});
}

// Axes from the attribute (before `input_since`) or from optional input 1.
absl::StatusOr<std::optional<std::vector<int64_t>>> axes_arg(const KernelContext& ctx,
                                                             int64_t input_since) {
  if (ctx.opset < input_since) return ctx.node.attr_ints("axes");
  if (ctx.input(1) == nullptr) return std::optional<std::vector<int64_t>>();
  ASSIGN_OR_RETURN(std::vector<int64_t> v, read_ints(ctx, ctx.input(1), "axes"));
  return std::optional<std::vector<int64_t>>(std::move(v));
}

absl::Status squeeze_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes, axes_arg(ctx, 13));
  const int64_t r = x.rank();
  std::vector<bool> drop(r, false);
  if (axes.has_value()) {
    for (int64_t a : *axes) {
      if (!normalize_axis(a, r)) return invalid(ctx, "axis ", a, " out of range");
      if (drop[a]) return invalid(ctx, "repeated axis");
      if (x.dims()[a] != 1) return invalid(ctx, "cannot squeeze dim ", a, " of size ", x.dims()[a]);
      drop[a] = true;
    }
  } else {
    for (int64_t i = 0; i < r; ++i) drop[i] = x.dims()[i] == 1;
  }
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < r; ++i) {
    if (!drop[i]) dims.push_back(x.dims()[i]);
  }
  return copy_with_dims(ctx, 0, x, std::move(dims));
}

absl::Status unsqueeze_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes, axes_arg(ctx, 13));
  if (!axes.has_value()) return invalid(ctx, "missing axes");
  const int64_t out_rank = x.rank() + static_cast<int64_t>(axes->size());
  std::vector<bool> added(out_rank, false);
  for (int64_t a : *axes) {
    if (!normalize_axis(a, out_rank)) return invalid(ctx, "axis ", a, " out of range");
    if (added[a]) return invalid(ctx, "repeated axis");
    added[a] = true;
  }
  std::vector<int64_t> dims(out_rank);
  for (int64_t i = 0, j = 0; i < out_rank; ++i) dims[i] = added[i] ? 1 : x.dims()[j++];
  return copy_with_dims(ctx, 0, x, std::move(dims));
}

absl::Status transpose_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  const int64_t r = x.rank();
  std::vector<int64_t> perm;
  if (auto p = ctx.node.attr_ints("perm")) {
    perm = *p;
  } else {
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  }
  if (static_cast<int64_t>(perm.size()) != r) return invalid(ctx, "perm has wrong length");
  std::vector<bool> seen(r, false);
  for (int64_t& p : perm) {
    if (!normalize_axis(p, r) || seen[p]) return invalid(ctx, "perm is not a permutation");
    seen[p] = true;
  }
  const auto in_strides = strides_of(x.dims());
  std::vector<int64_t> dims(r), strides(r);
  for (int64_t i = 0; i < r; ++i) {
    dims[i] = x.dims()[perm[i]];
    strides[i] = in_strides[perm[i]];
  }
  return copy_view(ctx, x, dims, dims, strides);
}

absl::Status concat_kernel(KernelContext& ctx) {
  if (ctx.inputs.empty()) return invalid(ctx, "no inputs");
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    RETURN_IF_ERROR(require_input(ctx, i));
  }
  const Tensor& first = *ctx.input(0);
  const int64_t r = first.rank();
  int64_t axis = ctx.node.attr_int("axis", ctx.opset < 4 ? 1 : std::numeric_limits<int64_t>::min());
  if (axis == std::numeric_limits<int64_t>::min()) return invalid(ctx, "missing axis");
  if (r == 0 || !normalize_axis(axis, r)) return invalid(ctx, "bad axis");
  std::vector<int64_t> dims = first.dims();
  dims[axis] = 0;
  for (const Tensor* t : ctx.inputs) {
    if (t->dtype() != first.dtype() || t->rank() != r) return invalid(ctx, "inputs differ");
    for (int64_t d = 0; d < r; ++d) {
      if (d != axis && t->dims()[d] != first.dims()[d]) return invalid(ctx, "shapes differ");
    }
    dims[axis] += t->dims()[axis];
  }
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, first.dtype(), dims));
  const int64_t outer = product(dims, 0, axis), inner = product(dims, axis + 1, r);
  return by_element(first.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    U* dst = elems<U>(*out);
    for (int64_t o = 0; o < outer; ++o) {
      for (const Tensor* t : ctx.inputs) {
        const int64_t block = t->dims()[axis] * inner;
        const U* src = elems<U>(*t) + o * block;
        dst = std::copy(src, src + block, dst);
      }
    }
    return absl::OkStatus();
  });
}

absl::Status split_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  const int64_t r = x.rank();
  int64_t axis = ctx.node.attr_int("axis", 0);
  if (r == 0 || !normalize_axis(axis, r)) return invalid(ctx, "bad axis");
  const int64_t dim = x.dims()[axis];
  const int64_t n = static_cast<int64_t>(ctx.outputs.size());
  if (n == 0) return invalid(ctx, "no outputs");
  std::optional<std::vector<int64_t>> split;
  if (ctx.opset >= 13 || (ctx.opset < 2 && ctx.input(1) != nullptr)) {
    if (ctx.input(1) != nullptr) {
      ASSIGN_OR_RETURN(split, read_ints(ctx, ctx.input(1), "split"));
    }
  } else {
    split = ctx.node.attr_ints("split");
  }
  std::vector<int64_t> sizes;
  if (split.has_value() && !split->empty()) {
    sizes = *split;
    if (static_cast<int64_t>(sizes.size()) != n) return invalid(ctx, "split count != outputs");
    int64_t total = 0;
    for (int64_t s : sizes) {
      if (s < 0 || __builtin_add_overflow(total, s, &total)) return invalid(ctx, "bad split");
    }
    if (total != dim) return invalid(ctx, "split sums to ", total, ", dim is ", dim);
  } else if (ctx.opset >= 18 && ctx.node.attr("num_outputs") != nullptr) {
    if (ctx.node.attr_int("num_outputs", 0) != n) return invalid(ctx, "num_outputs != outputs");
    const int64_t chunk = (dim + n - 1) / n;
    const int64_t last = dim - chunk * (n - 1);
    if (last < 0) return invalid(ctx, "cannot split ", dim, " into ", n, " parts");
    sizes.assign(n, chunk);
    sizes.back() = last;
  } else {
    if (dim % n != 0) return invalid(ctx, "cannot split ", dim, " evenly into ", n);
    sizes.assign(n, dim / n);
  }
  const int64_t outer = product(x.dims(), 0, axis), inner = product(x.dims(), axis + 1, r);
  int64_t start = 0;
  for (int64_t k = 0; k < n; ++k) {
    std::vector<int64_t> dims = x.dims();
    dims[axis] = sizes[k];
    ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(k, x.dtype(), dims));
    RETURN_IF_ERROR(by_element(x.dtype(), [&](auto tag) {
      using U = typename decltype(tag)::type;
      U* dst = elems<U>(*out);
      const int64_t block = sizes[k] * inner;
      for (int64_t o = 0; o < outer; ++o) {
        const U* src = elems<U>(x) + (o * dim + start) * inner;
        dst = std::copy(src, src + block, dst);
      }
      return absl::OkStatus();
    }));
    start += sizes[k];
  }
  return absl::OkStatus();
}

absl::Status slice_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  const int64_t r = x.rank();
  std::vector<int64_t> starts, ends, axes, steps;
  if (ctx.opset < 10) {
    auto s = ctx.node.attr_ints("starts");
    auto e = ctx.node.attr_ints("ends");
    if (!s || !e) return invalid(ctx, "missing starts/ends");
    starts = *s;
    ends = *e;
    if (auto a = ctx.node.attr_ints("axes")) axes = *a;
  } else {
    ASSIGN_OR_RETURN(starts, read_ints(ctx, ctx.input(1), "starts"));
    ASSIGN_OR_RETURN(ends, read_ints(ctx, ctx.input(2), "ends"));
    if (ctx.input(3) != nullptr) {
      ASSIGN_OR_RETURN(axes, read_ints(ctx, ctx.input(3), "axes"));
    }
    if (ctx.input(4) != nullptr) {
      ASSIGN_OR_RETURN(steps, read_ints(ctx, ctx.input(4), "steps"));
    }
  }
  const size_t n = starts.size();
  if (axes.empty()) {
    for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(n, 1);
  if (ends.size() != n || axes.size() != n || steps.size() != n) {
    return invalid(ctx, "starts/ends/axes/steps lengths differ");
  }
  const auto in_strides = strides_of(x.dims());
  std::vector<int64_t> dims = x.dims(), strides = in_strides;
  std::vector<bool> seen(r, false);
  int64_t base = 0;
  for (size_t i = 0; i < n; ++i) {
    int64_t a = axes[i];
    if (!normalize_axis(a, r) || seen[a]) return invalid(ctx, "bad or repeated axis");
    seen[a] = true;
    const int64_t d = x.dims()[a], step = steps[i];
    if (step == 0) return invalid(ctx, "step 0");
    int64_t s = starts[i], e = ends[i], count = 0;
    if (s < 0) s += d;
    if (e < 0) e += d;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      if (e > s) count = (e - s - 1) / step + 1;
    } else if (d > 0) {
      s = std::clamp<int64_t>(s, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      // In 128 bits: -step overflows for INT64_MIN.
      if (s > e) count = static_cast<int64_t>((s - e - 1) / -static_cast<__int128>(step)) + 1;
    }
    dims[a] = count;
    if (count > 0) base += s * in_strides[a];
    strides[a] = count > 1 ? step * in_strides[a] : 0;
  }
  return copy_view(ctx, x, dims, dims, strides, base);
}

// All elements of an integer tensor of any rank.
absl::StatusOr<std::vector<int64_t>> read_index_tensor(const KernelContext& ctx, const Tensor* t) {
  if (t == nullptr) return invalid(ctx, "missing indices");
  if (!is_integer_type(t->dtype())) return invalid(ctx, "indices must be integers");
  std::vector<int64_t> v(t->size());
  for (int64_t i = 0; i < t->size(); ++i) v[i] = t->get_int64(i);
  return v;
}

absl::Status gather_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& data = *ctx.input(0);
  ASSIGN_OR_RETURN(std::vector<int64_t> idx, read_index_tensor(ctx, ctx.input(1)));
  const Tensor& indices = *ctx.input(1);
  const int64_t r = data.rank();
  int64_t axis = ctx.node.attr_int("axis", 0);
  if (r == 0 || !normalize_axis(axis, r)) return invalid(ctx, "bad axis");
  const int64_t d = data.dims()[axis];
  for (int64_t& i : idx) {
    if (i < -d || i >= d) return invalid(ctx, "index ", i, " out of range [", -d, ",", d, ")");
    if (i < 0) i += d;
  }
  std::vector<int64_t> dims(data.dims().begin(), data.dims().begin() + axis);
  dims.insert(dims.end(), indices.dims().begin(), indices.dims().end());
  dims.insert(dims.end(), data.dims().begin() + axis + 1, data.dims().end());
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, data.dtype(), dims));
  const int64_t outer = product(data.dims(), 0, axis);
  const int64_t inner = product(data.dims(), axis + 1, r);
  return by_element(data.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    U* dst = elems<U>(*out);
    const U* src = elems<U>(data);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i : idx) {
        const U* p = src + (o * d + i) * inner;
        dst = std::copy(p, p + inner, dst);
      }
    }
    return absl::OkStatus();
  });
}

// Advances the row-major multi-index `pos` over the first `end` dims of `dims`.
void next_index(std::vector<int64_t>& pos, const std::vector<int64_t>& dims, int64_t end) {
  for (int64_t a = end; a-- > 0;) {
    if (++pos[a] < dims[a]) return;
    pos[a] = 0;
  }
}

// Same over all of `dims`, keeping `base` = sum of pos[a] * strides[a] for every a but `axis`
// (the gather/scatter ops index that axis separately).
void next_index_skipping(std::vector<int64_t>& pos, const std::vector<int64_t>& dims, int64_t axis,
                         const std::vector<int64_t>& strides, int64_t& base) {
  for (int64_t a = static_cast<int64_t>(dims.size()); a-- > 0;) {
    if (++pos[a] < dims[a]) {
      if (a != axis) base += strides[a];
      return;
    }
    if (a != axis) base -= (pos[a] - 1) * strides[a];
    pos[a] = 0;
  }
}

absl::Status gather_elements_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& data = *ctx.input(0);
  ASSIGN_OR_RETURN(std::vector<int64_t> idx, read_index_tensor(ctx, ctx.input(1)));
  const Tensor& indices = *ctx.input(1);
  const int64_t r = data.rank();
  int64_t axis = ctx.node.attr_int("axis", 0);
  if (r == 0 || !normalize_axis(axis, r)) return invalid(ctx, "bad axis");
  if (indices.rank() != r) return invalid(ctx, "indices rank differs from data rank");
  for (int64_t i = 0; i < r; ++i) {
    if (i != axis && indices.dims()[i] > data.dims()[i]) return invalid(ctx, "indices too large");
  }
  const int64_t d = data.dims()[axis];
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, data.dtype(), indices.dims()));
  const int64_t n = indices.size();
  if (n == 0) return absl::OkStatus();
  const auto dstrides = strides_of(data.dims());
  return by_element(data.dtype(), [&](auto tag) -> absl::Status {
    using U = typename decltype(tag)::type;
    U* dst = elems<U>(*out);
    const U* src = elems<U>(data);
    std::vector<int64_t> pos(r, 0);
    int64_t base = 0;  // offset of the current position without the axis coordinate
    for (int64_t k = 0; k < n; ++k) {
      int64_t i = idx[k];
      if (i < -d || i >= d) return invalid(ctx, "index ", i, " out of range");
      if (i < 0) i += d;
      dst[k] = src[base + i * dstrides[axis]];
      next_index_skipping(pos, indices.dims(), axis, dstrides, base);
    }
    return absl::OkStatus();
  });
}

absl::Status gather_nd_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& data = *ctx.input(0);
  ASSIGN_OR_RETURN(std::vector<int64_t> idx, read_index_tensor(ctx, ctx.input(1)));
  const Tensor& indices = *ctx.input(1);
  const int64_t r = data.rank(), q = indices.rank();
  const int64_t b = ctx.opset >= 12 ? ctx.node.attr_int("batch_dims", 0) : 0;
  if (r < 1 || q < 1 || b < 0 || b >= std::min(r, q)) return invalid(ctx, "bad ranks/batch_dims");
  const int64_t m = indices.dims()[q - 1];
  if (m < 1 || m > r - b) return invalid(ctx, "index tuple length ", m, " out of range");
  for (int64_t i = 0; i < b; ++i) {
    if (indices.dims()[i] != data.dims()[i]) return invalid(ctx, "batch dims differ");
  }
  std::vector<int64_t> dims(indices.dims().begin(), indices.dims().end() - 1);
  dims.insert(dims.end(), data.dims().begin() + b + m, data.dims().end());
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, data.dtype(), dims));
  const int64_t batches = product(data.dims(), 0, b);
  const int64_t tuples = product(indices.dims(), b, q - 1);
  const int64_t slice = product(data.dims(), b + m, r);
  const int64_t batch_stride = product(data.dims(), b, r);
  const auto dstrides = strides_of(data.dims());
  return by_element(data.dtype(), [&](auto tag) -> absl::Status {
    using U = typename decltype(tag)::type;
    U* dst = elems<U>(*out);
    const U* src = elems<U>(data);
    for (int64_t bt = 0; bt < batches; ++bt) {
      for (int64_t t = 0; t < tuples; ++t) {
        const int64_t* tuple = idx.data() + (bt * tuples + t) * m;
        int64_t off = bt * batch_stride;
        for (int64_t k = 0; k < m; ++k) {
          const int64_t d = data.dims()[b + k];
          int64_t i = tuple[k];
          if (i < -d || i >= d) return invalid(ctx, "index ", i, " out of range");
          if (i < 0) i += d;
          off += i * dstrides[b + k];
        }
        dst = std::copy(src + off, src + off + slice, dst);
      }
    }
    return absl::OkStatus();
  });
}

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

// The scatter ops' `reduction` attribute (opset 16; max/min from 18).
absl::StatusOr<Reduction> parse_reduction(const KernelContext& ctx, const Tensor& data) {
  Reduction red = Reduction::kNone;
  std::string rs = ctx.opset >= 16 ? ctx.node.attr_string("reduction", "none") : "none";
  if (rs == "add") {
    red = Reduction::kAdd;
  } else if (rs == "mul") {
    red = Reduction::kMul;
  } else if (rs == "max" && ctx.opset >= 18) {
    red = Reduction::kMax;
  } else if (rs == "min" && ctx.opset >= 18) {
    red = Reduction::kMin;
  } else if (rs != "none") {
    return invalid(ctx, "unknown reduction '", rs, "'");
  }
  if (red != Reduction::kNone && data.dtype() == TensorProto::STRING) {
    return invalid(ctx, "reduction on strings");
  }
  return red;
}

template <typename K>
K combine(Reduction red, K a, K b) {
  if constexpr (std::is_integral_v<K>) {
    using W = std::make_unsigned_t<K>;  // wrap like the fixed-width type instead of UB
    switch (red) {
      case Reduction::kAdd:
        return static_cast<K>(static_cast<W>(a) + static_cast<W>(b));
      case Reduction::kMul:
        return static_cast<K>(static_cast<W>(a) * static_cast<W>(b));
      default:
        break;
    }
  } else {
    switch (red) {
      case Reduction::kAdd:
        return a + b;
      case Reduction::kMul:
        return a * b;
      default:
        break;
    }
  }
  if (red == Reduction::kMax) return (b > a || b != b) ? b : a;
  if (red == Reduction::kMin) return (b < a || b != b) ? b : a;
  return b;
}

absl::Status scatter_nd_kernel(KernelContext& ctx) {
  for (size_t i = 0; i < 3; ++i) {
    RETURN_IF_ERROR(require_input(ctx, i));
  }
  const Tensor& data = *ctx.input(0);
  const Tensor& updates = *ctx.input(2);
  ASSIGN_OR_RETURN(std::vector<int64_t> idx, read_index_tensor(ctx, ctx.input(1)));
  const Tensor& indices = *ctx.input(1);
  const int64_t r = data.rank(), q = indices.rank();
  if (r < 1 || q < 1) return invalid(ctx, "bad ranks");
  const int64_t m = indices.dims()[q - 1];
  if (m < 1 || m > r) return invalid(ctx, "index tuple length ", m, " out of range");
  std::vector<int64_t> want(indices.dims().begin(), indices.dims().end() - 1);
  want.insert(want.end(), data.dims().begin() + m, data.dims().end());
  if (updates.dims() != want || updates.dtype() != data.dtype()) {
    return invalid(ctx, "updates shape/type mismatch");
  }
  ASSIGN_OR_RETURN(const Reduction red, parse_reduction(ctx, data));
  RETURN_IF_ERROR(copy_with_dims(ctx, 0, data, data.dims()));
  Tensor& out = ctx.outputs[0];
  const int64_t tuples = product(indices.dims(), 0, q - 1);
  const int64_t slice = product(data.dims(), m, r);
  const auto dstrides = strides_of(data.dims());
  std::vector<int64_t> offsets(tuples);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0;
    for (int64_t k = 0; k < m; ++k) {
      const int64_t d = data.dims()[k];
      int64_t i = idx[t * m + k];
      if (i < -d || i >= d) return invalid(ctx, "index ", i, " out of range");
      if (i < 0) i += d;
      off += i * dstrides[k];
    }
    offsets[t] = off;
  }
  if (red == Reduction::kNone) {
    return by_element(data.dtype(), [&](auto tag) {
      using U = typename decltype(tag)::type;
      const U* src = elems<U>(updates);
      for (int64_t t = 0; t < tuples; ++t) {
        std::copy(src + t * slice, src + (t + 1) * slice, elems<U>(out) + offsets[t]);
      }
      return absl::OkStatus();
    });
  }
  for (int64_t t = 0; t < tuples; ++t) {
    for (int64_t j = 0; j < slice; ++j) {
      const int64_t o = offsets[t] + j, u = t * slice + j;
      if (is_float_type(data.dtype())) {
        out.set_double(o, combine(red, out.get_double(o), updates.get_double(u)));
      } else if (data.dtype() == TensorProto::UINT64) {
        out.set_int64(o,
                      static_cast<int64_t>(combine(red, static_cast<uint64_t>(out.get_int64(o)),
                                                   static_cast<uint64_t>(updates.get_int64(u)))));
      } else {
        out.set_int64(o, combine(red, out.get_int64(o), updates.get_int64(u)));
      }
    }
  }
  return absl::OkStatus();
}

// ScatterElements (and its deprecated opset-9 name Scatter): the inverse of GatherElements.
absl::Status scatter_elements_kernel(KernelContext& ctx) {
  for (size_t i = 0; i < 3; ++i) {
    RETURN_IF_ERROR(require_input(ctx, i));
  }
  const Tensor& data = *ctx.input(0);
  const Tensor& updates = *ctx.input(2);
  ASSIGN_OR_RETURN(std::vector<int64_t> idx, read_index_tensor(ctx, ctx.input(1)));
  const Tensor& indices = *ctx.input(1);
  const int64_t r = data.rank();
  int64_t axis = ctx.node.attr_int("axis", 0);
  if (r == 0 || !normalize_axis(axis, r)) return invalid(ctx, "bad axis");
  if (indices.dims() != updates.dims() || indices.rank() != r) {
    return invalid(ctx, "indices and updates must have the same shape and data's rank");
  }
  if (updates.dtype() != data.dtype()) return invalid(ctx, "updates type differs");
  for (int64_t i = 0; i < r; ++i) {
    if (i != axis && indices.dims()[i] > data.dims()[i]) return invalid(ctx, "indices too large");
  }
  ASSIGN_OR_RETURN(const Reduction red, parse_reduction(ctx, data));
  // Target offsets first, so a bad index fails before anything is written.
  const int64_t n = indices.size(), d = data.dims()[axis];
  const auto dstrides = strides_of(data.dims());
  std::vector<int64_t> targets(n);
  std::vector<int64_t> pos(r, 0);
  int64_t base = 0;
  for (int64_t k = 0; k < n; ++k) {
    int64_t i = idx[k];
    if (i < -d || i >= d) return invalid(ctx, "index ", i, " out of range");
    if (i < 0) i += d;
    targets[k] = base + i * dstrides[axis];
    next_index_skipping(pos, indices.dims(), axis, dstrides, base);
  }
  RETURN_IF_ERROR(copy_with_dims(ctx, 0, data, data.dims()));
  Tensor& out = ctx.outputs[0];
  if (red == Reduction::kNone) {
    return by_element(data.dtype(), [&](auto tag) {
      using U = typename decltype(tag)::type;
      U* dst = elems<U>(out);
      const U* src = elems<U>(updates);
      for (int64_t k = 0; k < n; ++k) dst[targets[k]] = src[k];
      return absl::OkStatus();
    });
  }
  for (int64_t k = 0; k < n; ++k) {
    const int64_t o = targets[k];
    if (is_float_type(data.dtype())) {
      out.set_double(o, combine(red, out.get_double(o), updates.get_double(k)));
    } else if (data.dtype() == TensorProto::UINT64) {
      out.set_int64(o, static_cast<int64_t>(combine(red, static_cast<uint64_t>(out.get_int64(o)),
                                                    static_cast<uint64_t>(updates.get_int64(k)))));
    } else {
      out.set_int64(o, combine(red, out.get_int64(o), updates.get_int64(k)));
    }
  }
  return absl::OkStatus();
}

absl::Status expand_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, read_ints(ctx, ctx.input(1), "shape"));
  for (int64_t d : shape) {
    if (d < 0) return invalid(ctx, "negative dim in shape");
  }
  auto dims = broadcast_shape({x.dims(), shape});
  if (!dims.ok()) return invalid(ctx, dims.status().message());
  const auto strides = broadcast_strides(x.dims(), *dims);
  return copy_view(ctx, x, *dims, *dims, strides);
}

absl::Status tile_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  ASSIGN_OR_RETURN(std::vector<int64_t> repeats, read_ints(ctx, ctx.input(1), "repeats"));
  const int64_t r = x.rank();
  if (static_cast<int64_t>(repeats.size()) != r) return invalid(ctx, "repeats length != rank");
  const auto in_strides = strides_of(x.dims());
  std::vector<int64_t> dims(r), view_dims, view_strides;
  for (int64_t i = 0; i < r; ++i) {
    const int64_t rep = repeats[i];
    if (rep < 0) return invalid(ctx, "negative repeat");
    if (!checked_mul(x.dims()[i], rep, &dims[i])) return invalid(ctx, "output too large");
    // Output dim i seen as (rep, dim): the repeat coordinate does not move in the input.
    view_dims.insert(view_dims.end(), {rep, x.dims()[i]});
    view_strides.insert(view_strides.end(), {0, in_strides[i]});
  }
  return copy_view(ctx, x, dims, view_dims, view_strides);
}

absl::Status range_kernel(KernelContext& ctx) {
  for (size_t i = 0; i < 3; ++i) {
    RETURN_IF_ERROR(require_input(ctx, i));
    if (ctx.input(i)->size() != 1 || ctx.input(i)->rank() > 1) {
      return invalid(ctx, "start, limit and delta must be scalars");
    }
  }
  const Tensor &start = *ctx.input(0), &limit = *ctx.input(1), &delta = *ctx.input(2);
  const int32_t dtype = start.dtype();
  if (limit.dtype() != dtype || delta.dtype() != dtype) return invalid(ctx, "types differ");
  if (is_float_type(dtype)) {
    const double s = start.get_double(0), l = limit.get_double(0), d = delta.get_double(0);
    if (d == 0 || !std::isfinite(s) || !std::isfinite(l) || !std::isfinite(d)) {
      return invalid(ctx, "bad start/limit/delta");
    }
    const double count = std::max(0.0, std::ceil((l - s) / d));
    if (count > 1e15) return absl::ResourceExhaustedError("Range: output too large");
    const int64_t n = static_cast<int64_t>(count);
    ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, dtype, {n}));
    for (int64_t i = 0; i < n; ++i) out->set_double(i, s + static_cast<double>(i) * d);
    return absl::OkStatus();
  }
  if (!is_integer_type(dtype) || dtype == TensorProto::UINT64) {
    return invalid(ctx, "unsupported type ", dtype);
  }
  const int64_t s = start.get_int64(0), l = limit.get_int64(0), d = delta.get_int64(0);
  if (d == 0) return invalid(ctx, "delta is 0");
  const __int128 span = static_cast<__int128>(l) - s;
  __int128 count = 0;
  if (d > 0 && span > 0) count = (span - 1) / d + 1;
  if (d < 0 && span < 0) count = (-span - 1) / (-static_cast<__int128>(d)) + 1;
  if (count > (static_cast<__int128>(1) << 50)) {
    return absl::ResourceExhaustedError("Range: output too large");
  }
  const int64_t n = static_cast<int64_t>(count);
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, dtype, {n}));
  for (int64_t i = 0; i < n; ++i) {
    out->set_int64(i, static_cast<int64_t>(s + static_cast<__int128>(i) * d));
  }
  return absl::OkStatus();
}

absl::Status constant_of_shape_kernel(KernelContext& ctx) {
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, read_ints(ctx, ctx.input(0), "input"));
  for (int64_t d : shape) {
    if (d < 0) return invalid(ctx, "negative dim");
  }
  Tensor value;
  if (const onnx::AttributeProto* a = ctx.node.attr("value")) {
    ASSIGN_OR_RETURN(Tensor v, Tensor::from_proto(a->t(), ctx.limits.max_tensor_bytes));
    if (v.size() != 1) return invalid(ctx, "value must have one element");
    value = std::move(v);
  } else {
    ASSIGN_OR_RETURN(value, Tensor::zeros(TensorProto::FLOAT, {1}, ctx.limits.max_tensor_bytes));
  }
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, value.dtype(), shape));
  return by_element(value.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    std::fill(elems<U>(*out), elems<U>(*out) + out->size(), elems<U>(value)[0]);
    return absl::OkStatus();
  });
}

absl::Status constant_kernel(KernelContext& ctx) {
  const onnx::AttributeProto* a = nullptr;
  for (const char* name : {"value", "sparse_value", "value_float", "value_floats", "value_int",
                           "value_ints", "value_string", "value_strings"}) {
    if (const onnx::AttributeProto* p = ctx.node.attr(name)) {
      if (a != nullptr) return invalid(ctx, "more than one value attribute");
      a = p;
    }
  }
  if (a == nullptr) return invalid(ctx, "no value attribute");
  const std::string& name = a->name();
  if (name == "value") {
    const ir::Graph* g = ctx.node.graph();
    const ir::ExternalData* external =
        g && g->model() ? g->model()->external_data().get() : nullptr;
    ASSIGN_OR_RETURN(Tensor v, Tensor::from_proto(a->t(), ctx.limits.max_tensor_bytes, external));
    if (ctx.outputs.empty()) return invalid(ctx, "no output");
    ctx.outputs[0] = std::move(v);
    return absl::OkStatus();
  }
  if (name == "sparse_value") return unimplemented(ctx, "sparse_value");
  if (name == "value_float" || name == "value_int") {
    ASSIGN_OR_RETURN(
        Tensor * out,
        ctx.make_output(0, name == "value_float" ? TensorProto::FLOAT : TensorProto::INT64, {}));
    if (name == "value_float") {
      out->data<float>()[0] = a->f();
    } else {
      out->data<int64_t>()[0] = a->i();
    }
    return absl::OkStatus();
  }
  if (name == "value_floats") {
    ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, TensorProto::FLOAT, {a->floats_size()}));
    std::copy(a->floats().begin(), a->floats().end(), out->data<float>());
    return absl::OkStatus();
  }
  if (name == "value_ints") {
    ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, TensorProto::INT64, {a->ints_size()}));
    std::copy(a->ints().begin(), a->ints().end(), out->data<int64_t>());
    return absl::OkStatus();
  }
  if (name == "value_string") {
    ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, TensorProto::STRING, {}));
    if (a->s().size() > ctx.limits.max_tensor_bytes) return invalid(ctx, "string too large");
    out->strings()[0] = a->s();
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, TensorProto::STRING, {a->strings_size()}));
  uint64_t total = 0;
  for (const auto& s : a->strings()) total += s.size();
  if (total > ctx.limits.max_tensor_bytes) return invalid(ctx, "strings too large");
  std::copy(a->strings().begin(), a->strings().end(), out->strings().begin());
  return absl::OkStatus();
}

absl::Status pad_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  const int64_t r = x.rank();
  std::vector<int64_t> pads;
  const Tensor* value_input = nullptr;
  double value_attr = 0;
  if (ctx.opset < 11) {
    auto p = ctx.node.attr_ints(ctx.opset < 2 ? "paddings" : "pads");
    if (!p) return invalid(ctx, "missing pads");
    pads = *p;
    value_attr = ctx.node.attr_float("value", 0.0f);
  } else {
    ASSIGN_OR_RETURN(pads, read_ints(ctx, ctx.input(1), "pads"));
    value_input = ctx.input(2);
    if (value_input != nullptr) {
      if (value_input->dtype() != x.dtype()) return invalid(ctx, "constant_value type differs");
      if (value_input->size() > 1) return invalid(ctx, "constant_value must be a scalar");
      if (value_input->size() == 0) value_input = nullptr;
    }
  }
  // Per-axis (begin, end) for every axis of x.
  std::vector<int64_t> begin(r, 0), end(r, 0);
  if (ctx.opset >= 18 && ctx.input(3) != nullptr) {
    ASSIGN_OR_RETURN(std::vector<int64_t> axes, read_ints(ctx, ctx.input(3), "axes"));
    const size_t n = axes.size();
    if (pads.size() != 2 * n) return invalid(ctx, "pads length != 2 * axes");
    std::vector<bool> seen(r, false);
    for (size_t i = 0; i < n; ++i) {
      int64_t a = axes[i];
      if (!normalize_axis(a, r) || seen[a]) return invalid(ctx, "bad or repeated axis");
      seen[a] = true;
      begin[a] = pads[i];
      end[a] = pads[n + i];
    }
  } else {
    if (static_cast<int64_t>(pads.size()) != 2 * r) return invalid(ctx, "pads length != 2 * rank");
    for (int64_t a = 0; a < r; ++a) {
      begin[a] = pads[a];
      end[a] = pads[r + a];
    }
  }
  const std::string mode = ctx.node.attr_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" &&
      !(mode == "wrap" && ctx.opset >= 19)) {
    return invalid(ctx, "unsupported mode '", mode, "'");
  }
  std::vector<int64_t> dims(r);
  for (int64_t a = 0; a < r; ++a) {
    // A negative pad crops, by at most the axis: a larger one (with a large pad at the other
    // end to keep the sum valid) would place the data far outside every int64 coordinate.
    if (begin[a] < -x.dims()[a] || end[a] < -x.dims()[a]) {
      return invalid(ctx, "pads for axis ", a, " crop more than the axis holds");
    }
    int64_t d;
    if (__builtin_add_overflow(x.dims()[a], begin[a], &d) ||
        __builtin_add_overflow(d, end[a], &d) || d < 0) {
      return invalid(ctx, "bad pads for axis ", a);
    }
    dims[a] = d;
    if (mode != "constant" && x.dims()[a] == 0 && d > 0) {
      return invalid(ctx, "cannot ", mode, "-pad an empty axis");
    }
  }
  ASSIGN_OR_RETURN(Tensor * out_t, ctx.make_output(0, x.dtype(), dims));
  Tensor& out = *out_t;
  if (out.size() == 0) return absl::OkStatus();
  // The pad value as an element of x's type.
  Tensor pad_value;
  if (value_input != nullptr) {
    pad_value = *value_input;
  } else {
    ASSIGN_OR_RETURN(pad_value, Tensor::zeros(x.dtype(), {}, ctx.limits.max_tensor_bytes));
    if (x.dtype() != TensorProto::STRING) pad_value.set_double(0, value_attr);
  }
  // For each axis, the source coordinate of every output coordinate (-1: pad value).
  std::vector<std::vector<int64_t>> maps(r);
  for (int64_t a = 0; a < r; ++a) {
    const int64_t d = x.dims()[a];
    maps[a].resize(dims[a]);
    for (int64_t o = 0; o < dims[a]; ++o) {
      int64_t c = o - begin[a];
      if (c < 0 || c >= d) {
        if (mode == "constant") {
          c = -1;
        } else if (mode == "edge") {
          c = std::clamp<int64_t>(c, 0, d - 1);
        } else if (mode == "wrap") {
          c = ((c % d) + d) % d;
        } else if (d == 1) {
          c = 0;
        } else {
          const int64_t period = 2 * (d - 1);
          c = ((c % period) + period) % period;
          if (c >= d) c = period - c;
        }
      }
      maps[a][o] = c;
    }
  }
  const auto in_strides = strides_of(x.dims());
  return by_element(x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    U* dst = elems<U>(out);
    const U* src = elems<U>(x);
    const U fill = elems<U>(pad_value)[0];
    if (r == 0) {
      dst[0] = src[0];
      return absl::OkStatus();
    }
    const int64_t inner = dims[r - 1];
    const std::vector<int64_t>& last = maps[r - 1];
    const int64_t outer = out.size() / inner;
    std::vector<int64_t> pos(r - 1, 0);
    for (int64_t o = 0; o < outer; ++o) {
      int64_t base = 0;
      bool inside = true;
      for (int64_t a = 0; a + 1 < r; ++a) {
        const int64_t c = maps[a][pos[a]];
        if (c < 0) {
          inside = false;
          break;
        }
        base += c * in_strides[a];
      }
      for (int64_t j = 0; j < inner; ++j) {
        *dst++ = inside && last[j] >= 0 ? src[base + last[j]] : fill;
      }
      next_index(pos, dims, r - 1);
    }
    return absl::OkStatus();
  });
}

absl::Status non_zero_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  const int32_t dtype = x.dtype();
  auto nonzero = [&](int64_t i) {
    if (dtype == TensorProto::STRING) return !x.strings()[i].empty();
    if (is_float_type(dtype)) return x.get_double(i) != 0;
    return x.get_int64(i) != 0;
  };
  int64_t nnz = 0;
  for (int64_t i = 0; i < x.size(); ++i) nnz += nonzero(i);
  // A scalar counts as a 1-D tensor of one element, like numpy.nonzero.
  const int64_t r = std::max<int64_t>(x.rank(), 1);
  std::vector<int64_t> dims = x.rank() == 0 ? std::vector<int64_t>{1} : x.dims();
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, TensorProto::INT64, {r, nnz}));
  int64_t* dst = out->data<int64_t>();
  std::vector<int64_t> pos(r, 0);
  int64_t k = 0;
  for (int64_t i = 0; i < x.size(); ++i) {
    if (nonzero(i)) {
      for (int64_t a = 0; a < r; ++a) dst[a * nnz + k] = pos[a];
      ++k;
    }
    next_index(pos, dims, r);
  }
  return absl::OkStatus();
}

// Trilu: keeps the upper (j - i >= k) or lower (j - i <= k) triangle of the last two dims.
absl::Status trilu_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  const int64_t r = x.rank();
  if (r < 2) return invalid(ctx, "input must have rank >= 2");
  int64_t k = 0;
  if (const Tensor* kt = ctx.input(1)) {
    if (kt->size() != 1 || !is_integer_type(kt->dtype())) return invalid(ctx, "k must be a scalar");
    k = kt->get_int64(0);
  }
  const bool upper = ctx.node.attr_int("upper", 1) != 0;
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, x.dtype(), x.dims()));
  const int64_t rows = x.dims()[r - 2], cols = x.dims()[r - 1];
  const int64_t mats = product(x.dims(), 0, r - 2);
  return by_element(x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* src = elems<U>(x);
    U* dst = elems<U>(*out);
    for (int64_t m = 0; m < mats; ++m) {
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t o = (m * rows + i) * cols + j;
          // Overflow-free form of (j - i >= k) / (j - i <= k) for extreme k.
          const __int128 diff = static_cast<__int128>(j) - i;
          if (upper ? diff >= k : diff <= k) dst[o] = src[o];
        }
      }
    }
    return absl::OkStatus();
  });
}

// DepthToSpace / SpaceToDepth: a 6-D reshape, transpose and reshape, done as one strided copy.
absl::Status depth_to_space_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  if (x.rank() != 4) return invalid(ctx, "input must be 4-D");
  const int64_t b = ctx.node.attr_int("blocksize", 0);
  const std::string mode = ctx.opset >= 11 ? ctx.node.attr_string("mode", "DCR") : "DCR";
  if (mode != "DCR" && mode != "CRD") return invalid(ctx, "unknown mode ", mode);
  const int64_t n = x.dims()[0], c = x.dims()[1], h = x.dims()[2], w = x.dims()[3];
  int64_t bb;
  if (b <= 0 || !checked_mul(b, b, &bb) || c % bb != 0) return invalid(ctx, "bad blocksize");
  const int64_t cc = c / bb;
  int64_t hb, wb;
  if (!checked_mul(h, b, &hb) || !checked_mul(w, b, &wb)) return invalid(ctx, "too large");
  // Input seen as 6-D; output dims [N, C', H, b, W, b] read with the matching strides.
  std::vector<int64_t> in6 = mode == "DCR" ? std::vector<int64_t>{n, b, b, cc, h, w}
                                           : std::vector<int64_t>{n, cc, b, b, h, w};
  const auto s = strides_of(in6);
  std::vector<int64_t> dims = {n, cc, h, b, w, b};
  std::vector<int64_t> strides = mode == "DCR"
                                     ? std::vector<int64_t>{s[0], s[3], s[4], s[1], s[5], s[2]}
                                     : std::vector<int64_t>{s[0], s[1], s[4], s[2], s[5], s[3]};
  return copy_view(ctx, x, {n, cc, hb, wb}, dims, strides);
}

absl::Status space_to_depth_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  if (x.rank() != 4) return invalid(ctx, "input must be 4-D");
  const int64_t b = ctx.node.attr_int("blocksize", 0);
  const int64_t n = x.dims()[0], c = x.dims()[1], h = x.dims()[2], w = x.dims()[3];
  int64_t bb;
  if (b <= 0 || !checked_mul(b, b, &bb) || h % b != 0 || w % b != 0) {
    return invalid(ctx, "bad blocksize");
  }
  int64_t cbb;
  if (!checked_mul(c, bb, &cbb)) return invalid(ctx, "too large");
  // Input [N, C, H/b, b, W/b, b] transposed to [N, b, b, C, H/b, W/b].
  const auto s = strides_of({n, c, h / b, b, w / b, b});
  std::vector<int64_t> dims = {n, b, b, c, h / b, w / b};
  std::vector<int64_t> strides = {s[0], s[3], s[5], s[1], s[2], s[4]};
  return copy_view(ctx, x, {n, cbb, h / b, w / b}, dims, strides);
}

absl::Status compress_kernel(KernelContext& ctx) {
  for (size_t i = 0; i < 2; ++i) {
    RETURN_IF_ERROR(require_input(ctx, i));
  }
  const Tensor& x = *ctx.input(0);
  const Tensor& cond = *ctx.input(1);
  if (cond.rank() != 1) return invalid(ctx, "condition must be 1-D");
  const onnx::AttributeProto* axis_attr = ctx.node.attr("axis");
  int64_t axis = 0, outer = 1, d = x.size(), inner = 1;
  if (axis_attr != nullptr) {
    axis = ctx.node.attr_int("axis", 0);
    if (!normalize_axis(axis, x.rank())) return invalid(ctx, "bad axis");
    d = x.dims()[axis];
    outer = product(x.dims(), 0, axis);
    inner = product(x.dims(), axis + 1, x.dims().size());
  }
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < cond.size(); ++i) {
    if (cond.get_double(i) == 0) continue;
    if (i >= d) return invalid(ctx, "condition selects past the end");
    keep.push_back(i);
  }
  const int64_t kept = static_cast<int64_t>(keep.size());
  std::vector<int64_t> dims = {kept};
  if (axis_attr != nullptr) {
    dims = x.dims();
    dims[axis] = kept;
  }
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, x.dtype(), dims));
  return by_element(x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* src = elems<U>(x);
    U* dst = elems<U>(*out);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i : keep) {
        const U* p = src + (o * d + i) * inner;
        dst = std::copy(p, p + inner, dst);
      }
    }
    return absl::OkStatus();
  });
}

absl::Status eye_like_kernel(KernelContext& ctx) {
  RETURN_IF_ERROR(require_input(ctx, 0));
  const Tensor& x = *ctx.input(0);
  if (x.rank() != 2) return invalid(ctx, "input must be 2-D");
  const int32_t dtype = static_cast<int32_t>(ctx.node.attr_int("dtype", x.dtype()));
  if (!is_float_type(dtype) && !is_integer_type(dtype) && dtype != TensorProto::BOOL) {
    return invalid(ctx, "unsupported dtype ", dtype);
  }
  const int64_t k = ctx.node.attr_int("k", 0);
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, dtype, x.dims()));
  const int64_t rows = x.dims()[0], cols = x.dims()[1];
  for (int64_t i = 0; i < rows; ++i) {
    const __int128 j = static_cast<__int128>(i) + k;
    if (j >= 0 && j < cols) out->set_double(i * cols + static_cast<int64_t>(j), 1.0);
  }
  return absl::OkStatus();
}

absl::Status one_hot_kernel(KernelContext& ctx) {
  for (size_t i = 0; i < 3; ++i) {
    RETURN_IF_ERROR(require_input(ctx, i));
  }
  const Tensor& indices = *ctx.input(0);
  const Tensor& depth_t = *ctx.input(1);
  const Tensor& values = *ctx.input(2);
  if (depth_t.size() != 1 || values.size() != 2 || values.rank() != 1) {
    return invalid(ctx, "depth must be a scalar and values a 2-element tensor");
  }
  if (indices.dtype() == TensorProto::STRING || depth_t.dtype() == TensorProto::STRING) {
    return invalid(ctx, "numeric indices and depth required");
  }
  const double depth_d = depth_t.get_double(0);
  if (!(depth_d >= 1) || depth_d > 1e15) return invalid(ctx, "bad depth");
  const int64_t depth = static_cast<int64_t>(depth_d);
  const int64_t r = indices.rank();
  int64_t axis = ctx.node.attr_int("axis", -1);
  if (!normalize_axis(axis, r + 1)) return invalid(ctx, "bad axis");
  std::vector<int64_t> dims = indices.dims();
  dims.insert(dims.begin() + axis, depth);
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, values.dtype(), dims));
  const int64_t outer = product(indices.dims(), 0, axis);
  const int64_t inner = product(indices.dims(), axis, r);
  return by_element(values.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U off = elems<U>(values)[0], on = elems<U>(values)[1];
    U* dst = elems<U>(*out);
    std::fill(dst, dst + out->size(), off);
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t in = 0; in < inner; ++in) {
        int64_t i = indices.get_int64(o * inner + in);
        if (i < 0 && ctx.opset >= 11) i += depth;  // counts from the end since opset 11
        if (i < 0 || i >= depth) continue;
        dst[(o * depth + i) * inner + in] = on;
      }
    }
    return absl::OkStatus();
  });
}

absl::Status reverse_sequence_kernel(KernelContext& ctx) {
  for (size_t i = 0; i < 2; ++i) {
    RETURN_IF_ERROR(require_input(ctx, i));
  }
  const Tensor& x = *ctx.input(0);
  ASSIGN_OR_RETURN(std::vector<int64_t> lens, read_ints(ctx, ctx.input(1), "sequence_lens"));
  const int64_t r = x.rank();
  int64_t batch_axis = ctx.node.attr_int("batch_axis", 1);
  int64_t time_axis = ctx.node.attr_int("time_axis", 0);
  if (r < 2 || !normalize_axis(batch_axis, r) || !normalize_axis(time_axis, r) ||
      batch_axis == time_axis) {
    return invalid(ctx, "bad batch/time axes");
  }
  if (static_cast<int64_t>(lens.size()) != x.dims()[batch_axis]) {
    return invalid(ctx, "sequence_lens length != batch size");
  }
  for (int64_t len : lens) {
    if (len < 0 || len > x.dims()[time_axis]) return invalid(ctx, "bad sequence length");
  }
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, x.dtype(), x.dims()));
  const int64_t n = x.size();
  if (n == 0) return absl::OkStatus();
  const int64_t tstride = strides_of(x.dims())[time_axis];
  return by_element(x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* src = elems<U>(x);
    U* dst = elems<U>(*out);
    std::vector<int64_t> pos(r, 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = pos[time_axis], len = lens[pos[batch_axis]];
      dst[i] = t < len ? src[i + (len - 1 - 2 * t) * tstride] : src[i];
      next_index(pos, x.dims(), r);
    }
    return absl::OkStatus();
  });
}

}  // namespace

void register_shape_kernels() {
  register_kernel("Shape", 1, 0, shape_kernel);
  register_kernel("Size", 1, 0, size_kernel);
  register_kernel("Reshape", 1, 0, reshape_kernel);
  register_kernel("Flatten", 1, 0, flatten_kernel);
  register_kernel("Squeeze", 1, 0, squeeze_kernel);
  register_kernel("Unsqueeze", 1, 0, unsqueeze_kernel);
  register_kernel("Transpose", 1, 0, transpose_kernel);
  register_kernel("Concat", 1, 0, concat_kernel);
  register_kernel("Split", 1, 0, split_kernel);
  register_kernel("Slice", 1, 0, slice_kernel);
  register_kernel("Gather", 1, 0, gather_kernel);
  register_kernel("GatherElements", 11, 0, gather_elements_kernel);
  register_kernel("GatherND", 11, 0, gather_nd_kernel);
  register_kernel("ScatterND", 11, 0, scatter_nd_kernel);
  register_kernel("ScatterElements", 11, 0, scatter_elements_kernel);
  register_kernel("Scatter", 9, 10, scatter_elements_kernel);
  register_kernel("Expand", 8, 0, expand_kernel);
  // Tile-1 took (tiles, axis) inputs; only the repeats form (opset 6+) is supported.
  register_kernel("Tile", 6, 0, tile_kernel);
  register_kernel("Range", 11, 0, range_kernel);
  register_kernel("ConstantOfShape", 9, 0, constant_of_shape_kernel);
  register_kernel("Constant", 1, 0, constant_kernel);
  register_kernel("Pad", 1, 0, pad_kernel);
  register_kernel("NonZero", 9, 0, non_zero_kernel);
  register_kernel("Trilu", 14, 0, trilu_kernel);
  register_kernel("DepthToSpace", 1, 0, depth_to_space_kernel);
  register_kernel("SpaceToDepth", 1, 0, space_to_depth_kernel);
  register_kernel("Compress", 9, 0, compress_kernel);
  register_kernel("EyeLike", 9, 0, eye_like_kernel);
  register_kernel("OneHot", 9, 0, one_hot_kernel);
  register_kernel("ReverseSequence", 10, 0, reverse_sequence_kernel);
}

}  // namespace graft::eval
