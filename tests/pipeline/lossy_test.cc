// Lossy passes in the pipeline: they always verify, their error per output is measured against
// the original and reported, max_error rolls one back like any rollback, and levels run them
// only at O3 (or never, for by-name-only passes).
#include <algorithm>

#include "core/eval/verify.h"
#include "core/passes/registry.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

const char* kModel = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[N, 4] x) => (float[N, 3] y)
    <float[4, 3] w = {0.1, -0.2, 0.3, 0.4, 0.5, -0.6, 0.7, 0.8, -0.9, 1.1, 1.2, 1.3},
     float[3] b = {0.01, 0.02, 0.03}> {
    m = MatMul (x, w)
    a = Add (m, b)
    y = Relu (a)
  }
)";

// The test pipeline running convert_fp16 alone.
PipelineConfig fp16_only() {
  PipelineConfig config = test_pipeline_config();
  config.passes = {"convert_fp16"};
  return config;
}

bool has_float16(const ir::Model& model) {
  return print(model).find("float16") != std::string::npos;
}

TEST(Lossy, AConvertedModelReportsItsErrorWithoutAskingForVerification) {
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  PipelineConfig config = fp16_only();
  ASSERT_FALSE(config.verify);
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  const VerificationReport& v = report->verification;
  EXPECT_TRUE(v.requested);
  EXPECT_EQ(v.lossy_passes, std::vector<std::string>{"convert_fp16"});
  EXPECT_EQ(v.result.status, eval::VerifyStatus::kVerified) << v.result.message;
  ASSERT_EQ(v.errors.size(), 1u);
  EXPECT_EQ(v.errors[0].name, "y");
  // float16 keeps ~3 significant digits: an error above 0 and well below 1%.
  EXPECT_GT(v.errors[0].max_abs, 0);
  EXPECT_LT(v.errors[0].rel, 1e-2);
  EXPECT_GT(v.errors[0].cosine, 0.9999);
  EXPECT_NE(v.result.message.find("convert_fp16"), std::string::npos) << v.result.message;
  EXPECT_TRUE(has_float16(*model)) << print(*model);
  EXPECT_TRUE(v.rolled_back.empty());
}

TEST(Lossy, MaxErrorRollsTheLossyPassBackAndSaysSo) {
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  PipelineConfig config = test_pipeline_config();
  config.passes = {"eliminate_identity", "convert_fp16", "prune"};
  config.max_error = 1e-9;  // tighter than float16 can be
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  const VerificationReport& v = report->verification;
  EXPECT_TRUE(v.lossy_passes.empty());
  EXPECT_EQ(v.rolled_back, std::vector<std::string>{"convert_fp16"});
  ASSERT_TRUE(v.max_error.has_value());
  EXPECT_EQ(*v.max_error, 1e-9);
  auto it = std::find_if(report->passes.begin(), report->passes.end(),
                         [](const PassStats& p) { return p.name == "convert_fp16"; });
  ASSERT_NE(it, report->passes.end());
  EXPECT_EQ(it->rollbacks, 1);
  EXPECT_NE(it->rollback_reason.find("over gate rel <= 1e-09, cosine >= 0.9995"), std::string::npos)
      << it->rollback_reason;
  EXPECT_EQ(it->error_verdict, it->rollback_reason);
  ASSERT_EQ(v.lossy_trials.size(), 1u);
  EXPECT_FALSE(v.lossy_trials[0].kept);
  EXPECT_TRUE(v.lossy_trials[0].measured);
  EXPECT_EQ(v.lossy_trials[0].gate.max_rel, 1e-9);
  // The stats keep pipeline order with the rolled-back pass in its place.
  ASSERT_EQ(report->passes.size(), 3u);
  EXPECT_EQ(report->passes[1].name, "convert_fp16");
  EXPECT_FALSE(has_float16(*model)) << print(*model);
  // The exact passes' verification stands.
  EXPECT_EQ(v.result.status, eval::VerifyStatus::kVerified) << v.result.message;
  // A bound the error fits keeps it.
  auto again = parse_text(kModel);
  config.max_error = 0.05;
  auto kept = run_pipeline(again, config);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->verification.lossy_passes, std::vector<std::string>{"convert_fp16"});
  EXPECT_TRUE(kept->verification.rolled_back.empty());
  EXPECT_TRUE(has_float16(*again));
}

TEST(Lossy, LevelsRunLossyPassesOnlyAtO3AndByNameOnlyPassesNever) {
  auto names = [](int level) { return passes_for_level(level); };
  auto has = [](const std::vector<std::string>& v, const std::string& n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  for (int level = 0; level <= 2; ++level)
    for (const auto& n : names(level)) {
      const PassInfo* info = find_pass(n);
      ASSERT_NE(info, nullptr);
      EXPECT_FALSE(info->lossy) << n << " at O" << level;
    }
  EXPECT_TRUE(has(names(3), "convert_fp16"));
  EXPECT_TRUE(has(names(3), "schedule_memory"));
  EXPECT_FALSE(has(names(3), "quantize_dynamic_int8"));
  const PassInfo* int8 = find_pass("quantize_dynamic_int8");
  ASSERT_NE(int8, nullptr);
  EXPECT_TRUE(int8->lossy && int8->by_name_only);
}

TEST(Lossy, MeasureComparesOutputsWhoseTypeBecameFloat16ByValue) {
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  auto converted = model->clone();
  PassOptions options;
  options["keep_io_types"] = "false";
  run_pass(*converted, "convert_fp16", options);
  eval::VerifyOptions vo;
  vo.default_dim = 2;
  eval::Verifier verifier(*model, vo);
  // check() holds outputs to their type; measure() compares the values.
  EXPECT_EQ(verifier.check(*converted).status, eval::VerifyStatus::kMismatch);
  eval::VerifyResult m = verifier.measure(*converted);
  EXPECT_EQ(m.status, eval::VerifyStatus::kVerified) << m.message;
  ASSERT_EQ(m.outputs.size(), 1u);
  EXPECT_LT(m.outputs[0].rel, 1e-2);
  EXPECT_GT(m.outputs[0].rel, 0);
  // A candidate that changes an output's shape is still a mismatch.
  auto other = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N, 4] x) => (float[N, 4] y) {
      y = Relu (x)
    }
  )");
  EXPECT_EQ(verifier.measure(*other).status, eval::VerifyStatus::kMismatch);
}

TEST(Lossy, WithinItsDefaultGateTheResultIsAcceptedAndSaysSo) {
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  PipelineConfig config = fp16_only();
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  const PassStats* s = stats_of(*report, "convert_fp16");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->error_verdict.rfind("accepted (error rel ", 0), 0u) << s->error_verdict;
  EXPECT_NE(s->error_verdict.find("gate rel <= 0.01, cosine >= 0.9995"), std::string::npos)
      << s->error_verdict;
  const VerificationReport& v = report->verification;
  ASSERT_EQ(v.lossy_trials.size(), 1u);
  EXPECT_TRUE(v.lossy_trials[0].kept && v.lossy_trials[0].measured);
  EXPECT_EQ(v.lossy_trials[0].gate.max_rel, find_pass("convert_fp16")->gate.max_rel);
  // Measured at representative sizes: N is a leading dim (batch, 1) here; the message says so.
  EXPECT_NE(v.result.message.find("within its gate"), std::string::npos) << v.result.message;
  EXPECT_NE(v.result.message.find("x=[1,4]"), std::string::npos) << v.result.message;
}

TEST(Lossy, ADeliberatelyBrokenResultIsRolledBackByTheDefaultGate) {
  // The weights' 1e-3 offsets vanish in float16 next to 1.0 (its step there is 2^-10): an
  // output that is their difference is lost entirely, cosine far from 1.
  const char* text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N, 2] x) => (float[N, 2] y)
      <float[2, 2] w = {1.0001, 1.0002, 1.0003, 1.0004}, float[2, 2] u = {1.0, 1.0, 1.0, 1.0}> {
      a = MatMul (x, w)
      b = MatMul (x, u)
      y = Sub (a, b)
    }
  )";
  auto model = parse_text(text);
  ASSERT_TRUE(model);
  PipelineConfig config = fp16_only();
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  const PassStats* s = stats_of(*report, "convert_fp16");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->rollbacks, 1);
  EXPECT_EQ(s->error_verdict.rfind("rolled back (error ", 0), 0u) << s->error_verdict;
  EXPECT_NE(s->error_verdict.find("over gate rel <= 0.01"), std::string::npos) << s->error_verdict;
  EXPECT_FALSE(has_float16(*model));
  EXPECT_TRUE(report->verification.lossy_passes.empty());
  EXPECT_EQ(report->verification.result.status, eval::VerifyStatus::kVerified);
  // --max-error and --min-cosine replace the gate.
  auto again = parse_text(text);
  config.max_error = 10;
  config.min_cosine = -1;
  auto kept = run_pipeline(again, config);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(has_float16(*again));
  EXPECT_EQ(kept->verification.lossy_trials.at(0).gate.max_rel, 10);
}

TEST(Lossy, AnErrorThatCannotBeMeasuredRollsBackUnlessAccepted) {
  // The evaluator has no kernel for the custom op: nothing can be measured.
  const char* text = R"(
    <ir_version: 8, opset_import: ["" : 13, "custom.domain" : 1]>
    g (float[N, 4] x) => (float[N, 3] y)
      <float[4, 3] w = {0.1, -0.2, 0.3, 0.4, 0.5, -0.6, 0.7, 0.8, -0.9, 1.1, 1.2, 1.3}> {
      m = MatMul (x, w)
      y = custom.domain.Mystery (m)
    }
  )";
  auto model = parse_text(text);
  ASSERT_TRUE(model);
  PipelineConfig config = fp16_only();
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  const PassStats* s = stats_of(*report, "convert_fp16");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->rollbacks, 1);
  EXPECT_EQ(s->error_verdict.rfind("rolled back (error not measured (", 0), 0u) << s->error_verdict;
  EXPECT_FALSE(has_float16(*model));
  ASSERT_EQ(report->verification.lossy_trials.size(), 1u);
  EXPECT_FALSE(report->verification.lossy_trials[0].measured);
  EXPECT_FALSE(report->verification.lossy_trials[0].kept);

  auto accepted = parse_text(text);
  config.accept_unmeasured_error = true;
  auto kept = run_pipeline(accepted, config);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(has_float16(*accepted));
  EXPECT_EQ(kept->verification.result.status, eval::VerifyStatus::kNotVerifiable);
  const PassStats* k = stats_of(*kept, "convert_fp16");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->error_verdict.rfind("accepted with its error not measured", 0), 0u)
      << k->error_verdict;
}

TEST(Lossy, ActivationsBeyondMaxActivationKeepTheirNodesInFloat32) {
  // x * 1000 reaches 1000 * |x| on the verification inputs (|x| <= 1): with max_activation 500
  // the Mul and its reader stay float32, the rest converts.
  const char* text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N, 4] x) => (float[N, 4] y) <float[1] k = {1000.0}, float[1] h = {0.5}> {
      a = Relu (x)
      big = Mul (a, k)
      small = Mul (big, h)
      y = Neg (small)
    }
  )";
  auto model = parse_text(text);
  ASSERT_TRUE(model);
  PipelineConfig config = fp16_only();
  config.pass_options["convert_fp16"]["max_activation"] = "500";
  // 16 rows: the calibration set (random, drawn apart from the measured one) surely holds
  // positive values; at the default batch of 1 its 4 values may all be negative.
  config.verify_options.dims["N"] = 16;
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  const PassStats* s = stats_of(*report, "convert_fp16");
  ASSERT_NE(s, nullptr);
  std::set<std::string> kept;
  for (const auto& e : s->explanations) {
    EXPECT_EQ(e.rule, "kept_float32");
    EXPECT_NE(e.reason.find("on the calibration inputs (max_activation 500)"), std::string::npos)
        << e.reason;
    kept.insert(e.node);
  }
  EXPECT_EQ(kept, (std::set<std::string>{"big", "small"}));
  EXPECT_EQ(model->graph().find_local("k")->initializer()->data_type(), onnx::TensorProto::FLOAT);
  const ir::Node* relu = producer(model->graph(), "a");
  ASSERT_NE(relu, nullptr);
  EXPECT_EQ(relu->output(0)->elem_type(), onnx::TensorProto::FLOAT16) << print(*model);
  // The default (16384) converts everything.
  auto whole = parse_text(text);
  config.pass_options.clear();
  auto all = run_pipeline(whole, config);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_TRUE(stats_of(*all, "convert_fp16")->explanations.empty());
}

TEST(Lossy, ProbabilityOutputsAreComparedOnTheirOwnScale) {
  // A sigmoid of very negative values is tiny: its error over its own largest value would be
  // large, over 1 (the scale of a probability) it is not.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N, 4] x) => (float[N, 4] y) <float[1] k = {-12.0}> {
      a = Add (x, k)
      y = Sigmoid (a)
    }
  )");
  ASSERT_TRUE(model);
  PipelineConfig config = fp16_only();
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  const auto& errors = report->verification.errors;
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].rel, std::min(errors[0].rel, errors[0].max_abs));
  EXPECT_LT(errors[0].rel, 1e-4);
  EXPECT_TRUE(has_float16(*model));
}

TEST(Lossy, APassThatChangesNothingIsNotListedAsLossy) {
  // No float values: convert_fp16 has nothing to convert; nothing to measure either.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[N] x) => (int64[N] y) { y = Neg (x) }
  )");
  ASSERT_TRUE(model);
  PipelineConfig config = fp16_only();
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->verification.lossy_passes.empty());
  const PassStats* s = stats_of(*report, "convert_fp16");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->rollbacks, 0);
  EXPECT_EQ(s->error_verdict, "accepted (it changed nothing)");
  EXPECT_EQ(report->verification.result.message.find("lossy"), std::string::npos)
      << report->verification.result.message;
}

}  // namespace
}  // namespace graft::testing
