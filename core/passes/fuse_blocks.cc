// Normalization and activation blocks that exporters write out as elementwise ops become the
// standard ONNX op that computes them, one kernel in runtimes instead of eight to twelve:
//
//  - layer_norm (opset >= 17): m = ReduceMean(x), d = x - m, v = ReduceMean(d^2 or d * d),
//    y = d / Sqrt(v + eps) or d * Reciprocal(Sqrt(v + eps)) (or d * (1 / Sqrt(..))), then
//    optionally y * gamma and + beta, over the trailing K axes -> LayerNormalization(x, gamma,
//    beta, axis = -K, epsilon = eps) (gamma all ones when the block has none);
//  - gelu_erf, gelu_tanh (opset >= 20): 0.5 * x * (1 + Erf(x / sqrt(2))) (also x * (1/sqrt(2)),
//    and the three products in any association and order) -> Gelu; 0.5 * x * (1 + Tanh(sqrt(2/pi)
//    * (x + 0.044715 * x^3))) with x^3 as Pow(x, 3) or x * x * x -> Gelu approximate = "tanh";
//  - rms_norm (opset >= 23): y = x / Sqrt(ReduceMean(x^2 or x * x) + eps) or x * Reciprocal(..),
//    then optionally y * gamma -> RMSNormalization(x, gamma, axis = -K, epsilon = eps).
//  - rotary_embedding (opset >= 23): x * cos + rotate_half(x) * sin with cos and sin gathered
//    from constant tables by position ids (core/passes/patterns/rotary.h) -> RotaryEmbedding(x,
//    cos_cache, sin_cache, position_ids), the caches the tables' first halves (the ids expanded
//    to x's batch and sequence where facts do not show them equal).
//
// Only at or above the opset that defines the fused op, in the graph's own opset (a model's opset
// is never raised). Every intermediate value must have no reader outside the block (d's two
// readers are both in it); the ReduceMeans must keep dims, reduce exactly the trailing K axes of
// an input whose rank and normalized dims are known from checked facts (the scale must match
// them: ONNX Runtime's kernels want Scale and B of exactly the normalized shape, so a gamma with
// leading ones is reshaped and a gamma that would broadcast inside the normalized axes is left
// alone); eps, 0.5, 1, sqrt(2) ... must be constants with one element that do not broadcast x to
// a higher rank. Constants standing for an irrational number are compared with a relative
// tolerance of four units in the last place of their type (1e-9 for double, so that 10-digit
// literals match): the fused op uses the exact value. The normalized dims come from facts
// (known_dim), which rest on graph inputs, constants, Graft's rules and libonnx's inference.
//
// Exactness. The fused ops compute the same formula, but not in the same steps: each op of the
// decomposition rounds its result to the element type, the fused kernel keeps intermediate
// results at stash_type (float) or higher, and may sum the mean in another order and multiply by
// 1/sqrt(..) instead of dividing. So results may differ in the last bits (float), as they do
// between ONNX Runtime's own fused and unfused kernels; ONNX Runtime's LayerNormFusion,
// GeluFusion and SimplifiedLayerNormFusion accept the same differences. For float16 inputs
// the normalizations keep their statistics at stash_type float (the default): more accurate
// than the float16 decomposition, which ONNX Runtime's fusions accept too. Double inputs are not
// normalized (LayerNormalization-17 has no double stash type, and a float stash would lose
// precision beyond rounding differences); Gelu, which has no stash, is fused for double too.
// bfloat16 blocks are left alone. RotaryEmbedding computes each output element as one
// product-sum, rounded once where the decomposition rounds the products first; ONNX Runtime's
// kernel rejects position ids outside [0, P) (Gather accepts negative ones) and caches shorter
// than the sequence: errors on inputs the exporter's model would not get, never another result.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include <absl/strings/str_cat.h>

#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/patterns/rotary.h"
#include "core/passes/rules.h"

namespace graft {

namespace {

using onnx::TensorProto;

// Largest normalized block whose all-ones scale a rewrite writes out.
constexpr int64_t kMaxScaleElements = int64_t{1} << 20;

// A relative tolerance for a constant standing for an irrational number: a few units in the last
// place of its type.
double tolerance(int32_t dtype) {
  if (dtype == TensorProto::FLOAT16) return 4.0 / 1024;
  if (dtype == TensorProto::FLOAT) return 4.0 / (1 << 23);
  return 1e-9;
}

// The node computing `v` in `root`'s graph and opset if it is `op` with `inputs` inputs, one
// output and no attributes, and `v` has no reader but the block's (single use).
ir::Node* inner(ir::Value* v, std::string_view op, size_t inputs, const ir::Node& root) {
  if (!single_use(v)) return nullptr;
  ir::Node* p = chain_producer(v, op, root);
  if (!p || p->inputs().size() != inputs || !p->attributes().empty()) return nullptr;
  return p;
}

// `v` is a constant with one element of type `dtype` (x's; 0: any, for Pow's exponent) equal to
// `want` (within `rel` of it), that does not broadcast x to a higher rank.
bool scalar_is(const ir::Value* v, const ir::Value* x, int32_t dtype, double want, double rel) {
  const auto* c = constant_header(v);
  if (!c || (dtype != 0 && c->data_type() != dtype)) return false;
  if (c->dims_size() > 0) {
    std::optional<int64_t> rank = x->rank();
    if (!rank || c->dims_size() > *rank || x->rank() != *rank) return false;
  }
  std::optional<double> value = constant_scalar(v);
  return value && std::abs(*value - want) <= rel * std::abs(want);
}

// The other operand of the binary node `n` when one of its two inputs is `v`, else nullptr.
ir::Value* other_operand(const ir::Node& n, const ir::Value* v) {
  if (n.inputs().size() != 2) return nullptr;
  if (n.input(0) == v) return n.input(1);
  if (n.input(1) == v) return n.input(0);
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Gelu

// The matched nodes of a block, root first: erased in that order once the root is replaced.
using Block = std::vector<ir::Node*>;

// 1 + Erf(x / sqrt(2)) or 1 + Erf(x * (1 / sqrt(2))), `t` read only by the block.
bool erf_term(ir::Value* t, ir::Value* x, int32_t dtype, const ir::Node& root, Block& block) {
  ir::Node* add = inner(t, "Add", 2, root);
  if (!add) return false;
  for (int side = 0; side < 2; ++side) {
    ir::Node* erf = inner(add->input(side), "Erf", 1, root);
    if (!erf || !scalar_is(add->input(1 - side), x, dtype, 1, 0)) continue;
    ir::Value* u = erf->input(0);
    if (ir::Node* div = inner(u, "Div", 2, root)) {
      if (div->input(0) != x ||
          !scalar_is(div->input(1), x, dtype, std::sqrt(2.0), tolerance(dtype)))
        continue;
      block.insert(block.end(), {add, erf, div});
      return true;
    }
    if (ir::Node* mul = inner(u, "Mul", 2, root)) {
      ir::Value* c = other_operand(*mul, x);
      if (!c || !scalar_is(c, x, dtype, std::sqrt(0.5), tolerance(dtype))) continue;
      block.insert(block.end(), {add, erf, mul});
      return true;
    }
  }
  return false;
}

// x^3 as Pow(x, 3), Mul(x, Mul(x, x)) or Mul(Mul(x, x), x).
bool cube_of(ir::Value* v, ir::Value* x, const ir::Node& root, Block& block) {
  if (ir::Node* pow = inner(v, "Pow", 2, root)) {
    if (pow->input(0) != x || !scalar_is(pow->input(1), x, 0, 3, 0)) return false;
    block.push_back(pow);
    return true;
  }
  ir::Node* outer = inner(v, "Mul", 2, root);
  if (!outer) return false;
  for (int side = 0; side < 2; ++side) {
    ir::Node* square = inner(outer->input(side), "Mul", 2, root);
    if (square && outer->input(1 - side) == x && square->input(0) == x && square->input(1) == x) {
      block.insert(block.end(), {outer, square});
      return true;
    }
  }
  return false;
}

// 1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)), `t` read only by the block.
bool tanh_term(ir::Value* t, ir::Value* x, int32_t dtype, const ir::Node& root, Block& block) {
  ir::Node* add = inner(t, "Add", 2, root);
  if (!add) return false;
  const double tol = tolerance(dtype);
  for (int side = 0; side < 2; ++side) {
    ir::Node* tanh = inner(add->input(side), "Tanh", 1, root);
    if (!tanh || !scalar_is(add->input(1 - side), x, dtype, 1, 0)) continue;
    ir::Node* scaled = inner(tanh->input(0), "Mul", 2, root);
    if (!scaled) return false;
    for (int s = 0; s < 2; ++s) {
      ir::Node* sum = inner(scaled->input(s), "Add", 2, root);
      if (!sum || !scalar_is(scaled->input(1 - s), x, dtype, std::sqrt(2.0 / M_PI), tol)) continue;
      ir::Value* cubic = other_operand(*sum, x);
      ir::Node* times = cubic ? inner(cubic, "Mul", 2, root) : nullptr;
      if (!times) continue;
      for (int k = 0; k < 2; ++k) {
        Block rest;
        if (!scalar_is(times->input(1 - k), x, dtype, 0.044715, tol) ||
            !cube_of(times->input(k), x, root, rest))
          continue;
        block.insert(block.end(), {add, tanh, scaled, sum, times});
        block.insert(block.end(), rest.begin(), rest.end());
        return true;
      }
    }
  }
  return false;
}

using Term = bool (*)(ir::Value* t, ir::Value* x, int32_t dtype, const ir::Node& root,
                      Block& block);

// root = 0.5 * x * t as a product of three factors in any association and order, with `term`
// matching t for that x. Replaces the block with Gelu(x, approximate).
bool gelu(ir::Node& root, Rewriter& rw, Term term, const char* approximate) {
  if (root.inputs().size() != 2 || root.outputs().size() != 1 || !root.attributes().empty())
    return false;
  for (int side = 0; side < 2; ++side) {
    ir::Node* product = inner(root.input(side), "Mul", 2, root);
    if (!product) continue;
    ir::Value* factors[3] = {product->input(0), product->input(1), root.input(1 - side)};
    // Which factor is 0.5 and which is t; x is the third.
    for (int h = 0; h < 3; ++h) {
      for (int t = 0; t < 3; ++t) {
        if (t == h) continue;
        ir::Value* x = factors[3 - h - t];
        // x's type, or where the facts do not know it (a function's input) the 0.5's: the
        // block's binary ops require both operands to have the same type.
        const auto* half = constant_header(factors[h]);
        const int32_t dtype = x->elem_type() ? x->elem_type() : half ? half->data_type() : 0;
        if (!is_ieee_float(dtype) || !scalar_is(factors[h], x, dtype, 0.5, 0)) continue;
        Block block = {&root, product};
        if (!term(factors[t], x, dtype, root, block)) {
          no_match(root, approximate ? "0.5 * x * t where t is not 1 + Tanh(sqrt(2/pi) * (x + "
                                       "0.044715 * x^3)) read only by the block"
                                     : "0.5 * x * t where t is not 1 + Erf(x / sqrt(2)) read "
                                       "only by the block");
          continue;
        }
        ir::Node* fused = rw.add_node(*root.graph(), "Gelu", {x}, 1, &root);
        if (approximate) rw.set_attr(fused, string_attr("approximate", approximate));
        if (!rw.replace_node(&root, {fused->output(0)})) return false;
        for (size_t i = 1; i < block.size(); ++i) rw.erase(block[i]);
        return true;
      }
    }
  }
  return false;
}

bool gelu_erf(ir::Node& root, Rewriter& rw) { return gelu(root, rw, erf_term, nullptr); }
bool gelu_tanh(ir::Node& root, Rewriter& rw) { return gelu(root, rw, tanh_term, "tanh"); }

// ---------------------------------------------------------------------------------------------
// LayerNormalization and RMSNormalization

// A normalization's statistics: ReduceMean over the trailing `axes` axes of its input, kept dims.
struct Reduction {
  ir::Node* node = nullptr;
  int64_t axes = 0;  // K: the last K axes
};

// The trailing axes count of a ReduceMean over the last K of `rank` axes with kept dims, or 0.
int64_t trailing_axes(const ir::Node& reduce, int64_t rank) {
  std::optional<ir::ReduceParams> p = ir::reduce_params(reduce);
  if (!p || !p->keepdims || p->noop_with_empty_axes) return 0;
  std::vector<int64_t> axes;
  if (!p->axes) {
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  } else {
    std::optional<std::vector<int64_t>> normalized = ir::normalize_axes(*p->axes, rank);
    if (!normalized || normalized->empty()) return 0;
    axes = std::move(*normalized);
  }
  std::sort(axes.begin(), axes.end());
  const int64_t k = static_cast<int64_t>(axes.size());
  for (int64_t i = 0; i < k; ++i)
    if (axes[static_cast<size_t>(i)] != rank - k + i) return 0;
  return k;
}

// The ReduceMean computing `v` (read only by the block) over the trailing axes of `of`.
std::optional<Reduction> mean_of(ir::Value* v, const ir::Value* of, int64_t rank,
                                 const ir::Node& root, std::string_view what) {
  ir::Node* reduce = chain_producer(v, "ReduceMean", root);
  if (!reduce || reduce->input(0) != of ||
      !only_attributes(*reduce, {"axes", "keepdims", "noop_with_empty_axes"}))
    return no_match_with(
        root, [&] { return absl::StrCat(std::string(what), " is not a ReduceMean of it"); });
  if (!single_use(v))
    return no_match_with(
        *reduce, [&] { return absl::StrCat(std::string(what), " has readers outside the block"); });
  const int64_t k = trailing_axes(*reduce, rank);
  if (k == 0)
    return no_match_with(*reduce, [&] {
      return absl::StrCat(std::string(what), " does not reduce trailing axes with keepdims=1");
    });
  return Reduction{reduce, k};
}

// z^2 as Pow(z, 2) or Mul(z, z), read only by the block.
ir::Node* square_of(ir::Value* v, const ir::Value* z, const ir::Node& root) {
  if (ir::Node* pow = inner(v, "Pow", 2, root))
    return pow->input(0) == z && scalar_is(pow->input(1), z, 0, 2, 0) ? pow : nullptr;
  ir::Node* mul = inner(v, "Mul", 2, root);
  return mul && mul->input(0) == z && mul->input(1) == z ? mul : nullptr;
}

// The quotient node y = n / Sqrt(s) or n * Reciprocal(Sqrt(s)) or n * (1 / Sqrt(s)), for the
// root `y`: fills numerator, the Sqrt's operand and the nodes between.
struct Quotient {
  ir::Value* numerator = nullptr;
  ir::Value* radicand = nullptr;
  ir::Node* sqrt = nullptr;
  ir::Node* reciprocal = nullptr;  // when y is a product
};
std::optional<Quotient> quotient(const ir::Node& y) {
  if (y.inputs().size() != 2 || y.outputs().size() != 1 || !y.attributes().empty())
    return std::nullopt;
  if (y.is("Div")) {
    ir::Node* sqrt = inner(y.input(1), "Sqrt", 1, y);
    if (!sqrt) return std::nullopt;
    return Quotient{y.input(0), sqrt->input(0), sqrt, nullptr};
  }
  for (int side = 0; side < 2; ++side) {
    ir::Value* r = y.input(side);
    ir::Node* reciprocal = inner(r, "Reciprocal", 1, y);
    ir::Value* root_of = reciprocal ? reciprocal->input(0) : nullptr;
    if (!reciprocal) {
      ir::Node* div = inner(r, "Div", 2, y);
      if (!div || !scalar_is(div->input(0), div->input(1), div->input(1)->elem_type(), 1, 0))
        continue;
      reciprocal = div;
      root_of = div->input(1);
    }
    ir::Node* sqrt = inner(root_of, "Sqrt", 1, y);
    if (!sqrt) continue;
    return Quotient{y.input(1 - side), sqrt->input(0), sqrt, reciprocal};
  }
  return std::nullopt;
}

// radicand = mean + eps (either order) with a finite constant eps; the mean's value and eps.
struct Variance {
  ir::Node* add = nullptr;
  ir::Value* mean = nullptr;
  double eps = 0;
};
std::optional<Variance> plus_epsilon(ir::Value* radicand, const ir::Value* x,
                                     const ir::Node& root) {
  ir::Node* add = inner(radicand, "Add", 2, root);
  if (!add)
    return no_match(root, "the Sqrt does not read variance + epsilon (an Add only it reads)");
  for (int side = 0; side < 2; ++side) {
    const ir::Value* eps = add->input(1 - side);
    const auto* c = constant_header(eps);
    if (!c || c->data_type() != x->elem_type() || c->dims_size() > x->rank().value_or(0)) continue;
    std::optional<double> value = constant_scalar(eps);
    if (!value || !std::isfinite(*value)) continue;
    return Variance{add, add->input(side), *value};
  }
  return no_match(*add,
                  "epsilon is not a constant (one finite element of x's type, not broadcasting x)");
}

// The normalized dims (the last `k` of x's), known from checked facts, all positive.
std::optional<std::vector<int64_t>> normalized_dims(const ir::Value* x, int64_t k) {
  std::vector<int64_t> dims;
  int64_t count = 1;
  for (int64_t a = -k; a < 0; ++a) {
    std::optional<int64_t> d = known_dim(x, a);
    if (!d || *d < 1 || *d > kMaxScaleElements) return std::nullopt;
    count *= *d;
    if (count > kMaxScaleElements) return std::nullopt;
    dims.push_back(*d);
  }
  return dims;
}

// The operand that multiplies (adds to) `y` in `n`, when it is a constant or value of x's type
// of exactly the normalized shape (a constant may have leading ones up to x's rank): then
// ONNX Runtime's kernels accept it as Scale (B) and the result keeps x's shape. The value to
// use as the fused op's input (a constant with leading ones is re-made without them).
ir::Value* affine_operand(ir::Node& n, ir::Value* y, const ir::Value* x, int64_t rank,
                          const std::vector<int64_t>& norm, Rewriter& rw) {
  if (n.outputs().size() != 1 || !n.attributes().empty() || n.graph() != y->owner()) return nullptr;
  ir::Value* g = other_operand(n, y);
  if (!g || g == y) return nullptr;
  const size_t k = norm.size();
  if (const auto* c = constant_header(g)) {
    if (c->data_type() != x->elem_type() || c->dims_size() < static_cast<int>(k) ||
        c->dims_size() > rank)
      return nullptr;
    const size_t lead = static_cast<size_t>(c->dims_size()) - k;
    for (size_t i = 0; i < static_cast<size_t>(c->dims_size()); ++i)
      if (c->dims(static_cast<int>(i)) != (i < lead ? 1 : norm[i - lead])) return nullptr;
    if (lead == 0) return g;
    TensorProto reshaped = *c;
    reshaped.clear_dims();
    for (int64_t d : norm) reshaped.add_dims(d);
    return rw.add_constant(*n.graph(), std::move(reshaped), g->name());
  }
  if (g->elem_type() != x->elem_type() || g->rank() != static_cast<int64_t>(k)) return nullptr;
  for (size_t i = 0; i < k; ++i)
    if (known_dim(g, static_cast<int64_t>(i)) != norm[i]) return nullptr;
  return g;
}

// The reader of `y` that the block's affine step is when `y` has no other reader: a Mul
// (Add) in y's graph at its opset.
ir::Node* affine_reader(ir::Value* y, std::string_view op, const ir::Node& root) {
  ir::Node* r = only_reader(y);
  return r && r->is(op) && r->graph() == root.graph() && r->opset() == root.opset() &&
                 r->inputs().size() == 2
             ? r
             : nullptr;
}

struct Normalization {
  ir::Value* x = nullptr;
  int64_t rank = 0, axes = 0;
  double eps = 0;
  std::vector<int64_t> norm;  // normalized dims
  Block block;                // every node but the ones the affine steps add
};

// The part both normalizations share, from the quotient root `y`: numerator / Sqrt(ReduceMean(
// numerator^2) + eps). `center` says whether the numerator must be x - ReduceMean(x)
// (LayerNormalization) or is x itself (RMSNormalization).
std::optional<Normalization> normalization(ir::Node& y, bool center) {
  std::optional<Quotient> q = quotient(y);
  if (!q) return std::nullopt;  // not n / Sqrt(s): most Div and Mul nodes, not worth a reason
  Normalization n;
  n.block = {&y};
  if (q->reciprocal) n.block.push_back(q->reciprocal);
  n.block.push_back(q->sqrt);
  ir::Value* z = q->numerator;  // d for LayerNormalization, x for RMSNormalization
  ir::Node* sub = nullptr;
  if (center) {
    sub = chain_producer(z, "Sub", y);
    if (!sub || sub->inputs().size() != 2 || !sub->attributes().empty())
      return no_match(y, "the numerator is not x - mean (a Sub in the same graph and opset)");
    n.x = sub->input(0);
  } else {
    n.x = z;
  }
  const int32_t dtype = n.x->elem_type();
  if (dtype != TensorProto::FLOAT && dtype != TensorProto::FLOAT16)
    return no_match(y, "x is not known to be float or float16");
  std::optional<int64_t> rank = n.x->rank();
  if (!rank || *rank < 1) return no_match(y, "x's rank is not known");
  n.rank = *rank;
  std::optional<Variance> var = plus_epsilon(q->radicand, n.x, y);
  if (!var) return std::nullopt;
  n.eps = var->eps;
  n.block.push_back(var->add);
  ir::Node* reduce = chain_producer(var->mean, "ReduceMean", y);
  ir::Node* square = reduce ? square_of(reduce->input(0), z, y) : nullptr;
  if (!square)
    return no_match(*var->add, "the variance is not ReduceMean of the numerator squared");
  std::optional<Reduction> second =
      mean_of(var->mean, square->output(0), n.rank, y, "the variance");
  if (!second) return std::nullopt;
  n.block.insert(n.block.end(), {second->node, square});
  n.axes = second->axes;
  // The centred d is read by the square and the quotient, and by nothing else.
  if (center && !only_read_by(z, {square, &y}))
    return no_match(*sub, "x - mean has readers outside the block");
  if (center) {
    std::optional<Reduction> first = mean_of(sub->input(1), n.x, n.rank, y, "the mean");
    if (!first) return std::nullopt;
    if (first->axes != n.axes)
      return no_match(*first->node, "the mean and the variance reduce different axes");
    n.block.insert(n.block.end(), {sub, first->node});
  }
  if (n.axes > n.rank || n.x->rank() != n.rank)
    return no_match(y, "the reduced axes do not fit x's rank");
  std::optional<std::vector<int64_t>> norm = normalized_dims(n.x, n.axes);
  if (!norm)
    return no_match(y, "the normalized dims of x are not all known (or exceed 2^20 elements)");
  n.norm = std::move(*norm);
  return n;
}

// An all-ones Scale of the normalized shape, for a block without gamma.
ir::Value* ones(Rewriter& rw, const ir::Node& root, const Normalization& n) {
  int64_t count = 1;
  for (int64_t d : n.norm) count *= d;
  return rw.add_constant(
      *root.graph(),
      ir::make_float_tensor(n.x->elem_type(), n.norm,
                            std::vector<double>(static_cast<size_t>(count), 1.0)),
      root.output(0)->name() + "_scale");
}

// Replaces the block (and the affine steps `last` ends) by `op`(x, scale[, bias]).
bool fuse_normalization(Rewriter& rw, ir::Node& y, const Normalization& n, const char* op,
                        ir::Node* last, ir::Value* scale, ir::Value* bias) {
  std::vector<ir::Value*> inputs = {n.x, scale ? scale : ones(rw, y, n)};
  if (bias) inputs.push_back(bias);
  ir::Node* fused = rw.add_node(*y.graph(), op, inputs, 1, last);
  rw.set_attr(fused, int_attr("axis", -n.axes));
  rw.set_attr(fused, float_attr("epsilon", n.eps));
  ir::Node* gamma_mul = last != &y ? only_reader(y.output(0)) : nullptr;
  if (!rw.replace_node(last, {fused->output(0)})) return false;
  if (gamma_mul && gamma_mul != last) rw.erase(gamma_mul);
  for (ir::Node* node : n.block) rw.erase(node);
  return true;
}

// The affine steps after y: y * gamma (then + beta when `with_bias`), each only when it fits.
struct Affine {
  ir::Node* last = nullptr;
  ir::Value* scale = nullptr;
  ir::Value* bias = nullptr;
};
Affine affine(ir::Node& y, const Normalization& n, bool with_bias, Rewriter& rw) {
  Affine a{&y, nullptr, nullptr};
  ir::Node* mul = affine_reader(y.output(0), "Mul", y);
  if (!mul) return a;
  ir::Value* scale = affine_operand(*mul, y.output(0), n.x, n.rank, n.norm, rw);
  if (!scale) return a;
  a = {mul, scale, nullptr};
  if (!with_bias) return a;
  ir::Node* add = affine_reader(mul->output(0), "Add", y);
  if (!add) return a;
  ir::Value* bias = affine_operand(*add, mul->output(0), n.x, n.rank, n.norm, rw);
  if (bias) a = {add, scale, bias};
  return a;
}

bool layer_norm(ir::Node& y, Rewriter& rw) {
  std::optional<Normalization> n = normalization(y, /*center=*/true);
  if (!n) return false;
  Affine a = affine(y, *n, /*with_bias=*/true, rw);
  return fuse_normalization(rw, y, *n, "LayerNormalization", a.last, a.scale, a.bias);
}

bool rms_norm(ir::Node& y, Rewriter& rw) {
  std::optional<Normalization> n = normalization(y, /*center=*/false);
  if (!n) return false;
  Affine a = affine(y, *n, /*with_bias=*/false, rw);
  return fuse_normalization(rw, y, *n, "RMSNormalization", a.last, a.scale, nullptr);
}

// ---------------------------------------------------------------------------------------------
// RotaryEmbedding

bool rotary_embedding(ir::Node& add, Rewriter& rw) {
  std::optional<RotaryMatch> m = match_rotary(add);
  if (!m) return false;
  std::optional<RotaryCaches> caches = rotary_caches(rw, add, *m);
  if (!caches) return false;
  ir::Value* ids = rotary_position_ids(rw, add, *m);
  ir::Node* fused =
      rw.add_node(*add.graph(), "RotaryEmbedding", {m->x, caches->cos, caches->sin, ids}, 1, &add);
  return replace_rotary(rw, *m, fused->output(0));
}

std::vector<Rule> block_rules() {
  // layer_norm before rms_norm: a LayerNormalization's d / Sqrt(mean(d^2) + eps) is also an RMS
  // normalization of d.
  return {{"layer_norm", {"Div", "Mul"}, layer_norm, "", 17},
          {"rms_norm", {"Div", "Mul"}, rms_norm, "", 23},
          {"gelu_erf", {"Mul"}, gelu_erf, "", 20},
          {"gelu_tanh", {"Mul"}, gelu_tanh, "", 20},
          {"rotary_embedding", {"Add"}, rotary_embedding, "", 23}};
}

}  // namespace

PassInfo fuse_blocks_pass() {
  return describe(
      {.name = "fuse_blocks",
       .level = 2,
       .description =
           "decomposed LayerNormalization (opset >= 17), Gelu (erf and tanh forms, opset >= 20), "
           "RMSNormalization and RotaryEmbedding (opset >= 23) blocks become the standard op",
       .options = {}},
      {block_rules});
}

}  // namespace graft
