#include "core/passes/rules.h"

#include <bitset>
#include <deque>
#include <string_view>
#include <unordered_map>

namespace graft {

RuleCounts run_rules(ir::Model& model, const std::vector<Rule>& rules) {
  // Dispatch by op type. Most nodes match no rule: a 256-bit filter on the op name's length and
  // end characters turns most of them away before their name is hashed.
  std::unordered_map<std::string_view, std::vector<size_t>> by_op;
  std::bitset<256> maybe;
  auto filter_key = [](std::string_view op) -> size_t {
    return op.empty() ? 0
                      : (op.size() * 31 + static_cast<unsigned char>(op.front()) * 7 +
                         static_cast<unsigned char>(op.back())) &
                            255;
  };
  for (size_t i = 0; i < rules.size(); ++i)
    for (const std::string& op : rules[i].ops) {
      by_op[op].push_back(i);
      maybe.set(filter_key(op));
    }
  auto rules_for = [&](const ir::Node* n) -> const std::vector<size_t>* {
    const std::string& op = n->op_type();
    if (!maybe.test(filter_key(op))) return nullptr;
    auto it = by_op.find(op);
    return it == by_op.end() ? nullptr : &it->second;
  };

  Rewriter rw(model);
  // A FIFO worklist; a node's queued() flag keeps it there at most once.
  std::deque<ir::Node*> work;
  auto push = [&](ir::Node* n) {
    if (n && !n->dead() && !n->queued() && rules_for(n)) {
      n->set_queued(true);
      work.push_back(n);
    }
  };
  rw.on_touch = push;
  for (ir::Graph* g : model.all_graphs())
    for (ir::Node* n : g->nodes()) push(n);

  // Rules that undo each other would loop forever; a correct rule set rewrites each node a
  // bounded number of times, far below this.
  std::vector<int64_t> applied(rules.size(), 0);
  int64_t total = 0;
  const int64_t cap = 16 * static_cast<int64_t>(model.total_nodes()) + 1024;
  while (!work.empty() && total < cap) {
    ir::Node* n = work.front();
    work.pop_front();
    n->set_queued(false);
    if (n->dead()) continue;
    const std::vector<size_t>* candidates = rules_for(n);  // non-null: push() queues only these
    const bool onnx_domain = n->is_onnx_domain();
    const int64_t opset = n->opset();
    for (size_t i : *candidates) {
      const Rule& r = rules[i];
      if (r.domain.empty() ? !onnx_domain : n->domain() != r.domain) continue;
      if (opset < r.min_opset || opset > r.max_opset) continue;
      if (!r.apply(*n, rw)) continue;
      ++applied[i];
      ++total;
      push(n);  // it may match again (or another rule may) if it survived
      break;
    }
  }
  for (ir::Node* n : work) n->set_queued(false);  // stopped by the cap

  RuleCounts counts;
  counts.total = total;
  for (size_t i = 0; i < rules.size(); ++i)
    if (applied[i] > 0) counts.rewrites[rules[i].name] += applied[i];
  return counts;
}

absl::StatusOr<PassResult> RulePass::run(ir::Model& model, PassContext&) {
  PassResult result;
  RuleCounts counts = run_rules(model, rules_);
  result.add(counts.total);
  result.rules = std::move(counts.rewrites);
  return result;
}

namespace m {

Pattern Pattern::one_use() const {
  return Pattern([f = fn_](ir::Value* v) { return single_use(v) && f(v); });
}

Pattern Pattern::bind(ir::Value** out) const {
  return Pattern([f = fn_, out](ir::Value* v) {
    if (!f(v)) return false;
    *out = v;
    return true;
  });
}

OpPattern OpPattern::commutative() && {
  commutative_ = true;
  return std::move(*this);
}

OpPattern OpPattern::exact() && {
  exact_ = true;
  return std::move(*this);
}

OpPattern OpPattern::bind(ir::Node** out) && {
  bind_ = out;
  return std::move(*this);
}

OpPattern OpPattern::where(std::function<bool(const ir::Node&)> cond) && {
  cond_ = std::move(cond);
  return std::move(*this);
}

bool OpPattern::match_node(ir::Node& n) const {
  if (n.dead() || !n.is(op_)) return false;
  const size_t count = operands_.size();
  if (n.inputs().size() < count || (exact_ && n.inputs().size() != count)) return false;
  if (cond_ && !cond_(n)) return false;
  auto in_order = [&](bool swapped) {
    for (size_t i = 0; i < count; ++i) {
      size_t k = swapped && count == 2 ? 1 - i : i;
      if (!operands_[i](n.input(k))) return false;
    }
    return true;
  };
  if (!in_order(false) && !(commutative_ && count == 2 && in_order(true))) return false;
  if (bind_) *bind_ = &n;
  return true;
}

OpPattern::operator Pattern() const {
  return Pattern([self = *this](ir::Value* v) {
    if (!v || v->dead()) return false;
    ir::Node* p = v->producer();
    return p && v->producer_index() == 0 && self.match_node(*p);
  });
}

OpPattern Op(std::string op, std::vector<Pattern> operands) {
  return OpPattern(std::move(op), std::move(operands));
}

Pattern Any(ir::Value** out) {
  return Pattern([out](ir::Value* v) {
    if (!v || v->dead()) return false;
    if (out) *out = v;
    return true;
  });
}

Pattern Is(const ir::Value* want) {
  return Pattern([want](ir::Value* v) { return v && v == want; });
}

Pattern Const(ir::Value** out) {
  return Pattern([out](ir::Value* v) {
    if (!is_constant_value(v)) return false;
    if (out) *out = v;
    return true;
  });
}

Pattern ConstAll(int64_t value, ir::Value** out) {
  return Pattern([value, out](ir::Value* v) {
    auto t = constant_tensor(v);
    if (!t || !all_equal(*t, value)) return false;
    if (out) *out = v;
    return true;
  });
}

Pattern Scalar(double* out) {
  return Pattern([out](ir::Value* v) {
    auto s = constant_scalar(v);
    if (!s) return false;
    if (out) *out = *s;
    return true;
  });
}

}  // namespace m

}  // namespace graft
