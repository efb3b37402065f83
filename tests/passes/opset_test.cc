// raise_opset (core/passes/opset.h): one golden conversion per schema change between opsets 13
// and 21, compared on the reference evaluator where it has the op's kernel (Reduce*, Split,
// BatchNormalization), look-alikes left alone, subgraphs and function bodies, and the refusals.
#include <string>

#include "core/passes/opset.h"
#include "core/passes/queries.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

// raise_opset(model, 21) as a pass, for expect_rewrite: a refusal is an error the test shows.
class RaiseOpsetPass : public Pass {
 public:
  explicit RaiseOpsetPass(int64_t target = 21) : target_(target) {}
  std::string_view name() const override { return "raise_opset"; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override {
    RuleRunOptions options;
    options.check_transactions = ctx.check_transactions;
    auto raised = raise_opset(model, target_, options);
    if (!raised.ok()) return raised.status();
    if (raised->refused) return absl::FailedPreconditionError(raised->refused->message());
    PassResult result;
    result.changed = raised->changed;
    for (const auto& [rule, n] : raised->conversions) result.rules[rule] = n;
    result.rewrites = raised->changed ? 1 : 0;
    return result;
  }

 private:
  int64_t target_;
};

PassRef raise_to(int64_t target) {
  PassSpec spec;
  spec.name = "raise_opset";
  spec.create = [target] { return std::make_unique<RaiseOpsetPass>(target); };
  return PassRef(std::move(spec));
}

PassRef raise21() { return raise_to(21); }

// The refusal of raising `text` to 21 (fails the test when it is not refused).
std::string refusal(const std::string& text) {
  auto model = parse_text(text);
  if (!model) return "no model";
  const auto before = model->clone();
  auto raised = raise_opset(*model, 21);
  EXPECT_TRUE(raised.ok()) << raised.status();
  if (!raised.ok() || !raised->refused) {
    ADD_FAILURE() << "not refused:\n" << print(*model);
    return "";
  }
  EXPECT_FALSE(raised->changed);
  EXPECT_EQ(canonical_text(*model), canonical_text(*before)) << "a refused raise changed it";
  return raised->refused->message();
}

TEST(RaiseOpset, ReduceAxesMoveFromAttributeToInput) {
  expect_rewrite(raise21(), R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] x) => (float[2,1,4] m, float[4] p, float s) {
      m = ReduceMean <axes = [1], keepdims = 1> (x)
      p = ReduceMax <axes = [0, -2], keepdims = 0> (x)
      s = ReduceL2 <keepdims = 0> (x)
    }
  )",
                 R"(
    <ir_version: 10, opset_import: ["" : 21]>
    g (float[2,3,4] x) => (float[2,1,4] m, float[4] p, float s)
      <int64[1] ma = {1}, int64[2] pa = {0, -2}> {
      m = ReduceMean <keepdims = 1> (x, ma)
      p = ReduceMax <keepdims = 0> (x, pa)
      s = ReduceL2 <keepdims = 0> (x)
    }
  )");
  // An empty axes list (which the text syntax cannot write) reduced every axis, as no input
  // does.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] x) => (float[1,1,1] q) { q = ReduceSumSquare <axes = [1], keepdims = 1> (x) }
  )");
  ASSERT_NE(model, nullptr);
  model->graph().nodes()[0]->set_attr(ints_attr("axes", {}));
  expect_rewrite(raise21(), std::move(model), R"(
    <ir_version: 10, opset_import: ["" : 21]>
    g (float[2,3,4] x) => (float[1,1,1] q) { q = ReduceSumSquare <keepdims = 1> (x) }
  )");
}

TEST(RaiseOpset, ReduceSumAndOpsetEighteenNodesStayAsTheyAre) {
  // ReduceSum took axes as an input at 13 already; at 18 every Reduce has the new form.
  expect_rewrite(raise21(), R"(
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[2,3] x, int64[1] a) => (float[2] s, float[3] m) {
      s = ReduceSum <keepdims = 0> (x, a)
      m = ReduceMean <keepdims = 0> (x, a)
    }
  )",
                 R"(
    <ir_version: 10, opset_import: ["" : 21]>
    g (float[2,3] x, int64[1] a) => (float[2] s, float[3] m) {
      s = ReduceSum <keepdims = 0> (x, a)
      m = ReduceMean <keepdims = 0> (x, a)
    }
  )",
                 compare_outputs(Outputs::kNotCompared));  // axes from an input: any value
}

TEST(RaiseOpset, SplitWithoutSizesGetsNumOutputs) {
  expect_rewrite(raise21(), R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,6] x) => (float[4,3] a, float[4,3] b, float[1,6] c, float[3,6] d)
      <int64[2] sizes = {1, 3}> {
      a, b = Split <axis = 1> (x)
      c, d = Split <axis = 0> (x, sizes)
    }
  )",
                 R"(
    <ir_version: 10, opset_import: ["" : 21]>
    g (float[4,6] x) => (float[4,3] a, float[4,3] b, float[1,6] c, float[3,6] d)
      <int64[2] sizes = {1, 3}> {
      a, b = Split <axis = 1, num_outputs = 2> (x)
      c, d = Split <axis = 0> (x, sizes)
    }
  )");
}

TEST(RaiseOpset, BatchNormalizationLosesUnreadTrainingOutputs) {
  const char kAfter[] = R"(
    <ir_version: 10, opset_import: ["" : 21]>
    g (float[2,3,4] x) => (float[2,3,4] y)
      <float[3] s = {1, 2, 3}, float[3] b = {0, 1, 0}, float[3] m = {0.5, 0, -1},
       float[3] v = {1, 4, 0.25}> {
      y = BatchNormalization <epsilon = 0.001> (x, s, b, m, v)
    }
  )";
  // The evaluator does not run the training outputs: the result is compared with the same
  // node without them at the old opset.
  auto m = expect_rewrite(raise21(), R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] x) => (float[2,3,4] y)
      <float[3] s = {1, 2, 3}, float[3] b = {0, 1, 0}, float[3] m = {0.5, 0, -1},
       float[3] v = {1, 4, 0.25}> {
      y, rm, rv = BatchNormalization <epsilon = 0.001> (x, s, b, m, v)
    }
  )",
                          kAfter, compare_outputs(Outputs::kNotCompared));
  ASSERT_NE(m, nullptr);
  std::string at13 = kAfter;
  at13.replace(at13.find("ir_version: 10"), 14, "ir_version: 8");
  at13.replace(at13.find("\"\" : 21"), 7, "\"\" : 13");
  auto reference = parse_text(at13);
  ASSERT_NE(reference, nullptr);
  EXPECT_EQ(same_outputs(*reference, *m), "");
  EXPECT_NE(refusal(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] x, float[3] s, float[3] b, float[3] m, float[3] v)
        => (float[2,3,4] y, float[3] rm) {
      y, rm = BatchNormalization (x, s, b, m, v)
    }
  )")
                .find("BatchNormalization 'y': output 1 (a training statistic) is read"),
            std::string::npos);
}

// No evaluator kernel for the ops below: the goldens are compared as text only.
TEST(RaiseOpset, RoiAlignKeepsItsOldCoordinateTransformation) {
  expect_rewrite(raise21(), R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,8,8] x, float[3,4] rois, int64[3] idx) => (float[3,2,2,2] y, float[3,2,2,2] z) {
      y = RoiAlign <output_height = 2, output_width = 2> (x, rois, idx)
      z = RoiAlign <output_height = 2, output_width = 2,
                    coordinate_transformation_mode = "half_pixel"> (x, rois, idx)
    }
  )",
                 R"(
    <ir_version: 10, opset_import: ["" : 21]>
    g (float[1,2,8,8] x, float[3,4] rois, int64[3] idx) => (float[3,2,2,2] y, float[3,2,2,2] z) {
      y = RoiAlign <coordinate_transformation_mode = "output_half_pixel", output_height = 2,
                    output_width = 2> (x, rois, idx)
      z = RoiAlign <output_height = 2, output_width = 2,
                    coordinate_transformation_mode = "half_pixel"> (x, rois, idx)
    }
  )",
                 compare_outputs(Outputs::kNotCompared));
}

TEST(RaiseOpset, GridSampleModesAreRenamed) {
  expect_rewrite(raise21(), R"(
    <ir_version: 8, opset_import: ["" : 16]>
    g (float[1,1,4,4] x, float[1,2,2,2] grid) => (float[1,1,2,2] a, float[1,1,2,2] b,
                                                  float[1,1,2,2] c, float[1,1,2,2] d) {
      a = GridSample <mode = "bilinear"> (x, grid)
      b = GridSample <mode = "bicubic", align_corners = 1> (x, grid)
      c = GridSample <mode = "nearest"> (x, grid)
      d = GridSample (x, grid)
    }
  )",
                 R"(
    <ir_version: 10, opset_import: ["" : 21]>
    g (float[1,1,4,4] x, float[1,2,2,2] grid) => (float[1,1,2,2] a, float[1,1,2,2] b,
                                                  float[1,1,2,2] c, float[1,1,2,2] d) {
      a = GridSample <mode = "linear"> (x, grid)
      b = GridSample <mode = "cubic", align_corners = 1> (x, grid)
      c = GridSample <mode = "nearest"> (x, grid)
      d = GridSample (x, grid)
    }
  )",
                 compare_outputs(Outputs::kNotCompared));
}

TEST(RaiseOpset, DftAxisBecomesAnInputWithItsOldDefault) {
  expect_rewrite(raise21(), R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[1,8,1] x, int64 n) => (float[1,8,2] a, float[1,8,2] b) {
      a = DFT (x)
      b = DFT <axis = 1, inverse = 1> (x, n)
    }
  )",
                 R"(
    <ir_version: 10, opset_import: ["" : 21]>
    g (float[1,8,1] x, int64 n) => (float[1,8,2] a, float[1,8,2] b)
      <int64 a1 = {1}, int64 b1 = {1}> {
      a = DFT (x, , a1)
      b = DFT <inverse = 1> (x, n, b1)
    }
  )",
                 compare_outputs(Outputs::kNotCompared));
}

TEST(RaiseOpset, GroupNormalizationScaleAndBiasArRepeatedPerChannel) {
  expect_rewrite(raise21(), R"(
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[1,4,3] x) => (float[1,4,3] y)
      <float[2] s = {1, 2}, float[2] b = {-1, 0.5}> {
      y = GroupNormalization <num_groups = 2> (x, s, b)
    }
  )",
                 R"(
    <ir_version: 10, opset_import: ["" : 21]>
    g (float[1,4,3] x) => (float[1,4,3] y)
      <float[4] s4 = {1, 1, 2, 2}, float[4] b4 = {-1, -1, 0.5, 0.5}> {
      y = GroupNormalization <num_groups = 2> (x, s4, b4)
    }
  )",
                 compare_outputs(Outputs::kNotCompared));
  // double: stash_type keeps the old computation in x's type (opset 21 defaults to float).
  expect_rewrite(raise21(), R"(
    <ir_version: 8, opset_import: ["" : 18]>
    g (double[1,2,3] x) => (double[1,2,3] y) <double[1] s = {2}, double[1] b = {1}> {
      y = GroupNormalization <num_groups = 1> (x, s, b)
    }
  )",
                 R"(
    <ir_version: 10, opset_import: ["" : 21]>
    g (double[1,2,3] x) => (double[1,2,3] y) <double[2] s2 = {2, 2}, double[2] b2 = {1, 1}> {
      y = GroupNormalization <num_groups = 1, stash_type = 11> (x, s2, b2)
    }
  )",
                 compare_outputs(Outputs::kNotCompared));
  EXPECT_EQ(refusal(R"(
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[1,4,3] x, float[2] s) => (float[1,4,3] y) <float[2] b = {0, 0}> {
      y = GroupNormalization <num_groups = 2> (x, s, b)
    }
  )"),
            "GroupNormalization 'y': scale is not a constant, so it cannot be repeated per "
            "channel (opset 21 reads it per channel, not per group)");
  EXPECT_EQ(refusal(R"(
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[1,C,3] x) => (float[1,C,3] y) <float[2] s = {1, 1}, float[2] b = {0, 0}> {
      y = GroupNormalization <num_groups = 2> (x, s, b)
    }
  )"),
            "GroupNormalization 'y': x's channel count is not known, so its per-group scale and "
            "bias cannot be repeated per channel (opset 21's meaning)");
}

TEST(RaiseOpset, SubgraphsAndFunctionBodiesAreConvertedAndOtherDomainsLeftAlone) {
  expect_rewrite(raise21(), R"(
    <ir_version: 8, opset_import: ["" : 17, "local" : 1, "com.example" : 1]>
    g (bool c, float[2,3] x) => (float[2,1] y, float[2,1] z, float[2,3] e) {
      y = If (c) <
        then_branch = t () => (float[2,1] o) { o = ReduceMax <axes = [1]> (x) },
        else_branch = f () => (float[2,1] o) { o = ReduceMin <axes = [1]> (x) }>
      z = local.Mean (x)
      e = com.example.ReduceMax <axes = [1]> (x)
    }
    <domain: "local", opset_import: ["" : 17]>
    Mean (a) => (b) {
      b = ReduceMean <axes = [1]> (a)
    }
  )",
                 R"(
    <ir_version: 10, opset_import: ["" : 21, "local" : 1, "com.example" : 1]>
    g (bool c, float[2,3] x) => (float[2,1] y, float[2,1] z, float[2,3] e) {
      y = If (c) <
        then_branch = t () => (float[2,1] o) <int64[1] ta = {1}> { o = ReduceMax (x, ta) },
        else_branch = f () => (float[2,1] o) <int64[1] fa = {1}> { o = ReduceMin (x, fa) }>
      z = local.Mean (x)
      e = com.example.ReduceMax <axes = [1]> (x)
    }
    <domain: "local", opset_import: ["" : 21]>
    Mean (a) => (b) {
      k = Constant <value = int64[1] {1}> ()
      b = ReduceMean (a, k)
    }
  )",
                 compare_outputs(Outputs::kNotCompared));  // a custom domain: not runnable
}

TEST(RaiseOpset, ConvertedModelsComputeWhatTheOriginalsDid) {
  // Every convertible op the evaluator runs, chained, in If branches too: run_rewrite compares
  // the outputs before and after on the evaluator (both branches: two input sets).
  auto m = run_rewrite(raise21(), R"(
    <ir_version: 7, opset_import: ["" : 13]>
    g (float[2,4,6] x, bool c) => (float[2,1,6] y, float[2,4,3] a, float[2,4,3] b) {
      m = ReduceMean <axes = [1]> (x)
      l = ReduceLogSumExp <axes = [2], keepdims = 1> (x)
      s = Sub (m, l)
      y = If (c) <
        then_branch = t () => (float[2,1,6] o) { o = ReduceProd <axes = [1]> (s) },
        else_branch = f () => (float[2,1,6] o) {
          r = ReduceL1 <axes = [1, -1], keepdims = 1> (s)
          o = Add (s, r)
        }>
      h, k = Split <axis = 2> (x)
      a = ReduceSumSquare <axes = [0], keepdims = 1> (h)
      b = ReduceMin <axes = [0], keepdims = 1> (k)
    }
  )");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(count_ops(*m, "ReduceMean"), 1);
  for (ir::Graph* g : m->all_graphs())
    for (ir::Node* n : g->nodes()) EXPECT_EQ(n->attr("axes"), nullptr) << n->op_type();
}

TEST(RaiseOpset, ToTwentyThreeConvertsAsToTwentyOneAndRaisesTheIrVersion) {
  // Opsets 22 and 23 add only types to ops that exist before them: the opset-21 conversions
  // still apply and nothing else changes; opset 23 needs IR version 11.
  expect_rewrite(raise_to(23), R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,4,6] x) => (float[2,1,6] y, float[2,4,6] z) {
      y = ReduceMean <axes = [1]> (x)
      z = Transpose <perm = [0, 1, 2]> (x)
    }
  )",
                 R"(
    <ir_version: 11, opset_import: ["" : 23]>
    g (float[2,4,6] x) => (float[2,1,6] y, float[2,4,6] z) <int64[1] ya = {1}> {
      y = ReduceMean (x, ya)
      z = Transpose <perm = [0, 1, 2]> (x)
    }
  )");
}

TEST(RaiseOpset, NothingToDoAtOrAboveTheTarget) {
  expect_no_rewrite(raise21(), R"(
    <ir_version: 10, opset_import: ["" : 21]>
    g (float[2,3] x) => (float[2] y) { y = ReduceMean <keepdims = 0> (x) }
  )");
  // No default-domain import: one is added (the graph uses none of its ops).
  auto m = run_rewrite(raise21(), R"(
    <ir_version: 8, opset_import: ["com.example" : 1]>
    g (float[2] x) => (float[2] y) { y = com.example.Foo (x) }
  )",
                       compare_outputs(Outputs::kNotCompared));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->opset(""), 21);
  EXPECT_EQ(m->rest().ir_version(), 10);
}

TEST(RaiseOpset, RefusesOldOpsetsAndBadTargets) {
  EXPECT_EQ(refusal(R"(
    <ir_version: 7, opset_import: ["" : 12]>
    g (float[2,3] x) => (float[2,3] y) { y = Relu (x) }
  )"),
            "the model imports the default domain at opset 12; opsets are raised from 13 on");
  EXPECT_EQ(refusal(R"(
    <ir_version: 8, opset_import: ["" : 17, "local" : 1]>
    g (float[2] x) => (float[2] y) { y = local.F (x) }
    <domain: "local", opset_import: ["" : 11]>
    F (a) => (b) { b = Relu (a) }
  )"),
            "function 'F' imports opset 11; opsets are raised from 13 on");
  EXPECT_EQ(refusal(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3] x) => (float[2] y) { y = ReduceMean <axes = "1", keepdims = 0> (x) }
  )"),
            "ReduceMean 'y': its axes attribute is not a list of ints");
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y) { y = Relu (x) }
  )");
  ASSERT_TRUE(model);
  EXPECT_TRUE(absl::IsInvalidArgument(raise_opset(*model, 24).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(raise_opset(*model, 12).status()));
  auto r = raise_opset(*model, 18);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(model->opset(""), 18);
  EXPECT_EQ(model->rest().ir_version(), 8);  // already enough for opset 18
}

}  // namespace
}  // namespace graft::testing
