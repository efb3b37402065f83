// Rules and the rule driver: most rewrites are "find this small pattern rooted at a node of op X,
// replace it". A rule declares its root op types and a match-then-rewrite function; the driver
// visits every graph (main, subgraphs, function bodies), dispatches nodes by op type, and after
// a rewrite re-queues the nodes the rewriter touched (new nodes, readers of replaced values,
// producers of inputs that lost a reader) instead of rescanning the whole model. Rewrites are
// counted per rule.
//
// A pass made of rules is a RulePass (see docs/writing-a-pass.md):
//
//   std::vector<Rule> my_rules() {
//     return {{"add_zero", {"Add"}, [](ir::Node& add, Rewriter& rw) {
//       ir::Value* x = nullptr;
//       if (!match(add, m::Op("Add", {m::Any(&x), m::Zero()}).commutative())) return false;
//       return rw.replace_node(&add, {x}, /*allow_identity=*/false);
//     }}};
//   }
//
// The small matcher (namespace m) expresses operand trees with captures, constants, single use
// and commutative operands in one expression.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
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

struct RuleCounts {
  std::map<std::string, int64_t> rewrites;  // per rule name
  int64_t total = 0;
};

// Runs `rules` over every graph of `model` until none applies (or a safety cap on the number of
// rewrites, proportional to the model's size, stops a pair of rules undoing each other).
RuleCounts run_rules(ir::Model& model, const std::vector<Rule>& rules);

// A pass made of rules.
class RulePass : public Pass {
 public:
  RulePass(std::string name, std::vector<Rule> rules)
      : name_(std::move(name)), rules_(std::move(rules)) {}
  std::string_view name() const override { return name_; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override;
  const std::vector<Rule>& rules() const { return rules_; }

 private:
  std::string name_;
  std::vector<Rule> rules_;
};

// ---------------------------------------------------------------------------------------------
// The matcher. A Pattern matches a value; node patterns match the value's producer and its
// operands. Captures are written while matching: they are meaningful only when the whole match
// returned true.
namespace m {

class Pattern {
 public:
  using Fn = std::function<bool(ir::Value*)>;
  explicit Pattern(Fn fn) : fn_(std::move(fn)) {}
  bool operator()(ir::Value* v) const { return fn_(v); }
  // Also requires the value to have exactly one reader and not be a graph output.
  Pattern one_use() const;
  // Also captures the value.
  Pattern bind(ir::Value** out) const;

 private:
  Fn fn_;
};

// A node pattern: op type (ONNX domain), operand patterns (fewer operands than the node's inputs
// leave the rest unconstrained unless exact()).
class OpPattern {
 public:
  OpPattern(std::string op, std::vector<Pattern> operands)
      : op_(std::move(op)), operands_(std::move(operands)) {}
  // The two operands may appear in either order (both orders are tried).
  OpPattern commutative() &&;
  // The node has exactly as many inputs as operand patterns.
  OpPattern exact() &&;
  // Captures the node.
  OpPattern bind(ir::Node** out) &&;
  // As an operand read by nobody else (see Pattern::one_use).
  Pattern one_use() const { return Pattern(*this).one_use(); }
  // Extra condition on the node (attributes, opset...).
  OpPattern where(std::function<bool(const ir::Node&)> cond) &&;
  // Matches `n` itself (its op and operands).
  bool match_node(ir::Node& n) const;
  // As an operand: matches a value whose producer matches.
  operator Pattern() const;  // NOLINT(google-explicit-constructor)

 private:
  std::string op_;
  std::vector<Pattern> operands_;
  bool commutative_ = false;
  bool exact_ = false;
  ir::Node** bind_ = nullptr;
  std::function<bool(const ir::Node&)> cond_;
};

OpPattern Op(std::string op, std::vector<Pattern> operands = {});
// Any present value (captured when `out` is given).
Pattern Any(ir::Value** out = nullptr);
// The exact value `v`.
Pattern Is(const ir::Value* v);
// A constant (initializer or Constant node), optionally decoded into `out`.
Pattern Const(ir::Value** out = nullptr);
// A constant whose every element equals `value` (any numeric type).
Pattern ConstAll(int64_t value, ir::Value** out = nullptr);
// A constant with one element; its value (as a double) into `out`.
Pattern Scalar(double* out = nullptr);

}  // namespace m

// Whether node `n` matches the pattern.
inline bool match(ir::Node& n, const m::OpPattern& p) { return p.match_node(n); }
inline bool match(ir::Value* v, const m::Pattern& p) { return v && p(v); }

}  // namespace graft
