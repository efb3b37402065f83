#include "core/ir/sparse.h"

#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "core/ir/saturating.h"
#include "core/ir/tensor.h"

namespace graft::ir {

namespace {

using onnx::SparseTensorProto;
using onnx::TensorProto;

absl::Status bad_sparse(const SparseTensorProto& s, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid model: sparse tensor '", s.values().name(), "': ", std::string(what)));
}

bool in_memory(const TensorProto& t) { return !is_external(t) && !t.has_segment(); }

bool is_zero(const char* element, size_t size) {
  for (size_t i = 0; i < size; ++i)
    if (element[i] != 0) return false;
  return true;
}

}  // namespace

bool sparse_element_type(int32_t data_type) {
  switch (data_type) {
    case TensorProto::FLOAT:
    case TensorProto::DOUBLE:
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:
    case TensorProto::INT8:
    case TensorProto::INT16:
    case TensorProto::INT32:
    case TensorProto::INT64:
    case TensorProto::UINT8:
    case TensorProto::UINT16:
    case TensorProto::UINT32:
    case TensorProto::UINT64:
    case TensorProto::BOOL:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<TensorProto> densify(const SparseTensorProto& sparse, uint64_t max_dense_bytes) {
  const TensorProto& values = sparse.values();
  const int32_t type = values.data_type();
  if (!sparse_element_type(type))
    return bad_sparse(sparse, absl::StrCat("values of type ", dtype_name(type),
                                           ", which Graft does not read sparse"));
  if (!in_memory(values) || !in_memory(sparse.indices()))
    return bad_sparse(sparse, "values or indices in external data or segments");
  if (values.dims_size() != 1 || values.dims(0) < 0)
    return bad_sparse(sparse, "values must be a tensor of shape [NNZ]");
  const int64_t nnz = values.dims(0);
  const int rank = sparse.dims_size();
  if (rank == 0) return bad_sparse(sparse, "dims of rank 0 (a sparse tensor has rank >= 1)");
  const size_t es = element_size(type);
  uint64_t count = 1;
  for (int64_t d : sparse.dims()) {
    if (d <= 0) return bad_sparse(sparse, absl::StrCat("dim ", d, " (dims must be positive)"));
    count = sat_mul(count, static_cast<uint64_t>(d));
  }
  const uint64_t dense_bytes = sat_mul(count, es);
  if (dense_bytes > max_dense_bytes)
    return bad_sparse(
        sparse, absl::StrCat("its dense form would take ", dense_bytes, " bytes, more than the ",
                             max_dense_bytes, " bytes allowed for this model"));
  if (static_cast<uint64_t>(nnz) > count)
    return bad_sparse(sparse, absl::StrCat(nnz, " values for ", count, " elements"));
  std::string storage;
  const std::optional<std::string_view> payload = payload_view(values, &storage);
  if (!payload) return bad_sparse(sparse, "values whose payload does not match their dims [NNZ]");

  std::vector<int64_t> linear;
  if (!sparse.has_indices()) {
    if (nnz != 0) return bad_sparse(sparse, "values without indices");
  } else {
    const TensorProto& indices = sparse.indices();
    if (indices.data_type() != TensorProto::INT64)
      return bad_sparse(sparse, "indices must be INT64");
    const bool coordinates = indices.dims_size() == 2;
    if (indices.dims_size() != 1 && !coordinates)
      return bad_sparse(sparse, "indices must be of shape [NNZ] or [NNZ, rank]");
    if (indices.dims(0) != nnz || (coordinates && indices.dims(1) != rank))
      return bad_sparse(
          sparse, absl::StrCat("indices of shape [", absl::StrJoin(indices.dims(), ", "), "] for ",
                               nnz, " values of rank ", rank));
    // Bounded: nnz <= count, and count * es fits max_dense_bytes.
    std::optional<std::vector<int64_t>> raw = read_int64s(indices);
    if (!raw) return bad_sparse(sparse, "indices whose payload does not match their dims");
    if (coordinates) {
      linear.resize(static_cast<size_t>(nnz));
      for (int64_t i = 0; i < nnz; ++i) {
        uint64_t index = 0;
        for (int j = 0; j < rank; ++j) {
          const int64_t c = (*raw)[static_cast<size_t>(i * rank + j)];
          if (c < 0 || c >= sparse.dims(j))
            return bad_sparse(sparse, absl::StrCat("index [", i, ", ", j, "] = ", c,
                                                   " is outside dim ", sparse.dims(j)));
          index = index * static_cast<uint64_t>(sparse.dims(j)) + static_cast<uint64_t>(c);
        }
        linear[static_cast<size_t>(i)] = static_cast<int64_t>(index);
      }
    } else {
      linear = *std::move(raw);
    }
  }
  int64_t previous = -1;
  for (size_t i = 0; i < linear.size(); ++i) {
    const int64_t index = linear[i];
    if (index < 0 || static_cast<uint64_t>(index) >= count)
      return bad_sparse(sparse, absl::StrCat("index ", index, " at position ", i,
                                             " is outside the ", count, " elements"));
    if (index <= previous)
      return bad_sparse(sparse, absl::StrCat("index ", index, " at position ", i,
                                             " is not above the one before (indices must be "
                                             "ascending, without duplicates)"));
    previous = index;
  }

  TensorProto dense;
  dense.set_name(values.name());
  dense.set_data_type(type);
  for (int64_t d : sparse.dims()) dense.add_dims(d);
  std::string* raw = dense.mutable_raw_data();
  raw->assign(static_cast<size_t>(dense_bytes), '\0');
  for (size_t i = 0; i < linear.size(); ++i)
    std::memcpy(raw->data() + static_cast<size_t>(linear[i]) * es, payload->data() + i * es, es);
  return dense;
}

namespace {

// The payload of `dense` when it may be stored sparse (a type sparse_element_type takes, rank
// >= 1, positive dims; payload_view's conditions): a view, copied only from typed fields.
std::optional<std::string_view> sparse_payload(const TensorProto& dense, std::string* storage) {
  if (!sparse_element_type(dense.data_type()) || dense.dims_size() == 0) return std::nullopt;
  for (int64_t d : dense.dims())
    if (d <= 0) return std::nullopt;
  return payload_view(dense, storage);
}

}  // namespace

std::optional<SparseSize> sparse_size(const TensorProto& dense) {
  std::string storage;
  const std::optional<std::string_view> payload = sparse_payload(dense, &storage);
  if (!payload) return std::nullopt;
  const size_t es = element_size(dense.data_type());
  SparseSize size;
  size.elements = static_cast<int64_t>(payload->size() / es);
  for (size_t at = 0; at < payload->size(); at += es)
    size.nonzeros += !is_zero(payload->data() + at, es);
  size.dense_bytes = payload->size();
  size.sparse_bytes = static_cast<uint64_t>(size.nonzeros) * (es + sizeof(int64_t));
  return size;
}

std::optional<SparseTensorProto> sparsify(const TensorProto& dense) {
  std::string storage;
  const std::optional<std::string_view> payload = sparse_payload(dense, &storage);
  if (!payload) return std::nullopt;
  const size_t es = element_size(dense.data_type());
  SparseTensorProto out;
  for (int64_t d : dense.dims()) out.add_dims(d);
  TensorProto* values = out.mutable_values();
  values->set_name(dense.name());
  values->set_data_type(dense.data_type());
  TensorProto* indices = out.mutable_indices();
  indices->set_data_type(TensorProto::INT64);
  std::string* value_bytes = values->mutable_raw_data();
  std::string* index_bytes = indices->mutable_raw_data();
  int64_t nnz = 0;
  for (size_t at = 0; at < payload->size(); at += es) {
    if (is_zero(payload->data() + at, es)) continue;
    value_bytes->append(payload->data() + at, es);
    const int64_t index = static_cast<int64_t>(at / es);
    char le[sizeof(int64_t)];
    std::memcpy(le, &index, sizeof(index));  // little-endian hosts only, as raw_data everywhere
    index_bytes->append(le, sizeof(le));
    ++nnz;
  }
  values->add_dims(nnz);
  indices->add_dims(nnz);
  return out;
}

void densify_sparse_initializers(onnx::GraphProto* g) {
  auto* sparse = g->mutable_sparse_initializer();
  for (int i = 0; i < sparse->size();) {
    auto dense = densify(sparse->Get(i), kSaturated);
    if (!dense.ok()) {
      ++i;
      continue;
    }
    g->add_initializer()->Swap(&*dense);
    sparse->DeleteSubrange(i, 1);
  }
  for (auto& n : *g->mutable_node())
    for (auto& a : *n.mutable_attribute()) {
      if (a.has_g()) densify_sparse_initializers(a.mutable_g());
      for (auto& sub : *a.mutable_graphs()) densify_sparse_initializers(&sub);
    }
}

}  // namespace graft::ir
