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

bool has_float16(const ir::Model& model) {
  return print(model).find("float16") != std::string::npos;
}

TEST(Lossy, AConvertedModelReportsItsErrorWithoutAskingForVerification) {
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  PipelineConfig config = test_pipeline_config();
  config.passes = {"convert_fp16"};
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

}  // namespace
}  // namespace graft::testing
