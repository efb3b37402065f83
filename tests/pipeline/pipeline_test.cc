// The fixed-point driver: levels, explicit lists, options, rollback of broken passes, stats.
#include "core/pipeline/pipeline.h"
#include "core/ir/shapes.h"
#include "core/passes/queries.h"
#include "core/passes/registry.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

const char* kModel = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[2] x) => (float[2] y) {
    c = Constant <value = float[2] {1.0, 2.0}> ()
    a = Add (x, c)
    y = Relu (a)
  }
)";

// A pass that corrupts the graph: it feeds the Relu's output back into the Add before it (a
// cycle; the IR cannot be made to lose a used value's producer any more).
class BreakingPass final : public Pass {
 public:
  std::string_view name() const override { return "breaking"; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    ir::Graph& g = model.graph();
    ir::Node* relu = g.outputs()[0].value->producer();
    relu->input(0)->producer()->set_input(0, relu->output(0));
    PassResult r;
    r.add();
    return r;
  }
};

class ThrowingPass final : public Pass {
 public:
  std::string_view name() const override { return "throwing"; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    ir::Node* first = model.graph().nodes().front();
    first->set_attr(int_attr("half_done", 1));  // half-done work is undone
    throw std::runtime_error("boom");
  }
};

class FailingPass final : public Pass {
 public:
  std::string_view name() const override { return "failing"; }
  absl::StatusOr<PassResult> run(ir::Model&, PassContext&) override {
    return absl::InternalError("cannot");
  }
};

// Renames the graph output: structurally valid, but changes the model's interface.
class RenamingPass final : public Pass {
 public:
  std::string_view name() const override { return "renaming"; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    ir::Graph& g = model.graph();
    ir::Node* relu = g.outputs()[0].value->producer();
    ir::Node* copy = g.add_node("Relu", {relu->input(0)}, {"renamed"});
    g.set_output(0, copy->output(0));
    g.remove_node(relu);
    PassResult r;
    r.add();
    return r;
  }
};

// Reads an option it never declared: a bug in the pass, caught when it runs.
class UndeclaredOptionPass final : public Pass {
 public:
  std::string_view name() const override { return "undeclared_option"; }
  absl::StatusOr<PassResult> run(ir::Model&, PassContext& ctx) override {
    PassResult r;
    if (ctx.int_option("depth") > 0) r.add();
    return r;
  }
};

// Counts its runs and changes the model only in the first `changes` of them.
class CountingPass final : public Pass {
 public:
  CountingPass(int* runs, int changes) : runs_(runs), changes_(changes) {}
  std::string_view name() const override { return "counting"; }
  absl::StatusOr<PassResult> run(ir::Model&, PassContext&) override {
    PassResult r;
    if ((*runs_)++ < changes_) r.add();
    return r;
  }

 private:
  int* runs_;
  int changes_;
};

// Edits the model, if only a node's name, but reports no change.
class LyingPass final : public Pass {
 public:
  std::string_view name() const override { return "liar"; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    model.graph().nodes().back()->mutable_proto().set_name("renamed");
    return PassResult{};
  }
};

std::vector<PassInstance> instances(std::unique_ptr<Pass> pass) {
  std::vector<PassInstance> v;
  std::string name(pass->name());
  v.push_back({name, std::move(pass), {}});
  return v;
}

TEST(Pipeline, LevelsAreNestedAndO0IsEmpty) {
  EXPECT_TRUE(passes_for_level(0).empty());
  auto o1 = passes_for_level(1), o2 = passes_for_level(2), o3 = passes_for_level(3);
  EXPECT_FALSE(o1.empty());
  EXPECT_GT(o2.size(), o1.size());
  for (const auto& p : o1) EXPECT_NE(std::find(o2.begin(), o2.end(), p), o2.end()) << p;
  for (const auto& p : o2) EXPECT_NE(std::find(o3.begin(), o3.end(), p), o3.end()) << p;
}

TEST(Pipeline, O0ChangesNothing) {
  auto model = parse_text(kModel);
  std::string before = model->to_proto().SerializeAsString();
  PipelineConfig config = test_pipeline_config();
  config.level = 0;
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->passes.empty());
  EXPECT_EQ(model->to_proto().SerializeAsString(), before);
}

TEST(Pipeline, ExplicitListRunsOnlyThose) {
  auto model = parse_text(kModel);
  PipelineConfig config = test_pipeline_config();
  config.passes = {"extract_constants"};
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->passes.size(), 1u);
  EXPECT_EQ(report->passes[0].name, "extract_constants");
  EXPECT_EQ(report->passes[0].rewrites, 1);
  EXPECT_EQ(report->passes[0].nodes_before, 3u);
  EXPECT_EQ(report->passes[0].nodes_after, 2u);
  EXPECT_EQ(report->passes[0].bytes_before, 0u);
  EXPECT_EQ(report->passes[0].bytes_after, 8u);
  EXPECT_EQ(report->rounds, 2);  // round 2 changes nothing: fixed point
  EXPECT_TRUE(report->reached_fixed_point);
  EXPECT_EQ(count_ops(*model, "Constant"), 0);
}

TEST(Pipeline, UnknownPassListsValidOnes) {
  PipelineConfig config = test_pipeline_config();
  config.passes = {"extract_constants", "no_such_pass"};
  auto names = resolve_passes(config);
  ASSERT_FALSE(names.ok());
  EXPECT_EQ(names.status().code(), absl::StatusCode::kInvalidArgument);
  std::string msg(names.status().message());
  EXPECT_NE(msg.find("no_such_pass"), std::string::npos);
  EXPECT_NE(msg.find("prune"), std::string::npos);
}

TEST(Pipeline, BadConfigIsRejected) {
  PipelineConfig config = test_pipeline_config();
  config.level = 7;
  EXPECT_FALSE(resolve_passes(config).ok());
  config.level = 2;
  config.max_rounds = 0;
  EXPECT_FALSE(resolve_passes(config).ok());
  config.max_rounds = 10;
  config.pass_options["prune"]["nonsense"] = "1";
  EXPECT_FALSE(resolve_passes(config).ok());
}

// Options that size evaluator memory (fold_constants.max_bytes) are capped by what a server
// grants, from the option's schema: no server code names the pass.
TEST(Pipeline, EvaluatorMemoryOptionsAreCappedByTheGrant) {
  const uint64_t fold_default = 16ull << 20;
  PipelineConfig config = test_pipeline_config();
  EXPECT_TRUE(check_evaluator_memory_options(config, 0, "grant").ok());
  config.pass_options["fold_constants"]["max_bytes"] = std::to_string(fold_default);
  EXPECT_TRUE(check_evaluator_memory_options(config, 0, "grant").ok());  // its default
  config.pass_options["fold_constants"]["max_bytes"] = "32MiB";
  EXPECT_TRUE(check_evaluator_memory_options(config, 64ull << 20, "grant").ok());
  auto st = check_evaluator_memory_options(config, 1ull << 20, "the_grant");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("fold_constants.max_bytes 33554432"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("limit of 16777216"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("the_grant"), absl::string_view::npos) << st;
  // Other options, unknown passes and values that do not parse are resolve_pipeline's to judge.
  config.pass_options["fold_constants"]["max_bytes"] = "abc";
  config.pass_options["fold_constants"]["max_growth"] = "1000000000";
  config.pass_options["no_such_pass"]["max_bytes"] = "1GiB";
  EXPECT_TRUE(check_evaluator_memory_options(config, 0, "grant").ok());
  // Every option that claims evaluator memory is a byte count.
  for (const PassInfo& info : all_passes())
    for (const OptionSpec& spec : info.options)
      if (spec.evaluator_memory) {
        EXPECT_EQ(spec.type, OptionType::kBytes) << info.name;
      }
}

// Option values are checked against each pass's schema when the pipeline is configured, so a
// bad one fails the whole run before any pass starts and the model is untouched.
TEST(Pipeline, BadOptionValueIsRejectedBeforeAnyPassRuns) {
  struct Case {
    std::vector<std::string> passes;  // empty: O2
    std::string pass, option, value, message;
  };
  const std::vector<Case> cases = {
      {{},
       "fold_constants",
       "max_bytes",
       "abc",
       "option fold_constants.max_bytes must be a byte count in [0, 2147483648]"},
      {{}, "fold_constants", "max_bytes", "2147483649", "got '2147483649'"},
      {{}, "fold_constants", "max_growth", "-1", "option fold_constants.max_growth must be"},
      {{}, "fold_constants", "max_bytez", "1", "pass 'fold_constants' has no option 'max_bytez'"},
      {{}, "prune", "depth", "1", "pass 'prune' has no option 'depth'; it takes no options"},
      {{}, "no_such_pass", "x", "1", "options given for unknown pass 'no_such_pass'"},
      // The pass list does not run fold_constants: its options are still checked.
      {{"extract_constants"}, "fold_constants", "max_bytes", "-5", "must be a byte count"},
  };
  for (const Case& c : cases) {
    auto model = parse_text(kModel);
    const std::string before = model->to_proto().SerializeAsString();
    PipelineConfig config;
    config.passes = c.passes;
    config.pass_options[c.pass][c.option] = c.value;
    int polls = 0;  // polled before every pass
    config.should_continue = [&] {
      ++polls;
      return absl::OkStatus();
    };
    auto report = run_pipeline(model, config);
    ASSERT_FALSE(report.ok()) << c.value;
    EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(report.status().message().find(c.message), absl::string_view::npos)
        << report.status();
    EXPECT_EQ(polls, 0) << "a pass ran before the config was rejected";
    EXPECT_EQ(model->to_proto().SerializeAsString(), before);
    EXPECT_EQ(resolve_passes(config).status(), report.status());
  }
  // The same values, well-formed, run.
  auto model = parse_text(kModel);
  PipelineConfig config;
  config.pass_options["fold_constants"] = {{"max_bytes", "1MiB"}, {"max_growth", "0"}};
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(count_ops(*model, "Constant"), 0);
}

TEST(Pipeline, ResolvedPassesCarryParsedOptionsWithDefaults) {
  PipelineConfig config;
  config.passes = {"extract_constants", "fold_constants", "prune"};
  config.pass_options["fold_constants"]["max_growth"] = "7";
  auto specs = resolve_pipeline(config);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[1].name, "fold_constants");
  EXPECT_EQ((*specs)[1].options.integer("max_growth"), 7);
  EXPECT_EQ((*specs)[1].options.integer("max_bytes"), 16777216);
  EXPECT_TRUE((*specs)[2].options.values().empty());
}

// A pass that reads an option it does not declare is rolled back with the reason.
TEST(Pipeline, PassReadingAnUndeclaredOptionIsRolledBack) {
  auto model = parse_text(kModel);
  auto report = run_passes(model, instances(std::make_unique<UndeclaredOptionPass>()), {});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->passes[0].rollbacks, 1);
  EXPECT_NE(report->passes[0].rollback_reason.find("'depth', which it does not declare"),
            std::string::npos)
      << report->passes[0].rollback_reason;
}

void expect_rolled_back(std::unique_ptr<Pass> pass, const std::string& reason_fragment) {
  auto model = parse_text(kModel);
  std::string before = model->to_proto().SerializeAsString();
  PipelineConfig config = test_pipeline_config();
  auto report = run_passes(model, instances(std::move(pass)), config);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->passes.size(), 1u);
  EXPECT_EQ(report->passes[0].rollbacks, 1);
  EXPECT_NE(report->passes[0].rollback_reason.find(reason_fragment), std::string::npos)
      << report->passes[0].rollback_reason;
  EXPECT_EQ(report->passes[0].runs, 1);  // not retried in later rounds
  EXPECT_EQ(model->to_proto().SerializeAsString(), before);
  EXPECT_TRUE(model->verify().ok());
}

TEST(Pipeline, BrokenGraphIsRolledBack) {
  expect_rolled_back(std::make_unique<BreakingPass>(), "has a cycle");
}
TEST(Pipeline, ThrowingPassIsRolledBack) {
  expect_rolled_back(std::make_unique<ThrowingPass>(), "boom");
}
TEST(Pipeline, FailingPassIsRolledBack) {
  expect_rolled_back(std::make_unique<FailingPass>(), "cannot");
}
TEST(Pipeline, InterfaceChangeIsRolledBack) {
  expect_rolled_back(std::make_unique<RenamingPass>(), "inputs or outputs");
}

TEST(Pipeline, RollbackKeepsOtherPassesWork) {
  auto model = parse_text(kModel);
  int later_runs = 0;
  std::vector<PassInstance> passes = instances(find_pass("extract_constants")->create());
  passes.push_back({"breaking", std::make_unique<BreakingPass>(), {}});
  passes.push_back({"counting", std::make_unique<CountingPass>(&later_runs, 1), {}});
  auto report = run_passes(model, std::move(passes), test_pipeline_config());
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->passes[1].rollbacks, 1);
  // The earlier pass's work survives the rollback (it is replayed, not counted twice) and the
  // later pass still runs.
  EXPECT_EQ(count_ops(*model, "Constant"), 0);
  EXPECT_EQ(count_ops(*model, "Relu"), 1);
  EXPECT_EQ(report->passes[0].rewrites, 1);
  EXPECT_EQ(report->passes[0].runs, 2);
  EXPECT_EQ(later_runs, 2);
  EXPECT_TRUE(model->verify().ok());
}

// A wrong report is a bug in the pass, not in the model: the run fails rather than rolling back.
void expect_caught(const absl::StatusOr<PipelineReport>& report) {
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(report.status().message().find("pass 'liar' reported no change but edited the model"),
            std::string::npos)
      << report.status();
}

TEST(Pipeline, CheckUnchangedFailsAPassThatEditsButReportsNoChange) {
  {
    auto model = parse_text(kModel);
    expect_caught(
        run_passes(model, instances(std::make_unique<LyingPass>()), test_pipeline_config()));
  }
  {
    // After a pass that changed the model, compared with the model as that pass left it.
    auto model = parse_text(kModel);
    std::vector<PassInstance> passes = instances(find_pass("extract_constants")->create());
    passes.push_back({"liar", std::make_unique<LyingPass>(), {}});
    expect_caught(run_passes(model, std::move(passes), test_pipeline_config()));
  }
  {
    // The verifying driver too.
    auto model = parse_text(kModel);
    PipelineConfig config = test_pipeline_config();
    config.verify = true;
    expect_caught(
        run_specs(model, {{"liar", [] { return std::make_unique<LyingPass>(); }, {}}}, config));
  }
  // Off by default (production does not pay for it): the same run goes through.
  auto model = parse_text(kModel);
  EXPECT_FALSE(PipelineConfig{}.check_unchanged);
  EXPECT_TRUE(run_passes(model, instances(std::make_unique<LyingPass>()), PipelineConfig{}).ok());
}

TEST(Pipeline, FixedPointIsBoundedByMaxRounds) {
  auto model = parse_text(kModel);
  int runs = 0;
  PipelineConfig config = test_pipeline_config();
  config.max_rounds = 4;
  auto report = run_passes(model, instances(std::make_unique<CountingPass>(&runs, 100)), config);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(runs, 4);
  EXPECT_EQ(report->rounds, 4);
  EXPECT_FALSE(report->reached_fixed_point);
}

TEST(Pipeline, StopsWhenNothingChanges) {
  auto model = parse_text(kModel);
  int runs = 0;
  auto report = run_passes(model, instances(std::make_unique<CountingPass>(&runs, 2)),
                           test_pipeline_config());
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(runs, 3);
  EXPECT_TRUE(report->reached_fixed_point);
  EXPECT_EQ(report->passes[0].changed_runs, 2);
}

TEST(Pipeline, CancellationStopsBetweenPasses) {
  auto model = parse_text(kModel);
  int polls = 0;
  PipelineConfig config = test_pipeline_config();
  config.should_continue = [&] {
    return ++polls > 1 ? absl::CancelledError("client went away") : absl::OkStatus();
  };
  auto report = run_pipeline(model, config);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kCancelled);
}

TEST(Pipeline, OnnxCheckerRollsBackInvalidModels) {
  // A Relu given an attribute it does not have: structurally fine, rejected by the checker.
  class BadAttrPass final : public Pass {
   public:
    std::string_view name() const override { return "bad_attr"; }
    absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
      onnx::AttributeProto a;
      a.set_name("alpha");
      a.set_type(onnx::AttributeProto::FLOAT);
      a.set_f(1);
      for (ir::Node* n : model.graph().nodes())
        if (n->op_type() == "Relu") n->set_attr(a);
      PassResult r;
      r.add();
      return r;
    }
  };
  auto model = parse_text(kModel);
  PipelineConfig config = test_pipeline_config();
  config.onnx_checker = true;
  auto report = run_passes(model, instances(std::make_unique<BadAttrPass>()), config);
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->passes[0].rollbacks, 1);
  EXPECT_EQ(report->checker_note, "");
  EXPECT_EQ(model->graph().nodes().back()->attributes().size(), 0);

  // Without the checker the same pass is kept: only the checker catches it.
  auto unchecked = parse_text(kModel);
  report =
      run_passes(unchecked, instances(std::make_unique<BadAttrPass>()), test_pipeline_config());
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->passes[0].rollbacks, 0);
}

TEST(Pipeline, DumpWritesTextAfterChangingPasses) {
  auto model = parse_text(kModel);
  PipelineConfig config = test_pipeline_config();
  config.passes = {"extract_constants"};
  config.dump_dir = (std::filesystem::temp_directory_path() / "graft_dump_test").string();
  std::filesystem::remove_all(config.dump_dir);
  ASSERT_TRUE(run_pipeline(model, config).ok());
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(config.dump_dir))
    files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  std::string text = read_file(files[0]);
  EXPECT_NE(text.find("Relu"), std::string::npos);
  EXPECT_EQ(text.find("Constant"), std::string::npos);
  std::filesystem::remove_all(config.dump_dir);
}

}  // namespace
}  // namespace graft::testing

namespace graft::testing {
namespace {

// Many small constants, each doubled by Concat over and over: every fold stays within
// fold_constants' per-fold growth, yet together they would turn 2.5 MiB into 640 MiB. The
// pipeline bounds the model's weights at 4x the input's plus 64 MiB.
TEST(Pipeline, FoldingCannotGrowTheWeightsBeyondTheModelLimit) {
  onnx::ModelProto proto;
  proto.set_ir_version(8);
  proto.add_opset_import()->set_version(13);
  auto* g = proto.mutable_graph();
  g->set_name("g");
  constexpr int kChains = 40, kSteps = 4;
  const int64_t elements = 16384;  // 64 KiB of float each
  for (int c = 0; c < kChains; ++c) {
    auto* t = g->add_initializer();
    t->set_name("w" + std::to_string(c));
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(elements);
    t->mutable_raw_data()->assign(elements * 4, static_cast<char>(c));
    std::string prev = t->name();
    for (int s = 0; s < kSteps; ++s) {
      auto* n = g->add_node();
      n->set_op_type("Concat");
      for (int k = 0; k < 4; ++k) n->add_input(prev);
      prev = "c" + std::to_string(c) + "_" + std::to_string(s);
      n->add_output(prev);
      auto* axis = n->add_attribute();
      axis->set_name("axis");
      axis->set_type(onnx::AttributeProto::INT);
      axis->set_i(0);
    }
    auto* out = g->add_output();
    out->set_name(prev);
    out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  }
  auto model = ir::Model::from_proto(std::move(proto));
  ASSERT_TRUE(model.ok()) << model.status();
  const uint64_t before = (*model)->initializer_bytes();
  EXPECT_EQ(before, uint64_t{kChains} * elements * 4);
  PipelineConfig config = test_pipeline_config();
  auto report = run_pipeline(*model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  const uint64_t after = (*model)->initializer_bytes();
  EXPECT_LE(after, 4 * before + (uint64_t{64} << 20));
  EXPECT_GT(after, 2 * before);                // folding still happened up to the limit
  EXPECT_GT(count_ops(**model, "Concat"), 0);  // and stopped there
}

}  // namespace
}  // namespace graft::testing

namespace graft::testing {
namespace {

// A declared shape tensor of a trillion entries: libonnx's inference would give ConstantOfShape
// a trillion dims. Neither the checker nor shape facts run it; the pipeline still optimizes.
TEST(Pipeline, HugeShapeTensorsDoNotReachLibonnxInference) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[1000000000000] s, float[2] x) => (float[2] y) {
      c = ConstantOfShape (s)
      i = Identity (x)
      y = Neg (i)
    }
  )");
  ASSERT_TRUE(model);
  std::string skipped;
  EXPECT_TRUE(onnx_check(*model, true, &skipped).ok());
  EXPECT_NE(skipped.find("longer than 1024"), std::string::npos) << skipped;
  PipelineConfig config = test_pipeline_config();
  config.onnx_checker = true;
  config.shape_inference = true;
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(model->graph().num_nodes(), 1u);  // Neg; the Identity and the unread c went
  EXPECT_EQ(model->graph().find_local("c"), nullptr);
}

// What the facts know goes back into the value_info entries the input had, and only there.
std::unique_ptr<ir::Model> with_shapeless_info(const char* text, std::vector<std::string> names) {
  auto parsed = parse_text(text);
  onnx::ModelProto proto = parsed->to_proto();
  for (const std::string& name : names) {
    auto* vi = proto.mutable_graph()->add_value_info();
    vi->set_name(name);
    vi->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  }
  auto model = ir::Model::from_proto(std::move(proto));
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

const onnx::ValueInfoProto* find_info(const onnx::ModelProto& m, const std::string& name) {
  for (const auto& vi : m.graph().value_info())
    if (vi.name() == name) return &vi;
  return nullptr;
}

TEST(Pipeline, ValueInfoTheInputHadIsRefinedFromFacts) {
  auto model = with_shapeless_info(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2, 3] x) => (float[2, 3] y) {
      a = Relu (x)
      b = Identity (a)
      y = Neg (b)
    }
  )",
                                   {"a"});
  auto report = run_pipeline(model, test_pipeline_config());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->value_info_refined, 1);
  const onnx::ModelProto out = model->to_proto();
  const onnx::ValueInfoProto* a = find_info(out, "a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(ir::TensorFact::from_type(a->type()).to_string(), "FLOAT[2,3]");
  EXPECT_EQ(out.graph().value_info_size(), 1);  // no entry is created for anything else
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Pipeline, ValueInfoOfAModelNoPassChangedIsLeftAsItCame) {
  auto model = with_shapeless_info(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2, 3] x) => (float[2, 3] y) {
      a = Relu (x)
      y = Neg (a)
    }
  )",
                                   {"a"});
  const std::string before = model->to_proto().SerializeAsString();
  auto report = run_pipeline(model, test_pipeline_config());
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->value_info_refined, 0);
  EXPECT_EQ(model->to_proto().SerializeAsString(), before);
}

// A recursive model-local function (forbidden by ONNX, possible in a hostile model): libonnx's
// inference and checker would expand it without bound and exhaust the stack. TopK with a
// non-constant k leaves Graft's rules incomplete, which is when facts ask libonnx.
TEST(Pipeline, RecursiveFunctionsNeverReachLibonnx) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2,3] x, int64[1] k) => (float[2,?] t, float[2,3] r) {
      t, i = TopK (x, k)
      s = Shape (t)
      r = local.R (x)
    }
    <domain: "local", opset_import: ["" : 13, "local" : 1]>
    R (a) => (b) {
      b = local.R (a)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_TRUE(ir::has_deep_function_calls(*model));
  PipelineConfig config = test_pipeline_config();
  config.level = 2;
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
}

}  // namespace
}  // namespace graft::testing
