#include "core/pipeline/pipeline.h"

#include "core/eval/budget.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <optional>
#include <set>
#include <sstream>
#include <variant>

#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/checker.h>
#include <onnx/defs/printer.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include "core/base/status.h"
#include "core/ir/onnx_guard.h"
#include "core/ir/op_params.h"
#include "core/ir/saturating.h"
#include "core/ir/sparse.h"
#include "core/passes/opset.h"
#include "core/passes/registry.h"
#include "core/passes/rules.h"
#include "core/pipeline/fix_dims.h"
#include "core/pipeline/io_layout.h"

namespace graft {

namespace {
// What the passes' kernel evaluations (constant folding) may use in one run of the passes.
constexpr uint64_t kPassEvalMaxBytes = 256ull << 20;
constexpr uint64_t kPassEvalMaxWork = 10'000'000'000;
// The most the passes may grow a model's weights: this factor of the input's, plus a fixed
// allowance so that small models can still fold their shape arithmetic.
constexpr uint64_t kMaxWeightGrowth = 4;
constexpr uint64_t kWeightGrowthAllowance = 64ull << 20;
// The most random input sets a lossy pass is measured (and, without data, calibrated) on, where
// runs are cheap (VerifyOptions::max_trials).
constexpr int kLossyMaxTrials = 8;
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
std::vector<std::string> explained_rules(const std::vector<std::string>& explain,
                                         const std::string& pass) {
  std::vector<std::string> rules;
  for (const std::string& e : explain) {
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
  if (config.max_error && !(*config.max_error >= 0 && std::isfinite(*config.max_error)))
    return absl::InvalidArgumentError(
        absl::StrCat("max_error must be a finite number >= 0, got ", *config.max_error));
  if (config.min_cosine && !(*config.min_cosine >= -1 && *config.min_cosine <= 1))
    return absl::InvalidArgumentError(
        absl::StrCat("min_cosine must be between -1 and 1, got ", *config.min_cosine));
  return absl::OkStatus();
}

// A lossy pass's gate: its own, with the request's bounds in place of its defaults.
ErrorGate gate_of(const PassInfo& info, const PipelineConfig& config) {
  ErrorGate gate = info.gate;
  if (config.max_error) gate.max_rel = *config.max_error;
  if (config.min_cosine) gate.min_cosine = *config.min_cosine;
  return gate;
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
      // The checker saw them sparse; inference sees them as the tensors they are.
      ir::densify_sparse_initializers(proto.mutable_graph());
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
  RETURN_IF_ERROR(check_rounds(config));
  RETURN_IF_ERROR(check_fix_config(config.fix_dims, config.fix_shapes));
  RETURN_IF_ERROR(check_io_layout_config(config.io_layout));
  std::vector<std::string> names;
  if (config.passes.empty()) {
    if (config.level < 0 || config.level > kMaxLevel)
      return absl::InvalidArgumentError(
          absl::StrCat("level must be O0..O", kMaxLevel, ", got O", config.level));
    names = passes_for_level(config.level, config.target);
  } else {
    names = config.passes;
  }
  // layout_sensitive_ops adds convert_layout after optimize_transposes (or at the end of an
  // explicit list without it).
  if (config.layout_sensitive_ops &&
      std::find(names.begin(), names.end(), "convert_layout") == names.end()) {
    auto at = std::find(names.begin(), names.end(), "optimize_transposes");
    names.insert(at == names.end() ? at : at + 1, "convert_layout");
  }
  std::vector<std::string> valid;
  for (const auto& p : all_passes()) valid.push_back(p.name);
  for (const auto& n : names) {
    const PassInfo* info = find_pass(n);
    if (!info)
      return absl::InvalidArgumentError(
          absl::StrCat("unknown pass '", n, "'; valid passes: ", absl::StrJoin(valid, ", ")));
    if (info->target && *info->target != config.target.kind)
      return absl::InvalidArgumentError(
          absl::StrCat("pass '", n, "' emits ", target_kind_name(*info->target),
                       " ops: it runs only with target ", target_kind_name(*info->target),
                       " (the request's target is ", config.target.str(), ")"));
  }
  // Options of passes the list does not run are checked too: a misspelt or malformed option
  // is a mistake whichever passes run.
  std::map<std::string, OptionValues> given;
  for (const auto& [pass, options] : config.pass_options) {
    const PassInfo* info = find_pass(pass);
    if (!info)
      return absl::InvalidArgumentError(
          absl::StrCat("options given for unknown pass '", pass,
                       "'; valid passes: ", absl::StrJoin(valid, ", ")));
    ASSIGN_OR_RETURN(OptionValues values, parse_options(pass, info->options, options));
    given.emplace(pass, std::move(values));
  }
  if (config.target_opset != 0) {
    if (config.target_opset < kMinRaisableOpset || config.target_opset > kMaxRaisableOpset)
      return absl::InvalidArgumentError(
          absl::StrCat("target_opset must be ", kMinRaisableOpset, "..", kMaxRaisableOpset,
                       " (the opsets Graft converts between), got ", config.target_opset));
    // First, so that every pass sees the raised opset; its option is the target.
    names.erase(std::remove(names.begin(), names.end(), "convert_opset"), names.end());
    names.insert(names.begin(), "convert_opset");
    given["convert_opset"] =
        *parse_options("convert_opset", find_pass("convert_opset")->options,
                       PassOptions{{"opset", std::to_string(config.target_opset)}});
  }
  RETURN_IF_ERROR(check_explain(config, names));
  std::vector<PassSpec> specs;
  for (const auto& n : names) {
    const PassInfo* info = find_pass(n);
    auto it = given.find(n);
    ASSIGN_OR_RETURN(OptionValues values, it != given.end()
                                              ? absl::StatusOr<OptionValues>(it->second)
                                              : parse_options(n, info->options, PassOptions{}));
    specs.push_back({n, info->create, std::move(values), info->lossy,
                     info->lossy ? gate_of(*info, config) : ErrorGate{}});
  }
  return specs;
}

absl::StatusOr<std::vector<std::string>> resolve_passes(const PipelineConfig& config) {
  ASSIGN_OR_RETURN(const std::vector<PassSpec> specs, resolve_pipeline(config));
  std::vector<std::string> names;
  for (const auto& s : specs) names.push_back(s.name);
  return names;
}

absl::StatusOr<PipelineReport> run_pipeline(std::unique_ptr<ir::Model>& model,
                                            const PipelineConfig& config) {
  ASSIGN_OR_RETURN(const std::vector<PassSpec> specs, resolve_pipeline(config));
  if (config.target_opset != 0) {
    // A raise that cannot be done is the request's error, found before any work.
    const int64_t opset = model->opset("");
    if (opset > config.target_opset)
      return absl::InvalidArgumentError(
          absl::StrCat("the model's opset ", opset, " is above the target opset ",
                       config.target_opset, ": Graft raises opsets, it does not lower them"));
    if (auto refusal = check_raise_opset(*model, config.target_opset))
      return absl::InvalidArgumentError(absl::StrCat(
          "the opset cannot be raised to ", config.target_opset, ": ", refusal->message()));
  }
  return run_specs(model, specs, config);
}

absl::Status check_evaluator_memory_options(const PipelineConfig& config, uint64_t grant,
                                            std::string_view grant_name) {
  for (const auto& [pass, given] : config.pass_options) {
    const PassInfo* info = find_pass(pass);
    if (info == nullptr) continue;
    for (const OptionSpec& spec : info->options) {
      const auto text = given.find(spec.name);
      if (!spec.evaluator_memory || text == given.end()) continue;
      auto value = parse_option(pass, spec, text->second);
      if (!value.ok() || !std::holds_alternative<int64_t>(*value)) continue;
      const int64_t default_bytes = std::get<int64_t>(spec.default_value);
      const uint64_t limit = std::max<uint64_t>(static_cast<uint64_t>(default_bytes), grant);
      const int64_t bytes = std::get<int64_t>(*value);
      if (static_cast<uint64_t>(bytes) > limit)
        return absl::InvalidArgumentError(absl::StrCat(
            "option ", pass, ".", spec.name, " ", bytes, " exceeds this server's limit of ", limit,
            " bytes (the larger of the option's default, ", default_bytes, ", and ",
            std::string(grant_name), ")"));
    }
  }
  return absl::OkStatus();
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

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// ------------------------------------------------------------------------------ one pass run

// What every run of a pass is held to, fixed once from the pipeline's input. The fixed-point
// driver, verification's bisection replay and the lossy trials run passes under the same
// limits, so that a replay builds the model the run it bisects built.
struct RunLimits {
  uint64_t max_weight_bytes = 0;  // from the input's weights, never from a replayed prefix's
  std::string interface;          // the input's (interface_of): passes must keep it
  bool onnx_check = false;        // ONNX checker (+ shape inference) after each changing pass
  bool shape_inference = false;
  std::string checker_note;  // why the ONNX check is off although the config asks for it
  // The request's deadline and cancellation, also polled inside long kernel evaluations.
  std::function<absl::Status()> should_continue;
  bool check_transactions = false;   // PipelineConfig::check_transactions
  std::vector<std::string> explain;  // PipelineConfig::explain
  Target target;                     // PipelineConfig::target
  // Verification's inputs for passes that run the model (PassContext::calibration); unset
  // outside verification.
  std::optional<CalibrationInputs> calibration;
};

uint64_t weight_limit(uint64_t input_bytes) {
  return sat_add(sat_mul(input_bytes, kMaxWeightGrowth), kWeightGrowthAllowance);
}

RunLimits run_limits(const ir::Model& input, const PipelineConfig& config) {
  RunLimits limits;
  limits.max_weight_bytes = weight_limit(input.initializer_bytes());
  limits.interface = interface_of(input);
  limits.shape_inference = config.shape_inference;
  limits.should_continue = config.should_continue;
  limits.check_transactions = config.check_transactions;
  limits.explain = config.explain;
  limits.target = config.target;
  if (!config.onnx_checker && !config.shape_inference) return limits;
  std::string skipped;
  absl::Status input_ok = onnx_check(input, config.shape_inference, &skipped);
  if (!skipped.empty())
    limits.checker_note = skipped;
  else if (!input_ok.ok())
    limits.checker_note =
        absl::StrCat("input model fails the ONNX check, so it is not used to judge passes: ",
                     input_ok.message());
  else
    limits.onnx_check = true;
  return limits;
}

// The evaluator budget the passes of one run share (constant folding's kernel evaluations): the
// bytes they hold at once, their total work, and the deadline polled inside long kernels. A
// fold the budget refuses is not made; the pass goes on.
std::shared_ptr<eval::Budget> pass_eval_budget(const RunLimits& limits) {
  return eval::Budget::make(kPassEvalMaxBytes, kPassEvalMaxWork, limits.should_continue);
}

// Brings `budget` to `work` spent when it has spent less: a replayed pass run starts with the
// work its run had spent before it (runs that changed nothing included), so that it refuses the
// folds the run refused.
void spend_until(eval::Budget& budget, uint64_t work) {
  if (work <= budget.work()) return;
  try {
    budget.spend(work - budget.work());
  } catch (const eval::Stop&) {
    // Past the work limit, as the run was then (the work is counted before the limit is
    // checked), so the pass's kernels refuse at once as they did. A deadline is the caller's.
  }
}

// The checks after a pass changed the model; a non-OK status means the model is broken.
absl::Status check_changed_model(ir::Model& model, const RunLimits& limits) {
  RETURN_IF_ERROR(model.finalize());
  RETURN_IF_ERROR(model.verify());
  if (const uint64_t bytes = model.initializer_bytes(); bytes > limits.max_weight_bytes)
    return absl::ResourceExhaustedError(absl::StrCat(
        "the pass grew the weights to ", bytes, " bytes, above the pipeline's limit of ",
        limits.max_weight_bytes, " (", kMaxWeightGrowth, "x the input's plus ",
        kWeightGrowthAllowance >> 20, " MiB)"));
  if (interface_of(model) != limits.interface)
    return absl::InternalError("the pass changed the model's inputs or outputs");
  if (limits.onnx_check) return onnx_check(model, limits.shape_inference, nullptr);
  return absl::OkStatus();
}

// Runs one pass with its options under `limits`, its evaluations charged to `budget`, and checks
// the result. Not OK: the pass failed, threw or broke the model, which must be restored.
absl::StatusOr<PassResult> run_one_pass(ir::Model& model, const PassInstance& instance,
                                        const RunLimits& limits, eval::Budget& budget) {
  PassContext ctx(instance.options);
  ctx.max_weight_bytes = limits.max_weight_bytes;
  ctx.check_transactions = limits.check_transactions;
  ctx.explain = explained_rules(limits.explain, instance.name);
  ctx.target = limits.target;
  if (limits.calibration) ctx.calibration = &*limits.calibration;
  absl::StatusOr<PassResult> result = PassResult{};
  try {
    eval::BudgetScope scope(&budget);
    result = instance.pass->run(model, ctx);
  } catch (const std::exception& e) {
    result = absl::InternalError(absl::StrCat("pass threw: ", e.what()));
  } catch (...) {
    result = absl::InternalError("pass threw a non-standard exception");
  }
  if (!result.ok() || !result->changed) return result;
  RETURN_IF_ERROR(check_changed_model(model, limits));
  return result;
}

// A pass run whose change was kept: its pass (index in the run's list) and the evaluator work
// the run had spent before it. Replaying the kept runs in order on the input, each from that
// work, reproduces the result.
struct KeptRun {
  size_t pass;
  uint64_t eval_work_before;
};

// ------------------------------------------------------------------------ fixed-point driver

// Rounds of the passes until none changes the model (at most max_rounds), every pass run
// checked, one that breaks the model rolled back and not run again.
class FixedPointDriver {
 public:
  FixedPointDriver(std::unique_ptr<ir::Model>& model, std::vector<PassInstance> passes,
                   const RunLimits& limits, const PipelineConfig& config)
      : model_(model), limits_(limits), config_(config), budget_(pass_eval_budget(limits)) {
    for (auto& p : passes) {
      slots_.push_back({std::move(p), PassStats{}, false});
      slots_.back().stats.name = slots_.back().instance.name;
    }
    memory_rule_ = memory_size_rule(config, &memory_dims_);
  }
  // memory_rule_ points into memory_dims_.
  FixedPointDriver(const FixedPointDriver&) = delete;
  FixedPointDriver& operator=(const FixedPointDriver&) = delete;

  // `kept` (optional) receives every pass run whose change was kept, in order.
  absl::StatusOr<PipelineReport> run(std::vector<KeptRun>* kept) {
    RETURN_IF_ERROR(check_rounds(config_));
    const auto start = Clock::now();
    report_.nodes_before = model_->total_nodes();
    report_.bytes_before = model_->initializer_bytes();
    report_.checker_note = limits_.checker_note;
    report_.target = limits_.target.str();
    for (int round = 1; round <= config_.max_rounds; ++round) {
      ASSIGN_OR_RETURN(const bool changed, run_round(round));
      if (!changed) {
        report_.reached_fixed_point = true;
        break;
      }
    }
    if (kept) *kept = std::move(kept_);
    return finish(start);
  }

 private:
  struct Slot {
    PassInstance instance;
    PassStats stats;
    bool disabled = false;
  };

  // One snapshot per round, not per pass: clones cost O(nodes) and rollbacks are rare.
  absl::StatusOr<bool> run_round(int round) {
    report_.rounds = round;
    snapshot_ = model_->clone();
    since_snapshot_.clear();
    bool changed = false;
    for (auto& slot : slots_) {
      if (slot.disabled) continue;
      RETURN_IF_ERROR(run_slot(slot, round, &changed));
    }
    return changed;
  }

  // Runs one pass and accounts for it in its stats; sets `*changed` when its change is kept.
  absl::Status run_slot(Slot& slot, int round, bool* changed) {
    if (config_.should_continue) RETURN_IF_ERROR(config_.should_continue());
    PassStats& s = slot.stats;
    const size_t nodes_before = model_->total_nodes();
    const uint64_t bytes_before = model_->initializer_bytes();
    const uint64_t peak_before = peak_now();
    if (s.runs == 0) {
      s.nodes_before = s.nodes_after = nodes_before;
      s.bytes_before = s.bytes_after = bytes_before;
      s.peak_before = s.peak_after = peak_before;
    }
    const auto start = Clock::now();
    if (config_.check_unchanged && !unchanged_) unchanged_ = fingerprint(*model_);
    const uint64_t eval_work_before = budget_->work();
    absl::StatusOr<PassResult> result = run_one_pass(*model_, slot.instance, limits_, *budget_);
    ++s.runs;
    RETURN_IF_ERROR(check_reported_unchanged(s.name, result));
    if (!result.ok()) {
      RETURN_IF_ERROR(roll_back(slot, result.status()));
    } else {
      record_rules(s, *result);
      if (result->changed) {
        record_change(slot, *result, round, eval_work_before);
        *changed = true;
      }
    }
    s.seconds += seconds_since(start);
    // The pass's own changes, added up. They may remove more than the count it started with
    // (what other passes added between its runs): then the count is 0, not a wrapped number.
    // Byte counts reach UINT64_MAX (saturated estimates of hostile dims), so no signed math.
    s.nodes_after = sat_add_change(s.nodes_after, model_->total_nodes(), nodes_before);
    s.bytes_after = sat_add_change(s.bytes_after, model_->initializer_bytes(), bytes_before);
    s.peak_after = sat_add_change(s.peak_after, peak_now(), peak_before);
    return absl::OkStatus();
  }

  // With check_unchanged: a pass that reports no change and passes the check leaves the
  // fingerprint valid for the next pass, so a run of passes that change nothing costs one
  // fingerprint each.
  absl::Status check_reported_unchanged(const std::string& pass,
                                        const absl::StatusOr<PassResult>& result) {
    if (!config_.check_unchanged) return absl::OkStatus();
    if (result.ok() && !result->changed)
      return verify_unchanged(pass, *unchanged_, fingerprint(*model_));
    unchanged_.reset();
    return absl::OkStatus();
  }

  // What the rule driver says of a run: a stop at its rewrite cap, and (--explain) why the
  // explained rules did not rewrite, kept from the pass's last run.
  void record_rules(PassStats& s, PassResult& result) {
    if (result.capped) ++s.capped_runs;
    s.unmeasured = result.unmeasured;
    if (result.used_calibration && limits_.calibration) {
      const CalibrationInputs& c = *limits_.calibration;
      const size_t n = c.sets ? c.sets->size() : 0;
      s.calibration = c.random
                          ? absl::StrCat("random inputs (", n, n == 1 ? " set" : " sets",
                                         "; no calibration data given): ranges may not be the real "
                                         "data's (--calibration-data)")
                          : absl::StrCat(n, n == 1 ? " calibration set" : " calibration sets");
    }
    if (config_.explain.empty() && !result.always_explained) return;
    // A pass whose findings are its report (factorize_low_rank's weights, convert_fp16's nodes
    // kept float32) keeps those of the last run that changed the model: a later run that finds
    // nothing more to do no longer sees what the first one did.
    if (result.always_explained && !result.changed && s.changed_runs > 0) return;
    s.explanations = std::move(result.explanations);
    s.explanations_dropped = result.explanations_dropped;
  }

  void record_change(Slot& slot, const PassResult& result, int round, uint64_t eval_work_before) {
    PassStats& s = slot.stats;
    current_peak_.reset();
    ++s.changed_runs;
    s.rewrites += result.rewrites;
    for (const auto& [rule, count] : result.rules) s.rules[rule] += count;
    since_snapshot_.push_back(&slot);
    kept_.push_back({static_cast<size_t>(&slot - slots_.data()), eval_work_before});
    ++step_;
    if (!config_.dump_dir.empty()) dump_graph(*model_, config_.dump_dir, step_, round, s.name);
  }

  // Restores the round's snapshot and replays the passes that changed the model since it was
  // taken (passes are deterministic), so their work is kept. A pass that broke the model once is
  // not retried in later rounds.
  absl::Status roll_back(Slot& slot, const absl::Status& why) {
    PassStats& s = slot.stats;
    ++s.rollbacks;
    if (s.rollback_reason.empty()) s.rollback_reason = std::string(why.message());
    slot.disabled = true;
    current_peak_.reset();
    model_ = std::move(snapshot_);
    // These runs are the last kept ones. The model now comes from their replays, which start
    // with more evaluator work spent than their first runs did, so that is what a bisection
    // must reproduce.
    KeptRun* kept = kept_.data() + (kept_.size() - since_snapshot_.size());
    for (Slot* earlier : since_snapshot_) {
      (kept++)->eval_work_before = budget_->work();
      if (auto replayed = run_one_pass(*model_, earlier->instance, limits_, *budget_);
          !replayed.ok())
        return absl::InternalError(absl::StrCat(
            "pass '", earlier->stats.name,
            "' failed when replayed after a rollback: ", std::string(replayed.status().message())));
    }
    snapshot_ = model_->clone();
    since_snapshot_.clear();
    return absl::OkStatus();
  }

  // The estimated peak activation bytes of the model as it is now, kept until a pass changes it
  // (or a rollback replaces it): one estimate per changing pass run, a graph walk each.
  uint64_t peak_now() {
    if (!current_peak_)
      current_peak_ = graph_peak_bytes(model_->graph(), model_->graph().nodes(), memory_rule_);
    return *current_peak_;
  }

  PipelineReport finish(Clock::time_point start) {
    for (auto& slot : slots_) report_.passes.push_back(std::move(slot.stats));
    // What the passes learnt about shapes goes into the value_info the model had; a model no
    // pass changed is returned as it came.
    if (step_ > 0) report_.value_info_refined = ir::refine_value_info(*model_);
    report_.nodes_after = model_->total_nodes();
    report_.bytes_after = model_->initializer_bytes();
    report_.seconds = seconds_since(start);
    return std::move(report_);
  }

  std::unique_ptr<ir::Model>& model_;
  const RunLimits& limits_;
  const PipelineConfig& config_;
  std::shared_ptr<eval::Budget> budget_;
  std::vector<Slot> slots_;
  PipelineReport report_;
  std::unique_ptr<ir::Model> snapshot_;  // of the model when the round started
  std::vector<Slot*> since_snapshot_;    // the runs kept since then
  std::vector<KeptRun> kept_;
  int step_ = 0;  // kept runs so far: numbers the dumps
  // With check_unchanged: the fingerprint of the model as it is now, taken lazily.
  std::optional<ModelFingerprint> unchanged_;
  DimBindings memory_dims_;
  SizeRule memory_rule_;
  std::optional<uint64_t> current_peak_;
};

// ------------------------------------------------------------------------------ verification

// Verification of a pipeline (PipelineConfig::verify, or lossy passes in it) against the
// original's outputs. The exact passes run first: a mismatch is traced by bisection to the first
// kept pass run that breaks it, that pass is excluded and the original optimized again. Then
// each lossy pass is tried on top, its error measured and held to max_error.
class VerifiedPipeline {
 public:
  // `task_gates`: eval::task_gates of the original with the config's output_gates.
  VerifiedPipeline(const std::vector<PassSpec>& specs, const PipelineConfig& config,
                   std::unique_ptr<ir::Model> original, std::vector<eval::TaskGate> task_gates)
      : specs_(specs),
        config_(config),
        start_(Clock::now()),
        original_(std::move(original)),
        limits_(run_limits(*original_, config)),
        task_gates_(std::move(task_gates)),
        verifier_(*original_, exact_options(config, task_gates_)),
        probability_outputs_(probability_outputs(*original_)) {
    for (size_t i = 0; i < specs.size(); ++i)
      if (specs[i].lossy) lossy_.insert(i);
    held_ = lossy_;
  }

  absl::StatusOr<PipelineReport> run(std::unique_ptr<ir::Model>& model) {
    // The original's outputs were computed once, by the verifier; every candidate below costs
    // one evaluator run.
    RETURN_IF_ERROR(stopped());
    verify_seconds_ = seconds_since(start_);
    RETURN_IF_ERROR(run_exact(model));
    if (!lossy_.empty()) {
      const auto start = Clock::now();
      make_lossy_verifier();
      verify_seconds_ += seconds_since(start);
      RETURN_IF_ERROR(stopped());
    }
    for (size_t at : lossy_) RETURN_IF_ERROR(try_lossy(at, model));
    return finish();
  }

 private:
  // With the task gates, which measure() applies and check() ignores.
  static eval::VerifyOptions verify_options(const PipelineConfig& config,
                                            const std::vector<eval::TaskGate>& task_gates) {
    eval::VerifyOptions options = config.verify_options;
    options.should_continue = config.should_continue;
    options.task_gates = task_gates;
    return options;
  }

  // The exact check runs at the sizes models are served at too (representative_dims: a 224x224
  // image, 128 tokens, 1 s of audio, shrinking when the budget or the model needs it) unless the
  // request names a size for every other dim (default_dim): a convolution checked on a 1x1
  // image never exercises its padding, strides or pooling windows.
  static eval::VerifyOptions exact_options(const PipelineConfig& config,
                                           const std::vector<eval::TaskGate>& task_gates) {
    eval::VerifyOptions options = verify_options(config, task_gates);
    if (options.default_dim == 0 && options.input_sets.empty()) options.representative_dims = true;
    return options;
  }

  // Lossy passes are measured at sizes that mean something (VerifyOptions::representative_dims:
  // a 224x224 image, 128 tokens; see measure_lossy), and those inputs are what passes that run
  // the model see (PassContext::calibration).
  void make_lossy_verifier() {
    eval::VerifyOptions options = verify_options(config_, task_gates_);
    options.representative_dims = true;
    // One random input set where a run is costly (a 224x224 image holds plenty of values; each
    // set costs a run of the original and of every candidate), up to kLossyMaxTrials where runs
    // are cheap (a decoder step is one token a set: the worst error over one token says little
    // about the next); given sets are all used. Without calibration data, passes calibrate on as
    // many other random sets of the same sizes: ranges learned from the very inputs the error
    // is measured on would understate it (static int8 measured 0.01-0.04 that way where other
    // draws gave 0.26-0.33).
    if (options.input_sets.empty()) {
      options.trials = 1;
      options.max_trials = kLossyMaxTrials;
    }
    options.calibration_sets = 1;
    lossy_verifier_ = std::make_unique<eval::Verifier>(*original_, options);
    const eval::Verifier& v = lossy_verifier_->usable() ? *lossy_verifier_ : verifier_;
    const bool given = !config_.calibration_sets.empty();
    if (!given && (!v.usable() || v.feeds().empty())) return;
    const eval::VerifyOptions& o = v.options();
    CalibrationInputs& c = limits_.calibration.emplace();
    c.sets = given                            ? &config_.calibration_sets
             : !v.calibration_feeds().empty() ? &v.calibration_feeds()
                                              : &v.feeds();
    c.random = !given;
    c.limits.max_tensor_bytes = o.max_tensor_bytes;
    c.limits.max_live_bytes = o.max_live_bytes;
    c.limits.max_work = o.max_work;
    c.limits.should_continue = &config_.should_continue;
  }

  // A lossy candidate's error at representative sizes. Its error at the exact verification's
  // sizes (often 1: a 1x1 image, one token) is not gated, since errors there mean little (an
  // output of near-zero magnitude); that measure stands only when the representative one cannot
  // be taken (its message says why), and a candidate failing there is a mismatch either way.
  eval::VerifyResult measure_lossy(const ir::Model& candidate) const {
    eval::VerifyResult r = measure_lossy_raw(candidate);
    // Probabilities (Sigmoid, Softmax: values in [0, 1]) are compared on their own scale: a
    // detector's score map whose largest value is 0.04 on random inputs is off by its absolute
    // error, not by that over 0.04.
    for (auto& e : r.outputs)
      if (probability_outputs_.count(e.name)) e.rel = std::min(e.rel, e.max_abs);
    return r;
  }

  // The main graph outputs computed by Sigmoid, HardSigmoid or Softmax, through ops that only
  // move values (ir::moves_values).
  static std::set<std::string> probability_outputs(const ir::Model& model) {
    std::set<std::string> out;
    for (const auto& o : model.graph().outputs()) {
      const ir::Value* v = o.value;
      for (int depth = 0; v && v->producer() && depth < 8; ++depth) {
        const ir::Node* p = v->producer();
        if (p->is("Sigmoid") || p->is("HardSigmoid") || p->is("Softmax")) {
          out.insert(o.value->name());
          break;
        }
        if (!ir::moves_values(*p)) break;
        v = p->input(0);
      }
    }
    return out;
  }

  eval::VerifyResult measure_lossy_raw(const ir::Model& candidate) const {
    using eval::VerifyStatus;
    if (!lossy_verifier_ || !lossy_verifier_->usable()) {
      eval::VerifyResult small = verifier_.measure(candidate);
      if (lossy_verifier_ && small.status == VerifyStatus::kVerified)
        absl::StrAppend(&small.message, "; not measured at representative sizes: ",
                        lossy_verifier_->measure(candidate).message);
      return small;
    }
    eval::VerifyResult real = lossy_verifier_->measure(candidate);
    if (real.status != VerifyStatus::kVerified) return real;
    eval::VerifyResult small = verifier_.measure(candidate);
    if (small.status == VerifyStatus::kMismatch) return small;
    return real;
  }

  // The evaluator polls should_continue too, so a deadline that passes during a run ends it
  // early; the status is then taken from here rather than reported as "not verifiable".
  absl::Status stopped() const {
    return config_.should_continue ? config_.should_continue() : absl::OkStatus();
  }

  // Instances of the specs neither excluded nor held; run_specs_at_ maps them back.
  std::vector<PassInstance> instances() {
    std::vector<PassInstance> passes;
    run_specs_at_.clear();
    for (size_t i = 0; i < specs_.size(); ++i) {
      if (excluded_.count(i) || held_.count(i)) continue;
      passes.push_back({specs_[i].name, specs_[i].create(), specs_[i].options});
      run_specs_at_.push_back(i);
    }
    return passes;
  }

  // The exact passes: each mismatch excludes one more pass, so this ends after at most
  // specs.size() runs.
  absl::Status run_exact(std::unique_ptr<ir::Model>& model) {
    for (;;) {
      std::vector<KeptRun> kept;
      ASSIGN_OR_RETURN(PipelineReport run,
                       FixedPointDriver(model, instances(), limits_, config_).run(&kept));
      const auto check_start = Clock::now();
      result_ = verifier_.check(*model);
      verify_seconds_ += seconds_since(check_start);
      RETURN_IF_ERROR(stopped());
      if (result_.status != eval::VerifyStatus::kMismatch || kept.empty()) {
        report_ = std::move(run);
        return absl::OkStatus();
      }
      ASSIGN_OR_RETURN(const size_t guilty, first_breaking_run(kept));
      excluded_[run_specs_at_[kept[guilty].pass]] = "changed the outputs: " + result_.message;
      model = original_->clone();
    }
  }

  // Bisection over the kept pass runs: the prefix of length `good` matches the original (the
  // empty prefix is the original itself), the prefix of length `bad` does not, so the run at
  // index bad-1 is the first to change the outputs.
  absl::StatusOr<size_t> first_breaking_run(const std::vector<KeptRun>& kept) {
    const auto bisect_start = Clock::now();
    size_t good = 0, bad = kept.size();
    while (bad - good > 1) {
      const size_t mid = good + (bad - good) / 2;
      ASSIGN_OR_RETURN(const bool matches, prefix_matches(kept, mid));
      (matches ? good : bad) = mid;
    }
    verify_seconds_ += seconds_since(bisect_start);
    return bad - 1;
  }

  // Whether replaying the first `length` kept runs on the original keeps its outputs. Each run
  // is replayed as run_one_pass ran it: the same limits, and the evaluator work the run had
  // spent before it. A replay that fails counts as a mismatch.
  absl::StatusOr<bool> prefix_matches(const std::vector<KeptRun>& kept, size_t length) {
    std::unique_ptr<ir::Model> candidate = original_->clone();
    auto budget = pass_eval_budget(limits_);
    bool replay_ok = true;
    for (size_t i = 0; i < length && replay_ok; ++i) {
      RETURN_IF_ERROR(stopped());
      const PassSpec& spec = specs_[run_specs_at_[kept[i].pass]];
      spend_until(*budget, kept[i].eval_work_before);
      replay_ok =
          run_one_pass(*candidate, {spec.name, spec.create(), spec.options}, limits_, *budget).ok();
    }
    const bool matches =
        replay_ok && verifier_.check(*candidate).status != eval::VerifyStatus::kMismatch;
    RETURN_IF_ERROR(stopped());
    return matches;
  }

  // The lossy pass at `at`, on top of the exact passes and the lossy ones kept so far, from the
  // original: its error is measured against the original (every input set), reported, and held
  // to its gate. It is kept only within the gate, or, when the error cannot be measured, with
  // accept_unmeasured_error.
  absl::Status try_lossy(size_t at, std::unique_ptr<ir::Model>& model) {
    held_.erase(at);
    std::unique_ptr<ir::Model> candidate = original_->clone();
    ASSIGN_OR_RETURN(PipelineReport run,
                     FixedPointDriver(candidate, instances(), limits_, config_).run(nullptr));
    LossyTrial trial{.pass = specs_[at].name, .gate = specs_[at].gate};
    if (!changed_by(run, trial.pass)) {
      // Nothing to convert: the candidate is the exact result, with the pass's stats. A pass
      // that had work but could not run the model did not measure anything: it says so.
      const std::string unmeasured = unmeasured_by(run, trial.pass);
      trial.kept = trial.measured = unmeasured.empty();
      trial.verdict = unmeasured.empty() ? "accepted (it changed nothing)"
                                         : "not applied (error not measured: " + unmeasured + ")";
      return keep_lossy(at, std::move(trial), std::move(candidate), std::move(run), model,
                        std::nullopt);
    }
    const auto check_start = Clock::now();
    eval::VerifyResult measured = measure_lossy(*candidate);
    verify_seconds_ += seconds_since(check_start);
    RETURN_IF_ERROR(stopped());
    trial.measured = measured.status == eval::VerifyStatus::kVerified;
    trial.errors = measured.outputs;
    trial.tasks = measured.tasks;
    trial.verdict = lossy_verdict(measured, trial.gate, &trial.kept);
    if (!trial.kept) {
      held_.insert(at);
      excluded_[at] = trial.verdict;
      // Its findings (convert_fp16's nodes kept float32) still say what it saw.
      for (PassStats& s : run.passes)
        if (s.name == trial.pass) excluded_findings_[at] = std::move(s.explanations);
      lossy_trials_.push_back(std::move(trial));
      return absl::OkStatus();
    }
    return keep_lossy(at, std::move(trial), std::move(candidate), std::move(run), model,
                      std::move(measured));
  }

  static std::string unmeasured_by(const PipelineReport& report, const std::string& pass) {
    for (const PassStats& s : report.passes)
      if (s.name == pass && !s.unmeasured.empty()) return s.unmeasured;
    return "";
  }

  static bool changed_by(const PipelineReport& report, const std::string& pass) {
    for (const PassStats& s : report.passes)
      if (s.name == pass && s.changed_runs > 0) return true;
    return false;
  }

  // Keeps the trial's candidate and report; a pass that changed nothing is not listed among the
  // lossy passes of the result (VerificationReport::lossy_passes), only its verdict is kept.
  absl::Status keep_lossy(size_t at, LossyTrial trial, std::unique_ptr<ir::Model> candidate,
                          PipelineReport run, std::unique_ptr<ir::Model>& model,
                          std::optional<eval::VerifyResult> measured) {
    if (measured) kept_lossy_.push_back(specs_[at].name);
    verdicts_[specs_[at].name] = trial.verdict;
    lossy_trials_.push_back(std::move(trial));
    model = std::move(candidate);
    report_ = std::move(run);
    if (measured) result_ = std::move(*measured);
    return absl::OkStatus();
  }

  // What the gate decides for a measured lossy result ("accepted (...)" or "rolled back
  // (...)"); *kept says which.
  std::string lossy_verdict(const eval::VerifyResult& measured, const ErrorGate& gate,
                            bool* kept) const {
    *kept = false;
    if (measured.status == eval::VerifyStatus::kMismatch)
      return "rolled back (it broke the model: " + measured.message + ")";
    if (measured.status == eval::VerifyStatus::kNotVerifiable) {
      if (config_.accept_unmeasured_error) {
        *kept = true;
        return "accepted with its error not measured (accept_unmeasured_error): " +
               measured.message;
      }
      return "rolled back (error not measured (" + measured.message +
             "); accept_unmeasured_error keeps it)";
    }
    const std::string gate_text = gate_string(gate);
    // Task-level judgments first: a detector that lost its boxes is broken whatever its numbers.
    for (const eval::TaskResult& t : measured.tasks)
      if (t.judged && !t.passed)
        return absl::StrCat("rolled back (", eval::task_kind_name(t.kind), " of '", t.output, "' ",
                            t.figure, " under ", t.threshold, ": ", t.detail, ")");
    for (const auto& e : value_gated(measured)) {
      if (!(e.rel <= gate.max_rel))
        return absl::StrCat("rolled back (error rel ", e.rel, " in output '", e.name,
                            "' over gate ", gate_text, ")");
      if (!(e.cosine >= gate.min_cosine))
        return absl::StrCat("rolled back (error cosine ", e.cosine, " in output '", e.name,
                            "' under gate ", gate_text, ")");
    }
    *kept = true;
    std::string tasks;
    for (const eval::TaskResult& t : measured.tasks)
      absl::StrAppend(&tasks, "; ", eval::task_kind_name(t.kind), " of '", t.output,
                      "': ", t.detail);
    return absl::StrCat("accepted (error ", worst_error(value_gated(measured)), "; gate ",
                        gate_text, tasks, ")");
  }

  // The outputs held to the value gate: all but those a passed task judgment stands for (a
  // detection's boxes, a judged mask).
  static std::vector<eval::OutputError> value_gated(const eval::VerifyResult& measured) {
    std::set<std::string> by_task;
    for (const eval::TaskResult& t : measured.tasks)
      if (t.judged && t.passed)
        by_task.insert(t.replaces_value_gate.begin(), t.replaces_value_gate.end());
    std::vector<eval::OutputError> out;
    for (const auto& e : measured.outputs)
      if (!by_task.count(e.name)) out.push_back(e);
    return out;
  }

  static std::string gate_string(const ErrorGate& gate) {
    return absl::StrCat("rel <= ", gate.max_rel, ", cosine >= ", gate.min_cosine);
  }

  // "rel R in 'a', cosine C in 'b'": the worst of each over the float outputs.
  static std::string worst_error(const std::vector<eval::OutputError>& errors) {
    if (errors.empty()) return "none: no float output";
    const eval::OutputError* rel = &errors[0];
    const eval::OutputError* cos = &errors[0];
    for (const auto& e : errors) {
      if (e.rel > rel->rel) rel = &e;
      if (e.cosine < cos->cosine) cos = &e;
    }
    return absl::StrCat("rel ", rel->rel, " in '", rel->name, "', cosine ", cos->cosine, " in '",
                        cos->name, "'");
  }

  PipelineReport finish() {
    PipelineReport& report = *report_;
    if (!kept_lossy_.empty() && result_.status == eval::VerifyStatus::kVerified)
      result_.message = absl::StrCat("lossy (", absl::StrJoin(kept_lossy_, ", "),
                                     ") within its gate: ", worst_error(value_gated(result_)),
                                     "; measured on ", result_.message);
    VerificationReport& v = report.verification;
    v.requested = true;
    v.errors = result_.outputs;
    v.result = std::move(result_);
    v.lossy_passes = kept_lossy_;
    v.max_error = config_.max_error;
    v.lossy_trials = std::move(lossy_trials_);
    v.inputs = verifier_.inputs();
    if (lossy_verifier_ && lossy_verifier_->usable()) v.lossy_inputs = lossy_verifier_->inputs();
    for (PassStats& s : report.passes)
      if (auto it = verdicts_.find(s.name); it != verdicts_.end()) s.error_verdict = it->second;
    add_excluded_passes(report);
    report.nodes_before = original_->total_nodes();
    report.bytes_before = original_->initializer_bytes();
    v.seconds = verify_seconds_;
    report.seconds = seconds_since(start_);  // all runs, verification included
    return std::move(report);
  }

  // An excluded pass keeps its place in the stats, with the reason it was rolled back. Every
  // spec that ran is in the report in order, so inserting in increasing position puts each at
  // its index.
  void add_excluded_passes(PipelineReport& report) const {
    for (const auto& [at, reason] : excluded_) {
      report.verification.rolled_back.push_back(specs_[at].name);
      PassStats stats;
      stats.name = specs_[at].name;
      stats.rollbacks = 1;
      stats.rollback_reason = reason;
      if (specs_[at].lossy) stats.error_verdict = reason;
      if (auto it = excluded_findings_.find(at); it != excluded_findings_.end())
        stats.explanations = it->second;
      report.passes.insert(report.passes.begin() + static_cast<std::ptrdiff_t>(at),
                           std::move(stats));
    }
  }

  const std::vector<PassSpec>& specs_;
  const PipelineConfig& config_;
  const Clock::time_point start_;
  const std::unique_ptr<ir::Model> original_;
  RunLimits limits_;  // of the original, for every run, replay and trial (set in the constructor)
  const std::vector<eval::TaskGate> task_gates_;  // of the original (output_gates applied)
  const eval::Verifier verifier_;
  std::unique_ptr<eval::Verifier> lossy_verifier_;  // make_lossy_verifier
  const std::set<std::string> probability_outputs_;
  // Passes excluded by verification (by position in `specs_`), with the reason.
  std::map<size_t, std::string> excluded_;
  std::map<size_t, std::vector<RuleExplanation>> excluded_findings_;
  // Lossy passes (by position) sit out the exact verification and are then tried one at a time
  // on top of the exact passes (`held_`: not run by the current instances()).
  std::set<size_t> lossy_, held_;
  std::vector<size_t> run_specs_at_;      // position in `specs_` of each instance of the latest run
  double verify_seconds_ = 0;             // evaluator runs and bisection
  std::optional<PipelineReport> report_;  // of the run whose model is kept
  eval::VerifyResult result_;             // of that model
  std::vector<std::string> kept_lossy_;
  std::map<std::string, std::string> verdicts_;  // of the kept lossy passes, by name
  std::vector<LossyTrial> lossy_trials_;
};

bool any_lossy(const std::vector<PassSpec>& specs) {
  return std::any_of(specs.begin(), specs.end(), [](const PassSpec& s) { return s.lossy; });
}

absl::StatusOr<PipelineReport> run_specs_measured(std::unique_ptr<ir::Model>& model,
                                                  const std::vector<PassSpec>& specs,
                                                  const PipelineConfig& config) {
  // Given input sets are the client's bytes: checked against the model (as fixed) before any
  // work.
  RETURN_IF_ERROR(eval::check_input_sets(*model, config.verify_options.input_sets));
  RETURN_IF_ERROR(eval::check_input_sets(*model, config.calibration_sets, "calibration"));
  ASSIGN_OR_RETURN(std::vector<eval::TaskGate> task_gates,
                   eval::task_gates(*model, config.output_gates));
  if (config.verify || any_lossy(specs))
    return VerifiedPipeline(specs, config, model->clone(), std::move(task_gates)).run(model);
  std::vector<PassInstance> passes;
  for (const PassSpec& s : specs) passes.push_back({s.name, s.create(), s.options});
  return run_passes(model, std::move(passes), config);
}

}  // namespace

// The memory estimates wrap the run: they are of the model as given and as returned, whatever
// verification and rollbacks happened in between.
absl::StatusOr<PipelineReport> run_specs(std::unique_ptr<ir::Model>& model,
                                         const std::vector<PassSpec>& specs,
                                         const PipelineConfig& config) {
  // Fixing input dims changes the interface, so it comes before anything records it
  // (run_limits) or runs the model: the passes keep the fixed interface, and verification's
  // original is the fixed model (fixing narrows the inputs accepted; it computes nothing).
  std::vector<std::string> fixed_inputs;
  const bool verifies = config.verify || any_lossy(specs);
  RETURN_IF_ERROR(fix_input_dims(*model, config.fix_dims, config.fix_shapes, &fixed_inputs,
                                 verifies ? &config.verify_options : nullptr));
  // A layout change too: after the dims are fixed (they name the dims as the model declares
  // them), before anything records the interface.
  std::vector<std::string> layout_changes;
  const int64_t transposes_before = config.io_layout.empty() ? 0 : count_transposes(*model);
  RETURN_IF_ERROR(convert_io_layout(*model, config.io_layout, &layout_changes));
  DimBindings dims;
  const SizeRule rule = memory_size_rule(config, &dims);
  MemoryStats before = estimate_memory(*model, dims, rule.default_dim);
  ASSIGN_OR_RETURN(PipelineReport report, run_specs_measured(model, specs, config));
  report.memory_before = std::move(before);
  report.memory_after = estimate_memory(*model, dims, rule.default_dim);
  report.memory_dims = std::move(dims);
  report.memory_default_dim = rule.default_dim;
  report.fixed_inputs = std::move(fixed_inputs);
  if (!config.io_layout.empty()) {
    report.layout_changes = std::move(layout_changes);
    report.transposes_before = transposes_before;
    report.transposes_after = count_transposes(*model);
  }
  return report;
}

absl::StatusOr<PipelineReport> run_passes(std::unique_ptr<ir::Model>& model,
                                          std::vector<PassInstance> passes,
                                          const PipelineConfig& config) {
  const RunLimits limits = run_limits(*model, config);
  return FixedPointDriver(model, std::move(passes), limits, config).run(nullptr);
}

}  // namespace graft
