#include "core/passes/queries.h"

#include <algorithm>
#include <limits>

#include "core/ir/tensor.h"

namespace graft {

using onnx::TensorProto;

std::optional<eval::Tensor> constant_tensor(const ir::Value* v, uint64_t max_bytes) {
  const TensorProto* proto = ir::constant_header(v);
  if (!proto) return std::nullopt;
  // An external payload is read straight into the tensor, after the size check.
  auto t = eval::Tensor::from_proto(*proto, max_bytes, ir::external_data_of(v));
  if (!t.ok() || t->dtype() == TensorProto::STRING) return std::nullopt;
  return std::move(*t);
}

std::optional<FloatConstant> float_constant(const ir::Value* v) {
  auto type = float_constant_type(v);
  if (!type) return std::nullopt;
  // An external weight is read for the call and released after.
  auto t = constant_proto(v, kMaxExternalWeightBytes);
  if (!t) return std::nullopt;
  auto values = ir::read_doubles(*t);
  if (!values) return std::nullopt;  // a malformed payload
  return FloatConstant{type->dtype, std::move(type->dims), std::move(*values)};
}

std::optional<FloatConstantType> float_constant_type(const ir::Value* v) {
  const TensorProto* t = ir::constant_header(v);
  if (!t || !is_ieee_float(t->data_type())) return std::nullopt;
  if (ir::is_external(*t) && !ir::external_data_of(v)) return std::nullopt;  // cannot be read
  return FloatConstantType{t->data_type(),
                           std::vector<int64_t>(t->dims().begin(), t->dims().end())};
}

std::optional<double> constant_scalar(const ir::Value* v) {
  auto t = constant_tensor(v, 64);
  if (!t || t->size() != 1) return std::nullopt;
  return t->get_double(0);
}

bool all_equal(const eval::Tensor& t, int64_t value) {
  const bool floating = is_float_type(t.dtype());
  if (!floating && !is_integer_type(t.dtype())) return false;
  for (int64_t i = 0; i < t.size(); ++i) {
    if (floating ? t.get_double(i) != static_cast<double>(value) : t.get_int64(i) != value)
      return false;
  }
  return true;
}

bool broadcasts_into(const ir::Value* v, const ir::Value* x) {
  if (!v || !x) return false;
  const ir::TensorFact& vf = v->fact();
  const ir::TensorFact& xf = x->fact();
  if (!vf.has_rank || !xf.has_rank || vf.dims.size() > xf.dims.size()) return false;
  const size_t offset = xf.dims.size() - vf.dims.size();
  for (size_t i = 0; i < vf.dims.size(); ++i) {
    const ir::Dim& d = vf.dims[i];
    if (!(d.known() && d.value == 1) && !d.same_as(xf.dims[offset + i])) return false;
  }
  return true;
}

std::optional<int64_t> known_dim(const ir::Value* v, int64_t axis) {
  if (!v || v->dead()) return std::nullopt;
  return v->fact().dim(axis);
}

bool single_use(const ir::Value* v) {
  return v && !v->dead() && v->uses().size() == 1 && !v->is_graph_output();
}

ir::Node* producer(const ir::Value* v, std::string_view op) {
  if (!v || v->dead()) return nullptr;
  ir::Node* p = v->producer();
  return p && !p->dead() && p->is(op) ? p : nullptr;
}

ir::Node* chain_producer(const ir::Value* v, std::string_view op, const ir::Node& n) {
  ir::Node* p = producer(v, op);
  if (!p || p->opset() != n.opset() || p->outputs().size() != 1 || p->graph() != n.graph())
    return nullptr;
  return p;
}

ir::Node* absorbed_producer(const ir::Value* v, std::string_view op, const ir::Node& root) {
  ir::Node* p = producer(v, op);
  if (!p || p->graph() != root.graph() || !single_use(v) || p->outputs().size() != 1)
    return nullptr;
  return p;
}

ir::Node* only_reader(const ir::Value* v) { return single_use(v) ? v->uses()[0].node : nullptr; }

bool only_read_by(const ir::Value* v, std::initializer_list<const ir::Node*> readers) {
  if (!v || v->dead() || v->is_graph_output() || v->uses().empty()) return false;
  for (const ir::Use& u : v->uses())
    if (std::find(readers.begin(), readers.end(), u.node) == readers.end()) return false;
  return true;
}

const ir::Value* through_identities(const ir::Value* v, int depth) {
  for (int i = 0;
       i < depth && v && v->producer() && v->producer()->is("Identity") && v->producer()->input(0);
       ++i)
    v = v->producer()->input(0);
  return v;
}

const ir::Value* viewed_graph_output(const ir::Value* v, int depth) {
  for (int i = 0; i < depth && v; ++i) {
    const ir::Node* p = v->producer();
    if (!p || !p->is_onnx_domain() || !ir::moves_values(*p) || p->inputs().empty()) return nullptr;
    v = p->input(0);
    if (v && v->is_graph_output()) return v;
  }
  return nullptr;
}

const ir::Value* returned_as_graph_output(const ir::Value* v, int depth) {
  std::vector<std::pair<const ir::Value*, int>> todo = {{v, 0}};
  for (int looked = 0; !todo.empty() && looked < 64; ++looked) {
    const auto [value, steps] = todo.back();
    todo.pop_back();
    if (value->is_graph_output()) return value;
    if (steps == depth) continue;
    for (const ir::Use& use : value->uses()) {
      const ir::Node* n = use.node;
      if (!n->is_onnx_domain() || n->outputs().empty() || !n->output(0)) continue;
      if (n->is("Concat") || (ir::moves_values(*n) && use.index == 0)) {
        todo.emplace_back(n->output(0), steps + 1);
      } else if (n->is("Split") && use.index == 0) {
        for (const ir::Value* part : n->outputs())
          if (part) todo.emplace_back(part, steps + 1);
      }
    }
  }
  return nullptr;
}

bool only_attributes(const ir::Node& n, std::initializer_list<std::string_view> known) {
  for (const auto& a : n.attributes())
    if (std::find(known.begin(), known.end(), a.name()) == known.end()) return false;
  return true;
}

onnx::AttributeProto ints_attr(std::string_view name, const std::vector<int64_t>& values) {
  onnx::AttributeProto a;
  a.set_name(std::string(name));
  a.set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values) a.add_ints(v);
  return a;
}

onnx::AttributeProto int_attr(std::string_view name, int64_t value) {
  onnx::AttributeProto a;
  a.set_name(std::string(name));
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(value);
  return a;
}

onnx::AttributeProto float_attr(std::string_view name, double value) {
  onnx::AttributeProto a;
  a.set_name(std::string(name));
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(static_cast<float>(value));
  return a;
}

onnx::AttributeProto string_attr(std::string_view name, std::string_view value) {
  onnx::AttributeProto a;
  a.set_name(std::string(name));
  a.set_type(onnx::AttributeProto::STRING);
  a.set_s(std::string(value));
  return a;
}

namespace {

bool dropout_may_be_random(const ir::Node& n) {
  if (n.opset() < 7) return n.attr_int("is_test", 0) == 0;
  if (n.opset() < 12) return false;
  const ir::Value* mode = n.input(2);
  if (!mode) return false;
  auto values = constant_ints(mode);
  if (!values || values->empty()) return true;
  return std::any_of(values->begin(), values->end(), [](int64_t x) { return x != 0; });
}

}  // namespace

bool is_nondeterministic(const ir::Node& n) {
  if (!n.is_onnx_domain()) return false;
  static constexpr std::string_view kRandomOps[] = {"RandomNormal",     "RandomUniform",
                                                    "RandomNormalLike", "RandomUniformLike",
                                                    "Multinomial",      "Bernoulli"};
  for (std::string_view op : kRandomOps)
    if (n.op_type() == op) return true;
  return n.op_type() == "Dropout" && dropout_may_be_random(n);
}

bool is_ieee_float(int32_t dtype) {
  return dtype == TensorProto::FLOAT || dtype == TensorProto::DOUBLE ||
         dtype == TensorProto::FLOAT16;
}

}  // namespace graft
