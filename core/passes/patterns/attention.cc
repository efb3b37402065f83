#include "core/passes/patterns/attention.h"

#include "core/ir/tensor.h"

#include <cmath>

#include "core/passes/queries.h"
#include "core/passes/rules.h"

namespace graft {

std::vector<ir::Node*> ScaledDotProduct::nodes() const {
  std::vector<ir::Node*> all = {out, softmax};
  if (mask_add) all.push_back(mask_add);
  if (select) all.push_back(select);
  if (scaling) all.push_back(scaling);
  all.push_back(qk);
  for (ir::Node* n : operand_scaling)
    if (n) all.push_back(n);
  return all;
}

bool fits_scores(const ir::Value* mask, const ir::Value* scores) {
  const ir::TensorFact& m = mask->fact();
  const ir::TensorFact& s = scores->fact();
  if (!m.has_rank || !s.has_rank || m.dims.size() > s.dims.size()) return false;
  auto one = [](const ir::Dim& d) { return d.known() && d.value == 1; };
  const size_t offset = s.dims.size() - m.dims.size();
  for (size_t i = 0; i < m.dims.size(); ++i)
    if (one(s.dims[offset + i]) && !one(m.dims[i])) return false;
  return true;
}

std::optional<ScaledDotProduct> match_scaled_dot_product(ir::Node& out) {
  if (!out.is("MatMul") || out.inputs().size() != 2 || out.outputs().size() != 1)
    return std::nullopt;
  ScaledDotProduct m;
  m.out = &out;
  m.softmax = absorbed_producer(out.input(0), "Softmax", out);
  if (!m.softmax) return std::nullopt;
  // From here the node looks like attention's output: reasons are worth giving.
  const ir::TensorFact& probs = m.softmax->output(0)->fact();
  const int64_t axis = m.softmax->attr_int("axis", -1);
  if (m.softmax->opset() < 13) {
    no_match(out, "Softmax before opset 13 flattens its input");
    return std::nullopt;
  }
  if (axis != -1 && !(probs.has_rank && axis == static_cast<int64_t>(probs.dims.size()) - 1)) {
    no_match(out, "the Softmax is not over the last axis");
    return std::nullopt;
  }
  ir::Value* scores = m.softmax->input(0);
  if (ir::Node* add = absorbed_producer(scores, "Add", out)) {
    // The scores' operand is Q K^T (a MatMul), scaled or not; the mask may itself be a Mul.
    auto scaled_scores = [&](const ir::Value* v) {
      if (!single_use(v)) return false;
      if (producer(v, "MatMul")) return true;
      if (ir::Node* w = producer(v, "Where"); w && w->inputs().size() == 3) v = w->input(1);
      ir::Node* s = producer(v, "Mul");
      if (!s) s = producer(v, "Div");
      return s && s->inputs().size() == 2 &&
             (producer(s->input(0), "MatMul") || producer(s->input(1), "MatMul"));
    };
    for (int side = 0; side < 2 && !m.mask; ++side) {
      if (!scaled_scores(add->input(side))) continue;
      m.mask = add->input(1 - side);
      scores = add->input(side);
      m.mask_add = add;
    }
    if (!m.mask) {
      no_match(out, "the scores' Add has no scaled Q K^T operand");
      return std::nullopt;
    }
  }
  if (ir::Node* where = absorbed_producer(scores, "Where", out)) {
    const std::optional<double> fill = constant_scalar(where->input(2));
    if (where->inputs().size() != 3 || where->input(0)->elem_type() != onnx::TensorProto::BOOL ||
        !fill || !(*fill <= kMaskedScore) ||
        where->input(2)->elem_type() != where->input(1)->elem_type() ||
        !fits_scores(where->input(0), where->input(1)) ||
        !broadcasts_into(where->input(2), where->input(1))) {
      no_match(out, "the scores' Where is not a boolean mask filling a constant <= -1e30");
      return std::nullopt;
    }
    m.select = where;
    m.allowed = where->input(0);
    m.fill = where->input(2);
    scores = where->input(1);
  }
  m.qk = absorbed_producer(scores, "MatMul", out);
  if (!m.qk) {
    ir::Node* scaled = absorbed_producer(scores, "Mul", out);
    const bool divide = !scaled;
    if (divide) scaled = absorbed_producer(scores, "Div", out);
    if (!scaled || scaled->inputs().size() != 2) {
      no_match(out, "the scores are not Q K^T, scaled by a constant");
      return std::nullopt;
    }
    for (int side = divide ? 0 : 1; side >= 0 && !m.qk; --side) {
      std::optional<double> c = constant_scalar(scaled->input(1 - side));
      ir::Node* mm = absorbed_producer(scaled->input(side), "MatMul", out);
      if (!c || !mm || *c == 0 || !std::isfinite(*c) ||
          !broadcasts_into(scaled->input(1 - side), mm->output(0)))
        continue;
      m.scale = divide ? 1.0 / *c : *c;
      m.qk = mm;
    }
    if (!m.qk) {
      no_match(out, "the scale is not a constant scalar times Q K^T");
      return std::nullopt;
    }
    m.scaling = scaled;
  }
  if (m.qk->inputs().size() != 2) return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    m.operands[i] = m.qk->input(i);
    ir::Node* mul = absorbed_producer(m.operands[i], "Mul", out);
    if (!mul || mul->inputs().size() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      const std::optional<double> c = constant_scalar(mul->input(1 - side));
      if (!c || *c == 0 || !std::isfinite(*c) ||
          !broadcasts_into(mul->input(1 - side), mul->input(side)))
        continue;
      m.scale *= *c;
      m.operand_scaling[i] = mul;
      m.operands[i] = mul->input(side);
      break;
    }
  }
  if (m.scale == 0 || !std::isfinite(m.scale)) {
    no_match(out, "the scales multiply to zero or overflow");
    return std::nullopt;
  }
  return m;
}

ir::Value* additive_mask(const ScaledDotProduct& m, Rewriter& rw, ir::Node* at) {
  if (!m.select) return m.mask;
  ir::Graph& g = *at->graph();
  ir::Value* allowed_value = m.mask;
  ir::Value* masked_value = m.fill;
  if (m.mask) {
    masked_value = rw.add_node(g, "Add", {m.fill, m.mask}, 1, at)->output(0);
  } else {
    const int32_t type = m.scores()->elem_type();
    allowed_value = rw.add_constant(g, ir::make_float_tensor(type, {}, {0.0}), "attention_allowed");
  }
  return rw.add_node(g, "Where", {m.allowed, allowed_value, masked_value}, 1, at)->output(0);
}

ir::Value* expand_mask_queries(Rewriter& rw, ir::Node* at, ir::Value* mask, int64_t rank,
                               ir::Value* length_of, int64_t axis) {
  ir::Graph& g = *at->graph();
  ir::Value* target = nullptr;
  if (const std::optional<int64_t> known = known_dim(length_of, axis)) {
    std::vector<int64_t> dims(static_cast<size_t>(rank), 1);
    dims[static_cast<size_t>(rank - 2)] = *known;
    target = rw.add_constant(g, ir::make_int64_tensor({rank}, dims), "attention_mask_shape");
  } else {
    ir::Node* shape = rw.add_node(g, "Shape", {length_of}, 1, at);
    ir::Value* index = rw.add_constant(g, ir::make_int64_tensor({1}, {axis}), "attention_axis");
    ir::Node* length = rw.add_node(g, "Gather", {shape->output(0), index}, 1, at);
    rw.set_attr(length, int_attr("axis", 0));
    std::vector<ir::Value*> parts;
    if (rank > 2)
      parts.push_back(rw.add_constant(
          g,
          ir::make_int64_tensor({rank - 2}, std::vector<int64_t>(static_cast<size_t>(rank - 2), 1)),
          "attention_mask_ones"));
    parts.push_back(length->output(0));
    parts.push_back(rw.add_constant(g, ir::make_int64_tensor({1}, {1}), "attention_mask_one"));
    ir::Node* concat = rw.add_node(g, "Concat", parts, 1, at);
    rw.set_attr(concat, int_attr("axis", 0));
    target = concat->output(0);
  }
  return rw.add_node(g, "Expand", {mask, target}, 1, at)->output(0);
}

}  // namespace graft
