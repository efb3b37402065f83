#include "core/passes/rules.h"

#include <algorithm>
#include <bitset>
#include <deque>
#include <string_view>
#include <unordered_map>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "core/base/status.h"
#include "core/ir/fingerprint.h"

namespace graft {

namespace {
thread_local NoMatchListener* t_no_match_listener = nullptr;
}  // namespace

NoMatchListener::NoMatchListener(const ir::Model& model, Callback callback)
    : model_(&model), callback_(std::move(callback)), outer_(t_no_match_listener) {
  t_no_match_listener = this;
}

NoMatchListener::~NoMatchListener() { t_no_match_listener = outer_; }

bool NoMatchListener::listening(const ir::Model& model) {
  return t_no_match_listener != nullptr && t_no_match_listener->model_ == &model;
}

NoMatch no_match(const ir::Node& at, std::string_view reason) {
  if (NoMatchListener::listening(*at.graph()->model())) t_no_match_listener->callback_(at, reason);
  return {};
}

namespace {

// Rules looked up by a node's op type. Most nodes match no rule: a 256-bit filter on the op
// name's length and end characters turns most of them away before their name is hashed.
class RuleIndex {
 public:
  explicit RuleIndex(const std::vector<Rule>& rules) {
    for (size_t i = 0; i < rules.size(); ++i)
      for (const std::string& op : rules[i].ops) {
        by_op_[op].push_back(i);
        maybe_.set(key(op));
      }
  }
  const std::vector<size_t>* rules_for(const ir::Node* n) const {
    const std::string& op = n->op_type();
    if (!maybe_.test(key(op))) return nullptr;
    auto it = by_op_.find(op);
    return it == by_op_.end() ? nullptr : &it->second;
  }

 private:
  static size_t key(std::string_view op) {
    return op.empty() ? 0
                      : (op.size() * 31 + static_cast<unsigned char>(op.front()) * 7 +
                         static_cast<unsigned char>(op.back())) &
                            255;
  }
  std::unordered_map<std::string_view, std::vector<size_t>> by_op_;
  std::bitset<256> maybe_;
};

bool applies_at(const Rule& r, const ir::Node& n) {
  if (r.domain.empty() ? !n.is_onnx_domain() : n.domain() != r.domain) return false;
  const int64_t opset = n.opset();
  return opset >= r.min_opset && opset <= r.max_opset;
}

std::string node_label(const ir::Node& n) {
  if (!n.name().empty()) return n.name();
  const ir::Value* out = n.output(0);
  return out ? out->name() : std::string();
}

// Collects the reasons rules give while one attempt runs, for the rules being explained.
class Explainer {
 public:
  Explainer(ir::Model& model, const std::vector<Rule>& rules, const std::vector<std::string>& names,
            RuleCounts& counts)
      : model_(model), counts_(counts) {
    const bool all = std::find(names.begin(), names.end(), "*") != names.end();
    for (const Rule& r : rules)
      wanted_.push_back(all || std::find(names.begin(), names.end(), r.name) != names.end());
  }

  // Starts listening for rule `i`'s attempt (if it is explained).
  void begin(size_t i) {
    reasons_.clear();
    listening_ = wanted_[i];
    if (!listening_) return;
    listener_.emplace(model_, [this](const ir::Node& at, std::string_view reason) {
      std::string r = std::string(reason);
      const std::string where = node_label(at);
      if (&at != root_ && !where.empty()) r = absl::StrCat(r, " (at ", where, ")");
      if (std::find(reasons_.begin(), reasons_.end(), r) == reasons_.end())
        reasons_.push_back(std::move(r));
    });
  }
  void set_root(const ir::Node* root) { root_ = root; }
  // The attempt of rule `i` at `root` did not rewrite. A node tried again (a neighbour's
  // rewrite re-queued it) keeps one entry, with the latest reason.
  void no_rewrite(size_t i, const Rule& rule, const ir::Node& root) {
    if (!listening_) return;
    stop();
    // A rule gives reasons from where the node looks like its pattern's root on: a node it
    // turns away at once (most Mul nodes for a Gelu rule) is not worth a line.
    if (reasons_.empty()) return;
    std::string reason = absl::StrJoin(reasons_, "; or ");
    auto [it, added] = at_.try_emplace({i, &root}, counts_.explanations.size());
    if (!added) {
      counts_.explanations[it->second].reason = std::move(reason);
      return;
    }
    if (counts_.explanations.size() >= kMaxExplanations) {
      at_.erase(it);
      ++counts_.explanations_dropped;
      return;
    }
    counts_.explanations.push_back(
        {rule.name, node_label(root), root.op_type(), root.graph()->name(), std::move(reason)});
  }
  // Rule `i` rewrote at `root`: an earlier reason there no longer holds.
  void rewrote(size_t i, const ir::Node& root) {
    stop();
    auto it = at_.find({i, &root});
    if (it != at_.end()) counts_.explanations[it->second].reason.clear();
  }
  // Drops the entries of nodes a rule rewrote in the end.
  void finish() {
    auto& all = counts_.explanations;
    all.erase(std::remove_if(all.begin(), all.end(),
                             [](const RuleExplanation& e) { return e.reason.empty(); }),
              all.end());
  }

 private:
  ir::Model& model_;
  RuleCounts& counts_;
  std::vector<bool> wanted_;
  std::vector<std::string> reasons_;
  void stop() {
    listener_.reset();
    listening_ = false;
  }
  const ir::Node* root_ = nullptr;
  bool listening_ = false;
  std::map<std::pair<size_t, const ir::Node*>, size_t> at_;  // (rule, node) -> entry
  std::optional<NoMatchListener> listener_;  // while an explained rule's attempt runs
};

}  // namespace

RuleCounts run_rules(ir::Model& model, const std::vector<Rule>& rules,
                     const RuleRunOptions& options) {
  const RuleIndex index(rules);
  RuleCounts counts;
  Explainer explainer(model, rules, options.explain, counts);
  Rewriter rw(model);
  // A FIFO worklist; a node's queued() flag keeps it there at most once.
  std::deque<ir::Node*> work;
  auto push = [&](ir::Node* n) {
    if (n && !n->dead() && !n->queued() && index.rules_for(n)) {
      n->set_queued(true);
      work.push_back(n);
    }
  };
  for (ir::Graph* g : model.all_graphs())
    for (ir::Node* n : g->nodes()) push(n);
  // What an attempt touched is queued only if the rule rewrote: a rule that gave up (its edits
  // undone) changed nothing that could make another rule apply.
  std::vector<ir::Node*> touched;
  rw.on_touch = [&](ir::Node* n) { touched.push_back(n); };

  // With check_transactions: the model's fingerprint at the generation it was taken.
  std::optional<ModelFingerprint> before;
  uint64_t before_generation = 0;

  // Rules that undo each other would loop forever; a correct rule set rewrites each node a
  // bounded number of times, far below this.
  std::vector<int64_t> applied(rules.size(), 0);
  const int64_t cap = 16 * static_cast<int64_t>(model.total_nodes()) + 1024;
  while (!work.empty() && counts.total < cap) {
    ir::Node* n = work.front();
    work.pop_front();
    n->set_queued(false);
    if (n->dead()) continue;
    for (size_t i : *index.rules_for(n)) {  // non-null: push() queues only these
      const Rule& r = rules[i];
      if (!applies_at(r, *n)) continue;
      if (options.check_transactions && (!before || before_generation != model.generation())) {
        before = fingerprint(model);
        before_generation = model.generation();
      }
      touched.clear();
      explainer.begin(i);
      explainer.set_root(n);
      Rewriter::Transaction transaction(rw);
      if (!r.apply(*n, rw)) {
        const bool edited = transaction.edited();
        transaction.rollback();
        explainer.no_rewrite(i, r, *n);
        if (options.check_transactions && model.generation() != before_generation) {
          counts.error = absl::InternalError(
              absl::StrCat("rule '", r.name, "' returned false at node '", node_label(*n),
                           "' and left the model changed (an edit made outside the rewriter)"));
          return counts;
        }
        if (options.check_transactions && edited) {
          if (auto st = verify_unchanged(r.name, *before, fingerprint(model)); !st.ok()) {
            counts.error = absl::InternalError(
                absl::StrCat("rule '", r.name, "' at node '", node_label(*n),
                             "': undoing its edits did not restore the model: ", st.message()));
            return counts;
          }
        }
        continue;
      }
      transaction.commit();
      explainer.rewrote(i, *n);
      ++applied[i];
      ++counts.total;
      for (ir::Node* t : touched) push(t);
      push(n);  // it may match again (or another rule may) if it survived
      break;
    }
  }
  explainer.finish();
  counts.capped = !work.empty();
  for (ir::Node* n : work) n->set_queued(false);

  for (size_t i = 0; i < rules.size(); ++i)
    if (applied[i] > 0) counts.rewrites[rules[i].name] += applied[i];
  return counts;
}

std::vector<std::string> RulePass::rule_names() const {
  if (make_rules_) return rule_names_;
  std::vector<std::string> names;
  for (const Rule& r : rules_) names.push_back(r.name);
  return names;
}

absl::StatusOr<PassResult> RulePass::run(ir::Model& model, PassContext& ctx) {
  RuleRunOptions options;
  options.explain = ctx.explain;
  options.check_transactions = ctx.check_transactions;
  RuleCounts counts = make_rules_ ? run_rules(model, make_rules_(model, ctx), options)
                                  : run_rules(model, rules_, options);
  RETURN_IF_ERROR(counts.error);
  PassResult result;
  result.add(counts.total);
  result.rules = std::move(counts.rewrites);
  result.capped = counts.capped;
  result.explanations = std::move(counts.explanations);
  result.explanations_dropped = counts.explanations_dropped;
  result.used_calibration = ctx.used_calibration;
  return result;
}

PassInfo describe(PassInfo info, std::initializer_list<std::vector<Rule> (*)()> make_rules) {
  info.create = [name = info.name, makers = std::vector(make_rules)]() -> std::unique_ptr<Pass> {
    std::vector<Rule> rules;
    for (auto make : makers)
      for (Rule& r : make()) rules.push_back(std::move(r));
    return std::make_unique<RulePass>(name, std::move(rules));
  };
  return info;
}

PassInfo describe(PassInfo info, RulePass::MakeRules make_rules,
                  std::vector<std::string> rule_names) {
  info.create = [name = info.name, make_rules = std::move(make_rules),
                 rule_names = std::move(rule_names)]() -> std::unique_ptr<Pass> {
    return std::make_unique<RulePass>(name, make_rules, rule_names);
  };
  return info;
}

}  // namespace graft
