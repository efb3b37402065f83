#include <cmath>

#include "core/ir/tensor.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

// Per-channel factor scale / sqrt(var + eps) of BN, computed independently of the pass.
struct Bn {
  std::vector<double> scale, bias, mean, var;
  double eps;
  double factor(size_t c) const { return scale[c] / std::sqrt(var[c] + eps); }
  double folded_bias(size_t c, double b) const { return (b - mean[c]) * factor(c) + bias[c]; }
};

const Bn kBn2{{0.5, 2.0}, {0.25, -1.0}, {1.0, -3.0}, {4.0, 0.5}, 1e-5};

// The golden tests below use epsilon 0.25 and variances 3.75 and 0, so that the factors are 0.25
// and 4 and every fused value is exact whatever order the pass computes it in; the others keep
// the default epsilon and compare with a tolerance.

TEST(FuseConvBatchnorm, ConvWithBiasFoldsIntoNewWeights) {
  // The fused Conv computes the graph output under its name; nothing else used the old
  // constants, so they are gone. Weights scale by the factor of their output channel (3 values
  // each); the bias becomes (b - mean) * factor + bb: (0.125 - 1) * 0.25 + 0.25 and
  // (-0.25 + 3) * 4 - 1.
  expect_rewrite("fuse_conv_batchnorm", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,4,4] x) => (float[1,2,4,4] y)
      <float[2,3,1,1] w = {1.0, -2.0, 3.0, 0.5, 1.5, -0.25},
       float[2] b = {0.125, -0.25},
       float[2] s = {0.5, 2.0}, float[2] bb = {0.25, -1.0},
       float[2] mean = {1.0, -3.0}, float[2] var = {3.75, 0.0}> {
      c = Conv (x, w, b)
      y = BatchNormalization <epsilon = 0.25> (c, s, bb, mean, var)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,4,4] x) => (float[1,2,4,4] y)
      <float[2,3,1,1] wf = {0.25, -0.5, 0.75, 2.0, 6.0, -1.0}, float[2] bf = {0.03125, 10.0}> {
      y = Conv (x, wf, bf)
    }
  )",
                 rewrites(1));
}

TEST(FuseConvBatchnorm, ConvWithoutBiasAndSharedWeightsKeepsTheOriginal) {
  // `w` feeds a second Conv: folding must not change what that Conv sees. The new bias is
  // -mean * factor + bb.
  expect_rewrite("fuse_conv_batchnorm", R"(
    <ir_version: 8, opset_import: ["" : 15]>
    g (float[1,1,3,3] x) => (float[1,2,2,2] y, float[1,2,2,2] z)
      <float[2,1,2,2] w = {1.0, 2.0, 3.0, 4.0, -1.0, -2.0, 0.5, 0.25},
       float[2] s = {0.5, 2.0}, float[2] bb = {0.25, -1.0},
       float[2] mean = {1.0, -3.0}, float[2] var = {3.75, 0.0}> {
      c = Conv <kernel_shape = [2, 2]> (x, w)
      y = BatchNormalization <epsilon = 0.25, momentum = 0.8> (c, s, bb, mean, var)
      z = Conv <kernel_shape = [2, 2]> (x, w)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 15]>
    g (float[1,1,3,3] x) => (float[1,2,2,2] y, float[1,2,2,2] z)
      <float[2,1,2,2] w = {1.0, 2.0, 3.0, 4.0, -1.0, -2.0, 0.5, 0.25},
       float[2,1,2,2] wf = {0.25, 0.5, 0.75, 1.0, -4.0, -8.0, 2.0, 1.0},
       float[2] bf = {0.0, 11.0}> {
      y = Conv <kernel_shape = [2, 2]> (x, wf, bf)
      z = Conv <kernel_shape = [2, 2]> (x, w)
    }
  )",
                 rewrites(1));
}

TEST(FuseConvBatchnorm, GroupedConvTransposeFoldsAlongOutputChannels) {
  // W [C_in=4, C_out/group=3, 1, 1], group 2: C_out = 6, W[c, j] feeds channel (c / 2) * 3 + j.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,4,2,2] x) => (float[1,6,2,2] y)
      <float[4,3,1,1] w = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
       float[6] b = {1, 1, 1, -1, -1, -1},
       float[6] s = {1, 2, 3, 4, 5, 6}, float[6] bb = {0, 0.5, 1, 1.5, 2, 2.5},
       float[6] mean = {0.5, 0, -0.5, 1, 2, 3}, float[6] var = {1, 2, 3, 4, 5, 6}> {
      c = ConvTranspose <group = 2> (x, w, b)
      y = BatchNormalization (c, s, bb, mean, var)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "BatchNormalization"), 0);
  ir::Node* conv = only_node(model->graph(), "ConvTranspose");
  ASSERT_TRUE(conv);
  Bn bn{{1, 2, 3, 4, 5, 6},
        {0, 0.5, 1, 1.5, 2, 2.5},
        {0.5, 0, -0.5, 1, 2, 3},
        {1, 2, 3, 4, 5, 6},
        1e-5};
  const std::vector<double> b = {1, 1, 1, -1, -1, -1};
  std::vector<double> want_w, want_b;
  for (int c = 0; c < 4; ++c)
    for (int j = 0; j < 3; ++j) want_w.push_back((c * 3 + j + 1) * bn.factor((c / 2) * 3 + j));
  for (size_t c = 0; c < 6; ++c) want_b.push_back(bn.folded_bias(c, b[c]));
  expect_near(values_of(conv->input(1)), want_w, 1e-5, 1e-5);
  expect_near(values_of(conv->input(2)), want_b, 1e-5, 1e-5);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseConvBatchnorm, GemmFoldsAlphaBetaTransBAndBroadcastC) {
  // Y = 0.5 * A * B^T + 2 * C with B [N=2, K=3], C [N].
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[2,3] w = {1, 2, 3, -1, -2, -3}, float[2] cb = {0.5, -0.5},
       float[2] s = {0.5, 2.0}, float[2] bb = {0.25, -1.0},
       float[2] mean = {1.0, -3.0}, float[2] var = {4.0, 0.5}> {
      t = Gemm <alpha = 0.5, beta = 2.0, transB = 1> (a, w, cb)
      y = BatchNormalization (t, s, bb, mean, var)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "BatchNormalization"), 0);
  ir::Node* gemm = only_node(model->graph(), "Gemm");
  ASSERT_TRUE(gemm);
  EXPECT_EQ(gemm->attr_float("alpha", 1.0f), 0.5f);
  EXPECT_EQ(gemm->attr_float("beta", 1.0f), 1.0f);
  EXPECT_EQ(gemm->attr_int("transB", 0), 1);
  const std::vector<double> w = {1, 2, 3, -1, -2, -3};
  const std::vector<double> c = {0.5, -0.5};
  std::vector<double> want_w, want_c;
  for (size_t i = 0; i < w.size(); ++i) want_w.push_back(w[i] * kBn2.factor(i / 3));
  // BN(beta * C) = factor * (2 * C - mean) + bias.
  for (size_t n = 0; n < 2; ++n) want_c.push_back(kBn2.folded_bias(n, 2.0 * c[n]));
  expect_near(values_of(gemm->input(1)), want_w, 1e-5, 1e-5);
  expect_near(values_of(gemm->input(2)), want_c, 1e-5, 1e-5);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseConvBatchnorm, GemmWithFullCOrNoC) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,2] a) => (float[2,2] y, float[2,2] z)
      <float[2,2] w = {1, 2, 3, 4}, float[2,2] cf = {1, 2, 3, 4},
       float[2] s = {0.5, 2.0}, float[2] bb = {0.25, -1.0},
       float[2] mean = {1.0, -3.0}, float[2] var = {4.0, 0.5}> {
      t = Gemm (a, w, cf)
      y = BatchNormalization (t, s, bb, mean, var)
      u = Gemm (a, w)
      z = BatchNormalization (u, s, bb, mean, var)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "BatchNormalization"), 0);
  const std::vector<double> w = {1, 2, 3, 4};
  std::vector<double> want_w, want_full_c, want_c;
  // transB = 0: column n of B [K, N] scales with channel n.
  for (size_t i = 0; i < w.size(); ++i) want_w.push_back(w[i] * kBn2.factor(i % 2));
  for (size_t i = 0; i < 4; ++i) want_full_c.push_back(kBn2.folded_bias(i % 2, w[i]));
  for (size_t n = 0; n < 2; ++n) want_c.push_back(kBn2.folded_bias(n, 0.0));

  ir::Node* full = model->graph().find_local("y")->producer();
  ASSERT_TRUE(full && full->is("Gemm"));
  expect_near(values_of(full->input(1)), want_w, 1e-5, 1e-5);
  EXPECT_EQ(dims_of(full->input(2)), (std::vector<int64_t>{2, 2}));
  expect_near(values_of(full->input(2)), want_full_c, 1e-5, 1e-5);
  ir::Node* none = model->graph().find_local("z")->producer();
  ASSERT_TRUE(none && none->is("Gemm"));
  EXPECT_EQ(dims_of(none->input(2)), (std::vector<int64_t>{2}));
  expect_near(values_of(none->input(2)), want_c, 1e-5, 1e-5);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseConvBatchnorm, TwoDimensionalMatMulBecomesGemm) {
  // MatMul's weights are [K, N]: column n scales with channel n. The original weights, unused
  // now, go with the MatMul.
  expect_rewrite("fuse_conv_batchnorm", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (double[5,3] a) => (double[5,2] y)
      <double[3,2] w = {1, 2, 3, 4, 5, 6},
       double[2] s = {0.5, 2.0}, double[2] bb = {0.25, -1.0},
       double[2] mean = {1.0, -3.0}, double[2] var = {3.75, 0.0}> {
      t = MatMul (a, w)
      y = BatchNormalization <epsilon = 0.25> (t, s, bb, mean, var)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (double[5,3] a) => (double[5,2] y)
      <double[3,2] wf = {0.25, 8.0, 0.75, 16.0, 1.25, 24.0}, double[2] cf = {0.0, 11.0}> {
      y = Gemm (a, wf, cf)
    }
  )",
                 rewrites(1));
}

TEST(FuseConvBatchnorm, Float16WeightsStayFloat16) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float16[1,2,2,2] x) => (float16[1,2,2,2] y)
      <float[2,2,1,1] w = {1, 2, 3, 4},
       float[2] s = {0.5, 2.0}, float[2] bb = {0.25, -1.0},
       float[2] mean = {1.0, -3.0}, float[2] var = {4.0, 0.5}> {
      c = Conv (x, w)
      y = BatchNormalization (c, s, bb, mean, var)
    }
  )");
  ASSERT_TRUE(model);
  // The text parser cannot write float16 literals: convert the initializers after parsing.
  for (ir::Value* v : model->graph().initializers()) {
    auto values = ir::read_doubles(*v->initializer());
    ASSERT_TRUE(values);
    v->set_initializer(ir::make_float_tensor(onnx::TensorProto::FLOAT16, dims_of(v), *values));
  }
  ASSERT_EQ(onnx_errors(*model), "");
  auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
  EXPECT_EQ(result.rewrites, 1);
  ir::Node* conv = only_node(model->graph(), "Conv");
  ASSERT_TRUE(conv);
  EXPECT_EQ(conv->input(1)->initializer()->data_type(), onnx::TensorProto::FLOAT16);
  EXPECT_EQ(conv->input(2)->initializer()->data_type(), onnx::TensorProto::FLOAT16);
  std::vector<double> want_w, want_b;
  for (int i = 0; i < 4; ++i) want_w.push_back((i + 1) * kBn2.factor(i / 2));
  for (size_t c = 0; c < 2; ++c) want_b.push_back(kBn2.folded_bias(c, 0.0));
  expect_near(values_of(conv->input(1)), want_w, 1e-3, 1e-3);  // half precision
  expect_near(values_of(conv->input(2)), want_b, 1e-3, 1e-3);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseConvBatchnorm, FoldsInsideSubgraphsWithCapturedWeights) {
  // The fused Conv computes the branch output under its name.
  expect_rewrite("fuse_conv_batchnorm", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[1,2,2,2] x) => (float[1,2,2,2] y)
      <float[2,2,1,1] w = {1, 2, 3, 4},
       float[2] s = {0.5, 2.0}, float[2] bb = {0.25, -1.0},
       float[2] mean = {1.0, -3.0}, float[2] var = {3.75, 0.0}> {
      y = If (cond) <
        then_branch = then_g () => (float[1,2,2,2] a) {
          c = Conv (x, w)
          a = BatchNormalization <epsilon = 0.25> (c, s, bb, mean, var)
        },
        else_branch = else_g () => (float[1,2,2,2] b) {
          b = Identity (x)
        }>
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[1,2,2,2] x) => (float[1,2,2,2] y) {
      y = If (cond) <
        then_branch = then_g () => (float[1,2,2,2] a)
            <float[2,2,1,1] wf = {0.25, 0.5, 12.0, 16.0}, float[2] bf = {0.0, 11.0}> {
          a = Conv (x, wf, bf)
        },
        else_branch = else_g () => (float[1,2,2,2] b) {
          b = Identity (x)
        }>
    }
  )",
                 rewrites(1));
}

// ---------------------------------------------------------------------------------------------
// Look-alikes that must stay as they are.

constexpr const char* kConstants = R"(
      <float[2,2,1,1] w = {1, 2, 3, 4},
       float[2] s = {0.5, 2.0}, float[2] bb = {0.25, -1.0},
       float[2] mean = {1.0, -3.0}, float[2] var = {4.0, 0.5}>)";

// A model of `header` (up to the signature), kConstants and `body`.
std::string with_constants(const std::string& header, const std::string& body) {
  return header + kConstants + body;
}

// The evaluator cannot run training-mode BatchNormalization or custom-domain ops.
RewriteOptions not_evaluable() { return compare_outputs(Outputs::kNotCompared); }

TEST(FuseConvBatchnorm, LeavesTrainingModeAlone) {
  expect_no_rewrite("fuse_conv_batchnorm",
                    with_constants(R"(<ir_version: 8, opset_import: ["" : 15]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y))",
                                   R"({
      c = Conv (x, w)
      y = BatchNormalization <training_mode = 1> (c, s, bb, mean, var)
    })"),
                    not_evaluable());
}

TEST(FuseConvBatchnorm, LeavesTrainingOutputsAndOldTrainingDefaultsAlone) {
  // Opset 9: extra outputs mean training mode.
  expect_no_rewrite("fuse_conv_batchnorm",
                    with_constants(R"(<ir_version: 8, opset_import: ["" : 9]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y, float[2] m))",
                                   R"({
      c = Conv (x, w)
      y, m, v, sm, sv = BatchNormalization (c, s, bb, mean, var)
    })"),
                    not_evaluable());
  // Opset 6: without is_test the op trains.
  expect_no_rewrite("fuse_conv_batchnorm",
                    with_constants(R"(<ir_version: 8, opset_import: ["" : 6]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y))",
                                   R"({
      c = Conv (x, w)
      y = BatchNormalization (c, s, bb, mean, var)
    })"),
                    not_evaluable());
  // Opset 7: per-activation statistics (spatial = 0).
  expect_no_rewrite("fuse_conv_batchnorm",
                    with_constants(R"(<ir_version: 8, opset_import: ["" : 7]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y))",
                                   R"({
      c = Conv (x, w)
      y = BatchNormalization <spatial = 0> (c, s, bb, mean, var)
    })"),
                    not_evaluable());
}

TEST(FuseConvBatchnorm, OldInferenceBatchnormFolds) {
  auto model = parse_text(std::string(R"(<ir_version: 8, opset_import: ["" : 6]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y))") +
                          kConstants + R"({
      c = Conv (x, w)
      y = BatchNormalization <is_test = 1, spatial = 1> (c, s, bb, mean, var)
    })");
  ASSERT_TRUE(model);
  EXPECT_EQ(run_pass_checked(*model, "fuse_conv_batchnorm").rewrites, 1);
  EXPECT_EQ(count_ops(*model, "BatchNormalization"), 0);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseConvBatchnorm, LeavesConvWithTwoUsesOrGraphOutputAlone) {
  expect_no_rewrite("fuse_conv_batchnorm",
                    with_constants(R"(<ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y, float[1,2,2,2] z))",
                                   R"({
      c = Conv (x, w)
      y = BatchNormalization (c, s, bb, mean, var)
      z = Relu (c)
    })"));
  expect_no_rewrite("fuse_conv_batchnorm",
                    with_constants(R"(<ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y, float[1,2,2,2] c))",
                                   R"({
      c = Conv (x, w)
      y = BatchNormalization (c, s, bb, mean, var)
    })"));
}

TEST(FuseConvBatchnorm, LeavesNonConstantStatisticsAndWeightsAlone) {
  // Mean computed at run time.
  expect_no_rewrite("fuse_conv_batchnorm",
                    with_constants(R"(<ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,2,2] x, float[2] m) => (float[1,2,2,2] y))",
                                   R"({
      c = Conv (x, w)
      y = BatchNormalization (c, s, bb, m, var)
    })"));
  // Weights that are a graph input (the initializer is only a default callers may override).
  expect_no_rewrite("fuse_conv_batchnorm",
                    with_constants(R"(<ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,2,2] x, float[2,2,1,1] w) => (float[1,2,2,2] y))",
                                   R"({
      c = Conv (x, w)
      y = BatchNormalization (c, s, bb, mean, var)
    })"));
}

TEST(FuseConvBatchnorm, LeavesOtherProducersAndShapesAlone) {
  // A producer that is not linear per channel.
  expect_no_rewrite("fuse_conv_batchnorm",
                    with_constants(R"(<ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y))",
                                   R"({
      c = Relu (x)
      y = BatchNormalization (c, s, bb, mean, var)
    })"));
  // Conv in a custom domain.
  expect_no_rewrite("fuse_conv_batchnorm",
                    with_constants(R"(<ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y))",
                                   R"({
      c = custom.Conv (x, w)
      y = BatchNormalization (c, s, bb, mean, var)
    })"),
                    not_evaluable());
}

// Fused parameters are computed in double and stored in the weights' type: one that does not
// fit (here 1e30 * 1e10 / sqrt(1 + eps) > FLT_MAX, or above float16's 65504) would become
// infinity and change finite outputs, so the BN stays. Found by fuzz/verify_fuzzer.
TEST(FuseConvBatchnorm, LeavesFusionsWhoseParametersOverflowTheirTypeAlone) {
  const std::string header = R"(<ir_version: 8, opset_import: ["" : 13]>)";
  const std::string bn = R"(<float[1] s = {1e10}, float[1] bb = {0.0},
                              float[1] mean = {0.0}, float[1] var = {1.0}>)";
  for (const std::string& body :
       {R"(g (float[1,1,2,2] x) => (float[1,1,2,2] y) <float[1,1,1,1] w = {1e30}, )" +
            bn.substr(1) + R"( {
             c = Conv (x, w)
             y = BatchNormalization (c, s, bb, mean, var)
           })",
        // The bias overflows, the weights do not.
        R"(g (float[1,1,2,2] x) => (float[1,1,2,2] y) <float[1,1,1,1] w = {1.0},
                float[1] b = {1e30}, )" +
            bn.substr(1) + R"( {
             c = Conv (x, w, b)
             y = BatchNormalization (c, s, bb, mean, var)
           })",
        R"(g (float[2,1] a) => (float[2,1] y) <float[1,1] w = {1e30}, )" + bn.substr(1) + R"( {
             t = Gemm (a, w)
             y = BatchNormalization (t, s, bb, mean, var)
           })",
        R"(g (float[2,1] a) => (float[2,1] y) <float[1,1] w = {1e30}, )" + bn.substr(1) + R"( {
             t = MatMul (a, w)
             y = BatchNormalization (t, s, bb, mean, var)
           })"}) {
    SCOPED_TRACE(body);
    expect_no_rewrite("fuse_conv_batchnorm", header + body);
  }

  // float16: 1000 * 100 is far inside float's range but above float16's largest value.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float16[1,1,2,2] x) => (float16[1,1,2,2] y)
      <float[1,1,1,1] w = {1000}, float[1] s = {100}, float[1] bb = {0},
       float[1] mean = {0}, float[1] var = {1}> {
      c = Conv (x, w)
      y = BatchNormalization (c, s, bb, mean, var)
    }
  )");
  ASSERT_TRUE(model);
  for (ir::Value* v : model->graph().initializers()) {
    auto values = ir::read_doubles(*v->initializer());
    ASSERT_TRUE(values);
    v->set_initializer(ir::make_float_tensor(onnx::TensorProto::FLOAT16, dims_of(v), *values));
  }
  auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(count_ops(*model, "BatchNormalization"), 1);
}

TEST(FuseConvBatchnorm, LeavesThreeDimensionalMatMulWithConstantWeightsAlone) {
  expect_no_rewrite("fuse_conv_batchnorm", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[3,2,2] a) => (float[3,2,2] y)
      <float[2,2] w = {1, 2, 3, 4},
       float[2] s = {0.5, 2.0}, float[2] bb = {0.25, -1.0},
       float[2] mean = {1.0, -3.0}, float[2] var = {4.0, 0.5}> {
      t = MatMul (a, w)
      y = BatchNormalization (t, s, bb, mean, var)
    }
  )");
}

}  // namespace
}  // namespace graft::testing
