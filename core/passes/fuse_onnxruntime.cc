// Fusions into ONNX Runtime's com.microsoft ops, for `--target onnxruntime` only
// (PassInfo::target): blocks that ONNX Runtime's own graph transformers leave decomposed at its
// default level on the models exporters write, measured faster as one kernel (docs/performance.md):
//
//  - attention: self-attention written out as three projections (MatMul by a constant, + bias)
//    split into heads (Reshape [.., N, H], Transpose), scores Q K^T (the K Transpose as
//    perm [0, 2, 3, 1]), scaled by a constant (Mul, or Div), an optional additive mask
//    (Add of a tensor of rank 4 broadcasting over heads), Softmax over the last axis, times V,
//    and the heads merged (Transpose [0, 2, 1, 3], Reshape [.., N * H])
//      -> Attention(x, [Wq Wk Wv], [bq bk bv], attention_bias = the mask, num_heads = N,
//                   scale = the constant).
//    ONNX Runtime's Attention takes an attention_bias of (B or 1, N or 1, S, T) exactly, so a
//    mask of (B, 1, 1, T) (a padding mask) is expanded over the query axis first (Expand by
//    [1, 1, T, 1], T from the mask's own shape, so one Expand serves every layer). The mask
//    is added as the model adds it, so any mask values give the same scores; ONNX Runtime's own
//    fusion instead turns a 0/1 mask into its mask_index, which is only equal for masks of 0 and
//    1. Where the model would broadcast a mask of another length than the keys' (only a length
//    of 1 is valid there), ONNX Runtime rejects the fused node's attention_bias: an error, never
//    a different result.
//  - skip_layer_norm (off by default: ONNX Runtime 1.30's CPU kernel ran slower than
//    LayerNormalization + Add on the BERT models of docs/performance.md; the option `fusions`
//    turns it on): LayerNormalization(a + b) over the last axis of a 2-D or 3-D input, with
//    a 1-D scale and bias, a and b of the same shape (or b (S, H) / (1, S, H) for a 3-D a)
//      -> SkipLayerNormalization(a, b, gamma, beta); when a (or b) is itself MatMul + 1-D
//    constant bias read only here, the bias moves into the op's bias input. The sum, when read
//    elsewhere too (a pre-LN residual stream), is the op's fourth output.
//  - rotary_embedding (on by default: llama_block ran 3-5% faster under ONNX Runtime 1.30 on
//    CPU than with the decomposition, docs/performance.md): x * cos + rotate_half(x) * sin with cos
//    and sin gathered by position ids from constant tables, or from their leading rows sliced at
//    run time (transformers' cos_cached[:seq_len]) (core/passes/patterns/rotary.h, shared
//    with fuse_blocks, which emits the standard op at opset 23)
//      -> RotaryEmbedding(x, position_ids, cos_cache, sin_cache), the caches the tables' first
//    halves (the ids expanded to x's batch and sequence where facts do not show them equal). ONNX
//    Runtime's kernel rejects position ids outside [0, P) (Gather accepts negative ones) and caches
//    shorter than the sequence: errors, never another result.
//
// Each emitted op is asked of the target's kernel table (Target::has_kernel) for its element
// type first: nothing is emitted that the target's CPU provider cannot run.
//
// Exactness. The fused kernels compute the same formulas with their own summation order and
// intermediate precision (ONNX Runtime's Attention accumulates Q K^T and the softmax in float
// and multiplies by the scale instead of dividing), so results differ in the last bits, as they
// do between ONNX Runtime's own fused and unfused forms. The concatenated weights and biases are
// the same numbers.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>

#include "core/ir/tensor.h"
#include "core/passes/opset.h"
#include "core/passes/passes.h"
#include "core/passes/patterns/attention.h"
#include "core/passes/patterns/rotary.h"
#include "core/passes/queries.h"
#include "core/passes/rules.h"
#include "core/passes/target.h"

namespace graft {

namespace {

using onnx::TensorProto;

// The matched nodes of a pattern, root first: erased in that order once the root is replaced.
using Block = std::vector<ir::Node*>;

bool has_perm(const ir::Node& transpose, const std::vector<int64_t>& perm) {
  auto p = ir::transpose_perm(transpose);
  return p && *p == perm;
}

// A cache repeated for groups of query heads, as transformers' repeat_kv writes it:
// Reshape(Expand(Unsqueeze(Concat(past, new), axis 2), ...), ...). Only recognized, to say why it
// is not fused.
bool repeated_cache(const ir::Value* v) {
  const ir::Node* reshape = producer(v, "Reshape");
  const ir::Node* expand = reshape ? producer(reshape->input(0), "Expand") : nullptr;
  const ir::Node* unsqueeze = expand ? producer(expand->input(0), "Unsqueeze") : nullptr;
  return unsqueeze && producer(unsqueeze->input(0), "Concat");
}

// One projection of attention: x @ W (+ b) with W a 2-D float constant [D_in, D] and b a 1-D
// constant [D] (either operand order of the Add), optionally times a constant scalar (a query
// scaled right after its projection, as Whisper's encoder writes it), which scales the scores.
struct Projection {
  ir::Value* x = nullptr;
  ir::Value* weight = nullptr;
  ir::Value* bias = nullptr;  // nullptr: none
  double scale = 1.0;
  int64_t rows = 0, cols = 0;
  Block nodes;
};

std::optional<Projection> projection(ir::Value* v, const ir::Node& root) {
  Projection p;
  if (ir::Node* mul = absorbed_producer(v, "Mul", root)) {
    for (int side = 0; side < 2 && p.nodes.empty(); ++side) {
      const std::optional<double> c = constant_scalar(mul->input(1 - side));
      if (!c || !std::isfinite(*c) || !broadcasts_into(mul->input(1 - side), mul->input(side)))
        continue;
      p.scale = *c;
      v = mul->input(side);
      p.nodes.push_back(mul);
    }
    if (p.nodes.empty()) return std::nullopt;
  }
  ir::Value* product = v;
  if (ir::Node* add = absorbed_producer(v, "Add", root)) {
    for (int side = 0; side < 2; ++side) {
      ir::Node* mm = absorbed_producer(add->input(side), "MatMul", root);
      const auto b = float_constant_type(add->input(1 - side));
      if (!mm || !b || b->dims.size() != 1) continue;
      p.bias = add->input(1 - side);
      product = add->input(side);
      p.nodes.push_back(add);
      break;
    }
    if (!p.bias) return std::nullopt;
  }
  ir::Node* mm = absorbed_producer(product, "MatMul", root);
  if (!mm || mm->inputs().size() != 2) return std::nullopt;
  const auto w = float_constant_type(mm->input(1));
  if (!w || w->dims.size() != 2) return std::nullopt;
  p.x = mm->input(0);
  p.weight = mm->input(1);
  p.rows = w->dims[0];
  p.cols = w->dims[1];
  if (p.bias && float_constant_type(p.bias)->dims[0] != p.cols) return std::nullopt;
  p.nodes.push_back(mm);
  return p;
}

// Heads split: Reshape(x, [B?, S?, N, H]) of a 3-D x (B, S, N * H) with the first two dims kept
// (0, or the same size as x's by facts), the Reshape read only by the pattern.
struct HeadsReshape {
  ir::Node* reshape = nullptr;
  ir::Value* x = nullptr;
  int64_t heads = 0, head = 0;
};

std::optional<HeadsReshape> heads_reshape(ir::Value* v, const ir::Node& root) {
  ir::Node* reshape = absorbed_producer(v, "Reshape", root);
  if (!reshape || reshape->inputs().size() != 2 || reshape->attr_int("allowzero", 0) != 0)
    return std::nullopt;
  auto shape = constant_ints(reshape->input(1));
  if (!shape || shape->size() != 4 || (*shape)[2] <= 0 || (*shape)[3] <= 0) return std::nullopt;
  const ir::TensorFact& in = reshape->input(0)->fact();
  if (!in.has_rank || in.dims.size() != 3) return std::nullopt;
  if (in.dims[2].known() && in.dims[2].value != (*shape)[2] * (*shape)[3]) return std::nullopt;
  // The sequence dim may be -1 (Whisper's view(bsz, -1, N, H)): with the batch kept and the last
  // dim known to be N * H, it is the input's sequence length.
  const bool inferred_sequence = (*shape)[1] == -1 && (*shape)[0] == 0 && in.dims[2].known();
  for (int d = 0; d < 2; ++d) {
    if ((*shape)[d] == 0 || (d == 1 && inferred_sequence)) continue;
    if (!in.dims[d].known() || in.dims[d].value != (*shape)[d]) return std::nullopt;
  }
  return HeadsReshape{reshape, reshape->input(0), (*shape)[2], (*shape)[3]};
}

// Heads split from a projection: Reshape(projection, [B?, S?, N, H]) with N * H the projection's
// width.
struct Split {
  Projection proj;
  int64_t heads = 0, head = 0;
  Block nodes;  // the Reshape, then the projection's nodes
};

std::optional<Split> split_heads(ir::Value* v, const ir::Node& root) {
  auto r = heads_reshape(v, root);
  if (!r) return std::nullopt;
  auto proj = projection(r->x, root);
  if (!proj || r->heads * r->head != proj->cols) return std::nullopt;
  Split s{*proj, r->heads, r->head, {r->reshape}};
  s.nodes.insert(s.nodes.end(), proj->nodes.begin(), proj->nodes.end());
  return s;
}

// The additive mask's fit as Attention's attention_bias (B or 1, N or 1, S, T): rank 4 with a
// head axis of 1, and a query axis that is 1 (a padding mask, expanded over the queries by its
// own key length: *expand) or known to be as long as its key axis.
bool fits_attention_bias(const ir::Value* mask, bool* expand) {
  const ir::TensorFact& m = mask->fact();
  if (!m.has_rank || m.dims.size() != 4) return false;
  auto one = [](const ir::Dim& d) { return d.known() && d.value == 1; };
  if (!one(m.dims[1])) return false;
  *expand = one(m.dims[2]) && !one(m.dims[3]);
  return *expand || m.dims[2].same_as(m.dims[3]);
}

bool attention(ir::Node& root, Rewriter& rw, const Target& target) {
  if (root.graph()->opset(kMicrosoftDomain) != 1) return false;  // a function body
  // root: Reshape(Transpose(MatMul(Softmax(..), V), [0, 2, 1, 3]), [.., N * H]).
  if (root.inputs().size() != 2 || root.attr_int("allowzero", 0) != 0) return false;
  ir::Node* merge = absorbed_producer(root.input(0), "Transpose", root);
  if (!merge || !has_perm(*merge, {0, 2, 1, 3})) return false;
  ir::Node* context = absorbed_producer(merge->input(0), "MatMul", root);
  if (!context) return false;
  // Values concatenated to a cache (repeated for grouped heads or not): attention_with_cache's
  // case.
  if (context->inputs().size() == 2 &&
      (producer(context->input(1), "Concat") || repeated_cache(context->input(1))))
    return false;
  std::optional<ScaledDotProduct> sdp = match_scaled_dot_product(*context);
  if (!sdp) return false;
  if (sdp->select) return no_match(root, "a boolean mask (Where) is not fused into Attention");
  ir::Value* mask = sdp->mask;
  const double scale = sdp->scale;
  Block block = {&root, merge};
  for (ir::Node* n : sdp->nodes()) block.push_back(n);
  // Q: Transpose(split, [0, 2, 1, 3]); K^T: Transpose(split, [0, 2, 3, 1]); V as Q.
  ir::Node* tq = absorbed_producer(sdp->q(), "Transpose", root);
  ir::Node* tk = absorbed_producer(sdp->kt(), "Transpose", root);
  ir::Node* tv = absorbed_producer(context->input(1), "Transpose", root);
  if (!tq || !tk || !tv || !has_perm(*tq, {0, 2, 1, 3}) || !has_perm(*tk, {0, 2, 3, 1}) ||
      !has_perm(*tv, {0, 2, 1, 3}))
    return no_match(root, "Q, K and V are not heads transposed as [0,2,1,3] (K: [0,2,3,1])");
  auto q = split_heads(tq->input(0), root);
  auto k = split_heads(tk->input(0), root);
  auto v = split_heads(tv->input(0), root);
  if (!q || !k || !v)
    return no_match(root, "Q, K or V is not a Reshape into heads of x @ W (+ b) by constants");
  if (q->proj.x != k->proj.x || q->proj.x != v->proj.x)
    return no_match(root, "Q, K and V are not projections of one input (cross-attention)");
  if (q->heads != k->heads || q->heads != v->heads || q->head != k->head ||
      q->proj.rows != k->proj.rows || q->proj.rows != v->proj.rows)
    return no_match(root, "Q, K and V differ in heads, head size or input width");
  if (v->proj.scale != 1.0) return no_match(root, "V is scaled after its projection");
  const double qk_scale = scale * q->proj.scale * k->proj.scale;
  if (qk_scale == 0 || !std::isfinite(qk_scale)) return no_match(root, "the scale is zero");
  ir::Value* x = q->proj.x;
  const ir::TensorFact& xf = x->fact();
  const int32_t dtype = xf.elem_type;
  if (!xf.has_rank || xf.dims.size() != 3) return no_match(root, "the input's rank is not 3");
  if (!target.has_kernel(kMicrosoftDomain, "Attention", dtype))
    return no_match_with(root, [&] {
      return absl::StrCat("target ", target.str(), " has no Attention kernel for element type ",
                          TensorProto::DataType_Name(static_cast<TensorProto::DataType>(dtype)));
    });
  // The merged output: Reshape to [.., .., N * Hv].
  auto out_shape = constant_ints(root.input(1));
  if (!out_shape || out_shape->size() != 3 || (*out_shape)[2] != v->heads * v->head ||
      ((*out_shape)[0] != 0 && !xf.dims[0].known()) ||
      ((*out_shape)[1] != 0 && !xf.dims[1].known()))
    return no_match(root, "the heads are not merged back to [B, S, N * H]");
  for (int d = 0; d < 2; ++d)
    if ((*out_shape)[d] != 0 && (*out_shape)[d] != xf.dims[d].value)
      return no_match(root, "the merged shape's leading dims are not the input's");
  bool expand = false;
  if (mask) {
    if (mask->elem_type() != dtype || !fits_attention_bias(mask, &expand))
      return no_match(root, "the mask is not a (B or 1, 1, 1 or T, T) tensor of x's type");
  }
  // Constants: [Wq Wk Wv] along columns and [bq bk bv] (zeros where absent).
  auto wq = float_constant(q->proj.weight), wk = float_constant(k->proj.weight),
       wv = float_constant(v->proj.weight);
  if (!wq || !wk || !wv || wq->dtype != dtype || wk->dtype != dtype || wv->dtype != dtype)
    return no_match(root, "the projection weights are not readable constants of x's type");
  const int64_t rows = q->proj.rows, cq = q->proj.cols, ck = k->proj.cols, cv = v->proj.cols;
  const int64_t cols = cq + ck + cv;
  std::vector<double> w(static_cast<size_t>(rows * cols)), b(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(wq->values.begin() + r * cq, cq, w.begin() + r * cols);
    std::copy_n(wk->values.begin() + r * ck, ck, w.begin() + r * cols + cq);
    std::copy_n(wv->values.begin() + r * cv, cv, w.begin() + r * cols + cq + ck);
  }
  const Projection* parts[3] = {&q->proj, &k->proj, &v->proj};
  int64_t offset = 0;
  for (const Projection* p : parts) {
    if (p->bias) {
      auto bv = float_constant(p->bias);
      if (!bv || bv->dtype != dtype) return no_match(root, "a bias is not a readable constant");
      std::copy(bv->values.begin(), bv->values.end(), b.begin() + offset);
    }
    offset += p->cols;
  }
  ir::Graph& g = *root.graph();
  ir::Value* weights =
      rw.add_constant(g, ir::make_float_tensor(dtype, {rows, cols}, w), "attention_qkv_weight");
  ir::Value* bias =
      rw.add_constant(g, ir::make_float_tensor(dtype, {cols}, b), "attention_qkv_bias");
  ir::Value* attention_bias = mask;
  // [1, 1, T, 1] with T the mask's own key length, so one Expand serves every layer.
  if (mask && expand) attention_bias = expand_mask_queries(rw, &root, mask, 4, mask, 3);
  std::vector<ir::Value*> inputs = {x, weights, bias};
  if (attention_bias) inputs.insert(inputs.end(), {nullptr, nullptr, attention_bias});
  ir::Node* fused = rw.add_node(g, "Attention", inputs, 1, &root, kMicrosoftDomain);
  rw.set_attr(fused, int_attr("num_heads", q->heads));
  rw.set_attr(fused, float_attr("scale", qk_scale));
  if (cq != cv) rw.set_attr(fused, ints_attr("qkv_hidden_sizes", {cq, ck, cv}));
  if (!rw.replace_node(&root, {fused->output(0)})) return false;
  for (size_t i = 1; i < block.size(); ++i) rw.erase(block[i]);
  for (ir::Node* t : {tq, tk, tv}) rw.erase(t);
  for (const Split* s : {&*q, &*k, &*v})
    for (ir::Node* n : s->nodes) rw.erase(n);
  return true;
}

// ------------------------------------------------------------------------ attention_with_cache

// Heads split from a 3-D value and moved before the sequence: Transpose(Reshape(x, [B?, S?, N,
// H]), [0, 2, 1, 3]), both read only by the pattern.
struct CacheHeads {
  HeadsReshape r;
  ir::Node* transpose = nullptr;
  ir::Node* rotary = nullptr;  // com.microsoft RotaryEmbedding of the 4-D heads, or nullptr
};

// The producer `op` of `v` in root's graph with one output, `v` read once besides Shape nodes
// (exports read the queries' length off their heads for the causal mask's slice): those keep
// what they read, the pattern's nodes are erased once nothing else reads them.
ir::Node* producer_besides_shapes(ir::Value* v, std::string_view op, const ir::Node& root) {
  ir::Node* p = producer(v, op);
  if (!p || p->graph() != root.graph() || p->outputs().size() != 1) return nullptr;
  int others = 0;
  for (const ir::Use& use : v->uses())
    if (!use.node->is("Shape")) ++others;
  return others == 1 && !v->is_graph_output() ? p : nullptr;
}

// The heads, optionally rotated by com.microsoft RotaryEmbedding (this pass's rotary_embedding
// rule's output: 4-D input, only its own attributes) read only by the pattern.
std::optional<CacheHeads> heads_first(ir::Value* v, const ir::Node& root) {
  CacheHeads h;
  if (ir::Node* p = v->producer();
      p && p->domain() == kMicrosoftDomain && p->op_type() == "RotaryEmbedding" && single_use(v) &&
      p->graph() == root.graph() && p->outputs().size() == 1 && p->inputs().size() == 4 &&
      only_attributes(*p, {"interleaved", "num_heads"})) {
    h.rotary = p;
    v = p->input(0);
  }
  h.transpose = producer_besides_shapes(v, "Transpose", root);
  if (!h.transpose || !has_perm(*h.transpose, {0, 2, 1, 3})) return std::nullopt;
  auto r = heads_reshape(h.transpose->input(0), root);
  if (!r) return std::nullopt;
  h.r = *r;
  return h;
}

// What MultiHeadAttention reads for `h`: its 3-D value, rotated there (RotaryEmbedding's 3-D
// form, num_heads heads) when the heads were.
ir::Value* cache_input(const CacheHeads& h, Rewriter& rw, ir::Graph& g) {
  if (!h.rotary) return h.r.x;
  std::vector<ir::Value*> inputs = {h.r.x, h.rotary->input(1), h.rotary->input(2),
                                    h.rotary->input(3)};
  ir::Node* r = rw.add_node(g, "RotaryEmbedding", inputs, 1, h.rotary, kMicrosoftDomain);
  if (const auto* a = h.rotary->attr("interleaved")) rw.set_attr(r, *a);
  rw.set_attr(r, int_attr("num_heads", h.r.heads));
  return r->output(0);
}

// The cache Concat(past, new heads) along the sequence axis (2 of 4), in root's graph.
bool cache_concat(const ir::Node* concat, const ir::Node& root) {
  if (!concat || concat->inputs().size() != 2 || concat->graph() != root.graph() ||
      !only_attributes(*concat, {"axis"}))
    return false;
  return ir::normalize_axis(concat->attr_int("axis", 0), 4) == 2;
}

// The caches' other readers: Shape nodes (an export reads the total length off the keys for the
// causal mask's slice) and graph outputs. A Shape would read MultiHeadAttention's present output,
// which the mask feeding the op would then depend on: a cycle. So each Shape of Concat(past,
// new) along axis 2 is computed from what the op reads instead, Shape(past) with the new
// length added at axis 2 (Shape(new3d)[1], new3d the (B, L, N * H) value the op reads), the
// Shape's start and end kept. False when another reader exists (or a Shape with attributes
// other than those).
bool cache_readers_fit(const ir::Node& concat, const ir::Node& pattern_reader) {
  for (const ir::Use& use : concat.output(0)->uses())
    if (use.node != &pattern_reader && !(use.node->is("Shape") && ir::shape_range(*use.node, 4)))
      return false;
  return true;
}

void rewrite_cache_shapes(const ir::Node& concat, const ir::Node& pattern_reader, ir::Value* new3d,
                          Rewriter& rw) {
  ir::Graph& g = *concat.graph();
  const std::vector<ir::Use> uses = concat.output(0)->uses();
  for (const ir::Use& use : uses) {
    ir::Node* shape = use.node;
    if (shape == &pattern_reader || !shape->is("Shape")) continue;
    const auto [from, to] = *ir::shape_range(*shape, 4);  // cache_readers_fit checked it
    ir::Node* past = rw.add_node(g, "Shape", {concat.input(0)}, 1, shape);
    for (const auto& a : shape->attributes()) rw.set_attr(past, a);
    ir::Value* result = past->output(0);
    if (from <= 2 && 2 < to) {
      ir::Node* length = rw.add_node(g, "Shape", {new3d}, 1, shape);
      if (shape->opset() >= 15) {
        rw.set_attr(length, int_attr("start", 1));
        rw.set_attr(length, int_attr("end", 2));
      } else {
        ir::Value* one = rw.add_constant(g, ir::make_int64_tensor({1}, {1}), "cache_sequence_axis");
        length = rw.add_node(g, "Gather", {length->output(0), one}, 1, shape);
      }
      std::vector<int64_t> at(static_cast<size_t>(to - from), 0);
      at[static_cast<size_t>(2 - from)] = 1;
      ir::Value* onehot =
          rw.add_constant(g, ir::make_int64_tensor({to - from}, at), "cache_length_axis");
      ir::Node* added = rw.add_node(g, "Mul", {onehot, length->output(0)}, 1, shape);
      result = rw.add_node(g, "Add", {past->output(0), added->output(0)}, 1, shape)->output(0);
    }
    rw.replace_node(shape, {result});
  }
}

// Self-attention reading and extending a KV cache, as decoders with past export it (GPT-2,
// LLaMA without grouped heads, Whisper's decoder): K = Concat(past_key, heads(k)) and V =
// Concat(past_value, heads(v)) along the sequence, which are also the `present` outputs; Q =
// heads(q), each optionally rotated (RotaryEmbedding, this pass's rotary_embedding rule); then
// attention's scaled dot product (core/passes/patterns/attention.h) with K^T = Transpose(K,
// [0, 1, 3, 2]), and the heads moved back behind the sequence (the root, Transpose [0, 2, 1, 3]):
//   -> Reshape(MultiHeadAttention(q, k, v, attention_bias = the masks as one additive mask,
//                                 past_key, past_value), [0, 0, N, Hv]),
//      its present_key and present_value in place of the caches
// q, k and v are the 3-D (B, S, N * H) values the heads were split from (rotated in that form,
// RotaryEmbedding with num_heads). The root's readers merge the heads as they did (GPT-2 reshapes
// them to 2-D for its Gemm, LLaMA to 3-D): the two Reshapes fold into one. The masks' sum must
// be (B or 1, 1 or N, S, T): a padding mask of one query row is expanded over the queries. Keys
// and values with fewer heads than the queries (grouped-query attention: repeat_kv's Expand) are
// another pattern.
bool attention_with_cache(ir::Node& root, Rewriter& rw, const Target& target) {
  if (root.graph()->opset(kMicrosoftDomain) != 1) return false;  // a function body
  if (!has_perm(root, {0, 2, 1, 3}) || root.inputs().size() != 1) return false;
  ir::Node* context = absorbed_producer(root.input(0), "MatMul", root);
  if (!context || context->inputs().size() != 2) return false;
  ir::Node* vcat = producer(context->input(1), "Concat");
  if (!vcat && repeated_cache(context->input(1)))
    return no_match(root,
                    "the keys and values are shared by groups of query heads (repeat_kv): "
                    "MultiHeadAttention wants one per head, and GroupQueryAttention assumes "
                    "right padding, which the graph does not show");
  if (!vcat) return false;  // no cache: the attention rule's case
  std::optional<ScaledDotProduct> sdp = match_scaled_dot_product(*context);
  if (!sdp) return false;
  ir::Node* kt = absorbed_producer(sdp->kt(), "Transpose", root);
  ir::Node* kcat = kt ? producer(kt->input(0), "Concat") : nullptr;
  if (!kt || !has_perm(*kt, {0, 1, 3, 2}) || !cache_concat(kcat, root) || !cache_concat(vcat, root))
    return no_match(root,
                    "the keys and values are not caches Concat(past, new) along the sequence, "
                    "read as Transpose(keys, [0, 1, 3, 2])");
  if (!cache_readers_fit(*kcat, *kt) || !cache_readers_fit(*vcat, *context))
    return no_match(root, "a cache is read by other nodes than the attention and Shape");
  auto q = heads_first(sdp->q(), root);
  auto k = heads_first(kcat->input(1), root);
  auto v = heads_first(vcat->input(1), root);
  if (!q || !k || !v || v->rotary)
    return no_match(root,
                    "Q or the new keys or values are not 3-D values split into heads (Reshape, "
                    "Transpose [0, 2, 1, 3]; Q and K optionally rotated by RotaryEmbedding)");
  const int64_t heads = q->r.heads, head = q->r.head, vhead = v->r.head;
  if (k->r.heads != heads || v->r.heads != heads || k->r.head != head)
    return no_match(root, "Q, K and V differ in heads or head size (grouped heads?)");
  ir::Value* past_key = kcat->input(0);
  ir::Value* past_value = vcat->input(0);
  for (const auto& [past, size] : {std::pair{past_key, head}, std::pair{past_value, vhead}}) {
    const ir::TensorFact& f = past->fact();
    if (!f.has_rank || f.dims.size() != 4 || (f.dims[1].known() && f.dims[1].value != heads) ||
        (f.dims[3].known() && f.dims[3].value != size))
      return no_match(root, "a past is not (B, N, P, H) of the queries' heads");
  }
  const int32_t dtype = q->r.x->elem_type();
  for (const ir::Value* x : {k->r.x, v->r.x, past_key, past_value})
    if (x->elem_type() != dtype)
      return no_match(root, "Q, K, V and the pasts differ in element type");
  if (!target.has_kernel(kMicrosoftDomain, "MultiHeadAttention", dtype))
    return no_match_with(root, [&] {
      return absl::StrCat("target ", target.str(),
                          " has no MultiHeadAttention kernel for element type ",
                          TensorProto::DataType_Name(static_cast<TensorProto::DataType>(dtype)));
    });
  const ir::TensorFact& qf = q->r.x->fact();
  // The masks: one additive tensor of Q's type, rank 4 as MultiHeadAttention's attention_bias
  // wants it. Broadcasting into the scores (B, N, S, T), its batch and head dims are already 1
  // or the scores' (ONNX's broadcast rule); its query dim is expanded to S unless facts show it
  // is S, since a mask of one row (a padding mask) is valid for the decomposition at any S and
  // for the op only at S = 1. A key dim of 1 while T > 1 (a mask constant over the keys) is
  // left to the op's own check: an error, never another result.
  const ir::Value* masks = sdp->select ? sdp->allowed : sdp->mask;
  bool expand = false;
  if (masks) {
    for (const ir::Value* m : {sdp->mask, sdp->allowed})
      if (m && !(m->fact().has_rank && m->fact().dims.size() == 4))
        return no_match(root, "a mask is not known to be 4-D");
    if (sdp->mask && sdp->mask->elem_type() != dtype)
      return no_match(root, "the additive mask is not of Q's type");
    const bool one_query = qf.has_rank && qf.dims[1].known() && qf.dims[1].value == 1;
    for (const ir::Value* m : {sdp->mask, sdp->allowed})
      if (m && !one_query && !(qf.has_rank && m->fact().dims[2].same_as(qf.dims[1]))) expand = true;
  }
  ir::Graph& g = *root.graph();
  rewrite_cache_shapes(*kcat, *kt, k->r.x, rw);
  rewrite_cache_shapes(*vcat, *context, v->r.x, rw);
  ir::Value* bias = masks ? additive_mask(*sdp, rw, &root) : nullptr;
  if (bias && expand) bias = expand_mask_queries(rw, &root, bias, 4, q->r.x, 1);
  ir::Node* fused = rw.add_node(g, "MultiHeadAttention",
                                {cache_input(*q, rw, g), cache_input(*k, rw, g), v->r.x, nullptr,
                                 nullptr, bias, past_key, past_value},
                                3, &root, kMicrosoftDomain);
  rw.set_attr(fused, int_attr("num_heads", heads));
  rw.set_attr(fused, float_attr("scale", sdp->scale));
  ir::Value* shape =
      rw.add_constant(g, ir::make_int64_tensor({4}, {0, 0, heads, vhead}), "attention_heads");
  ir::Node* split = rw.add_node(g, "Reshape", {fused->output(0), shape}, 1, &root);
  if (!rw.replace_node(&root, {split->output(0)}) ||
      !rw.replace_all_uses(kcat->output(0), fused->output(1)) ||
      !rw.replace_all_uses(vcat->output(0), fused->output(2)))
    return false;
  for (ir::Node* n : sdp->nodes()) rw.erase(n);
  for (ir::Node* n : {kt, kcat, vcat}) rw.erase(n);
  for (const CacheHeads* h : {&*q, &*k, &*v})
    for (ir::Node* n : {h->rotary, h->transpose, h->r.reshape})
      if (n) rw.erase(n);
  return true;
}

// ------------------------------------------------------------------------------ skip_layer_norm

bool skip_layer_norm(ir::Node& ln, Rewriter& rw, const Target& target) {
  if (ln.graph()->opset(kMicrosoftDomain) != 1) return false;  // a function body
  if (ln.inputs().size() < 2 || ln.outputs().size() != 1 ||
      !only_attributes(ln, {"axis", "epsilon", "stash_type"}))
    return false;
  ir::Node* add = producer(ln.input(0), "Add");
  if (!add || add->inputs().size() != 2 || add->graph() != ln.graph()) return false;
  // From here on the LayerNormalization normalizes a sum: reasons are worth giving.
  const ir::TensorFact& xf = ln.input(0)->fact();
  const int32_t dtype = xf.elem_type;
  if (!xf.has_rank || (xf.dims.size() != 2 && xf.dims.size() != 3))
    return no_match(ln, "the input's rank is not known to be 2 or 3");
  const int64_t axis = ln.attr_int("axis", -1);
  if (axis != -1 && axis != static_cast<int64_t>(xf.dims.size()) - 1)
    return no_match(ln, "not over the last axis only");
  if (ln.attr_int("stash_type", 1) != TensorProto::FLOAT)
    return no_match(ln, "stash_type is not float");
  const std::optional<int64_t> hidden = known_dim(ln.input(0), -1);
  if (!hidden) return no_match(ln, "the hidden size is not known");
  auto vector_of_hidden = [&](const ir::Value* v) {
    auto t = float_constant_type(v);
    return t && t->dtype == dtype && t->dims.size() == 1 && t->dims[0] == *hidden;
  };
  if (!vector_of_hidden(ln.input(1)) || (ln.input(2) && !vector_of_hidden(ln.input(2))))
    return no_match(ln, "scale or bias is not a 1-D constant of the hidden size");
  if (!target.has_kernel(kMicrosoftDomain, "SkipLayerNormalization", dtype))
    return no_match_with(ln, [&] {
      return absl::StrCat("target ", target.str(),
                          " has no SkipLayerNormalization kernel for element type ",
                          TensorProto::DataType_Name(static_cast<TensorProto::DataType>(dtype)));
    });
  // input: the operand of the sum's shape; skip: the other, of the same shape or (S, H) /
  // (1, S, H) for a 3-D input.
  ir::Value* a = add->input(0);
  ir::Value* b = add->input(1);
  auto same = [](const ir::TensorFact& p, const ir::TensorFact& q) {
    if (!p.has_rank || !q.has_rank || p.dims.size() != q.dims.size()) return false;
    for (size_t i = 0; i < p.dims.size(); ++i)
      if (!p.dims[i].same_as(q.dims[i])) return false;
    return true;
  };
  auto skip_fits = [&](const ir::TensorFact& s) {
    if (same(s, xf)) return true;
    if (xf.dims.size() != 3 || !s.has_rank) return false;
    if (s.dims.size() == 3)
      return s.dims[0].known() && s.dims[0].value == 1 && s.dims[1].same_as(xf.dims[1]) &&
             s.dims[2].same_as(xf.dims[2]);
    return s.dims.size() == 2 && s.dims[0].same_as(xf.dims[1]) && s.dims[1].same_as(xf.dims[2]);
  };
  if (!same(a->fact(), xf)) std::swap(a, b);
  if (!same(a->fact(), xf) || !skip_fits(b->fact()) || a->elem_type() != dtype ||
      b->elem_type() != dtype)
    return no_match(ln, "the sum's operands are not the input's shape and a skip that fits it");
  // A bias added to either operand by a 1-D constant moves into the op (read only here).
  ir::Value* bias = nullptr;
  ir::Node* bias_add = nullptr;
  for (ir::Value** operand : {&a, &b}) {
    ir::Node* inner_add = producer(*operand, "Add");
    if (!inner_add || !single_use(*operand) || inner_add->inputs().size() != 2 ||
        inner_add->graph() != ln.graph())
      continue;
    for (int side = 0; side < 2; ++side) {
      ir::Value* c = inner_add->input(1 - side);
      if (!vector_of_hidden(c) || !same(inner_add->input(side)->fact(), (*operand)->fact()))
        continue;
      bias = c;
      bias_add = inner_add;
      *operand = inner_add->input(side);
      break;
    }
    if (bias) break;
  }
  std::vector<ir::Value*> inputs = {a, b, ln.input(1), ln.input(2), bias};
  while (!inputs.empty() && inputs.back() == nullptr) inputs.pop_back();
  // The sum, when something besides the LayerNormalization reads it, is output 3.
  const bool sum_read = !single_use(add->output(0));
  ir::Node* fused = rw.add_node(*ln.graph(), "SkipLayerNormalization", inputs, sum_read ? 4 : 1,
                                &ln, kMicrosoftDomain);
  rw.set_attr(fused, float_attr("epsilon", ln.attr_float("epsilon", 1e-5f)));
  if (!rw.replace_node(&ln, {fused->output(0)})) return false;
  if (sum_read && !rw.replace_all_uses(add->output(0), fused->output(3))) return false;
  rw.erase(add);
  if (bias_add) rw.erase(bias_add);
  return true;
}

// ----------------------------------------------------------------------------- rotary_embedding

bool rotary_embedding(ir::Node& add, Rewriter& rw, const Target& target) {
  if (add.graph()->opset(kMicrosoftDomain) != 1) return false;  // a function body
  std::optional<RotaryMatch> m = match_rotary(add);
  if (!m) return false;
  if (!target.has_kernel(kMicrosoftDomain, "RotaryEmbedding", m->elem_type))
    return no_match_with(add, [&] {
      return absl::StrCat(
          "target ", target.str(), " has no RotaryEmbedding kernel for element type ",
          TensorProto::DataType_Name(static_cast<TensorProto::DataType>(m->elem_type)));
    });
  std::optional<RotaryCaches> caches = rotary_caches(rw, add, *m);
  if (!caches) return false;
  ir::Value* ids = rotary_position_ids(rw, add, *m);
  ir::Node* fused = rw.add_node(*add.graph(), "RotaryEmbedding",
                                {m->x, ids, caches->cos, caches->sin}, 1, &add, kMicrosoftDomain);
  return replace_rotary(rw, *m, fused->output(0));
}

// -------------------------------------------------------------------------------------- pass

const std::vector<std::string> kRuleNames = {"attention", "attention_with_cache", "skip_layer_norm",
                                             "rotary_embedding"};
constexpr char kFusions[] = "fusions";

std::vector<Rule> make_rules(ir::Model&, const PassContext& ctx) {
  const Target target = ctx.target;
  if (!target.onnxruntime()) return {};
  const std::vector<std::string>& chosen = ctx.list_option(kFusions);
  auto on = [&](const char* name) {
    return std::find(chosen.begin(), chosen.end(), name) != chosen.end();
  };
  std::vector<Rule> rules;
  if (on("attention"))
    rules.push_back({"attention",
                     {"Reshape"},
                     [target](ir::Node& n, Rewriter& rw) { return attention(n, rw, target); },
                     "",
                     13});
  if (on("attention_with_cache"))
    rules.push_back(
        {"attention_with_cache",
         {"Transpose"},
         [target](ir::Node& n, Rewriter& rw) { return attention_with_cache(n, rw, target); },
         "",
         13});
  if (on("skip_layer_norm"))
    rules.push_back({"skip_layer_norm",
                     {"LayerNormalization"},
                     [target](ir::Node& n, Rewriter& rw) { return skip_layer_norm(n, rw, target); },
                     "",
                     17});
  if (on("rotary_embedding"))
    rules.push_back(
        {"rotary_embedding",
         {"Add"},
         [target](ir::Node& n, Rewriter& rw) { return rotary_embedding(n, rw, target); },
         "",
         13});
  return rules;
}

// The rules run where com.microsoft is imported at version 1: the pass imports it into the
// model (graphs of the main graph's scope) for the run and takes the import back when nothing
// was fused. Function bodies have their own imports and are left alone.
class FuseOnnxRuntime : public RulePass {
 public:
  FuseOnnxRuntime() : RulePass("fuse_onnxruntime", make_rules, kRuleNames) {}
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override {
    if (!ctx.target.onnxruntime()) return PassResult{};
    return run_with_import(model, kMicrosoftDomain, 1, [&] { return RulePass::run(model, ctx); });
  }
};

}  // namespace

PassInfo fuse_onnxruntime_pass() {
  return describe<FuseOnnxRuntime>(
      {.name = "fuse_onnxruntime",
       .level = 2,
       .target = Target::Kind::kOnnxRuntime,
       .description = "ONNX Runtime's fused kernels (com.microsoft Attention, RotaryEmbedding; "
                      "MultiHeadAttention with a KV cache and SkipLayerNormalization by option) "
                      "for blocks its "
                      "own optimizer leaves apart; "
                      "target onnxruntime only",
       .options = {list_option(kFusions, {"attention", "rotary_embedding"}, kRuleNames,
                               "the fusions to make (each a rule of this pass); "
                               "skip_layer_norm is off by default: measured slower than "
                               "LayerNormalization + Add under ONNX Runtime 1.30 on CPU; so is "
                               "attention_with_cache: no faster than the decomposition on "
                               "decoders at serving sizes, 1.021x and 1.025x in two of eight "
                               "cells (docs/performance.md)")}});
}

}  // namespace graft
