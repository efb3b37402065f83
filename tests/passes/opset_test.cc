// raise_opset (core/passes/opset.h): one golden conversion per schema change between opsets 13
// and 21, compared on the reference evaluator where it has the op's kernel (Reduce*, Split,
// BatchNormalization), look-alikes left alone, subgraphs and function bodies, and the refusals.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <absl/strings/str_join.h>

#include "core/eval/executor.h"
#include "core/eval/verify.h"
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

// Opsets 7 to 12 (old PyTorch, Paddle and tf2onnx exports): the attributes that became inputs
// are inputs, Upsample is a Resize, and the model computes what it did (run_rewrite compares
// the outputs on the evaluator).
TEST(RaiseOpset, FromOpsetNineAttributesBecomeInputs) {
  auto m = run_rewrite(raise_to(13), R"(
    <ir_version: 4, opset_import: ["" : 9]>
    g (float[2,3,4] x, float[1,1,2,2] img) => (float[2,2] a, float[1,3] b, float[2,2,4] c,
                                                float[2,3,4] d, float[1,1,4] e, float[4,6] f,
                                                float[1,1,4,4] g) {
      s = Slice <starts = [0, 1], ends = [2, 3], axes = [0, 1]> (x)
      r = ReduceSum <axes = [2], keepdims = 1> (s)
      u = Unsqueeze <axes = [3]> (r)
      a = Squeeze <axes = [2, 3]> (u)
      t = Transpose <perm = [2, 0, 1]> (x)
      cl = Clip <min = -0.5, max = 0.5> (x)
      flat = Flatten <axis = 1> (cl)
      v, i = TopK <k = 3> (flat)
      b = Slice <starts = [0], ends = [1], axes = [0]> (v)
      h, k = Split <axis = 1, split = [2, 1]> (x)
      dr = Dropout <ratio = 0.3> (h)
      c = Pad <pads = [0, 0, 0, 0, 0, 0], value = 0.0> (dr)
      d = Softmax <axis = 2> (x)
      k0 = Slice <starts = [0], ends = [1], axes = [0]> (k)
      e = LogSoftmax <axis = 1> (k0)
      ft = Flatten <axis = 1> (t)
      f = Softmax (ft)
      sc = Constant <value = float[4] {1, 1, 2, 2}> ()
      g = Upsample <mode = "nearest"> (img, sc)
    }
  )");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->opset(""), 13);
  EXPECT_EQ(count_ops(*m, "Upsample"), 0);
  EXPECT_EQ(count_ops(*m, "Resize"), 1);
  for (ir::Node* n : m->graph().nodes()) {
    if (n->is("Constant")) continue;
    for (const char* attr :
         {"starts", "ends", "axes", "k", "min", "max", "split", "pads", "value", "ratio", "scales"})
      EXPECT_EQ(n->attr(attr), nullptr) << n->op_type() << " keeps " << attr;
  }
}

// Before 13 a Softmax over axis 1 of a rank-3 input normalized each [d1 * d2] row as one: the
// raise writes that out (Flatten, Softmax over axis 1, Reshape back), not a softmax over axis 1.
TEST(RaiseOpset, SoftmaxOverSeveralAxesIsFlattenedAndRestored) {
  auto m = run_rewrite(raise_to(13), R"(
    <ir_version: 6, opset_import: ["" : 11]>
    g (float[2,3,4] x) => (float[2,3,4] y, float[2,3,4] z, float[2,3,4] w) {
      y = Softmax <axis = 1> (x)
      z = LogSoftmax (x)
      w = Hardmax <axis = -2> (x)
    }
  )");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(count_ops(*m, "Flatten"), 3);
  EXPECT_EQ(count_ops(*m, "Reshape"), 3);
  // The last axis alone needs no flattening, only its default written out.
  auto last = run_rewrite(raise_to(13), R"(
    <ir_version: 6, opset_import: ["" : 11]>
    g (float[2,3] x) => (float[2,3] y) { y = Softmax (x) }
  )");
  ASSERT_NE(last, nullptr);
  EXPECT_EQ(count_ops(*last, "Flatten"), 0);
  EXPECT_EQ(only_node(last->graph(), "Softmax")->attr_int("axis", -1), 1);
}

// Resize-10 and Upsample-7 keep their coordinate mapping (asymmetric, nearest rounded down),
// linear too; checked on the evaluator at a scale where the mappings differ.
TEST(RaiseOpset, ResizeTenAndUpsampleSevenKeepTheirCoordinates) {
  for (const char* mode : {"nearest", "linear"}) {
    auto m = run_rewrite(raise_to(13), absl::StrCat(R"(
      <ir_version: 5, opset_import: ["" : 10]>
      g (float[1,1,3,3] x) => (float[1,1,7,7] y) {
        s = Constant <value = float[4] {1, 1, 2.5, 2.5}> ()
        y = Resize <mode = ")",
                                                    mode, R"("> (x, s)
      }
    )"));
    ASSERT_NE(m, nullptr) << mode;
    const ir::Node* r = only_node(m->graph(), "Resize");
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->attr_string("coordinate_transformation_mode", ""), "asymmetric");
    EXPECT_EQ(r->inputs().size(), 3u);
    auto up = run_rewrite(raise_to(13), absl::StrCat(R"(
      <ir_version: 4, opset_import: ["" : 7]>
      g (float[1,1,3,3] x) => (float[1,1,6,9] y) {
        y = Upsample <mode = ")",
                                                     mode, R"(", scales = [1.0, 1.0, 2.0, 3.0]> (x)
      }
    )"));
    ASSERT_NE(up, nullptr) << mode;
    EXPECT_EQ(count_ops(*up, "Resize"), 1);
  }
}

// Every libonnx-testdata model of opsets 7..12 that raise_opset converts computes, at opset 13
// and 17, the outputs the ONNX backend recorded (not only what the evaluator computed for the
// original): the conversions are checked against an independent reference.
TEST(RaiseOpset, OldTestdataModelsComputeTheirRecordedOutputs) {
  const std::filesystem::path root = onnx_testdata_dir();
  if (root.empty()) GTEST_SKIP() << "libonnx-testdata is not installed";
  int raised = 0, refused = 0, unrunnable = 0;
  std::map<std::string, int> converted;
  std::vector<std::string> failures;
  for (const char* suite : {"node", "pytorch-converted", "pytorch-operator", "simple"}) {
    if (!std::filesystem::exists(root / suite)) continue;
    std::vector<std::filesystem::path> dirs;
    for (const auto& e : std::filesystem::directory_iterator(root / suite)) dirs.push_back(e);
    std::sort(dirs.begin(), dirs.end());
    for (const auto& dir : dirs) {
      auto loaded = ir::Model::load_file((dir / "model.onnx").string());
      if (!loaded.ok()) continue;
      const int64_t opset = (*loaded)->opset("");
      if (opset < kMinSourceOpset || opset >= 13) continue;
      auto sets = load_test_data_sets(dir, **loaded);
      if (sets.empty()) continue;
      for (int64_t target : {int64_t{13}, int64_t{17}}) {
        std::unique_ptr<ir::Model> model = (*loaded)->clone();
        RuleRunOptions options;
        options.check_transactions = true;
        auto r = raise_opset(*model, target, options);
        ASSERT_TRUE(r.ok()) << dir << ": " << r.status();
        if (r->refused) {
          refused += target == 13;
          continue;
        }
        raised += target == 13;
        for (const auto& [rule, n] : r->conversions) converted[rule] += n;
        const std::string label = absl::StrCat(dir.filename().string(), " at ", target);
        if (std::string errors = onnx_errors(*model); !errors.empty()) {
          failures.push_back(label + ": " + errors);
          continue;
        }
        for (const auto& set : sets) {
          auto outs = eval::run_model(*model, set.inputs, {});
          if (absl::IsUnimplemented(outs.status())) {
            unrunnable += target == 13;
            break;
          }
          if (!outs.ok()) {
            failures.push_back(label + ": " + std::string(outs.status().message()));
            break;
          }
          if (std::string diff = compare_recorded(*outs, set.outputs); !diff.empty()) {
            failures.push_back(label + ": " + diff);
            break;
          }
        }
      }
    }
  }
  std::cout << "raised " << raised << " old testdata models (" << refused << " refused, "
            << unrunnable << " not runnable on the evaluator); conversions:";
  for (const auto& [rule, n] : converted) std::cout << " " << rule << " " << n;
  std::cout << "\n";
  EXPECT_TRUE(failures.empty()) << absl::StrJoin(failures, "\n");
  EXPECT_GT(raised, 100);
  // The conversions the corpus holds (its other old models are at opset 6 or below, or use ops
  // whose schema did not change); the others are tested above.
  for (const char* rule :
       {"axes_input", "upsample_to_resize", "dropout_ratio_input", "scatter_to_scatter_elements"})
    EXPECT_GT(converted[rule], 0) << rule << " never ran on the corpus";
}

// The PaddleOCR models of ../shared/models (trained weights; opset 9 and 11, as Paddle2ONNX
// writes them) are raised to 13 and compute what they did.
TEST(RaiseOpset, PaddleOcrModelsAreRaisedAndComputeTheSame) {
  const std::filesystem::path dir = shared_models_dir();
  int checked = 0;
  // Inputs at the sizes they serve (text lines 48 high; a small page for the detector).
  const std::vector<std::pair<const char*, std::vector<int64_t>>> models = {
      {"ppocr_mobile_v2_cls.onnx", {1, 3, 48, 192}},
      {"ppocrv4_rec.onnx", {1, 3, 48, 192}},
      {"ppocrv4_det.onnx", {1, 3, 96, 96}}};
  for (const auto& [name, shape] : models) {
    if (dir.empty() || !std::filesystem::exists(dir / name)) continue;
    auto loaded = ir::Model::load_file((dir / name).string());
    ASSERT_TRUE(loaded.ok()) << name << ": " << loaded.status();
    std::unique_ptr<ir::Model> model = (*loaded)->clone();
    RuleRunOptions options;
    options.check_transactions = true;
    auto r = raise_opset(*model, 13, options);
    ASSERT_TRUE(r.ok()) << name << ": " << r.status();
    ASSERT_FALSE(r->refused) << name << ": " << r->refused->message();
    EXPECT_TRUE(r->changed) << name;
    EXPECT_EQ(onnx_errors(*model), "") << name;
    eval::VerifyOptions verify;
    verify.shapes["x"] = shape;
    const eval::VerifyResult v = eval::verify(**loaded, *model, verify);
    EXPECT_EQ(v.status, eval::VerifyStatus::kVerified) << name << ": " << v.message;
    ++checked;
  }
  if (checked == 0) GTEST_SKIP() << "../shared/models has none of the PaddleOCR models";
}

TEST(RaiseOpset, RefusesOldOpsetsAndBadTargets) {
  EXPECT_EQ(refusal(R"(
    <ir_version: 3, opset_import: ["" : 6]>
    g (float[2,3] x) => (float[2,3] y) { y = Relu (x) }
  )"),
            "the model imports the default domain at opset 6; opsets are raised from 7 on");
  EXPECT_EQ(refusal(R"(
    <ir_version: 8, opset_import: ["" : 17, "local" : 1]>
    g (float[2] x) => (float[2] y) { y = local.F (x) }
    <domain: "local", opset_import: ["" : 6]>
    F (a) => (b) { b = Relu (a) }
  )"),
            "function 'F' imports opset 6; opsets are raised from 7 on");
  // What the older forms cannot say in opset 13.
  EXPECT_EQ(refusal(R"(
    <ir_version: 4, opset_import: ["" : 7]>
    g (float[2,3] x, float[3] s, float[3] b, float[3] m, float[3] v) => (float[2,3] y) {
      y = BatchNormalization <spatial = 0> (x, s, b, m, v)
    }
  )"),
            "BatchNormalization 'y': spatial = 0 (statistics per activation, not per channel) "
            "has no opset-9 form");
  EXPECT_EQ(refusal(R"(
    <ir_version: 6, opset_import: ["" : 11]>
    g (float[2,3] x) => (float[2,3] y, float[2,3] m) { y, m = Dropout (x) }
  )"),
            "Dropout 'y': its mask output is read");
  EXPECT_EQ(refusal(R"(
    <ir_version: 6, opset_import: ["" : 11]>
    g (float[1,1,2,2] x, float[0] roi, float[4] s) => (float[1,1,4,4] y) {
      y = Resize <mode = "nearest", coordinate_transformation_mode = "tf_half_pixel_for_nn"> (x, roi, s)
    }
  )"),
            "Resize 'y': coordinate_transformation_mode tf_half_pixel_for_nn has no opset-13 "
            "form");
  EXPECT_EQ(refusal(R"(
    <ir_version: 6, opset_import: ["" : 11]>
    g (x) => (float[2,3] y) { y = Softmax (x) }
  )"),
            "Softmax 'y': its input's rank is not known, and before opset 13 its axis meant every "
            "axis from it on");
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
