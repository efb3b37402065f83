// Scaled dot-product attention as exporters write it, matched once for every rule that fuses it
// (fuse_blocks' `attention` into ONNX's Attention, fuse_onnxruntime's `attention` into ONNX
// Runtime's):
//
//   scores = MatMul(Q, K^T), optionally scaled by a constant scalar (Mul by it, either operand
//            order, or Div by it), and Q and K^T each optionally a Mul by a constant scalar
//            (the scale split onto both as sqrt(scale), as torch's export of
//            scaled_dot_product_attention writes it; constants once the head size is known)
//   scores = Where(allowed, scores, fill), optionally: a boolean mask (a causal one, as GPT-2
//            writes it) with `fill` a constant scalar of at most kMaskedScore (or -inf)
//   scores = Add(scores, mask), optionally (either operand order; the mask may itself be a Mul,
//            e.g. (1 - m) * c, so the scores' operand is the one computed from Q K^T)
//   probs  = Softmax(scores) over the last axis (opset >= 13: earlier Softmax flattens)
//   out    = MatMul(probs, V)
//
// The masks together are one additive mask (additive_mask): Where(allowed, mask, fill + mask)
// (Where(allowed, 0, fill) without `mask`), added to the scores instead. Exactly the same
// scores after rounding: where `allowed` is false the model computes fill + mask, the fused form
// s + (fill + mask), and |fill + mask| >= 1e30 absorbs any score below 1e21 in rounding (float's
// unit in the last place there is above 1e22); where it is true both compute s + mask.
//
// Every inner node is read only inside the pattern (absorbed_producer), so a rewrite replacing
// `out` may erase them all. What Q, K^T and V are is each rule's own question.
#pragma once

#include <optional>
#include <vector>

#include "core/ir/model.h"
#include "core/passes/rewriter.h"

namespace graft {

struct ScaledDotProduct {
  ir::Node* out = nullptr;       // MatMul(probs, V)
  ir::Node* softmax = nullptr;   // Softmax(scores)
  ir::Node* mask_add = nullptr;  // Add(scores, mask); nullptr without a mask
  ir::Value* mask = nullptr;
  ir::Node* select = nullptr;  // Where(allowed, scores, fill); nullptr without
  ir::Value* allowed = nullptr;
  ir::Value* fill = nullptr;
  ir::Node* scaling = nullptr;  // Mul / Div by the constant; nullptr without
  double scale = 1.0;           // what Q K^T is multiplied by (all the scalings together)
  ir::Node* qk = nullptr;       // MatMul(Q', K^T')
  // Q' = Q * c and K^T' = K^T * c: the Muls (nullptr without) and Q and K^T under them.
  ir::Node* operand_scaling[2] = {nullptr, nullptr};
  ir::Value* operands[2] = {nullptr, nullptr};

  ir::Value* q() const { return operands[0]; }
  ir::Value* kt() const { return operands[1]; }
  ir::Value* v() const { return out->input(1); }
  // The scores as Q K^T gives them, scaled (the operand the masks apply to).
  ir::Value* scores() const { return scaling ? scaling->output(0) : qk->output(0); }
  // The pattern's nodes, `out` first, then the absorbed ones from the output back.
  std::vector<ir::Node*> nodes() const;
};

// `mask` can only be added to (or select among) `scores` without making them larger: rank at
// most theirs, and no dim above 1 (or unknown) where the scores' dim is known to be 1. Where the
// facts cannot compare dims (exports lose dim names), a mask that would enlarge the scores at run
// time makes the fused op fail there (its mask must broadcast to the scores' shape): an error,
// never another result.
bool fits_scores(const ir::Value* mask, const ir::Value* scores);

// A fill below this is a masked-out score: its sum with any score the model can compute is itself.
inline constexpr double kMaskedScore = -1e30;

// The pattern ending at `out`, a MatMul; nullopt when it is not one. Once `out` reads a Softmax,
// a failure says why through no_match (rules.h), for `--explain`.
std::optional<ScaledDotProduct> match_scaled_dot_product(ir::Node& out);

// The pattern's masks as one additive mask of the scores' type, new nodes added through `rw`
// before `at` when there is a Where; nullptr when the pattern has no mask.
ir::Value* additive_mask(const ScaledDotProduct& m, Rewriter& rw, ir::Node* at);

// `mask` (rank `rank` >= 2) expanded over its query axis (rank - 2) to the length of dim `axis`
// of `length_of`: Expand(mask, [1, .., 1, L, 1]), for fused ops whose kernels take a mask of
// exactly (.., S, T). L is a constant where `length_of`'s fact knows it, else read at run time
// (Shape, then Gather: valid at any opset).
ir::Value* expand_mask_queries(Rewriter& rw, ir::Node* at, ir::Value* mask, int64_t rank,
                               ir::Value* length_of, int64_t axis);

}  // namespace graft
