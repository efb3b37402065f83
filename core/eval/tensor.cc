#include "core/eval/tensor.h"

#include "core/ir/external_data.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <utility>

#include <absl/strings/str_cat.h>

#include "core/base/status.h"
#include "core/ir/tensor.h"

namespace graft::eval {

using onnx::TensorProto;

namespace {

// What one string element is charged against the byte limit on top of its characters, so a
// tensor of many empty strings cannot escape the cap.
constexpr uint64_t kStringOverhead = sizeof(std::string);

float bf16_to_float(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40);
  uint32_t rounding = 0x7fff + ((x >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>((x + rounding) >> 16);
}

// Element count of `dims` and its byte size for `dtype`, or an error on negative dims, overflow
// or a size above `max_bytes`.
absl::StatusOr<int64_t> checked_count(int32_t dtype, const std::vector<int64_t>& dims,
                                      uint64_t max_bytes) {
  auto count = ir::element_count(dims);
  if (!count) return absl::InvalidArgumentError("tensor has a negative or overflowing shape");
  uint64_t es = dtype == TensorProto::STRING ? kStringOverhead : storage_size(dtype);
  if (es == 0) return absl::UnimplementedError(absl::StrCat("unsupported tensor type ", dtype));
  if (static_cast<uint64_t>(*count) > max_bytes / es) {
    return absl::ResourceExhaustedError(
        absl::StrCat("tensor of ", *count, " elements exceeds the limit of ", max_bytes, " bytes"));
  }
  return *count;
}

template <typename T, typename Field>
void copy_field(const Field& f, std::string& bytes) {
  T* out = reinterpret_cast<T*>(bytes.data());
  int64_t i = 0;
  for (auto v : f) out[i++] = static_cast<T>(v);
}

}  // namespace

absl::StatusOr<Tensor> transposed(const Tensor& x, const std::vector<int64_t>& dims,
                                  const std::vector<int64_t>& perm, uint64_t max_bytes) {
  const size_t rank = dims.size();
  if (perm.size() != rank) return absl::InvalidArgumentError("transposed: perm length");
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(rank) || seen[static_cast<size_t>(p)])
      return absl::InvalidArgumentError("transposed: not a permutation");
    seen[static_cast<size_t>(p)] = true;
  }
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(count, d, &count))
      return absl::InvalidArgumentError("transposed: bad dims");
  }
  if (count != x.size()) return absl::InvalidArgumentError("transposed: element count");
  std::vector<int64_t> out_dims(rank);
  for (size_t i = 0; i < rank; ++i) out_dims[i] = dims[static_cast<size_t>(perm[i])];
  ASSIGN_OR_RETURN(Tensor out, Tensor::zeros(x.dtype(), out_dims, max_bytes));
  if (count == 0) return out;
  const bool strings = x.dtype() == TensorProto::STRING;
  const size_t width = strings ? 0 : x.element_size();
  // A matrix transpose (a tied embedding is one of the largest constants a model has) goes in
  // tiles, so reads and writes both stay within a few cache lines.
  if (rank == 2 && perm[0] == 1 && !strings) {
    const int64_t rows = dims[0], cols = dims[1];
    auto tiles = [&](auto* in, auto* res) {
      constexpr int64_t kTile = 32;
      for (int64_t i0 = 0; i0 < rows; i0 += kTile)
        for (int64_t j0 = 0; j0 < cols; j0 += kTile)
          for (int64_t i = i0; i < std::min(rows, i0 + kTile); ++i)
            for (int64_t j = j0; j < std::min(cols, j0 + kTile); ++j)
              res[j * rows + i] = in[i * cols + j];
    };
    switch (width) {
      case 1:
        tiles(x.data<uint8_t>(), out.data<uint8_t>());
        return out;
      case 2:
        tiles(x.data<uint16_t>(), out.data<uint16_t>());
        return out;
      case 4:
        tiles(x.data<uint32_t>(), out.data<uint32_t>());
        return out;
      case 8:
        tiles(x.data<uint64_t>(), out.data<uint64_t>());
        return out;
      default:
        break;  // the general loop below
    }
  }
  // Row-major strides of the source, seen in the order of the result's axes.
  std::vector<int64_t> in_strides(rank, 1);
  for (size_t i = rank; i-- > 1;) in_strides[i - 1] = in_strides[i] * dims[i];
  std::vector<int64_t> strides(rank);
  for (size_t i = 0; i < rank; ++i) strides[i] = in_strides[static_cast<size_t>(perm[i])];
  std::vector<int64_t> index(rank, 0);
  int64_t source = 0;
  for (int64_t k = 0; k < count; ++k) {
    if (strings) {
      out.strings()[static_cast<size_t>(k)] = x.strings()[static_cast<size_t>(source)];
    } else {
      std::memcpy(out.data<char>() + static_cast<size_t>(k) * width,
                  x.data<char>() + static_cast<size_t>(source) * width, width);
    }
    // Advance the result's index (last axis fastest) and the source offset with it.
    for (size_t i = rank; i-- > 0;) {
      source += strides[i];
      if (++index[i] < out_dims[i]) break;
      source -= strides[i] * out_dims[i];
      index[i] = 0;
    }
  }
  return out;
}

bool is_float_type(int32_t dtype) {
  return dtype == TensorProto::FLOAT || dtype == TensorProto::DOUBLE ||
         dtype == TensorProto::FLOAT16 || dtype == TensorProto::BFLOAT16;
}

double round_to_type(int32_t dtype, double v) {
  switch (dtype) {
    case TensorProto::FLOAT:
      return static_cast<float>(v);
    case TensorProto::FLOAT16:
      return ir::half_to_float(ir::float_to_half(static_cast<float>(v)));
    case TensorProto::BFLOAT16:
      return bf16_to_float(float_to_bf16(static_cast<float>(v)));
    default:
      return v;
  }
}

bool is_integer_type(int32_t dtype) {
  switch (dtype) {
    case ir::kInt4:
    case ir::kUint4:
    case TensorProto::INT8:
    case TensorProto::INT16:
    case TensorProto::INT32:
    case TensorProto::INT64:
    case TensorProto::UINT8:
    case TensorProto::UINT16:
    case TensorProto::UINT32:
    case TensorProto::UINT64:
      return true;
    default:
      return false;
  }
}

size_t storage_size(int32_t dtype) { return ir::is_4bit(dtype) ? 1 : ir::element_size(dtype); }

size_t Tensor::element_size() const { return storage_size(dtype_); }

absl::Status Tensor::charge(uint64_t bytes) {
  if (charge_.assign(bytes)) return absl::OkStatus();
  return current_budget()->memory_exhausted(bytes);
}

absl::StatusOr<Tensor> Tensor::zeros(int32_t dtype, std::vector<int64_t> dims, uint64_t max_bytes) {
  ASSIGN_OR_RETURN(const int64_t count, checked_count(dtype, dims, max_bytes));
  Tensor t;
  const uint64_t bytes = static_cast<uint64_t>(count) *
                         (dtype == TensorProto::STRING ? kStringOverhead : storage_size(dtype));
  RETURN_IF_ERROR(t.charge(bytes));
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.size_ = count;
  if (dtype == TensorProto::STRING) {
    t.strings_.resize(count);
  } else {
    t.bytes_.assign(static_cast<size_t>(count) * storage_size(dtype), '\0');
  }
  return t;
}

namespace {

// How many entries the typed field holding `dtype`'s values has (and how many make one element),
// or -1 for a type no field holds.
int typed_entries(const TensorProto& p, int32_t dtype, int64_t* per_element) {
  *per_element = dtype == TensorProto::COMPLEX64 || dtype == TensorProto::COMPLEX128 ? 2 : 1;
  switch (dtype) {
    case TensorProto::FLOAT:
    case TensorProto::COMPLEX64:
      return p.float_data_size();
    case TensorProto::DOUBLE:
    case TensorProto::COMPLEX128:
      return p.double_data_size();
    case TensorProto::INT64:
      return p.int64_data_size();
    case TensorProto::UINT32:
    case TensorProto::UINT64:
      return p.uint64_data_size();
    case TensorProto::INT32:
    case TensorProto::INT16:
    case TensorProto::INT8:
    case TensorProto::UINT16:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
    case TensorProto::UINT8:
    case TensorProto::BOOL:
      return p.int32_data_size();
    default:
      return -1;
  }
}

}  // namespace

absl::StatusOr<Tensor> Tensor::from_proto(const TensorProto& proto, uint64_t max_bytes,
                                          const ir::ExternalData* external) {
  if (ir::is_external(proto)) {
    if (!external) return absl::UnimplementedError("external tensor data");
    const int32_t dtype = proto.data_type();
    if (storage_size(dtype) == 0)
      return absl::InvalidArgumentError("external tensor of a type without a fixed size");
    std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
    ASSIGN_OR_RETURN(const int64_t count, checked_count(dtype, dims, max_bytes));
    const uint64_t storage = static_cast<uint64_t>(count) * storage_size(dtype);
    const uint64_t nbytes = *ir::payload_size(dtype, count);  // checked_count bounds it
    Tensor t;
    // Charged before reading: the bytes go straight into the tensor's storage (a 4-bit payload
    // into a buffer of its own, charged too while it is unpacked).
    RETURN_IF_ERROR(t.charge(storage));
    Charge packed;
    if (ir::is_4bit(dtype) && !packed.assign(nbytes))
      return current_budget()->memory_exhausted(nbytes);
    ASSIGN_OR_RETURN(auto read, external->read(proto, nbytes));
    if (read.size() != nbytes)
      return absl::InvalidArgumentError(
          absl::StrCat("external data has ", read.size(), " bytes, expected ", nbytes));
    t.dtype_ = dtype;
    t.dims_ = std::move(dims);
    t.size_ = count;
    if (ir::is_4bit(dtype)) {
      t.bytes_.assign(static_cast<size_t>(storage), '\0');
      ir::unpack_4bit(read.bytes().data(), static_cast<size_t>(count), dtype == ir::kInt4,
                      t.data<int8_t>());
      return t;
    }
    t.bytes_ = read.release();
    if (dtype == TensorProto::BOOL)
      for (char& c : t.bytes_) c = c != 0;
    return t;
  }
  if (proto.segment().begin() != 0 || proto.segment().end() != 0 || proto.has_segment()) {
    return absl::UnimplementedError("segmented tensor");
  }
  int32_t dtype = proto.data_type();
  std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
  ASSIGN_OR_RETURN(const int64_t n, checked_count(dtype, dims, max_bytes));
  Tensor t;
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.size_ = n;
  if (dtype == TensorProto::STRING) {
    if (proto.string_data_size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("string tensor has ", proto.string_data_size(),
                                                     " elements, shape says ", n));
    }
    uint64_t total = static_cast<uint64_t>(n) * kStringOverhead;
    for (const auto& s : proto.string_data()) total += s.size();
    if (total > max_bytes) return absl::ResourceExhaustedError("string tensor exceeds the limit");
    RETURN_IF_ERROR(t.charge(total));
    t.strings_.assign(proto.string_data().begin(), proto.string_data().end());
    return t;
  }
  if (ir::is_4bit(dtype)) return from_packed_proto(proto, std::move(t));
  const size_t es = ir::element_size(dtype);
  const size_t nbytes = static_cast<size_t>(n) * es;
  // The data the message carries must match the dims before anything is charged or allocated:
  // a few bytes claiming large dims cost nothing.
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != nbytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("raw_data has ", proto.raw_data().size(), " bytes, expected ", nbytes));
    }
  } else {
    int64_t per_element = 1;
    const int entries = typed_entries(proto, dtype, &per_element);
    if (entries < 0)
      return absl::UnimplementedError(absl::StrCat("unsupported tensor type ", dtype));
    if (entries != n * per_element) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor field has ", entries, " entries, expected ", n * per_element));
    }
  }
  RETURN_IF_ERROR(t.charge(nbytes));
  if (proto.has_raw_data()) {
    t.bytes_ = proto.raw_data();
    if (dtype == TensorProto::BOOL) {
      // Kernels read bools as C++ bool, whose only valid representations are 0 and 1.
      for (char& c : t.bytes_) c = c != 0;
    }
    return t;
  }
  t.bytes_.assign(nbytes, '\0');
  switch (dtype) {
    case TensorProto::FLOAT:
    case TensorProto::COMPLEX64:
      copy_field<float>(proto.float_data(), t.bytes_);
      break;
    case TensorProto::DOUBLE:
    case TensorProto::COMPLEX128:
      copy_field<double>(proto.double_data(), t.bytes_);
      break;
    case TensorProto::INT64:
      copy_field<int64_t>(proto.int64_data(), t.bytes_);
      break;
    case TensorProto::UINT32:
      copy_field<uint32_t>(proto.uint64_data(), t.bytes_);
      break;
    case TensorProto::UINT64:
      copy_field<uint64_t>(proto.uint64_data(), t.bytes_);
      break;
    case TensorProto::INT32:
      copy_field<int32_t>(proto.int32_data(), t.bytes_);
      break;
    case TensorProto::INT16:
      copy_field<int16_t>(proto.int32_data(), t.bytes_);
      break;
    case TensorProto::INT8:
      copy_field<int8_t>(proto.int32_data(), t.bytes_);
      break;
    case TensorProto::UINT16:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
      copy_field<uint16_t>(proto.int32_data(), t.bytes_);
      break;
    case TensorProto::UINT8:
      copy_field<uint8_t>(proto.int32_data(), t.bytes_);
      break;
    case TensorProto::BOOL: {
      uint8_t* out = reinterpret_cast<uint8_t*>(t.bytes_.data());
      for (int64_t i = 0; i < n; ++i) out[i] = proto.int32_data(static_cast<int>(i)) != 0;
      break;
    }
  }
  return t;
}

absl::StatusOr<Tensor> Tensor::view_of(std::shared_ptr<const TensorProto> shared,
                                       uint64_t max_bytes, const ir::ExternalData* external) {
  if (shared == nullptr) return absl::InvalidArgumentError("no tensor");
  const TensorProto& proto = *shared;
  const int32_t dtype = proto.data_type();
  const size_t es = storage_size(dtype);
  // Anything else is converted (or unpacked, or normalized: bools) as from_proto does.
  if (ir::is_external(proto) || !proto.has_raw_data() || proto.has_segment() ||
      dtype == TensorProto::STRING || dtype == TensorProto::BOOL || ir::is_4bit(dtype) || es == 0 ||
      reinterpret_cast<uintptr_t>(proto.raw_data().data()) % es != 0)
    return from_proto(proto, max_bytes, external);
  std::vector<int64_t> dims(proto.dims().begin(), proto.dims().end());
  ASSIGN_OR_RETURN(const int64_t n, checked_count(dtype, dims, max_bytes));
  const size_t nbytes = static_cast<size_t>(n) * es;
  if (proto.raw_data().size() != nbytes)
    return absl::InvalidArgumentError(
        absl::StrCat("raw_data has ", proto.raw_data().size(), " bytes, expected ", nbytes));
  Tensor t;
  RETURN_IF_ERROR(t.charge(nbytes));
  t.dtype_ = dtype;
  t.dims_ = std::move(dims);
  t.size_ = n;
  t.view_ = proto.raw_data().data();
  t.view_size_ = nbytes;
  t.keep_ = std::move(shared);
  return t;
}

void Tensor::own() {
  if (!view_) return;
  bytes_.assign(view_, view_size_);
  view_ = nullptr;
  view_size_ = 0;
  keep_.reset();
}

// A copy is charged first (charge_ is the first member: it throws Stop before anything is
// copied); a view's copy reads the same immutable bytes.
Tensor::Tensor(const Tensor& other)
    : charge_(other.charge_),
      dtype_(other.dtype_),
      dims_(other.dims_),
      size_(other.size_),
      bytes_(other.bytes_),
      strings_(other.strings_),
      view_(other.view_),
      view_size_(other.view_size_),
      keep_(other.keep_) {}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

absl::StatusOr<Tensor> Tensor::from_packed_proto(const TensorProto& proto, Tensor t) {
  // One element per storage byte; the message carries ceil(n / 2) packed bytes, in raw_data or
  // one per int32_data entry (whose value is the byte: its low 8 bits, as onnx's numpy_helper
  // reads it). Sizes are compared before anything is allocated.
  const auto n = static_cast<uint64_t>(t.size_);
  const uint64_t packed = n / 2 + n % 2;
  const uint64_t given = proto.has_raw_data() ? proto.raw_data().size()
                                              : static_cast<uint64_t>(proto.int32_data_size());
  if (given != packed)
    return absl::InvalidArgumentError(
        absl::StrCat(proto.has_raw_data() ? "raw_data has " : "int32_data has ", given,
                     proto.has_raw_data() ? " bytes" : " entries", ", expected ", packed, " for ",
                     n, " packed 4-bit elements"));
  RETURN_IF_ERROR(t.charge(n));
  t.bytes_.assign(static_cast<size_t>(n), '\0');
  const bool is_signed = t.dtype_ == ir::kInt4;
  if (proto.has_raw_data()) {
    ir::unpack_4bit(proto.raw_data().data(), static_cast<size_t>(n), is_signed, t.data<int8_t>());
    return t;
  }
  for (uint64_t i = 0; i < packed; ++i) {
    const char byte = static_cast<char>(proto.int32_data(static_cast<int>(i)) & 0xff);
    const size_t first = static_cast<size_t>(2 * i);
    ir::unpack_4bit(&byte, std::min<size_t>(2, static_cast<size_t>(n) - first), is_signed,
                    t.data<int8_t>() + first);
  }
  return t;
}

TensorProto Tensor::to_proto(const std::string& name) const {
  TensorProto p;
  if (!name.empty()) p.set_name(name);
  p.set_data_type(dtype_);
  for (int64_t d : dims_) p.add_dims(d);
  if (dtype_ == TensorProto::STRING) {
    for (const auto& s : strings_) p.add_string_data(s);
  } else if (ir::is_4bit(dtype_)) {
    p.set_raw_data(ir::pack_4bit(data<int8_t>(), static_cast<size_t>(size_)));
  } else {
    p.set_raw_data(data<char>(), bytes());
  }
  return p;
}

double Tensor::get_double(int64_t i) const {
  const char* p = data<char>();
  switch (dtype_) {
    case TensorProto::FLOAT:
    case TensorProto::COMPLEX64:  // real part
      return reinterpret_cast<const float*>(p)[dtype_ == TensorProto::FLOAT ? i : 2 * i];
    case TensorProto::DOUBLE:
      return reinterpret_cast<const double*>(p)[i];
    case TensorProto::COMPLEX128:
      return reinterpret_cast<const double*>(p)[2 * i];
    case TensorProto::FLOAT16:
      return ir::half_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    case TensorProto::BFLOAT16:
      return bf16_to_float(reinterpret_cast<const uint16_t*>(p)[i]);
    case TensorProto::UINT64:
      return static_cast<double>(reinterpret_cast<const uint64_t*>(p)[i]);
    default:
      return static_cast<double>(get_int64(i));
  }
}

int64_t Tensor::get_int64(int64_t i) const {
  const char* p = data<char>();
  switch (dtype_) {
    case TensorProto::INT64:
      return reinterpret_cast<const int64_t*>(p)[i];
    case TensorProto::INT32:
      return reinterpret_cast<const int32_t*>(p)[i];
    case TensorProto::INT16:
      return reinterpret_cast<const int16_t*>(p)[i];
    case TensorProto::INT8:
    case ir::kInt4:
      return reinterpret_cast<const int8_t*>(p)[i];
    case TensorProto::UINT64:
      return static_cast<int64_t>(reinterpret_cast<const uint64_t*>(p)[i]);
    case TensorProto::UINT32:
      return reinterpret_cast<const uint32_t*>(p)[i];
    case TensorProto::UINT16:
      return reinterpret_cast<const uint16_t*>(p)[i];
    case TensorProto::UINT8:
    case TensorProto::BOOL:
    case ir::kUint4:
      return reinterpret_cast<const uint8_t*>(p)[i];
    default: {
      if (!is_float_type(dtype_) && dtype_ != TensorProto::COMPLEX64 &&
          dtype_ != TensorProto::COMPLEX128) {
        return 0;  // strings and unknown types have no numeric value
      }
      // Float types: truncate toward zero like a C cast, saturating instead of invoking UB.
      double v = get_double(i);
      if (std::isnan(v)) return 0;
      if (v >= 9223372036854775807.0) return std::numeric_limits<int64_t>::max();
      if (v <= -9223372036854775808.0) return std::numeric_limits<int64_t>::min();
      return static_cast<int64_t>(v);
    }
  }
}

void Tensor::set_double(int64_t i, double v) {
  char* p = data<char>();
  switch (dtype_) {
    case TensorProto::FLOAT:
      reinterpret_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    case TensorProto::DOUBLE:
      reinterpret_cast<double*>(p)[i] = v;
      return;
    case TensorProto::FLOAT16:
      reinterpret_cast<uint16_t*>(p)[i] = ir::float_to_half(static_cast<float>(v));
      return;
    case TensorProto::BFLOAT16:
      reinterpret_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v));
      return;
    case TensorProto::COMPLEX64:
      reinterpret_cast<float*>(p)[2 * i] = static_cast<float>(v);
      reinterpret_cast<float*>(p)[2 * i + 1] = 0;
      return;
    case TensorProto::COMPLEX128:
      reinterpret_cast<double*>(p)[2 * i] = v;
      reinterpret_cast<double*>(p)[2 * i + 1] = 0;
      return;
    case TensorProto::BOOL:
      reinterpret_cast<uint8_t*>(p)[i] = v != 0;
      return;
    case TensorProto::UINT64:
      reinterpret_cast<uint64_t*>(p)[i] = std::isnan(v) || v <= 0 ? 0
                                          : v >= 18446744073709551615.0
                                              ? std::numeric_limits<uint64_t>::max()
                                              : static_cast<uint64_t>(v);
      return;
    default: {
      int64_t x;
      if (std::isnan(v)) {
        x = 0;
      } else if (v >= 9223372036854775807.0) {
        x = std::numeric_limits<int64_t>::max();
      } else if (v <= -9223372036854775808.0) {
        x = std::numeric_limits<int64_t>::min();
      } else {
        x = static_cast<int64_t>(v);
      }
      set_int64(i, x);
    }
  }
}

void Tensor::set_int64(int64_t i, int64_t v) {
  char* p = data<char>();
  switch (dtype_) {
    case TensorProto::INT64:
      reinterpret_cast<int64_t*>(p)[i] = v;
      return;
    case TensorProto::INT32:
      reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
      return;
    case TensorProto::INT16:
      reinterpret_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
      return;
    case TensorProto::INT8:
      reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
      return;
    case TensorProto::UINT64:
      reinterpret_cast<uint64_t*>(p)[i] = static_cast<uint64_t>(v);
      return;
    case TensorProto::UINT32:
      reinterpret_cast<uint32_t*>(p)[i] = static_cast<uint32_t>(v);
      return;
    case TensorProto::UINT16:
      reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v);
      return;
    case TensorProto::UINT8:
      reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
      return;
    case TensorProto::BOOL:
      reinterpret_cast<uint8_t*>(p)[i] = v != 0;
      return;
    case ir::kInt4:  // the low 4 bits, two's complement
      reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(((v & 15) ^ 8) - 8);
      return;
    case ir::kUint4:
      reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v & 15);
      return;
    default:
      if (is_float_type(dtype_) || dtype_ == TensorProto::COMPLEX64 ||
          dtype_ == TensorProto::COMPLEX128) {
        set_double(i, static_cast<double>(v));
      }
  }
}

bool Tensor::operator==(const Tensor& other) const {
  return dtype_ == other.dtype_ && dims_ == other.dims_ &&
         std::string_view(data<char>(), bytes()) ==
             std::string_view(other.data<char>(), other.bytes()) &&
         strings_ == other.strings_;
}

}  // namespace graft::eval
