// Reading and building TensorProtos: the small set of conversions passes need to inspect
// constant operands (shapes, permutations, weights) and to write folded results.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace graft::ir {

// Bytes per element of a fixed-size data type, 0 for strings/undefined.
size_t element_size(int32_t data_type);
// Product of dims (1 for a scalar); nullopt on a negative dim or overflow.
std::optional<int64_t> element_count(const std::vector<int64_t>& dims);
std::optional<int64_t> element_count(const onnx::TensorProto& t);
// Size in bytes of a tensor's payload (raw or typed fields).
uint64_t tensor_bytes(const onnx::TensorProto& t);
// True if the tensor's payload is stored outside the proto (ONNX external data).
bool is_external(const onnx::TensorProto& t);

// Integer contents of an INT64/INT32/INT16/INT8/UINT8/UINT16/UINT32/BOOL tensor.
std::optional<std::vector<int64_t>> read_int64s(const onnx::TensorProto& t);
// Contents of a FLOAT/DOUBLE/FLOAT16 tensor as doubles.
std::optional<std::vector<double>> read_doubles(const onnx::TensorProto& t);

// True if every value is finite and within the range of `data_type` (FLOAT, DOUBLE or FLOAT16),
// so make_float_tensor stores it as the same number (up to rounding), not as an infinity.
bool fits_float_type(int32_t data_type, const std::vector<double>& values);
// Builds a tensor of `data_type` (FLOAT, DOUBLE or FLOAT16) from doubles, stored as raw_data.
onnx::TensorProto make_float_tensor(int32_t data_type, const std::vector<int64_t>& dims,
                                    const std::vector<double>& values);
// A FLOAT tensor holding `values` as they are, stored as raw_data.
onnx::TensorProto make_float32_tensor(const std::vector<int64_t>& dims,
                                      const std::vector<float>& values);
onnx::TensorProto make_int64_tensor(const std::vector<int64_t>& dims,
                                    const std::vector<int64_t>& values);

float half_to_float(uint16_t h);
// float16 range: the largest finite value and the smallest positive subnormal.
inline constexpr float kHalfMax = 65504.0f;
// A FLOAT tensor (in memory, any payload field) as a FLOAT16 one (raw_data), same name and dims:
// finite values beyond float16's range are clamped to +-kHalfMax (counted in `clamped`), nonzero
// values that round to zero are counted in `flushed`; infinities and NaNs stay. nullopt if `t`
// is not a readable FLOAT tensor.
std::optional<onnx::TensorProto> float_to_half_tensor(const onnx::TensorProto& t,
                                                      int64_t* clamped = nullptr,
                                                      int64_t* flushed = nullptr);
uint16_t float_to_half(float f);

}  // namespace graft::ir
