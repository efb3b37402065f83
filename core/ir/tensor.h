// Reading and building TensorProtos: the small set of conversions passes need to inspect
// constant operands (shapes, permutations, weights) and to write folded results.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/onnx_pb.h>

namespace graft::ir {

// The 4-bit integer types (ONNX 1.16: IR version 10, opset 21). libonnx 1.12, which Graft builds
// against, predates them (its TensorProto_DataType stops at BFLOAT16 = 16), so they are named
// here, once. TensorProto.data_type and TypeProto.Tensor.elem_type are int32 fields, so these
// values survive parsing and serializing unchanged. Their payload is packed two elements per byte,
// the first in the low nibble (raw_data and external data: ceil(n / 2) bytes; int32_data: one
// packed byte per entry), a padding nibble in the last byte of an odd count.
inline constexpr int32_t kUint4 = 21;  // [0, 15]
inline constexpr int32_t kInt4 = 22;   // [-8, 7], two's complement
// kInt4 or kUint4.
bool is_4bit(int32_t data_type);

// Bytes per element of a fixed-size data type, 0 for strings/undefined and for the 4-bit types
// (which have no whole byte per element: see payload_size).
size_t element_size(int32_t data_type);
// Bytes of the payload (raw_data, external data) of `count` elements of `data_type`:
// count * element_size, or ceil(count / 2) for the 4-bit types; nullopt for strings, undefined
// types, a negative count or an overflow.
std::optional<uint64_t> payload_size(int32_t data_type, int64_t count);
// A data type's name in lower case as ONNX's text syntax writes it ("float", "int4"); "dtypeN"
// for a number that names no type.
std::string dtype_name(int32_t data_type);
// Product of dims (1 for a scalar); nullopt on a negative dim or overflow.
std::optional<int64_t> element_count(const std::vector<int64_t>& dims);
std::optional<int64_t> element_count(const onnx::TensorProto& t);
// Size in bytes of a tensor's payload (raw or typed fields).
uint64_t tensor_bytes(const onnx::TensorProto& t);
// True if the tensor's payload is stored outside the proto (ONNX external data).
bool is_external(const onnx::TensorProto& t);
// The little-endian payload of an in-memory tensor of a fixed-size or 4-bit type, as raw_data
// would hold it: from its typed field (ONNX's storage rules: typed_payload), or either way
// (payload_view: a view of raw_data itself, not a copy, or of `storage`, which then holds
// typed_payload's bytes); nullopt when the payload does not match the dims, for strings and
// undefined types, and (payload_view) for external or segmented tensors.
std::optional<std::string> typed_payload(const onnx::TensorProto& t);
std::optional<std::string_view> payload_view(const onnx::TensorProto& t, std::string* storage);

// 4-bit elements packed two per byte, the first in the low nibble: `values` (their low nibbles;
// callers keep them in the type's range) packed into ceil(n / 2) bytes, and `count` elements
// unpacked from `packed` (which must hold ceil(count / 2) bytes; signed types sign-extended).
std::string pack_4bit(const int8_t* values, size_t count);
void unpack_4bit(const char* packed, size_t count, bool is_signed, int8_t* out);
// A kInt4 or kUint4 tensor holding `values` (each within the type's range), stored packed in
// raw_data.
onnx::TensorProto make_4bit_tensor(int32_t data_type, const std::vector<int64_t>& dims,
                                   const std::vector<int8_t>& values);

// Integer contents of an INT64/INT32/INT16/INT8/UINT8/UINT16/UINT32/BOOL/INT4/UINT4 tensor.
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
// A BOOL scalar (a Loop's condition).
onnx::TensorProto make_bool_scalar(bool value);

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
