// quantize_weights_int4: weight-only 4-bit quantization, block-wise round to nearest, in standard
// ONNX ops (opset 21):
//
//   MatMul(x, W)            W: constant float32 [K, N]
//     -> MatMul(x, DequantizeLinear<axis=0, block_size=B>(W_q, scale[, zero_point]))
//   Gemm(x, B, C)           B constant, transA = 0; transB handled by reading B transposed
//     -> MatMul(x, DequantizeLinear(...)) [* alpha] [+ beta * C]
//   Gather(E, ids)          E: constant float32 [V, D] (embeddings), axis 0
//     -> Gather(DequantizeLinear<axis=1, block_size=B>(E_q, scale[, zero_point]), ids)
//   Gather<axis=1>(E, ids)  E: [D, V] (a table stored transposed, shared with a tied LM head)
//     -> Gather<axis=1>(DequantizeLinear<axis=0, block_size=B>(E_q, scale[, zero_point]), ids)
//
// W_q is int4 (option symmetric, the default: zero point 0, values in [-8, 7], scale max|w| / 7 per
// block before the search) or uint4 with a uint4 zero point (range [min(0, min w), max(0, max w)]
// over 15 steps per block before the search). Option scale_search (default on) picks each block's
// scale of least squared error (block_scale below). Blocks of B (block_size: 16..256, a power of
// two) run along K, the reduction axis: scale [ceil(K / B), N]. This is the form ONNX Runtime
// (1.30, default optimization level) fuses into its MatMulNBits kernel; a Gather of int4 is not
// valid ONNX (Gather-13's types stop at IR 4's), so the table is dequantized before the Gather
// (ONNX Runtime runs that DequantizeLinear on the whole table per run: a 32000 x 1024 table costs
// 371x the float Gather; exclude_ops=Gather keeps tables float). For a target whose ONNX Runtime
// has com.microsoft GatherBlockQuantized (--target onnxruntime:1.20 or later) the table is read by
// it instead: GatherBlockQuantized<gather_axis=0, quantize_axis=1, block_size=B, bits=4>(E_q, ids,
// scale[, zero_point]) dequantizes only the rows gathered, from the same int4 initializer.
//
// For a target whose ONNX Runtime has com.microsoft MatMulNBits (option matmul_nbits, on by
// default) a MatMul/Gemm weight not shared with a quantized table is written in that op's own
// form instead: MatMulNBits<K, N, bits=4, block_size=B, accuracy_level>(x, B_q [N, blocks, B/2]
// uint8, scale [N * blocks][, zero_point]) (the int4 values plus 8, its default zero point), the
// node ONNX Runtime would otherwise build from DequantizeLinear + MatMul at every session
// creation: the same values, the same kernel, less creation time.
//
// Tied embeddings: an embedding read by a Gather and, through Transpose(perm [1, 0]), by a MatMul
// (the LM head) is quantized once, in the table's layout (blocks along D, which is the MatMul's
// K): the MatMul reads DequantizeLinear<axis=0>(Transpose(E_q), Transpose(scale)), which ONNX
// Runtime folds and fuses into MatMulNBits. Any weight read by several nodes is quantized once
// per blocking axis (DequantizeLinear nodes per reader, as MatMulNBits fusion wants them).
//
// LOSSY on purpose (PassInfo.lossy, by name only): every weight moves by at most half a step of
// its block (scale / 2); activations stay float. The gate is in docs/quantization.md.
//
// The model's default-domain opset is raised to 21 first (core/passes/opset.h), only when some
// weight qualifies; when it cannot be raised nothing changes and the reason is reported as a
// finding. If nothing is quantized in the end the raise is undone too.
//
// Left alone: weights that are not constant float32 2-D tensors, have fewer than
// min_weight_elements elements, hold a NaN or infinity, or have a block whose scale underflows
// float; activations that are not float32; Gemm with transA = 1, unknown attributes, or beta != 1
// with a C that is not constant; Gather of a table that is not 2-D; excluded ops and nodes.
//
// Memory: a weight is read in place (Float32View), block by block; the only allocations are the
// packed result (half a byte per element) and the scales.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "core/base/status.h"
#include "core/ir/tensor.h"
#include "core/passes/float32_view.h"
#include "core/passes/opset.h"
#include "core/passes/passes.h"
#include "core/passes/quantization.h"
#include "core/passes/rules.h"
#include "core/passes/weights.h"

namespace graft {

namespace {

using onnx::TensorProto;

constexpr char kBlockSize[] = "block_size";
constexpr char kSymmetric[] = "symmetric";
constexpr char kScaleSearch[] = "scale_search";
constexpr char kMatMulNBits[] = "matmul_nbits";
constexpr char kAccuracyLevel[] = "accuracy_level";

// DequantizeLinear's block_size and the 4-bit types exist from opset 21.
constexpr int64_t kOpset = 21;

// The quantized form of one constant: blocks along `axis` of the source [rows, cols]. Stored in
// the source's layout, or transposed (the MatMul layout [K, N] when the source is [N, K]).
struct Quantized {
  ir::Value* q = nullptr;
  ir::Value* scale = nullptr;
  ir::Value* zero_point = nullptr;  // uint4 only
  bool transposed = false;
};

// What a run has made so far. Edited with the model: an entry made by a rule that gives up
// (its edits undone by the journal) is undone with them, so it never names a dead value.
struct Made {
  std::map<std::pair<const ir::Value*, int>, Quantized> quantized;  // (source, blocked axis)
  uint64_t weight_bytes = 0;  // initializer bytes so far (the model's, plus what was added)
};

struct Config {
  int64_t block = 32;
  bool symmetric = true;
  bool scale_search = true;
  WeightFilter filter;
  uint64_t max_weight_bytes = 0;  // 0 = no limit
  // Tables are read by com.microsoft GatherBlockQuantized (the target's ONNX Runtime has it):
  // only the rows gathered are dequantized.
  bool gather_block_quantized = false;
  // MatMul/Gemm weights are written as com.microsoft MatMulNBits (the target's ONNX Runtime has
  // it and option matmul_nbits is on), with this accuracy_level.
  bool matmul_nbits = false;
  int64_t accuracy_level = 4;
  // The opset the rules need: 21 (DequantizeLinear's block_size and the 4-bit types), or any
  // when every weight becomes MatMulNBits (uint8 data) and no table is quantized.
  int64_t min_opset = kOpset;
  std::shared_ptr<Made> made = std::make_shared<Made>();
};

std::optional<std::pair<int64_t, int64_t>> weight_dims(const ir::Value* w, const Config& cfg) {
  return constant_matrix_dims(w, cfg.filter.min_elements);
}

// The axis a Gather reads a 2-D table along (0: rows, an embedding [V, D]; 1: columns, the same
// table stored [D, V], as one transposed copy shared with a tied LM head is), or -1.
int64_t gather_axis(const ir::Node& n) {
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += 2;
  return axis == 0 || axis == 1 ? axis : -1;
}

// A Gather the gather rule would rewrite: a 2-D table, quantized in blocks across the axis the
// Gather reads along (so that a gathered row or column holds whole blocks).
bool gather_candidate(const ir::Node& n, const Config& cfg) {
  return n.is("Gather") && !cfg.filter.skips(n, "Gather") && n.inputs().size() == 2 && n.input(1) &&
         n.outputs().size() == 1 && n.output(0) && only_attributes(n, {"axis"}) &&
         gather_axis(n) >= 0 && weight_dims(n.input(0), cfg);
}

// A Gather candidate GatherBlockQuantized will read (the target has it): along rows, or along
// columns when the indices' rank is known (the rows it gives are transposed back).
bool read_by_gbq(const ir::Node& gather, const Config& cfg) {
  return cfg.gather_block_quantized && (gather_axis(gather) == 0 || gather.input(1)->rank());
}

// `table` is also read by a Gather that will be quantized (and, with `columns_by_gbq`, that
// gathers its columns through GatherBlockQuantized): its quantized form is kept in the layout
// that Gather reads, so that one copy serves both.
bool gathered(const ir::Value* table, const Config& cfg, bool columns_by_gbq = false) {
  for (const ir::Use& u : table->uses())
    if (u.index == 0 && gather_candidate(*u.node, cfg) &&
        (!columns_by_gbq || (gather_axis(*u.node) == 1 && read_by_gbq(*u.node, cfg))))
      return true;
  return false;
}

std::optional<WeightRef> matmul_weight(ir::Value* w, bool trans_b, const Config& cfg) {
  return read_matmul_weight(w, trans_b, cfg.filter.min_elements);
}

// The packed values, scales and zero points of a [K, N] matrix read through `at(r, c)`, blocks of
// cfg.block along K. Stored [K, N] (scales [ceil(K / B), N]) or, with `nk`, [N, K] (scales [N,
// ceil(K / B)]). nullopt for a non-finite value or a block whose scale underflows.
struct Packed {
  std::string q;                   // ceil(K * N / 2) bytes
  std::vector<float> scale;        // blocks * N
  std::vector<int8_t> zero_point;  // blocks * N, uint4 only
};

// One block's scale and zero point (0 for int4). Round to nearest over the block's range, or with
// cfg.scale_search the candidate of least squared reconstruction error: the range shrunk by
// 1 - 0.04 j (j = 0..7: clipping a few outliers buys finer steps for the rest), for int4 also
// max|w| / 8 (the range [-8, 7] used to its negative end), then the scale refitted by least
// squares to the values the best candidate rounds to (kept when the error drops). As the
// clip searches of HQQ, Intel Neural Compressor and AutoAWQ do, on the weights alone (no
// activations). The weights' squared error, [256, 256] seeded (ScaleSearchLowersTheWeightsSquared-
// Error): Gaussian 0.79x (int4) and 0.91x (uint4); Student's t with every 32nd input channel 8x
// larger (an outlier in every block) 0.86x and 0.95x. A block whose values its range represents
// exactly keeps it: ties go to the first candidate. nullopt when a scale underflows.
struct BlockScale {
  float scale = 1.0f;  // an all-zero block: scale 1, zero point 0, values 0
  int zero_point = 0;
};

// The integer `v` rounds to at `c`: int4 in [-8, 7], uint4 in [0, 15] (zero point included).
double level(double v, const BlockScale& c, const Config& cfg) {
  return std::clamp(std::nearbyint(v / c.scale) + c.zero_point, cfg.symmetric ? -8.0 : 0.0,
                    cfg.symmetric ? 7.0 : 15.0);
}

// The block's `len` values `v` (finite): their range, holding 0, then the choice above.
std::optional<BlockScale> block_scale(const float* v, int64_t len, const Config& cfg) {
  double lo = 0, hi = 0;
  for (int64_t i = 0; i < len; ++i) {
    lo = std::min<double>(lo, v[i]);
    hi = std::max<double>(hi, v[i]);
  }
  BlockScale best;
  if (lo == 0 && hi == 0) return best;
  auto error = [&](const BlockScale& c) {
    double e = 0;
    for (int64_t i = 0; i < len; ++i) {
      const double d = v[i] - c.scale * (level(v[i], c, cfg) - c.zero_point);
      e += d * d;
    }
    return e;
  };
  auto candidate = [&](double l, double h) {
    BlockScale c;
    const double scale = cfg.symmetric ? std::max(-l, h) / 7.0 : (h - l) / 15.0;
    c.scale = static_cast<float>(scale);
    if (!cfg.symmetric)
      c.zero_point = static_cast<int>(std::clamp(std::nearbyint(-l / c.scale), 0.0, 15.0));
    return c;
  };
  best = candidate(lo, hi);
  if (!(best.scale >= FLT_MIN) || !std::isfinite(best.scale)) return std::nullopt;
  if (!cfg.scale_search) return best;
  double best_error = error(best);
  auto consider = [&](BlockScale c) {
    if (!(c.scale >= FLT_MIN) || !std::isfinite(c.scale)) return;
    const double e = error(c);
    if (e < best_error) best = c, best_error = e;
  };
  for (int j = 1; j < 8 && best_error > 0; ++j) {
    const double shrink = 1.0 - 0.04 * j;
    consider(candidate(lo * shrink, hi * shrink));
  }
  if (cfg.symmetric && best_error > 0) consider({static_cast<float>(std::max(-lo, hi) / 8.0), 0});
  // Least squares for the scale with the integers fixed, sum(w q') / sum(q'^2) with q' = q - zp,
  // alternated with rounding to it (and, for uint4, with the zero point one step either way)
  // while the error drops, at most 3 rounds.
  auto refit = [&](BlockScale c) {
    double wq = 0, qq = 0;
    for (int64_t i = 0; i < len; ++i) {
      const double q = level(v[i], c, cfg) - c.zero_point;
      wq += v[i] * q;
      qq += q * q;
    }
    return BlockScale{qq > 0 ? static_cast<float>(wq / qq) : 0.0f, c.zero_point};
  };
  for (int round = 0; round < 3 && best_error > 0; ++round) {
    const double before = best_error;
    consider(refit(best));
    if (!cfg.symmetric) {
      const BlockScale at = best;
      for (int step : {-1, 1})
        if (at.zero_point + step >= 0 && at.zero_point + step <= 15)
          consider(refit({at.scale, at.zero_point + step}));
    }
    if (!(best_error < before)) break;
  }
  return best;
}

template <typename At>
std::optional<Packed> quantize_blocks(const At& at, int64_t k, int64_t n, bool nk,
                                      const Config& cfg) {
  const int64_t blocks = k / cfg.block + (k % cfg.block != 0);
  Packed p;
  p.q.assign(static_cast<size_t>((k * n + 1) / 2), '\0');
  p.scale.assign(static_cast<size_t>(blocks * n), 1.0f);
  if (!cfg.symmetric) p.zero_point.assign(static_cast<size_t>(blocks * n), 0);
  // One block row, column by column: values[c * block + (r - r0)].
  std::vector<float> values(static_cast<size_t>(n * cfg.block));
  auto put = [&](int64_t index, int v) {
    const auto nibble = static_cast<uint8_t>(v & 0x0f);
    char& byte = p.q[static_cast<size_t>(index / 2)];
    byte = static_cast<char>(static_cast<uint8_t>(byte) | (index % 2 ? nibble << 4 : nibble));
  };
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = b * cfg.block, r1 = std::min(k, r0 + cfg.block), len = r1 - r0;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < n; ++c) {
        const float v = at(r, c);
        if (!std::isfinite(v)) return std::nullopt;
        values[static_cast<size_t>(c * cfg.block + (r - r0))] = v;
      }
    for (int64_t c = 0; c < n; ++c) {
      const float* v = values.data() + c * cfg.block;
      const auto chosen = block_scale(v, len, cfg);
      if (!chosen) return std::nullopt;
      const size_t s = static_cast<size_t>(nk ? c * blocks + b : b * n + c);
      p.scale[s] = chosen->scale;
      if (!cfg.symmetric) p.zero_point[s] = static_cast<int8_t>(chosen->zero_point);
      for (int64_t r = r0; r < r1; ++r)
        put(nk ? c * k + r : r * n + c, static_cast<int>(level(v[r - r0], *chosen, cfg)));
    }
  }
  return p;
}

// MatMulNBits' layout of packed [N, K] values (nk, as quantize_blocks writes them): B [N, blocks,
// B / 2] uint8, each column's K values padded to whole blocks with the zero point, int4 values
// stored with 8 added (its default zero point; uint4 ones as they are); scales [N * blocks] in
// the same order; uint4 zero points [N * ceil(blocks / 2)], two a byte, the low nibble first.
void to_matmul_nbits(Packed& p, int64_t k, int64_t n, const Config& cfg) {
  const int64_t blocks = k / cfg.block + (k % cfg.block != 0), padded = blocks * cfg.block;
  std::vector<int8_t> values(static_cast<size_t>(n * k));
  ir::unpack_4bit(p.q.data(), values.size(), cfg.symmetric, values.data());
  std::vector<int8_t> b(static_cast<size_t>(n * padded));
  for (int64_t c = 0; c < n; ++c)
    for (int64_t r = 0; r < padded; ++r) {
      const size_t zp = static_cast<size_t>(c * blocks + r / cfg.block);
      b[static_cast<size_t>(c * padded + r)] = static_cast<int8_t>(
          r < k ? values[static_cast<size_t>(c * k + r)] + (cfg.symmetric ? 8 : 0)
                : (cfg.symmetric ? 8 : p.zero_point[zp]));
    }
  p.q = ir::pack_4bit(b.data(), b.size());
  if (cfg.symmetric) return;
  // Each column's zero points padded to a whole byte.
  const int64_t cols = (blocks + 1) / 2;
  std::vector<int8_t> zp(static_cast<size_t>(n * cols * 2), 0);
  for (int64_t c = 0; c < n; ++c)
    for (int64_t kb = 0; kb < blocks; ++kb)
      zp[static_cast<size_t>(c * cols * 2 + kb)] =
          p.zero_point[static_cast<size_t>(c * blocks + kb)];
  p.zero_point = std::move(zp);
}

// How a quantized weight is stored: [K, N] (blocks along axis 0), [N, K] (a transposed source's
// own layout, or a [K, N] source transposed, as GatherBlockQuantized reads a table gathered along
// columns), or MatMulNBits' packed uint8 [N, blocks, B / 2].
enum class Layout { kKN = 0, kNK = 2, kMatMulNBits = 4 };

// The quantized form of `ref`'s source (blocks along the [K, N] matrix's K), made once per
// source, axis and layout. With `any_layout`, a copy already made in the other of [K, N] and
// [N, K] is returned (the caller reads it through Transposes): a head after its table's Gather
// reuses the table's copy.
std::optional<Quantized> quantized(const WeightRef& ref, Layout layout, Config& cfg, Rewriter& rw,
                                   bool any_layout = false) {
  const bool nk = layout != Layout::kKN;
  const int axis = ref.transposed ? 1 : 0;
  const std::pair<const ir::Value*, int> key{ref.source, axis + static_cast<int>(layout)};
  auto it = cfg.made->quantized.find(key);
  if (it != cfg.made->quantized.end()) return it->second;
  if (any_layout && layout != Layout::kMatMulNBits) {
    it = cfg.made->quantized.find({ref.source, axis + (nk ? 0 : 2)});
    if (it != cfg.made->quantized.end()) return it->second;
  }
  const int64_t k = ref.k, n = ref.n, blocks = k / cfg.block + (k % cfg.block != 0);
  // MatMulNBits pads each column to whole blocks.
  const int64_t stored = layout == Layout::kMatMulNBits ? n * blocks * cfg.block : k * n;
  const uint64_t added = static_cast<uint64_t>((stored + 1) / 2) +
                         static_cast<uint64_t>(blocks * n) * (cfg.symmetric ? 4 : 5) + 64;
  if (cfg.max_weight_bytes != 0 && cfg.made->weight_bytes + added > cfg.max_weight_bytes)
    return std::nullopt;
  std::optional<Packed> p;
  {
    auto w = float32_constant(ref.source);  // read in place, released after quantizing
    if (!w || w->size() != k * n) return std::nullopt;
    if (ref.transposed)
      p = quantize_blocks([&](int64_t r, int64_t c) { return (*w)[c * k + r]; }, k, n, nk, cfg);
    else
      p = quantize_blocks([&](int64_t r, int64_t c) { return (*w)[r * n + c]; }, k, n, nk, cfg);
  }
  if (!p) return std::nullopt;
  ir::Graph& g = *ref.source->owner();
  const std::string name = ref.source->name();
  Quantized out;
  if (layout == Layout::kMatMulNBits) {
    to_matmul_nbits(*p, k, n, cfg);
    TensorProto qt;
    qt.set_data_type(TensorProto::UINT8);
    for (int64_t d : {n, blocks, cfg.block / 2}) qt.add_dims(d);
    qt.set_raw_data(std::move(p->q));
    out.q = rw.add_constant(g, std::move(qt), name + "_nbits");
    out.scale =
        rw.add_constant(g, ir::make_float32_tensor({n * blocks}, p->scale), name + "_nbits_scale");
    if (!cfg.symmetric) {
      TensorProto zt;
      zt.set_data_type(TensorProto::UINT8);
      zt.add_dims(static_cast<int64_t>(p->zero_point.size() / 2));
      zt.set_raw_data(ir::pack_4bit(p->zero_point.data(), p->zero_point.size()));
      out.zero_point = rw.add_constant(g, std::move(zt), name + "_nbits_zero_point");
    }
  } else {
    const std::vector<int64_t> dims = nk ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n};
    const std::vector<int64_t> sdims =
        nk ? std::vector<int64_t>{n, blocks} : std::vector<int64_t>{blocks, n};
    out.transposed = nk;
    TensorProto qt;
    qt.set_data_type(cfg.symmetric ? ir::kInt4 : ir::kUint4);
    for (int64_t d : dims) qt.add_dims(d);
    qt.set_raw_data(std::move(p->q));
    out.q = rw.add_constant(g, std::move(qt), name + "_q4");
    out.scale = rw.add_constant(g, ir::make_float32_tensor(sdims, p->scale), name + "_scale");
    if (!cfg.symmetric)
      out.zero_point = rw.add_constant(g, ir::make_4bit_tensor(ir::kUint4, sdims, p->zero_point),
                                       name + "_zero_point");
  }
  cfg.made->quantized[key] = out;
  cfg.made->weight_bytes += added;
  rw.model().on_undo([made = cfg.made, key, added] {
    made->quantized.erase(key);
    made->weight_bytes -= added;
  });
  return out;
}

// DequantizeLinear of `inputs` in `g` for `reader`: blocks along `axis` of what it reads.
ir::Value* dequantize(ir::Graph& g, const std::vector<ir::Value*>& inputs, int64_t axis,
                      const Config& cfg, const ir::Node& reader, Rewriter& rw) {
  ir::Node* dq = rw.add_node(g, "DequantizeLinear", inputs, 1, &reader);
  rw.set_attr(dq, int_attr("axis", axis));
  rw.set_attr(dq, int_attr(kBlockSize, cfg.block));
  return dq->output(0);
}

// The dequantized [K, N] weight for a MatMul-like `node`.
ir::Value* dequantized_weight(const WeightRef& ref, ir::Node& node, Config& cfg, Rewriter& rw) {
  if (node.graph()->opset("") < kOpset)
    return no_match(node, "the DequantizeLinear form needs opset 21, which was not raised");
  // Tied to a Gather: one copy in the table's layout, read here through Transposes (which
  // ONNX Runtime folds). So is a [K, N] table GatherBlockQuantized reads along columns (it is
  // stored [N, K] for it). Otherwise [K, N], read as is.
  const bool nk = ref.transposed ? gathered(ref.source, cfg)
                                 : gathered(ref.source, cfg, /*columns_by_gbq=*/true);
  auto q = quantized(ref, nk ? Layout::kNK : Layout::kKN, cfg, rw, /*any_layout=*/true);
  if (!q)
    return no_match(node,
                    "the weight holds a NaN or an infinity, a block's scale would "
                    "underflow, or the weight budget is spent");
  ir::Graph& g = *node.graph();
  std::vector<ir::Value*> inputs{q->q, q->scale};
  if (q->zero_point) inputs.push_back(q->zero_point);
  if (q->transposed)
    for (ir::Value*& v : inputs) {
      ir::Node* t = rw.add_node(g, "Transpose", {v}, 1, &node);
      rw.set_attr(t, ints_attr("perm", {1, 0}));
      v = t->output(0);
    }
  return dequantize(g, inputs, 0, cfg, node, rw);
}

// Whether a MatMul-like node reading `ref` with activation `x` becomes MatMulNBits: the target
// has it, the activation has a known rank of at least 2, and no Gather reads the weight (a tied
// table keeps one copy, in the Gather's layout, which the head reads through DequantizeLinear).
bool use_matmul_nbits(const WeightRef& ref, const ir::Value* x, const Config& cfg) {
  const auto r = x->rank();
  if (!cfg.matmul_nbits || !r || *r < 2 || gathered(ref.source, cfg) ||
      gathered(ref.source, cfg, /*columns_by_gbq=*/true))
    return false;
  // A Gather already rewritten made the table's copy ([K, N] or [N, K], blocked along either
  // axis: the keys below Layout::kMatMulNBits).
  for (int key : {0, 1, 2, 3})
    if (cfg.made->quantized.count({ref.source, key})) return false;
  return true;
}

// MatMulNBits(x, B, scales[, zero_points]) <K, N, bits = 4, block_size, accuracy_level>: x @ the
// quantized [K, N] weight, for `node`.
ir::Value* matmul_nbits(ir::Value* x, const WeightRef& ref, ir::Node& node, Config& cfg,
                        Rewriter& rw) {
  auto q = quantized(ref, Layout::kMatMulNBits, cfg, rw);
  if (!q)
    return no_match(node,
                    "the weight holds a NaN or an infinity, a block's scale would "
                    "underflow, or the weight budget is spent");
  std::vector<ir::Value*> inputs{x, q->q, q->scale};
  if (q->zero_point) inputs.push_back(q->zero_point);
  ir::Node* mm = rw.add_node(*node.graph(), "MatMulNBits", inputs, 1, &node, kMicrosoftDomain);
  rw.set_attr(mm, int_attr("K", ref.k));
  rw.set_attr(mm, int_attr("N", ref.n));
  rw.set_attr(mm, int_attr("bits", 4));
  rw.set_attr(mm, int_attr(kBlockSize, cfg.block));
  rw.set_attr(mm, int_attr(kAccuracyLevel, cfg.accuracy_level));
  return mm->output(0);
}

bool float32_activation(const ir::Node& node, const ir::Value* x) {
  if (!x || x->elem_type() != TensorProto::FLOAT) return false;
  const int32_t out = node.output(0) ? node.output(0)->elem_type() : 0;
  return out == 0 || out == TensorProto::FLOAT;
}

// After a rewrite: the Transpose the old weight was read through goes when nothing reads it.
void drop_transpose(const WeightRef& ref, Rewriter& rw) {
  if (ref.transpose && !ref.transpose->dead() && ref.transpose->output(0)->use_count() == 0)
    rw.erase(ref.transpose);
}

bool quantize_matmul(ir::Node& node, Config& cfg, Rewriter& rw) {
  if (cfg.filter.skips(node, "MatMul") || node.inputs().size() != 2 || node.outputs().size() != 1 ||
      !node.attributes().empty())
    return false;
  if (!float32_activation(node, node.input(0)))
    return no_match(node, "the activation is not known to be float32");
  auto ref = matmul_weight(node.input(1), false, cfg);
  if (!ref)
    return no_match(node,
                    "the weight is not a constant float32 2-D tensor (or its Transpose) "
                    "of at least min_weight_elements elements");
  if (use_matmul_nbits(*ref, node.input(0), cfg)) {
    ir::Value* y = matmul_nbits(node.input(0), *ref, node, cfg, rw);
    if (!y || !rw.replace_node(&node, {y})) return false;
  } else {
    ir::Value* w = dequantized_weight(*ref, node, cfg, rw);
    if (!w) return false;
    rw.set_input(&node, 1, w);
  }
  drop_transpose(*ref, rw);
  return true;
}

// Gemm(A, B, C) = alpha * A * B' + beta * C -> MatMul(A, dequantized B') [* alpha] [+ beta * C].
bool quantize_gemm(ir::Node& node, Config& cfg, Rewriter& rw) {
  if (cfg.filter.skips(node, "Gemm") || node.inputs().size() < 2 || node.inputs().size() > 3 ||
      node.outputs().size() != 1 || !node.output(0) ||
      !only_attributes(node, {"alpha", "beta", "transA", "transB"}))
    return false;
  if (node.attr_int("transA", 0) != 0) return no_match(node, "transA is set");
  const double alpha = node.attr_float("alpha", 1.0f), beta = node.attr_float("beta", 1.0f);
  if (!std::isfinite(alpha) || !std::isfinite(beta)) return no_match(node, "alpha or beta");
  ir::Value* x = node.input(0);
  if (!float32_activation(node, x)) return no_match(node, "A is not known to be float32");
  if (const auto r = x->rank(); r && *r != 2) return no_match(node, "A is not 2-D");
  ir::Value* c = node.input(2);
  if (c && c->elem_type() != TensorProto::FLOAT) return no_match(node, "C is not float32");
  std::optional<FloatConstant> scaled_c;
  if (c && beta != 1 && beta != 0) {
    scaled_c = float_constant(c);
    if (!scaled_c || scaled_c->dtype != TensorProto::FLOAT)
      return no_match(node, "beta is not 1 and C is not a constant");
    for (double& v : scaled_c->values) v *= beta;
    if (!ir::fits_float_type(TensorProto::FLOAT, scaled_c->values))
      return no_match(node, "beta * C overflows float");
  }
  auto ref = matmul_weight(node.input(1), node.attr_int("transB", 0) != 0, cfg);
  if (!ref)
    return no_match(node,
                    "B is not a constant float32 2-D tensor of at least "
                    "min_weight_elements elements");
  ir::Graph& g = *node.graph();
  const std::string name = node.output(0)->name();
  ir::Value* y = nullptr;
  if (use_matmul_nbits(*ref, x, cfg)) {
    y = matmul_nbits(x, *ref, node, cfg, rw);
  } else if (ir::Value* w = dequantized_weight(*ref, node, cfg, rw)) {
    y = rw.add_node(g, "MatMul", {x, w}, 1, &node)->output(0);
  }
  if (!y) return false;
  if (alpha != 1) {
    ir::Value* a = rw.add_constant(g, ir::make_float32_tensor({}, {static_cast<float>(alpha)}),
                                   name + "_alpha");
    y = rw.add_node(g, "Mul", {y, a}, 1, &node)->output(0);
  }
  if (c && beta != 0) {
    if (scaled_c)
      c = rw.add_constant(
          g, ir::make_float_tensor(TensorProto::FLOAT, scaled_c->dims, scaled_c->values),
          name + "_C_scaled");
    y = rw.add_node(g, "Add", {y, c}, 1, &node)->output(0);
  }
  if (!rw.replace_node(&node, {y})) return false;
  drop_transpose(*ref, rw);
  return true;
}

// Gather(E, ids) -> Gather(DequantizeLinear<axis=1>(E_q, scale[, zero_point]), ids); along
// columns (axis 1, E [D, V]) DequantizeLinear<axis=0>; for ONNX Runtime 1.20+ one
// GatherBlockQuantized instead.
bool quantize_gather(ir::Node& node, Config& cfg, Rewriter& rw) {
  if (!gather_candidate(node, cfg)) {
    if (gather_axis(node) < 0) return no_match(node, "the axis is not one of a 2-D table's");
    return false;
  }
  auto dims = weight_dims(node.input(0), cfg);
  // Along rows, E [V, D]: blocks along D, the table's layout (stored [V, D]). Along columns,
  // E [D, V]: the MatMul layout (blocks along axis 0), which a tied LM head reading E shares.
  const int64_t axis = gather_axis(node);
  WeightRef ref{.source = node.input(0),
                .transposed = axis == 0,
                .k = axis == 0 ? dims->second : dims->first,
                .n = axis == 0 ? dims->first : dims->second};
  // GatherBlockQuantized gathers rows of a [V, D] table: a table gathered along columns is
  // stored transposed for it, and its result transposed back.
  const bool gbq = read_by_gbq(node, cfg);
  auto q = quantized(ref, axis == 0 || gbq ? Layout::kNK : Layout::kKN, cfg, rw);
  if (!q)
    return no_match(node,
                    "the table holds a NaN or an infinity, a block's scale would "
                    "underflow, or the weight budget is spent");
  ir::Graph& g = *node.graph();
  if (gbq) {
    // GatherBlockQuantized(E_q [V, D], ids, scale[, zero_point]): the same int4 table (a tied
    // LM head still reads it through DequantizeLinear), its rows gathered before they are
    // dequantized.
    std::vector<ir::Value*> inputs{q->q, node.input(1), q->scale};
    if (q->zero_point) inputs.push_back(q->zero_point);
    ir::Node* gq = rw.add_node(g, "GatherBlockQuantized", inputs, 1, &node, kMicrosoftDomain);
    rw.set_attr(gq, int_attr("gather_axis", 0));
    rw.set_attr(gq, int_attr("quantize_axis", 1));
    rw.set_attr(gq, int_attr("block_size", cfg.block));
    rw.set_attr(gq, int_attr("bits", 4));
    ir::Value* y = gq->output(0);
    if (axis == 1) {
      // [ids..., D] -> [D, ids...], what Gather<axis=1> of [D, V] gives.
      const int64_t ids_rank = *node.input(1)->rank();
      std::vector<int64_t> perm{ids_rank};
      for (int64_t i = 0; i < ids_rank; ++i) perm.push_back(i);
      ir::Node* t = rw.add_node(g, "Transpose", {y}, 1, &node);
      rw.set_attr(t, ints_attr("perm", perm));
      y = t->output(0);
    }
    return rw.replace_node(&node, {y});
  }
  std::vector<ir::Value*> inputs{q->q, q->scale};
  if (q->zero_point) inputs.push_back(q->zero_point);
  ir::Value* table = dequantize(g, inputs, 1 - axis, cfg, node, rw);
  ir::Node* gather = rw.add_node(g, "Gather", {table, node.input(1)}, 1, &node);
  for (const auto& a : node.attributes()) rw.set_attr(gather, a);
  return rw.replace_node(&node, {gather->output(0)});
}

// What a run would quantize, from headers and facts only: whether anything (once the opset
// allows it), and whether something in the standard form (DequantizeLinear, int4 tensors: opset
// 21 and IR 10): a table, or a weight MatMulNBits cannot take.
struct Candidates {
  bool any = false;
  bool standard_form = false;
};

Candidates candidates(const ir::Model& model, const Config& cfg) {
  Candidates c;
  for (ir::Graph* g : model.all_graphs())
    for (ir::Node* n : g->nodes()) {
      if (n->is("Gather") && gather_candidate(*n, cfg)) return {true, true};
      const bool mm = n->is("MatMul") && !cfg.filter.skips(*n, "MatMul") && n->attributes().empty();
      const bool gemm =
          n->is("Gemm") && !cfg.filter.skips(*n, "Gemm") && n->attr_int("transA", 0) == 0;
      if (!(mm || gemm) || n->inputs().size() < 2 || n->outputs().size() != 1 ||
          !float32_activation(*n, n->input(0)))
        continue;
      auto ref = matmul_weight(n->input(1), gemm && n->attr_int("transB", 0) != 0, cfg);
      if (!ref) continue;
      c.any = true;
      if (!use_matmul_nbits(*ref, n->input(0), cfg)) return {true, true};
    }
  return c;
}

std::shared_ptr<Config> make_config(ir::Model& model, const PassContext& ctx) {
  auto cfg = std::make_shared<Config>();
  cfg->block = std::stoll(ctx.enum_option(kBlockSize));
  cfg->symmetric = ctx.bool_option(kSymmetric);
  cfg->scale_search = ctx.bool_option(kScaleSearch);
  cfg->filter = weight_filter(ctx);
  cfg->max_weight_bytes = ctx.max_weight_bytes;
  cfg->gather_block_quantized =
      ctx.target.has_kernel(kMicrosoftDomain, "GatherBlockQuantized", TensorProto::FLOAT) &&
      model.graph().opset(kMicrosoftDomain) <= 1;
  cfg->matmul_nbits = ctx.bool_option(kMatMulNBits) &&
                      ctx.target.has_kernel(kMicrosoftDomain, "MatMulNBits", TensorProto::FLOAT) &&
                      model.graph().opset(kMicrosoftDomain) <= 1;
  cfg->accuracy_level = ctx.int_option(kAccuracyLevel);
  cfg->made->weight_bytes = model.initializer_bytes();
  cfg->min_opset = cfg->matmul_nbits && !candidates(model, *cfg).standard_form ? 1 : kOpset;
  return cfg;
}

std::vector<Rule> rules_for(const std::shared_ptr<Config>& cfg) {
  return {{"quantize_matmul",
           {"MatMul"},
           [cfg](ir::Node& n, Rewriter& rw) { return quantize_matmul(n, *cfg, rw); },
           "",
           cfg->min_opset},
          {"quantize_gemm",
           {"Gemm"},
           [cfg](ir::Node& n, Rewriter& rw) { return quantize_gemm(n, *cfg, rw); },
           "",
           cfg->min_opset},
          {"quantize_gather",
           {"Gather"},
           [cfg](ir::Node& n, Rewriter& rw) { return quantize_gather(n, *cfg, rw); },
           "",
           cfg->min_opset}};
}

class QuantizeWeightsInt4 : public RulePass {
 public:
  QuantizeWeightsInt4()
      : RulePass("quantize_weights_int4",
                 [](ir::Model& model, const PassContext& ctx) {
                   return rules_for(make_config(model, ctx));
                 },
                 {"quantize_matmul", "quantize_gemm", "quantize_gather", "raise_opset"}) {}

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override {
    auto cfg = make_config(model, ctx);
    if (!candidates(model, *cfg).any) return PassResult{};
    auto body = [&]() -> absl::StatusOr<PassResult> {
      // Every weight MatMulNBits: the model's opset is enough (nothing of opset 21 is written).
      if (cfg->min_opset < kOpset) return RulePass::run(model, ctx);
      return run_at_opset(model, kOpset, "DequantizeLinear's block_size and int4",
                          ctx.check_transactions, [&] { return RulePass::run(model, ctx); });
    };
    if (!cfg->gather_block_quantized && !cfg->matmul_nbits) return body();
    return run_with_import(model, kMicrosoftDomain, 1, body);
  }
};

}  // namespace

PassInfo quantize_weights_int4_pass() {
  return describe<QuantizeWeightsInt4>(
      {.name = "quantize_weights_int4",
       .level = 3,
       .lossy = true,
       // Measured (docs/quantization.md), default options, on seeded random weights (the harsh
       // case: no structure for 4 bits to keep): cosine 0.978-0.999 and rel 0.06-0.24 per output
       // (GPT-2, BERT and LLaMA-style blocks, an MLP; Graft's evaluator and ONNX Runtime alike).
       // 16 levels per block move each weight by up to 1/14 of its block's range, so the error
       // is an order above int8's. Deliberately broken on the MLP: values a row off give cosine
       // 0.37, each column read with its neighbour's scales 0.927 (rel 0.42): both rolled back.
       .gate = {.max_rel = 0.3, .min_cosine = 0.97},
       .by_name_only = true,
       .description =
           "MatMul/Gemm weights and Gather tables (constant float32 2-D) become int4 (or uint4) "
           "block-wise, read through DequantizeLinear (opset 21; ONNX Runtime fuses it into "
           "MatMulNBits), or for --target onnxruntime written as com.microsoft MatMulNBits "
           "(lossy; by name only)",
       .options = {enum_option(kBlockSize, "32", {"16", "32", "64", "128", "256"},
                               "elements per scale along the reduction axis (K; a table's last "
                               "axis); ONNX Runtime's MatMulNBits takes powers of two >= 16"),
                   boolean_option(kSymmetric, true,
                                  "int4 with zero point 0 (scale max|w| / 7 per block); false: "
                                  "uint4 with a zero point per block (range over 15 steps)"),
                   boolean_option(kScaleSearch, true,
                                  "per block, the scale (and zero point) of least squared error "
                                  "among the range shrunk by up to 28% and a least-squares refit; "
                                  "false: the block's range, rounded to nearest"),
                   boolean_option(kMatMulNBits, true,
                                  "for a target whose ONNX Runtime has com.microsoft MatMulNBits "
                                  "(1.18+): MatMul/Gemm weights written as MatMulNBits, which ONNX "
                                  "Runtime otherwise forms from DequantizeLinear + MatMul at every "
                                  "session creation (0.59x the creation time on the LLaMA-shaped "
                                  "decoder, outputs identical); a table's tied head stays "
                                  "DequantizeLinear + MatMul, sharing the table's copy"),
                   integer_option(kAccuracyLevel, 4, 0, 4,
                                  "MatMulNBits' accuracy_level: 4 lets ONNX Runtime quantize the "
                                  "activations to int8 per block (what it does with the fused "
                                  "form, and its fast path), 0 or 1 computes in float32"),
                   min_weight_elements_option(),
                   exclude_ops_option({}, {"MatMul", "Gemm", "Gather"},
                                      "op types left in float (Gather: constant tables such as "
                                      "embeddings, dequantized whole before the Gather, or row by "
                                      "row by GatherBlockQuantized for ONNX Runtime 1.20+)"),
                   exclude_nodes_option()}});
}

}  // namespace graft
