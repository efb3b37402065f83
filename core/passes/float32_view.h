// A constant float32 tensor's values read where they are, for passes that walk a large weight
// once (quantization): no decoded copy (float_constant's doubles cost 8 bytes per element, plus
// a float copy while decoding), so the transient memory of a rewrite is its result alone.
// Reads go through the shared accessor (ir::constant_proto), like every query in queries.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "core/ir/tensor.h"
#include "core/passes/queries.h"

namespace graft {

// The values of an in-memory tensor's raw_data or float_data, or of an external payload (up to
// kMaxExternalWeightBytes) loaded for the view's lifetime.
class Float32View {
 public:
  int64_t size() const { return size_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  float operator[](int64_t i) const {
    if (field_) return field_[i];
    float f;
    std::memcpy(&f, raw_ + 4 * i, 4);  // raw_data has no alignment guarantee
    return f;
  }

 private:
  friend std::optional<Float32View> float32_constant(const ir::Value* v);
  ir::LoadedTensor tensor_;  // keeps an external payload alive
  const char* raw_ = nullptr;
  const float* field_ = nullptr;
  int64_t size_ = 0;
  std::vector<int64_t> dims_;
};

// nullopt unless `v` is a FLOAT constant (initializer or Constant node) whose payload holds
// exactly its dims' element count (raw_data little-endian, as everywhere in Graft).
inline std::optional<Float32View> float32_constant(const ir::Value* v) {
  auto type = float_constant_type(v);
  if (!type || type->dtype != onnx::TensorProto::FLOAT) return std::nullopt;
  auto count = ir::element_count(type->dims);
  if (!count) return std::nullopt;
  Float32View view;
  view.tensor_ = constant_proto(v, kMaxExternalWeightBytes);
  if (!view.tensor_) return std::nullopt;
  const onnx::TensorProto& t = *view.tensor_;
  if (t.has_raw_data()) {
    if (t.raw_data().size() != static_cast<uint64_t>(*count) * 4) return std::nullopt;
    view.raw_ = t.raw_data().data();
  } else {
    if (t.float_data_size() != *count) return std::nullopt;
    view.field_ = t.float_data().data();
  }
  view.size_ = *count;
  view.dims_ = std::move(type->dims);
  return view;
}

// What storing a float32 constant as float16 (ir::float_to_half_tensor) does to its values.
struct HalfLoss {
  int64_t out_of_range = 0;           // finite values beyond +-ir::kHalfMax (they are clamped)
  int64_t out_of_range_positive = 0;  // of which positive
  double max_abs = 0;                 // the largest finite magnitude
  int64_t flushed = 0;                // nonzero values that become zero
  // The share of the in-range values' total magnitude that rounding and subnormal flush lose:
  // sum |x - half(x)| / sum |x| (0 for an all-zero tensor). Normal float16 rounding alone loses
  // at most 2^-11 of each value.
  double lost_share = 0;
};

inline HalfLoss half_loss(const Float32View& view) {
  HalfLoss loss;
  double lost = 0, total = 0;
  for (int64_t i = 0; i < view.size(); ++i) {
    const float f = view[i];
    if (!std::isfinite(f)) continue;
    const double a = std::fabs(static_cast<double>(f));
    loss.max_abs = std::max(loss.max_abs, a);
    if (a > ir::kHalfMax) {
      ++loss.out_of_range;
      if (f > 0) ++loss.out_of_range_positive;
      continue;
    }
    const float h = ir::half_to_float(ir::float_to_half(f));
    if (f != 0 && h == 0) ++loss.flushed;
    lost += std::fabs(static_cast<double>(f) - h);
    total += a;
  }
  loss.lost_share = total > 0 ? lost / total : 0;
  return loss;
}

}  // namespace graft
