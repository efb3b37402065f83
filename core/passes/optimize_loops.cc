// optimize_loops: loop-invariant code motion for Loop and Scan bodies, as Grappler's
// LoopOptimizer does for TensorFlow's while loops. A body node whose inputs are all loop
// invariant (values of an enclosing graph, the body's own constants, or results of other
// invariant nodes) computes the same value on every iteration; it moves out of the body, before
// the loop, into the loop's graph, and the body reads its result from there (ONNX bodies read
// enclosing values by name). Exported decoders carry such nodes: a cross-attention's key and
// value projections of the encoder's output, a mask built from an outer length, a weight
// transposed per step.
//
//   y = Loop (M, cond, v) <body = (i, c, v_in) => (c_out, v_out) {
//         t = Mul (outer_a, outer_b)          // invariant: both outer values
//         w = Add (t, body_constant)          // invariant: t and a body constant
//         v_out = Add (v_in, w)               // reads a carried value: stays
//       }>
//   ->
//   t = Mul (outer_a, outer_b)
//   w = Add (t, body_constant')               // the constant moved out with it
//   y = Loop (M, cond, v) <body = (i, c, v_in) => (c_out, v_out) { v_out = Add (v_in, w) }>
//
// Exact: the moved nodes compute the same values from the same inputs, once instead of once per
// iteration. But once also when the loop would have run zero times, where a moved node that
// fails (a Reshape to an impossible shape, a Gather out of range) would fail a model that did
// not; so a body is only emptied of all its invariants when it provably runs at least once:
//   - Loop: the trip count is absent or a constant >= 1, and the initial condition absent or a
//     constant true;
//   - Scan (opset 9+): some scan input has a known length of at least 1 along its scan axis.
// Otherwise (a trip count read from an input, as a decoder's maximum length is) only invariant
// nodes that cannot fail move (cannot_fail: elementwise math on operands that broadcast whatever
// their sizes, products whose inner dims are the same, Transpose, Softmax, Cast...); a loop that
// then runs zero times computes them once for nothing, at most one iteration's cost. If none
// qualifies the rule says why. Not moved: nodes with subgraphs (a nested
// Loop or If stays whole; its own invariants are moved out of it first, into this body, and
// from there further when they are invariant here too), nondeterministic nodes (a random
// generator draws anew per iteration), and Constant nodes that no moved node reads (nothing to
// gain). A body constant that a moved node reads moves out with it (the body's remaining readers
// read the moved copy: the node count never rises); a moved value the body returns as an output
// is returned through an Identity (an ONNX graph's outputs are its own values).
//
// Rule fold_single_trip: a Loop whose trip count is a constant 1 (initial condition absent or a
// constant true) runs its body exactly once; the body's nodes take its place, reading the
// iteration number 0, the condition and the initial carried values; its scan outputs are the
// body's one value each, Unsqueezed to a leading axis of 1. Exporters leave such Loops where a
// Python loop ran once at export time, and unrolling leaves a remainder of one; inlined, the
// body's nodes meet the rest of the graph's folding and fusions.
//
// Rule fold_zero_trip: a Loop whose trip count is a constant of at most 0, or whose initial
// condition is a constant false, never runs its body (the condition is tested before the first
// iteration): its carried outputs are their initial values and each scan output read is an
// empty tensor [0, per-iteration dims], made only when the body's per-iteration value has a
// known element type and static dims (else the rule says why and the Loop stays).

#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <absl/strings/str_cat.h>

#include "core/ir/op_params.h"
#include "core/passes/passes.h"
#include "core/passes/queries.h"
#include "core/passes/rules.h"

namespace graft {

namespace {

ir::Graph* body_of(const ir::Node& n) {
  for (const auto& sub : n.subgraphs())
    if (sub.attr_name == "body" && sub.index == -1) return sub.graph.get();
  return nullptr;
}

bool is_loop(const ir::Node& n) { return n.is("Loop") || n.is("Scan"); }

// Why the body of `loop` may run zero times; empty when it provably runs at least once.
std::string zero_trip_reason(const ir::Node& loop) {
  if (loop.is("Loop")) {
    if (const ir::Value* m = loop.input(0)) {
      const auto trips = ir::constant_ints(m);
      if (!trips || trips->size() != 1) return "the trip count is not a constant";
      if ((*trips)[0] < 1) return "the trip count is below 1";
    }
    if (const ir::Value* cond = loop.input(1)) {
      const auto go = ir::constant_ints(cond);
      if (!go || go->size() != 1) return "the initial condition is not a constant";
      if ((*go)[0] == 0) return "the initial condition is false";
    }
    return "";
  }
  if (loop.opset() < 9) return "Scan-8 (a batch axis and sequence lengths) is not handled";
  const int64_t scans = loop.attr_int("num_scan_inputs", -1);
  const auto count = static_cast<int64_t>(loop.inputs().size());
  if (scans < 1 || scans > count) return "num_scan_inputs is not a count of its inputs";
  const auto axes = loop.attr_ints("scan_input_axes");
  for (int64_t k = 0; k < scans; ++k) {
    const ir::Value* x = loop.input(static_cast<size_t>(count - scans + k));
    if (!x || !x->fact().has_rank) continue;
    const auto rank = static_cast<int64_t>(x->fact().dims.size());
    const int64_t axis = axes && static_cast<int64_t>(axes->size()) == scans ? (*axes)[k] : 0;
    const auto a = ir::normalize_axis(axis, rank);
    if (!a) continue;
    const ir::Dim& d = x->fact().dims[static_cast<size_t>(*a)];
    if (d.known() && d.value >= 1) return "";
  }
  return "no scan input has a known length of at least 1";
}

bool same_dim(const ir::Dim& a, const ir::Dim& b) {
  if (a.known() || b.known()) return a.value == b.value;
  return a.is_symbol() && b.is_symbol() && a.symbol == b.symbol && a.anonymous == b.anonymous;
}

// Whether `small` broadcasts onto `big` whatever the sizes at run time: each of its dims (from
// the right) is 1 or the same as big's.
bool broadcasts_onto(const ir::TensorFact& small, const ir::TensorFact& big) {
  if (!small.has_rank || !big.has_rank || small.dims.size() > big.dims.size()) return false;
  for (size_t i = 0; i < small.dims.size(); ++i) {
    const ir::Dim& d = small.dims[small.dims.size() - 1 - i];
    if (!(d.known() && d.value == 1) && !same_dim(d, big.dims[big.dims.size() - 1 - i]))
      return false;
  }
  return true;
}

// Whether `n` cannot fail at run time on inputs of the kinds its facts say: elementwise math on
// operands that broadcast whatever their sizes, products whose inner dims are the same, moves
// of a known rank. What may move out of a body that can run zero times: there it runs once for
// nothing (its cost, bounded by one iteration's), but never makes a model fail that did not.
bool cannot_fail(const ir::Node& n) {
  static const std::unordered_set<std::string> kUnary = {
      "Abs", "Cast", "Erf", "Exp", "Identity", "Neg", "Relu", "Shape", "Sigmoid", "Size", "Tanh"};
  if (!n.is_onnx_domain()) return false;
  if (n.is("Cast") && (!n.input(0) || n.input(0)->elem_type() == onnx::TensorProto::STRING ||
                       n.input(0)->elem_type() == 0))
    return false;  // a string that does not parse as a number fails
  if (n.is("Constant") || kUnary.count(n.op_type())) return true;
  const ir::Value* a = n.input(0);
  const ir::Value* b = n.input(1);
  if (n.is("Add") || n.is("Sub") || n.is("Mul") || n.is("Div")) {
    if (!a || !b || n.inputs().size() != 2) return false;
    if (n.is("Div") && !is_float_type(a->elem_type())) return false;  // integer division by 0
    return broadcasts_onto(a->fact(), b->fact()) || broadcasts_onto(b->fact(), a->fact());
  }
  if (n.is("MatMul")) {
    if (!a || !b) return false;
    const ir::TensorFact &fa = a->fact(), &fb = b->fact();
    if (!fa.has_rank || !fb.has_rank || fa.dims.size() < 2 || fb.dims.size() < 2) return false;
    if (!same_dim(fa.dims.back(), fb.dims[fb.dims.size() - 2])) return false;
    if (fb.dims.size() == 2) return true;
    if (fa.dims.size() != fb.dims.size()) return false;
    for (size_t i = 0; i + 2 < fa.dims.size(); ++i)
      if (!same_dim(fa.dims[i], fb.dims[i])) return false;
    return true;
  }
  if (n.is("Transpose") || n.is("Softmax") || n.is("LogSoftmax")) {
    const auto rank = a ? a->rank() : std::nullopt;
    if (!rank) return false;
    if (n.is("Transpose")) {
      const auto perm = n.attr_ints("perm");
      return !perm || static_cast<int64_t>(perm->size()) == *rank;
    }
    return ir::normalize_axis(n.attr_int("axis", -1), *rank).has_value();
  }
  return false;
}

// The nodes of `body` that compute the same value on every iteration, in topological order
// (with `cannot_fail_only`, those that also cannot fail, and what only they feed).
std::vector<ir::Node*> invariant_nodes(const ir::Graph& body, bool cannot_fail_only = false) {
  std::unordered_set<const ir::Node*> invariant;
  std::vector<ir::Node*> order;
  auto invariant_value = [&](const ir::Value* v) {
    if (v == nullptr || v->owner() != &body) return true;  // absent, or an enclosing value
    if (v->is_constant()) return true;
    return v->producer() != nullptr && invariant.count(v->producer()) > 0;
  };
  for (ir::Node* n : body.nodes()) {
    if (!n->subgraphs().empty() || is_nondeterministic(*n)) continue;
    if (cannot_fail_only && !cannot_fail(*n)) continue;
    // An Identity the body returns an enclosing value through (what a move leaves behind).
    if (n->is("Identity") && n->output(0) && n->output(0)->is_output_of(body)) continue;
    bool all = true;
    for (const ir::Value* v : n->inputs()) all = all && invariant_value(v);
    if (!all) continue;
    invariant.insert(n);
    order.push_back(n);
  }
  // Constant nodes only move with a moved reader.
  std::unordered_set<const ir::Node*> read;
  for (const ir::Node* n : order)
    if (!n->is("Constant"))
      for (const ir::Value* v : n->inputs())
        if (v && v->producer()) read.insert(v->producer());
  std::vector<ir::Node*> moved;
  for (ir::Node* n : order)
    if (!n->is("Constant") || read.count(n)) moved.push_back(n);
  return moved;
}

// Moves the invariant nodes of `loop`'s body (after those of the loops directly in it) into the
// loop's graph. True if something moved.
bool hoist(ir::Node& loop, Rewriter& rw, int depth = 0) {
  ir::Graph* body = body_of(loop);
  if (body == nullptr) return no_match(loop, "no body");
  bool changed = false;
  if (depth < 64)
    for (ir::Node* n : body->nodes())
      if (!n->dead() && is_loop(*n)) changed = hoist(*n, rw, depth + 1) || changed;
  auto worth = [](const std::vector<ir::Node*>& nodes) {
    return std::any_of(nodes.begin(), nodes.end(),
                       [](const ir::Node* n) { return !n->is("Constant"); });
  };
  std::vector<ir::Node*> moved = invariant_nodes(*body);
  if (!worth(moved)) return changed || no_match(loop, "no body node is loop invariant");
  if (const std::string why = zero_trip_reason(loop); !why.empty()) {
    // Only what cannot fail moves: where the loop does not run, it runs for nothing.
    moved = invariant_nodes(*body, /*cannot_fail_only=*/true);
    if (!worth(moved))
      return changed || no_match(loop, absl::StrCat("the body may run zero times (", why,
                                                    "), and no invariant node is one that "
                                                    "cannot fail: a moved node would run, and "
                                                    "could fail, where the loop does not"));
  }
  ir::Graph& g = *loop.graph();
  // Body constants the moved nodes read -> their copies in `g`.
  std::unordered_map<const ir::Value*, ir::Value*> copies;
  std::vector<ir::Value*> moved_constants;
  for (const ir::Node* n : moved)
    for (ir::Value* v : n->inputs())
      if (v && v->owner() == body && v->is_initializer() && !copies.count(v)) {
        copies[v] = rw.add_constant(g, *v->initializer(), v->name());
        moved_constants.push_back(v);
      }
  std::vector<const ir::Node*> srcs(moved.begin(), moved.end());
  std::vector<ir::Node*> copied = g.copy_nodes(srcs, [&](ir::Value* v) -> ir::Value* {
    auto it = copies.find(v);
    return it == copies.end() ? v : it->second;
  });
  if (copied.size() != moved.size())
    return changed || no_match(loop, "the invariant nodes could not be copied out");
  for (size_t k = 0; k < moved.size(); ++k)
    for (size_t i = 0; i < moved[k]->outputs().size(); ++i)
      if (ir::Value* out = moved[k]->output(i))
        if (!rw.replace_all_uses(out, copied[k]->output(i), /*allow_identity=*/true,
                                 /*keep_name=*/true))
          return changed || no_match(*moved[k], "its result could not be redirected");
  for (ir::Value* v : moved_constants)
    if (!v->dead() && v->use_count() > 0) rw.replace_all_uses(v, copies[v]);
  for (auto it = moved.rbegin(); it != moved.rend(); ++it)
    if (!(*it)->dead()) rw.erase(*it);
  for (ir::Value* v : moved_constants)
    if (!v->dead()) rw.erase_if_unused(v);
  return true;
}

// Where a Loop's or Scan's carried values and scan outputs sit in its inputs and outputs and in
// its body's (ONNX lists them by position):
//   Loop: inputs (M, cond, v...), body inputs (i, cond, v...), body outputs (cond, v..., scan...),
//         outputs (v..., scan...);
//   Scan: inputs (s..., x...), body inputs (s..., x...), body outputs (s..., y...), outputs
//         (s..., y...).
struct LoopLayout {
  size_t carried = 0;   // loop-carried values (Scan: state variables)
  size_t in = 0;        // the first carried value's position among the node's inputs
  size_t body_in = 0;   // ... among the body's inputs
  size_t body_out = 0;  // ... among the body's outputs
  size_t scans = 0;     // scan outputs, after the carried values in the node's outputs
};

// The layout of `loop`, nullopt (with the reason in `why`) when its body does not match it.
std::optional<LoopLayout> layout_of(const ir::Node& loop, std::string* why) {
  const ir::Graph* body = body_of(loop);
  LoopLayout l;
  size_t scan_inputs = 0;
  if (loop.is("Loop")) {
    l.carried = loop.inputs().size() < 2 ? 0 : loop.inputs().size() - 2;
    l.in = l.body_in = 2;
    l.body_out = 1;
  } else {
    const int64_t x = loop.attr_int("num_scan_inputs", -1);
    if (loop.opset() < 9 || x < 1 || x > static_cast<int64_t>(loop.inputs().size())) {
      *why = "a Scan-8 or one whose num_scan_inputs is not a count of its inputs";
      return std::nullopt;
    }
    l.carried = loop.inputs().size() - static_cast<size_t>(x);
    scan_inputs = static_cast<size_t>(x);
  }
  if (body == nullptr || body->inputs().size() != l.body_in + l.carried + scan_inputs ||
      body->outputs().size() < l.body_out + l.carried ||
      loop.outputs().size() != body->outputs().size() - l.body_out) {
    *why = "its body's inputs and outputs do not match its own";
    return std::nullopt;
  }
  l.scans = loop.outputs().size() - l.carried;
  return l;
}

// Loop(M = 1, cond = true, v...) runs its body exactly once: the body's nodes replace it, with
// the iteration number 0, the condition and the initial carried values for its inputs; the
// final carried values are the body's, and each scan output is the body's one value with a
// leading axis of 1 (Unsqueeze). The body's own condition output is not read (one trip either
// way).
bool fold_single_trip(ir::Node& loop, Rewriter& rw) {
  const ir::Value* m = loop.input(0);
  const auto trips = m ? ir::constant_ints(m) : std::nullopt;
  if (!trips || trips->size() != 1 || (*trips)[0] != 1)
    return no_match(loop, "the trip count is not a constant 1");
  if (const ir::Value* cond = loop.input(1)) {
    const auto go = ir::constant_ints(cond);
    if (!go || go->size() != 1 || (*go)[0] == 0)
      return no_match(loop, "the initial condition is not a constant true");
  }
  std::string why;
  const auto l = layout_of(loop, &why);
  if (!l) return no_match(loop, why);
  const ir::Graph* body = body_of(loop);
  if (body->rest().sparse_initializer_size() > 0)
    return no_match(loop, "a body with sparse initializers");
  const size_t carried = l->carried;
  for (size_t j = carried + 1; j < body->outputs().size(); ++j)
    if (loop.output(j - 1) && body->outputs()[j].value->elem_type() == 0)
      return no_match(loop, "a scan output is not known to be a tensor");
  ir::Graph& g = *loop.graph();
  std::unordered_map<const ir::Value*, ir::Value*> map;
  map[body->inputs()[0].value] =
      rw.add_constant(g, ir::make_int64_tensor({}, {0}), body->inputs()[0].value->name());
  ir::Value* cond = loop.input(1);
  if (cond == nullptr && body->inputs()[1].value->use_count() > 0)
    cond = rw.add_constant(g, ir::make_bool_scalar(true), body->inputs()[1].value->name());
  map[body->inputs()[1].value] = cond;
  for (size_t k = 0; k < carried; ++k) {
    if (loop.input(2 + k) == nullptr) return no_match(loop, "a carried value has no initial value");
    map[body->inputs()[2 + k].value] = loop.input(2 + k);
  }
  for (ir::Value* init : body->initializers())
    if (init->use_count() > 0) map[init] = rw.add_constant(g, *init->initializer(), init->name());
  auto mapped = [&](ir::Value* v) -> ir::Value* {
    auto it = map.find(v);
    return it == map.end() ? v : it->second;
  };
  std::vector<const ir::Node*> srcs;
  for (const ir::Node* n : body->nodes()) srcs.push_back(n);
  std::vector<ir::Node*> copied = g.copy_nodes(srcs, mapped);
  if (!srcs.empty() && copied.size() != srcs.size())
    return no_match(loop, "the body's nodes could not be copied out");
  for (size_t k = 0; k < srcs.size(); ++k)
    for (size_t i = 0; i < srcs[k]->outputs().size(); ++i)
      if (ir::Value* out = srcs[k]->output(i)) map[out] = copied[k]->output(i);
  for (size_t j = 1; j < body->outputs().size(); ++j) {
    ir::Value* out = loop.output(j - 1);
    if (out == nullptr || out->use_count() == 0) continue;
    ir::Value* result = mapped(body->outputs()[j].value);
    if (j > carried) {  // a scan output: one iteration's value, stacked along a new axis 0
      ir::Node* u = nullptr;
      if (g.opset("") >= 13) {
        u = rw.add_node(g, "Unsqueeze",
                        {result, rw.add_constant(g, ir::make_int64_tensor({1}, {0}), "axes")}, 1,
                        &loop);
      } else {
        u = rw.add_node(g, "Unsqueeze", {result}, 1, &loop);
        rw.set_attr(u, ints_attr("axes", {0}));
      }
      result = u->output(0);
    }
    if (!rw.replace_all_uses(out, result, /*allow_identity=*/true))
      return no_match(loop, "an output could not be redirected");
  }
  if (!rw.erase(&loop)) return false;
  // What computed only the body's condition (or values no one read) goes: erase refuses a node
  // whose outputs are read.
  for (auto it = copied.rbegin(); it != copied.rend(); ++it)
    if (!(*it)->dead()) rw.erase(*it);
  return true;
}

bool fold_zero_trip(ir::Node& loop, Rewriter& rw) {
  const ir::Value* m = loop.input(0);
  const ir::Value* cond = loop.input(1);
  const auto trips = m ? ir::constant_ints(m) : std::nullopt;
  const auto go = cond ? ir::constant_ints(cond) : std::nullopt;
  const bool no_trip = trips && trips->size() == 1 && (*trips)[0] <= 0;
  const bool never = go && go->size() == 1 && (*go)[0] == 0;
  if (!no_trip && !never)
    return no_match(loop, "neither a constant trip count of 0 nor a constant false condition");
  std::string why;
  const auto l = layout_of(loop, &why);
  if (!l) return no_match(loop, why);
  const ir::Graph* body = body_of(loop);
  const size_t carried = l->carried;
  ir::Graph& g = *loop.graph();
  std::vector<ir::Value*> results(loop.outputs().size(), nullptr);
  for (size_t k = 0; k < carried; ++k) {
    if (!loop.output(k) || loop.output(k)->use_count() == 0) continue;
    if (loop.input(2 + k) == nullptr) return no_match(loop, "a carried value has no initial value");
    results[k] = loop.input(2 + k);
  }
  for (size_t j = carried; j < loop.outputs().size(); ++j) {
    ir::Value* out = loop.output(j);
    if (!out || out->use_count() == 0) continue;
    const ir::Value* each = body->outputs()[j + 1].value;
    auto dims = each->static_shape();
    if (!dims || each->elem_type() == 0)
      return no_match(loop,
                      "a scan output read has no known element type or static per-iteration "
                      "dims, so its empty value cannot be written");
    onnx::TensorProto empty;
    empty.set_data_type(each->elem_type());
    empty.add_dims(0);
    for (int64_t d : *dims) empty.add_dims(d);
    results[j] = rw.add_constant(g, std::move(empty), out->name());
  }
  if (!rw.replace_node(&loop, results))
    return no_match(loop, "an output could not be replaced by its initial value");
  return true;
}

bool is_read(const ir::Value* v) { return v != nullptr && v->use_count() > 0; }

// Values of `body` that the subgraphs of `n` (a node of `body`) read from it.
void captured_from(const ir::Node& n, const ir::Graph& body, std::vector<const ir::Value*>& out) {
  for (const auto& sub : n.subgraphs()) {
    for (const ir::Node* inner : sub.graph->nodes()) {
      for (const ir::Value* v : inner->inputs())
        if (v && v->owner() == &body) out.push_back(v);
      captured_from(*inner, body, out);
    }
    for (const auto& o : sub.graph->outputs())
      if (o.value->owner() == &body) out.push_back(o.value);
  }
}

// Carried values whose final value nothing reads, and whose value no iteration reads except to
// compute their own next value, cost work every iteration for nothing; scan outputs no one reads
// are stacked for nothing. Both are removed: from the node's inputs and outputs and the body's,
// with the body nodes that computed only them. A carried value the body returns unchanged (v_out
// = v_in) is its initial value on every iteration and after the loop: its readers read the
// initial value, and then it is removed as unread.
//
//   tokens, score = Loop (M, cond, start, zero) <body = (i, c, tokens_in, score_in) =>
//       (c, Concat (tokens_in, next), Add (score_in, ReduceMax (logits)))>   // score unread
//   -> tokens = Loop (M, cond, start) <body = (i, c, tokens_in) => (c, Concat (tokens_in, next))>
bool drop_unread_values(ir::Node& loop, Rewriter& rw) {
  std::string why;
  const auto l = layout_of(loop, &why);
  if (!l) return no_match(loop, why);
  ir::Graph& body = *body_of(loop);
  bool any_read = false;
  for (const ir::Value* out : loop.outputs()) any_read = any_read || is_read(out);
  if (!any_read)
    return no_match(loop, "no output is read: the loop is dead code (prune removes it)");
  // Unchanged carried values: readers (in the body and after the loop) read the initial value.
  bool changed = false;
  for (size_t k = 0; k < l->carried; ++k) {
    ir::Value* in = body.inputs()[l->body_in + k].value;
    ir::Value* initial = loop.input(l->in + k);
    if (through_identities(body.outputs()[l->body_out + k].value) != in || initial == nullptr)
      continue;
    if (in->uses().empty() && !is_read(loop.output(k))) continue;
    if (body.lookup(initial->name()) != initial) continue;  // shadowed in the body
    if (!in->uses().empty()) changed = rw.replace_all_uses(in, initial) || changed;
    if (ir::Value* out = loop.output(k); is_read(out))
      changed = rw.replace_all_uses(out, initial) || changed;
  }
  // What the body must compute: its condition, the scan outputs read, and the carried values
  // read after the loop or by what it must compute (backwards to a fixed point).
  std::vector<bool> live(l->carried, false);
  std::unordered_set<const ir::Node*> needed;
  std::vector<const ir::Value*> work;
  auto need = [&](size_t body_output) { work.push_back(body.outputs()[body_output].value); };
  if (loop.is("Loop")) need(0);
  for (size_t k = 0; k < l->carried; ++k)
    if (is_read(loop.output(k))) {
      live[k] = true;
      need(l->body_out + k);
    }
  for (size_t j = 0; j < l->scans; ++j)
    if (is_read(loop.output(l->carried + j))) need(l->body_out + l->carried + j);
  std::unordered_map<const ir::Value*, size_t> carried_in;
  for (size_t k = 0; k < l->carried; ++k) carried_in[body.inputs()[l->body_in + k].value] = k;
  std::unordered_set<const ir::Value*> seen;
  while (!work.empty()) {
    const ir::Value* v = work.back();
    work.pop_back();
    if (v == nullptr || v->owner() != &body || !seen.insert(v).second) continue;
    if (auto it = carried_in.find(v); it != carried_in.end()) {
      if (!live[it->second]) {
        live[it->second] = true;
        need(l->body_out + it->second);
      }
      continue;
    }
    const ir::Node* p = v->producer();
    if (p == nullptr || !needed.insert(p).second) continue;
    work.insert(work.end(), p->inputs().begin(), p->inputs().end());
    captured_from(*p, body, work);
  }
  std::vector<size_t> carried_gone, scans_gone;
  for (size_t k = 0; k < l->carried; ++k)
    if (!live[k]) carried_gone.push_back(k);
  for (size_t j = 0; j < l->scans; ++j)
    if (!is_read(loop.output(l->carried + j))) scans_gone.push_back(j);
  if (carried_gone.empty() && scans_gone.empty())
    return changed || no_match(loop, "every carried value and scan output is read");
  // Positions from the back, so that the earlier ones stay where they are.
  for (auto j = scans_gone.rbegin(); j != scans_gone.rend(); ++j) {
    if (!rw.remove_graph_output(body, l->body_out + l->carried + *j) ||
        !rw.remove_output(&loop, l->carried + *j))
      return no_match(loop, "a scan output could not be removed");
    for (const char* attr : {"scan_output_axes", "scan_output_directions"})
      if (auto list = loop.attr_ints(attr); list && *j < list->size()) {
        list->erase(list->begin() + static_cast<std::ptrdiff_t>(*j));
        rw.set_attr(&loop, ints_attr(attr, *list));
      }
  }
  for (auto k = carried_gone.rbegin(); k != carried_gone.rend(); ++k)
    if (!rw.remove_graph_output(body, l->body_out + *k) || !rw.remove_output(&loop, *k))
      return no_match(loop, "a carried value's output could not be removed");
  // What computed only the removed values (readers before what they read).
  std::vector<ir::Node*> nodes = body.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it)
    if (!(*it)->dead() && !needed.count(*it)) rw.erase(*it);
  std::vector<ir::Value*> inputs(loop.inputs().begin(), loop.inputs().end());
  for (auto k = carried_gone.rbegin(); k != carried_gone.rend(); ++k) {
    if (!rw.remove_graph_input(body, l->body_in + *k))
      return no_match(loop, "a carried value is still read in the body");
    inputs.erase(inputs.begin() + static_cast<std::ptrdiff_t>(l->in + *k));
  }
  rw.set_inputs(&loop, inputs);
  return true;
}

// The body's condition output, seen through Identity nodes: a constant, the body's own
// condition input passed on, or something computed.
enum class Condition { kTrue, kFalse, kPassedOn, kComputed };
Condition body_condition(const ir::Graph& body) {
  const ir::Value* v = through_identities(body.outputs()[0].value);
  if (v == body.inputs()[1].value) return Condition::kPassedOn;
  const auto c = ir::constant_ints(v);
  if (c && c->size() == 1) return (*c)[0] != 0 ? Condition::kTrue : Condition::kFalse;
  return Condition::kComputed;
}

// A Loop whose body's condition is a constant:
//  - false: the body runs at most once, so a Loop that starts (initial condition absent or a
//    constant true) with a trip count absent or a constant >= 1 runs exactly once. Its trip
//    count becomes 1 (fold_single_trip then makes it its body).
//  - true, or the body passes its condition input on unchanged: only the trip count ends the
//    loop. With an initial condition that is a constant true, the Loop is a for loop: where the
//    body computes something from its condition, those reads read a constant true (for the
//    folding passes), and the condition input is dropped.
bool constant_condition(ir::Node& loop, Rewriter& rw) {
  ir::Graph* body = body_of(loop);
  if (body == nullptr || body->inputs().size() < 2 || body->outputs().empty())
    return no_match(loop, "no body with an iteration number and a condition");
  const Condition c = body_condition(*body);
  if (c == Condition::kComputed) return no_match(loop, "the body computes its condition");
  const ir::Value* cond = loop.input(1);
  const auto go = cond ? ir::constant_ints(cond) : std::nullopt;
  if (cond && !(go && go->size() == 1 && (*go)[0] != 0))
    return no_match(loop, "the initial condition is not a constant true");
  const ir::Value* m = loop.input(0);
  const auto trips = m ? ir::constant_ints(m) : std::nullopt;
  if (c == Condition::kFalse) {
    if (m && !(trips && trips->size() == 1))
      return no_match(loop,
                      "the body's condition is false, but the trip count is not a "
                      "constant: the loop runs once or not at all");
    if (trips && (*trips)[0] < 1) return no_match(loop, "the trip count is below 1");
    if (trips && (*trips)[0] == 1 && cond == nullptr)
      return no_match(loop, "the loop already runs exactly once (fold_single_trip)");
    rw.set_input(&loop, 0, rw.add_constant(*loop.graph(), ir::make_int64_tensor({}, {1}), "trips"));
    if (cond) rw.set_input(&loop, 1, nullptr);
    return true;
  }
  if (m == nullptr)
    return no_match(loop, "no trip count, and the condition stays true: the loop never ends");
  // What the body reads of its condition other than to pass it on.
  ir::Value* cond_in = body->inputs()[1].value;
  bool computed_from = false;
  for (const ir::Use& u : cond_in->uses())
    computed_from = computed_from || !u.node->is("Identity") || u.node->graph() != body;
  if (!computed_from)
    return no_match(loop, "its condition stays true, and the body computes nothing from it");
  rw.replace_all_uses(cond_in, rw.add_constant(*body, ir::make_bool_scalar(true), "cond"));
  if (cond) rw.set_input(&loop, 1, nullptr);
  return true;
}

std::vector<Rule> loop_rules() {
  return {
      {"hoist_invariants",
       {"Loop", "Scan"},
       [](ir::Node& n, Rewriter& rw) { return hoist(n, rw); }},
      {"fold_single_trip",
       {"Loop"},
       [](ir::Node& n, Rewriter& rw) { return fold_single_trip(n, rw); }},
      {"fold_zero_trip", {"Loop"}, [](ir::Node& n, Rewriter& rw) { return fold_zero_trip(n, rw); }},
      {"drop_unread_values",
       {"Loop", "Scan"},
       [](ir::Node& n, Rewriter& rw) { return drop_unread_values(n, rw); }},
      {"constant_condition", {"Loop"}, [](ir::Node& n, Rewriter& rw) {
         return constant_condition(n, rw);
       }}};
}

}  // namespace

PassInfo optimize_loops_pass() {
  return describe({.name = "optimize_loops",
                   .level = 2,
                   .description = "nodes of Loop and Scan bodies that compute the same value on "
                                  "every iteration move before the loop (from a body that may "
                                  "run zero times, only those that cannot fail); a Loop of one "
                                  "trip becomes its body, one of no trip its initial values",
                   .options = {}},
                  {loop_rules});
}

}  // namespace graft
