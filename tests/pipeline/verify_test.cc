// Numeric verification: the Verifier on its own (inputs from options, tolerances, reasons), and
// the pipeline's use of it: a pass that changes the outputs is found by bisection among the
// pass runs, rolled back, and the model is optimized again without it.
#include <limits>
#include <set>

#include <absl/strings/str_cat.h>

#include "core/eval/verify.h"
#include "core/passes/registry.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

using eval::VerifyStatus;

// Renames every `from` node to `to`: an arithmetic "optimization" that changes the numbers.
class RenameOp final : public Pass {
 public:
  RenameOp(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  std::string_view name() const override { return "rename_op"; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    PassResult result;
    for (ir::Graph* g : model.all_graphs())
      for (ir::Node* n : g->nodes())
        if (!n->dead() && n->is(from_)) {
          n->mutable_proto().set_op_type(to_);
          result.add();
        }
    return result;
  }

 private:
  std::string from_, to_;
};

PassSpec builtin(const std::string& name) {
  const PassInfo* info = find_pass(name);
  return {name, info->create, *parse_options(name, info->options, {})};
}
PassSpec rename(const std::string& label, const std::string& from, const std::string& to) {
  return {label, [from, to] { return std::make_unique<RenameOp>(from, to); }, {}};
}

const char* kModel = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[N, 3] x) => (float[N, 3] y) <float[3] c = {1.0, 2.0, 3.0}> {
    a = Identity (x)
    s = Sub (a, c)
    i = Identity (s)
    y = Mul (i, c)
  }
)";

TEST(Verifier, SameModelIsVerifiedAndDifferenceIsReported) {
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  eval::Verifier verifier(*model, {});
  ASSERT_TRUE(verifier.usable());
  auto same = verifier.check(*model->clone());
  EXPECT_EQ(same.status, VerifyStatus::kVerified) << same.message;
  EXPECT_EQ(same.max_abs_diff, 0.0);

  auto changed = model->clone();
  for (ir::Node* n : changed->graph().nodes())
    if (n->is("Sub")) n->mutable_proto().set_op_type("Add");
  auto diff = verifier.check(*changed);
  EXPECT_EQ(diff.status, VerifyStatus::kMismatch);
  // Sub(x, c) vs Add(x, c), times c: the difference is 2*c*c, at most 18 for c = 3.
  EXPECT_NEAR(diff.max_abs_diff, 18.0, 1e-5);
  EXPECT_EQ(diff.worst_output, "y");
  EXPECT_NE(diff.message.find("output 'y'"), std::string::npos) << diff.message;
}

TEST(Verifier, ToleranceIsRelativeAndAbsolute) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4] x) => (float[4] y) <float[1] c = {1000.0}> {
      y = Add (x, c)
    }
  )");
  ASSERT_TRUE(model);
  auto nudged = [&](float v) {
    auto m = model->clone();
    ir::Value* c = m->graph().find_local("c");
    onnx::TensorProto t = *c->initializer();
    t.clear_float_data();
    t.add_float_data(v);
    m->graph().make_initializer(c, t);
    return m;
  };
  eval::VerifyOptions options;  // rtol 1e-3: 1000 +- 0.5 is within, +- 5 is not
  EXPECT_EQ(eval::verify(*model, *nudged(1000.5f), options).status, VerifyStatus::kVerified);
  EXPECT_EQ(eval::verify(*model, *nudged(1005.0f), options).status, VerifyStatus::kMismatch);
  options.rtol = 0;
  options.atol = 1e-3;
  EXPECT_EQ(eval::verify(*model, *nudged(1000.5f), options).status, VerifyStatus::kMismatch);
}

TEST(Verifier, UnsupportedOpIsNamed) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[2] x) => (float[2] y) {
      y = custom.Frobnicate (x)
    }
  )");
  ASSERT_TRUE(model);
  auto r = eval::verify(*model, *model->clone());
  EXPECT_EQ(r.status, VerifyStatus::kNotVerifiable);
  EXPECT_EQ(r.unsupported_op, "Frobnicate");
  EXPECT_NE(r.message.find("cannot run"), std::string::npos) << r.message;
}

TEST(Verifier, InputsFollowOptions) {
  // Reshape to [4, 8] needs exactly 32 elements: only the dims given in the options fit.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[batch, len] x, int64 k) => (float[4, 8] y, int64 kk) <int64[2] s = {4, 8}> {
      y = Reshape (x, s)
      kk = Identity (k)
    }
  )");
  ASSERT_TRUE(model);
  auto r = eval::verify(*model, *model->clone());
  EXPECT_EQ(r.status, VerifyStatus::kNotVerifiable) << "default dims are 1";
  EXPECT_NE(r.message.find("original model"), std::string::npos) << r.message;

  eval::VerifyOptions by_name;
  by_name.dims = {{"batch", 2}, {"len", 16}};
  EXPECT_EQ(eval::verify(*model, *model->clone(), by_name).status, VerifyStatus::kVerified);

  eval::VerifyOptions by_shape;
  by_shape.shapes = {{"x", {4, 8}}};
  by_shape.values = {{"k", 16000}};
  eval::Verifier verifier(*model, by_shape);
  ASSERT_TRUE(verifier.usable());
  // The fixed value reaches the model: a model that outputs k + 1 differs by exactly 1.
  auto plus_one = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[batch, len] x, int64 k) => (float[4, 8] y, int64 kk)
        <int64[2] s = {4, 8}, int64 one = {1}> {
      y = Reshape (x, s)
      kk = Add (k, one)
    }
  )");
  ASSERT_TRUE(plus_one);
  auto r2 = verifier.check(*plus_one);
  EXPECT_EQ(r2.status, VerifyStatus::kMismatch);
  EXPECT_NE(r2.message.find("16000 became 16001"), std::string::npos) << r2.message;

  eval::VerifyOptions wrong_rank;
  wrong_rank.shapes = {{"x", {32}}};
  auto r3 = eval::verify(*model, *model->clone(), wrong_rank);
  EXPECT_EQ(r3.status, VerifyStatus::kNotVerifiable);
  EXPECT_NE(r3.message.find("rank 2"), std::string::npos) << r3.message;

  eval::VerifyOptions unknown_input;
  unknown_input.shapes = {{"nope", {1}}};
  auto r4 = eval::verify(*model, *model->clone(), unknown_input);
  EXPECT_EQ(r4.status, VerifyStatus::kNotVerifiable);
  EXPECT_NE(r4.message.find("'nope'"), std::string::npos) << r4.message;
}

TEST(Verifier, AutomaticDimsGrowUntilTheOriginalRuns) {
  // A 5x5 pooling window needs spatial dims of at least 5: 1 fails, 16 is the first that runs.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N, 1, H, W] x) => (float[N, 1, P, Q] y) {
      y = MaxPool <kernel_shape = [5, 5]> (x)
    }
  )");
  ASSERT_TRUE(model);
  auto r = eval::verify(*model, *model->clone());
  EXPECT_EQ(r.status, VerifyStatus::kVerified) << r.message;
  EXPECT_NE(r.message.find("symbolic dims set to 16"), std::string::npos) << r.message;

  // A fixed default is not searched.
  eval::VerifyOptions fixed;
  fixed.default_dim = 1;
  auto r1 = eval::verify(*model, *model->clone(), fixed);
  EXPECT_EQ(r1.status, VerifyStatus::kNotVerifiable);
  EXPECT_NE(r1.message.find("MaxPool"), std::string::npos) << r1.message;

  // Sizes whose inputs exceed the cap are not tried: the error of the smallest size stays.
  eval::VerifyOptions capped;
  capped.max_auto_input_bytes = 100;  // 16*1*16*16 floats are 16 KiB
  auto r2 = eval::verify(*model, *model->clone(), capped);
  EXPECT_EQ(r2.status, VerifyStatus::kNotVerifiable);
  EXPECT_NE(r2.message.find("MaxPool"), std::string::npos) << r2.message;
}

TEST(Verifier, SecondInputSetCatchesWhatTheFirstMisses) {
  // The difference shows only when the bool input is true; with two input sets of four random
  // bools each, some element is true for these seeds (checked below, so the test cannot pass
  // vacuously).
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool[1] p, float[1] x) => (float[1] y) <float[1] zero = {0.0}> {
      y = Where (p, zero, x)
    }
  )");
  auto other = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool[1] p, float[1] x) => (float[1] y) <float[1] zero = {5.0}> {
      y = Where (p, zero, x)
    }
  )");
  ASSERT_TRUE(model && other);
  int caught_with_one = 0, caught_with_two = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    eval::VerifyOptions one;
    one.seed = seed;
    one.trials = 1;
    eval::VerifyOptions two = one;
    two.trials = 2;
    caught_with_one += eval::verify(*model, *other, one).status == VerifyStatus::kMismatch;
    caught_with_two += eval::verify(*model, *other, two).status == VerifyStatus::kMismatch;
  }
  EXPECT_GT(caught_with_two, caught_with_one);
  EXPECT_LT(caught_with_one, 20);
}

TEST(Verifier, StopsWhenToldTo) {
  // A deadline or cancellation reaches the evaluator between nodes: the run ends with that
  // status instead of finishing a long model.
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  int polls = 0;
  eval::VerifyOptions options;
  options.should_continue = [&]() -> absl::Status {
    return ++polls > 2 ? absl::DeadlineExceededError("request deadline") : absl::OkStatus();
  };
  eval::Verifier verifier(*model, options);
  EXPECT_FALSE(verifier.usable());
  auto r = verifier.check(*model);
  EXPECT_EQ(r.status, VerifyStatus::kNotVerifiable);
  EXPECT_NE(r.message.find("request deadline"), std::string::npos) << r.message;
  EXPECT_EQ(polls, 3);  // stopped at the third node of four

  // Through the pipeline, the request ends with the deadline status.
  PipelineConfig config = test_pipeline_config();
  config.verify = true;
  int pipeline_polls = 0;
  bool expired = false;
  config.should_continue = [&]() -> absl::Status {
    ++pipeline_polls;
    return expired ? absl::DeadlineExceededError("request deadline") : absl::OkStatus();
  };
  std::vector<PassSpec> specs = {{"expire",
                                  [&] {
                                    expired = true;  // the deadline passes during the pipeline
                                    return find_pass("prune")->create();
                                  },
                                  {}}};
  auto report = run_specs(model, specs, config);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kDeadlineExceeded) << report.status();
}

TEST(PipelineVerify, GuiltyPassIsFoundRolledBackAndTheRestKept) {
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  auto original = model->clone();
  PipelineConfig config = test_pipeline_config();
  config.verify = true;
  std::vector<PassSpec> specs = {builtin("eliminate_identity"), rename("sub_to_add", "Sub", "Add"),
                                 builtin("prune")};
  auto report = run_specs(model, specs, config);
  ASSERT_TRUE(report.ok()) << report.status();
  const auto& v = report->verification;
  EXPECT_TRUE(v.requested);
  EXPECT_EQ(v.result.status, VerifyStatus::kVerified) << v.result.message;
  ASSERT_EQ(v.rolled_back, std::vector<std::string>{"sub_to_add"});
  ASSERT_EQ(report->passes.size(), 3u);
  EXPECT_EQ(report->passes[1].name, "sub_to_add");
  EXPECT_EQ(report->passes[1].rollbacks, 1);
  EXPECT_NE(report->passes[1].rollback_reason.find("changed the outputs"), std::string::npos)
      << report->passes[1].rollback_reason;
  // The good pass's work is kept; the bad one's is not.
  EXPECT_EQ(count_ops(*model, "Identity"), 0);
  EXPECT_EQ(count_ops(*model, "Sub"), 1);
  EXPECT_EQ(same_outputs(*original, *model), "");
  EXPECT_EQ(report->nodes_before, 4u);
  EXPECT_EQ(report->nodes_after, 2u);
}

TEST(PipelineVerify, BisectionFindsAPassThatOnlyBreaksAfterOthersRan) {
  // "late" renames Mul to Div, which changes the outputs; it is placed among harmless passes so
  // that bisection has several kept runs to search, and a second bad pass is found in the
  // next attempt.
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  auto original = model->clone();
  PipelineConfig config = test_pipeline_config();
  config.verify = true;
  std::vector<PassSpec> specs = {builtin("eliminate_identity"), builtin("cse"),
                                 rename("late", "Mul", "Div"), rename("also_bad", "Sub", "Add"),
                                 builtin("prune")};
  auto report = run_specs(model, specs, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verification.result.status, VerifyStatus::kVerified);
  EXPECT_EQ(report->verification.rolled_back, (std::vector<std::string>{"late", "also_bad"}));
  ASSERT_EQ(report->passes.size(), 5u);
  for (size_t i = 0; i < specs.size(); ++i) EXPECT_EQ(report->passes[i].name, specs[i].name);
  EXPECT_EQ(count_ops(*model, "Mul"), 1);
  EXPECT_EQ(count_ops(*model, "Identity"), 0);
  EXPECT_EQ(same_outputs(*original, *model), "");
}

TEST(PipelineVerify, HarmlessPipelineIsVerifiedWithoutRollback) {
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  PipelineConfig config = test_pipeline_config();
  config.verify = true;
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verification.result.status, VerifyStatus::kVerified);
  EXPECT_TRUE(report->verification.rolled_back.empty());
  for (const auto& p : report->passes) EXPECT_EQ(p.rollbacks, 0) << p.name;
  EXPECT_EQ(count_ops(*model, "Identity"), 0);
}

TEST(PipelineVerify, UnverifiableModelIsStillOptimizedAndSaysWhy) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[2] x) => (float[2] y) {
      a = Identity (x)
      y = custom.Frobnicate (a)
    }
  )");
  ASSERT_TRUE(model);
  PipelineConfig config = test_pipeline_config();
  config.verify = true;
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verification.result.status, VerifyStatus::kNotVerifiable);
  EXPECT_EQ(report->verification.result.unsupported_op, "Frobnicate");
  EXPECT_EQ(count_ops(*model, "Identity"), 0);
}

TEST(PipelineVerify, OffByDefault) {
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  std::vector<PassSpec> specs = {rename("sub_to_add", "Sub", "Add")};
  auto report = run_specs(model, specs, test_pipeline_config());
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->verification.requested);
  EXPECT_EQ(count_ops(*model, "Add"), 1);  // nothing checked the numbers
}

TEST(PipelineVerify, FailingOptimizedModelCountsAsMismatch) {
  // Concat without the axis attribute it requires fails on the evaluator.
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  PipelineConfig config = test_pipeline_config();
  config.verify = true;
  std::vector<PassSpec> specs = {rename("to_concat", "Mul", "Concat")};
  auto report = run_specs(model, specs, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verification.rolled_back, std::vector<std::string>{"to_concat"});
  EXPECT_EQ(count_ops(*model, "Mul"), 1);
}

// "0.5, 0.5, ..." (`n` values): the data of a constant table in ONNX text.
std::string halves(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) absl::StrAppend(&out, i ? ", " : "", "0.5");
  return out;
}

TEST(Verifier, IntegerInputsTakeTheValuesTheModelReadsThemAs) {
  // ids index a 50-row table (Gather): they span it; the mask feeds 1 - m: 0 or 1; `count` is
  // read by nothing that says more: [0, int_max].
  const std::string table = halves(100);
  auto model = parse_text(absl::StrCat(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[1, 64] ids, int64[1, 64] attention, int64[1, 64] count) => (float[1, 64, 2] e,
                                                                        float[1, 64] m,
                                                                        int64[1, 64] c)
      <float[50, 2] table = {)",
                                       table, R"(}, float one = {1.0}> {
      e = Gather (table, ids)
      f = Cast <to = 1> (attention)
      m = Sub (one, f)
      c = Identity (count)
    }
  )"));
  ASSERT_TRUE(model);
  eval::VerifyOptions options;
  options.trials = 1;
  eval::Verifier verifier(*model, options);
  ASSERT_TRUE(verifier.usable());
  const auto& feeds = verifier.feeds().at(0);
  auto span = [&](const std::string& name) {
    const eval::Tensor& t = feeds.at(name);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t i = 0; i < t.size(); ++i) {
      lo = std::min(lo, t.get_int64(i));
      hi = std::max(hi, t.get_int64(i));
    }
    return std::pair(lo, hi);
  };
  EXPECT_GT(span("ids").second, 10);
  EXPECT_LE(span("ids").second, 49);
  EXPECT_GE(span("ids").first, 0);
  EXPECT_EQ(span("attention"), (std::pair<int64_t, int64_t>(0, 1)));
  EXPECT_EQ(span("count").second, options.int_max);
  // The report says how each was made, and why.
  ASSERT_EQ(verifier.inputs().size(), 3u);
  EXPECT_EQ(verifier.inputs()[0].how, "integers in [0, 49]: indices into 'table' (50 rows)");
  EXPECT_EQ(verifier.inputs()[0].dims, (std::vector<int64_t>{1, 64}));
  EXPECT_NE(verifier.inputs()[1].how.find("a mask: read as 1 - m"), std::string::npos)
      << verifier.inputs()[1].how;
  EXPECT_EQ(verifier.inputs()[2].how, "integers in [0, 3]: no use says more");
  EXPECT_EQ(verifier.check(*model).inputs.size(), 3u);
}

TEST(Verifier, GivenRangesOverrideWhatTheRoleGives) {
  // ids would span the 50-row table and audio [-1, 1]; the ranges say [10, 12] and
  // [-0.5, 0.5). A range on a name that is no input, or LOW > HIGH, is refused.
  const std::string table = halves(100);
  auto model = parse_text(absl::StrCat(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[1, 256] ids, float[1, 4096] audio) => (float[1, 256, 2] e, float[1, 4096] a)
      <float[50, 2] table = {)",
                                       table, R"(}> {
      e = Gather (table, ids)
      a = Identity (audio)
    }
  )"));
  ASSERT_TRUE(model);
  eval::VerifyOptions options;
  options.trials = 1;
  options.ranges["ids"] = {9.5, 12.0};
  options.ranges["audio"] = {-0.5, 0.5};
  eval::Verifier verifier(*model, options);
  ASSERT_TRUE(verifier.usable());
  const auto& feeds = verifier.feeds().at(0);
  std::set<int64_t> ids;
  for (int64_t i = 0; i < feeds.at("ids").size(); ++i) ids.insert(feeds.at("ids").get_int64(i));
  EXPECT_EQ(ids, (std::set<int64_t>{10, 11, 12}));
  double lo = 1, hi = -1;
  for (int64_t i = 0; i < feeds.at("audio").size(); ++i) {
    lo = std::min(lo, feeds.at("audio").get_double(i));
    hi = std::max(hi, feeds.at("audio").get_double(i));
  }
  EXPECT_GE(lo, -0.5);
  EXPECT_LT(hi, 0.5);
  EXPECT_LT(lo, -0.45);  // the whole range is used, not a corner of it
  EXPECT_GT(hi, 0.45);
  ASSERT_EQ(verifier.inputs().size(), 2u);
  EXPECT_EQ(verifier.inputs()[0].how, "integers in [10, 12] (given)");
  EXPECT_EQ(verifier.inputs()[1].how, "uniform in [-0.5, 0.5) (given)");

  options.ranges["nothing"] = {0, 1};
  eval::Verifier unknown(*model, options);
  EXPECT_FALSE(unknown.usable());
  EXPECT_NE(unknown.check(*model).message.find("a range is given for 'nothing', which is no input"),
            std::string::npos)
      << unknown.check(*model).message;
  options.ranges.erase("nothing");
  options.ranges["audio"] = {1, -1};
  EXPECT_TRUE(absl::IsInvalidArgument(eval::validate(options)));
  options.ranges["audio"] = {0, std::numeric_limits<double>::infinity()};
  EXPECT_TRUE(absl::IsInvalidArgument(eval::validate(options)));
}

TEST(Verifier, CheapRunsGetMoreInputSetsUpToMaxTrials) {
  // A run of this model costs next to nothing: with max_trials 5 the verifier makes 5 sets
  // (each a distinct draw) and as many calibration sets; a budget a few runs big stops the
  // growth early; without max_trials it makes exactly `trials`.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1, 64] x) => (float[1, 64] y) {
      y = Relu (x)
    }
  )");
  ASSERT_TRUE(model);
  eval::VerifyOptions options;
  options.trials = 1;
  options.calibration_sets = 1;
  EXPECT_EQ(eval::Verifier(*model, options).feeds().size(), 1u);
  options.max_trials = 5;
  eval::Verifier grown(*model, options);
  ASSERT_EQ(grown.feeds().size(), 5u);
  EXPECT_EQ(grown.calibration_feeds().size(), 5u);
  EXPECT_NE(grown.feeds()[0].at("x").get_double(0), grown.feeds()[4].at("x").get_double(0));
  EXPECT_EQ(grown.check(*model).status, eval::VerifyStatus::kVerified);
  options.max_work = 16 * 64 * 2;  // Relu's work on one set is 64: room for two sets in 1/16
  EXPECT_EQ(eval::Verifier(*model, options).feeds().size(), 2u);
  options.max_trials = 17;
  EXPECT_TRUE(absl::IsInvalidArgument(eval::validate(options)));
}

// Hugging Face decoders slice their rotary cache to the total length at run time and gather it
// by position_ids: random ids beyond the sequence fall outside the sliced rows ("Gather index
// out of range"). Ids of a table computed at run time count 0, 1, ... along the sequence,
// capped by the rows of the constant it is cut from, so the model runs at any length.
TEST(Verifier, PositionIdsIntoASlicedCacheCountAlongTheSequence) {
  std::string cache;
  for (int i = 0; i < 64 * 2; ++i) absl::StrAppend(&cache, i ? ", " : "", i);
  auto model = parse_text(
      absl::StrCat(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1, seq, 2] x, int64[1, seq] position_ids) => (float[1, seq, 2] y)
      <float[64, 2] cos_cached = {)",
                   cache, R"(}, int64[1] zero = {0}, int64[1] one = {1}, int64[1] two = {2}> {
      shape = Shape (x)
      len = Slice (shape, one, two)
      cos = Slice (cos_cached, zero, len, zero)
      picked = Gather (cos, position_ids)
      y = Add (x, picked)
    }
  )"));
  ASSERT_TRUE(model);
  for (int64_t seq : {int64_t{16}, int64_t{128}}) {
    eval::VerifyOptions options;
    options.trials = 1;
    options.dims["seq"] = seq;
    eval::Verifier verifier(*model, options);
    ASSERT_TRUE(verifier.usable()) << seq;
    const eval::Tensor& ids = verifier.feeds().at(0).at("position_ids");
    for (int64_t i = 0; i < ids.size(); ++i)
      EXPECT_EQ(ids.get_int64(i), std::min<int64_t>(i, 63)) << seq << " at " << i;
  }
}

// A decoder step: the cache is cut to the total length, past + seq (Hugging Face's rotary
// cache sliced by the key cache's length plus the new tokens), and the new tokens' positions are
// the last ones, arange(past, past + seq): 5 and 6 after a past of 5, not 0 and 1 (what the
// model would compute for the first two tokens of a prompt).
TEST(Verifier, PositionIdsOfADecoderStepFollowThePast) {
  std::string cache;
  for (int i = 0; i < 64 * 2; ++i) absl::StrAppend(&cache, i ? ", " : "", i);
  auto model = parse_text(
      absl::StrCat(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1, seq, 2] x, float[1, past, 2] past_key, int64[1, seq] position_ids)
        => (float[1, seq, 2] y)
      <float[64, 2] cos_cached = {)",
                   cache, R"(}, int64[1] zero = {0}, int64[1] one = {1}, int64[1] two = {2}> {
      xs = Shape (x)
      ps = Shape (past_key)
      seq_len = Slice (xs, one, two)
      past_len = Slice (ps, one, two)
      total = Add (past_len, seq_len)
      cos = Slice (cos_cached, zero, total, zero)
      picked = Gather (cos, position_ids)
      y = Add (x, picked)
    }
  )"));
  ASSERT_TRUE(model);
  eval::VerifyOptions options;
  options.dims["seq"] = 2;
  options.dims["past"] = 5;
  options.trials = 1;
  options.max_trials = 3;
  options.calibration_sets = 1;
  eval::Verifier verifier(*model, options);
  ASSERT_TRUE(verifier.usable()) << verifier.check(*model).message;
  ASSERT_EQ(verifier.feeds().size(), 3u);
  for (const auto* sets : {&verifier.feeds(), &verifier.calibration_feeds()})
    for (const auto& feeds : *sets) {
      const eval::Tensor& ids = feeds.at("position_ids");
      ASSERT_EQ(ids.size(), 2);
      EXPECT_EQ(ids.get_int64(0), 5);
      EXPECT_EQ(ids.get_int64(1), 6);
    }
  EXPECT_EQ(verifier.inputs().at(2).how,
            "positions 5..6: the last rows of a table the graph cuts to 7 rows at run time (past "
            "+ sequence)");
  // A value given for them wins.
  options.values["position_ids"] = 1;
  eval::Verifier given(*model, options);
  ASSERT_TRUE(given.usable());
  EXPECT_EQ(given.feeds().at(0).at("position_ids").get_int64(1), 1);
}

// A selector: a sample rate compared with the one the model was built for picks a branch.
// The input sets take the value tested (16000) and another (8000) in turn, so both branches
// run; without it [0, int_max] would only ever reach the else branch.
TEST(Verifier, SelectorScalarsTakeTheValuesTheGraphTests) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1, 4] x, int64 sr, int64[1] mode) => (float[1, 4] y, float[1, 4] z) {
      rate = Constant <value = int64 {16000}> ()
      is16k = Equal (sr, rate)
      y = If (is16k) <
        then_branch = t () => (float[1, 4] a) { a = Neg (x) },
        else_branch = e () => (float[1, 4] b) { b = Abs (x) }
      >
      two = Constant <value = int64[1] {2}> ()
      big = Greater (two, mode)
      z = Where (big, x, x)
    }
  )");
  ASSERT_TRUE(model);
  eval::VerifyOptions options;
  options.trials = 2;
  eval::Verifier verifier(*model, options);
  ASSERT_TRUE(verifier.usable()) << verifier.check(*model).message;
  ASSERT_EQ(verifier.feeds().size(), 2u);
  EXPECT_EQ(verifier.feeds()[0].at("sr").get_int64(0), 16000);
  EXPECT_EQ(verifier.feeds()[1].at("sr").get_int64(0), 8000);
  // 2 > mode: 2 (false), then 1 (true).
  EXPECT_EQ(verifier.feeds()[0].at("mode").get_int64(0), 2);
  EXPECT_EQ(verifier.feeds()[1].at("mode").get_int64(0), 1);
  EXPECT_NE(verifier.inputs().at(1).how.find("16000, then 8000, in turn over the input sets"),
            std::string::npos)
      << verifier.inputs().at(1).how;
}

// Exporters name tied dims by expressions: Optimum's decoders declare the attention mask
// [batch_size, past_sequence_length + 1] beside a cache [batch_size, heads, past_sequence_length,
// head_size]. The sum is taken from its terms' sizes, whichever input comes first.
TEST(Verifier, DimExpressionsAreTheSumOfTheirTerms) {
  for (bool mask_first : {true, false}) {
    auto model = parse_text(mask_first ? R"(
      <ir_version: 8, opset_import: ["" : 13]>
      g (int64[batch, total] attention_mask, float[batch, 2, past, 4] past_key)
          => (int64[batch, total] m, float[batch, 2, past, 4] k) {
        m = Identity (attention_mask)
        k = Identity (past_key)
      }
    )"
                                       : R"(
      <ir_version: 8, opset_import: ["" : 13]>
      g (float[batch, 2, past, 4] past_key, int64[batch, total] attention_mask)
          => (int64[batch, total] m, float[batch, 2, past, 4] k) {
        m = Identity (attention_mask)
        k = Identity (past_key)
      }
    )");
    ASSERT_TRUE(model);
    ir::Graph& g = model->graph();
    const size_t at = mask_first ? 0 : 1;
    onnx::TypeProto type = g.inputs()[at].info.type();
    type.mutable_tensor_type()->mutable_shape()->mutable_dim(1)->set_dim_param("past + 1");
    g.set_input_type(at, type);
    for (const char* past : {"", "past"}) {
      eval::VerifyOptions options;
      options.trials = 1;
      options.representative_dims = true;
      if (*past) options.dims[past] = 7;
      eval::Verifier verifier(*model, options);
      ASSERT_TRUE(verifier.usable()) << verifier.check(*model).message;
      const auto& feeds = verifier.feeds().at(0);
      const int64_t cache = feeds.at("past_key").dims()[2];
      EXPECT_EQ(feeds.at("attention_mask").dims()[1], cache + 1) << mask_first << past;
      if (*past) {
        EXPECT_EQ(cache, 7);
      }
    }
  }
}

// Dims the graph ties without naming the tie: a decoder's mask spans the cache and the new
// tokens (total = past + seq), which one size for each name (128) breaks. After the shape error
// the ties among the names are tried at the same sizes, and the one that runs is used.
TEST(Verifier, DimsTheGraphTiesAreFoundBySum) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[b, seq, 4] x, float[b, past, 4] past_key, float[b, total] mask)
        => (float[b, total, 4] y) {
      kv = Concat <axis = 1> (past_key, x)
      axes = Constant <value = int64[1] {2}> ()
      m = Unsqueeze (mask, axes)
      y = Mul (kv, m)
    }
  )");
  ASSERT_TRUE(model);
  eval::VerifyOptions options;
  options.trials = 1;
  options.representative_dims = true;
  eval::Verifier verifier(*model, options);
  ASSERT_TRUE(verifier.usable()) << verifier.check(*model).message;
  const auto& feeds = verifier.feeds().at(0);
  EXPECT_EQ(feeds.at("x").dims()[1], 128);
  EXPECT_EQ(feeds.at("past_key").dims()[1], 128);
  EXPECT_EQ(feeds.at("mask").dims()[1], 256);
  EXPECT_NE(verifier.check(*model).message.find("(total = seq + past)"), std::string::npos)
      << verifier.check(*model).message;
}

// A raw-audio front-end's first convolution spans 400 samples: the usual sizes (128 by role;
// 1, 16, 64, 256 otherwise) are shorter than its window. After such a failure longer inputs are
// tried (by role: 1024, then 16000 samples, one second at 16 kHz), so the model is judged.
TEST(Verifier, AudioLongerThanTheReceptiveFieldIsTried) {
  std::string kernel;
  for (int i = 0; i < 400; ++i) absl::StrAppend(&kernel, i ? ", " : "", "0.01");
  auto model = parse_text(absl::StrCat(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[batch, samples] input_values) => (float[batch, 1, frames] y)
      <float[1, 1, 400] w = {)",
                                       kernel, R"(}, int64[1] one = {1}> {
      x = Unsqueeze (input_values, one)
      y = Conv <strides = [320]> (x, w)
    }
  )"));
  ASSERT_TRUE(model);
  for (bool representative : {true, false}) {
    eval::VerifyOptions options;
    options.trials = 1;
    options.representative_dims = representative;
    eval::Verifier verifier(*model, options);
    ASSERT_TRUE(verifier.usable()) << representative;
    const eval::Tensor& audio = verifier.feeds().at(0).at("input_values");
    EXPECT_GE(audio.dims().back(), 400) << representative;
    if (representative) {
      EXPECT_EQ(audio.dims().back(), 1024);
    }
  }
}

// A front-end that drops its last frame outputs nothing on 128 samples (one frame of 100):
// empty outputs measure nothing, so longer inputs are tried as for a window that does not fit.
TEST(Verifier, EmptyOutputsAskForLongerInputs) {
  std::string kernel;
  for (int i = 0; i < 100; ++i) absl::StrAppend(&kernel, i ? ", " : "", "0.01");
  auto model = parse_text(absl::StrCat(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[batch, samples] waveform) => (float[batch, 1, frames] y)
      <float[1, 1, 100] w = {)",
                                       kernel, R"(}, int64[1] one = {1}, int64[1] zero = {0},
       int64[1] last = {-1}, int64[1] axis = {2}> {
      x = Unsqueeze (waveform, one)
      f = Conv <strides = [100]> (x, w)
      y = Slice (f, zero, last, axis)
    }
  )"));
  ASSERT_TRUE(model);
  eval::VerifyOptions options;
  options.trials = 1;
  options.representative_dims = true;
  eval::Verifier verifier(*model, options);
  ASSERT_TRUE(verifier.usable());
  EXPECT_EQ(verifier.feeds().at(0).at("waveform").dims().back(), 1024);
}

TEST(Verifier, RotaryPositionIdsSpanTheCaches) {
  // The standard op reads ids as input 3 (caches of 50 rows), com.microsoft's as input 1 (40).
  std::string cache50, cache40;
  for (int i = 0; i < 100; ++i) absl::StrAppend(&cache50, i ? ", " : "", "0.5");
  for (int i = 0; i < 80; ++i) absl::StrAppend(&cache40, i ? ", " : "", "0.5");
  auto model = parse_text(absl::StrCat(R"(
    <ir_version: 10, opset_import: ["" : 23, "com.microsoft" : 1]>
    g (float[1, 2, 32, 4] x, int64[1, 32] ids, int64[1, 32] ms_ids) => (float[1, 2, 32, 4] y,
                                                                         float[1, 2, 32, 4] z)
      <float[50, 2] c50 = {)",
                                       cache50, R"(}, float[40, 2] c40 = {)", cache40, R"(}> {
      y = RotaryEmbedding (x, c50, c50, ids)
      z = com.microsoft.RotaryEmbedding (x, ms_ids, c40, c40)
    }
  )"));
  ASSERT_TRUE(model);
  eval::VerifyOptions options;
  options.trials = 1;
  eval::Verifier verifier(*model, options);
  ASSERT_TRUE(verifier.usable());
  const auto& feeds = verifier.feeds().at(0);
  for (const auto& [name, rows] : {std::pair<std::string, int64_t>("ids", 50), {"ms_ids", 40}}) {
    const eval::Tensor& t = feeds.at(name);
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t i = 0; i < t.size(); ++i) {
      lo = std::min(lo, t.get_int64(i));
      hi = std::max(hi, t.get_int64(i));
    }
    EXPECT_GE(lo, 0) << name;
    EXPECT_GT(hi, 10) << name;
    EXPECT_LT(hi, rows) << name;
  }
}

TEST(Verifier, RepresentativeDimsSizeImagesAndSequencesAndShrinkToTheBudget) {
  // A 3x3 convolution to 16 channels: 21.7M multiply-adds at 224x224, 1.35M at 56x56.
  std::string weights;
  for (int i = 0; i < 16 * 3 * 3 * 3; ++i) absl::StrAppend(&weights, i ? ", " : "", "0.01");
  auto model = parse_text(absl::StrCat(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N, 3, H, W] image, float[N, T] audio) => (float[N, 16, H, W] y, float[N, T] z)
      <float[16, 3, 3, 3] k = {)",
                                       weights, R"(}> {
      y = Conv <pads = [1, 1, 1, 1]> (image, k)
      z = Neg (audio)
    }
  )"));
  ASSERT_TRUE(model);
  eval::VerifyOptions options;
  options.representative_dims = true;
  options.trials = 1;
  eval::Verifier verifier(*model, options);
  ASSERT_TRUE(verifier.usable());
  EXPECT_EQ(verifier.dims_used(), "image=[1,3,224,224], audio=[1,128]");
  EXPECT_EQ(verifier.feeds().at(0).at("image").dims(), (std::vector<int64_t>{1, 3, 224, 224}));
  // A budget too small for the full sizes (each try may use a third of what is left): a
  // quarter of them.
  options.max_work = 40'000'000;
  eval::Verifier small(*model, options);
  ASSERT_TRUE(small.usable());
  EXPECT_EQ(small.dims_used(), "image=[1,3,56,56], audio=[1,32]");
  eval::VerifyResult r = small.check(*model);
  EXPECT_NE(r.message.find("inputs image=[1,3,56,56], audio=[1,32]"), std::string::npos)
      << r.message;
}

}  // namespace
}  // namespace graft::testing
