// Verification on given input sets (recorded samples, the inputs an ORT cross-check runs): the
// tensors given are the ones run, a lossy pass's error is measured on them, and a set that does
// not fit the model is InvalidArgument naming the set and the input, before any work.
#include <cmath>

#include "core/eval/verify.h"
#include "core/ir/op_params.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

using eval::Tensor;
using eval::VerifyStatus;
using InputSet = std::map<std::string, Tensor>;

Tensor tensor(int32_t dtype, std::vector<int64_t> dims, std::vector<double> values) {
  auto t = Tensor::zeros(dtype, std::move(dims), 1 << 20);
  EXPECT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->size(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) t->set_double(static_cast<int64_t>(i), values[i]);
  return *t;
}
Tensor floats(std::vector<int64_t> dims, std::vector<double> values) {
  return tensor(onnx::TensorProto::FLOAT, std::move(dims), std::move(values));
}

const char* kRelu = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[N, 2] x) => (float[N, 2] y) { y = Relu (x) }
)";

TEST(InputSets, TheGivenTensorsAreTheOnesRun) {
  auto relu = parse_text(kRelu);
  auto identity = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N, 2] x) => (float[N, 2] y) { y = Identity (x) }
  )");
  ASSERT_TRUE(relu && identity);
  // Random inputs (uniform in [-1, 1]) tell Relu from Identity; non-negative recorded ones do not.
  eval::VerifyOptions options;
  options.input_sets = {InputSet{{"x", floats({1, 2}, {0.5, 3})}}};
  auto same = eval::Verifier(*relu, options).check(*identity);
  EXPECT_EQ(same.status, VerifyStatus::kVerified) << same.message;
  EXPECT_NE(same.message.find("1 input set,"), std::string::npos) << same.message;
  // A second set with negatives: the difference is there, where it was computed by hand.
  options.input_sets.push_back(InputSet{{"x", floats({2, 2}, {1, -2, 0.25, -0.5})}});
  auto differs = eval::Verifier(*relu, options).check(*identity);
  EXPECT_EQ(differs.status, VerifyStatus::kMismatch);
  EXPECT_EQ(differs.max_abs_diff, 2.0);  // Relu(-2) = 0 became -2
  EXPECT_NE(differs.message.find("(input set 2)"), std::string::npos) << differs.message;
}

TEST(InputSets, TheOriginalsOutputsOnTheGivenTensorAreTheHandComputedOnes) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) <float two = {2.0}, float one = {1.0}> {
      m = Mul (x, two)
      y = Add (m, one)
    }
  )");
  // The same interface answering constants: 2 * [1, -3] + 1 = [3, -5].
  auto answer = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      y = Constant <value = float[2] {3.0, -5.0}> ()
    }
  )");
  ASSERT_TRUE(model && answer);
  eval::VerifyOptions options;
  options.atol = options.rtol = 0;
  options.input_sets = {InputSet{{"x", floats({2}, {1, -3})}}};
  auto r = eval::Verifier(*model, options).check(*answer);
  EXPECT_EQ(r.status, VerifyStatus::kVerified) << r.message;
  EXPECT_EQ(r.max_abs_diff, 0);
  options.input_sets = {InputSet{{"x", floats({2}, {1, -2})}}};
  EXPECT_EQ(eval::Verifier(*model, options).check(*answer).status, VerifyStatus::kMismatch);
}

TEST(InputSets, ALossyPassReportsItsErrorOnTheGivenInputs) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) <float[2] w = {1.0, 1.0}> { y = Mul (x, w) }
  )");
  ASSERT_TRUE(model);
  PipelineConfig config = test_pipeline_config();
  config.passes = {"convert_fp16"};
  // float16 rounds 2049 to 2048 (its spacing there is 2) and 0.1 to 0.0999755859375.
  config.verify_options.input_sets = {InputSet{{"x", floats({2}, {0.1, 2049})}}};
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  const VerificationReport& v = report->verification;
  ASSERT_EQ(v.lossy_passes, std::vector<std::string>{"convert_fp16"}) << v.result.message;
  ASSERT_EQ(v.errors.size(), 1u);
  const double x0 = static_cast<float>(0.1), y0 = 0.0999755859375;
  const double x1 = 2049, y1 = 2048;
  EXPECT_DOUBLE_EQ(v.errors[0].max_abs, 1.0);
  EXPECT_DOUBLE_EQ(v.errors[0].rel, 1.0 / 2049);
  const double cosine =
      (x0 * y0 + x1 * y1) / (std::sqrt(x0 * x0 + x1 * x1) * std::sqrt(y0 * y0 + y1 * y1));
  EXPECT_NEAR(v.errors[0].cosine, cosine, 1e-12);
}

// ------------------------------------------------------------------------- rejections

const char* kTwoInputs = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[N, 2] x, float[N] z) => (float[N, 2] y) <float[2] w = {1.0, 2.0}, int64[1] axes = {1}> {
    m = Mul (x, w)
    u = Unsqueeze (z, axes)
    y = Add (m, u)
  }
)";

// run_pipeline's error for `sets` on kTwoInputs (OK when it runs).
absl::Status run_with(std::vector<InputSet> sets, const char* text = kTwoInputs) {
  auto model = parse_text(text);
  if (!model) return absl::InternalError("no model");
  PipelineConfig config = test_pipeline_config();
  config.verify = true;
  config.verify_options.input_sets = std::move(sets);
  auto report = run_pipeline(model, config);
  if (report.ok() && report->verification.result.status != VerifyStatus::kVerified)
    return absl::InternalError(report->verification.result.message);
  return report.status();
}

void expect_rejected(const absl::Status& st, const std::string& part) {
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find(part), std::string::npos) << st.message() << "\nexpected: " << part;
}

InputSet good_set() { return {{"x", floats({2, 2}, {1, 2, 3, 4})}, {"z", floats({2}, {5, 6})}}; }

TEST(InputSets, AGoodSetRunsAndSymbolicDimsTakeAnySize) {
  EXPECT_TRUE(run_with({good_set()}).ok()) << run_with({good_set()});
  // N = 3 in another set.
  InputSet three = {{"x", floats({3, 2}, {1, 2, 3, 4, 5, 6})}, {"z", floats({3}, {1, 2, 3})}};
  EXPECT_TRUE(run_with({good_set(), three}).ok());
}

TEST(InputSets, AWrongElementTypeIsRejected) {
  InputSet set = good_set();
  set["z"] = tensor(onnx::TensorProto::INT64, {2}, {5, 6});
  expect_rejected(run_with({good_set(), set}),
                  "verify input set 2, input 'z': element type INT64, the model declares FLOAT");
}

TEST(InputSets, AWrongStaticDimOrRankIsRejected) {
  InputSet set = good_set();
  set["x"] = floats({2, 3}, {1, 2, 3, 4, 5, 6});
  expect_rejected(run_with({set}),
                  "verify input set 1, input 'x': shape [2,3]: dim 1 is 3, the model declares 2");
  set["x"] = floats({4}, {1, 2, 3, 4});
  expect_rejected(run_with({set}), "input 'x': shape [4] has rank 1, the model declares rank 2");
}

TEST(InputSets, OneSymbolGetsOneSizeWithinASet) {
  InputSet set = good_set();
  set["z"] = floats({3}, {1, 2, 3});
  expect_rejected(run_with({set}),
                  "verify input set 1, input 'z': shape [3]: dim 0 ('N') is 3, but 'N' is 2 in "
                  "input 'x'");
}

TEST(InputSets, AMissingInputIsRejected) {
  InputSet set = good_set();
  set.erase("z");
  expect_rejected(run_with({set}), "verify input set 1: no tensor for input 'z'");
}

TEST(InputSets, AnUnknownNameOrAnInitializerIsRejected) {
  InputSet set = good_set();
  set["q"] = floats({1}, {1});
  expect_rejected(run_with({set}), "verify input set 1: 'q' is not an input of the model");
  // An initializer listed as a graph input keeps its value in both models.
  const char* with_default = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N, 2] x, float[2] w) => (float[N, 2] y) <float[2] w = {1.0, 2.0}> {
      y = Mul (x, w)
    }
  )";
  expect_rejected(
      run_with({{{"x", floats({1, 2}, {1, 2})}, {"w", floats({2}, {1, 1})}}}, with_default),
      "verify input set 1: 'w' is an initializer");
  EXPECT_TRUE(run_with({{{"x", floats({1, 2}, {1, 2})}}}, with_default).ok());
}

TEST(InputSets, AtMostSixteenSets) {
  std::vector<InputSet> sets(eval::kMaxInputSets + 1, good_set());
  expect_rejected(run_with(sets), "at most 16 input sets, got 17");
  sets.pop_back();
  EXPECT_TRUE(run_with(sets).ok());
  eval::VerifyOptions options;
  options.input_sets.assign(17, good_set());
  expect_rejected(eval::validate(options), "at most 16 input sets");
}

// ------------------------------------------------------------------------- calibration sets

TEST(CalibrationSets, ASetThatDoesNotFitIsRejectedNamingTheSetAndTheInput) {
  auto model = parse_text(kTwoInputs);
  ASSERT_NE(model, nullptr);
  PipelineConfig config = test_pipeline_config();
  config.passes = {"quantize_static_int8"};
  InputSet bad = good_set();
  bad["x"] = floats({2, 3}, {1, 2, 3, 4, 5, 6});
  config.calibration_sets = {good_set(), bad};
  expect_rejected(run_pipeline(model, config).status(),
                  "calibration set 2, input 'x': shape [2,3]: dim 1 is 3, the model declares 2");
  config.calibration_sets.assign(eval::kMaxInputSets + 1, good_set());
  expect_rejected(run_pipeline(model, config).status(), "calibration: at most 16 input sets");
}

// The ranges come from the given sets: a MatMul whose input is calibrated on [0, 2.55] gets the
// scale 0.01 (2.55 / 255), and the report says what it was calibrated on.
TEST(CalibrationSets, TheGivenSetsSetTheScalesAndTheReportSaysSo) {
  const char* text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N, 2] a) => (float[N, 2] y) <float[2, 2] w = {1.27, 0, 0, 0.635}> {
      m = MatMul (a, w)
      y = Relu (m)
    }
  )";
  auto run = [&](std::vector<InputSet> sets, PipelineReport* report) {
    auto model = parse_text(text);
    EXPECT_NE(model, nullptr);
    PipelineConfig config = test_pipeline_config();
    config.passes = {"quantize_static_int8"};
    config.calibration_sets = std::move(sets);
    config.accept_unmeasured_error = true;
    config.max_error = 10;  // the scales are what is checked here
    config.min_cosine = -1;
    auto r = run_pipeline(model, config);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) *report = *r;
    double scale = 0;
    for (const ir::Node* n : model->graph().nodes())
      if (n->is("QuantizeLinear") && n->input(0)->is_graph_input())
        scale = ir::constant_doubles(n->input(1)).value_or(std::vector<double>{0})[0];
    return scale;
  };
  PipelineReport given, random;
  EXPECT_NEAR(run({{{"a", floats({1, 2}, {0, 2.55})}}}, &given), 0.01, 1e-7);
  ASSERT_EQ(given.passes.size(), 1u);
  EXPECT_EQ(given.passes[0].calibration, "1 calibration set");
  run({}, &random);
  ASSERT_EQ(random.passes.size(), 1u);
  EXPECT_NE(random.passes[0].calibration.find("random inputs"), std::string::npos)
      << random.passes[0].calibration;
}

// ------------------------------------------------------------------------- parsing client bytes

TEST(InputSets, ParsingChecksTheBytesBeforeAllocating) {
  onnx::TensorProto t = floats({2}, {1.5, -2}).to_proto("x");
  std::string name;
  auto parsed = eval::parse_input_tensor(t.SerializeAsString(), 1 << 20, &name);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(name, "x");
  EXPECT_EQ(parsed->get_double(1), -2);
  // Typed fields work as raw_data does.
  onnx::TensorProto typed;
  typed.set_data_type(onnx::TensorProto::FLOAT);
  typed.add_dims(2);
  typed.add_float_data(1.5);
  typed.add_float_data(-2);
  auto from_typed = eval::parse_input_tensor(typed.SerializeAsString(), 1 << 20);
  ASSERT_TRUE(from_typed.ok()) << from_typed.status();
  EXPECT_TRUE(*from_typed == *parsed);

  expect_rejected(eval::parse_input_tensor("\xff\xff\xff", 1 << 20).status(),
                  "not a serialized onnx.TensorProto");
  onnx::TensorProto external = t;
  external.clear_raw_data();
  external.set_data_location(onnx::TensorProto::EXTERNAL);
  auto* entry = external.add_external_data();
  entry->set_key("location");
  entry->set_value("x.bin");
  expect_rejected(eval::parse_input_tensor(external.SerializeAsString(), 1 << 20).status(),
                  "external data");
  // 10^12 elements and no data: an error, not an allocation (max_bytes is no limit here).
  onnx::TensorProto huge;
  huge.set_data_type(onnx::TensorProto::FLOAT);
  huge.add_dims(1000000);
  huge.add_dims(1000000);
  expect_rejected(
      eval::parse_input_tensor(huge.SerializeAsString(), ~uint64_t{0}).status(),
      "dims [1000000,1000000] declare 1000000000000 elements, but the tensor holds data for at "
      "most 0");
  huge.add_dims(int64_t{1} << 62);
  expect_rejected(eval::parse_input_tensor(huge.SerializeAsString(), ~uint64_t{0}).status(),
                  "more than 2^64 elements");
  onnx::TensorProto short_raw = t;
  short_raw.mutable_raw_data()->resize(7);
  expect_rejected(eval::parse_input_tensor(short_raw.SerializeAsString(), 1 << 20).status(),
                  "raw_data has 7 bytes, expected 8");
  onnx::TensorProto negative = t;
  negative.set_dims(0, -2);
  expect_rejected(eval::parse_input_tensor(negative.SerializeAsString(), 1 << 20).status(),
                  "negative dim -2");
  expect_rejected(eval::parse_input_tensor(t.SerializeAsString(), 4).status(), "");
}

}  // namespace
}  // namespace graft::testing
