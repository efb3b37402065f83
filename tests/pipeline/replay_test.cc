// Verification's bisection replays a prefix of the kept pass runs on a clone of the original.
// Each replayed run must see what it saw in the run being bisected (the weight limit taken from
// the input, an evaluator budget with the same limits, work already spent and deadline), else
// the replay builds another model than the run did and the wrong pass is rolled back.
#include <ostream>

#include "core/eval/budget.h"
#include "core/eval/verify.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

const char* kModel = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[N, 3] x) => (float[N, 3] y) <float[3] c = {1.0, 2.0, 3.0}> {
    s = Sub (x, c)
    y = Mul (s, c)
  }
)";

// What one pass run was held to, as the pass sees it.
struct SeenLimits {
  uint64_t max_weight_bytes = 0;
  bool has_budget = false;
  uint64_t eval_max_bytes = 0, eval_max_work = 0, eval_work_spent = 0;
  bool deadline_polled = false;  // a poll of the evaluator budget reached should_continue
  bool operator==(const SeenLimits&) const = default;
};

std::ostream& operator<<(std::ostream& os, const SeenLimits& s) {
  return os << "{max_weight_bytes " << s.max_weight_bytes << ", budget " << s.has_budget
            << ", eval bytes " << s.eval_max_bytes << ", work " << s.eval_work_spent << "/"
            << s.eval_max_work << ", deadline polled " << s.deadline_polled << "}";
}

SeenLimits observe(const PassContext& ctx, const int& deadline_polls) {
  SeenLimits seen;
  seen.max_weight_bytes = ctx.max_weight_bytes;
  if (eval::Budget* budget = eval::current_budget()) {
    seen.has_budget = true;
    seen.eval_max_bytes = budget->max_bytes();
    seen.eval_max_work = budget->max_work();
    seen.eval_work_spent = budget->work();
    const int before = deadline_polls;
    budget->poll();  // the tests' deadlines never expire, so this does not throw
    seen.deadline_polled = deadline_polls > before;
  }
  return seen;
}

// Marks the Sub node (once: a marked node is left alone) and records the limits it ran under.
// With `unlimited_changes_outputs` it stands for a fold that only the weight limit holds back:
// run without a limit (max_weight_bytes == 0) it turns the Sub into an Add instead, which
// changes the outputs.
class MarkSub final : public Pass {
 public:
  MarkSub(std::vector<SeenLimits>* seen, const int* deadline_polls, bool unlimited_changes_outputs)
      : seen_(seen), deadline_polls_(deadline_polls), limit_matters_(unlimited_changes_outputs) {}
  std::string_view name() const override { return "mark_sub"; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override {
    PassResult result;
    for (ir::Node* n : model.graph().nodes()) {
      if (!n->is("Sub") || n->name() == "marked") continue;
      seen_->push_back(observe(ctx, *deadline_polls_));
      if (limit_matters_ && ctx.max_weight_bytes == 0)
        n->mutable_proto().set_op_type("Add");
      else
        n->mutable_proto().set_name("marked");
      result.add();
    }
    return result;
  }

 private:
  std::vector<SeenLimits>* seen_;
  const int* deadline_polls_;
  bool limit_matters_;
};

// Adds an unused 4 KiB initializer (once), so that the passes after it see a model with more
// weights than the input: their weight limit must still be the input's.
class GrowWeights final : public Pass {
 public:
  std::string_view name() const override { return "grow_weights"; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    PassResult result;
    for (ir::Value* v : model.graph().initializers())
      if (v->name() == "grown") return result;
    onnx::TensorProto t;
    t.set_data_type(onnx::TensorProto::FLOAT);
    t.add_dims(1024);
    t.mutable_raw_data()->assign(4096, '\0');
    model.graph().add_initializer("grown", std::move(t));
    result.add();
    return result;
  }
};

// Spends evaluator work, as a fold does, and changes nothing: a run the replay does not repeat.
// With `fail`, it then fails, so the pipeline rolls it back.
class SpendWork final : public Pass {
 public:
  explicit SpendWork(uint64_t units, bool fail = false) : units_(units), fail_(fail) {}
  std::string_view name() const override { return "spend_work"; }
  absl::StatusOr<PassResult> run(ir::Model&, PassContext&) override {
    eval::spend_work(units_);
    if (fail_) return absl::InternalError("spent work, then failed");
    return PassResult{};
  }

 private:
  uint64_t units_;
  bool fail_;
};

// Renames every Mul to Div: a pass that really changes the outputs.
class MulToDiv final : public Pass {
 public:
  std::string_view name() const override { return "mul_to_div"; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    PassResult result;
    for (ir::Node* n : model.graph().nodes())
      if (n->is("Mul")) {
        n->mutable_proto().set_op_type("Div");
        result.add();
      }
    return result;
  }
};

template <typename P, typename... Args>
PassSpec spec(const std::string& name, Args... args) {
  return {name, [=] { return std::make_unique<P>(args...); }, {}};
}

void expect_all_equal(const std::vector<SeenLimits>& seen) {
  for (size_t i = 1; i < seen.size(); ++i)
    EXPECT_EQ(seen[i], seen[0]) << "run " << i << " of the marking pass";
}

TEST(Replay, SeesTheInputsWeightLimitSoTheRightPassIsRolledBack) {
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  auto original = model->clone();
  PipelineConfig config = test_pipeline_config();
  config.verify = true;
  std::vector<SeenLimits> seen;
  const int no_polls = 0;
  std::vector<PassSpec> specs = {spec<GrowWeights>("grow_weights"),
                                 spec<MarkSub>("mark_sub", &seen, &no_polls, true),
                                 spec<MulToDiv>("mul_to_div")};
  auto report = run_specs(model, specs, config);
  ASSERT_TRUE(report.ok()) << report.status();
  // Only the pass that changes the outputs in the run is blamed: mark_sub never did.
  EXPECT_EQ(report->verification.rolled_back, std::vector<std::string>{"mul_to_div"});
  EXPECT_EQ(report->verification.result.status, eval::VerifyStatus::kVerified)
      << report->verification.result.message;
  EXPECT_EQ(count_ops(*model, "Sub"), 1);
  EXPECT_EQ(count_ops(*model, "Mul"), 1);
  EXPECT_EQ(same_outputs(*original, *model), "");
  // The run, the replay that bisection needs to clear it, and the run without mul_to_div.
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_GT(seen[0].max_weight_bytes, original->initializer_bytes());
  expect_all_equal(seen);
}

TEST(Replay, RunsUnderTheRunsEvaluatorBudgetAndDeadline) {
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  PipelineConfig config = test_pipeline_config();
  config.verify = true;
  int deadline_polls = 0;
  config.should_continue = [&] {
    ++deadline_polls;
    return absl::OkStatus();
  };
  std::vector<SeenLimits> seen;
  // spend_work's runs change nothing, so the replay does not repeat them; mark_sub must still
  // start with the work they spent before it in the run.
  std::vector<PassSpec> specs = {spec<SpendWork>("spend_work", uint64_t{1000}),
                                 spec<MarkSub>("mark_sub", &seen, &deadline_polls, false),
                                 spec<MulToDiv>("mul_to_div")};
  auto report = run_specs(model, specs, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verification.rolled_back, std::vector<std::string>{"mul_to_div"});
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_TRUE(seen[0].has_budget);
  EXPECT_GT(seen[0].eval_max_bytes, 0u);
  EXPECT_GT(seen[0].eval_max_work, 0u);
  EXPECT_EQ(seen[0].eval_work_spent, 1000u);
  EXPECT_TRUE(seen[0].deadline_polled);
  expect_all_equal(seen);
}

TEST(Replay, AfterARollbackStartsWhereTheDriversReplayStarted) {
  // A rollback restores the round's snapshot and replays mark_sub on it, after the failed pass
  // spent more work: the model kept comes from that replay, so bisection must reproduce it.
  auto model = parse_text(kModel);
  ASSERT_TRUE(model);
  PipelineConfig config = test_pipeline_config();
  config.verify = true;
  const int no_polls = 0;
  std::vector<SeenLimits> seen;
  std::vector<PassSpec> specs = {spec<SpendWork>("spend_work", uint64_t{1000}),
                                 spec<MarkSub>("mark_sub", &seen, &no_polls, false),
                                 spec<SpendWork>("spend_and_fail", uint64_t{500}, true),
                                 spec<MulToDiv>("mul_to_div")};
  auto report = run_specs(model, specs, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verification.rolled_back, std::vector<std::string>{"mul_to_div"});
  EXPECT_EQ(report->passes[2].rollbacks, 1);
  // The first run, its replay after the rollback, the bisection's replay, then the same two
  // again without mul_to_div.
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(seen[0].eval_work_spent, 1000u);
  EXPECT_EQ(seen[1].eval_work_spent, 1500u);
  EXPECT_EQ(seen[2], seen[1]);
  EXPECT_EQ(seen[3], seen[0]);
  EXPECT_EQ(seen[4], seen[1]);
}

}  // namespace
}  // namespace graft::testing
