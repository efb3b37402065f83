// ONNX Runtime's com.microsoft ops that Graft emits for `--target onnxruntime`
// (core/passes/target.h), so that verification, error gates and bisection run them like any
// other op. Semantics follow ONNX Runtime's contrib op schemas (docs/ContribOperators.md) and its
// CPU kernels where the schema is silent; forms Graft never emits and ONNX Runtime's CPU kernels
// treat specially (packed or 4-D masks, shared past/present buffers, rotary inside Attention,
// batched transposes in FusedMatMul) are Unimplemented, never guessed.
// RotaryEmbedding is in kernels/rotary.cc, with the standard op whose arithmetic it shares.
//
// A model from a client may hold these ops already, so every input is checked like any other
// kernel's: ranks, dims, attribute values, the work they cost.
//
// Arithmetic is in double and each output is rounded once to its type: a fused kernel's
// rounding, within the tolerance verification grants fusions.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/eval/broadcast.h"
#include "core/eval/gemm.h"
#include "core/eval/kernels.h"
#include "core/eval/kernels/common.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

// A float input that is present (float32 only where ONNX Runtime's CPU kernel is float only).
absl::StatusOr<const Tensor*> float_input(const KernelContext& ctx, size_t i) {
  ASSIGN_OR_RETURN(const Tensor* t, required(ctx, i));
  RETURN_IF_ERROR(require_float(ctx, *t));
  return t;
}

// An optional 1-D input of `len` elements of x's type; nullptr when absent.
absl::StatusOr<const Tensor*> optional_vector(const KernelContext& ctx, size_t i, int64_t len,
                                              int32_t dtype, const char* what) {
  const Tensor* t = ctx.input(i);
  if (t == nullptr) return t;
  if (t->dtype() != dtype) return invalid(ctx, absl::StrCat(what, " is not of the input's type"));
  if (t->rank() != 1 || t->dims()[0] != len)
    return invalid(ctx, absl::StrCat(what, " must be 1-D with ", len, " elements"));
  return t;
}

// ------------------------------------------------------------------------------------- GELUs

// Gelu (erf), FastGelu (tanh approximation) and BiasGelu (erf): y = f(x + bias), bias 1-D over
// x's last axis (required for BiasGelu, optional for FastGelu, absent for Gelu).
absl::Status gelu_family(KernelContext& ctx, double (*f)(double), int bias_input,
                         bool bias_required) {
  ASSIGN_OR_RETURN(const Tensor* x, float_input(ctx, 0));
  if (x->dtype() != TensorProto::FLOAT && x->dtype() != TensorProto::FLOAT16)
    return unimplemented(ctx, "element type other than float and float16");
  const Tensor* bias = bias_input >= 0 ? ctx.input(bias_input) : nullptr;
  if (bias_required && bias == nullptr) return invalid(ctx, "missing input 1 (bias)");
  if (bias != nullptr) {
    if (x->rank() == 0) return invalid(ctx, "a bias needs an input of rank >= 1");
    ASSIGN_OR_RETURN(bias, optional_vector(ctx, bias_input, x->dims().back(), x->dtype(), "bias"));
  }
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x->dtype(), x->dims()));
  const Scratch<double> v = to_doubles(*x);
  const Scratch<double> b = bias ? to_doubles(*bias) : Scratch<double>(0);
  const int64_t last = bias ? x->dims().back() : 1;
  for (int64_t i = 0; i < x->size(); ++i) store(y, i, f(v[i] + (bias ? b[i % last] : 0.0)));
  return absl::OkStatus();
}

absl::Status ms_gelu(KernelContext& ctx) { return gelu_family(ctx, gelu_erf, -1, false); }
absl::Status bias_gelu(KernelContext& ctx) { return gelu_family(ctx, gelu_erf, 1, true); }
absl::Status fast_gelu(KernelContext& ctx) { return gelu_family(ctx, gelu_tanh, 1, false); }

// QuickGelu: y = x * sigmoid(alpha * x), alpha default 1.702.
absl::Status quick_gelu(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* x, float_input(ctx, 0));
  const double alpha = ctx.node.attr_float("alpha", 1.702f);
  if (!std::isfinite(alpha)) return invalid(ctx, "alpha is not finite");
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x->dtype(), x->dims()));
  const Scratch<double> v = to_doubles(*x);
  for (int64_t i = 0; i < x->size(); ++i) store(y, i, v[i] / (1.0 + std::exp(-alpha * v[i])));
  return absl::OkStatus();
}

// ----------------------------------------------------------------------- skip normalizations

// SkipLayerNormalization(input, skip, gamma, beta?, bias?) and
// SkipSimplifiedLayerNormalization(input, skip, gamma, bias?):
//   s = input + skip (+ bias); output = normalize(s over the last axis) * gamma (+ beta);
// outputs: output, mean (LayerNorm only; absent for the simplified form), inv_std_var,
// input_skip_bias_sum (s). input is 2-D or 3-D; skip has input's shape, or (1, S, H) / (S, H)
// for a 3-D input (broadcast over the batch); gamma, beta and bias are 1-D of the hidden size.
absl::Status skip_norm(KernelContext& ctx, bool simplified) {
  ASSIGN_OR_RETURN(const Tensor* x, float_input(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* skip, float_input(ctx, 1));
  ASSIGN_OR_RETURN(const Tensor* gamma, float_input(ctx, 2));
  const auto& d = x->dims();
  if (d.size() != 2 && d.size() != 3) return invalid(ctx, "input must be 2-D or 3-D");
  const int64_t hidden = d.back();
  if (hidden == 0) return invalid(ctx, "the hidden size is 0");
  if (skip->dtype() != x->dtype() || gamma->dtype() != x->dtype())
    return invalid(ctx, "skip and gamma must have the input's type");
  const bool skip_full = skip->dims() == d;
  const bool skip_batch_broadcast =
      d.size() == 3 && ((skip->rank() == 3 && skip->dims()[0] == 1 && skip->dims()[1] == d[1] &&
                         skip->dims()[2] == d[2]) ||
                        (skip->rank() == 2 && skip->dims()[0] == d[1] && skip->dims()[1] == d[2]));
  if (!skip_full && !skip_batch_broadcast)
    return invalid(ctx, "skip must have the input's shape, or (1, S, H) or (S, H) for a 3-D input");
  if (gamma->rank() != 1 || gamma->dims()[0] != hidden)
    return invalid(ctx, "gamma must be 1-D of the hidden size");
  const Tensor* beta = nullptr;
  if (!simplified) {
    ASSIGN_OR_RETURN(beta, optional_vector(ctx, 3, hidden, x->dtype(), "beta"));
  }
  ASSIGN_OR_RETURN(const Tensor* bias,
                   optional_vector(ctx, simplified ? 3 : 4, hidden, x->dtype(), "bias"));
  const float eps_attr = ctx.node.attr_float("epsilon", 1e-12f);
  if (!std::isfinite(eps_attr) || eps_attr < 0) return invalid(ctx, "epsilon must be >= 0");
  const double eps = eps_attr;

  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x->dtype(), d));
  std::vector<int64_t> stat_dims(d.begin(), d.end() - 1);
  stat_dims.push_back(1);
  Tensor* mean_out = nullptr;
  Tensor* inv_out = nullptr;
  Tensor* sum_out = nullptr;
  if (!simplified && ctx.node.output(1) != nullptr) {
    ASSIGN_OR_RETURN(mean_out, ctx.make_output(1, TensorProto::FLOAT, stat_dims));
  }
  if (ctx.node.output(2) != nullptr) {
    ASSIGN_OR_RETURN(inv_out, ctx.make_output(2, TensorProto::FLOAT, stat_dims));
  }
  if (ctx.node.output(3) != nullptr) {
    ASSIGN_OR_RETURN(sum_out, ctx.make_output(3, x->dtype(), d));
  }
  const Scratch<double> xv = to_doubles(*x), sv = to_doubles(*skip), g = to_doubles(*gamma);
  const Scratch<double> bt = beta ? to_doubles(*beta) : Scratch<double>(0);
  const Scratch<double> bs = bias ? to_doubles(*bias) : Scratch<double>(0);
  const int64_t rows = x->size() / hidden, skip_rows = skip->size() / hidden;
  Scratch<double> s(hidden);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t sr = r % skip_rows;
    double sum = 0;
    for (int64_t i = 0; i < hidden; ++i) {
      s[i] = xv[r * hidden + i] + sv[sr * hidden + i] + (bias ? bs[i] : 0.0);
      if (sum_out) store(sum_out, r * hidden + i, s[i]);
      sum += s[i];
    }
    const double mean = simplified ? 0.0 : sum / static_cast<double>(hidden);
    double sq = 0;
    for (int64_t i = 0; i < hidden; ++i) sq += (s[i] - mean) * (s[i] - mean);
    const double inv = 1.0 / std::sqrt(sq / static_cast<double>(hidden) + eps);
    for (int64_t i = 0; i < hidden; ++i)
      store(y, r * hidden + i, (s[i] - mean) * inv * g[i] + (beta ? bt[i] : 0.0));
    if (mean_out) store(mean_out, r, mean);
    if (inv_out) store(inv_out, r, inv);
  }
  return absl::OkStatus();
}

absl::Status skip_layer_norm(KernelContext& ctx) { return skip_norm(ctx, false); }
absl::Status skip_simplified_layer_norm(KernelContext& ctx) { return skip_norm(ctx, true); }

// ------------------------------------------------------------------------------- FusedMatMul

// FusedMatMul(A, B): alpha * op(A) @ op(B), op = transpose of the last two axes when transA /
// transB, with MatMul's broadcasting of the batch axes. transBatchA/B (other axis orders) are
// Unimplemented.
absl::Status fused_matmul(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* a, float_input(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* b, float_input(ctx, 1));
  if (a->dtype() != b->dtype()) return invalid(ctx, "A and B have different types");
  if (ctx.node.attr_int("transBatchA", 0) != 0 || ctx.node.attr_int("transBatchB", 0) != 0)
    return unimplemented(ctx, "transBatchA / transBatchB");
  const bool ta = ctx.node.attr_int("transA", 0) != 0, tb = ctx.node.attr_int("transB", 0) != 0;
  const double alpha = ctx.node.attr_float("alpha", 1.0f);
  if (!std::isfinite(alpha)) return invalid(ctx, "alpha is not finite");
  if (a->rank() < 2 || b->rank() < 2) return unimplemented(ctx, "inputs of rank below 2");
  const auto& ad = a->dims();
  const auto& bd = b->dims();
  const int64_t m = ta ? ad[ad.size() - 1] : ad[ad.size() - 2];
  const int64_t k = ta ? ad[ad.size() - 2] : ad[ad.size() - 1];
  const int64_t kb = tb ? bd[bd.size() - 1] : bd[bd.size() - 2];
  const int64_t n = tb ? bd[bd.size() - 2] : bd[bd.size() - 1];
  if (k != kb) return invalid(ctx, "the inner dims of A and B differ");
  std::vector<int64_t> abatch(ad.begin(), ad.end() - 2), bbatch(bd.begin(), bd.end() - 2);
  ASSIGN_OR_RETURN(std::vector<int64_t> batch, broadcast_shape({abatch, bbatch}));
  std::vector<int64_t> out_dims = batch;
  out_dims.push_back(m);
  out_dims.push_back(n);
  int64_t batches = 1;
  for (int64_t v : batch) batches *= v;
  RETURN_IF_ERROR(ctx.afford(static_cast<double>(batches) * m * n * (k + 1)));
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, a->dtype(), out_dims));
  BroadcastIterator it(batch, {abatch, bbatch});
  const int64_t amat = ad[ad.size() - 1] * ad[ad.size() - 2];
  const int64_t bmat = bd[bd.size() - 1] * bd[bd.size() - 2];
  // alpha = 0 stays with the loops: dgemm would skip the product and the NaN of a NaN operand.
  if (alpha != 0 && use_blas(m, n, k, ta ? m : k, tb ? k : n)) {
    for (int64_t p = 0; p < batches; ++p, it.next()) {
      const GemmOperand pa = tensor_operand(*a, it.offset(0) * amat, ta, ta ? m : k);
      const GemmOperand pb = tensor_operand(*b, it.offset(1) * bmat, tb, tb ? k : n);
      gemm_by_blocks(
          m, n, k, alpha, pa, pb,
          [](int64_t, int64_t r, int64_t, int64_t cn, double* c) { std::fill(c, c + r * cn, 0.0); },
          [&](int64_t row0, int64_t r, int64_t col0, int64_t cn, const double* c) {
            for (int64_t i = 0; i < r; ++i)
              for (int64_t j = 0; j < cn; ++j)
                store(y, (p * m + row0 + i) * n + col0 + j, c[i * cn + j]);
          });
    }
    return absl::OkStatus();
  }
  const Scratch<double> av = to_doubles(*a), bv = to_doubles(*b);
  for (int64_t p = 0; p < batches; ++p, it.next()) {
    const double* pa = av.data() + it.offset(0) * amat;
    const double* pb = bv.data() + it.offset(1) * bmat;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t q = 0; q < k; ++q)
          acc += (ta ? pa[q * m + i] : pa[i * k + q]) * (tb ? pb[j * k + q] : pb[q * n + j]);
        store(y, (p * m + i) * n + j, alpha * acc);
      }
    spend_work(static_cast<uint64_t>(m * n * k));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------- attention

// The additive mask of a raw 2-D (batch, total) or 3-D (batch, seq, total) key mask, or of 1-D
// right-padding lengths (batch): 0 where attention is allowed, `filter` where not.
struct KeyMask {
  const Tensor* t = nullptr;
  Scratch<int64_t> v;
  int form = 0;  // 0 none, 1 lengths, 2 raw (B, T), 3 raw (B, S, T)
  double filter = -10000.0;
  int64_t seq = 0, total = 0;
  double at(int64_t b, int64_t i, int64_t j) const {
    switch (form) {
      case 1:
        return j < v[b] ? 0.0 : filter;
      case 2:
        return v[b * total + j] > 0 ? 0.0 : filter;
      case 3:
        return v[(b * seq + i) * total + j] > 0 ? 0.0 : filter;
      default:
        return 0.0;
    }
  }
};

absl::StatusOr<KeyMask> key_mask(const KernelContext& ctx, size_t input, const Heads& h,
                                 double filter) {
  KeyMask m;
  m.filter = filter;
  m.seq = h.seq;
  m.total = h.total;
  m.t = ctx.input(input);
  if (m.t == nullptr) return m;
  if (m.t->dtype() != TensorProto::INT32) return invalid(ctx, "the mask must be int32");
  const auto& d = m.t->dims();
  if (d.size() == 1 && d[0] == h.batch) {
    m.form = 1;
  } else if (d.size() == 2 && d[0] == h.batch && d[1] == h.total) {
    m.form = 2;
  } else if (d.size() == 3 && d[0] == h.batch && d[1] == h.seq && d[2] == h.total) {
    m.form = 3;
  } else {
    return unimplemented(ctx,
                         "mask forms other than (batch), (batch, total) and (batch, seq, "
                         "total)");
  }
  m.v = to_ints(*m.t);
  return m;
}

// attention_bias (B or 1, N or 1, S, T), float of x's type; nullptr when absent.
absl::StatusOr<const Tensor*> attention_bias(const KernelContext& ctx, size_t input, const Heads& h,
                                             int32_t dtype) {
  const Tensor* t = ctx.input(input);
  if (t == nullptr) return t;
  if (t->dtype() != dtype) return invalid(ctx, "attention_bias is not of the input's type");
  const auto& d = t->dims();
  if (d.size() != 4 || (d[0] != 1 && d[0] != h.batch) || (d[1] != 1 && d[1] != h.heads) ||
      d[2] != h.seq || d[3] != h.total)
    return invalid(ctx, "attention_bias must be (batch or 1, num_heads or 1, seq, total)");
  return t;
}

double bias_value(const Tensor* t, const Scratch<double>& v, const Heads& h, int64_t b, int64_t n,
                  int64_t i, int64_t j) {
  if (t == nullptr) return 0.0;
  const auto& d = t->dims();
  const int64_t bb = d[0] == 1 ? 0 : b, nn = d[1] == 1 ? 0 : n;
  return v[((bb * d[1] + nn) * h.seq + i) * h.total + j];
}

// com.microsoft Attention(input, weights, bias?, mask_index?, past?, attention_bias?,
// past_sequence_length?) -> output, present?. input (B, S, D_in); weights (D_in, Dq + Dk + Dv)
// with Dq = Dk (qkv_hidden_sizes, else three equal parts); past (2, B, N, P, H) and present
// (2, B, N, P + S, H) when given; unidirectional masks j > P + i.
absl::Status attention(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* x, float_input(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* w, float_input(ctx, 1));
  if (ctx.node.attr_int("do_rotary", 0) != 0) return unimplemented(ctx, "do_rotary");
  if (ctx.node.attr_int("past_present_share_buffer", 0) != 0)
    return unimplemented(ctx, "past_present_share_buffer");
  if (ctx.input(6) != nullptr) return unimplemented(ctx, "past_sequence_length");
  ASSIGN_OR_RETURN(const int64_t heads, positive_attr(ctx, "num_heads"));
  if (x->rank() != 3) return invalid(ctx, "input must be 3-D (batch, sequence, hidden)");
  if (w->rank() != 2 || w->dims()[0] != x->dims()[2] || w->dtype() != x->dtype())
    return invalid(ctx, "weights must be (input_hidden_size, Q+K+V hidden) of input's type");
  const int64_t qkv = w->dims()[1];
  int64_t dq = 0, dv = 0;
  if (auto sizes = ctx.node.attr_ints("qkv_hidden_sizes")) {
    if (sizes->size() != 3 || (*sizes)[0] != (*sizes)[1] || (*sizes)[0] <= 0 || (*sizes)[2] <= 0 ||
        (*sizes)[0] > qkv || (*sizes)[2] > qkv || 2 * (*sizes)[0] + (*sizes)[2] != qkv)
      return invalid(ctx,
                     "qkv_hidden_sizes must be three sizes q = k and v summing to the "
                     "weights' columns");
    dq = (*sizes)[0];
    dv = (*sizes)[2];
  } else {
    if (qkv % 3 != 0) return invalid(ctx, "the weights' columns are not three equal parts");
    dq = dv = qkv / 3;
  }
  if (dq % heads != 0 || dv % heads != 0)
    return invalid(ctx, "the hidden sizes are not divisible by num_heads");
  ASSIGN_OR_RETURN(const Tensor* bias, optional_vector(ctx, 2, qkv, x->dtype(), "bias"));
  const int64_t batch = x->dims()[0], seq = x->dims()[1], din = x->dims()[2];
  const Tensor* past = ctx.input(4);
  int64_t past_len = 0;
  const int64_t head = dq / heads, vhead = dv / heads;
  if (past != nullptr) {
    const auto& p = past->dims();
    if (dq != dv) return invalid(ctx, "past needs equal Q, K and V hidden sizes");
    if (past->dtype() != x->dtype() || p.size() != 5 || p[0] != 2 || p[1] != batch ||
        p[2] != heads || p[4] != head)
      return invalid(ctx, "past must be (2, batch, num_heads, past_sequence, head_size)");
    past_len = p[3];
  }
  const Heads h{batch, heads, heads, seq, past_len + seq, head, vhead};
  ASSIGN_OR_RETURN(KeyMask mask,
                   key_mask(ctx, 3, h, ctx.node.attr_float("mask_filter_value", -10000.0f)));
  ASSIGN_OR_RETURN(const Tensor* ab, attention_bias(ctx, 5, h, x->dtype()));
  const bool causal = ctx.node.attr_int("unidirectional", 0) != 0;
  double scale = ctx.node.attr_float("scale", 0.0f);
  if (!std::isfinite(scale)) return invalid(ctx, "scale is not finite");
  if (scale == 0) scale = 1.0 / std::sqrt(static_cast<double>(head));

  // Projection: (B*S, D_in) x (D_in, qkv) + bias, then split into heads. Sizes are checked in
  // double first: zero-sized operands may carry dims whose products overflow int64.
  const double elements = static_cast<double>(batch) *
                          (seq * static_cast<double>(dq) + h.total * static_cast<double>(dq + dv));
  if (elements > static_cast<double>(ctx.limits.max_tensor_bytes))
    return absl::ResourceExhaustedError(
        absl::StrCat(ctx.node.op_type(), ": Q, K and V would exceed the tensor size limit"));
  RETURN_IF_ERROR(ctx.afford(elements + static_cast<double>(batch) * seq * din * qkv));
  const Scratch<double> xv = to_doubles(*x), wv = to_doubles(*w);
  const Scratch<double> bv = bias ? to_doubles(*bias) : Scratch<double>(0);
  Scratch<double> q(batch * heads * seq * head), k(batch * heads * h.total * head),
      v(batch * heads * h.total * vhead);
  if (past != nullptr) {
    const Scratch<double> pv = to_doubles(*past);
    const int64_t half = batch * heads * past_len * head;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t n = 0; n < heads; ++n)
        for (int64_t t = 0; t < past_len; ++t)
          for (int64_t e = 0; e < head; ++e) {
            const int64_t src = ((b * heads + n) * past_len + t) * head + e;
            const int64_t dst = ((b * heads + n) * h.total + t) * head + e;
            k[dst] = pv[src];
            v[dst] = pv[half + src];
          }
  }
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      const double* row = xv.data() + (b * seq + s) * din;
      for (int64_t c = 0; c < qkv; ++c) {
        double acc = bias ? bv[c] : 0.0;
        for (int64_t i = 0; i < din; ++i) acc += row[i] * wv[i * qkv + c];
        if (c < dq) {
          q[((b * heads + c / head) * seq + s) * head + c % head] = acc;
        } else if (c < 2 * dq) {
          const int64_t cc = c - dq;
          k[((b * heads + cc / head) * h.total + past_len + s) * head + cc % head] = acc;
        } else {
          const int64_t cc = c - 2 * dq;
          v[((b * heads + cc / vhead) * h.total + past_len + s) * vhead + cc % vhead] = acc;
        }
      }
      spend_work(static_cast<uint64_t>(din * qkv));
    }
  if (ctx.node.output(1) != nullptr) {
    if (past == nullptr && ctx.input(4) == nullptr && dq != dv)
      return invalid(ctx, "present needs equal Q, K and V hidden sizes");
    ASSIGN_OR_RETURN(Tensor * present,
                     ctx.make_output(1, x->dtype(), {2, batch, heads, h.total, head}));
    const int64_t half = batch * heads * h.total * head;
    for (int64_t i = 0; i < half; ++i) {
      store(present, i, k[i]);
      store(present, half + i, v[i]);
    }
  }
  const Scratch<double> abv = ab ? to_doubles(*ab) : Scratch<double>(0);
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, x->dtype(), {batch, seq, dv}));
  const double filter = mask.filter;
  return attend(
      ctx, h, q, k, v, AttendOptions{.scale = scale},
      [&](int64_t b, int64_t n, int64_t i, int64_t j) {
        double m = mask.at(b, i, j);
        if (causal && j > past_len + i) m = filter;
        return m + bias_value(ab, abv, h, b, n, i, j);
      },
      out);
}

// com.microsoft MultiHeadAttention(query, key, value, bias?, key_padding_mask?, attention_bias?,
// past_key?, past_value?) -> output, present_key?, present_value?, in the form Graft emits for a
// decoder's self-attention with a KV cache: query (B, S, D), key (B, L, D) and value (B, L, Dv),
// 3-D, split into num_heads heads; past_key (B, N, P, H) and past_value (B, N, P, Hv), both or
// neither; present_key/present_value the past followed by the new keys/values (B, N, P + L, .);
// scores scale * Q K^T (scale default 1/sqrt(H)) plus attention_bias (B or 1, N or 1, S, P + L).
// Packed or 5-D query/key/value, 4-D keys (a cross-attention cache), bias, key_padding_mask,
// the inputs after past_value and unidirectional (whose masked value the schema leaves to the
// kernel) are Unimplemented.
absl::Status multi_head_attention(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* query, float_input(ctx, 0));
  if (ctx.input(1) == nullptr || ctx.input(2) == nullptr)
    return unimplemented(ctx, "packed query, key and value");
  ASSIGN_OR_RETURN(const Tensor* key, float_input(ctx, 1));
  ASSIGN_OR_RETURN(const Tensor* value, float_input(ctx, 2));
  if (ctx.input(3) != nullptr) return unimplemented(ctx, "bias");
  if (ctx.input(4) != nullptr) return unimplemented(ctx, "key_padding_mask");
  for (size_t i = 8; i < ctx.node.inputs().size(); ++i)
    if (ctx.input(i) != nullptr) return unimplemented(ctx, "inputs after past_value");
  ASSIGN_OR_RETURN(const int64_t heads, positive_attr(ctx, "num_heads"));
  if (query->rank() != 3 || key->rank() != 3 || value->rank() != 3)
    return unimplemented(ctx, "query, key or value other than 3-D (batch, sequence, hidden)");
  const int64_t batch = query->dims()[0], seq = query->dims()[1], dq = query->dims()[2];
  const int64_t len = key->dims()[1], dv = value->dims()[2];
  if (key->dims()[0] != batch || value->dims()[0] != batch || value->dims()[1] != len ||
      key->dims()[2] != dq || key->dtype() != query->dtype() || value->dtype() != query->dtype())
    return invalid(
        ctx,
        "key must be (batch, kv_sequence, hidden) and value (batch, kv_sequence, v_hidden) "
        "of query's batch, type and (key) hidden size");
  if (dq % heads != 0 || dv % heads != 0)
    return invalid(ctx, "the hidden sizes are not divisible by num_heads");
  const int64_t head = dq / heads, vhead = dv / heads;
  const Tensor* past_key = ctx.input(6);
  const Tensor* past_value = ctx.input(7);
  if ((past_key == nullptr) != (past_value == nullptr))
    return invalid(ctx, "past_key and past_value come together");
  int64_t past = 0;
  if (past_key != nullptr) {
    const auto& pk = past_key->dims();
    const auto& pv = past_value->dims();
    if (past_key->dtype() != query->dtype() || past_value->dtype() != query->dtype() ||
        pk.size() != 4 || pv.size() != 4 || pk[0] != batch || pv[0] != batch || pk[1] != heads ||
        pv[1] != heads || pk[3] != head || pv[3] != vhead || pk[2] != pv[2])
      return invalid(ctx,
                     "past_key and past_value must be (batch, num_heads, past_sequence, head "
                     "size) of query's type");
    past = pk[2];
  }
  const Heads h{batch, heads, heads, seq, past + len, head, vhead};
  ASSIGN_OR_RETURN(const Tensor* ab, attention_bias(ctx, 5, h, query->dtype()));
  double scale = ctx.node.attr_float("scale", 0.0f);
  if (!std::isfinite(scale)) return invalid(ctx, "scale is not finite");
  if (scale == 0) scale = 1.0 / std::sqrt(static_cast<double>(head));
  if (ctx.node.attr_int("unidirectional", 0) != 0) return unimplemented(ctx, "unidirectional");
  const double elements =
      static_cast<double>(batch) * heads *
      (seq * static_cast<double>(head) + h.total * static_cast<double>(head + vhead));
  if (elements > static_cast<double>(ctx.limits.max_tensor_bytes))
    return absl::ResourceExhaustedError(
        absl::StrCat(ctx.node.op_type(), ": Q, K and V would exceed the tensor size limit"));
  RETURN_IF_ERROR(ctx.afford(elements));
  // Heads first: q (B, N, S, H); k and v (B, N, P + L, .), the past first.
  Scratch<double> q(batch * heads * seq * head), k(batch * heads * h.total * head),
      v(batch * heads * h.total * vhead);
  auto split = [&](const Tensor& from, int64_t rows, int64_t size, int64_t at, int64_t stride,
                   Scratch<double>& to) {
    const Scratch<double> x = to_doubles(from);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t n = 0; n < heads; ++n)
          for (int64_t e = 0; e < size; ++e)
            to[((b * heads + n) * stride + at + r) * size + e] =
                x[((b * rows + r) * heads + n) * size + e];
  };
  auto copy_past = [&](const Tensor& from, int64_t size, Scratch<double>& to) {
    const Scratch<double> x = to_doubles(from);
    for (int64_t bn = 0; bn < batch * heads; ++bn)
      for (int64_t t = 0; t < past * size; ++t)
        to[bn * h.total * size + t] = x[bn * past * size + t];
  };
  split(*query, seq, head, 0, seq, q);
  split(*key, len, head, past, h.total, k);
  split(*value, len, vhead, past, h.total, v);
  if (past_key != nullptr) {
    copy_past(*past_key, head, k);
    copy_past(*past_value, vhead, v);
  }
  for (size_t o : {size_t{1}, size_t{2}}) {
    if (ctx.node.outputs().size() <= o || ctx.node.output(o) == nullptr) continue;
    const int64_t size = o == 1 ? head : vhead;
    ASSIGN_OR_RETURN(Tensor * present,
                     ctx.make_output(o, query->dtype(), {batch, heads, h.total, size}));
    store_all(present, o == 1 ? k : v);
  }
  const Scratch<double> abv = ab ? to_doubles(*ab) : Scratch<double>(0);
  ASSIGN_OR_RETURN(Tensor * out, ctx.make_output(0, query->dtype(), {batch, seq, dv}));
  return attend(
      ctx, h, q, k, v, AttendOptions{.scale = scale},
      [&](int64_t b, int64_t n, int64_t i, int64_t j) {
        return bias_value(ab, abv, h, b, n, i, j);
      },
      out);
}

// com.microsoft GatherBlockQuantized (4-bit data, as ONNX Runtime's CPU kernel takes it): rows of
// a block-quantized table gathered along gather_axis, then dequantized, (q - zero_point) * scale,
// with the scale and zero point of each element's block along quantize_axis (blocks of
// block_size, a power of two >= 16; scales and zero points the data's dims but
// ceil(dim / block_size) on that axis; no zero point: 0). int4 or uint4 data (bits 4); the
// uint8-packed form (MatMulNBits' layout, zero point 8) is not run. An index outside the table
// is an error, as for Gather.
absl::Status gather_block_quantized(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* data, required(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* indices, required(ctx, 1));
  ASSIGN_OR_RETURN(const Tensor* scales, required(ctx, 2));
  const Tensor* zero_points = ctx.input(3);
  if (data->dtype() != ir::kInt4 && data->dtype() != ir::kUint4)
    return unimplemented(ctx, "data of a type other than int4 and uint4");
  if (ctx.node.attr_int("bits", 4) != 4) return invalid(ctx, "bits must be 4 for 4-bit data");
  RETURN_IF_ERROR(require_float(ctx, *scales));
  if (!is_integer_type(indices->dtype())) return invalid(ctx, "indices must be integers");
  if (zero_points && zero_points->dtype() != data->dtype())
    return invalid(ctx, "zero_points must have the data's type");
  const int64_t r = data->rank();
  int64_t gather_axis = ctx.node.attr_int("gather_axis", 0);
  int64_t quantize_axis = ctx.node.attr_int("quantize_axis", 1);
  if (r == 0 || !normalize_axis(gather_axis, r) || !normalize_axis(quantize_axis, r))
    return invalid(ctx, "gather_axis or quantize_axis outside the data's rank");
  const int64_t block = ctx.node.attr_int("block_size", 128);
  if (block < 16 || (block & (block - 1)) != 0)
    return invalid(ctx, "block_size must be a power of 2 of at least 16");
  const auto& dd = data->dims();
  if (scales->rank() != r) return invalid(ctx, "data and scales must have the same rank");
  for (int64_t a = 0; a < r; ++a) {
    const int64_t want = a == quantize_axis ? (dd[a] + block - 1) / block : dd[a];
    if (scales->dims()[a] != want) return invalid(ctx, "scales' dims do not match the data's");
  }
  if (zero_points && zero_points->dims() != scales->dims())
    return invalid(ctx, "zero_points must have the scales' dims");
  const int64_t rows = dd[gather_axis];
  std::vector<int64_t> idx(indices->size());
  for (int64_t i = 0; i < indices->size(); ++i) {
    int64_t v = indices->get_int64(i);
    if (v < -rows || v >= rows)
      return invalid(ctx, "index ", v, " out of range [", -rows, ",", rows, ")");
    idx[i] = v < 0 ? v + rows : v;
  }
  std::vector<int64_t> out_dims(dd.begin(), dd.begin() + gather_axis);
  out_dims.insert(out_dims.end(), indices->dims().begin(), indices->dims().end());
  out_dims.insert(out_dims.end(), dd.begin() + gather_axis + 1, dd.end());
  const int64_t outer = product(dd, 0, gather_axis);
  const int64_t inner = product(dd, gather_axis + 1, r);
  RETURN_IF_ERROR(ctx.afford(static_cast<double>(outer) * static_cast<double>(idx.size()) *
                             static_cast<double>(inner)));
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, scales->dtype(), out_dims));
  // Data strides, and the scales' (its quantize_axis dim is the block count).
  std::vector<int64_t> dstride(r, 1), sstride(r, 1);
  for (int64_t a = r - 1; a-- > 0;) {
    dstride[a] = dstride[a + 1] * dd[a + 1];
    sstride[a] = sstride[a + 1] * scales->dims()[a + 1];
  }
  int64_t out = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t row : idx)
      for (int64_t e = 0; e < inner; ++e, ++out) {
        const int64_t at = (o * rows + row) * inner + e;
        int64_t s = 0;
        for (int64_t a = 0, rest = at; a < r; ++a) {
          const int64_t pos = rest / dstride[a];
          rest -= pos * dstride[a];
          s += (a == quantize_axis ? pos / block : pos) * sstride[a];
        }
        const double zp = zero_points ? static_cast<double>(zero_points->get_int64(s)) : 0.0;
        store(y, out, (static_cast<double>(data->get_int64(at)) - zp) * scales->get_double(s));
      }
  return absl::OkStatus();
}

// com.microsoft MatMulNBits(A, B, scales[, zero_points][, g_idx][, bias]) with 4-bit weights:
// Y [..., N] = A [..., K] @ W, W [K, N] read from B [N, ceil(K / block_size), block_size / 2]
// (uint8, two values a byte, the low nibble first, blocks along K per column n), W[k, n] =
// (q - zero_point) * scale with the scale [n * blocks + k / block_size] (scales: N * blocks
// values, 1-D or [N, blocks]) and the zero point 8 or, given, the 4-bit one packed two a byte
// per column ([N * ceil(blocks / 2)] uint8). accuracy_level (0-4) is how ONNX Runtime may
// compute the product (4: A quantized to int8 per block); the evaluator computes in double.
// Other bit widths, float zero points and g_idx are Unimplemented.
absl::Status matmul_nbits(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* a, required(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* b, required(ctx, 1));
  ASSIGN_OR_RETURN(const Tensor* scales, required(ctx, 2));
  const Tensor* zero_points = ctx.input(3);
  if (a->dtype() != TensorProto::FLOAT) return unimplemented(ctx, "A of a type other than float");
  if (scales->dtype() != a->dtype()) return invalid(ctx, "scales must have A's type");
  if (b->dtype() != TensorProto::UINT8) return invalid(ctx, "B must be uint8");
  if (ctx.node.attr_int("bits", 4) != 4) return unimplemented(ctx, "bits other than 4");
  if (ctx.input(4) != nullptr) return unimplemented(ctx, "g_idx");
  if (zero_points && zero_points->dtype() != TensorProto::UINT8)
    return unimplemented(ctx, "zero_points of a type other than uint8");
  const int64_t level = ctx.node.attr_int("accuracy_level", 0);
  if (level < 0 || level > 4) return invalid(ctx, "accuracy_level must be in [0, 4]");
  const int64_t k = ctx.node.attr_int("K", -1), n = ctx.node.attr_int("N", -1);
  const int64_t block = ctx.node.attr_int("block_size", -1);
  if (k < 1 || n < 1) return invalid(ctx, "K and N must be positive");
  if (block < 16 || (block & (block - 1)) != 0 || block > (int64_t{1} << 20))
    return invalid(ctx, "block_size must be a power of 2 of at least 16");
  const int64_t blocks = k / block + (k % block != 0), blob = block / 2;
  if (b->dims() != std::vector<int64_t>{n, blocks, blob})
    return invalid(ctx, "B must be [N, ceil(K / block_size), block_size / 2]");
  if (scales->size() != n * blocks || scales->rank() < 1 || scales->rank() > 2 ||
      scales->dims()[0] != (scales->rank() == 1 ? n * blocks : n))
    return invalid(ctx,
                   "scales must hold N * ceil(K / block_size) values ([N * blocks] or [N, "
                   "blocks])");
  const int64_t zp_cols = (blocks + 1) / 2;
  if (zero_points && (zero_points->rank() != 1 || zero_points->size() != n * zp_cols))
    return invalid(ctx, "zero_points must be [N * ceil(blocks / 2)]");
  ASSIGN_OR_RETURN(const Tensor* bias, optional_vector(ctx, 5, n, a->dtype(), "bias"));
  if (a->rank() < 1 || a->dims().back() != k) return invalid(ctx, "A's last dim must be K");
  const int64_t m = a->size() / k;
  std::vector<int64_t> out_dims = a->dims();
  out_dims.back() = n;
  RETURN_IF_ERROR(ctx.afford(static_cast<double>(m) * n * (k + 1) + static_cast<double>(n) * k));
  // W^T [N, K] in float (what DequantizeLinear would have given), then the product.
  ASSIGN_OR_RETURN(Tensor wt,
                   Tensor::zeros(TensorProto::FLOAT, {n, k}, ctx.limits.max_tensor_bytes));
  const auto* q = b->data<uint8_t>();
  float* w = wt.data<float>();
  for (int64_t c = 0; c < n; ++c)
    for (int64_t kb = 0; kb < blocks; ++kb) {
      const double s = scales->get_double(c * blocks + kb);
      int zp = 8;
      if (zero_points) {
        const uint8_t byte = zero_points->data<uint8_t>()[c * zp_cols + kb / 2];
        zp = kb % 2 ? byte >> 4 : byte & 0x0f;
      }
      const uint8_t* row = q + (c * blocks + kb) * blob;
      for (int64_t e = 0, r = kb * block; e < block && r < k; ++e, ++r) {
        const int v = e % 2 ? row[e / 2] >> 4 : row[e / 2] & 0x0f;
        w[c * k + r] = static_cast<float>((v - zp) * s);
      }
    }
  spend_work(static_cast<uint64_t>(n * k));
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, a->dtype(), out_dims));
  auto bias_at = [&](int64_t j) { return bias ? bias->get_double(j) : 0.0; };
  if (use_blas(m, n, k, k, k)) {
    gemm_by_blocks(
        m, n, k, 1.0, tensor_operand(*a, 0, false, k), tensor_operand(wt, 0, true, k),
        [](int64_t, int64_t r, int64_t, int64_t cn, double* c) { std::fill(c, c + r * cn, 0.0); },
        [&](int64_t row0, int64_t r, int64_t col0, int64_t cn, const double* c) {
          for (int64_t i = 0; i < r; ++i)
            for (int64_t j = 0; j < cn; ++j)
              store(y, (row0 + i) * n + col0 + j, c[i * cn + j] + bias_at(col0 + j));
        });
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t r = 0; r < k; ++r) acc += a->get_double(i * k + r) * w[j * k + r];
      store(y, i * n + j, acc + bias_at(j));
    }
  spend_work(static_cast<uint64_t>(m * n * k));
  return absl::OkStatus();
}

}  // namespace

void register_contrib_kernels() {
  const std::string ms = "com.microsoft";
  register_kernel(ms, "Gelu", 1, 0, ms_gelu);
  register_kernel(ms, "BiasGelu", 1, 0, bias_gelu);
  register_kernel(ms, "FastGelu", 1, 0, fast_gelu);
  register_kernel(ms, "QuickGelu", 1, 0, quick_gelu);
  register_kernel(ms, "SkipLayerNormalization", 1, 0, skip_layer_norm);
  register_kernel(ms, "SkipSimplifiedLayerNormalization", 1, 0, skip_simplified_layer_norm);
  register_kernel(ms, "FusedMatMul", 1, 0, fused_matmul);
  register_kernel(ms, "Attention", 1, 0, attention);
  register_kernel(ms, "MultiHeadAttention", 1, 0, multi_head_attention);
  register_kernel(ms, "GatherBlockQuantized", 1, 0, gather_block_quantized);
  register_kernel(ms, "MatMulNBits", 1, 0, matmul_nbits);
}

}  // namespace graft::eval
