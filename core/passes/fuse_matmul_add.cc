// Gemm fusions.
//
// matmul_add: MatMul(A, B) followed by Add(., C) with a constant bias is exactly Gemm(A, B, C)
// when the product is 2-D and C broadcasts to it in Gemm's (unidirectional) sense: one node
// instead of two, and runtimes have fused GEMM+bias kernels. Gemm only takes 2-D operands, so a
// MatMul whose operands' rank is not known to be 2 is left alone, as is an Add whose bias would
// broadcast the result to a bigger shape.
//
// transpose_into_gemm: Gemm reading a 2-D Transpose (perm [1, 0]) of A or B reads the
// transpose's input instead and flips transA or transB; matmul_transpose: the same for a 2-D
// MatMul, which becomes a Gemm. matmul_transpose_nd: MatMul(X, Transpose(W)) with X of rank > 2
// becomes a Gemm with transB between two Reshapes (a tied output projection; see the rule).
//
// gemm_add: a Gemm without C followed by Add of a constant takes it as C.
#include <optional>
#include <vector>

#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/rules.h"

namespace graft {

namespace {

using onnx::TensorProto;

// True if a bias dim is provably compatible with output dim `out` without making the result
// bigger: it is 1, or equal to a known `out`.
bool bias_dim_fits(int64_t bias_dim, std::optional<int64_t> out) {
  return bias_dim == 1 || (out && *out == bias_dim);
}

// True if the constant bias `c` broadcasts into an [rows, cols] product in Gemm's (unidirectional)
// sense without making it bigger: rank at most 2, each dim 1 or the product's known dim.
bool bias_fits(const TensorProto& c, std::optional<int64_t> rows, std::optional<int64_t> cols) {
  const int rank = c.dims_size();
  if (rank > 2) return false;
  if (rank >= 1 && !bias_dim_fits(c.dims(rank - 1), cols)) return false;
  return rank < 2 || bias_dim_fits(c.dims(0), rows);
}

bool matmul_add(ir::Node& add, Rewriter& rw) {
  // Add before opset 7 broadcasts only with its `broadcast` attribute, and Gemm before 7 has no
  // unidirectional broadcasting of C.
  if (add.inputs().size() != 2 || !add.attributes().empty() || add.outputs().size() != 1)
    return no_match(add, "the Add has attributes or not two inputs");
  ir::Node* matmul = nullptr;
  ir::Value* bias = nullptr;
  for (int side = 0; side < 2 && !matmul; ++side) {
    matmul = producer(add.input(side), "MatMul");
    bias = add.input(1 - side);
  }
  if (!matmul) return no_match(add, "neither operand is a MatMul's result");
  if (matmul->inputs().size() != 2 || !matmul->attributes().empty() ||
      matmul->graph() != add.graph())
    return no_match(*matmul, "the MatMul has attributes or another graph");
  if (!single_use(matmul->output(0)))
    return no_match(*matmul, "the MatMul's result has other readers");
  ir::Value* a = matmul->input(0);
  ir::Value* b = matmul->input(1);

  // Integer Gemm exists only from opset 9 and bfloat16 only from 13: stay with float types.
  const auto* c = constant_header(bias);
  if (!c) return no_match(add, "the other operand is not a constant");
  if (!is_ieee_float(c->data_type())) return no_match(add, "the bias is not float16/32/64");
  const int32_t dtype = c->data_type();
  for (const ir::Value* v : {a, b, matmul->output(0)})
    if (v->elem_type() != 0 && v->elem_type() != dtype)
      return no_match(*matmul, "the MatMul's types differ from the bias's");

  const ir::TensorFact& af = a->fact();
  const ir::TensorFact& bf = b->fact();
  if (a->rank() != 2 || b->rank() != 2)
    return no_match(*matmul, "the MatMul's operands are not known to be 2-D");
  // A bias of rank > 2, or with a dim that does not fit [M, N], would make Add's result bigger
  // than the product, which Gemm cannot express.
  if (!bias_fits(*c, af.dim(0), bf.dim(1)))
    return no_match(add, "the bias does not broadcast into the product without growing it");

  ir::Node* gemm = rw.add_node(*add.graph(), "Gemm", {a, b, bias}, 1, &add);
  if (!rw.replace_node(&add, {gemm->output(0)})) return false;
  rw.erase(matmul);
  return true;
}

// The input of a 2-D Transpose (perm [1, 0] or none) producing `v` in `graph`; nullptr otherwise.
ir::Value* transposed_2d(ir::Value* v, const ir::Graph* graph) {
  ir::Node* t = producer(v, "Transpose");
  if (!t || t->graph() != graph || !only_attributes(*t, {"perm"})) return nullptr;
  ir::Value* x = t->input(0);
  if (x->rank() != 2) return nullptr;
  auto perm = t->attr_ints("perm");
  if (perm && *perm != std::vector<int64_t>{1, 0}) return nullptr;
  return x;
}

// A MatMul with two operands, one output and no attributes, at an opset where Gemm's C is
// optional (11): what the Transpose-absorbing rules rewrite.
bool plain_matmul(const ir::Node& matmul) {
  return matmul.opset() >= 11 && matmul.attributes().empty() && matmul.inputs().size() == 2 &&
         matmul.outputs().size() == 1 && matmul.output(0);
}

// MatMul(A, Transpose(B)) with 2-D operands is Gemm(A, B, transB=1) (and Transpose(A) likewise):
// the transposition happens inside the GEMM instead of as a copy on every run. Gemm's C is
// optional from opset 11.
bool matmul_transpose(ir::Node& matmul, Rewriter& rw) {
  if (!plain_matmul(matmul)) return false;
  ir::Value* a = matmul.input(0);
  ir::Value* b = matmul.input(1);
  if (!producer(a, "Transpose") && !producer(b, "Transpose")) return false;  // most MatMuls
  if (a->rank() != 2 || b->rank() != 2)
    return no_match(matmul, "the operands are not both known to be 2-D");
  const int32_t dtype = a->elem_type();
  if (!is_ieee_float(dtype) || b->elem_type() != dtype)
    return no_match(matmul, "the operands are not known to be of one float type");
  // Only a Transpose nobody else reads goes away; otherwise nothing is saved.
  ir::Value* ta = single_use(a) ? transposed_2d(a, matmul.graph()) : nullptr;
  ir::Value* tb = single_use(b) ? transposed_2d(b, matmul.graph()) : nullptr;
  if (!ta && !tb)
    return no_match(matmul,
                    "no operand is a 2-D Transpose (perm [1, 0]) that only the MatMul reads");
  ir::Node* gemm = rw.add_node(*matmul.graph(), "Gemm", {ta ? ta : a, tb ? tb : b}, 1, &matmul);
  if (ta) rw.set_attr(gemm, int_attr("transA", 1));
  if (tb) rw.set_attr(gemm, int_attr("transB", 1));
  if (!rw.replace_node(&matmul, {gemm->output(0)})) return false;
  if (ta) rw.erase(a->producer());
  if (tb) rw.erase(b->producer());
  return true;
}

// MatMul(X, Transpose(W)) with X of rank r > 2 and a 2-D W [N, K]: the tied output projection
// of a language model, whose W the token-embedding Gather also reads, so folding the Transpose
// would store the weight twice (and fold_constants' growth cap refuses). It becomes
// Reshape(Gemm(Reshape(X, [-1, K]), W, transB=1), [X's leading dims..., N]): the Reshapes are views
// of contiguous tensors and the GEMM reads W transposed in place (a runtime still copies the last
// Reshape's result when it is a graph output). optimize_transposes' transpose_tied_constant,
// which runs first, stores W transposed instead when its other readers are Gathers: then the
// projection is a plain MatMul by a constant and this rule does not see it.
// The leading dims are constants where facts know them all, else Shape(X) without its last entry
// (Shape's start/end from opset 15, a Slice before). Exact: the same products summed in the
// same order per output element.
bool matmul_transpose_nd(ir::Node& matmul, Rewriter& rw) {
  if (!plain_matmul(matmul)) return false;
  ir::Value* x = matmul.input(0);
  ir::Value* b = matmul.input(1);
  const auto rank = x->rank();
  if (!rank || *rank <= 2 || b->rank() != 2 || !single_use(b)) return false;
  ir::Value* w = transposed_2d(b, matmul.graph());
  const int32_t dtype = x->elem_type();
  if (!w || !is_ieee_float(dtype) || b->elem_type() != dtype) return false;
  const auto n = w->fact().dim(0), k = w->fact().dim(1);
  if (!n || !k || *k <= 0 || x->fact().dim(*rank - 1) != k) return false;

  ir::Graph& g = *matmul.graph();
  const std::string name = matmul.output(0)->name();
  auto add = [&](std::string_view op, const std::vector<ir::Value*>& inputs) {
    return rw.add_node(g, op, inputs, 1, &matmul);
  };
  std::vector<int64_t> lead;
  for (int64_t i = 0; i + 1 < *rank; ++i)
    if (auto d = x->fact().dim(i)) lead.push_back(*d);
  ir::Value* target = nullptr;
  if (static_cast<int64_t>(lead.size()) == *rank - 1) {
    lead.push_back(*n);
    target = rw.add_constant(g, ir::make_int64_tensor({*rank}, lead), name + "_shape");
  } else {
    ir::Value* dims = nullptr;
    if (matmul.opset() >= 15) {
      ir::Node* shape = add("Shape", {x});
      rw.set_attr(shape, int_attr("end", -1));
      dims = shape->output(0);
    } else {
      ir::Node* shape = add("Shape", {x});
      ir::Value* zero = rw.add_constant(g, ir::make_int64_tensor({1}, {0}), name + "_start");
      ir::Value* last = rw.add_constant(g, ir::make_int64_tensor({1}, {-1}), name + "_end");
      dims = add("Slice", {shape->output(0), zero, last})->output(0);
    }
    ir::Value* cols = rw.add_constant(g, ir::make_int64_tensor({1}, {*n}), name + "_cols");
    ir::Node* concat = add("Concat", {dims, cols});
    rw.set_attr(concat, int_attr("axis", 0));
    target = concat->output(0);
  }
  ir::Value* flat_shape = rw.add_constant(g, ir::make_int64_tensor({2}, {-1, *k}), name + "_rows");
  ir::Node* flat = add("Reshape", {x, flat_shape});
  ir::Node* gemm = add("Gemm", {flat->output(0), w});
  rw.set_attr(gemm, int_attr("transB", 1));
  ir::Node* out = add("Reshape", {gemm->output(0), target});
  if (!rw.replace_node(&matmul, {out->output(0)})) return false;
  rw.erase(b->producer());
  return true;
}

// Add(Gemm(A, B), c) with no C on the Gemm and a constant c that broadcasts into the product
// is Gemm(A, B, c) with beta 1: Gemm adds beta * C after the product, as the Add did.
bool gemm_add(ir::Node& add, Rewriter& rw) {
  if (add.inputs().size() != 2 || !add.attributes().empty() || add.outputs().size() != 1)
    return no_match(add, "the Add has attributes or not two inputs");
  ir::Node* gemm = nullptr;
  ir::Value* bias = nullptr;
  for (int side = 0; side < 2 && !gemm; ++side) {
    gemm = producer(add.input(side), "Gemm");
    bias = add.input(1 - side);
  }
  if (!gemm) return no_match(add, "neither operand is a Gemm's result");
  if (gemm->inputs().size() != 2 || !only_attributes(*gemm, {"alpha", "beta", "transA", "transB"}))
    return no_match(*gemm, "the Gemm already has a C operand or unknown attributes");
  if (gemm->graph() != add.graph() || gemm->opset() < 11)
    return no_match(*gemm, "the Gemm is in another graph or below opset 11");
  if (!single_use(gemm->output(0))) return no_match(*gemm, "the Gemm's result has other readers");
  const auto* c = constant_header(bias);
  const ir::TensorFact& out = gemm->output(0)->fact();
  if (!c || c->data_type() != out.elem_type)
    return no_match(add, "the other operand is not a constant of the Gemm's type");
  if (!out.has_rank || out.dims.size() != 2 || !bias_fits(*c, out.dim(0), out.dim(1)))
    return no_match(add, "the constant does not broadcast into the product without growing it");
  ir::Node* fused =
      rw.add_node(*add.graph(), "Gemm", {gemm->input(0), gemm->input(1), bias}, 1, &add);
  for (const auto& a : gemm->attributes())
    if (a.name() != "beta") rw.set_attr(fused, a);
  if (!rw.replace_node(&add, {fused->output(0)})) return false;
  rw.erase(gemm);
  return true;
}

bool transpose_into_gemm(ir::Node& gemm, Rewriter& rw) {
  if (!only_attributes(gemm, {"alpha", "beta", "transA", "transB"})) return false;
  for (int side = 0; side < 2; ++side) {
    ir::Value* x = transposed_2d(gemm.input(side), gemm.graph());
    if (!x) continue;
    ir::Node* t = gemm.input(side)->producer();
    const char* flag = side == 0 ? "transA" : "transB";
    const bool transposed = gemm.attr_int(flag, 0) == 0;
    rw.set_input(&gemm, static_cast<size_t>(side), x);
    if (transposed)
      rw.set_attr(&gemm, int_attr(flag, 1));
    else
      rw.remove_attr(&gemm, flag);
    rw.erase(t);  // if nothing else reads it
    return true;
  }
  return false;
}

std::vector<Rule> gemm_rules() {
  return {{"matmul_add", {"Add"}, matmul_add, "", 7},
          {"gemm_add", {"Add"}, gemm_add, "", 11},
          {"matmul_transpose", {"MatMul"}, matmul_transpose, "", 11},
          {"matmul_transpose_nd", {"MatMul"}, matmul_transpose_nd, "", 11},
          {"transpose_into_gemm", {"Gemm"}, transpose_into_gemm, "", 7}};
}

}  // namespace

PassInfo fuse_matmul_add_pass() {
  return describe(
      {.name = "fuse_matmul_add",
       .level = 2,
       .description = "2-D MatMul followed by Add of a constant bias becomes Gemm, as does a "
                      "Gemm without C followed by one; a 2-D Transpose feeding Gemm or MatMul "
                      "becomes transA/transB",
       .options = {}},
      {gemm_rules});
}

}  // namespace graft
