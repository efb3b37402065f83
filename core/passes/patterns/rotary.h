// Rotary position embedding as exporters write it out (Hugging Face's LLaMA, Mistral, Qwen2 and
// GPT-NeoX attention, exported by torch.onnx), matched in one place for the rules that fuse it:
// fuse_blocks' rotary_embedding (the standard RotaryEmbedding, opset 23) and fuse_onnxruntime's
// (com.microsoft RotaryEmbedding).
//
//   y = x * cos + rotate_half(x) * sin          (either operand order of the Add and each Mul)
//   rotate_half(x) = Concat(Neg(x2), x1, axis = last), x1 and x2 x's halves along its last axis:
//                    Slice(x, 0..D/2) and Slice(x, D/2..D), or the two outputs of a Split
//   cos = Unsqueeze(Gather(cos_table, position_ids), axes = [1]), sin likewise
//   cos_table: a constant, or its leading rows Slice(constant, 0, end) on axis 0 (transformers'
//              cos_cached[:seq_len], end the total length read at run time)
//
// x is (B, N, S, D): heads before the sequence, D known and even; position_ids int64 of rank 2;
// the tables are constants (P, D) of x's element type (float or float16) whose two halves
// along D are equal (exporters build them as cat(angles, angles)), so each row is a RotaryEmbedding
// cache row repeated: the fused ops take the first halves, (P, D/2), as new constants. Then
// RotaryEmbedding(x) with those caches and position_ids computes y: pair i of a head is
// (x[i], x[i + D/2]), and y[i] = cos[i] x[i] - sin[i] x[i + D/2], y[i + D/2] = sin[i] x[i] +
// cos[i] x[i + D/2], which is the decomposition's x * cos + (-x2, x1) * sin.
//
// RotaryEmbedding wants position ids of exactly x's (B, S), where the decomposition also
// broadcasts ids of (1, S) or (B, 1) over x. Where facts do not show ids of x's (B, S) (a
// sequence length lost at a mask built at run time), the fused op reads Expand(position_ids,
// x's (B, S) read at run time): the decomposition's broadcast, exactly; only ids larger than x
// (x itself broadcast, which a rotary never does) end in the fused op's error.
//
// A table sliced to its leading rows gives a position id the row the whole table gives; only
// ids at or past the slice's end differ, which the decomposition's Gather rejects (an error)
// and the fused op reads from the whole table (ids past the table's own rows are rejected by
// both). The fused op reads the whole constant; the Slice goes with the last rotary reading it.
//
// Every value between x and y is read only by the pattern; the Unsqueezes, Gathers and Slices
// may be shared (one per layer serves Q and K) and are erased with the last rotary that reads
// them.
#pragma once

#include <optional>
#include <vector>

#include "core/ir/model.h"
#include "core/passes/rewriter.h"

namespace graft {

struct RotaryMatch {
  ir::Value* x = nullptr;             // (B, N, S, D)
  ir::Value* position_ids = nullptr;  // int64, rank 2
  bool ids_fit = false;               // known by facts to be (B, S) of x
  ir::Value* cos_table = nullptr;     // constants (P, D), halves not yet compared
  ir::Value* sin_table = nullptr;
  int32_t elem_type = 0;  // x's: FLOAT or FLOAT16
  int64_t head = 0;       // D
  // The nodes only the pattern reads, the root (the Add) first: erased once it is replaced.
  std::vector<ir::Node*> block;
  // The Unsqueezes and Gathers of the tables: erased when nothing else reads them.
  std::vector<ir::Node*> shared;
};

// The rotary pattern whose final Add is `add`, checked by facts and constant headers (no table is
// read); nullopt, with the reason (no_match) once `add` looks like the pattern's root.
std::optional<RotaryMatch> match_rotary(ir::Node& add);

// The caches a fused op takes: the first halves (P, D/2) of the match's tables, after checking
// that each table's halves are equal (bit for bit). New constants in `add`'s graph, or constants
// a rewrite of another rotary with the same table made there before. nullopt (no_match at `add`)
// when a table cannot be read or its halves differ.
struct RotaryCaches {
  ir::Value* cos = nullptr;
  ir::Value* sin = nullptr;
};
std::optional<RotaryCaches> rotary_caches(Rewriter& rw, ir::Node& add, const RotaryMatch& match);

// The position ids the fused op takes: the match's when they fit x, else their Expand to x's
// (B, S) (new nodes in `add`'s graph).
ir::Value* rotary_position_ids(Rewriter& rw, ir::Node& add, const RotaryMatch& match);

// Replaces the match's root by `y` (the fused op's output) and erases what only the pattern read.
bool replace_rotary(Rewriter& rw, const RotaryMatch& match, ir::Value* y);

}  // namespace graft
