// A dense CPU tensor for the reference evaluator: element type (onnx::TensorProto::DataType),
// dims, and little-endian element bytes (strings kept separately).
//
// The 4-bit types (ir::kInt4, ir::kUint4) are held unpacked, one byte per element (int8_t
// sign-extended, uint8_t), so kernels index them like 8-bit tensors and copies, transposes and
// reshapes work bytewise; from_proto unpacks (raw_data of exactly ceil(n / 2) bytes, or one
// packed byte per int32_data entry) and to_proto packs again (low nibble first, a zero padding
// nibble for an odd count). set_int64 wraps a value into the type's range (two's complement for
// int4), as Cast between integer types does, so every stored element packs without loss.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <absl/status/statusor.h>
#include <onnx/onnx_pb.h>

#include "core/eval/budget.h"

namespace graft::ir {
class ExternalData;
}

namespace graft::eval {

class Tensor {
 public:
  Tensor() = default;
  // A zero-filled tensor. Fails (ResourceExhausted) above `max_bytes` or when the current run's
  // budget cannot hold it, so no crafted shape can make the evaluator allocate without bound.
  // Copies are charged to the current budget too (budget.h).
  static absl::StatusOr<Tensor> zeros(int32_t dtype, std::vector<int64_t> dims, uint64_t max_bytes);
  // The tensor `proto` holds. An external payload is read through `external` (pread straight
  // into the tensor's storage, charged to the budget before reading); without `external` it is
  // Unimplemented. ResourceExhausted above `max_bytes`, checked before anything is read.
  static absl::StatusOr<Tensor> from_proto(const onnx::TensorProto& proto, uint64_t max_bytes,
                                           const ir::ExternalData* external = nullptr);
  // Like from_proto, but a tensor whose raw_data holds its elements as stored (a fixed-size type
  // other than bool and the 4-bit ones, suitably aligned) reads them in place instead of copying
  // them, and keeps `proto` (immutable) alive for as long as it or a copy of it lives. Its bytes
  // are charged to the current budget all the same (a copy of it too), so a run's memory
  // accounting does not depend on whether its tensors are views. Writing to a view (non-const
  // data(), set_*) first copies its bytes. How the evaluator reads a model's initializers: runs
  // do not copy the weights, and runs on other threads read the same bytes.
  static absl::StatusOr<Tensor> view_of(std::shared_ptr<const onnx::TensorProto> proto,
                                        uint64_t max_bytes,
                                        const ir::ExternalData* external = nullptr);
  // Whether this tensor reads bytes it does not hold (view_of).
  bool is_view() const { return view_ != nullptr; }
  // Makes this tensor hold its own bytes (copies a view's; nothing otherwise).
  void own();

  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&& other) noexcept
      : charge_(std::move(other.charge_)),
        dtype_(other.dtype_),
        dims_(std::move(other.dims_)),
        size_(other.size_),
        bytes_(std::move(other.bytes_)),
        strings_(std::move(other.strings_)),
        view_(std::exchange(other.view_, nullptr)),
        view_size_(std::exchange(other.view_size_, 0)),
        keep_(std::move(other.keep_)) {}
  Tensor& operator=(Tensor&& other) noexcept {
    charge_ = std::move(other.charge_);
    dtype_ = other.dtype_;
    dims_ = std::move(other.dims_);
    size_ = other.size_;
    bytes_ = std::move(other.bytes_);
    strings_ = std::move(other.strings_);
    view_ = std::exchange(other.view_, nullptr);
    view_size_ = std::exchange(other.view_size_, 0);
    keep_ = std::move(other.keep_);
    return *this;
  }
  ~Tensor() = default;
  onnx::TensorProto to_proto(const std::string& name = "") const;

  int32_t dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  int64_t size() const { return size_; }  // element count
  size_t element_size() const;
  uint64_t bytes() const { return view_ ? view_size_ : bytes_.size(); }

  template <typename T>
  T* data() {
    if (view_) own();
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(view_ ? view_ : bytes_.data());
  }
  std::vector<std::string>& strings() { return strings_; }
  const std::vector<std::string>& strings() const { return strings_; }

  // Element i converted to double / int64 (any numeric or bool type; float16 decoded).
  double get_double(int64_t i) const;
  int64_t get_int64(int64_t i) const;
  // Stores `v` into element i, converted to this tensor's type (float16 encoded).
  void set_double(int64_t i, double v);
  void set_int64(int64_t i, int64_t v);

  // Same dtype, dims and bytes (NaNs compare by bits).
  bool operator==(const Tensor& other) const;

 private:
  // from_proto for the 4-bit types: `t` has its type, dims and size; unpacks the payload.
  static absl::StatusOr<Tensor> from_packed_proto(const onnx::TensorProto& proto, Tensor t);
  // Charges this tensor's bytes to the current run's budget. Declared first: a copy is charged
  // (and refused when the budget is full) before any element is copied.
  absl::Status charge(uint64_t max_bytes);

  Charge charge_;
  int32_t dtype_ = 0;
  std::vector<int64_t> dims_;
  int64_t size_ = 0;
  std::string bytes_;
  std::vector<std::string> strings_;
  // When set, the elements are these bytes, held elsewhere (view_of) and kept alive by `keep_`,
  // and bytes_ is empty.
  const char* view_ = nullptr;
  size_t view_size_ = 0;
  std::shared_ptr<const void> keep_;
};

// `x`'s elements read as a tensor of dims `dims` (the same element count: e.g. `x`'s dims with
// 1s inserted) and transposed by `perm` (a permutation of 0..dims.size()-1): result dim i is
// dims[perm[i]]. InvalidArgument for a mismatched count or perm, ResourceExhausted above
// `max_bytes` (as zeros()). For rewrites that move a Transpose onto a constant.
absl::StatusOr<Tensor> transposed(const Tensor& x, const std::vector<int64_t>& dims,
                                  const std::vector<int64_t>& perm, uint64_t max_bytes);

bool is_float_type(int32_t dtype);  // FLOAT, DOUBLE, FLOAT16, BFLOAT16
// `v` rounded to float type `dtype` as storing it in a tensor of that type would (range
// included: beyond the type's largest value it becomes infinity); `v` for other types. Kernels
// whose spec computes in steps of a given type (LayerNormalization's stash_type) round each step
// with it, so they overflow and round where the op's definition does.
double round_to_type(int32_t dtype, double v);
bool is_integer_type(int32_t dtype);  // signed and unsigned integers, 4-bit ones too (not bool)
// Bytes per element in a Tensor's storage: ir::element_size, and 1 for the 4-bit types (held
// unpacked); 0 for strings and undefined types.
size_t storage_size(int32_t dtype);

}  // namespace graft::eval
