// The pass contract: a pass rewrites a Model in place and reports whether it changed anything.
// A pass recurses into every graph it can rewrite (main graph, subgraphs, function bodies) and
// never touches what it does not understand (unknown domains, custom ops).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include "core/eval/kernel.h"
#include "core/ir/model.h"
#include "core/passes/options.h"
#include "core/passes/target.h"

namespace graft {

// Why a rule did not rewrite at a node it was tried on (`--explain`).
struct RuleExplanation {
  std::string rule;
  std::string node;    // the root node's name (its first output's name if it has none)
  std::string op;      // the root node's op type
  std::string graph;   // the name of the graph holding it ("" for the main graph's)
  std::string reason;  // the first condition that failed, and where, as the rule says it
};

struct PassResult {
  bool changed = false;
  int64_t rewrites = 0;  // pass-defined unit: nodes removed, nodes fused, tensors merged...
  std::map<std::string, int64_t> rules;  // rewrites per rule, for passes made of rules
  // Rule passes: the driver stopped at its rewrite cap with rules still applying.
  bool capped = false;
  std::vector<RuleExplanation> explanations;  // PassContext::explain
  int64_t explanations_dropped = 0;
  // The explanations are findings every report shows, asked for or not (convert_fp16's nodes
  // kept in float32 and why).
  bool always_explained = false;
  // The pass ran the model on PassContext::calibration (the report says on what).
  bool used_calibration = false;
  // Non-empty: the pass had work it did not do because the model could not be run (no
  // calibration inputs, the float model failed on them), and why. A lossy pass so stopped has
  // its error "not measured", not "changed nothing" (PassStats::unmeasured).
  std::string unmeasured;
  // Adds a finding about the whole model (node "model") and makes the explanations findings
  // every report shows.
  void add_model_finding(std::string rule, std::string reason, std::string op = "") {
    explanations.push_back({.rule = std::move(rule),
                            .node = "model",
                            .op = std::move(op),
                            .graph = "",
                            .reason = std::move(reason)});
    always_explained = true;
  }
  void add(int64_t n = 1) {
    rewrites += n;
    changed = changed || n > 0;
  }
};

// Inputs a pass may run the model on (convert_fp16: the activation ranges): the pipeline's
// verification inputs, one map of graph input name to tensor per set, with the evaluator limits
// for a run.
struct CalibrationInputs {
  const std::vector<std::map<std::string, eval::Tensor>>* sets = nullptr;
  eval::Limits limits;
  // The sets are the verification's random inputs, not calibration data from the request
  // (PipelineConfig::calibration_sets): ranges learned from them may not be the real data's.
  bool random = true;
};

class PassContext {
 public:
  // `options` were checked against the pass's schema when the pipeline was configured.
  explicit PassContext(const OptionValues& options) : options_(options) {}
  const OptionValues& options() const { return options_; }
  int64_t int_option(std::string_view name) const { return options_.integer(name); }
  bool bool_option(std::string_view name) const { return options_.boolean(name); }
  const std::string& enum_option(std::string_view name) const { return options_.choice(name); }
  const std::vector<std::string>& list_option(std::string_view name) const {
    return options_.list(name);
  }

  // The most initializer bytes (all graphs) the model may hold when the pass ends; 0 = no limit.
  // Set by the pipeline from the input's size, so a small model cannot fold itself into
  // gigabytes of constants one fold at a time. Passes that create weights stop adding at it.
  uint64_t max_weight_bytes = 0;
  // Rules of this pass to explain (their names, "*" for all): each attempt that did not rewrite
  // is reported with its reason (PassResult::explanations).
  std::vector<std::string> explain;
  // Tests and fuzzing (PipelineConfig::check_unchanged): a rule that returns false must leave
  // the model as it found it, checked after every such attempt.
  bool check_transactions = false;
  // Set by the pipeline for lossy passes when verification has inputs; nullptr otherwise.
  const CalibrationInputs* calibration = nullptr;
  // Set by a pass (or its rule maker, which sees a const context) that ran the model on
  // `calibration`; RulePass copies it into PassResult::used_calibration.
  mutable bool used_calibration = false;
  // The runtime the result is for (PipelineConfig::target).
  Target target;

 private:
  const OptionValues& options_;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  virtual absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) = 0;
};

class Rewriter;  // core/passes/rewriter.h

// A pass that does the same to each graph on its own: run() calls run_graph on every graph of
// Model::all_graphs() (the main graph, function bodies and nested subgraphs, parents first), all
// edited through one Rewriter and counted in one PassResult, and stops at the first error. A
// pass whose loop does more (its own order or set of graphs, state across graphs, work on the
// whole model before or after) implements run() itself.
class PerGraphPass : public Pass {
 public:
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) final;

 protected:
  virtual absl::Status run_graph(ir::Graph& graph, Rewriter& rw, PassContext& ctx,
                                 PassResult& result) = 0;
};

// The error a lossy pass's result may have in every float output of the model to be kept
// (eval::OutputError): the worst absolute difference over the original output's largest
// magnitude at most `max_rel`, and the cosine similarity of the two outputs at least
// `min_cosine`. NaN or infinity in an error fails it.
struct ErrorGate {
  double max_rel = 0;
  double min_cosine = 1;
};

// What a pass is, declared once at the end of its own file (core/passes/<name>.cc) and listed
// in pipeline order by registry.cc.
struct PassInfo {
  std::string name;
  int level = 1;  // lowest optimization level that runs this pass (1..3)
  // Changes the model's numbers on purpose (precision: float16, int8). Runs only when a request
  // names it or asks for a level that includes it; the pipeline then measures the error it
  // introduced (verification) instead of holding it to the exact passes' tolerances.
  bool lossy = false;
  // A lossy pass's default error gate (PipelineConfig::max_error and min_cosine override it):
  // a result outside it, or whose error cannot be measured, is rolled back.
  ErrorGate gate{};
  // Runs only when a request names it: no level includes it (`level` is then informational).
  bool by_name_only = false;
  // Emits ops of one runtime only (fuse_onnxruntime): levels run it for that target only, and
  // naming it for another target is an error.
  std::optional<Target::Kind> target = std::nullopt;
  std::string description;
  std::vector<OptionSpec> options;
  // Makes the pass: set by describe() (`{}`, so a descriptor leaves it out without a warning).
  std::function<std::unique_ptr<Pass>()> create{};
};

// `info` with `create` making a P from copies of `args` (each pass made gets its own copies):
// the end of a pass's file is `PassInfo x_pass() { return describe<X>({.name = "x", ...}); }`.
// A pass made of rules uses the overloads in rules.h.
template <typename P, typename... Args>
PassInfo describe(PassInfo info, Args... args) {
  info.create = [... args = std::move(args)]() -> std::unique_ptr<Pass> {
    return std::make_unique<P>(args...);
  };
  return info;
}

}  // namespace graft
