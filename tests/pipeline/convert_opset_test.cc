// PipelineConfig::target_opset (`--target-opset`): convert_opset runs first and raises the
// model's opset, so the fusions of newer opsets apply; what cannot be raised is the request's
// error, found before any work.
#include <string>

#include "tests/testing.h"

namespace graft::testing {
namespace {

// A LayerNorm block written out at `opset` (ReduceMean's axes as an attribute: opset < 18).
std::string layer_norm_model(int opset) {
  return "<ir_version: 7, opset_import: [\"\" : " + std::to_string(opset) + R"(]>
    g (float[2,3,4] x) => (float[2,3,4] y)
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}, float[4] beta = {0.1, 0.2, 0.3, -0.4},
       float eps = {1e-5}, float two = {2.0}> {
      m = ReduceMean <axes = [-1]> (x)
      d = Sub (x, m)
      p = Pow (d, two)
      v = ReduceMean <axes = [-1]> (p)
      a = Add (v, eps)
      s = Sqrt (a)
      n = Div (d, s)
      z = Mul (n, gamma)
      y = Add (z, beta)
    }
  )";
}

TEST(ConvertOpset, RaisingTo17LetsLayerNormalizationFuse) {
  // At opset 13 the block stays as it is; raised to 17 it becomes LayerNormalization, verified.
  {
    auto model = parse_text(layer_norm_model(13));
    ASSERT_TRUE(model);
    PipelineConfig config = test_pipeline_config();
    auto report = run_pipeline(model, config);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(count_ops(*model, "LayerNormalization"), 0);
  }
  auto model = parse_text(layer_norm_model(13));
  ASSERT_TRUE(model);
  PipelineConfig config = test_pipeline_config();
  config.target_opset = 17;
  config.verify = true;
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(model->opset(""), 17);
  EXPECT_EQ(count_ops(*model, "LayerNormalization"), 1);
  EXPECT_EQ(report->verification.result.status, eval::VerifyStatus::kVerified)
      << report->verification.result.message;
  EXPECT_EQ(onnx_errors(*model), "");
  // convert_opset ran first and says what it did.
  ASSERT_FALSE(report->passes.empty());
  EXPECT_EQ(report->passes.front().name, "convert_opset");
  ASSERT_FALSE(report->passes.front().explanations.empty());
  EXPECT_NE(report->passes.front().explanations[0].reason.find("raised from 13 to 17"),
            std::string::npos);
}

TEST(ConvertOpset, WhatCannotBeRaisedIsInvalidArgumentAndChangesNothing) {
  struct Case {
    int model_opset;
    int64_t target;
    const char* message;
  };
  for (const Case& c :
       {Case{17, 13, "does not lower"}, Case{6, 17, "opsets are raised from 7 on"},
        Case{13, 12, "target_opset must be 13..23"}, Case{13, 24, "target_opset must be 13..23"}}) {
    auto model = parse_text(layer_norm_model(c.model_opset));
    ASSERT_TRUE(model);
    const std::string before = canonical_text(*model);
    PipelineConfig config = test_pipeline_config();
    config.target_opset = c.target;
    auto report = run_pipeline(model, config);
    ASSERT_FALSE(report.ok()) << c.model_opset << " -> " << c.target;
    EXPECT_TRUE(absl::IsInvalidArgument(report.status())) << report.status();
    EXPECT_NE(report.status().message().find(c.message), std::string::npos) << report.status();
    EXPECT_EQ(canonical_text(*model), before);
  }
}

TEST(ConvertOpset, TheSameOpsetIsANoOp) {
  auto model = parse_text(layer_norm_model(17));
  ASSERT_TRUE(model);
  PipelineConfig config = test_pipeline_config();
  config.target_opset = 17;
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_FALSE(report->passes.empty());
  EXPECT_EQ(report->passes.front().name, "convert_opset");
  EXPECT_EQ(report->passes.front().changed_runs, 0);
}

}  // namespace
}  // namespace graft::testing
