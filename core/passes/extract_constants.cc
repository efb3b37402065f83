// Constant nodes become initializers, so node counts measure real work and later passes see
// every constant the same way. Function bodies cannot hold initializers and are left alone.
#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/rewriter.h"

namespace graft {

namespace {

using onnx::AttributeProto;
using onnx::TensorProto;

// The tensor a Constant node defines, if its value attribute is one we can represent densely.
std::optional<TensorProto> constant_value(const ir::Node& node) {
  if (node.attributes().size() != 1) return std::nullopt;
  const AttributeProto& a = node.attributes()[0];
  TensorProto t;
  if (a.name() == "value" && a.has_t()) {
    t = a.t();
  } else if (a.name() == "value_float" && a.has_f()) {
    t.set_data_type(TensorProto::FLOAT);
    t.add_float_data(a.f());
  } else if (a.name() == "value_floats") {
    t.set_data_type(TensorProto::FLOAT);
    t.add_dims(a.floats_size());
    *t.mutable_float_data() = a.floats();
  } else if (a.name() == "value_int" && a.has_i()) {
    t.set_data_type(TensorProto::INT64);
    t.add_int64_data(a.i());
  } else if (a.name() == "value_ints") {
    t.set_data_type(TensorProto::INT64);
    t.add_dims(a.ints_size());
    *t.mutable_int64_data() = a.ints();
  } else if (a.name() == "value_string" && a.has_s()) {
    t.set_data_type(TensorProto::STRING);
    t.add_string_data(a.s());
  } else if (a.name() == "value_strings") {
    t.set_data_type(TensorProto::STRING);
    t.add_dims(a.strings_size());
    *t.mutable_string_data() = a.strings();
  } else {
    return std::nullopt;  // sparse_value, or an attribute reference inside a function
  }
  return t;
}

class ExtractConstants final : public Pass {
 public:
  std::string_view name() const override { return "extract_constants"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    PassResult result;
    if (!model.allows_new_initializers()) return result;
    Rewriter rw(model);
    std::vector<ir::Graph*> graphs{&model.graph()};
    for (size_t i = 0; i < graphs.size(); ++i) {
      ir::Graph* g = graphs[i];
      for (ir::Node* n : g->nodes()) {
        for (const auto& sub : n->subgraphs()) graphs.push_back(sub.graph.get());
        if (!n->is("Constant") || n->outputs().size() != 1 || !n->output(0)) continue;
        auto tensor = constant_value(*n);
        if (!tensor) continue;
        // The output keeps its name: it is what consumers (and maybe graph outputs) refer to.
        if (rw.replace_with_constant(n, std::move(*tensor))) result.add();
      }
    }
    return result;
  }
};

}  // namespace

PassInfo extract_constants_pass() {
  return describe<ExtractConstants>({.name = "extract_constants",
                                     .level = 1,
                                     .description = "Constant nodes become initializers",
                                     .options = {}});
}

}  // namespace graft
