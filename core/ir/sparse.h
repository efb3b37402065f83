// ONNX sparse tensors (SparseTensorProto, COO) and the dense tensors they stand for. The IR holds
// every sparse initializer dense (Loader: densify) with Value::stored_sparse set, so passes and
// the evaluator see plain values; saving writes such a value sparse again (sparsify).
//
// Only the numeric types of 1, 2, 4 or 8 bytes per element (no strings, no complex, no 4-bit)
// are stored sparse: those ONNX Runtime turns back into dense tensors at session creation. A
// zero is an element whose bytes are all zero (+0.0, not -0.0), so sparsify(densify(x)) keeps
// every bit of the dense tensor.
#pragma once

#include <cstdint>
#include <optional>

#include <absl/status/statusor.h>
#include <onnx/onnx_pb.h>

namespace graft::ir {

// What a loaded model's sparse initializers may take dense, all together (Model::from_proto):
// kSparseExpansion times the serialized model's size, at least kSparseDenseFloor bytes. A model
// more sparse than that (a float weight over 99.9% zeros) is refused rather than let a few bytes
// of input ask for gigabytes of memory.
inline constexpr uint64_t kSparseDenseFloor = uint64_t{16} << 20;
inline constexpr uint64_t kSparseExpansion = 1024;

// Whether tensors of `data_type` may be stored sparse.
bool sparse_element_type(int32_t data_type);

// The dense tensor `sparse` stands for (raw_data, named as its values), checked as ONNX's
// checker does: values of rank 1 [NNZ] and a sparse element type; indices INT64, [NNZ] linear
// or [NNZ, rank] coordinates, each within the dims, strictly ascending (no duplicates); dims of
// rank >= 1, each > 0. Payloads are read in memory (external or segmented parts are refused).
// The dense size is checked against `max_dense_bytes` before anything is allocated.
// InvalidArgument naming the tensor and what is wrong.
absl::StatusOr<onnx::TensorProto> densify(const onnx::SparseTensorProto& sparse,
                                          uint64_t max_dense_bytes);

// What storing a dense tensor sparse gives: its elements, the non-zero ones, the payload bytes
// dense and the bytes of the COO parts (values + linear int64 indices).
struct SparseSize {
  int64_t elements = 0;
  int64_t nonzeros = 0;
  uint64_t dense_bytes = 0;
  uint64_t sparse_bytes = 0;
};
// nullopt when `dense` cannot be stored sparse: a type sparse_element_type refuses, rank 0 or a
// dim <= 0 (ONNX requires positive dims), an external or segmented tensor, or a payload that
// does not match its dims.
std::optional<SparseSize> sparse_size(const onnx::TensorProto& dense);

// `dense` as a COO sparse tensor: values (named as `dense`, raw_data) and linear INT64 indices,
// dims those of `dense`. nullopt when sparse_size is.
std::optional<onnx::SparseTensorProto> sparsify(const onnx::TensorProto& dense);

// Turns the sparse initializers of `g` and of its subgraphs (node attributes, to any depth) that
// densify reads into dense initializers, in place; the others stay. For libonnx's shape
// inference, which (ONNX 1.12) types a sparse initializer as a sparse tensor that no operator
// takes. For protos saved from a loaded model: their dense sizes were bounded at load.
void densify_sparse_initializers(onnx::GraphProto* g);

}  // namespace graft::ir
