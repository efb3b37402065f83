#include <cmath>

#include "core/ir/tensor.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

// The only live node of `op` in `g`, or nullptr.
ir::Node* only_node(const ir::Graph& g, const std::string& op) {
  ir::Node* found = nullptr;
  for (ir::Node* n : g.nodes()) {
    if (n->op_type() != op) continue;
    if (found) return nullptr;
    found = n;
  }
  return found;
}

std::vector<double> values_of(const ir::Value* v) {
  EXPECT_TRUE(v && v->initializer());
  if (!v || !v->initializer()) return {};
  auto values = ir::read_doubles(*v->initializer());
  EXPECT_TRUE(values.has_value());
  return values.value_or(std::vector<double>{});
}

std::vector<int64_t> dims_of(const ir::Value* v) {
  if (!v || !v->initializer()) return {};
  return {v->initializer()->dims().begin(), v->initializer()->dims().end()};
}

void expect_near_all(const std::vector<double>& actual, const std::vector<double>& expected,
                     double rel = 1e-5) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], rel * std::max(1.0, std::abs(expected[i]))) << "at " << i;
}

// Per-channel factor scale / sqrt(var + eps) of BN, computed independently of the pass.
struct Bn {
  std::vector<double> scale, bias, mean, var;
  double eps;
  double factor(size_t c) const { return scale[c] / std::sqrt(var[c] + eps); }
  double folded_bias(size_t c, double b) const { return (b - mean[c]) * factor(c) + bias[c]; }
};

const Bn kBn2{{0.5, 2.0}, {0.25, -1.0}, {1.0, -3.0}, {4.0, 0.5}, 1e-5};

TEST(FuseConvBatchnorm, ConvWithBiasFoldsIntoNewWeights) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,4,4] x) => (float[1,2,4,4] y)
      <float[2,3,1,1] w = {1.0, -2.0, 3.0, 0.5, 1.5, -0.25},
       float[2] b = {0.1, -0.2},
       float[2] s = {0.5, 2.0}, float[2] bb = {0.25, -1.0},
       float[2] mean = {1.0, -3.0}, float[2] var = {4.0, 0.5}> {
      c = Conv (x, w, b)
      y = BatchNormalization (c, s, bb, mean, var)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
  EXPECT_TRUE(result.changed);
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "BatchNormalization"), 0);
  ir::Node* conv = only_node(model->graph(), "Conv");
  ASSERT_TRUE(conv);
  // The fused Conv computes the graph output under its original name.
  EXPECT_EQ(conv->output(0)->name(), "y");
  EXPECT_EQ(model->graph().outputs()[0].value, conv->output(0));

  const std::vector<double> w = {1.0, -2.0, 3.0, 0.5, 1.5, -0.25};
  const std::vector<double> b = {0.1, -0.2};
  std::vector<double> want_w, want_b;
  for (size_t i = 0; i < w.size(); ++i) want_w.push_back(w[i] * kBn2.factor(i / 3));
  for (size_t c = 0; c < 2; ++c) want_b.push_back(kBn2.folded_bias(c, b[c]));
  EXPECT_EQ(dims_of(conv->input(1)), (std::vector<int64_t>{2, 3, 1, 1}));
  expect_near_all(values_of(conv->input(1)), want_w);
  expect_near_all(values_of(conv->input(2)), want_b);
  // Nothing else used the old constants: they are gone.
  EXPECT_EQ(model->graph().find_local("w"), nullptr);
  EXPECT_EQ(model->graph().find_local("mean"), nullptr);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseConvBatchnorm, ConvWithoutBiasAndSharedWeightsKeepsTheOriginal) {
  // `w` feeds a second Conv: folding must not change what that Conv sees.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 15]>
    g (float[1,1,3,3] x) => (float[1,2,2,2] y, float[1,2,2,2] z)
      <float[2,1,2,2] w = {1.0, 2.0, 3.0, 4.0, -1.0, -2.0, 0.5, 0.25},
       float[2] s = {0.5, 2.0}, float[2] bb = {0.25, -1.0},
       float[2] mean = {1.0, -3.0}, float[2] var = {4.0, 0.5}> {
      c = Conv <kernel_shape = [2, 2]> (x, w)
      y = BatchNormalization <epsilon = 0.01, momentum = 0.8> (c, s, bb, mean, var)
      z = Conv <kernel_shape = [2, 2]> (x, w)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "BatchNormalization"), 0);
  EXPECT_EQ(count_ops(*model, "Conv"), 2);
  const std::vector<double> w = {1.0, 2.0, 3.0, 4.0, -1.0, -2.0, 0.5, 0.25};
  EXPECT_EQ(initializer_values(*model, "w"), w);

  Bn bn = kBn2;
  bn.eps = static_cast<double>(0.01f);
  ir::Node* fused = model->graph().find_local("y")->producer();
  ir::Node* other = model->graph().find_local("z")->producer();
  ASSERT_TRUE(fused && other);
  EXPECT_EQ(other->input(1)->name(), "w");
  EXPECT_NE(fused->input(1)->name(), "w");
  std::vector<double> want_w, want_b;
  for (size_t i = 0; i < w.size(); ++i) want_w.push_back(w[i] * bn.factor(i / 4));
  for (size_t c = 0; c < 2; ++c) want_b.push_back(bn.folded_bias(c, 0.0));
  expect_near_all(values_of(fused->input(1)), want_w);
  expect_near_all(values_of(fused->input(2)), want_b);
  EXPECT_EQ(onnx_errors(*model), "");
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
  expect_near_all(values_of(conv->input(1)), want_w);
  expect_near_all(values_of(conv->input(2)), want_b);
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
  expect_near_all(values_of(gemm->input(1)), want_w);
  expect_near_all(values_of(gemm->input(2)), want_c);
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
  expect_near_all(values_of(full->input(1)), want_w);
  EXPECT_EQ(dims_of(full->input(2)), (std::vector<int64_t>{2, 2}));
  expect_near_all(values_of(full->input(2)), want_full_c);
  ir::Node* none = model->graph().find_local("z")->producer();
  ASSERT_TRUE(none && none->is("Gemm"));
  EXPECT_EQ(dims_of(none->input(2)), (std::vector<int64_t>{2}));
  expect_near_all(values_of(none->input(2)), want_c);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseConvBatchnorm, TwoDimensionalMatMulBecomesGemm) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (double[5,3] a) => (double[5,2] y)
      <double[3,2] w = {1, 2, 3, 4, 5, 6},
       double[2] s = {0.5, 2.0}, double[2] bb = {0.25, -1.0},
       double[2] mean = {1.0, -3.0}, double[2] var = {4.0, 0.5}> {
      t = MatMul (a, w)
      y = BatchNormalization (t, s, bb, mean, var)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "BatchNormalization"), 0);
  EXPECT_EQ(count_ops(*model, "MatMul"), 0);
  ir::Node* gemm = only_node(model->graph(), "Gemm");
  ASSERT_TRUE(gemm);
  EXPECT_EQ(gemm->output(0)->name(), "y");
  EXPECT_EQ(gemm->input(0)->name(), "a");
  EXPECT_EQ(gemm->input(1)->initializer()->data_type(), onnx::TensorProto::DOUBLE);
  const std::vector<double> w = {1, 2, 3, 4, 5, 6};
  std::vector<double> want_w, want_c;
  for (size_t i = 0; i < w.size(); ++i) want_w.push_back(w[i] * kBn2.factor(i % 2));
  for (size_t n = 0; n < 2; ++n) want_c.push_back(kBn2.folded_bias(n, 0.0));
  expect_near_all(values_of(gemm->input(1)), want_w, 1e-12);
  expect_near_all(values_of(gemm->input(2)), want_c, 1e-12);
  EXPECT_EQ(onnx_errors(*model), "");
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
  expect_near_all(values_of(conv->input(1)), want_w, 1e-3);  // half precision
  expect_near_all(values_of(conv->input(2)), want_b, 1e-3);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseConvBatchnorm, FoldsInsideSubgraphsWithCapturedWeights) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[1,2,2,2] x) => (float[1,2,2,2] y)
      <float[2,2,1,1] w = {1, 2, 3, 4},
       float[2] s = {0.5, 2.0}, float[2] bb = {0.25, -1.0},
       float[2] mean = {1.0, -3.0}, float[2] var = {4.0, 0.5}> {
      y = If (cond) <
        then_branch = then_g () => (float[1,2,2,2] a) {
          c = Conv (x, w)
          a = BatchNormalization (c, s, bb, mean, var)
        },
        else_branch = else_g () => (float[1,2,2,2] b) {
          b = Identity (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "BatchNormalization"), 0);
  ir::Node* if_node = only_node(model->graph(), "If");
  ASSERT_TRUE(if_node);
  ir::Graph* then_g = nullptr;
  for (const auto& sub : if_node->subgraphs())
    if (sub.attr_name == "then_branch") then_g = sub.graph.get();
  ASSERT_TRUE(then_g);
  ir::Node* conv = only_node(*then_g, "Conv");
  ASSERT_TRUE(conv);
  EXPECT_EQ(conv->output(0)->name(), "a");
  EXPECT_EQ(then_g->outputs()[0].value, conv->output(0));
  std::vector<double> want_w;
  for (int i = 0; i < 4; ++i) want_w.push_back((i + 1) * kBn2.factor(i / 2));
  expect_near_all(values_of(conv->input(1)), want_w);
  EXPECT_EQ(onnx_errors(*model), "");
}

// ---------------------------------------------------------------------------------------------
// Look-alikes that must stay as they are.

constexpr const char* kConstants = R"(
      <float[2,2,1,1] w = {1, 2, 3, 4},
       float[2] s = {0.5, 2.0}, float[2] bb = {0.25, -1.0},
       float[2] mean = {1.0, -3.0}, float[2] var = {4.0, 0.5}>)";

// `check_outputs` false: the evaluator cannot run the model (training-mode BatchNormalization,
// custom-domain ops), so only the structure is compared.
void expect_untouched(const std::string& header, const std::string& body, int bn_count = 1,
                      bool check_outputs = true) {
  auto model = parse_text(header + kConstants + body);
  ASSERT_TRUE(model);
  const std::string before = print(*model);
  auto result = check_outputs ? run_pass_checked(*model, "fuse_conv_batchnorm")
                              : run_pass(*model, "fuse_conv_batchnorm");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(result.rewrites, 0);
  EXPECT_EQ(count_ops(*model, "BatchNormalization"), bn_count);
  EXPECT_EQ(print(*model), before);
}

TEST(FuseConvBatchnorm, LeavesTrainingModeAlone) {
  expect_untouched(R"(<ir_version: 8, opset_import: ["" : 15]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y))",
                   R"({
      c = Conv (x, w)
      y = BatchNormalization <training_mode = 1> (c, s, bb, mean, var)
    })",
                   1, /*check_outputs=*/false);
}

TEST(FuseConvBatchnorm, LeavesTrainingOutputsAndOldTrainingDefaultsAlone) {
  // Opset 9: extra outputs mean training mode.
  expect_untouched(R"(<ir_version: 8, opset_import: ["" : 9]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y, float[2] m))",
                   R"({
      c = Conv (x, w)
      y, m, v, sm, sv = BatchNormalization (c, s, bb, mean, var)
    })",
                   1, /*check_outputs=*/false);
  // Opset 6: without is_test the op trains.
  expect_untouched(R"(<ir_version: 8, opset_import: ["" : 6]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y))",
                   R"({
      c = Conv (x, w)
      y = BatchNormalization (c, s, bb, mean, var)
    })",
                   1, /*check_outputs=*/false);
  // Opset 7: per-activation statistics (spatial = 0).
  expect_untouched(R"(<ir_version: 8, opset_import: ["" : 7]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y))",
                   R"({
      c = Conv (x, w)
      y = BatchNormalization <spatial = 0> (c, s, bb, mean, var)
    })",
                   1, /*check_outputs=*/false);
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
  expect_untouched(R"(<ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y, float[1,2,2,2] z))",
                   R"({
      c = Conv (x, w)
      y = BatchNormalization (c, s, bb, mean, var)
      z = Relu (c)
    })");
  expect_untouched(R"(<ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y, float[1,2,2,2] c))",
                   R"({
      c = Conv (x, w)
      y = BatchNormalization (c, s, bb, mean, var)
    })");
}

TEST(FuseConvBatchnorm, LeavesNonConstantStatisticsAndWeightsAlone) {
  // Mean computed at run time.
  expect_untouched(R"(<ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,2,2] x, float[2] m) => (float[1,2,2,2] y))",
                   R"({
      c = Conv (x, w)
      y = BatchNormalization (c, s, bb, m, var)
    })");
  // Weights that are a graph input (the initializer is only a default callers may override).
  expect_untouched(R"(<ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,2,2] x, float[2,2,1,1] w) => (float[1,2,2,2] y))",
                   R"({
      c = Conv (x, w)
      y = BatchNormalization (c, s, bb, mean, var)
    })");
}

TEST(FuseConvBatchnorm, LeavesOtherProducersAndShapesAlone) {
  // A producer that is not linear per channel.
  expect_untouched(R"(<ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y))",
                   R"({
      c = Relu (x)
      y = BatchNormalization (c, s, bb, mean, var)
    })");
  // Conv in a custom domain.
  expect_untouched(R"(<ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[1,2,2,2] x) => (float[1,2,2,2] y))",
                   R"({
      c = custom.Conv (x, w)
      y = BatchNormalization (c, s, bb, mean, var)
    })",
                   1, /*check_outputs=*/false);
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
    auto model = parse_text(header + body);
    ASSERT_TRUE(model);
    const std::string before = print(*model);
    auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
    EXPECT_FALSE(result.changed);
    EXPECT_EQ(print(*model), before);
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
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[3,2,2] a) => (float[3,2,2] y)
      <float[2,2] w = {1, 2, 3, 4},
       float[2] s = {0.5, 2.0}, float[2] bb = {0.25, -1.0},
       float[2] mean = {1.0, -3.0}, float[2] var = {4.0, 0.5}> {
      t = MatMul (a, w)
      y = BatchNormalization (t, s, bb, mean, var)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(count_ops(*model, "MatMul"), 1);
  EXPECT_EQ(count_ops(*model, "Gemm"), 0);
  EXPECT_EQ(count_ops(*model, "BatchNormalization"), 1);
}

}  // namespace
}  // namespace graft::testing
