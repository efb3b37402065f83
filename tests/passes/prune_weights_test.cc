// prune_weights: the share and pattern of zeros reached, a second run changing nothing, weights
// read twice pruned once, and the pipeline's gate judging the result.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include <absl/strings/str_cat.h>

#include "core/ir/model.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

constexpr char kPass[] = "prune_weights";

// y = MatMul (x [3, K], w [K, N]) with seeded Gaussian w.
std::string model_text(int k, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::string w;
  for (int i = 0; i < k * n; ++i) absl::StrAppend(&w, i ? ", " : "", normal(rng));
  return absl::StrCat(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[3,)",
                      k, R"(] x) => (float[3,)", n, R"(] y) <float[)", k, ",", n, "] w = {", w,
                      R"(}> {
      y = MatMul (x, w)
    })");
}

std::vector<double> weight(const ir::Model& m) { return initializer_values(m, "w"); }

TEST(PruneWeights, UnstructuredZeroesTheSmallestShare) {
  auto model = parse_text(model_text(16, 8, 1));
  ASSERT_NE(model, nullptr);
  const std::vector<double> before = weight(*model);
  PassResult r = run_pass(*model, kPass, {{"min_weight_elements", "0"}, {"sparsity", "75"}});
  EXPECT_EQ(r.rewrites, 1);
  const std::vector<double> after = weight(*model);
  ASSERT_EQ(after.size(), before.size());
  int zeros = 0;
  double largest_zeroed = 0, smallest_kept = 1e9;
  for (size_t i = 0; i < after.size(); ++i) {
    if (after[i] == 0) {
      ++zeros;
      largest_zeroed = std::max(largest_zeroed, std::fabs(before[i]));
    } else {
      EXPECT_EQ(after[i], before[i]);  // the others keep their exact values
      smallest_kept = std::min(smallest_kept, std::fabs(before[i]));
    }
  }
  EXPECT_EQ(zeros, 96);  // 75% of 128
  EXPECT_LE(largest_zeroed, smallest_kept);
  ASSERT_EQ(r.explanations.size(), 1u);
  EXPECT_NE(r.explanations[0].reason.find("75.0% zeros"), std::string::npos);
  // A second run finds it already as sparse: no change (the pipeline's fixed point ends).
  PassResult again = run_pass(*model, kPass, {{"min_weight_elements", "0"}, {"sparsity", "75"}});
  EXPECT_FALSE(again.changed);
}

// A weight held by a Constant node (what opset-9 exporters such as Paddle2ONNX write) is pruned
// the same way.
TEST(PruneWeights, AConstantNodesWeightToo) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[3,4] x) => (float[3,2] y) {
      w = Constant <value = float[4,2] {0.5, -0.25, 0.125, 1.0, -2.0, 0.0625, 0.75, -1.5}> ()
      y = MatMul (x, w)
    }
  )");
  ASSERT_NE(model, nullptr);
  PassResult r = run_pass(*model, kPass, {{"min_weight_elements", "0"}});
  EXPECT_EQ(r.rewrites, 1);
  const ir::Value* w = model->graph().find_local("w");
  ASSERT_NE(w, nullptr);
  int zeros = 0;
  for (double v : values_of(w)) zeros += v == 0;
  EXPECT_EQ(zeros, 4);  // 0.0625, 0.125, -0.25 and 0.5 (the four smallest magnitudes)
}

TEST(PruneWeights, TwoOfFourAlongTheReductionAxis) {
  auto model = parse_text(model_text(16, 8, 2));
  ASSERT_NE(model, nullptr);
  PassResult r = run_pass(*model, kPass, {{"min_weight_elements", "0"}, {"pattern", "2:4"}});
  EXPECT_EQ(r.rewrites, 1);
  const std::vector<double> w = weight(*model);  // [K = 16, N = 8], K along rows
  for (int c = 0; c < 8; ++c)
    for (int r0 = 0; r0 < 16; r0 += 4) {
      int zeros = 0;
      for (int r = r0; r < r0 + 4; ++r) zeros += w[static_cast<size_t>(r * 8 + c)] == 0;
      EXPECT_EQ(zeros, 2) << "column " << c << " rows " << r0;
    }
  // K not a multiple of 4: kept, and said.
  auto odd = parse_text(model_text(6, 8, 3));
  PassResult k6 = run_pass(*odd, kPass, {{"min_weight_elements", "0"}, {"pattern", "2:4"}});
  EXPECT_FALSE(k6.changed);
  ASSERT_EQ(k6.explanations.size(), 1u);
  EXPECT_NE(k6.explanations[0].reason.find("not a multiple of 4"), std::string::npos);
}

// Through the pipeline: 50% of a random weight moves the output far beyond the default gate
// (rel <= 0.1): rolled back whole, the weight as it was.
TEST(PruneWeights, ThePipelineRollsBackWhatItsGateRefuses) {
  PipelineConfig config = test_pipeline_config();
  config.passes = {kPass};
  config.pass_options[kPass]["min_weight_elements"] = "0";
  auto model = parse_text(model_text(64, 32, 4));
  ASSERT_NE(model, nullptr);
  const std::vector<double> before = weight(*model);
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  const PassStats* s = stats_of(*report, kPass);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->rollbacks, 1);
  EXPECT_EQ(weight(*model), before);
  // With a gate that accepts it, it is kept.
  config.max_error = 1.0;
  config.min_cosine = 0.0;
  auto kept = parse_text(model_text(64, 32, 4));
  auto accepted = run_pipeline(kept, config);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  int zeros = 0;
  for (double v : weight(*kept)) zeros += v == 0;
  EXPECT_EQ(zeros, 1024);
}

}  // namespace
}  // namespace graft::testing
