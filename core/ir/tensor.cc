#include "core/ir/tensor.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

namespace graft::ir {

using onnx::TensorProto;

bool is_4bit(int32_t data_type) { return data_type == kInt4 || data_type == kUint4; }

size_t element_size(int32_t data_type) {
  switch (data_type) {
    case TensorProto::FLOAT:
      return 4;
    case TensorProto::UINT8:
      return 1;
    case TensorProto::INT8:
      return 1;
    case TensorProto::UINT16:
      return 2;
    case TensorProto::INT16:
      return 2;
    case TensorProto::INT32:
      return 4;
    case TensorProto::INT64:
      return 8;
    case TensorProto::BOOL:
      return 1;
    case TensorProto::FLOAT16:
      return 2;
    case TensorProto::DOUBLE:
      return 8;
    case TensorProto::UINT32:
      return 4;
    case TensorProto::UINT64:
      return 8;
    case TensorProto::COMPLEX64:
      return 8;
    case TensorProto::COMPLEX128:
      return 16;
    case TensorProto::BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

std::optional<uint64_t> payload_size(int32_t data_type, int64_t count) {
  if (count < 0) return std::nullopt;
  const uint64_t n = static_cast<uint64_t>(count);
  if (is_4bit(data_type)) return n / 2 + n % 2;
  const size_t es = element_size(data_type);
  uint64_t bytes = 0;
  if (es == 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(es), &bytes)) return std::nullopt;
  return bytes;
}

std::string dtype_name(int32_t data_type) {
  if (data_type == kInt4) return "int4";
  if (data_type == kUint4) return "uint4";
  if (!onnx::TensorProto_DataType_IsValid(data_type)) return "dtype" + std::to_string(data_type);
  std::string name =
      onnx::TensorProto_DataType_Name(static_cast<onnx::TensorProto_DataType>(data_type));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::string pack_4bit(const int8_t* values, size_t count) {
  std::string out(count / 2 + count % 2, '\0');
  for (size_t i = 0; i < count; ++i) {
    const auto nibble = static_cast<uint8_t>(static_cast<uint8_t>(values[i]) & 0x0f);
    out[i / 2] =
        static_cast<char>(static_cast<uint8_t>(out[i / 2]) | (i % 2 ? nibble << 4 : nibble));
  }
  return out;
}

void unpack_4bit(const char* packed, size_t count, bool is_signed, int8_t* out) {
  for (size_t i = 0; i < count; ++i) {
    const auto byte = static_cast<uint8_t>(packed[i / 2]);
    const int nibble = i % 2 ? byte >> 4 : byte & 0x0f;
    out[i] = static_cast<int8_t>(is_signed && nibble >= 8 ? nibble - 16 : nibble);
  }
}

onnx::TensorProto make_4bit_tensor(int32_t data_type, const std::vector<int64_t>& dims,
                                   const std::vector<int8_t>& values) {
  TensorProto t;
  t.set_data_type(data_type);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(pack_4bit(values.data(), values.size()));
  return t;
}

std::optional<int64_t> element_count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return std::nullopt;
    n *= d;
  }
  return n;
}

std::optional<int64_t> element_count(const TensorProto& t) {
  return element_count(std::vector<int64_t>(t.dims().begin(), t.dims().end()));
}

bool is_external(const TensorProto& t) { return t.data_location() == TensorProto::EXTERNAL; }

uint64_t tensor_bytes(const TensorProto& t) {
  if (t.has_raw_data()) return t.raw_data().size();
  uint64_t n = 0;
  n += t.float_data_size() * 4ull + t.double_data_size() * 8ull + t.int64_data_size() * 8ull +
       t.uint64_data_size() * 8ull;
  // int32_data also carries 8/16-bit types and float16, one element per entry.
  size_t es = element_size(t.data_type());
  n += t.int32_data_size() * static_cast<uint64_t>(es ? es : 4);
  for (const auto& s : t.string_data()) n += s.size();
  return n;
}

namespace {

template <typename T>
bool read_raw(const std::string& raw, int64_t count, std::vector<T>& out) {
  // Divided, not multiplied: a hostile count times sizeof(T) wraps around to raw.size().
  if (count < 0 || raw.size() % sizeof(T) != 0 ||
      raw.size() / sizeof(T) != static_cast<size_t>(count))
    return false;
  out.resize(count);
  if (count) std::memcpy(out.data(), raw.data(), raw.size());
  return true;
}

template <typename Out, typename T>
std::optional<std::vector<Out>> raw_as(const TensorProto& t, int64_t count) {
  std::vector<T> tmp;
  if (!read_raw(t.raw_data(), count, tmp)) return std::nullopt;
  return std::vector<Out>(tmp.begin(), tmp.end());
}

template <typename Out, typename Field>
std::optional<std::vector<Out>> field_as(const Field& f, int64_t count) {
  if (f.size() != count) return std::nullopt;
  return std::vector<Out>(f.begin(), f.end());
}

}  // namespace

std::optional<std::vector<int64_t>> read_int64s(const TensorProto& t) {
  if (is_external(t)) return std::nullopt;
  auto count = element_count(t);
  if (!count) return std::nullopt;
  bool raw = t.has_raw_data();
  if (is_4bit(t.data_type())) {
    // Packed: ceil(n / 2) bytes of raw_data, or one packed byte per int32_data entry.
    const size_t n = static_cast<size_t>(*count), bytes = n / 2 + n % 2;
    std::string packed;
    if (raw) {
      if (t.raw_data().size() != bytes) return std::nullopt;
      packed = t.raw_data();
    } else {
      if (static_cast<size_t>(t.int32_data_size()) != bytes) return std::nullopt;
      for (int32_t b : t.int32_data()) packed.push_back(static_cast<char>(b & 0xff));
    }
    std::vector<int8_t> values(n);
    unpack_4bit(packed.data(), n, t.data_type() == kInt4, values.data());
    return std::vector<int64_t>(values.begin(), values.end());
  }
  switch (t.data_type()) {
    case TensorProto::INT64:
      return raw ? raw_as<int64_t, int64_t>(t, *count) : field_as<int64_t>(t.int64_data(), *count);
    case TensorProto::INT32:
      return raw ? raw_as<int64_t, int32_t>(t, *count) : field_as<int64_t>(t.int32_data(), *count);
    case TensorProto::INT16:
      return raw ? raw_as<int64_t, int16_t>(t, *count) : field_as<int64_t>(t.int32_data(), *count);
    case TensorProto::INT8:
      return raw ? raw_as<int64_t, int8_t>(t, *count) : field_as<int64_t>(t.int32_data(), *count);
    case TensorProto::UINT8:
    case TensorProto::BOOL:
      return raw ? raw_as<int64_t, uint8_t>(t, *count) : field_as<int64_t>(t.int32_data(), *count);
    case TensorProto::UINT16:
      return raw ? raw_as<int64_t, uint16_t>(t, *count) : field_as<int64_t>(t.int32_data(), *count);
    case TensorProto::UINT32:
      return raw ? raw_as<int64_t, uint32_t>(t, *count)
                 : field_as<int64_t>(t.uint64_data(), *count);
    default:
      return std::nullopt;
  }
}

std::optional<std::vector<double>> read_doubles(const TensorProto& t) {
  if (is_external(t)) return std::nullopt;
  auto count = element_count(t);
  if (!count) return std::nullopt;
  bool raw = t.has_raw_data();
  switch (t.data_type()) {
    case TensorProto::FLOAT:
      return raw ? raw_as<double, float>(t, *count) : field_as<double>(t.float_data(), *count);
    case TensorProto::DOUBLE:
      return raw ? raw_as<double, double>(t, *count) : field_as<double>(t.double_data(), *count);
    case TensorProto::FLOAT16: {
      std::vector<uint16_t> bits;
      if (raw) {
        if (!read_raw(t.raw_data(), *count, bits)) return std::nullopt;
      } else {
        if (t.int32_data_size() != *count) return std::nullopt;
        for (int32_t b : t.int32_data()) bits.push_back(static_cast<uint16_t>(b));
      }
      std::vector<double> out;
      out.reserve(bits.size());
      for (uint16_t b : bits) out.push_back(half_to_float(b));
      return out;
    }
    default:
      return std::nullopt;
  }
}

bool fits_float_type(int32_t data_type, const std::vector<double>& values) {
  const double max = data_type == TensorProto::DOUBLE    ? std::numeric_limits<double>::max()
                     : data_type == TensorProto::FLOAT16 ? 65504.0  // largest finite half
                                                         : std::numeric_limits<float>::max();
  for (double v : values)
    if (!(std::abs(v) <= max)) return false;  // NaN fails too
  return true;
}

onnx::TensorProto make_float_tensor(int32_t data_type, const std::vector<int64_t>& dims,
                                    const std::vector<double>& values) {
  TensorProto t;
  t.set_data_type(data_type);
  for (int64_t d : dims) t.add_dims(d);
  std::string raw;
  if (data_type == TensorProto::DOUBLE) {
    raw.resize(values.size() * 8);
    std::memcpy(raw.data(), values.data(), raw.size());
  } else if (data_type == TensorProto::FLOAT16) {
    std::vector<uint16_t> h;
    for (double v : values) h.push_back(float_to_half(static_cast<float>(v)));
    raw.resize(h.size() * 2);
    if (!h.empty()) std::memcpy(raw.data(), h.data(), raw.size());
  } else {
    return make_float32_tensor(dims, std::vector<float>(values.begin(), values.end()));
  }
  t.set_raw_data(std::move(raw));
  return t;
}

onnx::TensorProto make_float32_tensor(const std::vector<int64_t>& dims,
                                      const std::vector<float>& values) {
  TensorProto t;
  t.set_data_type(TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  std::string raw(values.size() * sizeof(float), '\0');
  if (!values.empty()) std::memcpy(raw.data(), values.data(), raw.size());
  t.set_raw_data(std::move(raw));
  return t;
}

onnx::TensorProto make_int64_tensor(const std::vector<int64_t>& dims,
                                    const std::vector<int64_t>& values) {
  TensorProto t;
  t.set_data_type(TensorProto::INT64);
  for (int64_t d : dims) t.add_dims(d);
  std::string raw(values.size() * 8, '\0');
  if (!values.empty()) std::memcpy(raw.data(), values.data(), raw.size());
  t.set_raw_data(std::move(raw));
  return t;
}

onnx::TensorProto make_bool_scalar(bool value) {
  TensorProto t;
  t.set_data_type(TensorProto::BOOL);
  t.set_raw_data(std::string(1, value ? '\1' : '\0'));
  return t;
}

float half_to_float(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t exp = (x >> 23) & 0xff;
  uint32_t mant = x & 0x7fffff;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));
  int32_t e = static_cast<int32_t>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) ++half;  // may carry into exponent: correct
  return static_cast<uint16_t>(half);
}

std::optional<onnx::TensorProto> float_to_half_tensor(const onnx::TensorProto& t, int64_t* clamped,
                                                      int64_t* flushed) {
  if (t.data_type() != onnx::TensorProto::FLOAT || is_external(t)) return std::nullopt;
  auto values = read_doubles(t);
  auto count = element_count(t);
  if (!values || !count || static_cast<int64_t>(values->size()) != *count) return std::nullopt;
  onnx::TensorProto out;
  out.set_name(t.name());
  if (t.has_doc_string()) out.set_doc_string(t.doc_string());
  out.set_data_type(onnx::TensorProto::FLOAT16);
  for (int64_t d : t.dims()) out.add_dims(d);
  std::string raw(values->size() * 2, '\0');
  for (size_t i = 0; i < values->size(); ++i) {
    float f = static_cast<float>((*values)[i]);
    if (std::isfinite(f) && std::fabs(f) > kHalfMax) {
      f = f > 0 ? kHalfMax : -kHalfMax;
      if (clamped) ++*clamped;
    }
    uint16_t h = float_to_half(f);
    if (f != 0 && (h & 0x7fff) == 0 && flushed) ++*flushed;
    raw[2 * i] = static_cast<char>(h & 0xff);
    raw[2 * i + 1] = static_cast<char>(h >> 8);
  }
  out.set_raw_data(std::move(raw));
  return out;
}

std::optional<std::string> typed_payload(const onnx::TensorProto& t) {
  const size_t es = element_size(t.data_type());
  auto count = element_count(t);
  if (!count) return std::nullopt;
  const uint64_t n = static_cast<uint64_t>(*count);
  std::string out;
  if (is_4bit(t.data_type())) {  // one packed byte per int32_data entry
    if (static_cast<uint64_t>(t.int32_data_size()) != n / 2 + n % 2) return std::nullopt;
    for (int32_t b : t.int32_data()) out.push_back(static_cast<char>(b & 0xff));
    return out;
  }
  if (es == 0) return std::nullopt;
  auto put = [&](const auto& field, auto tag, uint64_t per_element) -> bool {
    using T = decltype(tag);
    if (static_cast<uint64_t>(field.size()) != n * per_element) return false;
    out.resize(field.size() * sizeof(T));
    for (int i = 0; i < field.size(); ++i) {
      const T v = static_cast<T>(field.Get(i));
      std::memcpy(out.data() + i * sizeof(T), &v, sizeof(T));
    }
    return true;
  };
  bool ok = false;
  switch (t.data_type()) {
    case TensorProto::FLOAT:
      ok = put(t.float_data(), float{}, 1);
      break;
    case TensorProto::COMPLEX64:
      ok = put(t.float_data(), float{}, 2);
      break;
    case TensorProto::DOUBLE:
      ok = put(t.double_data(), double{}, 1);
      break;
    case TensorProto::COMPLEX128:
      ok = put(t.double_data(), double{}, 2);
      break;
    case TensorProto::INT64:
      ok = put(t.int64_data(), int64_t{}, 1);
      break;
    case TensorProto::UINT64:
      ok = put(t.uint64_data(), uint64_t{}, 1);
      break;
    case TensorProto::UINT32:
      ok = put(t.uint64_data(), uint32_t{}, 1);
      break;
    case TensorProto::INT32:
      ok = put(t.int32_data(), int32_t{}, 1);
      break;
    case TensorProto::INT16:
      ok = put(t.int32_data(), int16_t{}, 1);
      break;
    case TensorProto::UINT16:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
      ok = put(t.int32_data(), uint16_t{}, 1);
      break;
    case TensorProto::INT8:
      ok = put(t.int32_data(), int8_t{}, 1);
      break;
    case TensorProto::UINT8:
    case TensorProto::BOOL:
      ok = put(t.int32_data(), uint8_t{}, 1);
      break;
    default:
      break;
  }
  if (!ok) return std::nullopt;
  return out;
}

std::optional<std::string_view> payload_view(const TensorProto& t, std::string* storage) {
  if (is_external(t) || t.has_segment()) return std::nullopt;
  if (!t.has_raw_data()) {
    std::optional<std::string> typed = typed_payload(t);
    if (!typed) return std::nullopt;
    *storage = *std::move(typed);
    return std::string_view(*storage);
  }
  auto count = element_count(t);
  const auto expected = count ? payload_size(t.data_type(), *count) : std::nullopt;
  if (!expected || t.raw_data().size() != *expected) return std::nullopt;
  return std::string_view(t.raw_data());
}

}  // namespace graft::ir
