// Algebraic simplifications that give the same results as the original graph:
//  - constants pushed together: Add(c1, Add(x, c2)) -> Add(x, c1 + c2), the same for Mul; the
//    constant operands of a Sum combined into one; adjacent constant inputs of a Concat merged;
//  - neutral elements: x + 0, x - 0, x * 1, x / 1, Pow(x, 1) -> x; 0 - x -> Neg(x);
//    1 / x -> Reciprocal(x) (floats); integer x * 0 -> zeros;
//  - inverse pairs Neg(Neg(x)), Not(Not(x)) -> x;
//  - chains merged: Transpose of Transpose, Reshape of Reshape, Squeeze of Squeeze, Unsqueeze of
//    Unsqueeze, Squeeze/Unsqueeze of the same axes (removed), Cast through a type that holds every
//    value of the source type exactly.
//
// "Same results" is meant bit for bit with two accepted exceptions, the ones Grappler and ONNX
// Runtime accept as well: floating-point reassociation of constants ((x + c2) + c1 becomes
// x + (c1 + c2), which may round differently), and the sign of a zero result: x + (+0) gives +0
// for x = -0, so removing it turns that +0 into -0 (likewise x - (-0), and (+0) - x -> Neg(x)
// at x = +0). x + (-0), x - (+0) and (-0) - x -> Neg(x) are exact even there. Everything else is
// exact: integer Add/Mul wrap, and wrapping arithmetic is associative and commutative.
//
// Deliberately not done: float x * 0 (NaN and Inf times 0 are NaN), Reciprocal(Reciprocal(x))
// (1 / (1 / x) differs from x by rounding, and for denormals and huge values), neutral constants
// that broadcast x to a larger shape, Casts through lossy types, pushing constants through an
// intermediate that another node or a graph output also reads (the rewrite would only add a
// constant), constants larger than the ones they replace, old op versions with broadcast/axis
// attributes, and anything whose shapes, ranks or types the model does not state.
// Removing a Cast to the input's own type is eliminate_noop's job; all-constant nodes are
// fold_constants'; nodes left unused are prune's.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/eval/broadcast.h"
#include "core/eval/kernel.h"
#include "core/eval/tensor.h"
#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/rewrite_util.h"

namespace graft {

namespace {

using onnx::TensorProto;
using Shape = std::vector<int64_t>;

// Constants are read and computed only up to this size: the rewrites here replace small
// operands (biases, scales, axes), and a crafted model must not make us allocate without bound.
constexpr uint64_t kMaxConstantBytes = 16ull << 20;
// x * 0 for integers becomes a zero tensor of the output's shape; above this size the tensor
// would cost more in the file than the Mul it replaces.
constexpr uint64_t kMaxZerosBytes = 64ull << 10;

// The value of a constant operand: an initializer (not overridable as a graph input) or the
// output of a Constant node holding a dense tensor (function bodies have no initializers).
std::optional<eval::Tensor> read_constant(const ir::Value* v) {
  if (!v) return std::nullopt;
  const TensorProto* proto = nullptr;
  if (v->is_constant()) {
    proto = v->initializer();
  } else if (const ir::Node* p = v->producer();
             p && p->is("Constant") && p->attributes().size() == 1) {
    const onnx::AttributeProto& a = p->attributes()[0];
    if (a.name() == "value" && a.has_t()) proto = &a.t();
  }
  if (!proto) return std::nullopt;
  auto t = eval::Tensor::from_proto(*proto, kMaxConstantBytes);
  if (!t.ok() || t->dtype() == TensorProto::STRING) return std::nullopt;
  return std::move(*t);
}

bool is_constant(const ir::Value* v) {
  if (!v) return false;
  if (v->is_constant()) return true;
  const ir::Node* p = v->producer();
  return p && p->is("Constant");
}

std::optional<std::vector<int64_t>> constant_ints(const ir::Value* v) {
  auto t = read_constant(v);
  if (!t || !eval::is_integer_type(t->dtype())) return std::nullopt;
  std::vector<int64_t> out(static_cast<size_t>(t->size()));
  for (int64_t i = 0; i < t->size(); ++i) out[static_cast<size_t>(i)] = t->get_int64(i);
  return out;
}

// True if every element of `t` equals `value` (compared as doubles for floats, as integers for
// integers; -0.0 == 0.0, the callers decide whether the sign of zero matters).
bool all_equal(const eval::Tensor& t, int64_t value) {
  const bool floating = eval::is_float_type(t.dtype());
  if (!floating && !eval::is_integer_type(t.dtype())) return false;
  for (int64_t i = 0; i < t.size(); ++i) {
    if (floating ? t.get_double(i) != static_cast<double>(value) : t.get_int64(i) != value)
      return false;
  }
  return true;
}

// Declared dims of a tensor value: nullopt if the rank is unknown, -1 for an unknown dim.
std::optional<Shape> declared_dims(const ir::Value* v) {
  const onnx::TypeProto* t = v ? v->type() : nullptr;
  if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) return std::nullopt;
  Shape dims;
  for (const auto& d : t->tensor_type().shape().dim())
    dims.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : -1);
  return dims;
}

std::optional<int64_t> known_rank(const ir::Value* v) {
  auto dims = declared_dims(v);
  if (!dims) return std::nullopt;
  return static_cast<int64_t>(dims->size());
}

std::optional<Shape> static_dims(const ir::Value* v) {
  auto dims = declared_dims(v);
  if (!dims) return std::nullopt;
  for (int64_t d : *dims)
    if (d < 0) return std::nullopt;
  return dims;
}

// True if broadcasting x against a constant of shape `c` gives x's own shape: the constant has
// no more axes than x and each of its dims is 1 or x's (known) dim. A scalar never grows x.
bool keeps_shape_of(const ir::Value* x, const Shape& c) {
  bool all_ones = true;
  for (int64_t d : c) all_ones = all_ones && d == 1;
  if (c.empty()) return true;
  auto dims = declared_dims(x);
  if (!dims || dims->size() < c.size()) return false;
  if (all_ones) return true;
  size_t offset = dims->size() - c.size();
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i] != 1 && c[i] != (*dims)[offset + i]) return false;
  return true;
}

// Runs the evaluator's kernel for `n`'s op (and attributes) on `inputs`; nullopt on any error.
std::optional<eval::Tensor> evaluate(const ir::Node& n, std::vector<const eval::Tensor*> inputs) {
  eval::Limits limits;
  limits.max_tensor_bytes = kMaxConstantBytes;
  auto outputs = eval::run_kernel(n, std::move(inputs), limits);
  if (!outputs.ok() || outputs->empty() || (*outputs)[0].dtype() == 0) return std::nullopt;
  return std::move((*outputs)[0]);
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

bool is_signed_or_float(int32_t t) {
  return t == TensorProto::INT8 || t == TensorProto::INT16 || t == TensorProto::INT32 ||
         t == TensorProto::INT64 || t == TensorProto::FLOAT16 || t == TensorProto::FLOAT ||
         t == TensorProto::DOUBLE;
}

bool is_ieee_float(int32_t t) {
  return t == TensorProto::FLOAT16 || t == TensorProto::FLOAT || t == TensorProto::DOUBLE;
}

class Simplifier {
 public:
  explicit Simplifier(ir::Model& model) : model_(model) {}

  bool simplify(ir::Node* n) {
    const std::string& op = n->op_type();
    if (!n->is_onnx_domain() || n->outputs().size() != 1 || !n->output(0)) return false;
    if (op == "Add" || op == "Mul") return push_down(n) || neutral(n) || absorb(n);
    if (op == "Sub" || op == "Div" || op == "Pow") return neutral(n);
    if (op == "Sum") return fold_sum(n);
    if (op == "Concat") return merge_concat(n);
    if (op == "Neg" || op == "Not") return inverse_pair(n);
    if (op == "Transpose") return merge_transpose(n);
    if (op == "Reshape") return merge_reshape(n);
    if (op == "Squeeze" || op == "Unsqueeze") return merge_squeeze(n);
    if (op == "Cast") return merge_cast(n);
    return false;
  }

 private:
  // A Constant node is valid where an initializer is not (function bodies, IR < 4).
  bool can_hold_initializers(const ir::Graph* g) const {
    return can_hold_new_initializers(model_, g);
  }

  ir::Value* add_constant(ir::Graph* g, std::string_view hint, TensorProto tensor) {
    if (can_hold_initializers(g)) return g->add_initializer(hint, std::move(tensor));
    ir::Node* c = g->add_node("Constant", {}, {std::string(hint)});
    c->set_attr(constant_value_attr(std::move(tensor)));
    return c->output(0);
  }

  // The producer of `v` if it is op `op` at the same opset as `n`, with one output.
  static ir::Node* producer_is(const ir::Value* v, std::string_view op, const ir::Node* n) {
    ir::Node* p = v ? v->producer() : nullptr;
    if (!p || p->dead() || !p->is(op) || p->opset() != n->opset() || p->outputs().size() != 1)
      return nullptr;
    return p;
  }

  // Binary arithmetic from opset 7 on (numpy broadcasting, no broadcast/axis attributes).
  static bool plain_binary(const ir::Node* n) {
    return n->opset() >= 7 && n->attributes().empty() && n->inputs().size() == 2 && n->input(0) &&
           n->input(1);
  }

  // Add(c1, Add(x, c2)) -> Add(x, c1 + c2), Mul likewise, operands in any order. Broadcasting is
  // associative, so the output shape is unchanged; the combined constant may not grow beyond the
  // larger of the two it replaces.
  bool push_down(ir::Node* n) {
    if (!plain_binary(n)) return false;
    for (int side = 0; side < 2; ++side) {
      ir::Value* c1 = n->input(side);
      ir::Value* t = n->input(1 - side);
      if (!is_constant(c1) || is_constant(t)) continue;
      ir::Node* inner = producer_is(t, n->op_type(), n);
      if (!inner || inner->graph() != n->graph() || !plain_binary(inner) || t->use_count() != 1)
        continue;
      for (int inner_side = 0; inner_side < 2; ++inner_side) {
        ir::Value* c2 = inner->input(inner_side);
        ir::Value* x = inner->input(1 - inner_side);
        if (!is_constant(c2) || is_constant(x)) continue;
        auto a = read_constant(c1);
        auto b = read_constant(c2);
        if (!a || !b) return false;
        auto sum = evaluate(*n, {&*a, &*b});
        if (!sum || sum->size() > std::max(a->size(), b->size())) return false;
        ir::Graph* g = n->graph();
        ir::Value* c = add_constant(g, n->output(0)->name() + "_const", sum->to_proto());
        n->set_input(0, x);
        n->set_input(1, c);
        g->remove_node(inner);
        return true;
      }
    }
    return false;
  }

  // x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1, Pow(x, 1) -> x; 0 - x -> Neg(x); 1 / x ->
  // Reciprocal(x) for floats. Only when the constant does not broadcast x to a larger shape.
  bool neutral(ir::Node* n) {
    if (!plain_binary(n)) return false;
    const std::string& op = n->op_type();
    ir::Value* out = n->output(0);
    for (int side = 0; side < 2; ++side) {
      ir::Value* x = n->input(1 - side);
      ir::Value* cv = n->input(side);
      if (!is_constant(cv) || is_constant(x)) continue;
      auto c = read_constant(cv);
      if (!c || !keeps_shape_of(x, c->dims())) continue;
      // Add, Sub, Mul and Div take one type T for both operands (and output); Pow's output has
      // the base's type, whatever the exponent's.
      const int32_t declared = x->elem_type();
      const int32_t type = op == "Pow" ? declared : c->dtype();
      if (type == 0 || (declared != 0 && declared != type)) continue;
      const bool right = side == 1;  // the constant is the second operand
      if (((op == "Add" && all_equal(*c, 0)) || (op == "Mul" && all_equal(*c, 1)) ||
           (right && op == "Sub" && all_equal(*c, 0)) ||
           (right && op == "Div" && all_equal(*c, 1)) ||
           (right && op == "Pow" && all_equal(*c, 1))) &&
          (eval::is_float_type(type) || eval::is_integer_type(type))) {
        return bypass_node(n, x, out);
      }
      // Neg and Reciprocal keep the node (and so its output name); only op and inputs change.
      if (!right && op == "Sub" && all_equal(*c, 0) && is_signed_or_float(type)) {
        become_unary(n, "Neg", x);
        return true;
      }
      if (!right && op == "Div" && all_equal(*c, 1) && is_ieee_float(type)) {
        become_unary(n, "Reciprocal", x);
        return true;
      }
    }
    return false;
  }

  static void become_unary(ir::Node* n, const char* op, ir::Value* x) {
    n->mutable_proto().set_op_type(op);
    n->set_input(0, x);
    n->truncate_inputs(1);
  }

  // Integer x * 0 -> zeros of the output's shape (x's shape must be static to know it). Floats
  // are left alone: NaN * 0 and Inf * 0 are NaN.
  bool absorb(ir::Node* n) {
    if (!n->is("Mul") || !plain_binary(n)) return false;
    for (int side = 0; side < 2; ++side) {
      ir::Value* x = n->input(1 - side);
      auto c = read_constant(n->input(side));
      if (!c || !eval::is_integer_type(c->dtype()) || x->elem_type() != c->dtype() ||
          !all_equal(*c, 0))
        continue;
      auto x_dims = static_dims(x);
      if (!x_dims) continue;
      auto shape = eval::broadcast_shape({*x_dims, c->dims()});
      if (!shape.ok()) continue;
      auto count = ir::element_count(*shape);
      if (!count || static_cast<uint64_t>(*count) * c->element_size() > kMaxZerosBytes) continue;
      auto zeros = eval::Tensor::zeros(c->dtype(), *shape, kMaxZerosBytes);
      if (!zeros.ok()) continue;
      ir::Value* out = n->output(0);
      ir::Graph* g = n->graph();
      if (can_hold_initializers(g)) {
        // Keep the output's name: consumers and graph outputs refer to it.
        g->remove_node(n);
        g->make_initializer(out, zeros->to_proto(out->name()));
      } else {
        n->mutable_proto().set_op_type("Constant");
        n->truncate_inputs(0);
        n->set_attr(constant_value_attr(zeros->to_proto()));
      }
      return true;
    }
    return false;
  }

  // Sum(a, c1, b, c2) -> Sum(a, b, c1 + c2): broadcasting is associative and commutative.
  bool fold_sum(ir::Node* n) {
    if (n->opset() < 8 || !n->attributes().empty()) return false;
    std::vector<ir::Value*> rest;
    std::vector<eval::Tensor> constants;
    for (ir::Value* v : n->inputs()) {
      if (!v) return false;
      if (!is_constant(v)) {
        rest.push_back(v);
        continue;
      }
      auto t = read_constant(v);
      if (!t) return false;
      constants.push_back(std::move(*t));
    }
    if (constants.size() < 2 || rest.empty()) return false;
    std::vector<const eval::Tensor*> ptrs;
    int64_t largest = 0;
    for (const auto& t : constants) {
      ptrs.push_back(&t);
      largest = std::max(largest, t.size());
    }
    auto sum = evaluate(*n, std::move(ptrs));
    if (!sum || sum->size() > largest) return false;
    rest.push_back(add_constant(n->graph(), n->output(0)->name() + "_const", sum->to_proto()));
    set_inputs(n, rest);
    return true;
  }

  static void set_inputs(ir::Node* n, const std::vector<ir::Value*>& inputs) {
    for (size_t i = 0; i < inputs.size(); ++i) n->set_input(i, inputs[i]);
    n->truncate_inputs(inputs.size());
  }

  // Concat(x, c1, c2, y) -> Concat(x, c12, y) with c12 = Concat(c1, c2) along the same axis.
  bool merge_concat(ir::Node* n) {
    if (n->opset() < 4 || !only_attributes(*n, {"axis"}) || !n->attr("axis")) return false;
    bool any_variable = false;
    for (ir::Value* v : n->inputs()) {
      if (!v) return false;
      any_variable = any_variable || !is_constant(v);
    }
    if (!any_variable) return false;
    std::vector<ir::Value*> merged;
    bool changed = false;
    std::vector<eval::Tensor> joined_runs;
    const auto& ins = n->inputs();
    for (size_t i = 0; i < ins.size();) {
      size_t j = i;
      while (j < ins.size() && is_constant(ins[j])) ++j;
      if (j - i < 2) {  // a variable input, or a lone constant
        merged.push_back(ins[i]);
        ++i;
        continue;
      }
      std::vector<eval::Tensor> parts;
      for (size_t k = i; k < j; ++k) {
        auto t = read_constant(ins[k]);
        if (!t) return false;
        parts.push_back(std::move(*t));
      }
      std::vector<const eval::Tensor*> ptrs;
      for (const auto& t : parts) ptrs.push_back(&t);
      auto joined = evaluate(*n, std::move(ptrs));
      if (!joined) return false;
      joined_runs.push_back(std::move(*joined));
      merged.push_back(nullptr);  // filled in once every run has been computed
      changed = true;
      i = j;
    }
    if (!changed) return false;
    size_t next = 0;
    for (ir::Value*& v : merged) {
      if (v) continue;
      v = add_constant(n->graph(), n->output(0)->name() + "_const", joined_runs[next++].to_proto());
    }
    set_inputs(n, merged);
    return true;
  }

  // Neg(Neg(x)) and Not(Not(x)) -> x: both are exact (two sign flips, two negations).
  bool inverse_pair(ir::Node* n) {
    if (n->inputs().size() != 1 || !n->attributes().empty()) return false;
    if (n->is("Neg") && n->opset() < 6) return false;  // consumed_inputs era
    ir::Node* inner = producer_is(n->input(0), n->op_type(), n);
    if (!inner || inner->inputs().size() != 1 || !inner->attributes().empty() || !inner->input(0))
      return false;
    return bypass_node(n, inner->input(0), n->output(0));
  }

  // The permutation of a Transpose; without a perm attribute the axes are reversed, which needs
  // the rank: the declared one, else `rank_hint`.
  static std::optional<std::vector<int64_t>> transpose_perm(const ir::Node* n,
                                                            std::optional<int64_t> rank_hint) {
    if (!only_attributes(*n, {"perm"}) || n->inputs().size() != 1 || !n->input(0))
      return std::nullopt;
    auto perm = n->attr_ints("perm");
    if (!perm || perm->empty()) {
      auto rank = known_rank(n->input(0));
      if (!rank) rank = rank_hint;
      if (!rank) return std::nullopt;
      perm.emplace();
      for (int64_t i = *rank - 1; i >= 0; --i) perm->push_back(i);
    }
    std::vector<bool> seen(perm->size(), false);
    for (int64_t p : *perm) {
      if (p < 0 || p >= static_cast<int64_t>(perm->size()) || seen[static_cast<size_t>(p)])
        return std::nullopt;
      seen[static_cast<size_t>(p)] = true;
    }
    return perm;
  }

  // Transpose(Transpose(x, p1), p2) -> Transpose(x, q) with q[j] = p1[p2[j]], or x if q is the
  // identity. The inner Transpose stays for its other readers.
  bool merge_transpose(ir::Node* n) {
    ir::Node* inner = producer_is(n->input(0), "Transpose", n);
    if (!inner) return false;
    auto p1 = transpose_perm(inner, std::nullopt);
    if (!p1) return false;
    // The intermediate has the rank of x, which is the length of p1.
    auto p2 = transpose_perm(n, static_cast<int64_t>(p1->size()));
    if (!p2 || p1->size() != p2->size()) return false;
    std::vector<int64_t> q(p2->size());
    bool identity = true;
    for (size_t j = 0; j < q.size(); ++j) {
      q[j] = (*p1)[static_cast<size_t>((*p2)[j])];
      identity = identity && q[j] == static_cast<int64_t>(j);
    }
    ir::Value* x = inner->input(0);
    if (identity && bypass_node(n, x, n->output(0))) return true;
    onnx::AttributeProto a;
    a.set_name("perm");
    a.set_type(onnx::AttributeProto::INTS);
    for (int64_t p : q) a.add_ints(p);
    n->set_attr(std::move(a));
    n->set_input(0, x);
    return true;
  }

  // Reshape(Reshape(x, s1), s2) -> Reshape(x, s2): the element count is the same, so only 0
  // entries of s2 (copying a dim of the intermediate, without allowzero) tie the result to s1.
  bool merge_reshape(ir::Node* n) {
    if (n->opset() < 5 || !only_attributes(*n, {"allowzero"}) || n->inputs().size() != 2)
      return false;
    ir::Node* inner = producer_is(n->input(0), "Reshape", n);
    if (!inner || !only_attributes(*inner, {"allowzero"}) || inner->inputs().size() != 2 ||
        !inner->input(0))
      return false;
    auto s1 = constant_ints(inner->input(1));
    auto s2 = constant_ints(n->input(1));
    if (!s1 || !s2) return false;
    if (n->attr_int("allowzero", 0) == 0 && std::count(s2->begin(), s2->end(), 0) > 0) return false;
    // An inner allowzero with a 0 makes an empty intermediate; keep such corner cases as they are.
    if (inner->attr_int("allowzero", 0) != 0 && std::count(s1->begin(), s1->end(), 0) > 0)
      return false;
    n->set_input(0, inner->input(0));
    return true;
  }

  // Axes of a Squeeze/Unsqueeze (attribute before opset 13, input from 13), nullopt if unknown.
  static std::optional<std::vector<int64_t>> axes_of(const ir::Node* n) {
    if (n->opset() < 13) {
      if (!only_attributes(*n, {"axes"}) || n->inputs().size() != 1) return std::nullopt;
      return n->attr_ints("axes");
    }
    if (!n->attributes().empty() || n->inputs().size() != 2) return std::nullopt;
    return constant_ints(n->input(1));
  }

  // Sorted axes made non-negative for `rank` (nullopt if rank is needed but unknown), checked to
  // be distinct and in range.
  static std::optional<std::vector<int64_t>> normalize(std::vector<int64_t> axes,
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
  static int64_t nth_free(const std::vector<int64_t>& taken, int64_t k) {
    int64_t p = 0;
    for (;; ++p) {
      if (std::binary_search(taken.begin(), taken.end(), p)) continue;
      if (k-- == 0) return p;
    }
  }

  void set_axes(ir::Node* n, const std::vector<int64_t>& axes) {
    if (n->opset() < 13) {
      onnx::AttributeProto a;
      a.set_name("axes");
      a.set_type(onnx::AttributeProto::INTS);
      for (int64_t v : axes) a.add_ints(v);
      n->set_attr(std::move(a));
    } else {
      Shape dims{static_cast<int64_t>(axes.size())};
      n->set_input(1, add_constant(n->graph(), n->output(0)->name() + "_axes",
                                   ir::make_int64_tensor(dims, axes)));
    }
  }

  // Squeeze(Squeeze(x)) and Unsqueeze(Unsqueeze(x)) become one node; Squeeze(Unsqueeze(x, a), a)
  // and Unsqueeze(Squeeze(x, a), a) become x.
  bool merge_squeeze(ir::Node* n) {
    const bool outer_squeeze = n->is("Squeeze");
    ir::Node* inner = producer_is(n->input(0), "Squeeze", n);
    if (!inner) inner = producer_is(n->input(0), "Unsqueeze", n);
    if (!inner || !inner->input(0)) return false;
    const bool inner_squeeze = inner->is("Squeeze");
    auto a2 = axes_of(n);
    auto a1 = axes_of(inner);
    if (!a1 || !a2 || a1->empty() || a2->empty()) return false;  // Squeeze of all 1-dims
    ir::Value* x = inner->input(0);
    auto rank = known_rank(x);
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
      return bypass_node(n, x, n->output(0));
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
    set_axes(n, all);
    n->set_input(0, x);
    return true;
  }

  // Cast(Cast(x, T1), T2) -> Cast(x, T2) when T1 holds every value of x's type exactly: the
  // second Cast then sees the very values x has. Through a lossy T1 (float -> int -> float,
  // double -> float -> double, int64 -> int32 -> int64) the chain stays.
  bool merge_cast(ir::Node* n) {
    auto cast_to = [](const ir::Node* c) -> int32_t {
      if (!only_attributes(*c, {"to"}) || c->inputs().size() != 1 || !c->input(0)) return 0;
      const onnx::AttributeProto* to = c->attr("to");
      if (!to || to->type() != onnx::AttributeProto::INT) return 0;  // opset 1 names a string
      return static_cast<int32_t>(to->i());
    };
    ir::Node* inner = producer_is(n->input(0), "Cast", n);
    if (!inner) return false;
    const int32_t t2 = cast_to(n);
    const int32_t t1 = cast_to(inner);
    ir::Value* x = inner->input(0);
    const int32_t t0 = x->elem_type();
    // Number -> string formatting depends on the source type (0.1f prints differently as double).
    if (t0 == 0 || t1 == 0 || t2 == 0 || t2 == TensorProto::STRING || !holds_exactly(t0, t1))
      return false;
    if (t2 == t0 && bypass_node(n, x, n->output(0))) return true;
    n->set_input(0, x);
    return true;
  }

  ir::Model& model_;
};

class SimplifyArithmetic final : public Pass {
 public:
  std::string_view name() const override { return "simplify_arithmetic"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    PassResult result;
    Simplifier simplifier(model);
    for (ir::Graph* g : model.all_graphs()) {
      for (ir::Node* n : g->nodes()) {
        if (n->dead()) continue;
        if (simplifier.simplify(n)) result.add();
      }
    }
    return result;
  }
};

}  // namespace

std::unique_ptr<Pass> make_simplify_arithmetic() { return std::make_unique<SimplifyArithmetic>(); }

PassInfo simplify_arithmetic_pass() {
  return {.name = "simplify_arithmetic",
          .level = 1,
          .description =
              "exact algebraic rewrites: constant push-down, neutral and absorbing elements, "
              "inverse pairs, Transpose/Reshape/Squeeze/Unsqueeze/Cast chains",
          .options = {},
          .create = make_simplify_arithmetic};
}

}  // namespace graft
