// quantize_static_int8: golden QDQ rewrites with ranges from given calibration inputs, the
// ReLU folded into the output's saturation (exact), what it leaves alone, and that a second
// run (or a pipeline round with fold_constants) does not undo or redo it.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>

#include "core/ir/op_params.h"
#include "core/passes/quantization.h"
#include "core/passes/registry.h"
#include "core/passes/rewriter.h"
#include "tests/eval/kernel_testing.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

using eval::make;
using onnx::TensorProto;

constexpr char kPass[] = "quantize_static_int8";

bool is_op(const ir::Node* n, const char* op) { return n != nullptr && n->is(op); }

// One calibration set: input `name` of `dims` holding `values`.
std::vector<std::map<std::string, eval::Tensor>> calibration(const std::string& name,
                                                             std::vector<int64_t> dims,
                                                             std::vector<float> values) {
  std::vector<std::map<std::string, eval::Tensor>> sets(1);
  sets[0].emplace(name, make<float>(TensorProto::FLOAT, std::move(dims), std::move(values)));
  return sets;
}

// The small convolutions of these tests (1 to 3 input channels) stand for any layer, not an
// image stem (ImageStemStaysFloat): min_conv_channels is 0 unless a test says otherwise.
RewriteOptions quantized(std::vector<std::map<std::string, eval::Tensor>> sets,
                         PassOptions options = {}) {
  RewriteOptions r = rewrites(-1);
  options.emplace("min_conv_channels", "0");
  r.pass_options = std::move(options);
  r.calibration = std::move(sets);
  // Inputs in [-2, 2] (same_outputs) against a calibrated range of about [0, 2.55]: values
  // below 0 saturate (error up to 2 * |w|), so outputs are compared loosely; a wrong scale,
  // axis or zero point gives errors of order 1-100.
  r.rtol = 0.05;
  r.atol = 3.0;
  return r;
}

// Calibrated on x [1, 1, 2, 4] holding `values`, compared within a few 8-bit steps of the float
// model.
RewriteOptions calibrated_on(std::vector<float> values, PassOptions options = {}) {
  RewriteOptions r =
      quantized(calibration("x", {1, 1, 2, 4}, std::move(values)), std::move(options));
  r.rtol = 0;
  r.atol = 0.06;
  return r;
}

// x in [-4, 4], a 1x1 Conv's output over HardSwish's bend (steps: x 8/255, HardSigmoid 1/255).
RewriteOptions over_the_bend(PassOptions options = {}) {
  return calibrated_on({-4.0f, -3.0f, -1.5f, -0.5f, 0.0f, 1.0f, 2.5f, 4.0f}, std::move(options));
}

// x in [-2.5, 4]: HardSwish's input never reaches -3, where it is cut to 0.
RewriteOptions above_minus_three() {
  return calibrated_on({-2.5f, -2.0f, -1.5f, -0.5f, 0.0f, 1.0f, 2.5f, 4.0f});
}

// a [1, 2] in [0, 2.55] (scale 0.01, zero point 0); W columns max 1.27 and 0.635 (int8 scales
// 0.01 and 0.005 with the full range, values 127).
const char kMatMul[] = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[1,2] a) => (float[1,2] y)
    <float[2,2] w = {1.27, 0, 0, 0.635}> {
    y = MatMul (a, w)
  }
)";

TEST(QuantizeStaticInt8, MatMulPerChannelGolden) {
  auto m = expect_rewrite(
      kPass, kMatMul, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2] a) => (float[1,2] y)
      <int8[2,2] wq = {127, 0, 0, 127}, float[2] ws = {0.01, 0.005}, int8[2] wz = {0, 0},
       float as = {0.01}, uint8 az = {0}> {
      aq = QuantizeLinear (a, as, az)
      ad = DequantizeLinear (aq, as, az)
      wd = DequantizeLinear <axis = 1> (wq, ws, wz)
      y = MatMul (ad, wd)
    }
  )",
      quantized(calibration("a", {1, 2}, {0.0f, 2.55f}), {{"reduce_range", "false"}}));
  ASSERT_NE(m, nullptr);
}

// reduce_range=auto follows serving_cpu: 7-bit weights for a CPU without VNNI (its 16-bit sums
// would saturate), the full 8 bits with VNNI; true and false force it.
TEST(QuantizeStaticInt8, ReduceRangeFollowsTheServingCpu) {
  auto largest_weight = [](PassOptions options) {
    auto m = run_rewrite(kPass, kMatMul,
                         quantized(calibration("a", {1, 2}, {0.0f, 2.55f}), std::move(options)));
    int largest = -1;
    if (m)
      for (const ir::Node* n : m->graph().nodes()) {
        if (!n->is("DequantizeLinear") || !n->input(0)->is_constant()) continue;
        const auto& t = *n->input(0)->initializer();
        EXPECT_EQ(t.data_type(), TensorProto::INT8);
        for (char c : t.raw_data())
          largest = std::max(largest, std::abs(int{static_cast<int8_t>(c)}));
      }
    return largest;
  };
  EXPECT_EQ(largest_weight({{"serving_cpu", "avx2"}}), 63);
  EXPECT_EQ(largest_weight({{"serving_cpu", "avx512-vnni"}}), 127);
  EXPECT_EQ(largest_weight({{"serving_cpu", "avx-vnni"}}), 127);
  EXPECT_EQ(largest_weight({{"serving_cpu", "avx512-vnni"}, {"reduce_range", "true"}}), 63);
  EXPECT_EQ(largest_weight({{"serving_cpu", "avx2"}, {"reduce_range", "false"}}), 127);
}

// The report says when the serving CPU lacks 8-bit dot products, and only then; the option's
// default is this machine's CPU.
TEST(QuantizeStaticInt8, NotesAServingCpuWithoutDotProducts) {
  auto sets = calibration("a", {1, 2}, {0.0f, 2.55f});
  CalibrationInputs c{.sets = &sets, .limits = {}};
  auto note = [&](PassOptions options) {
    auto m = parse_text(kMatMul);
    EXPECT_NE(m, nullptr);
    const PassResult r = run_pass(*m, kPass, std::move(options), &c);
    EXPECT_TRUE(r.changed);
    for (const auto& e : r.explanations)
      if (e.rule == "serving_cpu") return e.reason;
    return std::string();
  };
  EXPECT_NE(note({{"serving_cpu", "avx2"}}).find("no 8-bit dot-product instructions (VNNI)"),
            std::string::npos);
  EXPECT_EQ(note({{"serving_cpu", "avx512-vnni"}}), "");
  EXPECT_EQ(note({{"serving_cpu", "other"}}), "");
  const PassInfo* info = find_pass(kPass);
  ASSERT_NE(info, nullptr);
  bool listed = false;
  for (const OptionSpec& o : info->options)
    if (o.name == "serving_cpu") {
      listed = true;
      EXPECT_EQ(std::get<std::string>(o.default_value), int8_cpu_name(detected_int8_cpu()));
    }
  EXPECT_TRUE(listed);
}

// The input's scale: minmax takes the outlier (100 / 255); percentile 90% of {0..9, 100} takes
// 9 (the sample's element at 90% of its length) and widens the range to 0 (9 / 255).
TEST(QuantizeStaticInt8, PercentileCalibrationClipsOutliers) {
  const char* text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,11] a) => (float[1,2] y) <float[11,2] w = {1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 0,
                                                         0, 1, 1, 0, 0, 1, 1, 0}> {
      y = MatMul (a, w)
    }
  )";
  auto input_scale = [&](PassOptions options) {
    RewriteOptions r = quantized(calibration("a", {1, 11}, {5, 0, 1, 2, 3, 100, 4, 6, 7, 8, 9}),
                                 std::move(options));
    r.outputs = Outputs::kNotCompared;  // the scales are what is checked here
    auto m = run_rewrite(kPass, text, r);
    double scale = 0;
    if (m)
      for (const ir::Node* n : m->graph().nodes())
        if (n->is("QuantizeLinear") && n->input(0)->is_graph_input())
          scale = ir::constant_doubles(n->input(1)).value_or(std::vector<double>{0})[0];
    return scale;
  };
  EXPECT_NEAR(input_scale({}), 100.0 / 255, 1e-6);
  EXPECT_NEAR(input_scale({{"calibration", "percentile"}, {"percentile_e4", "9000"}}), 9.0 / 255,
              1e-6);
}

// Conv + bias + Relu: the bias in int32 at scale s_x * s_w, the Relu gone (its work done by the
// output's uint8 saturation at zero point 0), the result read through the output's pair.
const char kConvRelu[] = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[1,1,2,2] x) => (float[1,1,2,2] z)
    <float[1,1,1,1] w = {1.27}, float[1] b = {-0.5}, float[1,1,1,1] w2 = {1.0}> {
    c = Conv (x, w, b)
    r = Relu (c)
    z = Conv (r, w2)
  }
)";

TEST(QuantizeStaticInt8, ConvBiasReluFoldedIntoTheOutputPair) {
  auto m = run_rewrite(kPass, kConvRelu,
                       quantized(calibration("x", {1, 1, 2, 2}, {0.0f, 0.5f, 1.0f, 2.55f}),
                                 {{"reduce_range", "true"}}));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(count_ops(*m, "Relu"), 0);
  EXPECT_EQ(count_ops(*m, "Conv"), 2);
  // x, c (= r) have pairs; the last Conv's output is a graph output and stays float.
  EXPECT_EQ(count_ops(*m, "QuantizeLinear"), 2);
  bool bias_int32 = false;
  for (const ir::Node* n : m->graph().nodes())
    if (n->is("DequantizeLinear") && n->input(0)->is_constant() &&
        n->input(0)->initializer()->data_type() == TensorProto::INT32) {
      bias_int32 = true;
      // -0.5 / (s_x * s_w): s_x = 2.55 / 255 = 0.01, s_w = 1.27 / 63 (reduce_range).
      int32_t q;
      std::memcpy(&q, n->input(0)->initializer()->raw_data().data(), 4);
      EXPECT_EQ(q, static_cast<int32_t>(std::nearbyint(-0.5 / (0.01 * (1.27 / 63)))));
    }
  EXPECT_TRUE(bias_int32);
}

// Removing the Relu is exact: the quantized model with and without it computes the same.
TEST(QuantizeStaticInt8, ReluRemovalIsExact) {
  auto with = parse_text(kConvRelu);
  ASSERT_NE(with, nullptr);
  auto sets = calibration("x", {1, 1, 2, 2}, {0.0f, 0.5f, 1.0f, 2.55f});
  CalibrationInputs c{.sets = &sets, .limits = {}};
  run_pass(*with, kPass, {}, &c);
  // The same model with a Relu inserted after the dequantized output again.
  auto relu_back = with->clone();
  {
    ir::Node* conv2 = nullptr;
    for (ir::Node* n : relu_back->graph().nodes())
      if (n->is("Conv") && n->output(0)->is_graph_output()) conv2 = n;
    ASSERT_NE(conv2, nullptr);
    Rewriter rw(*relu_back);
    ir::Node* relu = rw.add_node(relu_back->graph(), "Relu", {conv2->input(0)}, 1);
    rw.set_input(conv2, 0, relu->output(0));
    ASSERT_TRUE(relu_back->finalize().ok());
  }
  EXPECT_EQ(same_outputs(*with, *relu_back, 1, 0, 0), "");
}

TEST(QuantizeStaticInt8, SecondRunChangesNothing) {
  auto m = run_rewrite(kPass, kConvRelu,
                       quantized(calibration("x", {1, 1, 2, 2}, {0.0f, 0.5f, 1.0f, 2.55f}),
                                 {{"reduce_range", "true"}}));
  ASSERT_NE(m, nullptr);
  auto sets = calibration("x", {1, 1, 2, 2}, {0.0f, 0.5f, 1.0f, 2.55f});
  CalibrationInputs c{.sets = &sets, .limits = {}};
  PassResult again = run_pass(*m, kPass, {}, &c);
  EXPECT_FALSE(again.changed);
}

// fold_constants must not turn a quantized weight back into floats (it would undo the pass
// every pipeline round, and runtimes need the pair to fuse).
TEST(QuantizeStaticInt8, FoldConstantsKeepsDequantizedWeights) {
  auto m = run_rewrite(kPass, kConvRelu,
                       quantized(calibration("x", {1, 1, 2, 2}, {0.0f, 0.5f, 1.0f, 2.55f}),
                                 {{"reduce_range", "true"}}));
  ASSERT_NE(m, nullptr);
  const int before = count_ops(*m, "DequantizeLinear");
  run_pass(*m, "fold_constants");
  EXPECT_EQ(count_ops(*m, "DequantizeLinear"), before);
}

// A tied weight (also a Gather's table) stays float: quantizing the MatMul would store it twice.
TEST(QuantizeStaticInt8, WeightAlsoReadInFloatIsLeftAlone) {
  auto sets = calibration("a", {1, 2}, {0.0f, 2.55f});
  sets[0].emplace("ids", make<int64_t>(TensorProto::INT64, {1}, {1}));
  // Without the Gather the same calibration quantizes the MatMul (the test can fail).
  EXPECT_NE(run_rewrite(kPass, kMatMul, quantized(sets)), nullptr);
  const char* tied = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2] a, int64[1] ids) => (float[1,2] y, float[1,2] e)
      <float[2,2] w = {1.27, 0, 0, 0.635}> {
      y = MatMul (a, w)
      e = Gather (w, ids)
    }
  )";
  expect_no_rewrite(kPass, tied, quantized(sets));
  // shared_weights quantizes it anyway (the float table stays for the Gather).
  auto both = run_rewrite(kPass, tied, quantized(sets, {{"shared_weights", "true"}}));
  ASSERT_NE(both, nullptr);
  EXPECT_EQ(count_ops(*both, "QuantizeLinear"), 1);
}

// The reason a pass that had work did nothing, shown in every report.
std::string finding(const PassResult& r) {
  EXPECT_TRUE(r.always_explained);
  return r.explanations.empty() ? "" : r.explanations[0].reason;
}

TEST(QuantizeStaticInt8, WithoutCalibrationInputsNothingChanges) {
  expect_no_rewrite(kPass, kConvRelu);
  auto m = parse_text(kConvRelu);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(finding(run_pass(*m, kPass)),
            "nothing quantized: no calibration inputs (the evaluator cannot run the model at any "
            "size)");
  // Inputs the model cannot run on (a missing input): the same, with the evaluator's reason.
  auto wrong = calibration("q", {1}, {1.0f});
  CalibrationInputs c{.sets = &wrong, .limits = {}};
  EXPECT_NE(finding(run_pass(*m, kPass, {}, &c))
                .find("nothing quantized: the float model did not run on the calibration inputs"),
            std::string::npos);
}

TEST(QuantizeStaticInt8, ExcludedOpsAndNodesStayFloat) {
  expect_no_rewrite(kPass, kMatMul, [] {
    RewriteOptions r = quantized(calibration("a", {1, 2}, {0.0f, 2.55f}), {{"op_types", "Conv"}});
    return r;
  }());
}

TEST(QuantizeStaticInt8, NonFiniteRangeIsLeftAlone) {
  // The calibration input holds an infinity: no range, nothing quantized.
  expect_no_rewrite(kPass, kMatMul, quantized(calibration("a", {1, 2}, {0.0f, INFINITY})));
}

// Per-channel DequantizeLinear needs opset 13: an older export (Paddle, tf2onnx and old PyTorch
// write 9..12) is raised first, its old forms converted (Clip's bounds become inputs here), and
// the finding says so; with nothing to quantize, or below opset 7, the model stays as it was.
TEST(QuantizeStaticInt8, OlderOpsetsAreRaisedToThirteenFirst) {
  const char* text = R"(
    <ir_version: 4, opset_import: ["" : 9]>
    g (float[1,2] a) => (float[1,2] y)
      <float[2,2] w = {1.27, 0, 0, 0.635}> {
      c = Clip <min = 0.0, max = 6.0> (a)
      y = MatMul (c, w)
    }
  )";
  auto m = run_rewrite(kPass, text, quantized(calibration("a", {1, 2}, {0.0f, 2.55f})));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->opset(""), 13);
  EXPECT_GT(count_ops(*m, "DequantizeLinear"), 0);
  EXPECT_EQ(only_node(m->graph(), "Clip")->attr("min"), nullptr);
  auto again = parse_text(text);
  ASSERT_NE(again, nullptr);
  auto sets = calibration("a", {1, 2}, {0.0f, 2.55f});
  CalibrationInputs c{.sets = &sets, .limits = {}};
  // A CPU with VNNI: no serving_cpu note before the raise's finding, on any machine.
  EXPECT_EQ(finding(run_pass(*again, kPass, {{"serving_cpu", "avx512-vnni"}}, &c)),
            "the default-domain opset was raised from 9 to 13 for per-channel DequantizeLinear; "
            "nodes converted: clip_inputs 1");
  // Nothing to quantize (MatMul excluded): the raise is undone with the rest.
  expect_no_rewrite(kPass, text,
                    quantized(calibration("a", {1, 2}, {0.0f, 2.55f}), {{"op_types", "Conv"}}));
}

TEST(QuantizeStaticInt8, BelowOpsetSevenIsLeftAloneWithTheReason) {
  const char* text = R"(
    <ir_version: 3, opset_import: ["" : 6]>
    g (float[1,2] a) => (float[1,2] y)
      <float[2,2] w = {1.27, 0, 0, 0.635}> {
      y = MatMul (a, w)
    }
  )";
  expect_no_rewrite(kPass, text, quantized(calibration("a", {1, 2}, {0.0f, 2.55f})));
  auto m = parse_text(text);
  ASSERT_NE(m, nullptr);
  auto sets = calibration("a", {1, 2}, {0.0f, 2.55f});
  CalibrationInputs c{.sets = &sets, .limits = {}};
  EXPECT_EQ(finding(run_pass(*m, kPass, {}, &c)),
            "nothing quantized: the opset cannot be raised to 13 (per-channel DequantizeLinear): "
            "the model imports the default domain at opset 6; opsets are raised from 7 on");
}

// An Add (or Mul, Concat, pool) is quantized only between values computed in 8 bits: a sum of
// two convolutions is, a bias added to a MatMul's output is not (8 bits would cost accuracy and
// a runtime's float fusions, and no integer kernel is gained).
TEST(QuantizeStaticInt8, ElementwiseOnlyBetweenQuantizedValues) {
  auto residual = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,2,2] x) => (float[1,1,2,2] y)
      <float[1,1,1,1] w1 = {1.27}, float[1,1,1,1] w2 = {-0.5}> {
      a = Conv (x, w1)
      b = Conv (x, w2)
      s = Add (a, b)
      y = Relu (s)
    }
  )",
                              quantized(calibration("x", {1, 1, 2, 2}, {0.0f, 0.5f, 1.0f, 2.55f})));
  ASSERT_NE(residual, nullptr);
  bool add_quantized = false;
  for (const ir::Node* n : residual->graph().nodes())
    if (n->is("Add"))
      add_quantized = n->input(0)->producer()->is("DequantizeLinear") &&
                      n->input(1)->producer()->is("DequantizeLinear");
  EXPECT_TRUE(add_quantized);

  // SiLU after a convolution, x * Sigmoid(x): Sigmoid and Mul read dequantized values (ONNX
  // Runtime runs them as QLinearSigmoid and QLinearMul).
  auto silu = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,2,2] x) => (float[1,1,2,2] y) <float[1,1,1,1] w1 = {1.27}, float[1,1,1,1] w2 = {0.5}> {
      a = Conv (x, w1)
      s = Sigmoid (a)
      m = Mul (a, s)
      y = Conv (m, w2)
    }
  )",
                          quantized(calibration("x", {1, 1, 2, 2}, {-1.0f, 0.5f, 1.0f, 2.55f})));
  ASSERT_NE(silu, nullptr);
  for (const ir::Node* n : silu->graph().nodes())
    if (n->is("Sigmoid") || n->is("Mul")) {
      for (const ir::Value* in : n->inputs())
        EXPECT_TRUE(in->producer()->is("DequantizeLinear")) << n->op_type();
      ASSERT_EQ(n->output(0)->uses().size(), 1u);
      EXPECT_TRUE(n->output(0)->uses()[0].node->is("QuantizeLinear")) << n->op_type();
    }

  auto bias = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2] a) => (float[1,2] y)
      <float[2,2] w = {1.27, 0, 0, 0.635}, float[2] b = {0.25, -0.5}> {
      m = MatMul (a, w)
      y = Add (m, b)
    }
  )",
                          quantized(calibration("a", {1, 2}, {0.0f, 2.55f})));
  ASSERT_NE(bias, nullptr);
  for (const ir::Node* n : bias->graph().nodes())
    if (n->is("Add")) {
      EXPECT_TRUE(n->input(1)->is_constant()) << "the bias stays a float constant";
      EXPECT_EQ(n->input(1)->elem_type(), TensorProto::FLOAT);
    }
}

// With min_conv_channels (default 0: off), a dense convolution over fewer input channels, an
// image stem, stays float; the next one, over 4 channels, is quantized.
TEST(QuantizeStaticInt8, ImageStemStaysFloat) {
  const char* text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,2,2] x) => (float[1,4,2,2] y)
      <float[4,3,1,1] w1 = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1},
       float[4,4,1,1] w2 = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}> {
      a = Conv (x, w1)
      y = Conv (a, w2)
    }
  )";
  const auto sets = calibration("x", {1, 3, 2, 2}, {-6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5});
  auto weight_types = [&](PassOptions options) {
    RewriteOptions r = quantized(sets, std::move(options));
    r.rtol = 0;
    r.atol = 0.5;  // steps of about 0.06 (x) and 0.12 (a's sum of three channels)
    auto m = run_rewrite(kPass, text, r);
    std::vector<bool> quantized_weight;
    if (m)
      for (const ir::Node* n : m->graph().nodes())
        if (n->is("Conv")) quantized_weight.push_back(n->input(1)->producer() != nullptr);
    return quantized_weight;
  };
  EXPECT_EQ(weight_types({{"min_conv_channels", "4"}}), (std::vector<bool>{false, true}));
  EXPECT_EQ(weight_types({{"min_conv_channels", "0"}}), (std::vector<bool>{true, true}));
  // Every report counts what stayed float, by op type.
  auto m = parse_text(text);
  ASSERT_NE(m, nullptr);
  CalibrationInputs c{.sets = &sets, .limits = {}};
  const PassResult r = run_pass(*m, kPass, {}, &c);  // 4 is the default
  EXPECT_TRUE(r.always_explained);
  std::string left;
  for (const auto& e : r.explanations)
    if (e.rule == "left_in_float") left = e.reason;
  EXPECT_EQ(left.rfind("left in float: Conv 1 (", 0), 0u) << left;
}

// By default a stem stays 8-bit where ONNX Runtime made that faster or the float stem less
// accurate (bench/int8_cnn): when it reaches a MaxPool through its activation (a float stem's
// pair is moved before the MaxPool, which then runs in 8 bits in NCHW) or a Transpose reads it
// (ConvNeXt); a stem followed by an activation and another Conv stays float.
TEST(QuantizeStaticInt8, AStemBeforeAMaxPoolOrATransposeStaysEightBit) {
  const auto sets = calibration("x", {1, 3, 2, 2}, {-6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5});
  auto stem_quantized = [&](const std::string& after) {
    const std::string text = R"(
      <ir_version: 8, opset_import: ["" : 13]>
      g (float[1,3,2,2] x) => (float[1,4,_,_] y)
        <float[4,3,1,1] w1 = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1},
         float[4,4,1,1] w2 = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}> {
        a = Conv (x, w1)
        )" + after + R"(
        y = Conv (b, w2)
      }
    )";
    auto m = parse_text(text);
    if (m == nullptr) return std::optional<bool>();
    CalibrationInputs c{.sets = &sets, .limits = {}};
    run_pass(*m, kPass, {}, &c);
    for (const ir::Node* n : m->graph().nodes())  // the stem is the first Conv
      if (n->is("Conv")) return std::optional<bool>(n->input(1)->producer() != nullptr);
    return std::optional<bool>();
  };
  EXPECT_EQ(stem_quantized("b = Relu (a)"), false);
  EXPECT_EQ(stem_quantized("r = Relu (a)\n b = MaxPool <kernel_shape = [2, 2]> (r)"), true);
  EXPECT_EQ(stem_quantized("t = Transpose <perm = [0, 2, 3, 1]> (a)\n"
                           " b = Transpose <perm = [0, 3, 1, 2]> (t)"),
            true);
}

// A view between two quantized nodes (ShuffleNet's channel split: a Slice) is quantized with its
// source's scale and zero point, so ONNX Runtime drops the pairs around it (it does only when they
// are equal) and runs the Slice on the 8-bit values.
TEST(QuantizeStaticInt8, AViewTakesItsSourceScale) {
  RewriteOptions r = quantized(calibration("x", {1, 2, 1, 2}, {-3.0f, 1.0f, 0.5f, 2.0f}));
  r.rtol = 0;
  r.atol = 0.1;
  auto m = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,1,2] x) => (float[1,1,1,2] y)
      <float[2,2,1,1] w1 = {1.0, 0.0, 0.0, 1.0}, float[1,1,1,1] w2 = {1.0},
       int64[1] starts = {1}, int64[1] ends = {2}, int64[1] axes = {1}> {
      a = Conv (x, w1)
      s = Slice (a, starts, ends, axes)
      y = Conv (s, w2)
    }
  )",
                       r);
  ASSERT_NE(m, nullptr);
  std::vector<std::pair<double, int64_t>> around;  // (scale, zero point) of the pairs by the Slice
  for (const ir::Node* n : m->graph().nodes()) {
    if (!n->is("Slice")) continue;
    const ir::Node* before = n->input(0)->producer();
    const ir::Node* after = n->output(0)->uses()[0].node;
    ASSERT_TRUE(before->is("DequantizeLinear"));
    ASSERT_TRUE(after->is("QuantizeLinear"));
    for (const ir::Node* q : {before, after})
      around.emplace_back(ir::constant_doubles(q->input(1))->at(0),
                          ir::constant_ints(q->input(2))->at(0));
  }
  ASSERT_EQ(around.size(), 2u);
  EXPECT_EQ(around[0], around[1]);
  // So does a linear Resize (its values stay within the source's range; halved, each output
  // averages 2x2 inputs, a narrower range); not a cubic one.
  for (const char* mode : {"linear", "cubic"}) {
    auto resized =
        run_rewrite(kPass,
                    absl::StrCat(R"(
      <ir_version: 8, opset_import: ["" : 13]>
      g (float[1,1,4,4] x) => (float[1,1,2,2] y)
        <float[1,1,1,1] w1 = {1.0}, float[1,1,1,1] w2 = {1.0}, float[4] scales = {1, 1, 0.5, 0.5}> {
        a = Conv (x, w1)
        s = Resize <mode = ")",
                                 mode, R"("> (a, , scales)
        y = Conv (s, w2)
      }
    )"),
                    [] {
                      RewriteOptions r = quantized(calibration(
                          "x", {1, 1, 4, 4}, {-3, 1, 0, 0, 1, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0}));
                      r.outputs = Outputs::kNotCompared;  // the scales are checked
                      return r;
                    }());
    ASSERT_NE(resized, nullptr) << mode;
    const ir::Node* resize = only_node(resized->graph(), "Resize");
    const ir::Node* before = resize->input(0)->producer();
    const ir::Node* after = resize->output(0)->uses()[0].node;
    ASSERT_TRUE(before->is("DequantizeLinear") && after->is("QuantizeLinear")) << mode;
    EXPECT_EQ(ir::constant_doubles(before->input(1))->at(0) ==
                  ir::constant_doubles(after->input(1))->at(0),
              std::string(mode) == "linear")
        << mode;
  }
}

// A Gather of an 8-bit value (a channel shuffle, optimize_transposes' channel_shuffle; here one
// channel of narrower range than the whole) gets its source's scale and zero point on both sides:
// ONNX Runtime moves pairs across Reshape and Transpose itself but not across a Gather, and runs it
// on the bytes only between equal pairs. A Gather of a constant table stays float, and the report
// does not count it as left in float.
TEST(QuantizeStaticInt8, AGatherOfEightBitValuesTakesItsSourceScale) {
  RewriteOptions r = quantized(calibration("x", {1, 2, 1, 2}, {-3.0f, 2.0f, -2.0f, 2.0f}));
  r.rtol = 0;
  r.atol = 0.1;
  // The shuffle's Gather feeds a Split (a reader that is not quantized): the pass pairs the
  // Gather's output itself. The other Gather, of one channel of narrower range than the whole,
  // is read by a Conv.
  auto m = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,1,2] x) => (float[1,1,1,2] y, float[1,1,1,2] z, float[1,1,1,2] u)
      <float[2,2,1,1] w1 = {1.0, 0.0, 0.0, 1.0}, float[1,1,1,1] w2 = {1.0},
       int64[2] shuffle = {1, 0}, int64[1] one = {1}> {
      a = Conv (x, w1)
      s = Gather <axis = 1> (a, shuffle)
      s0, s1 = Split <axis = 1> (s)
      y = Conv (s0, w2)
      z = Conv (s1, w2)
      c = Gather <axis = 1> (a, one)
      u = Conv (c, w2)
    }
  )",
                       r);
  ASSERT_NE(m, nullptr);
  int gathers = 0;
  for (const ir::Node* gather : m->graph().nodes()) {
    if (!gather->is("Gather")) continue;
    ++gathers;
    const ir::Node* before = gather->input(0)->producer();
    ASSERT_EQ(gather->output(0)->uses().size(), 1u);
    const ir::Node* after = gather->output(0)->uses()[0].node;
    ASSERT_TRUE(before != nullptr && before->is("DequantizeLinear"));
    ASSERT_TRUE(after->is("QuantizeLinear")) << after->op_type();
    EXPECT_EQ(ir::constant_doubles(before->input(1))->at(0),
              ir::constant_doubles(after->input(1))->at(0));
    EXPECT_EQ(ir::constant_ints(before->input(2))->at(0),
              ir::constant_ints(after->input(2))->at(0));
  }
  EXPECT_EQ(gathers, 2);

  // An embedding: the Gather reads a constant table, the MatMul after it is quantized.
  const std::string embedding = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[1,2] ids, float[1,2] x) => (float[1,2,2] y)
      <float[3,2] table = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6}, float[2,2] w = {1, 0, 0, 1}> {
      e = Gather (table, ids)
      a = Add (e, x)
      y = MatMul (a, w)
    }
  )";
  std::vector<std::map<std::string, eval::Tensor>> sets(1);
  sets[0].emplace("ids", make<int64_t>(TensorProto::INT64, {1, 2}, {0, 2}));
  sets[0].emplace("x", make<float>(TensorProto::FLOAT, {1, 2}, {0.5f, -0.5f}));
  auto e = parse_text(embedding);
  ASSERT_NE(e, nullptr);
  CalibrationInputs c{.sets = &sets, .limits = {}};
  const PassResult result = run_pass(*e, kPass, {}, &c);
  EXPECT_TRUE(result.changed);
  const ir::Node* table_gather = only_node(e->graph(), "Gather");
  ASSERT_NE(table_gather, nullptr);
  EXPECT_FALSE(table_gather->input(0)->producer() != nullptr &&
               table_gather->input(0)->producer()->is("DequantizeLinear"));
  for (const auto& x : result.explanations) {
    if (x.rule == "left_in_float") {
      EXPECT_EQ(x.reason.find("Gather"), std::string::npos) << x.reason;
    }
  }
}

// A scalar affine after an 8-bit value (PP-LCNetV3's learnable affine block: * a + b) costs no
// node: the next convolution reads the same bytes with scale s * a and zero point z - b / (s a).
TEST(QuantizeStaticInt8, ScalarAffineRelabelsTheBytes) {
  RewriteOptions r = over_the_bend();
  auto m = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,2,4] x) => (float[1,1,2,4] y)
      <float[1,1,1,1] w1 = {1.0}, float[1,1,1,1] w2 = {1.0}, float a = {0.5}, float b = {0.25},
       float d = {2.0}> {
      c = Conv (x, w1)
      m = Mul (a, c)
      s = Add (m, b)
      t = Div (s, d)
      y = Conv (t, w2)
    }
  )",
                       r);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(count_ops(*m, "Mul"), 0);
  EXPECT_EQ(count_ops(*m, "Add"), 0);
  EXPECT_EQ(count_ops(*m, "Div"), 0);
  // c's pair is [-4, 4] over uint8: s = 8/255, z = 128 (rounded); read as (c * 0.5 + 0.25) / 2.
  const ir::Node* last = nullptr;
  for (const ir::Node* n : m->graph().nodes())
    if (n->is("Conv") && n->output(0)->is_graph_output()) last = n;
  ASSERT_NE(last, nullptr);
  const ir::Node* dq = last->input(0)->producer();
  ASSERT_TRUE(dq->is("DequantizeLinear"));
  const ir::Node* q = dq->input(0)->producer();
  ASSERT_TRUE(q->is("QuantizeLinear"));
  const double s = ir::constant_doubles(q->input(1))->at(0);
  const int64_t z = ir::constant_ints(q->input(2))->at(0);
  EXPECT_NEAR(ir::constant_doubles(dq->input(1))->at(0), s * 0.5 / 2, 1e-9);
  EXPECT_EQ(ir::constant_ints(dq->input(2))->at(0), std::llround(z - 0.25 / (s * 0.5)));
}

// Only bytes that exist are relabelled: attention scores computed from a KV cache that stays
// float (GPT-2's, read through a view of the `present` output) are not quantized for their
// scale, which would add a rounding the model did not have.
TEST(QuantizeStaticInt8, AScaleOfAFloatValueIsNotQuantizedForIt) {
  auto sets = calibration("q", {1, 2, 4}, {1, -2, 0.5, 3, -1, 2, 0, -0.5});
  sets[0].emplace("kin", make<float>(TensorProto::FLOAT, {1, 2, 4}, {2, 1, -1, 0.5, 0, 3, -2, 1}));
  auto m = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,4] q, float[1,2,4] kin) => (float[1,2,4] present, float[1,2,2] y)
      <float s = {0.5}> {
      present = Relu (kin)
      kt = Transpose <perm = [0, 2, 1]> (present)
      a = MatMul (q, kt)
      b = Mul (a, s)
      y = Softmax (b)
    }
  )");
  ASSERT_NE(m, nullptr);
  CalibrationInputs c{.sets = &sets, .limits = {}};
  run_pass(*m, kPass, {}, &c);
  const ir::Value* a = m->graph().find_local("a");
  ASSERT_NE(a, nullptr);
  for (const ir::Use& u : a->uses()) EXPECT_TRUE(u.node->is("Mul")) << u.node->op_type();
  EXPECT_EQ(count_ops(*m, "Mul"), 1);
}

// An Add of an upsampled 8-bit value (a feature pyramid's top-down path: Resize, then Add) is
// between 8-bit values, so it is quantized (QLinearAdd) and the Resize runs on the bytes.
TEST(QuantizeStaticInt8, AddAfterAResizeIsBetweenEightBitValues) {
  auto sets = calibration("x", {1, 1, 2, 2}, {-3.0f, 1.0f, 0.5f, 2.0f});
  sets[0].emplace("z", make<float>(TensorProto::FLOAT, {1, 1, 4, 4},
                                   {-2, -1, 0, 1, 2, 1, 0, -1, -2, 0, 1, 2, 0, 1, 0, -1}));
  RewriteOptions r = quantized(std::move(sets));
  r.rtol = 0;
  r.atol = 0.2;
  auto m = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,2,2] x, float[1,1,4,4] z) => (float[1,1,4,4] y)
      <float[1,1,1,1] w1 = {1.0}, float[1,1,1,1] w2 = {0.5}, float[4] scales = {1, 1, 2, 2}> {
      a = Conv (x, w1)
      u = Resize <mode = "nearest"> (a, , scales)
      b = Conv (z, w2)
      s = Add (u, b)
      y = Conv (s, w1)
    }
  )",
                       r);
  ASSERT_NE(m, nullptr);
  const ir::Node* add = only_node(m->graph(), "Add");
  for (const ir::Value* in : add->inputs()) EXPECT_TRUE(in->producer()->is("DequantizeLinear"));
}

// HardSwish between two 1x1 convolutions (MobileNetV3's block).
const char kConvHardSwishConv[] = R"(
  <ir_version: 8, opset_import: ["" : 14]>
  g (float[1,1,2,4] x) => (float[1,1,2,4] y) <float[1,1,1,1] w1 = {1.0}, float[1,1,1,1] w2 = {1.0}> {
    a = Conv (x, w1)
    h = HardSwish (a)
    y = Conv (h, w2)
  }
)";

// HardSwish whose input stays above -3 (here [-2.5, 4]): x + 3 as QLinearAdd, quantized over
// [0, 6] (the clip) and read back over [0, 1], then QLinearMul by x.
TEST(QuantizeStaticInt8, HardSwishBecomesIntegerArithmetic) {
  RewriteOptions r = above_minus_three();
  auto m = run_rewrite(kPass, kConvHardSwishConv, r);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(count_ops(*m, "HardSwish"), 0);
  EXPECT_EQ(count_ops(*m, "Add"), 1);
  EXPECT_EQ(count_ops(*m, "Mul"), 1);
  for (const ir::Node* n : m->graph().nodes()) {
    if (!n->is("Add") && !n->is("Mul")) continue;
    for (const ir::Value* in : n->inputs())
      EXPECT_TRUE(in->producer()->is("DequantizeLinear")) << n->op_type();
    ASSERT_EQ(n->output(0)->uses().size(), 1u);
    const ir::Node* q = n->output(0)->uses()[0].node;
    ASSERT_TRUE(q->is("QuantizeLinear")) << n->op_type();
    const ir::Node* dq = q->output(0)->uses()[0].node;
    ASSERT_TRUE(dq->is("DequantizeLinear"));
    if (n->is("Add")) {
      // 3 stored exactly at the top of uint8; the clip's pair: 6/255 in, 1/255 out.
      const ir::Node* shift = n->input(1)->producer();
      EXPECT_NEAR(255 * ir::constant_doubles(shift->input(1))->at(0), 3.0, 1e-6);
      EXPECT_NEAR(ir::constant_doubles(q->input(1))->at(0), 6.0 / 255, 1e-9);
      EXPECT_NEAR(ir::constant_doubles(dq->input(1))->at(0), 1.0 / 255, 1e-9);
      EXPECT_EQ(ir::constant_ints(dq->input(2))->at(0), 0);
      EXPECT_EQ(n->output(0)->uses().size(), 1u);
      // The Mul reads the [0, 1] values.
      ASSERT_EQ(dq->output(0)->uses().size(), 1u);
      EXPECT_TRUE(dq->output(0)->uses()[0].node->is("Mul"));
    }
  }
}

// HardSwish whose input reaches -3 ([-4, 4] and [-4, 2]): x's pair is re-scaled to [-3, hi] with
// zero point k = 3 / s, and HardSwish is one Mul of those bytes read twice, with zero point k
// (x) and with zero point 0 at s / 6 after a Clip of the bytes to [0, 2k] (min(x + 3, 6) / 6;
// none when 2k > 255). No Add.
TEST(QuantizeStaticInt8, HardSwishReachingMinusThreeIsOneMul) {
  struct Case {
    std::vector<float> calibration;
    int64_t k;
    bool clip;
  };
  for (const Case& c : {Case{{-4.0f, -3.0f, -1.5f, -0.5f, 0.0f, 1.0f, 2.5f, 4.0f}, 109, true},
                        Case{{-4.0f, -3.0f, -1.5f, -0.5f, 0.0f, 1.0f, 1.5f, 2.0f}, 153, false}}) {
    auto m = run_rewrite(kPass, kConvHardSwishConv, calibrated_on(c.calibration));
    ASSERT_NE(m, nullptr) << c.k;
    EXPECT_EQ(count_ops(*m, "HardSwish"), 0);
    EXPECT_EQ(count_ops(*m, "Add"), 0);
    EXPECT_EQ(count_ops(*m, "Clip"), c.clip ? 1 : 0);
    const ir::Node* mul = only_node(m->graph(), "Mul");
    ASSERT_NE(mul, nullptr);
    const ir::Node* xd = mul->input(0)->producer();
    const ir::Node* gate = mul->input(1)->producer();
    ASSERT_TRUE(is_op(xd, "DequantizeLinear") && is_op(gate, "DequantizeLinear"));
    EXPECT_NEAR(ir::constant_doubles(xd->input(1))->at(0), 3.0 / c.k, 1e-7);
    EXPECT_EQ(ir::constant_ints(xd->input(2))->at(0), c.k);
    EXPECT_NEAR(ir::constant_doubles(gate->input(1))->at(0), 0.5 / c.k, 1e-7);
    EXPECT_EQ(ir::constant_ints(gate->input(2))->at(0), 0);
    const ir::Value* bytes = gate->input(0);
    if (c.clip) {
      ASSERT_TRUE(is_op(bytes->producer(), "Clip"));
      EXPECT_EQ(ir::constant_ints(bytes->producer()->input(2))->at(0), 2 * c.k);
      bytes = bytes->producer()->input(0);
    }
    EXPECT_EQ(bytes, xd->input(0));  // the same bytes
    // The Conv's output pair carries the new scale: its QuantizeLinear made those bytes.
    EXPECT_TRUE(is_op(bytes->producer(), "QuantizeLinear"));
    EXPECT_NEAR(ir::constant_doubles(bytes->producer()->input(1))->at(0), 3.0 / c.k, 1e-7);
  }
}

// HardSwish as Paddle (opset 9) and older exporters write it, x * Clip(x + 3, 0, 6) / 6, and with
// * (1/6) and the product's operands swapped: the same integer arithmetic, nothing of the float
// form left.
TEST(QuantizeStaticInt8, WrittenOutHardSwishBecomesIntegerArithmetic) {
  for (const bool reaches : {false, true})
    for (const char* form :
         {"c = Clip <min = 0.0, max = 6.0> (s)\n m = Mul (a, c)\n h = Div (m, six)",
          "c = Clip <min = 0.0, max = 6.0> (s)\n m = Mul (c, a)\n h = Mul (m, sixth)"}) {
      RewriteOptions r = reaches ? over_the_bend() : above_minus_three();
      auto m = run_rewrite(kPass,
                           absl::StrCat(R"(
        <ir_version: 7, opset_import: ["" : 9]>
        g (float[1,1,2,4] x) => (float[1,1,2,4] y)
          <float[1,1,1,1] w1 = {1.0}, float[1,1,1,1] w2 = {1.0}, float three = {3.0},
           float six = {6.0}, float sixth = {0.16666667}> {
          a = Conv (x, w1)
          s = Add (a, three)
          )",
                                        form, R"(
          y = Conv (h, w2)
        }
      )"),
                           r);
      ASSERT_NE(m, nullptr) << form;
      EXPECT_EQ(count_ops(*m, "Div"), 0) << form;
      EXPECT_EQ(count_ops(*m, "Mul"), 1) << form;
      // Reaching -3, the one Mul of the shifted bytes (HardSwishReachingMinusThreeIsOneMul);
      // else x + 3 as an Add.
      EXPECT_EQ(count_ops(*m, "Add"), reaches ? 0 : 1) << form;
      EXPECT_EQ(count_ops(*m, "Clip"), reaches ? 1 : 0) << form;
      for (const ir::Node* n : m->graph().nodes()) {
        if (n->is("Clip")) {
          EXPECT_EQ(n->input(0)->elem_type(), TensorProto::UINT8) << form;
        }
        if (!n->is("Add") && !n->is("Mul")) continue;
        for (const ir::Value* in : n->inputs())
          EXPECT_TRUE(in->producer()->is("DequantizeLinear")) << form;
      }
    }
}

// HardSigmoid with its own alpha and beta (Paddle's squeeze-excitation: 0.2, 0.5), read by a
// Mul as SE blocks do: x + beta/alpha, quantized at 1/(255 alpha). With int8 activations the
// zero point is -128 on both sides of the clip's pair.
TEST(QuantizeStaticInt8, HardSigmoidTakesItsAlphaAndBeta) {
  const char* text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,2,4] x) => (float[1,1,2,4] y) <float[1,1,1,1] w1 = {1.0}, float[1,1,1,1] w2 = {0.5}> {
      a = Conv (x, w1)
      s = HardSigmoid <alpha = 0.2, beta = 0.5> (a)
      m = Mul (a, s)
      y = Conv (m, w2)
    }
  )";
  for (const char* type : {"uint8", "int8"}) {
    RewriteOptions r = over_the_bend({{"activation_type", type}});
    auto m = run_rewrite(kPass, text, r);
    ASSERT_NE(m, nullptr) << type;
    EXPECT_EQ(count_ops(*m, "HardSigmoid"), 0) << type;
    int clips = 0;
    for (const ir::Node* n : m->graph().nodes()) {
      if (!n->is("Add")) continue;
      EXPECT_NEAR(ir::constant_doubles(n->input(1)->producer()->input(1))->at(0) *
                      (type == std::string("uint8") ? 255 : 127),
                  2.5, 1e-6);
      const ir::Node* q = n->output(0)->uses()[0].node;
      const ir::Node* dq = q->output(0)->uses()[0].node;
      EXPECT_NEAR(ir::constant_doubles(q->input(1))->at(0), 1 / (255 * 0.2), 1e-7);
      EXPECT_NEAR(ir::constant_doubles(dq->input(1))->at(0), 1.0 / 255, 1e-9);
      EXPECT_EQ(ir::constant_ints(q->input(2))->at(0), type == std::string("uint8") ? 0 : -128);
      EXPECT_EQ(ir::constant_ints(dq->input(2))->at(0), type == std::string("uint8") ? 0 : -128);
      ++clips;
    }
    EXPECT_EQ(clips, 1) << type;
    // The SE Mul reads two 8-bit values.
    for (const ir::Node* n : m->graph().nodes()) {
      if (!n->is("Mul")) continue;
      for (const ir::Value* in : n->inputs())
        EXPECT_TRUE(in->producer()->is("DequantizeLinear")) << type;
    }
  }
}

// A squeeze-excitation gate, HardSigmoid alone reading a Conv (here without the pool before it,
// whose one value per channel a single calibration set cannot range): folded into that Conv, whose
// bias takes beta / alpha (in int32) and whose output pair is the clip. No Add and no HardSigmoid
// remain; the gate's Mul reads two 8-bit values.
TEST(QuantizeStaticInt8, SqueezeExcitationGateFoldsIntoItsConv) {
  RewriteOptions r = over_the_bend();
  auto m = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,2,4] x) => (float[1,1,2,4] y)
      <float[1,1,1,1] w1 = {1.0}, float[1,1,1,1] wf = {2.0}, float[1] bf = {0.25},
       float[1,1,1,1] w2 = {0.5}> {
      a = Conv (x, w1)
      f = Conv (a, wf, bf)
      s = HardSigmoid <alpha = 0.2, beta = 0.5> (f)
      m = Mul (a, s)
      y = Conv (m, w2)
    }
  )",
                       r);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(count_ops(*m, "HardSigmoid"), 0);
  EXPECT_EQ(count_ops(*m, "Add"), 0);
  bool folded = false;
  for (const ir::Node* n : m->graph().nodes()) {
    if (!n->is("Conv") || n->inputs().size() < 3) continue;
    const ir::Node* q = n->output(0)->uses()[0].node;
    if (!q->is("QuantizeLinear") ||
        std::abs(ir::constant_doubles(q->input(1))->at(0) - 1 / (255 * 0.2)) > 1e-7)
      continue;
    // The bias: (0.25 + 2.5) / (s_a * s_w) in int32.
    const ir::Node* bias = n->input(2)->producer();
    const double step = ir::constant_doubles(bias->input(1))->at(0);
    int32_t b;
    std::memcpy(&b, bias->input(0)->initializer()->raw_data().data(), 4);
    EXPECT_EQ(b, static_cast<int32_t>(std::nearbyint(2.75 / step)));
    const ir::Node* dq = q->output(0)->uses()[0].node;
    EXPECT_NEAR(ir::constant_doubles(dq->input(1))->at(0), 1.0 / 255, 1e-9);
    EXPECT_TRUE(dq->output(0)->uses()[0].node->is("Mul"));
    folded = true;
  }
  EXPECT_TRUE(folded);
}

// What the rule leaves: a HardSigmoid of a float value (the model's input), one with a negative
// alpha, and one the model returns.
TEST(QuantizeStaticInt8, HardSigmoidItCannotWriteInIntegersStaysFloat) {
  const auto sets = calibration("x", {1, 1, 1, 4}, {-4.0f, -1.0f, 1.0f, 4.0f});
  for (const char* body :
       {"s = HardSigmoid (x)\n y = Conv (s, w1)",
        "a = Conv (x, w1)\n s = HardSigmoid <alpha = -0.2> (a)\n y = Conv (s, w1)",
        "a = Conv (x, w1)\n y = HardSigmoid (a)"}) {
    auto m = parse_text(absl::StrCat(R"(
      <ir_version: 8, opset_import: ["" : 13]>
      g (float[1,1,1,4] x) => (float[1,1,1,4] y) <float[1,1,1,1] w1 = {1.0}> {
      )",
                                     body, "}"));
    ASSERT_NE(m, nullptr) << body;
    CalibrationInputs c{.sets = &sets, .limits = {}};
    run_pass(*m, kPass, {}, &c);
    EXPECT_EQ(count_ops(*m, "HardSigmoid"), 1) << body;
  }
}

// Attention over a KV cache: the keys are also the `present` output, which attention reads
// transposed. The scores' MatMul stays float (ONNX Runtime's level-'all' optimizer would move
// the pair on the transposed keys onto `present`, quantizing the whole cache it returns); the
// same MatMul on keys that are no graph output is quantized.
TEST(QuantizeStaticInt8, AttentionOnAKvCacheOutputStaysFloat) {
  auto sets = [] {
    std::vector<std::map<std::string, eval::Tensor>> out(1);
    std::vector<float> q(8), past(12), k(4);
    // Each spans [-2, 2], the range of the random inputs the outputs are compared on.
    auto span = [](std::vector<float>& v) {
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = -2.0f + 4.0f * static_cast<float>(i) / static_cast<float>(v.size() - 1);
    };
    span(q);
    span(past);
    span(k);
    out[0].emplace("q", make<float>(TensorProto::FLOAT, {1, 2, 4}, q));
    out[0].emplace("past", make<float>(TensorProto::FLOAT, {1, 3, 4}, past));
    out[0].emplace("k", make<float>(TensorProto::FLOAT, {1, 1, 4}, k));
    return out;
  };
  auto scores_quantized = [](const ir::Model& m) {
    for (const ir::Node* n : m.graph().nodes())
      if (n->is("MatMul")) return n->input(1)->producer()->is("DequantizeLinear");
    return false;
  };
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,4] q, float[1,3,4] past, float[1,1,4] k) => (float[1,4,4] present,
                                                              float[1,2,4] y) {
      present = Concat <axis = 1> (past, k)
      kt = Transpose <perm = [0, 2, 1]> (present)
      y = MatMul (q, kt)
    }
  )",
                    quantized(sets()));

  auto no_cache = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,4] q, float[1,3,4] past, float[1,1,4] k) => (float[1,2,4] y) {
      keys = Concat <axis = 1> (past, k)
      kt = Transpose <perm = [0, 2, 1]> (keys)
      y = MatMul (q, kt)
    }
  )",
                              quantized(sets()));
  ASSERT_NE(no_cache, nullptr);
  EXPECT_TRUE(scores_quantized(*no_cache));
}

// The new keys a projection computes, reshaped and appended to the cache the model returns:
// the MatMul runs in 8 bits (its input and weight dequantized) but its output gets no pair, so
// the cache holds float values; the same projection whose output is not returned gets its pair.
TEST(QuantizeStaticInt8, NewKeysAppendedToTheReturnedCacheStayFloat) {
  const std::string cache = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2] a, float[1,3,2] past) => (float[1,4,2] present)
      <float[2,2] w = {1.27, 0, 0, 0.635}, int64[3] shape = {1, 1, 2}> {
      k = MatMul (a, w)
      k3 = Reshape (k, shape)
      present = Concat <axis = 1> (past, k3)
    }
  )";
  auto sets = calibration("a", {1, 2}, {0.0f, 2.55f});
  sets[0].emplace("past", make<float>(TensorProto::FLOAT, {1, 3, 2}, {0, 1, 2, -1, -2, 0.5}));
  auto m = run_rewrite(kPass, cache, quantized(sets));
  ASSERT_NE(m, nullptr);
  const ir::Node* mm = only_node(m->graph(), "MatMul");
  ASSERT_NE(mm, nullptr);
  EXPECT_TRUE(mm->input(0)->producer()->is("DequantizeLinear"));
  EXPECT_TRUE(mm->input(1)->producer()->is("DequantizeLinear"));
  EXPECT_EQ(count_ops(*m, "QuantizeLinear"), 1);  // the input's pair only
  // A second run changes nothing (the float output is what the rules leave).
  CalibrationInputs c{.sets = &sets, .limits = {}};
  const PassResult again = run_pass(*m, kPass, {}, &c);
  EXPECT_FALSE(again.changed);

  std::string hidden = cache;
  hidden.replace(hidden.find("=> (float[1,4,2] present)"), 25, "=> (float[1,4,2] out)");
  hidden.replace(hidden.find("present = Concat"), 16, "joined = Concat");
  hidden.insert(hidden.rfind("    }"), "      out = Relu (joined)\n");
  auto h = run_rewrite(kPass, hidden, quantized(sets));
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(count_ops(*h, "QuantizeLinear"), 2);  // the input's and the output's pairs
}

// A residual block quantized through the pipeline: the gate accepts it, and it is reported.
TEST(QuantizeStaticInt8, ResidualBlockThroughThePipelineIsWithinItsGate) {
  auto m = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,8,8] x) => (float[1,2,8,8] y)
      <float[2,2,3,3] w1 = {0.1, -0.2, 0.3, 0.05, 0.2, -0.1, 0.15, 0.0, -0.3, 0.2, 0.1, -0.05,
                            0.25, -0.15, 0.1, 0.3, -0.2, 0.05, -0.1, 0.2, 0.1, -0.3, 0.05, 0.15,
                            0.2, -0.25, 0.1, 0.05, 0.3, -0.1, 0.2, 0.15, -0.05, 0.1, 0.25, -0.2},
       float[2] b1 = {0.1, -0.1}> {
      c = Conv <pads = [1, 1, 1, 1]> (x, w1, b1)
      r = Relu (c)
      s = Add (r, x)
      y = Relu (s)
    }
  )");
  ASSERT_NE(m, nullptr);
  PipelineConfig config = test_pipeline_config();
  config.passes = {kPass};
  config.pass_options[kPass] = {{"min_conv_channels", "0"}};  // the Conv over 2 channels is no stem
  auto report = run_pipeline(m, config);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->passes.size(), 1u);
  EXPECT_EQ(report->passes[0].rollbacks, 0) << report->passes[0].rollback_reason;
  EXPECT_NE(report->passes[0].error_verdict.find("accepted"), std::string::npos)
      << report->passes[0].error_verdict;
  // The first Relu is folded; the last computes a graph output and stays.
  EXPECT_EQ(count_ops(*m, "Relu"), 1);
  EXPECT_GT(count_ops(*m, "QuantizeLinear"), 0);
  EXPECT_EQ(onnx_errors(*m), "");
}

}  // namespace
}  // namespace graft::testing
