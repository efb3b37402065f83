// Scaled dot-product attention becomes ONNX's Attention (opset 23), one op that runtimes run as
// one kernel (ONNX Runtime from 1.23 on CPU) instead of two MatMuls, a scale, a mask Add and a
// Softmax per layer:
//
//  - attention (opset >= 23): the pattern of patterns/attention.h over 4-D heads,
//      out = MatMul(Softmax(MatMul(Q, K^T) * scale [+ mask]), V)
//    with Q (B, N, S, H), K^T (B, Nkv, H, T), V (B, Nkv, T, Hv), Nkv = N or 1 (what MatMul
//    broadcasts), and the mask a float tensor of Q's type that broadcasts into the scores
//    (B, N, S, T) without changing their shape (fits_scores); a boolean mask (Where) and an
//    additive one become one additive mask (additive_mask, exact: see patterns/attention.h)
//      -> Attention(Q, K, V, mask, scale = scale), with K (B, Nkv, T, H):
//         K^T = Transpose(K, [0, 1, 3, 2])  -> that K (the Transpose is absorbed);
//         K^T = Transpose(X, [0, 2, 3, 1]) of X (B, T, Nkv, H), K split into heads
//                                          -> Transpose(X, [0, 2, 1, 3]) in its place;
//         otherwise                        -> Transpose(K^T, [0, 1, 3, 2]).
//    The mask is passed as the model adds it (a float attn_mask is added to the scores by the
//    op), the scale as the op's `scale` attribute (always written: the op's default,
//    1/sqrt(H), is not assumed). is_causal is never set: a causal mask written into the model
//    is just a mask.
//
// Only in the graph's own opset (a model's opset is never raised here; `--target-opset 23`
// raises it first), for float and float16 (the types ONNX Runtime's CPU kernel takes).
//
// Exactness. The op scales Q and K by sqrt(scale) each before their product and keeps the
// softmax in float, so results differ from the decomposition in the last bits, as between
// ONNX Runtime's fused and unfused forms. A query row whose every score is -inf gives zeros
// where the decomposition gives NaN: verification refuses such a rewrite on such data.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/patterns/attention.h"
#include "core/passes/queries.h"
#include "core/passes/rules.h"

namespace graft {

namespace {

using onnx::TensorProto;

bool is_one(const ir::Dim& d) { return d.known() && d.value == 1; }

// Dim i of a and dim j of b may be equal at run time, and MatMul would not broadcast one over the
// other where Attention needs them equal: the same by facts, equal sizes, or not a size of 1
// against a dim the facts cannot tell (exports lose dim names). Two dims that differ at run time
// make both MatMul and Attention fail, except where one is 1 (MatMul broadcasts): that case is
// refused where the facts show it.
bool same_dim(const ir::TensorFact& a, size_t i, const ir::TensorFact& b, size_t j) {
  const ir::Dim &x = a.dims[i], &y = b.dims[j];
  if (x.same_as(y)) return true;
  if (x.known() && y.known()) return x.value == y.value;
  return !is_one(x) && !is_one(y);
}

bool attention(ir::Node& out, Rewriter& rw) {
  std::optional<ScaledDotProduct> sdp = match_scaled_dot_product(out);
  if (!sdp) return false;
  const ir::TensorFact& q = sdp->q()->fact();
  const ir::TensorFact& kt = sdp->kt()->fact();
  const ir::TensorFact& v = sdp->v()->fact();
  const int32_t dtype = q.elem_type;
  if (!q.has_rank || !kt.has_rank || !v.has_rank || q.dims.size() != 4 || kt.dims.size() != 4 ||
      v.dims.size() != 4)
    return no_match(out, "Q, K^T and V are not known to be 4-D (batch, heads, length, size)");
  if ((dtype != TensorProto::FLOAT && dtype != TensorProto::FLOAT16) || kt.elem_type != dtype ||
      v.elem_type != dtype)
    return no_match(out, "Q, K and V are not all float or all float16");
  // Batch equal; key/value heads equal to the query's or 1; the head size and the key length
  // shared as the products need.
  const bool kv_heads_fit = same_dim(kt, 1, q, 1) || is_one(kt.dims[1]);
  if (!same_dim(kt, 0, q, 0) || !same_dim(v, 0, q, 0) || !kv_heads_fit || !same_dim(v, 1, kt, 1) ||
      !same_dim(kt, 2, q, 3) || !same_dim(v, 2, kt, 3))
    return no_match(out,
                    "Q (B, N, S, H), K^T (B, Nkv, H, T) and V (B, Nkv, T, Hv) do not fit "
                    "together by facts");
  if (sdp->mask) {
    if (sdp->mask->elem_type() != dtype || !fits_scores(sdp->mask, sdp->scores()))
      return no_match(out, "the mask is not of Q's type, or it would broadcast the scores");
  }
  // ONNX Runtime's kernel takes a mask of rank 2 to 4 whose last two dims are exactly
  // (S, T), whose head dim is 1 or the key/value heads and whose batch is 1 or B (a stricter
  // reading of the op's broadcasting): the masks' joint shape is checked by facts, and a query
  // dim of 1 is expanded to S.
  int64_t mask_rank = 0;
  bool expand_queries = true;
  for (const ir::Value* m : {sdp->mask, sdp->allowed}) {
    if (!m) continue;
    const ir::TensorFact& f = m->fact();
    const int64_t r = static_cast<int64_t>(f.dims.size());
    if (!f.has_rank || r < 2)
      return no_match(out, "a mask's rank is unknown or below 2 (ONNX Runtime takes 2 to 4)");
    mask_rank = std::max(mask_rank, r);
    if (is_one(f.dims[r - 1]) && !is_one(kt.dims[3]))
      return no_match(out, "the mask has one key where the scores have more");
    if (!is_one(f.dims[r - 2])) expand_queries = false;
    if (r >= 3 && !is_one(f.dims[r - 3]) && !same_dim(f, r - 3, kt, 1))
      return no_match(out, "the mask is per query head where key/value heads are shared");
  }
  if (is_one(q.dims[2])) expand_queries = false;
  ir::Graph& g = *out.graph();
  std::vector<ir::Node*> absorbed = sdp->nodes();
  // K from K^T.
  ir::Value* k = nullptr;
  if (ir::Node* t = absorbed_producer(sdp->kt(), "Transpose", out)) {
    const auto perm = ir::transpose_perm(*t);
    if (perm && *perm == std::vector<int64_t>{0, 1, 3, 2}) {
      k = t->input(0);
      absorbed.push_back(t);
    } else if (perm && *perm == std::vector<int64_t>{0, 2, 3, 1}) {
      ir::Node* heads = rw.add_node(g, "Transpose", {t->input(0)}, 1, &out);
      rw.set_attr(heads, ints_attr("perm", {0, 2, 1, 3}));
      k = heads->output(0);
      absorbed.push_back(t);
    }
  }
  if (!k) {
    ir::Node* swap = rw.add_node(g, "Transpose", {sdp->kt()}, 1, &out);
    rw.set_attr(swap, ints_attr("perm", {0, 1, 3, 2}));
    k = swap->output(0);
  }
  std::vector<ir::Value*> inputs = {sdp->q(), k, sdp->v()};
  if (ir::Value* mask = additive_mask(*sdp, rw, &out)) {
    if (expand_queries) mask = expand_mask_queries(rw, &out, mask, mask_rank, sdp->q(), 2);
    inputs.push_back(mask);
  }
  ir::Node* fused = rw.add_node(g, "Attention", inputs, 1, &out);
  rw.set_attr(fused, float_attr("scale", sdp->scale));
  if (!rw.replace_node(&out, {fused->output(0)})) return false;
  for (size_t i = 1; i < absorbed.size(); ++i) rw.erase(absorbed[i]);
  return true;
}

std::vector<Rule> attention_rules() { return {{"attention", {"MatMul"}, attention, "", 23}}; }

}  // namespace

PassInfo fuse_attention_pass() {
  return describe(
      {.name = "fuse_attention",
       .level = 2,
       .description =
           "scaled dot-product attention (MatMul, scale, mask, Softmax, MatMul over heads) "
           "becomes ONNX's Attention (opset >= 23)",
       .options = {}},
      {attention_rules});
}

}  // namespace graft
