// simplify_arithmetic's rules for chains: Transpose of Transpose, Reshape of Reshape, Squeeze
// and Unsqueeze pairs, any two of Reshape/Squeeze/Unsqueeze/Flatten with a known final shape,
// Cast through a type that holds every value exactly, Relu next to a Clip with a non-negative
// lower bound, Clip of Clip. See
// simplify_arithmetic.cc for what "same results" means and what is deliberately not done.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/rules.h"

namespace graft {

namespace {

using onnx::TensorProto;

// Transpose(Transpose(x, p1), p2) -> Transpose(x, q) with q[j] = p1[p2[j]], or x if q is the
// identity. The inner Transpose stays for its other readers.
bool merge_transpose(ir::Node& n, Rewriter& rw) {
  ir::Node* inner = chain_producer(n.input(0), "Transpose", n);
  if (!inner || n.outputs().size() != 1) return false;
  // Without a perm the inner Transpose reverses x's axes: x's rank must be a fact.
  std::optional<int64_t> rank;
  if (inner->input(0)) rank = inner->input(0)->rank();
  auto p1 = ir::transpose_perm(*inner, rank);
  if (!p1) return false;
  // The intermediate has the rank of x, which is the length of p1.
  auto p2 = ir::transpose_perm(n, static_cast<int64_t>(p1->size()));
  if (!p2 || p1->size() != p2->size()) return false;
  std::vector<int64_t> q(p2->size());
  bool identity = true;
  for (size_t j = 0; j < q.size(); ++j) {
    q[j] = (*p1)[static_cast<size_t>((*p2)[j])];
    identity = identity && q[j] == static_cast<int64_t>(j);
  }
  ir::Value* x = inner->input(0);
  if (identity && rw.replace_node(&n, {x}, /*allow_identity=*/false)) return true;
  rw.set_attr(&n, ints_attr("perm", q));
  rw.set_input(&n, 0, x);
  rw.erase(inner);
  return true;
}

// Reshape(Reshape(x, s1), s2) -> Reshape(x, s2): the element count is the same, so only 0
// entries of s2 (copying a dim of the intermediate, without allowzero) tie the result to s1.
bool merge_reshape(ir::Node& n, Rewriter& rw) {
  if (n.opset() < 5 || !only_attributes(n, {"allowzero"}) || n.inputs().size() != 2) return false;
  ir::Node* inner = chain_producer(n.input(0), "Reshape", n);
  if (!inner || !only_attributes(*inner, {"allowzero"}) || inner->inputs().size() != 2 ||
      !inner->input(0))
    return false;
  auto s1 = constant_ints(inner->input(1));
  auto s2 = constant_ints(n.input(1));
  if (!s1 || !s2) return false;
  if (n.attr_int("allowzero", 0) == 0 && std::count(s2->begin(), s2->end(), 0) > 0) return false;
  // An inner allowzero with a 0 makes an empty intermediate; keep such corner cases as they are.
  if (inner->attr_int("allowzero", 0) != 0 && std::count(s1->begin(), s1->end(), 0) > 0)
    return false;
  rw.set_input(&n, 0, inner->input(0));
  rw.erase(inner);
  return true;
}

// Axes of a Squeeze/Unsqueeze without other attributes or inputs, nullopt if unknown.
std::optional<std::vector<int64_t>> axes_of(const ir::Node& n) {
  if (n.opset() < 13 ? !only_attributes(n, {"axes"}) || n.inputs().size() != 1
                     : !n.attributes().empty() || n.inputs().size() != 2)
    return std::nullopt;
  if (n.is("Squeeze")) {
    auto p = ir::squeeze_axes(n);
    if (!p || p->all) return std::nullopt;
    return p->axes;
  }
  return ir::unsqueeze_axes(n);
}

// Sorted axes made non-negative for `rank` (nullopt if rank is needed but unknown), checked to
// be distinct and in range.
std::optional<std::vector<int64_t>> normalize(std::vector<int64_t> axes,
                                              std::optional<int64_t> rank) {
  for (int64_t& a : axes) {
    if (a < 0) {
      if (!rank) return std::nullopt;
      a += *rank;
    }
    if (a < 0 || (rank && a >= *rank)) return std::nullopt;
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) return std::nullopt;
  return axes;
}

// The `k`-th position (from 0) not in the sorted set `taken`.
int64_t nth_free(const std::vector<int64_t>& taken, int64_t k) {
  int64_t p = 0;
  for (;; ++p) {
    if (std::binary_search(taken.begin(), taken.end(), p)) continue;
    if (k-- == 0) return p;
  }
}

void set_axes(ir::Node& n, const std::vector<int64_t>& axes, Rewriter& rw) {
  if (n.opset() < 13) {
    rw.set_attr(&n, ints_attr("axes", axes));
    return;
  }
  std::vector<int64_t> dims{static_cast<int64_t>(axes.size())};
  rw.set_input(&n, 1,
               rw.add_constant(*n.graph(), ir::make_int64_tensor(dims, axes),
                               n.output(0)->name() + "_axes"));
}

// Squeeze(Squeeze(x)) and Unsqueeze(Unsqueeze(x)) become one node; Squeeze(Unsqueeze(x, a), a)
// and Unsqueeze(Squeeze(x, a), a) become x.
bool merge_squeeze(ir::Node& n, Rewriter& rw) {
  if (n.outputs().size() != 1) return false;
  const bool outer_squeeze = n.is("Squeeze");
  ir::Node* inner = chain_producer(n.input(0), "Squeeze", n);
  if (!inner) inner = chain_producer(n.input(0), "Unsqueeze", n);
  if (!inner || !inner->input(0)) return false;
  const bool inner_squeeze = inner->is("Squeeze");
  auto a2 = axes_of(n);
  auto a1 = axes_of(*inner);
  if (!a1 || !a2 || a1->empty() || a2->empty()) return false;  // Squeeze of all 1-dims
  ir::Value* x = inner->input(0);
  auto rank = x->rank();
  const int64_t n1 = static_cast<int64_t>(a1->size());
  const int64_t n2 = static_cast<int64_t>(a2->size());
  auto plus = [](std::optional<int64_t> r, int64_t d) {
    return r ? std::optional<int64_t>(*r + d) : std::nullopt;
  };
  if (inner_squeeze != outer_squeeze) {
    // Unsqueeze axes index its output, Squeeze axes its input: here both the larger rank.
    auto big = inner_squeeze ? rank : plus(rank, n1);
    auto s1 = normalize(*a1, big);
    auto s2 = normalize(*a2, big);
    if (!s1 || !s2 || *s1 != *s2) return false;
    return rw.replace_node(&n, {x}, /*allow_identity=*/false);
  }
  std::optional<std::vector<int64_t>> s1, s2;
  if (inner_squeeze) {
    s1 = normalize(*a1, rank);
    s2 = normalize(*a2, plus(rank, -n1));
  } else {
    s1 = normalize(*a1, plus(rank, n1));
    s2 = normalize(*a2, plus(rank, n1 + n2));
  }
  if (!s1 || !s2) return false;
  // Positions of the inner axes seen through the outer node, in the coordinates of the larger
  // tensor (x for Squeeze, the result for Unsqueeze).
  const std::vector<int64_t>& fixed = inner_squeeze ? *s1 : *s2;
  const std::vector<int64_t>& moved = inner_squeeze ? *s2 : *s1;
  std::vector<int64_t> all = fixed;
  for (int64_t a : moved) all.push_back(nth_free(fixed, a));
  std::sort(all.begin(), all.end());
  set_axes(n, all, rw);
  rw.set_input(&n, 0, x);
  rw.erase(inner);
  return true;
}

// Every value of `from` has an exact representation in `to`, so casting through `to` loses
// nothing: Cast(Cast(x, to), T) == Cast(x, T) for any non-string T.
bool holds_exactly(int32_t from, int32_t to) {
  using T = TensorProto;
  if (from == to) return true;
  switch (from) {
    case T::BOOL:
      return to == T::UINT8 || to == T::INT8 || to == T::UINT16 || to == T::INT16 ||
             to == T::UINT32 || to == T::INT32 || to == T::UINT64 || to == T::INT64 ||
             to == T::FLOAT16 || to == T::BFLOAT16 || to == T::FLOAT || to == T::DOUBLE;
    case T::UINT8:  // float16 and bfloat16 hold every integer up to 256 exactly
      return to == T::UINT16 || to == T::INT16 || to == T::UINT32 || to == T::INT32 ||
             to == T::UINT64 || to == T::INT64 || to == T::FLOAT16 || to == T::BFLOAT16 ||
             to == T::FLOAT || to == T::DOUBLE;
    case T::INT8:
      return to == T::INT16 || to == T::INT32 || to == T::INT64 || to == T::FLOAT16 ||
             to == T::BFLOAT16 || to == T::FLOAT || to == T::DOUBLE;
    case T::UINT16:  // float's 24-bit significand holds every 16-bit integer
      return to == T::UINT32 || to == T::INT32 || to == T::UINT64 || to == T::INT64 ||
             to == T::FLOAT || to == T::DOUBLE;
    case T::INT16:
      return to == T::INT32 || to == T::INT64 || to == T::FLOAT || to == T::DOUBLE;
    case T::UINT32:  // double's 53-bit significand holds every 32-bit integer
      return to == T::UINT64 || to == T::INT64 || to == T::DOUBLE;
    case T::INT32:
      return to == T::INT64 || to == T::DOUBLE;
    case T::FLOAT16:
    case T::BFLOAT16:
      return to == T::FLOAT || to == T::DOUBLE;
    case T::FLOAT:
      return to == T::DOUBLE;
    default:
      return false;  // 64-bit integers, double, strings, complex, float8: no wider exact type
  }
}

// Cast(Cast(x, T1), T2) -> Cast(x, T2) when T1 holds every value of x's type exactly: the
// second Cast then sees the very values x has. Through a lossy T1 (float -> int -> float,
// double -> float -> double, int64 -> int32 -> int64) the chain stays.
bool merge_cast(ir::Node& n, Rewriter& rw) {
  auto target = [](const ir::Node& c) -> int32_t {
    if (!only_attributes(c, {"to"}) || c.inputs().size() != 1 || !c.input(0)) return 0;
    return ir::cast_to(c).value_or(0);  // opset 1 names a string: 0
  };
  ir::Node* inner = chain_producer(n.input(0), "Cast", n);
  if (!inner) return false;
  const int32_t t2 = target(n);
  const int32_t t1 = target(*inner);
  ir::Value* x = inner->input(0);
  const int32_t t0 = x->elem_type();
  // Number -> string formatting depends on the source type (0.1f prints differently as double).
  if (t0 == 0 || t1 == 0 || t2 == 0 || t2 == TensorProto::STRING || !holds_exactly(t0, t1))
    return false;
  if (t2 == t0 && rw.replace_node(&n, {x}, /*allow_identity=*/false)) return true;
  rw.set_input(&n, 0, x);
  rw.erase(inner);
  return true;
}

// A shape op whose parameters are all it has: Reshape (allowzero), Squeeze/Unsqueeze (axes),
// Flatten (axis). Each keeps the elements in row-major order and only changes the dims.
bool is_plain_shape_op(const ir::Node& n) {
  if (!n.is_onnx_domain() || n.outputs().size() != 1 || !n.output(0) || !n.input(0)) return false;
  const std::string& op = n.op_type();
  if (op == "Reshape") return n.opset() >= 5 && only_attributes(n, {"allowzero"});
  if (op == "Squeeze" || op == "Unsqueeze") return only_attributes(n, {"axes"});
  if (op == "Flatten") return only_attributes(n, {"axis"});
  return false;
}

// Two shape ops in a row whose final shape the facts know completely are one Reshape to that
// shape (from opset 5, where Reshape takes its shape as an input). Shapes with a zero dim are
// left alone: 0 in a Reshape target copies a dim unless allowzero, which needs opset 14.
bool collapse_shape_ops(ir::Node& n, Rewriter& rw) {
  if (n.opset() < 5 || !is_plain_shape_op(n) || !single_use(n.input(0))) return false;
  ir::Node* inner = n.input(0)->producer();
  if (!inner || inner->dead() || inner->graph() != n.graph() || !is_plain_shape_op(*inner))
    return false;
  auto shape = n.output(0)->static_shape();
  if (!shape || std::count(shape->begin(), shape->end(), 0) > 0) return false;
  const int64_t length = static_cast<int64_t>(shape->size());
  ir::Value* target = rw.add_constant(*n.graph(), ir::make_int64_tensor({length}, *shape),
                                      n.output(0)->name() + "_shape");
  ir::Node* reshape = rw.add_node(*n.graph(), "Reshape", {inner->input(0), target}, 1, &n);
  if (!rw.replace_node(&n, {reshape->output(0)})) {
    rw.erase(reshape);
    return false;
  }
  rw.erase(inner);
  return true;
}

// Clip's bounds when they are constants (or absent) and the node has no other attributes than
// its version defines; nullopt otherwise. Before opset 6 Clip has consumed_inputs.
std::optional<ir::ClipParams> constant_clip(const ir::Node& n) {
  if (!n.is("Clip") || n.opset() < 6 || n.outputs().size() != 1 || !n.output(0))
    return std::nullopt;
  if (n.opset() < 11 ? !only_attributes(n, {"min", "max"}) : !n.attributes().empty())
    return std::nullopt;
  return ir::clip_params(n);
}

// Relu(x) is max(x, 0), so with lower bound lo >= 0:
//  - Clip(Relu(x), lo, hi) = Clip(x, lo, hi): max(max(x, 0), lo) = max(x, lo);
//  - Relu(Clip(x, lo, hi)) = Clip(x, lo, hi): the Clip's result is already >= 0.
// A NaN stays NaN either way.
bool relu_clip(ir::Node& n, Rewriter& rw) {
  if (n.is("Relu")) {
    if (n.inputs().size() != 1 || !n.attributes().empty() || n.outputs().size() != 1) return false;
    ir::Node* clip = producer(n.input(0), "Clip");
    auto bounds = clip ? constant_clip(*clip) : std::nullopt;
    if (!bounds || !bounds->min || !(*bounds->min >= 0) || clip->graph() != n.graph()) return false;
    return rw.replace_node(&n, {n.input(0)}, /*allow_identity=*/false);
  }
  auto bounds = constant_clip(n);
  if (!bounds || !bounds->min || !(*bounds->min >= 0)) return false;
  ir::Node* relu = producer(n.input(0), "Relu");
  if (!relu || relu->graph() != n.graph() || !single_use(n.input(0)) ||
      relu->inputs().size() != 1 || !relu->attributes().empty() || !relu->input(0))
    return false;
  rw.set_input(&n, 0, relu->input(0));
  rw.erase(relu);
  return true;
}

// Clip(Clip(x, a, b), c, d) = Clip(x, max(a, c), min(b, d)) when that range is not empty (an
// absent bound is unbounded). The bounds are values of x's type, so their max and min are too.
bool merge_clip(ir::Node& n, Rewriter& rw) {
  auto outer = constant_clip(n);
  ir::Node* inner = outer ? chain_producer(n.input(0), "Clip", n) : nullptr;
  auto in = inner && single_use(n.input(0)) ? constant_clip(*inner) : std::nullopt;
  if (!in || !inner->input(0)) return false;
  for (const auto& b : {in->min, in->max, outer->min, outer->max})
    if (b && std::isnan(*b)) return false;
  auto combine = [](std::optional<double> a, std::optional<double> b, bool lower) {
    if (!a) return b;
    if (!b) return a;
    return std::optional<double>(lower ? std::max(*a, *b) : std::min(*a, *b));
  };
  const std::optional<double> lo = combine(in->min, outer->min, true);
  const std::optional<double> hi = combine(in->max, outer->max, false);
  if (lo && hi && !(*lo <= *hi)) return false;  // an empty range (or a NaN bound)
  // Each bound is read from the node that holds it: no new constant is needed.
  auto holder = [&](const std::optional<double>& v,
                    const std::optional<double>& outer_v) -> ir::Node* {
    if (!v) return nullptr;
    return outer_v && *outer_v == *v ? &n : inner;
  };
  if (n.opset() >= 11) {
    ir::Node* lo_from = holder(lo, outer->min);
    ir::Node* hi_from = holder(hi, outer->max);
    std::vector<ir::Value*> inputs{inner->input(0), lo_from ? lo_from->input(1) : nullptr,
                                   hi_from ? hi_from->input(2) : nullptr};
    if (!inputs[2]) inputs.pop_back();
    if (inputs.size() == 2 && !inputs[1]) inputs.pop_back();
    rw.set_inputs(&n, inputs);
  } else {
    // Attributes are floats: the combined bounds are floats already.
    auto set = [&](const char* name, const std::optional<double>& v) {
      if (!v) return rw.remove_attr(&n, name);
      rw.set_attr(&n, float_attr(name, *v));
    };
    set("min", lo);
    set("max", hi);
    rw.set_input(&n, 0, inner->input(0));
  }
  rw.erase(inner);
  return true;
}

}  // namespace

std::vector<Rule> chain_rules() {
  return {{"transpose_chain", {"Transpose"}, merge_transpose},
          {"reshape_chain", {"Reshape"}, merge_reshape},
          {"squeeze_chain", {"Squeeze", "Unsqueeze"}, merge_squeeze},
          {"cast_chain", {"Cast"}, merge_cast},
          {"shape_op_chain", {"Reshape", "Squeeze", "Unsqueeze", "Flatten"}, collapse_shape_ops},
          {"relu_clip", {"Relu", "Clip"}, relu_clip},
          {"clip_chain", {"Clip"}, merge_clip}};
}

}  // namespace graft
