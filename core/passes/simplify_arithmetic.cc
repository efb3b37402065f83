// Algebraic simplifications that give the same results as the original graph:
//  - constants pushed together: Add(c1, Add(x, c2)) -> Add(x, c1 + c2), the same for Mul; the
//    constant operands of a Sum combined into one; adjacent constant inputs of a Concat merged;
//  - neutral elements: x + 0, x - 0, x * 1, x / 1, Pow(x, 1) -> x; 0 - x -> Neg(x);
//    1 / x -> Reciprocal(x) (floats); integer x * 0 -> zeros;
//  - inverse pairs Neg(Neg(x)), Not(Not(x)) -> x;
//  - x / 2^k -> x * 2^-k for floats where 2^-k is a normal number of the type (exact);
//  - y * Reciprocal(x) -> y / x for floats (one rounding instead of two: see mul_by_reciprocal);
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
//
// The rules live in two files: arithmetic here, chains of shape ops and casts in
// simplify_chains.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/eval/broadcast.h"
#include "core/eval/kernel.h"
#include "core/eval/tensor.h"
#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/rules.h"

namespace graft {

namespace {

using onnx::TensorProto;
using Shape = std::vector<int64_t>;

// x * 0 for integers becomes a zero tensor of the output's shape; above this size the tensor
// would cost more in the file than the Mul it replaces.
constexpr uint64_t kMaxZerosBytes = 64ull << 10;

// True if broadcasting x against a constant of shape `c` gives x's own shape: the constant has
// no more axes than x and each of its dims is 1 or x's (known) dim. A scalar never grows x.
bool keeps_shape_of(const ir::Value* x, const Shape& c) {
  bool all_ones = true;
  for (int64_t d : c) all_ones = all_ones && d == 1;
  if (c.empty()) return true;
  const ir::TensorFact& f = x->fact();
  if (!f.has_rank || f.dims.size() < c.size()) return false;
  if (all_ones) return true;
  const size_t offset = f.dims.size() - c.size();
  for (size_t i = 0; i < c.size(); ++i)
    if (c[i] != 1 && f.dim(static_cast<int64_t>(offset + i)) != c[i]) return false;
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

bool is_signed_or_float(int32_t t) {
  return t == TensorProto::INT8 || t == TensorProto::INT16 || t == TensorProto::INT32 ||
         t == TensorProto::INT64 || t == TensorProto::FLOAT16 || t == TensorProto::FLOAT ||
         t == TensorProto::DOUBLE;
}

// Binary arithmetic from opset 7 on (numpy broadcasting, no broadcast/axis attributes).
bool plain_binary(const ir::Node& n) {
  return n.opset() >= 7 && n.attributes().empty() && n.inputs().size() == 2 && n.input(0) &&
         n.input(1) && n.outputs().size() == 1 && n.output(0);
}

// Add(c1, Add(x, c2)) -> Add(x, c1 + c2), Mul likewise, operands in any order. Broadcasting is
// associative, so the output shape is unchanged; the combined constant may not grow beyond the
// larger of the two it replaces.
bool push_down(ir::Node& n, Rewriter& rw) {
  if (!plain_binary(n)) return false;
  for (int side = 0; side < 2; ++side) {
    ir::Value* c1 = n.input(side);
    ir::Value* t = n.input(1 - side);
    if (!is_constant_value(c1) || is_constant_value(t)) continue;
    ir::Node* inner = chain_producer(t, n.op_type(), n);
    if (!inner || !plain_binary(*inner) || !single_use(t)) continue;
    for (int inner_side = 0; inner_side < 2; ++inner_side) {
      ir::Value* c2 = inner->input(inner_side);
      ir::Value* x = inner->input(1 - inner_side);
      if (!is_constant_value(c2) || is_constant_value(x)) continue;
      auto a = constant_tensor(c1);
      auto b = constant_tensor(c2);
      if (!a || !b) return false;
      auto sum = evaluate(n, {&*a, &*b});
      if (!sum || sum->size() > std::max(a->size(), b->size())) return false;
      ir::Value* c = rw.add_constant(*n.graph(), sum->to_proto(), n.output(0)->name() + "_const");
      rw.set_inputs(&n, {x, c});
      rw.erase(inner);
      return true;
    }
  }
  return false;
}

// x + 0, 0 + x, x - 0, x * 1, 1 * x, x / 1, Pow(x, 1) -> x; 0 - x -> Neg(x); 1 / x ->
// Reciprocal(x) for floats. Only when the constant does not broadcast x to a larger shape.
bool neutral(ir::Node& n, Rewriter& rw) {
  if (!plain_binary(n)) return false;
  const std::string& op = n.op_type();
  for (int side = 0; side < 2; ++side) {
    ir::Value* x = n.input(1 - side);
    ir::Value* cv = n.input(side);
    if (!is_constant_value(cv) || is_constant_value(x)) continue;
    auto c = constant_tensor(cv);
    if (!c || !keeps_shape_of(x, c->dims())) continue;
    // Add, Sub, Mul and Div take one type T for both operands (and output); Pow's output has
    // the base's type, whatever the exponent's.
    const int32_t known = x->elem_type();
    const int32_t type = op == "Pow" ? known : c->dtype();
    if (type == 0 || (known != 0 && known != type)) continue;
    const bool right = side == 1;  // the constant is the second operand
    if (((op == "Add" && all_equal(*c, 0)) || (op == "Mul" && all_equal(*c, 1)) ||
         (right && op == "Sub" && all_equal(*c, 0)) || (right && op == "Div" && all_equal(*c, 1)) ||
         (right && op == "Pow" && all_equal(*c, 1))) &&
        (is_float_type(type) || is_integer_type(type)))
      return rw.replace_node(&n, {x}, /*allow_identity=*/false);
    const char* unary = nullptr;
    if (!right && op == "Sub" && all_equal(*c, 0) && is_signed_or_float(type)) unary = "Neg";
    if (!right && op == "Div" && all_equal(*c, 1) && is_ieee_float(type)) unary = "Reciprocal";
    if (unary) {
      ir::Node* u = rw.add_node(*n.graph(), unary, {x}, 1, &n);
      return rw.replace_node(&n, {u->output(0)});
    }
  }
  return false;
}

// Integer x * 0 -> zeros of the output's shape (x's shape must be static to know it). Floats
// are left alone: NaN * 0 and Inf * 0 are NaN.
bool absorb(ir::Node& n, Rewriter& rw) {
  if (!n.is("Mul") || !plain_binary(n)) return false;
  for (int side = 0; side < 2; ++side) {
    ir::Value* x = n.input(1 - side);
    auto c = constant_tensor(n.input(side));
    if (!c || !is_integer_type(c->dtype()) || x->elem_type() != c->dtype() || !all_equal(*c, 0))
      continue;
    auto x_dims = x->static_shape();
    if (!x_dims) continue;
    auto shape = eval::broadcast_shape({*x_dims, c->dims()});
    if (!shape.ok()) continue;
    auto count = ir::element_count(*shape);
    if (!count || static_cast<uint64_t>(*count) * c->element_size() > kMaxZerosBytes) continue;
    auto zeros = eval::Tensor::zeros(c->dtype(), *shape, kMaxZerosBytes);
    if (!zeros.ok()) continue;
    return rw.replace_with_constant(&n, zeros->to_proto());
  }
  return false;
}

// Sum(a, c1, b, c2) -> Sum(a, b, c1 + c2): broadcasting is associative and commutative.
bool fold_sum(ir::Node& n, Rewriter& rw) {
  if (n.opset() < 8 || !n.attributes().empty() || n.outputs().size() != 1) return false;
  std::vector<ir::Value*> rest;
  std::vector<eval::Tensor> constants;
  for (ir::Value* v : n.inputs()) {
    if (!v) return false;
    if (!is_constant_value(v)) {
      rest.push_back(v);
      continue;
    }
    auto t = constant_tensor(v);
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
  auto sum = evaluate(n, std::move(ptrs));
  if (!sum || sum->size() > largest) return false;
  rest.push_back(rw.add_constant(*n.graph(), sum->to_proto(), n.output(0)->name() + "_const"));
  rw.set_inputs(&n, rest);
  return true;
}

// Concat(x, c1, c2, y) -> Concat(x, c12, y) with c12 = Concat(c1, c2) along the same axis.
bool merge_concat(ir::Node& n, Rewriter& rw) {
  if (n.opset() < 4 || !only_attributes(n, {"axis"}) || !n.attr("axis") || n.outputs().size() != 1)
    return false;
  bool any_variable = false;
  for (ir::Value* v : n.inputs()) {
    if (!v) return false;
    any_variable = any_variable || !is_constant_value(v);
  }
  if (!any_variable) return false;
  std::vector<ir::Value*> merged;
  std::vector<eval::Tensor> joined_runs;
  const auto& ins = n.inputs();
  for (size_t i = 0; i < ins.size();) {
    size_t j = i;
    while (j < ins.size() && is_constant_value(ins[j])) ++j;
    if (j - i < 2) {  // a variable input, or a lone constant
      merged.push_back(ins[i]);
      ++i;
      continue;
    }
    std::vector<eval::Tensor> parts;
    for (size_t k = i; k < j; ++k) {
      auto t = constant_tensor(ins[k]);
      if (!t) return false;
      parts.push_back(std::move(*t));
    }
    std::vector<const eval::Tensor*> ptrs;
    for (const auto& t : parts) ptrs.push_back(&t);
    auto joined = evaluate(n, std::move(ptrs));
    if (!joined) return false;
    joined_runs.push_back(std::move(*joined));
    merged.push_back(nullptr);  // filled in once every run has been computed
    i = j;
  }
  if (joined_runs.empty()) return false;
  size_t next = 0;
  for (ir::Value*& v : merged) {
    if (v) continue;
    v = rw.add_constant(*n.graph(), joined_runs[next++].to_proto(), n.output(0)->name() + "_const");
  }
  rw.set_inputs(&n, merged);
  return true;
}

// Neg(Neg(x)) and Not(Not(x)) -> x: both are exact (two sign flips, two negations).
bool inverse_pair(ir::Node& n, Rewriter& rw) {
  if (n.inputs().size() != 1 || !n.attributes().empty() || n.outputs().size() != 1) return false;
  if (n.is("Neg") && n.opset() < 6) return false;  // consumed_inputs era
  ir::Node* inner = chain_producer(n.input(0), n.op_type(), n);
  if (!inner || inner->inputs().size() != 1 || !inner->attributes().empty() || !inner->input(0))
    return false;
  return rw.replace_node(&n, {inner->input(0)}, /*allow_identity=*/false);
}

// x / c -> x * (1 / c) for a float constant c whose every element is a power of two whose
// reciprocal the type holds exactly: both are then the correctly rounded x * 2^-k, bit for bit
// (including signed zeros, infinities and NaN). Multiplication is cheaper than division.
bool div_by_power_of_two(ir::Node& n, Rewriter& rw) {
  if (!n.is("Div") || !plain_binary(n) || is_constant_value(n.input(0))) return false;
  auto c = float_constant(n.input(1));
  if (!c || n.input(0)->elem_type() != c->dtype || !keeps_shape_of(n.input(0), c->dims))
    return false;
  std::vector<double> reciprocal;
  for (double v : c->values) {
    int exponent = 0;
    if (!std::isfinite(v) || std::frexp(v, &exponent) != 0.5 * (v < 0 ? -1 : 1)) return false;
    reciprocal.push_back(1.0 / v);  // exact in double: a power of two within double's range
  }
  // The reciprocal must be a normal number of the type (not rounded, not an infinity).
  const double smallest = c->dtype == onnx::TensorProto::DOUBLE    ? 0x1p-1022
                          : c->dtype == onnx::TensorProto::FLOAT16 ? 0x1p-14
                                                                   : 0x1p-126;
  if (!ir::fits_float_type(c->dtype, reciprocal)) return false;
  for (double r : reciprocal)
    if (std::abs(r) < smallest) return false;
  ir::Value* inv = rw.add_constant(*n.graph(), ir::make_float_tensor(c->dtype, c->dims, reciprocal),
                                   n.input(1)->name() + "_reciprocal");
  ir::Node* mul = rw.add_node(*n.graph(), "Mul", {n.input(0), inv}, 1, &n);
  return rw.replace_node(&n, {mul->output(0)});
}

// Mul(y, Reciprocal(x)) -> Div(y, x) for floats (ONNX Runtime's DivMulFusion; 1 / x becomes
// Reciprocal(x) by neutral_element first). One operation instead of two, and one rounding
// instead of two: the result is the correctly rounded y / x where the original rounded 1 / x and
// then the product, so it may differ from it in the last place (and for x whose reciprocal is
// subnormal or infinite) — the accepted difference of this rule, the one ONNX Runtime accepts.
bool mul_by_reciprocal(ir::Node& n, Rewriter& rw) {
  // Reciprocal takes float types only, so no type check is needed (function bodies have none).
  if (!plain_binary(n)) return false;
  for (int side = 0; side < 2; ++side) {
    ir::Value* r = n.input(side);
    ir::Node* rec = chain_producer(r, "Reciprocal", n);
    if (!rec || !single_use(r) || rec->inputs().size() != 1 || !rec->input(0) ||
        !rec->attributes().empty() || rec->opset() < 6)
      continue;
    ir::Node* div = rw.add_node(*n.graph(), "Div", {n.input(1 - side), rec->input(0)}, 1, &n);
    if (!rw.replace_node(&n, {div->output(0)})) {
      rw.erase(div);
      return false;
    }
    rw.erase(rec);
    return true;
  }
  return false;
}

}  // namespace

std::vector<Rule> arithmetic_rules() {
  return {{"push_down_constants", {"Add", "Mul"}, push_down},
          {"neutral_element", {"Add", "Mul", "Sub", "Div", "Pow"}, neutral},
          {"integer_times_zero", {"Mul"}, absorb},
          {"sum_constants", {"Sum"}, fold_sum},
          {"concat_constants", {"Concat"}, merge_concat},
          {"inverse_pair", {"Neg", "Not"}, inverse_pair},
          {"div_by_power_of_two", {"Div"}, div_by_power_of_two},
          {"mul_by_reciprocal", {"Mul"}, mul_by_reciprocal}};
}

PassInfo simplify_arithmetic_pass() {
  return describe(
      {.name = "simplify_arithmetic",
       .level = 1,
       .description =
           "exact algebraic rewrites: constant push-down, neutral and absorbing elements, "
           "inverse pairs, Transpose/Reshape/Squeeze/Unsqueeze/Cast/Clip chains, Relu next to "
           "a non-negative Clip",
       .options = {}},
      {arithmetic_rules, chain_rules});
}

}  // namespace graft
