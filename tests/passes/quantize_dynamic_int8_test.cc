// quantize_dynamic_int8: golden rewrites (checked on the evaluator within 8-bit tolerances and by
// the ONNX checker) and the cases it must leave alone.
//
// Tolerance: the evaluator feeds inputs uniform in [-2, 2], so the activation scale is at most
// 4 / 255 (error <= 0.008 per element) and the weights below (|w| <= 1.55) have a scale of about
// 0.01 (error <= 0.005 per element). With K = 3 terms the error of one output is at most
// 3 * (2 * 0.005 + 1.55 * 0.008) ~= 0.07 (times alpha = 2 for the Gemm: 0.14): atol 0.2 holds
// with margin, while a wrong scale, zero point, transposition or layout gives errors of order 1.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "tests/testing.h"

namespace graft::testing {
namespace {

constexpr char kPass[] = "quantize_dynamic_int8";

RewriteOptions quantized(int64_t count, PassOptions options = {}) {
  RewriteOptions r = rewrites(count);
  options.emplace("min_weight_elements", "0");  // the test weights are small
  r.pass_options = std::move(options);
  r.rtol = 0.02;
  r.atol = 0.2;
  return r;
}

// W [3, 2] = {0.5, -1, 1.27, 0.25, 0, -0.1}: max |w| = 1.27, int8 scale 0.01, values w * 100.
const char kMatMul[] = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[4,3] a) => (float[4,2] y)
    <float[3,2] w = {0.5, -1, 1.27, 0.25, 0, -0.1}> {
    y = MatMul (a, w)
  }
)";

TEST(QuantizeDynamicInt8, MatMulPerTensorInt8) {
  auto m = expect_rewrite(kPass, kMatMul, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <int8[3,2] wq = {50, -100, 127, 25, 0, -10}, int8 wz = {0}, float ws = {0.01}> {
      xq, xs, xz = DynamicQuantizeLinear (a)
      p = MatMulInteger (xq, wq, xz, wz)
      pf = Cast <to = 1> (p)
      s = Mul (xs, ws)
      y = Mul (pf, s)
    }
  )",
                          quantized(1));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(count_ops(*m, "MatMul"), 0);
}

TEST(QuantizeDynamicInt8, ReportsRuleCountsAndSecondRunIsNoOp) {
  auto m = parse_text(kMatMul);
  ASSERT_NE(m, nullptr);
  PassResult r = run_pass(*m, kPass, {{"min_weight_elements", "0"}});
  EXPECT_TRUE(r.changed);
  EXPECT_EQ(r.rules["quantize_matmul"], 1);
  PassResult again = run_pass(*m, kPass, {{"min_weight_elements", "0"}});
  EXPECT_FALSE(again.changed);
  EXPECT_EQ(again.rewrites, 0);
}

TEST(QuantizeDynamicInt8, MatMulPerChannelWithBatchedActivation) {
  // Column 0 {0.5, 1.27, 0}: scale 0.01; column 1 {-0.635, 0.25, -0.1}: scale 0.005.
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,4,3] a) => (float[2,4,2] y)
      <float[3,2] w = {0.5, -0.635, 1.27, 0.25, 0, -0.1}> {
      y = MatMul (a, w)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,4,3] a) => (float[2,4,2] y)
      <int8[3,2] wq = {50, -127, 127, 50, 0, -20}, int8 wz = {0}, float[2] ws = {0.01, 0.005}> {
      xq, xs, xz = DynamicQuantizeLinear (a)
      p = MatMulInteger (xq, wq, xz, wz)
      pf = Cast <to = 1> (p)
      s = Mul (xs, ws)
      y = Mul (pf, s)
    }
  )",
                 quantized(1, {{"per_channel", "true"}}));
}

TEST(QuantizeDynamicInt8, MatMulUint8Weights) {
  // Range [-1, 1.55]: scale 2.55 / 255 = 0.01, zero point 100, values w * 100 + 100.
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {0.5, -1, 1.55, 0.25, 0, -0.1}> {
      y = MatMul (a, w)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <uint8[3,2] wq = {150, 0, 255, 125, 100, 90}, uint8 wz = {100}, float ws = {0.01}> {
      xq, xs, xz = DynamicQuantizeLinear (a)
      p = MatMulInteger (xq, wq, xz, wz)
      pf = Cast <to = 1> (p)
      s = Mul (xs, ws)
      y = Mul (pf, s)
    }
  )",
                 quantized(1, {{"weight_type", "uint8"}}));
}

TEST(QuantizeDynamicInt8, MatMulUint8PerChannelHasZeroPointPerColumn) {
  // Column 0 {0.5, 1.55, 0}: range [0, 1.55], scale 0.00607843, zero point 0; column 1
  // {-1, 0.25, -0.1}: range [-1, 0.25], zero point 204.
  auto m = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {0.5, -1, 1.55, 0.25, 0, -0.1}> {
      y = MatMul (a, w)
    }
  )",
                       quantized(1, {{"weight_type", "uint8"}, {"per_channel", "true"}}));
  ASSERT_NE(m, nullptr);
  ir::Node* mmi = only_node(m->graph(), "MatMulInteger");
  ASSERT_NE(mmi, nullptr);
  EXPECT_EQ(dims_of(mmi->input(3)), (std::vector<int64_t>{2}));
  EXPECT_EQ(values_of(mmi->input(3)), (std::vector<double>{0, 204}));
  EXPECT_EQ(values_of(mmi->input(1))[2], 255);  // 1.55 is column 0's maximum
}

TEST(QuantizeDynamicInt8, GemmTransBAlphaBetaC) {
  // W stored [N, K] (transB = 1) is transposed offline; alpha 2 goes into the weight scale
  // (0.01 * 2) and beta 0.5 into a new C {1, -2} * 0.5.
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[2,3] w = {0.5, 1.27, 0, -1, 0.25, -0.1}, float[2] c = {1, -2}> {
      y = Gemm <transB = 1, alpha = 2.0, beta = 0.5> (a, w, c)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <int8[3,2] wq = {50, -100, 127, 25, 0, -10}, int8 wz = {0}, float ws = {0.02},
       float[2] cs = {0.5, -1}> {
      xq, xs, xz = DynamicQuantizeLinear (a)
      p = MatMulInteger (xq, wq, xz, wz)
      pf = Cast <to = 1> (p)
      s = Mul (xs, ws)
      q = Mul (pf, s)
      y = Add (q, cs)
    }
  )",
                 quantized(1));
}

TEST(QuantizeDynamicInt8, GemmWithRuntimeCAndBetaOne) {
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a, float[4,2] c) => (float[4,2] y)
      <float[3,2] w = {0.5, -1, 1.27, 0.25, 0, -0.1}> {
      y = Gemm (a, w, c)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a, float[4,2] c) => (float[4,2] y)
      <int8[3,2] wq = {50, -100, 127, 25, 0, -10}, int8 wz = {0}, float ws = {0.01}> {
      xq, xs, xz = DynamicQuantizeLinear (a)
      p = MatMulInteger (xq, wq, xz, wz)
      pf = Cast <to = 1> (p)
      s = Mul (xs, ws)
      q = Mul (pf, s)
      y = Add (q, c)
    }
  )",
                 quantized(1));
}

TEST(QuantizeDynamicInt8, LeavesAloneWhatItDoesNotHandle) {
  RewriteOptions opts = quantized(0);
  // Weights below min_weight_elements (the default 4096).
  expect_no_rewrite(kPass, kMatMul);
  // Excluded op.
  RewriteOptions excl = opts;
  excl.pass_options["exclude_ops"] = "MatMul";
  expect_no_rewrite(kPass, kMatMul, excl);
  // A weight that is not a constant.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a, float[3,2] w) => (float[4,2] y) {
      y = MatMul (a, w)
    }
  )",
                    opts);
  // Opset 10 has no DynamicQuantizeLinear: the model is left alone, never upgraded.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 10]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {0.5, -1, 1.27, 0.25, 0, -0.1}> {
      y = MatMul (a, w)
    }
  )",
                    opts);
  // transA, a 3-D weight, a double MatMul, a constant activation type it does not handle.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[3,4] a, float[4,3] b, double[4,3] d) => (float[4,2] y, float[2,4,2] z, double[4,2] u)
      <float[3,2] w = {0.5, -1, 1.27, 0.25, 0, -0.1}, float[2,3,2] w3 = {1,2,3,4,5,6,7,8,9,10,11,12},
       double[3,2] wd = {1, 2, 3, 4, 5, 6}> {
      y = Gemm <transA = 1> (a, w)
      z = MatMul (b, w3)
      u = MatMul (d, wd)
    }
  )",
                    opts);
  // A zero-size weight: nothing to quantize.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,0] a) => (float[4,2] y)
      <float[0,2] w = {}> {
      y = MatMul (a, w)
    }
  )",
                    opts);
}

TEST(QuantizeDynamicInt8, ExcludeGemmKeepsGemmAndQuantizesMatMul) {
  auto m = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y, float[4,2] z)
      <float[3,2] w = {0.5, -1, 1.27, 0.25, 0, -0.1}> {
      y = MatMul (a, w)
      z = Gemm (a, w)
    }
  )",
                       quantized(1, {{"exclude_ops", "Gemm"}}));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(count_ops(*m, "Gemm"), 1);
  EXPECT_EQ(count_ops(*m, "MatMul"), 0);
  EXPECT_EQ(count_ops(*m, "MatMulInteger"), 1);
}

TEST(QuantizeDynamicInt8, MinWeightElementsIsInclusive) {
  // 6 elements: quantized at 6, not at 7.
  RewriteOptions at = quantized(1);
  at.pass_options["min_weight_elements"] = "6";
  run_rewrite(kPass, kMatMul, at);
  RewriteOptions above = quantized(0);
  above.pass_options["min_weight_elements"] = "7";
  expect_no_rewrite(kPass, kMatMul, above);
}

std::unique_ptr<ir::Model> with_weight(const std::string& text, float bad) {
  auto m = parse_text(text);
  if (!m) return nullptr;
  onnx::ModelProto p = m->to_proto();
  onnx::TensorProto* w = p.mutable_graph()->mutable_initializer(0);
  std::vector<float> values = {0.5f, -1, bad, 0.25f, 0, -0.1f};
  w->clear_float_data();
  w->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), 24));
  auto loaded = ir::Model::from_proto(std::move(p));
  return loaded.ok() ? std::move(*loaded) : nullptr;
}

TEST(QuantizeDynamicInt8, NanOrInfiniteWeightIsLeftAlone) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    auto m = with_weight(kMatMul, bad);
    ASSERT_NE(m, nullptr);
    PassResult r = run_pass(*m, kPass, {{"min_weight_elements", "0"}});
    EXPECT_FALSE(r.changed) << bad;
    EXPECT_EQ(count_ops(*m, "MatMul"), 1);
  }
  // The control: the same model with a finite value is rewritten.
  auto ok = with_weight(kMatMul, 1.27f);
  ASSERT_NE(ok, nullptr);
  EXPECT_TRUE(run_pass(*ok, kPass, {{"min_weight_elements", "0"}}).changed);
}

TEST(QuantizeDynamicInt8, AllZeroWeightGetsNonZeroScale) {
  auto m = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {0, 0, 0, 0, 0, 0}> {
      y = MatMul (a, w)
    }
  )",
                       quantized(1, {{"per_channel", "true"}}));
  ASSERT_NE(m, nullptr);
  ir::Node* mmi = only_node(m->graph(), "MatMulInteger");
  ASSERT_NE(mmi, nullptr);
  EXPECT_EQ(values_of(mmi->input(1)), std::vector<double>(6, 0));
  ir::Node* mul = producer(m->graph(), "y");
  ASSERT_NE(mul, nullptr);
  ir::Node* scale = mul->input(1)->producer();
  ASSERT_NE(scale, nullptr);
  for (double s : values_of(scale->input(1))) EXPECT_GT(s, 0);
}

const char kGatherModel[] = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (int64[3] ids) => (float[3,2] y)
    <float[4,2] t = {0.5, -1, 1.27, 0.25, 0, -0.1, 0.3, 0.2}> {
    y = Gather (t, ids)
  }
)";

TEST(QuantizeDynamicInt8, GatherTableStoredInt8AndRowsDequantized) {
  // Per tensor: scale 0.01, values t * 100. Only the table is rounded (error <= 0.005), so the
  // tolerance above holds with a wide margin; a wrong scale or layout is off by >= 0.1.
  expect_rewrite(kPass, kGatherModel, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[3] ids) => (float[3,2] y)
      <int8[4,2] tq = {50, -100, 127, 25, 0, -10, 30, 20}, float ts = {0.01}, int8 tz = {0}> {
      r = Gather (tq, ids)
      y = DequantizeLinear (r, ts, tz)
    }
  )",
                 quantized(1));
  RewriteOptions off = quantized(0);
  off.pass_options["exclude_ops"] = "Gather";
  expect_no_rewrite(kPass, kGatherModel, off);
}

TEST(QuantizeDynamicInt8, InsideIfBranch) {
  auto m = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {0.5, -1, 1.27, 0.25, 0, -0.1}> {
      y = If (cond) <
        then_branch = t () => (float[4,2] ty) { ty = MatMul (a, w) },
        else_branch = e () => (float[4,2] ey) { ey = Gemm <alpha = 0.5> (a, w) }
      >
    }
  )",
                       quantized(2));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(count_ops(*m, "MatMulInteger"), 2);
  EXPECT_EQ(count_ops(*m, "DynamicQuantizeLinear"), 2);
}

}  // namespace
}  // namespace graft::testing
