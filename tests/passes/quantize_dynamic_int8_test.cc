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

#include "core/ir/external_data.h"
#include "core/ir/op_params.h"
#include "core/passes/registry.h"
#include "tests/external_model.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

constexpr char kPass[] = "quantize_dynamic_int8";

RewriteOptions quantized(int64_t count, PassOptions options = {}) {
  RewriteOptions r = rewrites(count);
  options.emplace("min_weight_elements", "0");  // the test weights are small
  options.emplace("weight_type", "int8");       // the goldens below, unless a test says uint8
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

TEST(QuantizeDynamicInt8, ReduceRangeUsesSevenBitInt8Weights) {
  // max |w| = 1.27 over 63 steps: scale 1.27 / 63, values round(w * 63 / 1.27) in [-64, 63]
  // (0.5 -> 25, -1 -> -50, 1.27 -> 63, 0.25 -> 12, 0 -> 0, -0.1 -> -5).
  auto m = run_rewrite(kPass, kMatMul, quantized(1, {{"reduce_range", "true"}}));
  ASSERT_NE(m, nullptr);
  const ir::Node* mm = only_node(m->graph(), "MatMulInteger");
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(ir::read_int64s(*mm->input(1)->initializer()),
            (std::vector<int64_t>{25, -50, 63, 12, 0, -5}));
  // uint8 weights have no 7-bit form: the option changes nothing there.
  auto u = run_rewrite(kPass, kMatMul,
                       quantized(1, {{"reduce_range", "true"}, {"weight_type", "uint8"}}));
  auto plain = run_rewrite(kPass, kMatMul, quantized(1, {{"weight_type", "uint8"}}));
  ASSERT_TRUE(u && plain);
  EXPECT_EQ(canonical_text(*u), canonical_text(*plain));
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
  // Opset 6 cannot be raised to have DynamicQuantizeLinear: the model is left alone.
  expect_no_rewrite(kPass, R"(
    <ir_version: 3, opset_import: ["" : 6]>
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
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
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

// Node names are not in libonnx 1.12's text syntax: the tests name nodes in code, by the value
// each one computes.
std::unique_ptr<ir::Model> with_node_names(
    const std::string& text,
    const std::vector<std::pair<std::string, std::string>>& output_to_name) {
  auto m = parse_text(text);
  if (!m) return nullptr;
  for (const auto& [output, name] : output_to_name) {
    ir::Node* n = nullptr;
    for (ir::Graph* g : m->all_graphs())
      if (!n) n = producer(*g, output);
    EXPECT_NE(n, nullptr) << output;
    if (n) n->mutable_proto().set_name(name);
  }
  return m;
}

const char kThreeWeights[] = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[4,3] a, int64[3] ids) => (float[4,2] y, float[4,2] z, float[3,2] e)
    <float[3,2] w = {0.5, -1, 1.27, 0.25, 0, -0.1},
     float[4,2] t = {0.5, -1, 1.27, 0.25, 0, -0.1, 0.3, 0.2}> {
    y = MatMul (a, w)
    z = Gemm (a, w)
    e = Gather (t, ids)
  }
)";

TEST(QuantizeDynamicInt8, ExcludeNodesKeepsNamedNodesInFloat) {
  // "head" (the Gemm) and "embed" (the Gather) are excluded by name; the MatMul "proj", of the
  // same weight, is quantized.
  expect_rewrite(kPass,
                 with_node_names(kThreeWeights, {{"y", "proj"}, {"z", "head"}, {"e", "embed"}}),
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a, int64[3] ids) => (float[4,2] y, float[4,2] z, float[3,2] e)
      <float[3,2] w = {0.5, -1, 1.27, 0.25, 0, -0.1},
       float[4,2] t = {0.5, -1, 1.27, 0.25, 0, -0.1, 0.3, 0.2},
       int8[3,2] wq = {50, -100, 127, 25, 0, -10}, int8 wz = {0}, float ws = {0.01}> {
      xq, xs, xz = DynamicQuantizeLinear (a)
      p = MatMulInteger (xq, wq, xz, wz)
      pf = Cast <to = 1> (p)
      s = Mul (xs, ws)
      y = Mul (pf, s)
      z = Gemm (a, w)
      e = Gather (t, ids)
    }
  )",
                 quantized(1, {{"exclude_nodes", "head, embed"}}));
  // A name no node has changes nothing; unnamed nodes are never excluded.
  auto m = run_rewrite(kPass, kThreeWeights, quantized(3, {{"exclude_nodes", "proj"}}));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(count_ops(*m, "MatMulInteger"), 2);
  // Everything excluded: nothing changes (run_pass fails the test if the model changed while
  // the pass reports no change).
  auto all = with_node_names(kThreeWeights, {{"y", "proj"}, {"z", "head"}, {"e", "embed"}});
  ASSERT_NE(all, nullptr);
  PassResult r =
      run_pass(*all, kPass, {{"min_weight_elements", "0"}, {"exclude_nodes", "proj,head,embed"}});
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(count_ops(*all, "MatMulInteger"), 0);
}

TEST(QuantizeDynamicInt8, ExcludeNodesReachesIntoIfBranches) {
  const char kIf[] = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {0.5, -1, 1.27, 0.25, 0, -0.1}> {
      y = If (cond) <
        then_branch = t () => (float[4,2] ty) { ty = MatMul (a, w) },
        else_branch = e () => (float[4,2] ey) { ey = MatMul (a, w) }
      >
    }
  )";
  auto m = run_rewrite(kPass, with_node_names(kIf, {{"ty", "then_mm"}}),
                       quantized(1, {{"exclude_nodes", "then_mm"}}));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(count_ops(*m, "MatMul"), 1);
  EXPECT_EQ(count_ops(*m, "MatMulInteger"), 1);
  ir::Node* kept = nullptr;
  for (ir::Graph* g : m->all_graphs())
    if (!kept) kept = producer(*g, "ty");
  ASSERT_NE(kept, nullptr);
  EXPECT_TRUE(kept->is("MatMul"));
}

TEST(QuantizeDynamicInt8, ExcludeNodesRejectsBadNames) {
  const PassInfo* info = find_pass(kPass);
  ASSERT_NE(info, nullptr);
  // A control character, a name over kMaxListItemBytes.
  for (const std::string& bad : {std::string("x\ty"), std::string(kMaxListItemBytes + 1, 'n')}) {
    EXPECT_EQ(parse_options(kPass, info->options, {{"exclude_nodes", bad}}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad.size();
  }
  // Any other name is accepted, also one that no node has.
  EXPECT_TRUE(
      parse_options(kPass, info->options, {{"exclude_nodes", "/encoder/MatMul_3, x"}}).ok());
}

TEST(QuantizeDynamicInt8, FunctionBodiesAreLeftAlone) {
  // A function's parameters have no element type (the body is typed per call site), so the
  // activation is not known to be float32 and the MatMul stays: quantizing it would break a
  // call with doubles. inline_functions first makes such MatMuls visible to the pass.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[4,3] a) => (float[4,2] y) {
      y = local.proj (a)
    }
    <domain: "local", opset_import: ["" : 13]>
    proj (x) => (out) {
      w = Constant <value = float[3,2] {0.5, -1, 1.27, 0.25, 0, -0.1}> ()
      out = MatMul (x, w)
    }
  )",
                    quantized(0));
}

TEST(QuantizeDynamicInt8, ExternalWeightIsReadAndStoredInt8) {
  TempFolder dir;
  // W [8, 4] = (i * 7 % 13 - 6) / 8: integers / 8 in [-0.75, 0.75]; per channel.
  std::string w;
  for (int i = 0; i < 32; ++i) w += (i ? ", " : "") + std::to_string((i * 7 % 13 - 6) / 8.0);
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,8] a) => (float[4,4] y) <float[8,4] w = {)" +
                          w + R"(}> {
      y = MatMul (a, w)
    }
  )");
  ASSERT_NE(model, nullptr);
  const auto in_memory = model->clone();
  externalize(*model, dir.path(), "weights.bin", {"w"});
  ASSERT_TRUE(ir::is_external(*model->graph().find_local("w")->initializer()));
  const auto reference = model->clone();
  PassOptions options{{"min_weight_elements", "0"}, {"per_channel", "true"}};
  PassResult r = run_pass(*model, kPass, options);
  EXPECT_TRUE(r.changed);
  ir::Node* mmi = only_node(model->graph(), "MatMulInteger");
  ASSERT_NE(mmi, nullptr);
  const onnx::TensorProto* wq = ir::constant_header(mmi->input(1));
  ASSERT_NE(wq, nullptr);
  EXPECT_EQ(wq->data_type(), onnx::TensorProto::UINT8);  // the default weight type
  EXPECT_FALSE(ir::is_external(*wq));  // a new in-memory tensor (saved externally if >= 1 KiB)
  EXPECT_EQ(count_ops(*model, "MatMul"), 0);
  // Within the 8-bit error (see the tolerance at the top: K = 8 terms, |w| <= 0.75).
  EXPECT_EQ(same_outputs(*reference, *model, 1, 0.02, 0.2), "");
  // Bit for bit what the same weight in memory gives.
  PassResult r2 = run_pass(*in_memory, kPass, options);
  EXPECT_TRUE(r2.changed);
  EXPECT_EQ(canonical_text(*model), canonical_text(*in_memory));
}

// Conv: W [2, 2, 1, 1] = {0.5, -1.27, 0.25, 0}: int8 scale 0.01; B added after the rescale,
// shaped [M, 1, 1]. Conv is in exclude_ops by default: "exclude_ops=" (empty) asks for it.
const char kConv[] = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[1,2,3,3] x) => (float[1,2,3,3] y)
    <float[2,2,1,1] w = {0.5, -1.27, 0.25, 0}, float[2] b = {1, -2}> {
    y = Conv <strides = [1, 1]> (x, w, b)
  }
)";

TEST(QuantizeDynamicInt8, ConvPerTensorWithBiasAfterTheRescale) {
  expect_rewrite(kPass, kConv, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,3,3] x) => (float[1,2,3,3] y)
      <int8[2,2,1,1] wq = {50, -127, 25, 0}, int8 wz = {0}, float ws = {0.01},
       float[2,1,1] bc = {1, -2}> {
      xq, xs, xz = DynamicQuantizeLinear (x)
      p = ConvInteger <strides = [1, 1]> (xq, wq, xz, wz)
      pf = Cast <to = 1> (p)
      s = Mul (xs, ws)
      q = Mul (pf, s)
      y = Add (q, bc)
    }
  )",
                 quantized(1, {{"exclude_ops", ""}}));
  // The default leaves Conv in float.
  expect_no_rewrite(kPass, kConv, quantized(0));
}

TEST(QuantizeDynamicInt8, ConvPerOutputChannelWithGroups) {
  // Channel 0 {0.5, -1.27, 0.25, 0}: scale 0.01; channel 1 {0.1, 0.2, -0.635, 0.3}: 0.005.
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,3,3] x) => (float[1,2,2,2] y)
      <float[2,1,2,2] w = {0.5, -1.27, 0.25, 0, 0.1, 0.2, -0.635, 0.3}> {
      y = Conv <group = 2> (x, w)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,3,3] x) => (float[1,2,2,2] y)
      <int8[2,1,2,2] wq = {50, -127, 25, 0, 20, 40, -127, 60}, int8 wz = {0},
       float[2,1,1] ws = {0.01, 0.005}> {
      xq, xs, xz = DynamicQuantizeLinear (x)
      p = ConvInteger <group = 2> (xq, wq, xz, wz)
      pf = Cast <to = 1> (p)
      s = Mul (xs, ws)
      y = Mul (pf, s)
    }
  )",
                 quantized(1, {{"exclude_ops", ""}, {"per_channel", "true"}}));
}

TEST(QuantizeDynamicInt8, ConvLookAlikesAreLeftAlone) {
  RewriteOptions opts = quantized(0, {{"exclude_ops", ""}});
  // A weight that is not a constant; a bias that is not a constant.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,3,3] x, float[2,2,1,1] w, float[2] c) => (float[1,2,3,3] y, float[1,2,3,3] z)
      <float[2,2,1,1] k = {0.5, -1.27, 0.25, 0}> {
      y = Conv (x, w)
      z = Conv (x, k, c)
    }
  )",
                    opts);
}

TEST(QuantizeDynamicInt8, ConvChainIsQuantizedThroughout) {
  // The second Conv reads what the first became (its rank known from ConvInteger's shape rule):
  // both are rewritten, as in a CNN.
  auto m = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,3,3] x) => (float[1,2,3,3] y)
      <float[2,2,1,1] w = {0.5, -1.27, 0.25, 0}, float[2,2,1,1] v = {0.3, 0.1, -0.2, 0.4}> {
      a = Conv (x, w)
      r = Relu (a)
      y = Conv (r, v)
    }
  )",
                       quantized(2, {{"exclude_ops", ""}}));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(count_ops(*m, "ConvInteger"), 2);
  EXPECT_EQ(count_ops(*m, "Conv"), 0);
}

// A Gemm reading what a MatMul became (BERT's pooler after the last layer): Gemm requires A's rank
// to be 2, known from the quantization ops' shape rules, so both are rewritten.
TEST(QuantizeDynamicInt8, GemmAfterAQuantizedMatMul) {
  auto m = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,3] w = {0.1, -0.2, 0.05, 0, 0.15, -0.1, 0.2, 0.1, -0.05},
       float[3,2] v = {0.5, -1, 1.27, 0.25, 0, -0.1}> {
      h = MatMul (a, w)
      y = Gemm (h, v)
    }
  )",
                       quantized(2));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(count_ops(*m, "MatMulInteger"), 2);
  EXPECT_EQ(count_ops(*m, "Gemm"), 0);
}

// Opset 10 has no DynamicQuantizeLinear: the model is raised to 13 first (its Clip's bounds
// become inputs), quantized, and the finding says so; with nothing to quantize the raise is
// undone too.
TEST(QuantizeDynamicInt8, OlderOpsetsAreRaisedFirst) {
  const char* text = R"(
    <ir_version: 5, opset_import: ["" : 10]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {0.5, -1, 1.27, 0.25, 0, -0.1}> {
      c = Clip <min = -1.0, max = 1.0> (a)
      y = MatMul (c, w)
    }
  )";
  RewriteOptions small = rewrites(1);
  small.pass_options = {{"min_weight_elements", "1"}};
  small.rtol = 0.05;
  small.atol = 0.05;
  auto m = run_rewrite(kPass, text, small);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->opset(""), 13);
  EXPECT_EQ(count_ops(*m, "DynamicQuantizeLinear"), 1);
  auto again = parse_text(text);
  ASSERT_NE(again, nullptr);
  const PassResult r = run_pass(*again, kPass, small.pass_options);
  ASSERT_FALSE(r.explanations.empty());
  EXPECT_EQ(r.explanations.back().reason,
            "the default-domain opset was raised from 10 to 13 for DynamicQuantizeLinear; nodes "
            "converted: clip_inputs 1");
  RewriteOptions excluded = small;
  excluded.pass_options = {{"min_weight_elements", "1"}, {"exclude_ops", "MatMul"}};
  expect_no_rewrite(kPass, text, excluded);
}

}  // namespace
}  // namespace graft::testing
