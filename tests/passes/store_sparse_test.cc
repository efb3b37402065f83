// store_sparse: which weights are stored sparse (zero share, size, IR version, interface), a
// second run changing nothing, and the saved file smaller with the same outputs.
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>

#include "core/ir/model.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

constexpr char kPass[] = "store_sparse";

// y = MatMul(x [2, 8], w [8, 16]) + b, with `zeros` of w's 128 elements zero (every other one
// 0.5 + i), b [16] dense; the model's IR version `ir_version`.
std::string model_text(int zeros, int ir_version = 8) {
  std::string w;
  for (int i = 0; i < 128; ++i) absl::StrAppend(&w, i ? ", " : "", i < zeros ? 0.0 : 0.5 + i);
  std::string b;
  for (int i = 0; i < 16; ++i) absl::StrAppend(&b, i ? ", " : "", 0.25 * (i + 1));
  return absl::StrCat("<ir_version: ", ir_version, R"(, opset_import: ["" : 17]>
    g (float[2,8] x) => (float[2,16] y) <float[8,16] w = {)",
                      w, "}, float[16] b = {", b, R"(}> {
      m = MatMul (x, w)
      y = Add (m, b)
    })");
}

const PassOptions kSmall = {{"min_elements", "16"}};

bool sparse(const ir::Model& m, const std::string& name) {
  return m.graph().find_local(name)->stored_sparse();
}

TEST(StoreSparse, MostlyZeroWeightIsStoredSparse) {
  auto model = parse_text(model_text(96));
  ASSERT_NE(model, nullptr);
  auto before = model->clone();
  const size_t dense_size = model->to_proto().ByteSizeLong();
  PassResult r = run_pass_checked(*model, kPass, kSmall);
  EXPECT_EQ(r.rewrites, 1);
  EXPECT_TRUE(sparse(*model, "w"));
  EXPECT_FALSE(sparse(*model, "b"));  // no zeros
  ASSERT_EQ(r.explanations.size(), 1u);
  EXPECT_EQ(r.explanations[0].node, "w");
  EXPECT_NE(r.explanations[0].reason.find("75.0% zeros: 512 bytes dense, 384 bytes sparse"),
            std::string::npos)
      << r.explanations[0].reason;

  // Saved: w in sparse_initializer, a smaller file that the checker accepts and loads to the
  // same values and outputs.
  const onnx::ModelProto saved = model->to_proto();
  ASSERT_EQ(saved.graph().sparse_initializer_size(), 1);
  EXPECT_EQ(saved.graph().sparse_initializer(0).values().name(), "w");
  EXPECT_EQ(saved.graph().initializer_size(), 1);
  EXPECT_LT(saved.ByteSizeLong(), dense_size);
  EXPECT_EQ(onnx_errors(*model), "");
  auto reloaded = ir::Model::parse(saved.SerializeAsString());
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(initializer_values(**reloaded, "w"), initializer_values(*before, "w"));
  EXPECT_EQ(same_outputs(*before, **reloaded), "");

  // A second run changes nothing.
  PassResult again = run_pass(*model, kPass, kSmall);
  EXPECT_FALSE(again.changed);
}

TEST(StoreSparse, ThresholdAndSize) {
  // 40% zeros: under the default 50%.
  auto model = parse_text(model_text(51));
  ASSERT_NE(model, nullptr);
  EXPECT_FALSE(run_pass(*model, kPass, kSmall).changed);
  EXPECT_FALSE(sparse(*model, "w"));
  // 47% zeros at a 40% threshold: COO (12 bytes a float32 value) larger than dense.
  model = parse_text(model_text(60));
  ASSERT_NE(model, nullptr);
  EXPECT_FALSE(
      run_pass(*model, kPass, {{"min_elements", "16"}, {"min_zero_percent", "40"}}).changed);
  // 70% zeros at a 70% threshold: stored.
  model = parse_text(model_text(90));
  ASSERT_NE(model, nullptr);
  EXPECT_TRUE(
      run_pass(*model, kPass, {{"min_elements", "16"}, {"min_zero_percent", "70"}}).changed);
  // Fewer elements than min_elements: kept dense.
  model = parse_text(model_text(128));
  ASSERT_NE(model, nullptr);
  EXPECT_FALSE(run_pass(*model, kPass, {{"min_elements", "129"}}).changed);
  EXPECT_TRUE(run_pass(*model, kPass, {{"min_elements", "128"}}).changed);
}

TEST(StoreSparse, BeforeIrVersion6NothingChanges) {
  auto model = parse_text(model_text(128, 5));
  ASSERT_NE(model, nullptr);
  PassResult r = run_pass(*model, kPass, kSmall);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(model->rest().ir_version(), 5);
  ASSERT_EQ(r.explanations.size(), 1u);
  EXPECT_NE(r.explanations[0].reason.find("IR version 5"), std::string::npos);
}

TEST(StoreSparse, GraphInputDefaultsAndOtherTypes) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[4] x, float[4] w) => (float[4] y, int64[4] z) <float[4] w = {0, 0, 0, 0},
                                                            int64[4] k = {0, 0, 0, 5}> {
      y = Add (x, w)
      z = Identity (k)
    }
  )");
  ASSERT_NE(model, nullptr);
  PassResult r = run_pass_checked(*model, kPass, {{"min_elements", "1"}});
  EXPECT_EQ(r.rewrites, 1);
  EXPECT_FALSE(sparse(*model, "w"));  // an overridable default: interface
  EXPECT_TRUE(sparse(*model, "k"));   // int64: 1 x (8 + 8) bytes < 32
  EXPECT_EQ(onnx_errors(*model), "");
}

// In the pipeline: by name only, and the optimized bytes hold the sparse initializer.
TEST(StoreSparse, PipelineByNameOnly) {
  auto model = parse_text(model_text(112));
  ASSERT_NE(model, nullptr);
  PipelineConfig config = test_pipeline_config();
  config.level = 3;
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(stats_of(*report, kPass), nullptr);
  EXPECT_FALSE(sparse(*model, "w"));

  model = parse_text(model_text(112));
  config = test_pipeline_config();
  config.passes = {kPass};
  config.pass_options[kPass]["min_elements"] = "16";
  report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  const PassStats* stats = stats_of(*report, kPass);
  ASSERT_NE(stats, nullptr);
  EXPECT_EQ(stats->rewrites, 1);
  auto bytes = model->serialize_and_release();
  ASSERT_TRUE(bytes.ok());
  onnx::ModelProto out;
  ASSERT_TRUE(out.ParseFromString(*bytes));
  EXPECT_EQ(out.graph().sparse_initializer_size(), 1);
}

}  // namespace
}  // namespace graft::testing
