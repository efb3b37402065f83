// Numpy-style (ONNX "multidirectional") broadcasting: the result shape of several operands and
// an iterator that walks the result in row-major order while tracking each operand's element
// offset, so kernels never materialise broadcast copies.
#pragma once

#include <cstdint>
#include <vector>

#include <absl/status/statusor.h>

namespace graft::eval {

// The broadcast shape of all `shapes` (right-aligned; each dim equal or 1), or InvalidArgument.
absl::StatusOr<std::vector<int64_t>> broadcast_shape(
    const std::vector<std::vector<int64_t>>& shapes);
// True if `from` broadcasts to exactly `to` ("unidirectional" broadcasting).
bool broadcastable_to(const std::vector<int64_t>& from, const std::vector<int64_t>& to);
// Per-dimension element strides of an operand of shape `in` read at positions of shape `out`
// (right-aligned, rank of `out`): 0 where the operand is broadcast. `in` must broadcast to `out`.
std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in,
                                       const std::vector<int64_t>& out);
// Number of elements of `dims` (1 for a scalar). Dims must be non-negative and not overflow.
int64_t element_count(const std::vector<int64_t>& dims);

// Walks every element of `out` in row-major order; offset(k) is the position of the element of
// operand k (of shape inputs[k]) that broadcasts to the current output element.
//
//   BroadcastIterator it(out_dims, {a.dims(), b.dims()});
//   for (int64_t i = 0; i < n; ++i, it.next()) y[i] = f(pa[it.offset(0)], pb[it.offset(1)]);
class BroadcastIterator {
 public:
  BroadcastIterator(const std::vector<int64_t>& out,
                    const std::vector<std::vector<int64_t>>& inputs);
  int64_t offset(size_t k) const { return offsets_[k]; }
  void next();

 private:
  std::vector<int64_t> out_;
  std::vector<int64_t> index_;
  size_t n_;
  std::vector<int64_t> strides_;  // n_ strides per dimension, dimension-major
  std::vector<int64_t> offsets_;
  int64_t steps_ = 0;  // the run's budget is polled every 2^16 steps (budget.h)
};

}  // namespace graft::eval
