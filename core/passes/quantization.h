// Pieces the quantization passes share: weights quantized to 8 bits (per tensor or per output
// channel, read in place), affine parameters for a calibrated range, and the tensors that hold
// them.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <absl/status/statusor.h>
#include <onnx/onnx_pb.h>

#include "core/ir/model.h"
#include "core/passes/options.h"
#include "core/passes/pass.h"

namespace graft {

// How weights are stored in 8 bits.
struct WeightQuantization {
  bool per_channel = false;  // one scale per output channel (column) instead of per tensor
  bool uint8 = false;        // asymmetric uint8 (zero point per group) instead of symmetric int8
  // Symmetric int8 in [-64, 63] instead of [-127, 127]: one bit less, so that integer kernels
  // adding two u8 x s8 products in 16 bits (x86 without VNNI) cannot saturate.
  bool reduce_range = false;
};

// A weight quantized to 8 bits: values [K, N] (row-major, the MatMul layout) as the raw_data of
// the new tensor, scale and zero point per tensor (size 1) or per column (size N).
struct QuantizedWeight {
  std::string bytes;  // int8 or uint8 values, as stored in raw_data
  std::vector<float> scale;
  std::vector<int32_t> zero_point;
};

// Quantizes the weight `at(r, c)` (r < k, c < n: the MatMul layout, whatever the stored one) read
// in place: two passes over it and the 1-byte result are the only memory per weight (no decoded
// or transposed copy). nullopt if a value is not finite or a scale underflows (the node is then
// left alone). Ranges and scales are computed in double from the float values, so the result
// does not depend on the order the values are visited in.
// The result is [K, N] row-major, or with `column_major` [N, K] (Conv's [M, C/group * kernel]
// layout, where the output channels are the columns).
template <typename At>
std::optional<QuantizedWeight> quantize_weight(const At& at, int64_t k, int64_t n,
                                               const WeightQuantization& wq,
                                               bool column_major = false) {
  const int64_t groups = wq.per_channel ? n : 1;
  const double qmax = wq.reduce_range ? 63.0 : 127.0;
  const double qmin = wq.reduce_range ? -64.0 : -127.0;
  std::vector<double> lo(static_cast<size_t>(groups), 0.0), hi(static_cast<size_t>(groups), 0.0);
  for (int64_t r = 0; r < k; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const double v = at(r, c);
      if (!std::isfinite(v)) return std::nullopt;
      const size_t g = wq.per_channel ? static_cast<size_t>(c) : 0;
      lo[g] = std::min(lo[g], v);
      hi[g] = std::max(hi[g], v);
    }
  QuantizedWeight q;
  q.scale.assign(static_cast<size_t>(groups), 1.0f);
  q.zero_point.assign(static_cast<size_t>(groups), 0);
  for (size_t g = 0; g < static_cast<size_t>(groups); ++g) {
    if (lo[g] == 0 && hi[g] == 0) continue;  // all zero: scale 1 (not 0), zero point 0, values 0
    float scale = wq.uint8 ? static_cast<float>((hi[g] - lo[g]) / 255.0)
                           : static_cast<float>(std::max(-lo[g], hi[g]) / qmax);
    // A scale below the smallest normal float loses precision or is 0 (division by zero).
    if (!(scale >= FLT_MIN) || !std::isfinite(scale)) return std::nullopt;
    q.scale[g] = scale;
    if (wq.uint8)
      q.zero_point[g] =
          static_cast<int32_t>(std::clamp(std::nearbyint(-lo[g] / scale), 0.0, 255.0));
  }
  q.bytes.resize(static_cast<size_t>(k * n));
  for (int64_t r = 0; r < k; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const size_t g = wq.per_channel ? static_cast<size_t>(c) : 0;
      const double v =
          std::nearbyint(static_cast<double>(at(r, c)) / static_cast<double>(q.scale[g]));
      const uint8_t b = wq.uint8
                            ? static_cast<uint8_t>(std::clamp(v + q.zero_point[g], 0.0, 255.0))
                            : static_cast<uint8_t>(static_cast<int8_t>(std::clamp(v, qmin, qmax)));
      q.bytes[static_cast<size_t>(column_major ? c * k + r : r * n + c)] = static_cast<char>(b);
    }
  return q;
}

// Affine 8-bit parameters for values in [lo, hi] (QuantizeLinear's scale and zero point): the
// range is widened to hold 0 (exactly representable, so zero padding and ReLU stay exact);
// uint8 is asymmetric over [0, 255], int8 symmetric over [-127, 127] with zero point 0. An
// empty or all-zero range gets scale 1. nullopt for a range that is not finite or whose scale
// is not a normal float.
struct ActivationQuantization {
  float scale = 1;
  int32_t zero_point = 0;
};
std::optional<ActivationQuantization> activation_params(double lo, double hi, bool uint8);

// A tensor of `dtype` with `dims` whose raw_data is `bytes`.
onnx::TensorProto byte_tensor(int32_t dtype, const std::vector<int64_t>& dims, std::string bytes);

// A scalar 8-bit zero point of `dtype` (UINT8 or INT8).
onnx::TensorProto zero_point_tensor(int32_t dtype, int32_t value);

// True when `node` has a name listed in `sorted_names` (an exclude_nodes option's value).
bool excluded_node(const ir::Node& node, const std::vector<std::string>& sorted_names);

// The options the weight-quantizing passes share, declared once: which weights a run leaves in
// float. Each pass lists the ones it takes in its descriptor and reads them by these names.
inline constexpr char kMinWeightElements[] = "min_weight_elements";
inline constexpr char kExcludeOps[] = "exclude_ops";
inline constexpr char kExcludeNodes[] = "exclude_nodes";
// Weights with fewer elements stay float (default 4096, a 64x64 weight: below that the bytes
// saved are a few KiB, and the quantize/dequantize work costs more per run than it saves).
OptionSpec min_weight_elements_option();
// Op types (of `ops`) left in float; `help` says what each costs or means for the pass.
OptionSpec exclude_ops_option(std::vector<std::string> default_ops, std::vector<std::string> ops,
                              std::string help);
// Node names left in float, any name; `help` by default says where nodes are looked up.
OptionSpec exclude_nodes_option(
    std::string help = "node names left in float (in the main graph and If/Loop/Scan bodies)");
// Whether `op` is in an exclude_ops value.
bool excluded_op(const std::vector<std::string>& excluded, std::string_view op);

// Which weight readers a weight rewrite leaves alone, read once from the three options above (a
// pass that declares all three: the quantizers of weights, factorize_low_rank, prune_weights).
struct WeightFilter {
  int64_t min_elements = 0;
  std::vector<std::string> exclude_ops;
  std::vector<std::string> exclude_nodes;  // sorted
  // Whether node `n` of op type `op` (one of exclude_ops' choices) is left alone by option.
  bool skips(const ir::Node& n, std::string_view op) const {
    return excluded_op(exclude_ops, op) || excluded_node(n, exclude_nodes);
  }
};
WeightFilter weight_filter(const PassContext& ctx);

// The serving CPU's 8-bit dot products, which decide whether integer kernels pay (ONNX Runtime's
// int8 can be slower than float without them) and whether u8 x s8 sums saturate in 16 bits.
enum class Int8Cpu {
  kAvx2,     // x86 with AVX2 and no VNNI (or less than AVX2): pairs of products summed in 16 bits
  kAvxVnni,  // x86 AVX-VNNI (256-bit VPDPBUSD)
  kAvx512Vnni,  // x86 AVX-512 VNNI
  kOther,       // not x86 (ARM's dot products differ; nothing is assumed)
};
// The CPU this process runs on (cpuid, and the OS saving the registers it needs).
Int8Cpu detected_int8_cpu();
// "avx2", "avx-vnni", "avx512-vnni", "other"; and back (nullopt for anything else).
std::string_view int8_cpu_name(Int8Cpu cpu);
std::optional<Int8Cpu> parse_int8_cpu(std::string_view name);
// The option naming the serving CPU (kServingCpu), shared by the int8 passes. Its default is the
// machine Graft runs on, resolved when the pass is described, so a key and a report always hold
// a CPU, never "auto".
inline constexpr char kServingCpu[] = "serving_cpu";
OptionSpec serving_cpu_option();
// The serving CPU a run's options name.
Int8Cpu serving_cpu(const PassContext& ctx);
// A note for a run whose serving CPU lacks 8-bit dot products, else "".
std::string int8_cpu_note(Int8Cpu cpu, bool detected);
// Adds that note to a run of an int8 pass that changed the model, as a finding every report
// shows (rule kServingCpu, at "model").
void note_serving_cpu(const PassContext& ctx, absl::StatusOr<PassResult>& result);

}  // namespace graft
