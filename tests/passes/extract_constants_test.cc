#include "tests/testing.h"

namespace graft::testing {
namespace {

TEST(ExtractConstants, ConstantsBecomeInitializersKeepingNames) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, float[2] c) {
      c = Constant <value = float[2] {1.5, -2.0}> ()
      k = Constant <value_int = 3> ()
      s = Cast <to = 1> (k)
      t = Add (x, c)
      y = Mul (t, s)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "extract_constants");
  EXPECT_TRUE(result.changed);
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "Constant"), 0);
  EXPECT_EQ(initializer_values(*model, "c"), (std::vector<double>{1.5, -2.0}));
  ir::Value* k = model->graph().find_local("k");
  ASSERT_TRUE(k && k->initializer());
  EXPECT_EQ(k->initializer()->data_type(), onnx::TensorProto::INT64);
  EXPECT_EQ(k->initializer()->dims_size(), 0);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(ExtractConstants, LeavesFunctionBodiesAndCustomDomainsAlone) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1, "custom" : 1]>
    g (float[2] x) => (float[2] y) {
      c = custom.Constant <value = float[2] {1.0, 2.0}> ()
      y = local.AddOne (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    AddOne (a) => (b) {
      one = Constant <value_float = 1.0> ()
      b = Add (a, one)
    }
  )");
  ASSERT_TRUE(model);
  // Not run_pass_checked: the evaluator cannot run custom-domain ops.
  auto result = run_pass(*model, "extract_constants");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(count_ops(*model, "Constant"), 2);
}

TEST(ExtractConstants, RecursesIntoSubgraphs) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2] x) => (float[2] y) {
      y = If (cond) <
        then_branch = then_g () => (float[2] a) {
          two = Constant <value = float[2] {2.0, 2.0}> ()
          a = Mul (x, two)
        },
        else_branch = else_g () => (float[2] b) {
          b = Identity (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "extract_constants");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Constant"), 0);
  EXPECT_EQ(onnx_errors(*model), "");
}

}  // namespace
}  // namespace graft::testing

namespace graft::testing {
namespace {

TEST(ExtractConstants, OldIrVersionsKeepConstantNodes) {
  // Before IR 4 every initializer must be a graph input: extracting would change the interface.
  auto model = parse_text(R"(
    <ir_version: 3, opset_import: ["" : 8]>
    g (float[2] x) => (float[2] y) {
      c = Constant <value = float[2] {1.0, 2.0}> ()
      y = Add (x, c)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass_checked(*model, "extract_constants").changed);
  EXPECT_EQ(count_ops(*model, "Constant"), 1);
  EXPECT_EQ(onnx_errors(*model), "");
}

}  // namespace
}  // namespace graft::testing
