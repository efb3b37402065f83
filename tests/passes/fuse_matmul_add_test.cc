#include <string>

#include "tests/testing.h"

namespace graft::testing {
namespace {

TEST(FuseMatmulAdd, MatMulPlusBiasBecomesGemm) {
  // Gemm's defaults (alpha = beta = 1, no transposes) are exactly MatMul + Add; the Gemm computes
  // the graph output under its name and reads the original weights.
  expect_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      y = Gemm (a, w, c)
    }
  )",
                 rewrites(1));
}

TEST(FuseMatmulAdd, BiasFirstWithRuntimeWeights) {
  // B need not be constant for Gemm; only the bias must be, so its shape is certain.
  expect_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a, float[3,2] b) => (float[4,2] y)
      <float[1,2] c = {0.5, -0.5}> {
      t = MatMul (a, b)
      y = Add (c, t)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a, float[3,2] b) => (float[4,2] y)
      <float[1,2] c = {0.5, -0.5}> {
      y = Gemm (a, b, c)
    }
  )",
                 rewrites(1));
}

TEST(FuseMatmulAdd, FullScalarAndColumnBiasesWithSymbolicRows) {
  expect_rewrite("fuse_matmul_add", R"(
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
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (double[4,3] a, double[M,3] s) => (double[4,2] y, double[M,2] z, double[4,2] u)
      <double[3,2] w = {1, 2, 3, 4, 5, 6}, double[4,2] full = {1, 2, 3, 4, 5, 6, 7, 8},
       double one = {3.0}, double[4,1] col = {1, 2, 3, 4}> {
      y = Gemm (a, w, full)
      z = Gemm (s, w, one)
      u = Gemm (a, w, col)
    }
  )",
                 rewrites(3));
}

TEST(FuseMatmulAdd, FusesInsideSubgraphsWithCapturedOperands) {
  // The else branch has no Add: its MatMul stays.
  expect_rewrite("fuse_matmul_add", R"(
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
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      y = If (cond) <
        then_branch = then_g () => (float[4,2] r) {
          r = Gemm (a, w, c)
        },
        else_branch = else_g () => (float[4,2] e) {
          e = MatMul (a, w)
        }>
    }
  )",
                 rewrites(1));
}

// ---------------------------------------------------------------------------------------------
// Look-alikes that must stay as they are.

TEST(FuseMatmulAdd, LeavesHigherRankOrUnknownRankMatMulAlone) {
  expect_no_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,4,3] a) => (float[2,4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
  // `r` comes from a custom op: nothing proves it is 2-D.
  expect_no_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      r = custom.Op (a)
      t = MatMul (r, w)
      y = Add (t, c)
    }
  )",
                    compare_outputs(Outputs::kNotCompared));
}

TEST(FuseMatmulAdd, RankKnownOnlyByInference) {
  // `r` has no declared type; its rank comes from shape facts (Relu keeps a's [4, 3]).
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      r = Relu (a)
      t = MatMul (r, w)
      y = Add (t, c)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(run_pass_checked(*model, "fuse_matmul_add").rules.at("matmul_add"), 1);
  EXPECT_EQ(count_ops(*model, "Gemm"), 1);
  EXPECT_EQ(count_ops(*model, "MatMul"), 0);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseMatmulAdd, LeavesBiasThatBroadcastsBeyondTheProductAlone) {
  // [N] = 2 against a product [4, 1]: Add's result [4, 2] is bigger than the product.
  expect_no_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,1] w = {1, 2, 3}, float[2] c = {0.5, -0.5}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
  // A rank-3 bias makes the result 3-D.
  expect_no_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[1,4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[1,1,2] c = {0.5, -0.5}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
  // Rows of the bias cannot be checked against a symbolic M. (2 rows, so that the model runs
  // with same_outputs' default of 2 for symbolic dims.)
  expect_no_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[M,3] a) => (float[M,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2,2] c = {1, 2, 3, 4}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
}

TEST(FuseMatmulAdd, LeavesSharedProductAndRuntimeBiasAlone) {
  expect_no_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y, float[4,2] z)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      t = MatMul (a, w)
      y = Add (t, c)
      z = Relu (t)
    }
  )");
  expect_no_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a, float[2] c) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
  // An initializer that is also a graph input is only a default callers may override.
  expect_no_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a, float[2] c) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
}

TEST(FuseMatmulAdd, LeavesIntegerMatMulAlone) {
  expect_no_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int32[4,3] a) => (int32[4,2] y)
      <int32[3,2] w = {1, 2, 3, 4, 5, 6}, int32[2] c = {1, -1}> {
      t = MatMul (a, w)
      y = Add (t, c)
    }
  )");
}

TEST(FuseMatmulAdd, TransposedMatMulOperandsBecomeGemmFlags) {
  // A tied output projection x @ W^T, and a transposed activation, in the main graph and a branch.
  expect_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool c, float[4,3] x, float[3,4] s) => (float[4,2] y, float[4,2] z)
      <float[2,3] w = {1, 2, 3, 4, 5, 6}> {
      wt = Transpose <perm = [1, 0]> (w)
      y = MatMul (x, wt)
      z = If (c) <
        then_branch = then_g () => (float[4,2] r) {
          st = Transpose (s)
          r = MatMul (st, wt)
        },
        else_branch = else_g () => (float[4,2] e) {
          e = MatMul (x, wt)
        }>
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool c, float[4,3] x, float[3,4] s) => (float[4,2] y, float[4,2] z)
      <float[2,3] w = {1, 2, 3, 4, 5, 6}> {
      wt = Transpose <perm = [1, 0]> (w)
      y = MatMul (x, wt)
      z = If (c) <
        then_branch = then_g () => (float[4,2] r) {
          r = Gemm <transA = 1> (s, wt)
        },
        else_branch = else_g () => (float[4,2] e) {
          e = MatMul (x, wt)
        }>
    }
  )",
                 rewrites(1));
  expect_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] x) => (float[4,2] y) <float[2,3] w = {1, 2, 3, 4, 5, 6}> {
      wt = Transpose <perm = [1, 0]> (w)
      y = MatMul (x, wt)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] x) => (float[4,2] y) <float[2,3] w = {1, 2, 3, 4, 5, 6}> {
      y = Gemm <transB = 1> (x, w)
    }
  )",
                 rewrites(1));
}

TEST(FuseMatmulAdd, TransposedMatMulLookAlikes) {
  // (Rank 3 is matmul_transpose_nd's: TiedProjectionOfRankThreeBecomesGemmBetweenReshapes.)
  const char* models[] = {// Integers, and opset 10 (Gemm needs C there).
                          R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int32[4,3] x, int32[2,3] w) => (int32[4,2] y) {
      wt = Transpose <perm = [1, 0]> (w)
      y = MatMul (x, wt)
    }
  )",
                          R"(
    <ir_version: 8, opset_import: ["" : 10]>
    g (float[4,3] x, float[2,3] w) => (float[4,2] y) {
      wt = Transpose <perm = [1, 0]> (w)
      y = MatMul (x, wt)
    }
  )"};
  for (const char* text : models)
    expect_no_rewrite("fuse_matmul_add", text, compare_outputs(Outputs::kSameIfVerifiable));
}

TEST(FuseMatmulAdd, GemmWithoutCTakesAConstantAdd) {
  expect_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a, float[2,3] b) => (float[4,2] y) <float[2] c = {0.5, -0.5}> {
      t = Gemm <alpha = 2.0, beta = 3.0, transB = 1> (a, b)
      y = Add (c, t)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a, float[2,3] b) => (float[4,2] y) <float[2] c = {0.5, -0.5}> {
      y = Gemm <alpha = 2.0, transB = 1> (a, b, c)
    }
  )",
                 rewrites(1));
  // A Gemm that has a C, a bias that would grow the product, a Gemm read twice: unchanged.
  expect_no_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a, float[3,2] b) => (float[4,2] y, float[3,4,2] z, float[4,2] u, float[4,2] v)
      <float[2] c = {0.5, -0.5}, float[3,1,1] big = {1, 2, 3}> {
      t = Gemm (a, b, c)
      y = Add (t, c)
      p = Gemm (a, b)
      z = Add (p, big)
      q = Gemm (a, b)
      u = Add (q, c)
      v = Relu (q)
    }
  )");
}

// TopK's output rank here comes only from a declaration ([2,1]); at opset 18 libonnx cannot
// check it, so MatMul + Add is not made a Gemm (which would need the rank to be 2 for sure). At
// opset 13 the declaration is checked and the fusion happens.
TEST(FuseMatmulAdd, UncheckedDeclaredRankIsNotRelied) {
  auto make = [](int opset) {
    auto model = parse_text(R"(
      <ir_version: 8, opset_import: ["" : )" +
                            std::to_string(opset) + R"(]>
      g (float[2,3] x, int64[1] k) => (float[2,2] y)
        <float[1,2] w = {1, 2}, float[2] c = {0.5, -0.5}> {
        t, i = TopK (x, k)
        m = MatMul (t, w)
        y = Add (m, c)
      }
    )");
    EXPECT_TRUE(model);
    if (!model) return model;
    model->graph().find_local("t")->set_type(float_type({2, 1}));
    return model;
  };
  auto unchecked = make(18);
  ASSERT_TRUE(unchecked);
  EXPECT_FALSE(run_pass(*unchecked, "fuse_matmul_add").changed);
  auto checked = make(13);
  ASSERT_TRUE(checked);
  EXPECT_TRUE(run_pass(*checked, "fuse_matmul_add").changed);
  EXPECT_EQ(count_ops(*checked, "Gemm"), 1);
}

TEST(FuseMatmulAdd, TiedProjectionOfRankThreeBecomesGemmBetweenReshapes) {
  // The embedding w [5,4] feeds a Gather and, transposed, the output projection of a [B,S,4]
  // hidden state: the Transpose disappears, w is read in place with transB, nothing is copied.
  // Dynamic leading dims come from Shape (end = -1 at opset 15).
  expect_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 15]>
    g (int64[B,S] ids, float[B,S,4] h) => (float[B,S,4] e, float[B,S,5] y)
      <float[5,4] w = {1, 2, 3, 4, 5, 6, 7, 8, -1, -2, -3, -4, 0.5, 0.25, 0, 1, 2, 0, 2, 0}> {
      e = Gather (w, ids)
      t = Transpose (w)
      y = MatMul (h, t)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 15]>
    g (int64[B,S] ids, float[B,S,4] h) => (float[B,S,4] e, float[B,S,5] y)
      <float[5,4] w = {1, 2, 3, 4, 5, 6, 7, 8, -1, -2, -3, -4, 0.5, 0.25, 0, 1, 2, 0, 2, 0},
       int64[2] rows = {-1, 4}, int64[1] cols = {5}> {
      e = Gather (w, ids)
      lead = Shape <end = -1> (h)
      shape = Concat <axis = 0> (lead, cols)
      flat = Reshape (h, rows)
      prod = Gemm <transB = 1> (flat, w)
      y = Reshape (prod, shape)
    }
  )",
                 rewrites(1));
  // Known leading dims give a constant target; before opset 15, Shape is sliced.
  auto known = run_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] h, float[5,4] w) => (float[2,3,5] y, float[5,4] w2) {
      t = Transpose <perm = [1, 0]> (w)
      y = MatMul (h, t)
      w2 = Identity (w)
    }
  )",
                           rewrites(1));
  ASSERT_TRUE(known);
  EXPECT_EQ(op_types(known->graph()),
            (std::vector<std::string>{"Identity", "Reshape", "Gemm", "Reshape"}));
  auto sliced = run_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[B,3,4] h, float[5,4] w) => (float[B,3,5] y) {
      t = Transpose (w)
      y = MatMul (h, t)
    }
  )",
                            rewrites(1));
  ASSERT_TRUE(sliced);
  EXPECT_EQ(count_ops(*sliced, "Slice"), 1);
  EXPECT_EQ(count_ops(*sliced, "Transpose"), 0);
  // A Transpose read twice, a 3-D Transpose, an integer MatMul, K unknown: unchanged.
  expect_no_rewrite("fuse_matmul_add", R"(
    <ir_version: 8, opset_import: ["" : 15]>
    g (float[2,3,4] h, float[5,4] w, float[2,5,4] v, int32[2,3,4] i, int32[5,4] wi,
       float[2,3,K] hk, float[5,K] wk)
      => (float[2,3,5] y, float[4,5] t, float[2,3,5] z, int32[2,3,5] q, float[2,3,5] r) {
      t = Transpose (w)
      y = MatMul (h, t)
      u = Transpose <perm = [0, 2, 1]> (v)
      z = MatMul (h, u)
      ti = Transpose (wi)
      q = MatMul (i, ti)
      tk = Transpose (wk)
      r = MatMul (hk, tk)
    }
  )");
}

}  // namespace
}  // namespace graft::testing
