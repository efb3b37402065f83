// Weight folding: ops that are linear per output channel with constant weights (Conv,
// ConvTranspose with groups, Gemm with transB, 2-D MatMul) absorb a per-channel affine map
// y -> scale[c] * y + shift[c] that follows them, by scaling the weights along the output-channel
// axis and rewriting the bias. fuse_conv_batchnorm uses it for BatchNormalization and for
// per-channel Mul and Add.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/ir/model.h"
#include "core/passes/queries.h"
#include "core/passes/rewriter.h"

namespace graft {

struct LinearOp {
  enum Kind { kConv, kConvTranspose, kGemm, kMatMul };
  ir::Node* node = nullptr;
  Kind kind = kConv;
  // W (Conv, ConvTranspose), B (Gemm, MatMul): type and dims only; the values are decoded when
  // a fold scales them (a pure shift never reads them: weights can be hundreds of MiB).
  FloatConstantType weight;
  std::optional<FloatConstant> bias;  // Conv's B, Gemm's C
  int64_t channels = 0;               // output channels
  int64_t output_rank = 0;            // rank of the op's output
  int64_t channel_axis = 0;           // axis of the output holding the channels
};

// `node` as a LinearOp: a Conv/ConvTranspose/Gemm/MatMul whose attributes, opset and constant
// float weights (and bias) make folding valid; nullopt otherwise. A MatMul qualifies when its
// product is 2-D (the first operand's rank is known to be 2).
std::optional<LinearOp> read_linear(ir::Node& node);

// A per-channel constant for `op`'s output: `v` must broadcast against the output without
// growing it and vary at most along the channel axis (e.g. [C, 1, 1] or [1, C, 1, 1] for a 2-D
// Conv, [N] or [1, N] for Gemm; a scalar applies to every channel). Its values, one per channel.
std::optional<std::vector<double>> per_channel(const LinearOp& op, const ir::Value* v);

// Rewrites `op` so that it computes scale[c] * y + shift[c] on output channel c (`shift` empty:
// zero): new weight and bias constants (the old ones may be shared and are dropped only when
// unused), Gemm's beta folded into C, a MatMul replaced by a Gemm. Returns the value holding the
// new result (the caller replaces the affine node's output with it), or nullptr with nothing
// changed when a folded value does not fit the weights' type.
ir::Value* fold_channel_affine(Rewriter& rw, const LinearOp& op, const std::vector<double>& scale,
                               const std::vector<double>& shift);

// ---------------------------------------------------------- the [K, N] weight of a product
// What the weight rewrites (quantize_weights_int4, factorize_low_rank) read of a MatMul-like
// node's constant weight, without decoding it.

// The dims of `w` when it is a constant float32 2-D tensor of at least `min_elements` elements
// (its payload in memory or readable through the model's ExternalData); nullopt otherwise.
std::optional<std::pair<int64_t, int64_t>> constant_matrix_dims(const ir::Value* w,
                                                                int64_t min_elements);

// The weight of a MatMul-like node: `source` [rows, cols] read as the [K, N] matrix either as is
// or transposed (through Transpose(perm [1, 0]), or Gemm's transB).
struct WeightRef {
  ir::Value* source = nullptr;
  bool transposed = false;
  ir::Node* transpose = nullptr;  // the Transpose node read, when there is one
  int64_t k = 0, n = 0;
};

// `w`, a MatMul's B (Gemm's, read transposed when `trans_b`), as a WeightRef: a constant_matrix
// itself, or the Transpose(perm [1, 0]) of one (not with `trans_b`). nullopt otherwise.
std::optional<WeightRef> read_matmul_weight(ir::Value* w, bool trans_b, int64_t min_elements);

}  // namespace graft
