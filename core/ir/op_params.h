// Constant operands and operator parameters, read the way the node's opset defines them.
//
// ONNX moved many parameters from attributes to inputs over the opsets (Slice's starts at 10,
// Squeeze/Unsqueeze axes and Split sizes at 13, Reduce* axes at 13 or 18, Pad's pads at 11,
// Clip's bounds at 11). Every reader here looks where the node's opset puts the parameter and
// returns nullopt when it is not a constant, is malformed, or the op is not the one expected, so
// a caller never has to know the history. Shape facts (shapes.h) and the passes use the same
// readers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <onnx/onnx_pb.h>

#include "core/ir/model.h"

namespace graft::ir {

// Largest external payload constant_proto reads by default (the size of constant passes decode).
inline constexpr uint64_t kMaxExternalReadBytes = 16ull << 20;

// The tensor a value holds for the whole run: a non-overridable initializer, or the `value`
// attribute of the Constant node producing it (in any graph, function bodies included), with its
// payload possibly external (not in memory): for its type, dims and size (payload_bytes), never
// for its contents. nullptr for anything else (sparse constants, computed values).
const onnx::TensorProto* constant_header(const Value* v);
// The same tensor with its payload in memory, the one way passes read a constant's contents: an
// in-memory tensor as it is, an external one read (pread of its range) through the model's
// ExternalData when its payload is at most `max_external_bytes`, held by the result and released
// with it. Empty for anything else: not a constant, an external tensor whose model has no
// ExternalData, over the limit (checked before reading), or a reference that fails its checks.
LoadedTensor constant_proto(const Value* v, uint64_t max_external_bytes = kMaxExternalReadBytes);
// constant_header's tensor when its payload is in memory, else nullptr (no file is read).
const onnx::TensorProto* constant_in_memory(const Value* v);
// The ExternalData of the model `v` belongs to (null when unknown).
const ExternalData* external_data_of(const Value* v);
// True if `v` is such a constant (also when its data is external).
bool is_constant_value(const Value* v);
// Integer contents of a constant integer tensor (any int/bool type), nullopt otherwise.
std::optional<std::vector<int64_t>> constant_ints(const Value* v);
// Contents of a constant FLOAT/DOUBLE/FLOAT16 tensor as doubles.
std::optional<std::vector<double>> constant_doubles(const Value* v);

// Whether `n` (ONNX domain) only moves the elements of its input 0: every output element is
// one of them, unchanged (Identity, Reshape, Flatten, Squeeze, Unsqueeze, Expand, Transpose,
// Slice). What analyses that follow a value through its reshapes use.
bool moves_values(const Node& n);

// `axis` in [-rank, rank) made non-negative; nullopt when out of range.
std::optional<int64_t> normalize_axis(int64_t axis, int64_t rank);
// Every axis normalized; nullopt if one is out of range or repeated.
std::optional<std::vector<int64_t>> normalize_axes(const std::vector<int64_t>& axes, int64_t rank);

// Output extent along one spatial axis of a sliding window (Conv and the pools), per the ONNX
// formulas: NOTSET uses the explicit pads (and `ceil_mode`), VALID no padding, SAME_UPPER and
// SAME_LOWER ceil(in / stride). nullopt for an unknown auto_pad, a window larger than the
// (padded) input, a stride, kernel or dilation below 1, a negative pad, or overflow.
std::optional<int64_t> window_extent(int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                                     int64_t pad_begin, int64_t pad_end,
                                     const std::string& auto_pad, bool ceil_mode);

// Slice: starts/ends/axes/steps (attributes before opset 10, inputs since). `axes` defaults to
// 0..n-1 and `steps` to ones; axes are as written (maybe negative).
struct SliceParams {
  std::vector<int64_t> starts, ends, axes, steps;
};
std::optional<SliceParams> slice_params(const Node& n);
// The indices one Slice axis of length `len` selects with `start`, `end` (negative: from the end,
// then clamped as ONNX says) and a non-zero `step`, in order.
std::vector<int64_t> slice_indices(int64_t len, int64_t start, int64_t end, int64_t step);

// The range [start, end) of its input's dims a Shape node returns, for an input of rank `rank`
// (start/end attributes from opset 15, clamped); nullopt with any other attribute.
std::optional<std::pair<int64_t, int64_t>> shape_range(const Node& n, int64_t rank);

// Axes of Squeeze/Unsqueeze (attribute before opset 13, input since). `all` is set for a
// Squeeze without axes (every dim of size 1 goes); nullopt for axes given empty, which runtimes
// read differently (ONNX Runtime: every dim of size 1; ONNX's reference: none).
struct AxesParam {
  bool all = false;
  std::vector<int64_t> axes;
};
std::optional<AxesParam> squeeze_axes(const Node& n);
std::optional<std::vector<int64_t>> unsqueeze_axes(const Node& n);

// Reduce* (and ArgMax/ArgMin's keepdims): axes from the attribute, or the input where the opset
// has one (ReduceSum from 13, the others from 18). `axes` nullopt means "all axes" unless
// noop_with_empty_axes, which makes the node an identity.
struct ReduceParams {
  std::optional<std::vector<int64_t>> axes;
  bool keepdims = true;
  bool noop_with_empty_axes = false;
};
std::optional<ReduceParams> reduce_params(const Node& n);

// Pad: pads (attribute `paddings` at opset 1, `pads` to 10, input from 11), mode, constant value
// when known (0 when absent), axes (opset 18) when given.
struct PadParams {
  std::vector<int64_t> pads;
  std::string mode = "constant";
  std::optional<double> value;
  std::optional<std::vector<int64_t>> axes;
};
std::optional<PadParams> pad_params(const Node& n);

// Split: axis and explicit sizes (attribute before 13, input since), or the number of equal
// parts (the node's output count, or num_outputs at 18).
struct SplitParams {
  int64_t axis = 0;
  std::optional<std::vector<int64_t>> sizes;
  int64_t parts = 0;
};
std::optional<SplitParams> split_params(const Node& n);

// Clip's bounds (attributes before opset 11, optional inputs since); an absent bound is nullopt
// inside a found ClipParams. nullopt overall when a given bound is not a constant scalar.
struct ClipParams {
  std::optional<double> min, max;
};
std::optional<ClipParams> clip_params(const Node& n);

// A Transpose's permutation, checked to be one of 0..n-1 (nullopt otherwise, or with an attribute
// other than perm, or without exactly one input). Without a perm attribute Transpose reverses the
// axes, which needs the input's rank: pass it as `rank` (a rank the caller has checked), else
// nullopt is returned.
std::optional<std::vector<int64_t>> transpose_perm(const Node& n,
                                                   std::optional<int64_t> rank = std::nullopt);
// True if `perm` holds each of 0..perm.size()-1 once.
bool is_permutation(const std::vector<int64_t>& perm);

// Cast's `to` (a TensorProto::DataType), nullopt when absent or not an int.
std::optional<int32_t> cast_to(const Node& n);

// Resize/Upsample: constant scales or sizes, whichever the node gives (inputs by opset).
struct ResizeParams {
  std::optional<std::vector<double>> scales;
  std::optional<std::vector<int64_t>> sizes;
};
std::optional<ResizeParams> resize_params(const Node& n);

}  // namespace graft::ir
