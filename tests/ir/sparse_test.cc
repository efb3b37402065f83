// Sparse initializers: loaded dense (Value::stored_sparse), saved sparse again with the same
// values; hostile sparse tensors refused with InvalidArgument before anything large is allocated.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/ir/model.h"
#include "core/ir/sparse.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

using onnx::SparseTensorProto;
using onnx::TensorProto;

std::string int64_bytes(const std::vector<int64_t>& v) {
  std::string out(v.size() * sizeof(int64_t), '\0');
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// y = Add(x, w), x float[dims], w the sparse initializer `sparse` (named "w").
onnx::ModelProto add_model(const SparseTensorProto& sparse, const std::vector<int64_t>& dims) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("g");
  auto declare = [&](onnx::ValueInfoProto* info, const char* name) {
    info->set_name(name);
    auto* t = info->mutable_type()->mutable_tensor_type();
    t->set_elem_type(TensorProto::FLOAT);
    for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  };
  declare(g->add_input(), "x");
  declare(g->add_output(), "y");
  auto* n = g->add_node();
  n->set_op_type("Add");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  *g->add_sparse_initializer() = sparse;
  return m;
}

// A float sparse tensor "w" of `dims` with `values` at linear `indices` ([NNZ]) or coordinates
// ([NNZ, rank], when `coordinates`).
SparseTensorProto float_sparse(const std::vector<int64_t>& dims, const std::vector<float>& values,
                               const std::vector<int64_t>& indices, bool coordinates = false) {
  SparseTensorProto s;
  for (int64_t d : dims) s.add_dims(d);
  auto* v = s.mutable_values();
  v->set_name("w");
  v->set_data_type(TensorProto::FLOAT);
  v->add_dims(static_cast<int64_t>(values.size()));
  for (float f : values) v->add_float_data(f);
  auto* i = s.mutable_indices();
  i->set_data_type(TensorProto::INT64);
  i->add_dims(static_cast<int64_t>(values.size()));
  if (coordinates) i->add_dims(static_cast<int64_t>(dims.size()));
  i->set_raw_data(int64_bytes(indices));
  return s;
}

absl::StatusOr<std::unique_ptr<ir::Model>> load(const onnx::ModelProto& m) {
  return ir::Model::parse(m.SerializeAsString());
}

TEST(SparseInitializers, LoadDenseSaveSparseSameValues) {
  // [2, 3] with 2.5 at (0, 1) and -1 at (1, 2).
  auto model = load(add_model(float_sparse({2, 3}, {2.5f, -1.0f}, {1, 5}), {2, 3}));
  ASSERT_TRUE(model.ok()) << model.status();
  const ir::Value* w = (*model)->graph().find_local("w");
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(w->is_initializer());
  EXPECT_TRUE(w->stored_sparse());
  EXPECT_EQ(values_of(w), (std::vector<double>{0, 2.5, 0, 0, 0, -1}));
  EXPECT_EQ(dims_of(w), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(onnx_errors(**model), "");

  // Saved sparse again (linear indices), and loaded again to the same values.
  const onnx::ModelProto saved = (*model)->to_proto();
  EXPECT_EQ(saved.graph().initializer_size(), 0);
  ASSERT_EQ(saved.graph().sparse_initializer_size(), 1);
  const SparseTensorProto& s = saved.graph().sparse_initializer(0);
  EXPECT_EQ(s.values().name(), "w");
  EXPECT_EQ(s.values().dims(0), 2);
  EXPECT_EQ(s.indices().raw_data(), int64_bytes({1, 5}));
  auto again = load(saved);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(values_of((*again)->graph().find_local("w")), values_of(w));
  EXPECT_TRUE((*again)->graph().find_local("w")->stored_sparse());
  EXPECT_EQ((*again)->to_proto().SerializeAsString(), saved.SerializeAsString());
}

TEST(SparseInitializers, CoordinateIndicesAndTheEvaluator) {
  auto model = load(add_model(float_sparse({2, 3}, {4.0f, 7.0f}, {0, 2, 1, 0}, true), {2, 3}));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(values_of((*model)->graph().find_local("w")), (std::vector<double>{0, 0, 4, 7, 0, 0}));
  // The same model with w dense computes the same.
  onnx::ModelProto dense = add_model(float_sparse({2, 3}, {}, {}), {2, 3});
  dense.mutable_graph()->clear_sparse_initializer();
  auto* t = dense.mutable_graph()->add_initializer();
  t->set_name("w");
  t->set_data_type(TensorProto::FLOAT);
  t->add_dims(2);
  t->add_dims(3);
  for (float f : {0.0f, 0.0f, 4.0f, 7.0f, 0.0f, 0.0f}) t->add_float_data(f);
  auto dense_model = load(dense);
  ASSERT_TRUE(dense_model.ok()) << dense_model.status();
  EXPECT_EQ(same_outputs(**dense_model, **model), "");
}

TEST(SparseInitializers, AllZerosHasNoIndices) {
  SparseTensorProto s = float_sparse({4}, {}, {});
  s.clear_indices();
  auto model = load(add_model(s, {4}));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(values_of((*model)->graph().find_local("w")), (std::vector<double>{0, 0, 0, 0}));
}

// Every way ONNX's checker refuses a sparse tensor is an InvalidArgument at load, naming it.
TEST(SparseInitializers, HostileTensorsAreRefused) {
  struct Case {
    const char* what;
    SparseTensorProto sparse;
    const char* reason = "";  // in the error message
  };
  std::vector<Case> cases;
  cases.push_back(
      {"index out of range", float_sparse({2, 3}, {1, 2}, {1, 6}), "is outside the 6 elements"});
  cases.push_back(
      {"negative index", float_sparse({2, 3}, {1, 2}, {-1, 2}), "is outside the 6 elements"});
  cases.push_back(
      {"duplicate", float_sparse({2, 3}, {1, 2}, {3, 3}), "ascending, without duplicates"});
  cases.push_back(
      {"unsorted", float_sparse({2, 3}, {1, 2}, {4, 3}), "ascending, without duplicates"});
  cases.push_back(
      {"coordinate out of its dim", float_sparse({2, 3}, {1}, {0, 3}, true), "is outside dim 3"});
  cases.push_back({"coordinates unsorted", float_sparse({2, 3}, {1, 2}, {1, 0, 0, 2}, true),
                   "ascending, without duplicates"});
  {
    SparseTensorProto s = float_sparse({2, 3}, {1, 2}, {0, 1});
    s.mutable_values()->add_dims(1);  // values [2, 1]
    cases.push_back({"values of rank 2", s, "shape [NNZ]"});
  }
  {
    SparseTensorProto s = float_sparse({2, 3}, {1, 2}, {0, 1});
    s.mutable_values()->set_dims(0, 3);  // 3 values declared, 2 stored
    cases.push_back({"values shorter than their dims", s, "payload does not match"});
  }
  {
    SparseTensorProto s = float_sparse({2, 3}, {1, 2}, {0, 1});
    s.mutable_indices()->set_dims(0, 3);
    cases.push_back({"indices dims not [NNZ]", s, "indices of shape [3]"});
  }
  {
    SparseTensorProto s = float_sparse({2, 3}, {1, 2}, {0, 1});
    s.mutable_indices()->set_data_type(TensorProto::INT32);
    cases.push_back({"int32 indices", s, "must be INT64"});
  }
  {
    SparseTensorProto s = float_sparse({2, 3}, {1}, {0});
    s.clear_indices();
    cases.push_back({"values without indices", s, "without indices"});
  }
  cases.push_back({"dim 0", float_sparse({2, 0}, {}, {}), "dims must be positive"});
  cases.push_back({"negative dim", float_sparse({-2, 3}, {}, {}), "dims must be positive"});
  cases.push_back({"rank 0", float_sparse({}, {}, {}), "rank 0"});
  // One value, dims asking for 2^62 elements (and 2^64 bytes: the product saturates).
  cases.push_back({"huge dims", float_sparse({int64_t{1} << 31, int64_t{1} << 31}, {1}, {0}),
                   "dense form would take"});
  cases.push_back({"dims product overflows",
                   float_sparse({int64_t{1} << 40, int64_t{1} << 40, 8}, {1}, {0}),
                   "dense form would take 18446744073709551615 bytes"});
  // Within int64 but past what this small model may take dense.
  cases.push_back({"past the dense budget", float_sparse({int64_t{1} << 30}, {1}, {0}),
                   "dense form would take 4294967296 bytes"});
  {
    SparseTensorProto s = float_sparse({4}, {1}, {0});
    s.mutable_values()->set_data_type(TensorProto::STRING);
    cases.push_back({"string values", s, "does not read sparse"});
  }
  {
    SparseTensorProto s = float_sparse({4}, {1}, {0});
    s.mutable_values()->set_name("");
    cases.push_back({"unnamed", s, "unnamed sparse initializer"});
  }
  for (const Case& c : cases) {
    auto model = load(add_model(c.sparse, {2, 3}));
    ASSERT_FALSE(model.ok()) << c.what;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(model.status().message().find("invalid model"), std::string::npos)
        << c.what << ": " << model.status();
    EXPECT_NE(model.status().message().find(c.reason), std::string::npos)
        << c.what << ": " << model.status();
  }
}

TEST(SparseInitializers, DefinedTwiceIsRefused) {
  onnx::ModelProto m = add_model(float_sparse({4}, {1}, {0}), {4});
  auto* t = m.mutable_graph()->add_initializer();
  t->set_name("w");
  t->set_data_type(TensorProto::FLOAT);
  t->add_dims(4);
  for (int i = 0; i < 4; ++i) t->add_float_data(1);
  auto model = load(m);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("defined twice"), std::string::npos) << model.status();
  m.mutable_graph()->clear_initializer();
  *m.mutable_graph()->add_sparse_initializer() = float_sparse({4}, {2}, {1});
  model = load(m);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("defined twice"), std::string::npos) << model.status();
}

// Values or indices in external data stay as they were: opaque, saved unchanged.
TEST(SparseInitializers, ExternalPartsStayOpaque) {
  SparseTensorProto s = float_sparse({4}, {1}, {0});
  s.mutable_values()->clear_float_data();
  s.mutable_values()->set_data_location(TensorProto::EXTERNAL);
  auto* e = s.mutable_values()->add_external_data();
  e->set_key("location");
  e->set_value("w.bin");
  onnx::ModelProto m = add_model(s, {4});
  auto model = load(m);
  ASSERT_TRUE(model.ok()) << model.status();
  const ir::Value* w = (*model)->graph().find_local("w");
  ASSERT_NE(w, nullptr);
  EXPECT_FALSE(w->is_initializer());
  EXPECT_EQ((*model)->to_proto().SerializeAsString(), m.SerializeAsString());
}

TEST(SparseInitializers, SizeAndSparsify) {
  TensorProto t = ir::make_float32_tensor({2, 4}, {0, 1, 0, 0, -0.0f, 0, 3, 0});
  auto size = ir::sparse_size(t);
  ASSERT_TRUE(size.has_value());
  EXPECT_EQ(size->elements, 8);
  EXPECT_EQ(size->nonzeros, 3);  // -0.0 is not a zero: its bits are kept
  EXPECT_EQ(size->dense_bytes, 32u);
  EXPECT_EQ(size->sparse_bytes, 36u);
  auto sparse = ir::sparsify(t);
  ASSERT_TRUE(sparse.has_value());
  auto dense = ir::densify(*sparse, 1 << 20);
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_EQ(dense->raw_data(), t.raw_data());  // bit for bit, -0.0 included
  // Not representable: a scalar, a zero dim, a string.
  EXPECT_FALSE(ir::sparse_size(ir::make_float32_tensor({}, {0})).has_value());
  EXPECT_FALSE(ir::sparse_size(ir::make_float32_tensor({0, 2}, {})).has_value());
  TensorProto s;
  s.set_data_type(TensorProto::STRING);
  s.add_dims(1);
  s.add_string_data("");
  EXPECT_FALSE(ir::sparse_size(s).has_value());
}

}  // namespace
}  // namespace graft::testing
