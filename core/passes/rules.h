// Rules and the rule driver: most rewrites are "find this small pattern rooted at a node of op X,
// replace it". A rule declares its root op types and a match-then-rewrite function; the driver
// visits every graph (main, subgraphs, function bodies), dispatches nodes by op type, and after
// a rewrite re-queues the nodes the rewriter touched (new nodes, readers of replaced values,
// producers of inputs that lost a reader) instead of rescanning the whole model. Rewrites are
// counted per rule.
//
// Every rule runs inside a transaction (Rewriter::Transaction): when it returns false, whatever
// it edited is undone, so a rule may build its replacement and still give up. When it returns
// false it may say why (no_match), which `--explain` shows users.
//
// A pass made of rules is a RulePass (see docs/writing-a-pass.md):
//
//   std::vector<Rule> my_rules() {
//     return {{"add_zero", {"Add"}, [](ir::Node& add, Rewriter& rw) -> bool {
//       ir::Value* x = add.input(0);
//       if (!is_zero(add.input(1))) return no_match(add, "the second operand is not zero");
//       return rw.replace_node(&add, {x}, /*allow_identity=*/false);
//     }}};
//   }
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/passes/pass.h"
#include "core/passes/queries.h"
#include "core/passes/rewriter.h"

namespace graft {

struct Rule {
  using Apply = std::function<bool(ir::Node& root, Rewriter& rw)>;
  Rule(std::string name, std::vector<std::string> ops, Apply apply, std::string domain = "",
       int64_t min_opset = 1, int64_t max_opset = std::numeric_limits<int64_t>::max())
      : name(std::move(name)),
        ops(std::move(ops)),
        apply(std::move(apply)),
        domain(std::move(domain)),
        min_opset(min_opset),
        max_opset(max_opset) {}

  std::string name;
  std::vector<std::string> ops;  // root op types
  // Applies the rule at `root` (an op from `ops`, in `domain`, opset in range): returns true if it
  // rewrote something (through `rw` only), false if it did not match (changing nothing).
  Apply apply;
  std::string domain;  // "" is the ONNX domain
  int64_t min_opset;
  int64_t max_opset;
};

// Why a rule did not match: a value that converts to false, an empty optional or a null
// pointer, so a rule or one of its helpers can `return no_match(node, "...")` wherever it gives
// up. The reason reaches the driver when a user asked to explain the rule (--explain), and costs
// a pointer test otherwise. `at` is the node where the condition failed (the root or one of its
// operands' producers).
struct NoMatch {
  operator bool() const { return false; }  // NOLINT(google-explicit-constructor)
  template <typename T>
  operator std::optional<T>() const {  // NOLINT(google-explicit-constructor)
    return std::nullopt;
  }
  template <typename T>
  operator T*() const {  // NOLINT(google-explicit-constructor)
    return nullptr;
  }
};
NoMatch no_match(const ir::Node& at, std::string_view reason);

// Who hears why a rule did not match (no_match): the rule driver while a user asks to explain a
// rule (RuleRunOptions::explain), or a test. It listens on its thread while it lives, to nodes
// of one model; a listener made while another listens replaces it until it ends.
class NoMatchListener {
 public:
  using Callback = std::function<void(const ir::Node& at, std::string_view reason)>;
  NoMatchListener(const ir::Model& model, Callback callback);
  ~NoMatchListener();
  NoMatchListener(const NoMatchListener&) = delete;
  NoMatchListener& operator=(const NoMatchListener&) = delete;

  // Whether someone on this thread hears no_match at nodes of `model`.
  static bool listening(const ir::Model& model);

 private:
  friend NoMatch no_match(const ir::Node& at, std::string_view reason);
  const ir::Model* model_;
  Callback callback_;
  NoMatchListener* outer_;
};

// The same with a reason built only when someone listens (for reasons that format values).
template <typename MakeReason>
NoMatch no_match_with(const ir::Node& at, MakeReason&& make_reason) {
  if (NoMatchListener::listening(*at.graph()->model())) return no_match(at, make_reason());
  return {};
}

struct RuleRunOptions {
  // Rule names whose every attempt that did not rewrite is recorded with its reason ("*": every
  // rule). Empty: nothing is recorded.
  std::vector<std::string> explain;
  // For tests and fuzzing: after a rule returns false (and its edits are undone), the model must
  // be exactly as before the attempt; a difference fails the run with an Internal error naming
  // the rule.
  bool check_transactions = false;
};

struct RuleCounts {
  std::map<std::string, int64_t> rewrites;  // per rule name
  int64_t total = 0;
  // The driver stopped at its rewrite cap with work left (rules undoing each other).
  bool capped = false;
  std::vector<RuleExplanation> explanations;  // what RuleRunOptions::explain asked for
  int64_t explanations_dropped = 0;           // beyond kMaxExplanations
  absl::Status error;                         // a check_transactions violation
};

// At most this many explanations per run of the rules (the rest are counted).
inline constexpr size_t kMaxExplanations = 1000;

// Runs `rules` over every graph of `model` until none applies (or a safety cap on the number of
// rewrites, proportional to the model's size, stops a pair of rules undoing each other).
RuleCounts run_rules(ir::Model& model, const std::vector<Rule>& rules,
                     const RuleRunOptions& options = {});

// A pass made of rules. Its rules are fixed, or made per run from the pass's context (options,
// limits) and the model.
class RulePass : public Pass {
 public:
  using MakeRules = std::function<std::vector<Rule>(ir::Model&, const PassContext&)>;
  RulePass(std::string name, std::vector<Rule> rules)
      : name_(std::move(name)), rules_(std::move(rules)) {}
  // `rule_names`: the names of every rule make_rules may return.
  RulePass(std::string name, MakeRules make_rules, std::vector<std::string> rule_names)
      : name_(std::move(name)),
        make_rules_(std::move(make_rules)),
        rule_names_(std::move(rule_names)) {}
  std::string_view name() const override { return name_; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override;
  // Its rules' names (what --explain PASS/RULE accepts).
  std::vector<std::string> rule_names() const;

 private:
  std::string name_;
  std::vector<Rule> rules_;
  MakeRules make_rules_;
  std::vector<std::string> rule_names_;
};

// `info` with `create` making a RulePass named `info.name` whose rules are those `make_rules`
// return, in order (called for each pass made): `PassInfo x_pass() { return describe({.name =
// "x", ...}, {x_rules}); }`.
PassInfo describe(PassInfo info, std::initializer_list<std::vector<Rule> (*)()> make_rules);
// The same for rules made per run from the pass's context (RulePass's MakeRules), with the names
// of every rule `make_rules` may return.
PassInfo describe(PassInfo info, RulePass::MakeRules make_rules,
                  std::vector<std::string> rule_names);

}  // namespace graft
