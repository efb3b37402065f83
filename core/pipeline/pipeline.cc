#include "core/pipeline/pipeline.h"

#include "core/eval/budget.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <set>
#include <sstream>

#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/checker.h>
#include <onnx/defs/printer.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include "core/ir/onnx_guard.h"
#include "core/passes/registry.h"
#include "core/passes/rules.h"

namespace graft {

namespace {
// What the passes' kernel evaluations (constant folding) may use in one run of the passes.
constexpr uint64_t kPassEvalMaxBytes = 256ull << 20;
constexpr uint64_t kPassEvalMaxWork = 10'000'000'000;
// The most the passes may grow a model's weights: this factor of the input's, plus a fixed
// allowance so that small models can still fold their shape arithmetic.
constexpr uint64_t kMaxWeightGrowth = 4;
constexpr uint64_t kWeightGrowthAllowance = 64ull << 20;
}  // namespace

namespace {

using Clock = std::chrono::steady_clock;

// Names and declared types of the main graph's inputs and outputs: passes must not change them.
std::string interface_of(const ir::Model& model) {
  std::string sig;
  for (const auto& in : model.graph().inputs())
    absl::StrAppend(&sig, "in:", in.value->name(), ":", in.info.type().SerializeAsString(), ";");
  for (const auto& out : model.graph().outputs())
    absl::StrAppend(&sig, "out:", out.value->name(), ":", out.info.type().SerializeAsString(), ";");
  return sig;
}

std::string safe_file_name(const std::string& s) {
  std::string out = s;
  for (char& c : out)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') c = '_';
  return out;
}

void dump_graph(const ir::Model& model, const std::string& dir, int step, int round,
                const std::string& pass) {
  std::filesystem::create_directories(dir);
  std::ostringstream name;
  name << std::setw(3) << std::setfill('0') << step << "_r" << round << "_" << safe_file_name(pass)
       << ".onnxtxt";
  std::ofstream out(std::filesystem::path(dir) / name.str());
  onnx::ModelProto proto = model.to_proto();
  out << proto.graph() << "\n";
  for (const auto& fn : proto.functions()) out << fn << "\n";
}

// The rules of pass `pass` that config.explain names ("*" for the whole pass).
std::vector<std::string> explained_rules(const PipelineConfig& config, const std::string& pass) {
  std::vector<std::string> rules;
  for (const std::string& e : config.explain) {
    const size_t slash = e.find('/');
    if (e.substr(0, slash) != pass) continue;
    rules.push_back(slash == std::string::npos ? "*" : e.substr(slash + 1));
  }
  return rules;
}

absl::Status check_rounds(const PipelineConfig& config) {
  if (config.max_rounds < 1 || config.max_rounds > 1000)
    return absl::InvalidArgumentError(
        absl::StrCat("max rounds must be between 1 and 1000, got ", config.max_rounds));
  return absl::OkStatus();
}

}  // namespace

absl::Status onnx_check(const ir::Model& model, bool shape_inference, std::string* skipped) {
  const auto& rest = model.rest();
  if (rest.ir_version() > onnx::Version::IR_VERSION) {
    if (skipped)
      *skipped = absl::StrCat("IR version ", rest.ir_version(), " is newer than libonnx knows");
    return absl::OkStatus();
  }
  const auto& schemas = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  for (const auto& op : rest.opset_import()) {
    std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
    bool local_functions = false;  // domains the model defines itself need no schema
    for (const auto& fn : model.functions()) local_functions |= fn.rest.domain() == op.domain();
    if (local_functions) continue;
    auto it = schemas.find(domain);
    if (it == schemas.end() || op.version() > it->second.second) {
      if (skipped)
        *skipped = absl::StrCat("opset ", op.domain().empty() ? "ai.onnx" : op.domain(), " ",
                                op.version(), " is newer than libonnx knows");
      return absl::OkStatus();
    }
  }
  if (ir::has_huge_shape_tensor(model)) {
    if (skipped)
      *skipped =
          "a 1-D integer tensor longer than 1024 would make libonnx's shape inference "
          "allocate that many dims";
    return absl::OkStatus();
  }
  if (ir::has_deep_function_calls(model)) {
    if (skipped)
      *skipped =
          "model-local functions call each other in a cycle or in chains deeper than 64 "
          "calls, which libonnx would expand without bound";
    return absl::OkStatus();
  }
  onnx::ModelProto proto = model.to_proto();
  try {
    onnx::checker::check_model(proto);
    if (shape_inference) {
      onnx::ShapeInferenceOptions options{/*check_type=*/true, /*error_mode=*/1,
                                          /*enable_data_propagation=*/false};
      onnx::shape_inference::InferShapes(proto, ir::guarded_schemas(), options);
    }
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(absl::StrCat("ONNX check failed: ", e.what()));
  }
  return absl::OkStatus();
}

namespace {

// Every --explain entry names a rule pass of this run, and a rule of it when it names one.
absl::Status check_explain(const PipelineConfig& config, const std::vector<std::string>& names) {
  if (config.explain.size() > kMaxExplain)
    return absl::InvalidArgumentError(
        absl::StrCat("explain: at most ", kMaxExplain, " entries, got ", config.explain.size()));
  for (const std::string& e : config.explain) {
    const size_t slash = e.find('/');
    const std::string pass = e.substr(0, slash);
    if (std::find(names.begin(), names.end(), pass) == names.end())
      return absl::InvalidArgumentError(
          absl::StrCat("explain: pass '", absl::CHexEscape(pass.substr(0, 256)),
                       "' is not in this run; its passes: ", absl::StrJoin(names, ", ")));
    std::unique_ptr<Pass> instance = find_pass(pass)->create();
    const auto* rules = dynamic_cast<const RulePass*>(instance.get());
    if (!rules)
      return absl::InvalidArgumentError(
          absl::StrCat("explain: pass '", pass,
                       "' is not made of rules (only rule passes can say why a rule did not "
                       "match)"));
    if (slash == std::string::npos) continue;
    const std::string rule = e.substr(slash + 1);
    const std::vector<std::string> valid = rules->rule_names();
    if (std::find(valid.begin(), valid.end(), rule) == valid.end())
      return absl::InvalidArgumentError(absl::StrCat("explain: pass '", pass, "' has no rule '",
                                                     absl::CHexEscape(rule.substr(0, 256)),
                                                     "'; its rules: ", absl::StrJoin(valid, ", ")));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<PassSpec>> resolve_pipeline(const PipelineConfig& config) {
  if (auto st = check_rounds(config); !st.ok()) return st;
  std::vector<std::string> names;
  if (config.passes.empty()) {
    if (config.level < 0 || config.level > kMaxLevel)
      return absl::InvalidArgumentError(
          absl::StrCat("level must be O0..O", kMaxLevel, ", got O", config.level));
    names = passes_for_level(config.level);
  } else {
    names = config.passes;
  }
  std::vector<std::string> valid;
  for (const auto& p : all_passes()) valid.push_back(p.name);
  for (const auto& n : names)
    if (!find_pass(n))
      return absl::InvalidArgumentError(
          absl::StrCat("unknown pass '", n, "'; valid passes: ", absl::StrJoin(valid, ", ")));
  // Options of passes the list does not run are checked too: a misspelt or malformed option
  // is a mistake whichever passes run.
  std::map<std::string, OptionValues> given;
  for (const auto& [pass, options] : config.pass_options) {
    const PassInfo* info = find_pass(pass);
    if (!info)
      return absl::InvalidArgumentError(
          absl::StrCat("options given for unknown pass '", pass,
                       "'; valid passes: ", absl::StrJoin(valid, ", ")));
    auto values = parse_options(pass, info->options, options);
    if (!values.ok()) return values.status();
    given.emplace(pass, std::move(*values));
  }
  if (auto st = check_explain(config, names); !st.ok()) return st;
  std::vector<PassSpec> specs;
  for (const auto& n : names) {
    const PassInfo* info = find_pass(n);
    auto it = given.find(n);
    absl::StatusOr<OptionValues> values = it != given.end()
                                              ? absl::StatusOr<OptionValues>(it->second)
                                              : parse_options(n, info->options, PassOptions{});
    if (!values.ok()) return values.status();
    specs.push_back({n, info->create, std::move(*values), info->lossy});
  }
  return specs;
}

absl::StatusOr<std::vector<std::string>> resolve_passes(const PipelineConfig& config) {
  auto specs = resolve_pipeline(config);
  if (!specs.ok()) return specs.status();
  std::vector<std::string> names;
  for (const auto& s : *specs) names.push_back(s.name);
  return names;
}

absl::StatusOr<PipelineReport> run_pipeline(std::unique_ptr<ir::Model>& model,
                                            const PipelineConfig& config) {
  auto specs = resolve_pipeline(config);
  if (!specs.ok()) return specs.status();
  return run_specs(model, *specs, config);
}

SizeRule memory_size_rule(const PipelineConfig& config, DimBindings* storage) {
  storage->clear();
  // Given input sets replace the random inputs and their dims (which are then ignored).
  const eval::VerifyOptions& v = config.verify_options;
  const bool verify_dims = v.input_sets.empty();
  if (verify_dims)
    for (const auto& [name, size] : v.dims) (*storage)[name] = size;
  for (const auto& [name, size] : config.memory_dims) (*storage)[name] = size;
  int64_t default_dim = config.memory_default_dim > 0      ? config.memory_default_dim
                        : verify_dims && v.default_dim > 0 ? v.default_dim
                                                           : 1;
  return SizeRule{storage, default_dim};
}

namespace {

absl::StatusOr<PipelineReport> run_specs_measured(std::unique_ptr<ir::Model>& model,
                                                  const std::vector<PassSpec>& specs,
                                                  const PipelineConfig& config) {
  // Passes excluded by verification (by position in `specs`), with the reason.
  std::map<size_t, std::string> excluded;
  // Lossy passes (by position) sit out the exact verification below and are then tried one at a
  // time on top of the exact passes (`held`: not run by the current instances()).
  std::set<size_t> lossy;
  for (size_t i = 0; i < specs.size(); ++i)
    if (specs[i].lossy) lossy.insert(i);
  std::set<size_t> held = lossy;
  std::vector<size_t> run_specs_at;  // position in `specs` of each instance of the current run
  auto instances = [&] {
    std::vector<PassInstance> passes;
    run_specs_at.clear();
    for (size_t i = 0; i < specs.size(); ++i) {
      if (excluded.count(i) || held.count(i)) continue;
      passes.push_back({specs[i].name, specs[i].create(), specs[i].options});
      run_specs_at.push_back(i);
    }
    return passes;
  };
  // Given input sets are the client's bytes: checked against the model before any work.
  if (auto st = eval::check_input_sets(*model, config.verify_options.input_sets); !st.ok())
    return st;
  if (!config.verify && lossy.empty()) return run_passes(model, instances(), config);

  // The original's outputs are computed once; every candidate below costs one evaluator run.
  const auto pipeline_start = Clock::now();
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  // The evaluator polls should_continue too, so a deadline that passes during a run ends it
  // early; the status is then taken from here rather than reported as "not verifiable".
  auto stopped = [&]() -> absl::Status {
    return config.should_continue ? config.should_continue() : absl::OkStatus();
  };
  std::unique_ptr<ir::Model> original = model->clone();
  eval::VerifyOptions verify_options = config.verify_options;
  verify_options.should_continue = config.should_continue;
  eval::Verifier verifier(*original, verify_options);
  if (auto st = stopped(); !st.ok()) return st;
  double verify_seconds = seconds_since(pipeline_start);

  // The exact passes: each mismatch excludes one more pass, so this ends after at most
  // specs.size() runs.
  std::optional<PipelineReport> report;
  eval::VerifyResult result;
  for (;;) {
    std::vector<size_t> applied;
    auto run = run_passes(model, instances(), config, &applied);
    if (!run.ok()) return run.status();
    auto check_start = Clock::now();
    result = verifier.check(*model);
    verify_seconds += seconds_since(check_start);
    if (auto st = stopped(); !st.ok()) return st;
    if (result.status == eval::VerifyStatus::kMismatch && !applied.empty()) {
      // Bisection over the kept pass runs: the prefix of length `good` matches the original
      // (the empty prefix is the original itself), the prefix of length `bad` does not, so the
      // run at index bad-1 is the first to change the outputs.
      auto bisect_start = Clock::now();
      size_t good = 0, bad = applied.size();
      while (bad - good > 1) {
        const size_t mid = good + (bad - good) / 2;
        std::unique_ptr<ir::Model> candidate = original->clone();
        bool replay_ok = true;
        for (size_t i = 0; i < mid && replay_ok; ++i) {
          const PassSpec& spec = specs[run_specs_at[applied[i]]];
          auto pass = spec.create();
          PassContext ctx(spec.options);
          absl::StatusOr<PassResult> r = PassResult{};
          try {
            r = pass->run(*candidate, ctx);
          } catch (...) {
            r = absl::InternalError("pass threw");
          }
          replay_ok = r.ok() && (!r->changed || candidate->finalize().ok());
        }
        const bool mismatch =
            !replay_ok || verifier.check(*candidate).status == eval::VerifyStatus::kMismatch;
        if (auto st = stopped(); !st.ok()) return st;
        (mismatch ? bad : good) = mid;
      }
      verify_seconds += seconds_since(bisect_start);
      excluded[run_specs_at[applied[bad - 1]]] = "changed the outputs: " + result.message;
      model = original->clone();
      continue;
    }
    report = std::move(*run);
    break;
  }

  // The lossy passes, in pipeline order, each on top of the exact passes and the lossy ones
  // kept so far, from the original: the error is measured against the original (every input
  // set), reported, and held to max_error when there is one.
  std::vector<std::string> kept_lossy;
  for (size_t at : lossy) {
    held.erase(at);
    std::unique_ptr<ir::Model> candidate = original->clone();
    auto run = run_passes(candidate, instances(), config);
    if (!run.ok()) return run.status();
    auto check_start = Clock::now();
    eval::VerifyResult measured = verifier.measure(*candidate);
    verify_seconds += seconds_since(check_start);
    if (auto st = stopped(); !st.ok()) return st;
    std::string reason;
    if (measured.status == eval::VerifyStatus::kMismatch) {
      reason = "broke the model: " + measured.message;
    } else if (measured.status == eval::VerifyStatus::kNotVerifiable && config.max_error) {
      reason = "its error could not be measured under max_error: " + measured.message;
    } else if (config.max_error) {
      for (const auto& e : measured.outputs)
        if (!(e.rel <= *config.max_error)) {
          reason = absl::StrCat("error ", e.rel, " in output '", e.name, "' exceeds max_error ",
                                *config.max_error);
          break;
        }
    }
    if (!reason.empty()) {
      held.insert(at);
      excluded[at] = reason;
      continue;
    }
    kept_lossy.push_back(specs[at].name);
    model = std::move(candidate);
    report = std::move(*run);
    result = std::move(measured);
  }

  report->verification.requested = true;
  if (!kept_lossy.empty() && result.status == eval::VerifyStatus::kVerified) {
    double worst = 0;
    std::string where;
    for (const auto& e : result.outputs)
      if (e.rel > worst || where.empty()) {
        worst = std::max(worst, e.rel);
        where = e.name;
      }
    result.message = absl::StrCat("lossy (", absl::StrJoin(kept_lossy, ", "),
                                  "): worst relative error ", worst, " in '", where, "'");
  }
  report->verification.errors = result.outputs;
  report->verification.result = std::move(result);
  report->verification.lossy_passes = kept_lossy;
  report->verification.max_error = config.max_error;
  // An excluded pass keeps its place in the stats, with the reason it was rolled back. Every
  // spec that ran is in the report in order, so inserting in increasing position puts each at
  // its index.
  for (const auto& [at, reason] : excluded) {
    report->verification.rolled_back.push_back(specs[at].name);
    PassStats stats;
    stats.name = specs[at].name;
    stats.rollbacks = 1;
    stats.rollback_reason = reason;
    report->passes.insert(report->passes.begin() + static_cast<std::ptrdiff_t>(at),
                          std::move(stats));
  }
  report->nodes_before = original->total_nodes();
  report->bytes_before = original->initializer_bytes();
  report->verification.seconds = verify_seconds;
  report->seconds = seconds_since(pipeline_start);  // all runs, verification included
  return std::move(*report);
}

}  // namespace

// The memory estimates wrap the run: they are of the model as given and as returned, whatever
// verification and rollbacks happened in between.
absl::StatusOr<PipelineReport> run_specs(std::unique_ptr<ir::Model>& model,
                                         const std::vector<PassSpec>& specs,
                                         const PipelineConfig& config) {
  DimBindings dims;
  const SizeRule rule = memory_size_rule(config, &dims);
  MemoryStats before = estimate_memory(*model, dims, rule.default_dim);
  auto report = run_specs_measured(model, specs, config);
  if (!report.ok()) return report;
  report->memory_before = std::move(before);
  report->memory_after = estimate_memory(*model, dims, rule.default_dim);
  report->memory_dims = std::move(dims);
  report->memory_default_dim = rule.default_dim;
  return report;
}

absl::StatusOr<PipelineReport> run_passes(std::unique_ptr<ir::Model>& model,
                                          std::vector<PassInstance> passes,
                                          const PipelineConfig& config,
                                          std::vector<size_t>* applied) {
  if (auto st = check_rounds(config); !st.ok()) return st;
  auto start = Clock::now();
  // Passes that evaluate kernels (folding) share one budget per run of the passes: the bytes
  // they hold at once, their total work, and the deadline polled inside long kernels. A fold
  // the budget refuses is not made; the pass goes on.
  auto eval_budget =
      eval::Budget::make(kPassEvalMaxBytes, kPassEvalMaxWork, config.should_continue);
  eval::BudgetScope eval_scope(eval_budget.get());

  PipelineReport report;
  report.nodes_before = model->total_nodes();
  report.bytes_before = model->initializer_bytes();
  const std::string interface = interface_of(*model);
  const uint64_t max_weight_bytes =
      report.bytes_before > (UINT64_MAX - kWeightGrowthAllowance) / kMaxWeightGrowth
          ? UINT64_MAX
          : report.bytes_before * kMaxWeightGrowth + kWeightGrowthAllowance;

  bool check = config.onnx_checker || config.shape_inference;
  if (check) {
    std::string skipped;
    absl::Status input_ok = onnx_check(*model, config.shape_inference, &skipped);
    if (!skipped.empty()) {
      report.checker_note = skipped;
      check = false;
    } else if (!input_ok.ok()) {
      report.checker_note = absl::StrCat(
          "input model fails the ONNX check, so it is not used to "
          "judge passes: ",
          input_ok.message());
      check = false;
    }
  }

  struct Slot {
    PassInstance instance;
    PassStats stats;
    bool disabled = false;
  };
  std::vector<Slot> slots;
  for (auto& p : passes) {
    slots.push_back({std::move(p), PassStats{}, false});
    slots.back().stats.name = slots.back().instance.name;
  }

  // Runs one pass and checks the result; a non-OK status means the model is now broken.
  auto run_checked = [&](Slot& slot, PassResult* out) -> absl::Status {
    PassContext ctx(slot.instance.options);
    ctx.max_weight_bytes = max_weight_bytes;
    ctx.check_transactions = config.check_transactions;
    ctx.explain = explained_rules(config, slot.instance.name);
    absl::StatusOr<PassResult> result = PassResult{};
    try {
      result = slot.instance.pass->run(*model, ctx);
    } catch (const std::exception& e) {
      result = absl::InternalError(absl::StrCat("pass threw: ", e.what()));
    } catch (...) {
      result = absl::InternalError("pass threw a non-standard exception");
    }
    if (!result.ok()) return result.status();
    *out = *result;
    if (!result->changed) return absl::OkStatus();
    if (auto st = model->finalize(); !st.ok()) return st;
    if (auto st = model->verify(); !st.ok()) return st;
    if (const uint64_t bytes = model->initializer_bytes(); bytes > max_weight_bytes)
      return absl::ResourceExhaustedError(absl::StrCat(
          "the pass grew the weights to ", bytes, " bytes, above the pipeline's limit of ",
          max_weight_bytes, " (", kMaxWeightGrowth, "x the input's plus ",
          kWeightGrowthAllowance >> 20, " MiB)"));
    if (interface_of(*model) != interface)
      return absl::InternalError("the pass changed the model's inputs or outputs");
    if (check) return onnx_check(*model, config.shape_inference, nullptr);
    return absl::OkStatus();
  };

  // With check_unchanged: the fingerprint of the model as it is now, taken lazily. A pass that
  // reports no change and passes the check leaves it valid for the next pass, so a run of
  // passes that change nothing costs one fingerprint each.
  std::optional<ModelFingerprint> unchanged;

  // The estimated peak activation bytes of the model as it is now, kept until a pass changes it
  // (or a rollback replaces it): one estimate per changing pass run, a graph walk each.
  DimBindings memory_dims;
  const SizeRule memory_rule = memory_size_rule(config, &memory_dims);
  std::optional<uint64_t> current_peak;
  auto peak_now = [&]() -> uint64_t {
    if (!current_peak)
      current_peak = graph_peak_bytes(model->graph(), model->graph().nodes(), memory_rule);
    return *current_peak;
  };

  // One snapshot per round, not per pass: clones cost O(nodes) and rollbacks are rare. On a
  // rollback the snapshot is restored and the passes that changed the model since it was taken
  // are replayed (passes are deterministic), so their work is kept.
  int step = 0;
  for (int round = 1; round <= config.max_rounds; ++round) {
    report.rounds = round;
    bool round_changed = false;
    std::unique_ptr<ir::Model> snapshot = model->clone();
    std::vector<Slot*> since_snapshot;
    for (auto& slot : slots) {
      if (slot.disabled) continue;
      if (config.should_continue) {
        if (auto st = config.should_continue(); !st.ok()) return st;
      }
      PassStats& s = slot.stats;
      size_t nodes_before = model->total_nodes();
      uint64_t bytes_before = model->initializer_bytes();
      uint64_t peak_before = peak_now();
      if (s.runs == 0) {
        s.nodes_before = s.nodes_after = nodes_before;
        s.bytes_before = s.bytes_after = bytes_before;
        s.peak_before = s.peak_after = peak_before;
      }
      auto pass_start = Clock::now();
      if (config.check_unchanged && !unchanged) unchanged = fingerprint(*model);
      PassResult result;
      absl::Status broken = run_checked(slot, &result);
      ++s.runs;
      if (config.check_unchanged) {
        if (broken.ok() && !result.changed) {
          if (auto st = verify_unchanged(s.name, *unchanged, fingerprint(*model)); !st.ok())
            return st;
        } else {
          unchanged.reset();
        }
      }
      if (!broken.ok()) {
        ++s.rollbacks;
        if (s.rollback_reason.empty()) s.rollback_reason = std::string(broken.message());
        // A pass that broke the model once is not retried in later rounds.
        slot.disabled = true;
        current_peak.reset();
        model = std::move(snapshot);
        for (Slot* earlier : since_snapshot) {
          PassResult replayed;
          if (auto st = run_checked(*earlier, &replayed); !st.ok())
            return absl::InternalError(absl::StrCat(
                "pass '", earlier->stats.name,
                "' failed when replayed after a rollback: ", std::string(st.message())));
        }
        snapshot = model->clone();
        since_snapshot.clear();
      } else {
        if (result.capped) ++s.capped_runs;
        if (!config.explain.empty()) {
          s.explanations = std::move(result.explanations);
          s.explanations_dropped = result.explanations_dropped;
        }
      }
      if (broken.ok() && result.changed) {
        current_peak.reset();
        ++s.changed_runs;
        s.rewrites += result.rewrites;
        for (const auto& [rule, count] : result.rules) s.rules[rule] += count;
        round_changed = true;
        since_snapshot.push_back(&slot);
        if (applied) applied->push_back(static_cast<size_t>(&slot - slots.data()));
        ++step;
        if (!config.dump_dir.empty()) dump_graph(*model, config.dump_dir, step, round, s.name);
      }
      s.seconds += std::chrono::duration<double>(Clock::now() - pass_start).count();
      s.nodes_after += model->total_nodes() - nodes_before;  // unsigned wrap-around is exact
      s.bytes_after += model->initializer_bytes() - bytes_before;
      s.peak_after += peak_now() - peak_before;
    }
    if (!round_changed) {
      report.reached_fixed_point = true;
      break;
    }
  }
  for (auto& slot : slots) report.passes.push_back(std::move(slot.stats));
  // What the passes learnt about shapes goes into the value_info the model had; a model no
  // pass changed is returned as it came.
  if (step > 0) report.value_info_refined = ir::refine_value_info(*model);
  report.nodes_after = model->total_nodes();
  report.bytes_after = model->initializer_bytes();
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace graft
