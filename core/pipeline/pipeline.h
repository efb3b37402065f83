// Runs passes in order, repeated to a fixed point, checking the model after every pass and
// rolling back any pass that fails, throws or leaves a broken graph.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <absl/status/statusor.h>

#include "core/analysis/memory.h"
#include "core/eval/verify.h"
#include "core/ir/fingerprint.h"
#include "core/ir/model.h"
#include "core/passes/pass.h"
#include "core/passes/target.h"

namespace graft {

struct PipelineConfig {
  int level = 2;  // used when `passes` is empty
  // The runtime the result is for (core/passes/target.h): passes that emit runtime-specific ops
  // (fuse_onnxruntime) run only for their target, and every pass may ask it.
  Target target;
  std::vector<std::string> passes;  // explicit ordered pass list
  // Per pass name, as text; checked against each pass's option schema by resolve_pipeline.
  std::map<std::string, PassOptions> pass_options;
  int max_rounds = 10;
  bool onnx_checker = false;     // run onnx::checker after each changing pass
  bool shape_inference = false;  // run strict ONNX shape inference after each changing pass
  std::string dump_dir;          // write the graph as ONNX text after each changing pass
  // Run the original and the optimized model on the reference evaluator and compare outputs;
  // on a mismatch, find the guilty pass by bisection, roll it back and optimize again.
  bool verify = false;
  eval::VerifyOptions verify_options;
  // Lossy passes (PassInfo::lossy: convert_fp16, quantize_dynamic_int8) always verify: the
  // pipeline measures the error each introduces against the original (eval::OutputError per
  // float output), reports it, and keeps the pass only when every output is within its gate:
  // the pass's own (PassInfo::gate), with max_error replacing its bound on OutputError::rel and
  // min_cosine its bound on OutputError::cosine when given. A lossy pass whose error cannot be
  // measured (the evaluator cannot run the model or its candidate) is rolled back unless
  // accept_unmeasured_error.
  //
  // Plain options: graft.proto's PipelineConfig fields declared with a (graft.v1.field) spec,
  // each a member of the field's name and type here, its zero value the default (generated
  // from the schema by proto/gen_plain_fields). Among them: target_opset (the default-domain
  // opset to raise the model to first, 0 keeps it: convert_opset runs first with it; 13..23, a
  // model above it or one raise_opset refuses is InvalidArgument), max_error, min_cosine and
  // accept_unmeasured_error.
#define GRAFT_PLAIN_FIELD(type, name) type name{};
#define GRAFT_PLAIN_OPTIONAL(type, name) std::optional<type> name;
#include "core/pipeline/plain_fields.inc"
#undef GRAFT_PLAIN_FIELD
#undef GRAFT_PLAIN_OPTIONAL
  // Inputs that lossy passes run the float model on to learn its value ranges (convert_fp16's
  // activations, quantize_static_int8's scales): at most eval::kMaxInputSets sets, each as a
  // verify input set (eval::check_input_sets, "calibration set N"). Without them those passes
  // see the verification's random inputs, and the pass's report says so
  // (PassStats::calibration).
  std::vector<std::map<std::string, eval::Tensor>> calibration_sets;
  // How lossy passes are judged per output beyond the value gate (eval/task_gate.h): the kinds
  // inferred from the model (detection groups, classification, masks), with these choices
  // applied. A spec naming no output of the model is InvalidArgument.
  std::vector<eval::OutputGateSpec> output_gates;
  // Sizes for the memory estimates of the report (PipelineReport::memory_before/after and each
  // pass's peak): symbolic dims by name from memory_dims, else from verify_options.dims; other
  // symbolic and unknown dims memory_default_dim, else verify_options.default_dim, else 1.
  DimBindings memory_dims;
  int64_t memory_default_dim = 0;
  // Polled between passes; a non-OK status stops the pipeline with that status.
  std::function<absl::Status()> should_continue;
  // For tests and fuzzing: a pass that reports "unchanged" must have left the model
  // byte-identical (verify_unchanged), else the pipeline fails with an Internal error naming the
  // pass rather than rolling it back, because the pass's report is wrong, not the model. Off in
  // production: it costs a clone and a serialization of the graphs (not the weights) per pass.
  bool check_unchanged = false;
  // For tests and fuzzing: every rule that returns false must leave the model as it found it
  // (RuleRunOptions::check_transactions); a violation fails the run with an Internal error.
  bool check_transactions = false;
  // Rules to explain, "PASS" (every rule of the pass) or "PASS/RULE": each node such a rule was
  // tried on and did not rewrite in the pass's last run is reported with the reason
  // (PassStats::explanations). Names are checked by resolve_pipeline.
  std::vector<std::string> explain;
  // Symbolic input dims made static before anything else (core/pipeline/fix_dims.h): by
  // dim_param name (every main-graph input dim of that name), and whole shapes by input name.
  // This changes the model's interface: the passes are held to the fixed one and verified
  // against the fixed model. Sizes 1..2^31, checked by resolve_pipeline; against the model by
  // run_specs (InvalidArgument).
  std::map<std::string, int64_t> fix_dims;
  std::map<std::string, std::vector<int64_t>> fix_shapes;
  // Inputs and outputs served in another layout, by name (core/pipeline/io_layout.h): "NHWC"
  // for a model computing in NCHW, and so on. Applied after fix_dims, before anything else; it
  // changes the interface as fix_dims does (the passes keep the converted one and are verified
  // against the converted model). Checked by resolve_pipeline; against the model by run_specs.
  std::map<std::string, std::string> io_layout;
};

// The most PipelineConfig::explain entries a request may give.
inline constexpr size_t kMaxExplain = 64;

struct PassStats {
  std::string name;
  int runs = 0;          // rounds in which the pass ran
  int changed_runs = 0;  // rounds in which it changed the model
  double seconds = 0;
  // Counts when the pass first ran, and those counts changed only by this pass's own runs
  // (other passes' effects in between are not attributed to it).
  size_t nodes_before = 0, nodes_after = 0;
  uint64_t bytes_before = 0, bytes_after = 0;  // initializer bytes, same convention
  // Estimated peak activation bytes (core/analysis/memory.h), same convention; 0 and 0 from
  // run_passes called directly (run_specs and run_pipeline fill them).
  uint64_t peak_before = 0, peak_after = 0;
  int64_t rewrites = 0;
  std::map<std::string, int64_t> rules;  // rewrites per rule (passes made of rules)
  int rollbacks = 0;
  std::string rollback_reason;  // of the first rollback
  // Runs stopped by the rule driver's rewrite cap with rules still applying (rules undoing each
  // other): the pass's result is valid but may not be its fixed point.
  int capped_runs = 0;
  // PipelineConfig::explain: the rules' reasons in the pass's last run.
  std::vector<RuleExplanation> explanations;
  int64_t explanations_dropped = 0;
  // A lossy pass: what its error gate decided, "accepted (error ...)" or "rolled back (...)".
  std::string error_verdict;
  // A pass that ran the model to learn its value ranges: on what ("3 calibration sets", or
  // "random inputs (no calibration data): ..." as a warning).
  std::string calibration;
  // PassResult::unmeasured of its last run.
  std::string unmeasured;
};

// One lossy pass tried on top of the exact passes: its error against the original per float
// output, the gate it was held to, and the decision.
struct LossyTrial {
  std::string pass;
  bool kept = false;
  bool measured = false;  // false: the error could not be measured (the verdict says why)
  ErrorGate gate{};
  std::vector<eval::OutputError> errors{};
  std::string verdict{};                  // as PassStats::error_verdict
  std::vector<eval::TaskResult> tasks{};  // task-level judgments (eval/task_gate.h)
};

struct VerificationReport {
  bool requested = false;
  eval::VerifyResult result;             // of the returned model
  std::vector<std::string> rolled_back;  // passes removed because they changed the outputs
  double seconds = 0;                    // evaluator runs and bisection
  // When lossy passes were asked for: those kept, the bound, and the returned model's error
  // against the original per float output (result.outputs holds the same).
  std::vector<std::string> lossy_passes;
  std::optional<double> max_error;
  std::vector<eval::OutputError> errors{};
  std::vector<LossyTrial> lossy_trials;  // every lossy pass tried, kept or not, in order
  // How the inputs were made: of the exact check (its sizes), and of the lossy passes' measure
  // (representative sizes; empty when no lossy pass ran or it could not run the model).
  std::vector<eval::InputNote> inputs, lossy_inputs;
};

struct PipelineReport {
  std::vector<PassStats> passes;
  int rounds = 0;
  bool reached_fixed_point = false;
  size_t nodes_before = 0, nodes_after = 0;
  uint64_t bytes_before = 0, bytes_after = 0;
  double seconds = 0;
  std::string checker_note;  // why ONNX checking was skipped, if it was asked for and skipped
  // value_info entries given an element type or dims they lacked (ir::refine_value_info).
  int value_info_refined = 0;
  std::string target;  // Target::str() of the config's target
  VerificationReport verification;
  // Memory of the input (with the input dims fix_dims/fix_shapes fixed) and of the result
  // (estimate_memory with the sizes below).
  MemoryStats memory_before, memory_after;
  DimBindings memory_dims;         // the symbolic dims bound (config's, then verification's)
  int64_t memory_default_dim = 1;  // the size of every other symbolic or unknown dim
  // PipelineConfig::fix_dims/fix_shapes: per input whose declaration changed, in input order,
  // "'x': [batch,3,H,W] -> [1,3,224,224]" (names from the model, cut to 200 bytes).
  std::vector<std::string> fixed_inputs;
  // PipelineConfig::io_layout: per value whose layout changed, inputs first, "input 'x': NCHW
  // [1,3,224,224] -> NHWC [1,224,224,3]"; and the Transpose nodes (every graph) of the model as
  // given and as returned (0 and 0 without io_layout).
  std::vector<std::string> layout_changes;
  int64_t transposes_before = 0, transposes_after = 0;
};

// The sizes the report's memory estimates use for `config` (see PipelineConfig::memory_dims).
SizeRule memory_size_rule(const PipelineConfig& config, DimBindings* storage);

// Optimizes `model` in place (it may be replaced by a snapshot on rollback).
// Errors: InvalidArgument for a bad config, fix_dims/fix_shapes that do not fit the model
// (fix_input_dims) or given verify input sets that do not (eval::check_input_sets); the
// should_continue status when stopped.
absl::StatusOr<PipelineReport> run_pipeline(std::unique_ptr<ir::Model>& model,
                                            const PipelineConfig& config);

struct PassSpec {
  std::string name;
  std::function<std::unique_ptr<Pass>()> create;
  OptionValues options;
  bool lossy = false;  // PassInfo::lossy: measured against its gate instead of verified exact
  ErrorGate gate{};    // PassInfo::gate with the config's overrides
};

// Validates a config and resolves it into the passes to run, in order, with their options
// parsed: the level or the pass names, every option given (also for passes the list does not
// run) against its pass's schema, and the rounds. InvalidArgument naming what is wrong.
absl::StatusOr<std::vector<PassSpec>> resolve_pipeline(const PipelineConfig& config);
// The names of resolve_pipeline's passes.
absl::StatusOr<std::vector<std::string>> resolve_passes(const PipelineConfig& config);

// Every pass option the config gives that sizes evaluator memory (OptionSpec::evaluator_memory)
// is at most the larger of its default and `grant`, the evaluator memory a server grants a
// request (named `grant_name` in the error): InvalidArgument naming the option otherwise.
// Options of unknown passes and values that do not parse are left to resolve_pipeline.
absl::Status check_evaluator_memory_options(const PipelineConfig& config, uint64_t grant,
                                            std::string_view grant_name);

// The pipeline over given passes (config.passes/level are ignored); honours config.verify, for
// which passes are re-created to replay a prefix of the run. config.fix_dims/fix_shapes are
// applied to `model` first (fix_input_dims), so everything after, the interface the passes must
// keep and the original verification compares with included, sees the fixed model.
absl::StatusOr<PipelineReport> run_specs(std::unique_ptr<ir::Model>& model,
                                         const std::vector<PassSpec>& specs,
                                         const PipelineConfig& config);

struct PassInstance {
  std::string name;
  std::unique_ptr<Pass> pass;
  OptionValues options;
};
// The fixed-point driver over already-built pass instances (config.passes/level and verify are
// ignored).
absl::StatusOr<PipelineReport> run_passes(std::unique_ptr<ir::Model>& model,
                                          std::vector<PassInstance> passes,
                                          const PipelineConfig& config);

// ONNX checker (+ strict shape inference) on a copy of the model. OK when libonnx does not know
// the model's IR version or opsets (best effort), with `skipped` set to the reason.
absl::Status onnx_check(const ir::Model& model, bool shape_inference, std::string* skipped);

}  // namespace graft
