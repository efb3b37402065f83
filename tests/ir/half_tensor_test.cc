// ir::float_to_half_tensor and Graph::set_input_type / set_output_type (used by convert_fp16).
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "core/ir/model.h"
#include "core/ir/tensor.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

TEST(HalfTensor, ClampsFlushesAndKeepsSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  onnx::TensorProto t =
      ir::make_float32_tensor({2, 3}, {1.0f, 65504.0f, 70000.0f, -1e30f, 1e-9f, -inf});
  t.set_name("w");
  int64_t clamped = 0, flushed = 0;
  auto half = ir::float_to_half_tensor(t, &clamped, &flushed);
  ASSERT_TRUE(half);
  EXPECT_EQ(half->name(), "w");
  EXPECT_EQ(half->data_type(), onnx::TensorProto::FLOAT16);
  EXPECT_EQ(std::vector<int64_t>(half->dims().begin(), half->dims().end()),
            (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(clamped, 2);
  EXPECT_EQ(flushed, 1);
  auto values = ir::read_doubles(*half);
  ASSERT_TRUE(values);
  EXPECT_EQ(*values, (std::vector<double>{1.0, 65504.0, 65504.0, -65504.0, 0.0, -inf}));
  // The smallest subnormal survives.
  auto tiny = ir::float_to_half_tensor(ir::make_float32_tensor({1}, {5.960464477539063e-8f}));
  ASSERT_TRUE(tiny);
  EXPECT_EQ((*ir::read_doubles(*tiny))[0], 5.960464477539063e-8);
  // Not a float tensor.
  EXPECT_FALSE(ir::float_to_half_tensor(ir::make_int64_tensor({1}, {1})));
}

TEST(HalfTensor, GraphInputAndOutputTypesCanBeReplaced) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) { y = Relu (x) }
  )");
  ASSERT_TRUE(model);
  ir::Graph& g = model->graph();
  onnx::TypeProto t = g.inputs()[0].info.type();
  t.mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT16);
  g.set_input_type(0, t);
  g.set_output_type(0, t);
  EXPECT_EQ(g.inputs()[0].value->elem_type(), onnx::TensorProto::FLOAT16);
  EXPECT_EQ(g.outputs()[0].info.type().tensor_type().elem_type(), onnx::TensorProto::FLOAT16);
  EXPECT_EQ(onnx_errors(*model), "");
  const auto saved = model->to_proto();
  EXPECT_EQ(saved.graph().input(0).type().tensor_type().elem_type(), onnx::TensorProto::FLOAT16);
  EXPECT_EQ(saved.graph().output(0).type().tensor_type().elem_type(), onnx::TensorProto::FLOAT16);
}

}  // namespace
}  // namespace graft::testing
