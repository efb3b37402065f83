// ONNX's Attention (opset 23): scaled dot-product attention over heads, with grouped key/value
// heads, an additive or boolean mask, causal masking, softcap and a past/present key-value cache.
//
// Q, K and V are all 4-D (B, N, S, H) / (B, Nkv, T, H) / (B, Nkv, T, Hv), or all 3-D
// (B, S, N * H) with q_num_heads and kv_num_heads. past_key / past_value (B, Nkv, P, H / Hv) come
// before K / V along the sequence; present_key / present_value are the concatenations. attn_mask
// broadcasts to (B, N, S, P + T): a bool mask allows where true (-inf elsewhere), a float one is
// added. is_causal allows key j for query i iff j <= i + P. A query row with no allowed key is a
// row of zeros. The qk_matmul_output output (3) is not computed (Unimplemented when asked for):
// Graft never emits it.
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/eval/broadcast.h"
#include "core/eval/kernels.h"
#include "core/eval/kernels/common.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

// `t` (3-D (B, L, heads * size) or 4-D (B, heads, L, size)) as doubles in (B, heads, L, size).
Scratch<double> heads_first(const Tensor& t, int64_t heads, int64_t size) {
  Scratch<double> v = to_doubles(t);
  if (t.rank() == 4) return v;
  const int64_t batch = t.dims()[0], len = t.dims()[1];
  Scratch<double> out(v.size());
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t l = 0; l < len; ++l)
      for (int64_t n = 0; n < heads; ++n)
        for (int64_t e = 0; e < size; ++e)
          out[((b * heads + n) * len + l) * size + e] = v[((b * len + l) * heads + n) * size + e];
  return out;
}

// past (B, Nkv, P, size) then new (B, Nkv, T, size) along the sequence.
Scratch<double> concat_sequence(const Scratch<double>& past, const Scratch<double>& now,
                                int64_t batch, int64_t heads, int64_t p, int64_t t, int64_t size) {
  Scratch<double> out(batch * heads * (p + t) * size);
  for (int64_t bn = 0; bn < batch * heads; ++bn) {
    std::copy_n(past.data() + bn * p * size, p * size, out.data() + bn * (p + t) * size);
    std::copy_n(now.data() + bn * t * size, t * size, out.data() + bn * (p + t) * size + p * size);
  }
  return out;
}

absl::Status attention(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* q, required(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* k, required(ctx, 1));
  ASSIGN_OR_RETURN(const Tensor* v, required(ctx, 2));
  RETURN_IF_ERROR(require_float(ctx, *q));
  if (k->dtype() != q->dtype() || v->dtype() != q->dtype())
    return unimplemented(ctx, "Q, K and V of different element types");
  if (ctx.node.output(3) != nullptr) return unimplemented(ctx, "qk_matmul_output");
  const int64_t rank = q->rank();
  if ((rank != 3 && rank != 4) || k->rank() != rank || v->rank() != rank)
    return invalid(ctx, "Q, K and V must be all 3-D or all 4-D");
  const auto &qd = q->dims(), &kd = k->dims(), &vd = v->dims();
  int64_t batch = qd[0], heads, kv_heads, seq, len, head, vhead;
  if (rank == 4) {
    heads = qd[1];
    kv_heads = kd[1];
    seq = qd[2];
    len = kd[2];
    head = qd[3];
    vhead = vd[3];
    if (kd[3] != head || vd[1] != kv_heads || vd[2] != len)
      return invalid(ctx, "K must be (B, kv_heads, T, head_size) and V (B, kv_heads, T, v_size)");
  } else {
    ASSIGN_OR_RETURN(heads, positive_attr(ctx, "q_num_heads"));
    ASSIGN_OR_RETURN(kv_heads, positive_attr(ctx, "kv_num_heads"));
    seq = qd[1];
    len = kd[1];
    if (qd[2] % heads != 0 || vd[2] % kv_heads != 0)
      return invalid(ctx, "the hidden sizes are not divisible by the head counts");
    head = qd[2] / heads;
    vhead = vd[2] / kv_heads;
    if (kd[2] != kv_heads * head || vd[1] != len)
      return invalid(ctx, "K's hidden size is not kv_num_heads * head_size, or V's length not K's");
  }
  if (kd[0] != batch || vd[0] != batch) return invalid(ctx, "Q, K and V differ in batch size");
  if (heads <= 0 || kv_heads <= 0 || heads % kv_heads != 0)
    return invalid(ctx, "q heads must be a positive multiple of kv heads");
  if (head <= 0 && seq > 0 && len > 0) return invalid(ctx, "the head size must be positive");
  const Tensor* past_key = ctx.input(4);
  const Tensor* past_value = ctx.input(5);
  if ((past_key == nullptr) != (past_value == nullptr))
    return invalid(ctx, "past_key and past_value go together");
  int64_t past = 0;
  if (past_key != nullptr) {
    const auto &pk = past_key->dims(), &pv = past_value->dims();
    if (past_key->dtype() != q->dtype() || past_value->dtype() != q->dtype() || pk.size() != 4 ||
        pv.size() != 4 || pk[0] != batch || pk[1] != kv_heads || pk[3] != head || pv[0] != batch ||
        pv[1] != kv_heads || pv[2] != pk[2] || pv[3] != vhead)
      return invalid(ctx,
                     "past_key / past_value must be (B, kv_heads, P, head_size / v_head_size) of "
                     "Q's type");
    past = pk[2];
  }
  const int64_t total = past + len;
  const Heads h{batch, heads, kv_heads, seq, total, head, vhead};
  // Every buffer below is at most this many doubles: checked in double first (dims of
  // zero-sized operands may have products that overflow int64).
  const double elements =
      static_cast<double>(batch) * (static_cast<double>(heads) * seq * (head + vhead) +
                                    static_cast<double>(kv_heads) * total * (head + vhead) * 2);
  if (elements * sizeof(double) > static_cast<double>(ctx.limits.max_tensor_bytes))
    return absl::ResourceExhaustedError(
        absl::StrCat(ctx.node.op_type(), ": Q, K and V would exceed the tensor size limit"));
  RETURN_IF_ERROR(ctx.afford(elements));

  // The mask: broadcast to (B, N, S, total).
  const Tensor* mask = ctx.input(3);
  std::vector<int64_t> mask_strides;
  Scratch<double> mask_values(0);
  if (mask != nullptr) {
    if (mask->dtype() != TensorProto::BOOL && mask->dtype() != q->dtype())
      return invalid(ctx, "attn_mask must be bool or of Q's type");
    const std::vector<int64_t> full = {batch, heads, seq, total};
    if (mask->rank() > 4 || !broadcastable_to(mask->dims(), full))
      return invalid(ctx, "attn_mask does not broadcast to (B, q_heads, S, total_sequence)");
    mask_strides = broadcast_strides(mask->dims(), full);
    if (mask->dtype() == TensorProto::BOOL) {
      const Scratch<int64_t> allowed = to_ints(*mask);
      mask_values = Scratch<double>(allowed.size());
      for (size_t i = 0; i < allowed.size(); ++i) mask_values[i] = allowed[i] ? 0.0 : -INFINITY;
    } else {
      mask_values = to_doubles(*mask);
    }
  }
  const bool causal = ctx.node.attr_int("is_causal", 0) != 0;
  AttendOptions o;
  o.heads_first = rank == 4;
  o.zero_masked_rows = true;
  o.softcap = ctx.node.attr_float("softcap", 0.0f);
  if (!std::isfinite(o.softcap) || o.softcap < 0) return invalid(ctx, "softcap must be >= 0");
  if (ctx.node.attr("scale") != nullptr) {
    o.scale = ctx.node.attr_float("scale", 0.0f);
    if (!std::isfinite(o.scale)) return invalid(ctx, "scale is not finite");
  } else {
    o.scale = head > 0 ? 1.0 / std::sqrt(static_cast<double>(head)) : 1.0;
  }

  const Scratch<double> qv = heads_first(*q, heads, head);
  Scratch<double> kv = heads_first(*k, kv_heads, head);
  Scratch<double> vv = heads_first(*v, kv_heads, vhead);
  if (past_key != nullptr) {
    kv = concat_sequence(to_doubles(*past_key), kv, batch, kv_heads, past, len, head);
    vv = concat_sequence(to_doubles(*past_value), vv, batch, kv_heads, past, len, vhead);
  }
  if (ctx.node.output(1) != nullptr) {
    ASSIGN_OR_RETURN(Tensor * present,
                     ctx.make_output(1, q->dtype(), {batch, kv_heads, total, head}));
    store_all(present, kv);
  }
  if (ctx.node.output(2) != nullptr) {
    ASSIGN_OR_RETURN(Tensor * present,
                     ctx.make_output(2, q->dtype(), {batch, kv_heads, total, vhead}));
    store_all(present, vv);
  }
  const std::vector<int64_t> out_dims = rank == 4 ? std::vector<int64_t>{batch, heads, seq, vhead}
                                                  : std::vector<int64_t>{batch, seq, heads * vhead};
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, q->dtype(), out_dims));
  return attend(
      ctx, h, qv, kv, vv, o,
      [&](int64_t b, int64_t n, int64_t i, int64_t j) {
        double m = 0.0;
        if (mask != nullptr)
          m = mask_values[b * mask_strides[0] + n * mask_strides[1] + i * mask_strides[2] +
                          j * mask_strides[3]];
        if (causal && j > i + past) m = -INFINITY;
        return m;
      },
      out);
}

}  // namespace

void register_attention_kernels() { register_kernel("Attention", 23, 0, attention); }

}  // namespace graft::eval
