// Rotary position embeddings: the standard RotaryEmbedding (opset 23) and ONNX Runtime's
// com.microsoft RotaryEmbedding. Both rotate pairs of each head's first `rot` elements by angles
// read from cos and sin caches, one row per token, and pass the head's other elements through:
//
//   pair i (of rot / 2): (x1, x2) = (h[i], h[i + rot/2]), or (h[2i], h[2i + 1]) when interleaved
//   out1 = cos[i] * x1 - sin[i] * x2,  out2 = sin[i] * x1 + cos[i] * x2
//
// The ops differ in their inputs' order and in how the caches' rows are chosen, so each kernel
// checks its own operands (the error cases of the ONNX spec's reference and function body, and
// ONNX Runtime 1.30's CPU kernel for the com.microsoft op), turns them into a Rotation and the
// row of every token, and rotate() does the arithmetic for both. Position ids outside the caches'
// rows are errors (ONNX Runtime's kernels refuse negative ones too), never a read out of bounds.
//
// Arithmetic is in double and each output is rounded once to its type, within the tolerance
// verification grants fusions.
#include <cstdint>
#include <string>

#include "core/eval/kernels.h"
#include "core/eval/kernels/common.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

// Where a kernel's operands put the elements it rotates.
struct Rotation {
  int64_t batch = 0, heads = 0, seq = 0, head = 0;
  bool heads_first = false;  // X is (B, N, S, H); else (B, S, N * H)
  int64_t rot = 0;           // rotated elements per head: even, at most `head`
  bool interleaved = false;
};

// Y = X with every head of token (b, s) rotated by the cache row rows[b * S + s] (cos and sin are
// rows of rot / 2 values).
absl::Status rotate(KernelContext& ctx, const Tensor& x, const Rotation& r, const Tensor& cos,
                    const Tensor& sin, const Scratch<int64_t>& rows) {
  RETURN_IF_ERROR(ctx.afford(3.0 * static_cast<double>(x.size())));
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), x.dims()));
  if (x.size() == 0) return absl::OkStatus();
  const Scratch<double> v = to_doubles(x), c = to_doubles(cos), s = to_doubles(sin);
  const int64_t half = r.rot / 2;
  for (int64_t b = 0; b < r.batch; ++b)
    for (int64_t t = 0; t < r.seq; ++t) {
      const int64_t row = rows[b * r.seq + t] * half;
      for (int64_t n = 0; n < r.heads; ++n) {
        const int64_t base = r.heads_first ? ((b * r.heads + n) * r.seq + t) * r.head
                                           : ((b * r.seq + t) * r.heads + n) * r.head;
        for (int64_t i = 0; i < half; ++i) {
          const int64_t i1 = base + (r.interleaved ? 2 * i : i);
          const int64_t i2 = base + (r.interleaved ? 2 * i + 1 : i + half);
          const double x1 = v[i1], x2 = v[i2], ci = c[row + i], si = s[row + i];
          store(y, i1, ci * x1 - si * x2);
          store(y, i2, si * x1 + ci * x2);
        }
        for (int64_t h = r.rot; h < r.head; ++h) store(y, base + h, v[base + h]);
      }
      spend_work(static_cast<uint64_t>(r.heads * r.head));
    }
  return absl::OkStatus();
}

// `interleaved`: 0 or 1 (the spec's reference reads any non-zero value as true, ONNX Runtime only
// 1: other values are refused rather than read one way).
absl::StatusOr<bool> interleaved_attr(const KernelContext& ctx) {
  const int64_t v = ctx.node.attr_int("interleaved", 0);
  if (v != 0 && v != 1) return invalid(ctx, "interleaved must be 0 or 1");
  return v == 1;
}

// A non-negative INT attribute (0 when absent) of at most 2^31 - 1.
absl::StatusOr<int64_t> count_attr(const KernelContext& ctx, const char* name) {
  const int64_t v = ctx.node.attr_int(name, 0);
  if (v < 0 || v > INT32_MAX) return invalid(ctx, absl::StrCat(name, " must be in 0..2^31-1"));
  return v;
}

// The rotated width: `dim` when given, else the whole head; even and at most the head.
absl::Status set_rotated_width(const KernelContext& ctx, int64_t dim, Rotation& r) {
  r.rot = dim > 0 ? dim : r.head;
  if (r.rot > r.head)
    return invalid(ctx,
                   absl::StrCat("rotary_embedding_dim ", r.rot, " exceeds the head size ", r.head));
  if (r.rot % 2 != 0)
    return invalid(ctx, absl::StrCat("the rotated width ", r.rot,
                                     " (rotary_embedding_dim, else "
                                     "the head size) is odd"));
  return absl::OkStatus();
}

// cos and sin: of X's type, the same shape.
absl::Status check_caches(const KernelContext& ctx, const Tensor& x, const Tensor& cos,
                          const Tensor& sin) {
  if (cos.dtype() != x.dtype() || sin.dtype() != x.dtype())
    return invalid(ctx, "cos_cache and sin_cache must have the input's type");
  if (cos.dims() != sin.dims()) return invalid(ctx, "cos_cache and sin_cache differ in shape");
  return absl::OkStatus();
}

// The cache row of every token from position ids of (B, S), each in [0, rows).
absl::StatusOr<Scratch<int64_t>> rows_of_ids(const KernelContext& ctx, const Tensor& ids,
                                             const Rotation& r, int64_t rows) {
  if (ids.dtype() != TensorProto::INT64) return invalid(ctx, "position_ids must be int64");
  if (ids.rank() != 2 || ids.dims()[0] != r.batch || ids.dims()[1] != r.seq)
    return invalid(
        ctx, absl::StrCat("position_ids must be (batch, sequence) = (", r.batch, ", ", r.seq, ")"));
  Scratch<int64_t> v = to_ints(ids);
  for (int64_t i = 0; i < ids.size(); ++i)
    if (v[i] < 0 || v[i] >= rows)
      return invalid(ctx,
                     absl::StrCat("position id ", v[i], " is outside the caches' ", rows, " rows"));
  return v;
}

// ----------------------------------------------------------------------------------- standard

// RotaryEmbedding-23 (X, cos_cache, sin_cache, position_ids?) -> Y. X is (B, N, S, H), or
// (B, S, N * H) with num_heads = N. With position_ids (B, S) the caches are (P, rot / 2) and
// token (b, s) takes row position_ids[b, s]; without, they are (B, S, rot / 2), one row per token.
absl::Status rotary_embedding(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* x, required(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* cos, required(ctx, 1));
  ASSIGN_OR_RETURN(const Tensor* sin, required(ctx, 2));
  const Tensor* ids = ctx.input(3);
  if (x->dtype() != TensorProto::FLOAT && x->dtype() != TensorProto::FLOAT16 &&
      x->dtype() != TensorProto::BFLOAT16)
    return invalid(ctx, "X must be float, float16 or bfloat16");
  RETURN_IF_ERROR(check_caches(ctx, *x, *cos, *sin));
  Rotation r;
  ASSIGN_OR_RETURN(r.interleaved, interleaved_attr(ctx));
  ASSIGN_OR_RETURN(const int64_t dim, count_attr(ctx, "rotary_embedding_dim"));
  ASSIGN_OR_RETURN(const int64_t num_heads, count_attr(ctx, "num_heads"));
  const auto& d = x->dims();
  if (d.size() == 4) {
    // num_heads does not apply: the heads are X's dim 1.
    r = {d[0], d[1], d[2], d[3], true, 0, r.interleaved};
  } else if (d.size() == 3) {
    if (num_heads == 0) return invalid(ctx, "a 3-D input needs the num_heads attribute");
    if (d[2] % num_heads != 0)
      return invalid(ctx, absl::StrCat("the hidden size ", d[2], " is not a multiple of num_heads ",
                                       num_heads));
    r = {d[0], num_heads, d[1], d[2] / num_heads, false, 0, r.interleaved};
  } else {
    return invalid(ctx,
                   "X must be 3-D (batch, sequence, hidden) or 4-D (batch, heads, sequence, "
                   "head)");
  }
  RETURN_IF_ERROR(set_rotated_width(ctx, dim, r));
  const int64_t half = r.rot / 2;
  Scratch<int64_t> rows;
  if (ids != nullptr) {
    if (cos->rank() != 2 || cos->dims()[1] != half)
      return invalid(ctx,
                     absl::StrCat("with position_ids the caches must be (positions, ", half, ")"));
    ASSIGN_OR_RETURN(rows, rows_of_ids(ctx, *ids, r, cos->dims()[0]));
  } else {
    if (cos->rank() != 3 || cos->dims()[0] != r.batch || cos->dims()[1] != r.seq ||
        cos->dims()[2] != half)
      return invalid(ctx, absl::StrCat("without position_ids the caches must be (batch, sequence, ",
                                       half, ") = (", r.batch, ", ", r.seq, ", ", half, ")"));
    rows = Scratch<int64_t>(static_cast<size_t>(cos->size() / std::max<int64_t>(half, 1)));
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  }
  return rotate(ctx, *x, r, *cos, *sin, rows);
}

// ------------------------------------------------------------------------------ com.microsoft

// com.microsoft RotaryEmbedding (input, position_ids, cos_cache, sin_cache) -> output, as ONNX
// Runtime's CPU kernel computes it. input is (B, N, S, H), or (B, S, hidden) with H = hidden /
// num_heads (else twice the caches' width); the caches are (P, rot / 2); position_ids is (B, S)
// (token (b, s) takes that row) or one element p (token (b, s) takes row p + s). num_heads is
// required with rotary_embedding_dim. `scale` only matters to ONNX Runtime's cache updates,
// which its CPU kernel does not implement (caches shorter than the sequence: Unimplemented here
// too), nor is is_packed_batching (ragged batches) evaluated.
absl::Status ms_rotary_embedding(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* x, required(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* ids, required(ctx, 1));
  ASSIGN_OR_RETURN(const Tensor* cos, required(ctx, 2));
  ASSIGN_OR_RETURN(const Tensor* sin, required(ctx, 3));
  if (x->dtype() != TensorProto::FLOAT && x->dtype() != TensorProto::FLOAT16)
    return unimplemented(ctx, "element type other than float and float16");
  if (ctx.node.attr_int("is_packed_batching", 0) != 0)
    return unimplemented(ctx, "is_packed_batching");
  RETURN_IF_ERROR(check_caches(ctx, *x, *cos, *sin));
  if (cos->rank() != 2) return invalid(ctx, "cos_cache and sin_cache must be 2-D");
  Rotation r;
  ASSIGN_OR_RETURN(r.interleaved, interleaved_attr(ctx));
  ASSIGN_OR_RETURN(const int64_t dim, count_attr(ctx, "rotary_embedding_dim"));
  ASSIGN_OR_RETURN(const int64_t num_heads, count_attr(ctx, "num_heads"));
  if (dim > 0 && num_heads == 0)
    return invalid(ctx, "rotary_embedding_dim needs the num_heads attribute");
  const int64_t positions = cos->dims()[0], width = cos->dims()[1];
  const auto& d = x->dims();
  if (d.size() == 4) {
    if (num_heads != 0 && num_heads != d[1])
      return invalid(ctx, "num_heads differs from the input's heads (dim 1)");
    r = {d[0], d[1], d[2], d[3], true, 0, r.interleaved};
  } else if (d.size() == 3) {
    const int64_t head = num_heads > 0 ? d[2] / num_heads : 2 * width;
    if (head == 0 || d[2] % head != 0 || (num_heads > 0 && d[2] % num_heads != 0))
      return invalid(
          ctx, absl::StrCat("the hidden size ", d[2], " is not a whole number of heads of ", head));
    r = {d[0], d[2] / head, d[1], head, false, 0, r.interleaved};
  } else {
    return invalid(ctx,
                   "input must be 3-D (batch, sequence, hidden) or 4-D (batch, heads, "
                   "sequence, head)");
  }
  RETURN_IF_ERROR(set_rotated_width(ctx, dim, r));
  if (width != r.rot / 2)
    return invalid(
        ctx, absl::StrCat("the caches' width ", width, " is not half the rotated width ", r.rot));
  if (r.seq > positions)
    return unimplemented(ctx,
                         "caches with fewer rows than the sequence (ONNX Runtime would "
                         "extend them)");
  Scratch<int64_t> rows;
  if (ids->dtype() == TensorProto::INT64 && ids->size() == 1 && ids->rank() <= 1) {
    const int64_t first = ids->get_int64(0);
    if (first < 0 || first > positions - r.seq)
      return invalid(ctx, absl::StrCat("positions from ", first, " for ", r.seq,
                                       " tokens are outside the caches' ", positions, " rows"));
    // (An empty input may have dims whose product is no size at all: no rows are needed.)
    if (x->size() > 0) {
      rows = Scratch<int64_t>(static_cast<size_t>(r.batch * r.seq));
      for (int64_t i = 0; i < r.batch * r.seq; ++i) rows[i] = first + i % r.seq;
    }
  } else {
    ASSIGN_OR_RETURN(rows, rows_of_ids(ctx, *ids, r, positions));
  }
  return rotate(ctx, *x, r, *cos, *sin, rows);
}

}  // namespace

void register_rotary_kernels() {
  register_kernel("RotaryEmbedding", 23, 0, rotary_embedding);
  register_kernel("com.microsoft", "RotaryEmbedding", 1, 0, ms_rotary_embedding);
}

}  // namespace graft::eval
