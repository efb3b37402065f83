#include "tests/testing.h"

namespace graft::testing {
namespace {

ir::Node* producer_of(const ir::Graph& g, const std::string& name) {
  ir::Value* v = g.lookup(name);
  return v ? v->producer() : nullptr;
}

TEST(FuseMatmulAdd, MatMulPlusBiasBecomesGemm) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_matmul_add");
  EXPECT_TRUE(result.changed);
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "MatMul"), 0);
  EXPECT_EQ(count_ops(*model, "Add"), 0);
  EXPECT_EQ(count_ops(*model, "Gemm"), 1);
  ir::Node* gemm = producer_of(model->graph(), "y");
  ASSERT_TRUE(gemm && gemm->is("Gemm"));
  EXPECT_EQ(model->graph().outputs()[0].value, gemm->output(0));
  EXPECT_EQ(input_names(*gemm), (std::vector<std::string>{"a", "w", "c"}));
  // Gemm's defaults (alpha = beta = 1, no transposes) are exactly MatMul + Add.
  EXPECT_TRUE(gemm->attributes().empty());
  EXPECT_EQ(initializer_values(*model, "c"), (std::vector<double>{0.5, -0.5}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseMatmulAdd, BiasFirstWithRuntimeWeights) {
  // B need not be constant for Gemm; only the bias must be, so its shape is certain.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a, float[3,2] b) => (float[4,2] y)
      <float[1,2] c = {0.5, -0.5}> {
      t = MatMul (a, b)
      y = Add (c, t)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(run_pass_checked(*model, "fuse_matmul_add").rewrites, 1);
  ir::Node* gemm = producer_of(model->graph(), "y");
  ASSERT_TRUE(gemm && gemm->is("Gemm"));
  EXPECT_EQ(input_names(*gemm), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(count_ops(*model, "Add"), 0);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseMatmulAdd, FullScalarAndColumnBiasesWithSymbolicRows) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (double[4,3] a, double[M,3] s) => (double[4,2] y, double[M,2] z, double[4,2] u)
      <double[3,2] w = {1, 2, 3, 4, 5, 6}, double[4,2] full = {1, 2, 3, 4, 5, 6, 7, 8},
       double one = {3.0}, double[4,1] col = {1, 2, 3, 4}> {
      t = MatMul (a, w)
      y = Add (t, full)
      p = MatMul (s, w)
      z = Add (p, one)
      q = MatMul (a, w)
      u = Add (q, col)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(run_pass_checked(*model, "fuse_matmul_add").rewrites, 3);
  EXPECT_EQ(count_ops(*model, "MatMul"), 0);
  EXPECT_EQ(count_ops(*model, "Gemm"), 3);
  ir::Node* sym = producer_of(model->graph(), "z");
  ASSERT_TRUE(sym && sym->is("Gemm"));
  EXPECT_EQ(input_names(*sym), (std::vector<std::string>{"s", "w", "one"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseMatmulAdd, FusesInsideSubgraphsWithCapturedOperands) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      y = If (cond) <
        then_branch = then_g () => (float[4,2] r) {
          t = MatMul (a, w)
          r = Add (t, c)
        },
        else_branch = else_g () => (float[4,2] e) {
          e = MatMul (a, w)
        }>
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(run_pass_checked(*model, "fuse_matmul_add").rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Gemm"), 1);
  EXPECT_EQ(count_ops(*model, "Add"), 0);
  EXPECT_EQ(count_ops(*model, "MatMul"), 1);  // the else branch has no Add
  EXPECT_EQ(onnx_errors(*model), "");
}

// ---------------------------------------------------------------------------------------------
// Look-alikes that must stay as they are.

void expect_untouched(const std::string& text) {
  auto model = parse_text(text);
  ASSERT_TRUE(model);
  const std::string before = print(*model);
  const int matmuls = count_ops(*model, "MatMul");
  auto result = run_pass_checked(*model, "fuse_matmul_add");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(result.rewrites, 0);
  EXPECT_EQ(count_ops(*model, "Gemm"), 0);
  EXPECT_EQ(count_ops(*model, "MatMul"), matmuls);
  EXPECT_EQ(print(*model), before);
}

TEST(FuseMatmulAdd, LeavesHigherRankOrUnknownRankMatMulAlone) {
  expect_untouched(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,4,3] a) => (float[2,4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
  // `r` has no declared type, so nothing proves it is 2-D.
  expect_untouched(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      r = Relu (a)
      t = MatMul (r, w)
      y = Add (t, c)
    }
  )");
}

TEST(FuseMatmulAdd, LeavesBiasThatBroadcastsBeyondTheProductAlone) {
  // [N] = 2 against a product [4, 1]: Add's result [4, 2] is bigger than the product.
  expect_untouched(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,1] w = {1, 2, 3}, float[2] c = {0.5, -0.5}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
  // A rank-3 bias makes the result 3-D.
  expect_untouched(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[1,4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[1,1,2] c = {0.5, -0.5}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
  // Rows of the bias cannot be checked against a symbolic M. (2 rows, so that the model runs
  // with same_outputs' default of 2 for symbolic dims.)
  expect_untouched(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[M,3] a) => (float[M,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2,2] c = {1, 2, 3, 4}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
}

TEST(FuseMatmulAdd, LeavesSharedProductAndRuntimeBiasAlone) {
  expect_untouched(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y, float[4,2] z)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      t = MatMul (a, w)
      y = Add (t, c)
      z = Relu (t)
    }
  )");
  expect_untouched(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a, float[2] c) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
  // An initializer that is also a graph input is only a default callers may override.
  expect_untouched(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a, float[2] c) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
}

TEST(FuseMatmulAdd, LeavesIntegerMatMulAlone) {
  expect_untouched(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int32[4,3] a) => (int32[4,2] y)
      <int32[3,2] w = {1, 2, 3, 4, 5, 6}, int32[2] c = {1, -1}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
}

}  // namespace
}  // namespace graft::testing
