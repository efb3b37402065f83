// Shape and Size of tensors whose dims are known become constants, so the shape arithmetic that
// exporters emit around them (PyTorch's Shape -> Gather -> Unsqueeze -> Concat -> Reshape) is
// folded by fold_constants. Where only some dims are known, a Gather or Slice that reads only
// known entries of a Shape becomes a constant on its own, and the dynamic part stays.
//
// Dims come from the IR's declared types (value_info, graph inputs and outputs, initializers) and,
// for values of the main graph, from ONNX shape inference run on a copy of the model. Models that
// libonnx 1.12 cannot infer (newer IR or opset) or on which inference fails are left alone. The two
// sources must agree where both know a dim; a value on which they disagree is treated as unknown.
// Inferred types are never written back into the model. Subgraph and function values use their
// declared types only: inference of a subgraph depends on what its parent node feeds it, which
// may differ between iterations of a Loop.
//
// Deliberately not folded: symbolic dims (even two equal symbols), Size with any unknown dim,
// shapes of graph inputs that only an initializer default describes (a caller may override it),
// Shape with attributes other than start/end (or start/end before opset 15), and any result
// nobody reads (prune removes those).
#include <exception>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/rewrite_util.h"

namespace graft {

namespace {

// Dims of a tensor; an unknown (symbolic or absent) dim is nullopt.
using Dims = std::vector<std::optional<int64_t>>;

std::optional<Dims> dims_of_type(const onnx::TypeProto* type) {
  if (!type || !type->has_tensor_type() || !type->tensor_type().has_shape()) return std::nullopt;
  Dims dims;
  for (const auto& d : type->tensor_type().shape().dim()) {
    if (d.has_dim_value() && d.dim_value() >= 0)
      dims.emplace_back(d.dim_value());
    else
      dims.emplace_back(std::nullopt);
  }
  return dims;
}

// Combines two descriptions of the same value: an unknown rank or dim takes the other side's.
// Disagreement on the rank or on a known dim sets `conflict`.
std::optional<Dims> merge(const std::optional<Dims>& a, const std::optional<Dims>& b,
                          bool* conflict) {
  if (!a) return b;
  if (!b) return a;
  if (a->size() != b->size()) {
    *conflict = true;
    return std::nullopt;
  }
  Dims out(a->size());
  for (size_t i = 0; i < a->size(); ++i) {
    const auto& x = (*a)[i];
    const auto& y = (*b)[i];
    if (x && y && *x != *y) {
      *conflict = true;
      return std::nullopt;
    }
    out[i] = x ? x : y;
  }
  return out;
}

// True if libonnx 1.12 knows the model's IR version and the versions of the standard opsets it
// imports; inference on a newer model would apply old operator semantics.
bool inference_supported(const ir::Model& model) {
  const auto& rest = model.rest();
  if (rest.ir_version() > onnx::Version::IR_VERSION) return false;
  const auto& schemas = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  for (const auto& op : rest.opset_import()) {
    std::string domain = op.domain() == "ai.onnx" ? "" : op.domain();
    auto it = schemas.find(domain);
    // Custom domains have no schemas: inference just leaves their nodes' outputs unknown.
    if (it == schemas.end()) continue;
    if (op.version() > it->second.second) return false;
  }
  return true;
}

// Initializers above this size are replaced by data-less stubs (same type and dims) in the copy
// given to shape inference: shape-carrying tensors are tiny, weights need not be copied.
constexpr uint64_t kStubBytes = 4096;

class ShapeInfo {
 public:
  // Inference runs lazily, the first time a main graph value other than a graph input is
  // asked about: it costs a copy of the graph and a pass over it.
  explicit ShapeInfo(const ir::Model& model) : model_(&model), main_(&model.graph()) {}
  // False if inference could not run (model newer than libonnx) or failed: the model's
  // declarations are then unchecked, and the pass leaves the model alone.
  bool ok() const { return inference_supported(*model_); }

  // Known dims of `v`, nullopt if its rank is unknown or its sources disagree.
  std::optional<Dims> dims(const ir::Value* v) const {
    if (!v || v->dead()) return std::nullopt;
    if (v->is_constant()) {
      const auto& d = v->initializer()->dims();
      return Dims(d.begin(), d.end());
    }
    std::optional<Dims> declared;
    if (v->is_graph_input()) {
      // Only the declaration binds callers; an initializer default does not.
      for (const auto& in : v->owner()->inputs())
        if (in.value == v && in.info.has_type()) declared = dims_of_type(&in.info.type());
      if (v->value_info() && v->value_info()->has_type()) {
        bool conflict = false;
        declared = merge(declared, dims_of_type(&v->value_info()->type()), &conflict);
        if (conflict) return std::nullopt;
      }
    } else {
      declared = dims_of_type(v->type());
    }
    // Graph inputs are where inference starts, so it could only repeat their declarations.
    if (v->owner() != main_ || v->is_graph_input()) return declared;
    // Declared dims of other values are checked against inference: exporters' value_info can be
    // stale, and a wrong folded shape would silently break the model.
    if (!inferred_) inferred_ = infer(*model_);
    if (!*inferred_) return std::nullopt;  // inference failed: the declarations are suspect
    auto it = inferred_map_.find(v->name());
    if (it == inferred_map_.end()) return declared;
    bool conflict = false;
    auto merged = merge(declared, dims_of_type(&it->second), &conflict);
    return conflict ? std::nullopt : merged;
  }

 private:
  bool infer(const ir::Model& model) const {
    if (!inference_supported(model)) return false;
    auto copy = model.clone();
    for (ir::Value* v : copy->graph().initializers()) {
      const onnx::TensorProto& t = *v->initializer();
      if (ir::tensor_bytes(t) <= kStubBytes && !ir::is_external(t)) continue;
      onnx::TensorProto stub;
      stub.set_data_type(t.data_type());
      *stub.mutable_dims() = t.dims();
      v->set_initializer(std::move(stub));
    }
    onnx::ModelProto proto = copy->release_proto();
    // Inference starts from the operators alone; declared value_info is compared afterwards.
    proto.mutable_graph()->clear_value_info();
    try {
      onnx::ShapeInferenceOptions options{/*check_type=*/false, /*error_mode=*/0,
                                          /*enable_data_propagation=*/false};
      onnx::shape_inference::InferShapes(proto, onnx::OpSchemaRegistry::Instance(), options);
    } catch (const std::exception&) {
      return false;  // e.g. a declared output type contradicting the operators
    }
    for (const auto& info : proto.graph().value_info())
      if (info.has_type()) inferred_map_.emplace(info.name(), info.type());
    for (const auto& info : proto.graph().output())
      if (info.has_type()) inferred_map_.emplace(info.name(), info.type());
    return true;
  }

  const ir::Model* model_;
  const ir::Graph* main_;
  mutable std::optional<bool> inferred_;  // whether inference ran and succeeded, once it has
  mutable std::unordered_map<std::string, onnx::TypeProto> inferred_map_;
};

// Clamps `v` into [lo, hi].
int64_t clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Integer contents of a constant input, nullopt if absent, not constant or not an integer tensor.
std::optional<std::vector<int64_t>> constant_ints(const ir::Value* v) {
  if (!v || !v->is_constant() || ir::is_external(*v->initializer())) return std::nullopt;
  int32_t type = v->initializer()->data_type();
  if (type != onnx::TensorProto::INT64 && type != onnx::TensorProto::INT32) return std::nullopt;
  return ir::read_int64s(*v->initializer());
}

class FoldShapes final : public Pass {
 public:
  std::string_view name() const override { return "fold_shapes"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    PassResult result;
    bool any = false;
    for (ir::Graph* g : model.all_graphs())
      for (ir::Node* n : g->nodes()) any = any || n->is("Shape") || n->is("Size");
    if (!any) return result;  // spares shape inference on models without shape ops

    ShapeInfo info(model);
    if (!info.ok()) return result;
    info_ = &info;
    for (ir::Graph* g : model.all_graphs()) {
      const bool initializers = can_hold_new_initializers(model, g);
      // Without initializers the result is a Constant node, which holds int64 from opset 9.
      if (!initializers && g->opset("") < 9) continue;
      for (ir::Node* n : g->nodes()) {
        if (n->dead() || !n->is_onnx_domain() || n->outputs().size() != 1 || !n->output(0) ||
            n->output(0)->use_count() == 0)
          continue;
        std::optional<onnx::TensorProto> value;
        if (n->is("Shape")) {
          value = fold_shape(*n);
        } else if (n->is("Size")) {
          value = fold_size(*n);
        } else if (n->is("Gather")) {
          value = fold_gather(*n);
        } else if (n->is("Slice")) {
          value = fold_slice(*n);
        }
        if (!value) continue;
        replace_by_constant(*g, n, std::move(*value), initializers);
        result.add();
      }
    }
    info_ = nullptr;
    return result;
  }

 private:
  // Known dims of `v`. A Shape output has one dim, its length, whenever the rank of the Shape's
  // input is known: Size(Shape(x)) is the rank, which exporters test before RNNs and Squeezes.
  std::optional<Dims> dims_of(const ir::Value* v) const {
    if (const ir::Node* shape = shape_producer(v)) {
      if (auto entries = shape_entries(*shape)) return Dims{static_cast<int64_t>(entries->size())};
    }
    return info_->dims(v);
  }

  // The entries of a Shape node's output, known or not; nullopt if its rank is unknown or the
  // node has attributes we do not understand.
  std::optional<Dims> shape_entries(const ir::Node& n) const {
    for (const auto& a : n.attributes())
      if (!((a.name() == "start" || a.name() == "end") && a.has_i() && n.opset() >= 15))
        return std::nullopt;
    auto dims = dims_of(n.input(0));
    if (!dims) return std::nullopt;
    const int64_t rank = static_cast<int64_t>(dims->size());
    int64_t start = n.attr_int("start", 0);
    int64_t end = n.attr_int("end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = clamp(start, 0, rank);
    end = clamp(end, 0, rank);
    if (start >= end) return Dims{};
    return Dims(dims->begin() + start, dims->begin() + end);
  }

  std::optional<onnx::TensorProto> fold_shape(const ir::Node& n) const {
    auto entries = shape_entries(n);
    if (!entries) return std::nullopt;
    std::vector<int64_t> values;
    for (const auto& d : *entries) {
      if (!d) return std::nullopt;
      values.push_back(*d);
    }
    return ir::make_int64_tensor({static_cast<int64_t>(values.size())}, values);
  }

  std::optional<onnx::TensorProto> fold_size(const ir::Node& n) const {
    if (n.attributes().size() != 0) return std::nullopt;
    auto dims = dims_of(n.input(0));
    if (!dims) return std::nullopt;
    std::vector<int64_t> known;
    for (const auto& d : *dims) {
      if (!d) return std::nullopt;
      known.push_back(*d);
    }
    auto count = ir::element_count(known);
    if (!count) return std::nullopt;
    return ir::make_int64_tensor({}, {*count});
  }

  // The Shape node producing `v`, if any.
  static const ir::Node* shape_producer(const ir::Value* v) {
    if (!v || !v->producer() || v->producer()->dead() || !v->producer()->is("Shape"))
      return nullptr;
    return v->producer();
  }

  // Gather(Shape(x), constant indices) reading only known dims.
  std::optional<onnx::TensorProto> fold_gather(const ir::Node& n) const {
    const ir::Node* shape = shape_producer(n.input(0));
    if (!shape || n.inputs().size() != 2) return std::nullopt;
    for (const auto& a : n.attributes())
      if (a.name() != "axis") return std::nullopt;
    const int64_t axis = n.attr_int("axis", 0);
    if (axis != 0 && axis != -1) return std::nullopt;
    auto indices = constant_ints(n.input(1));
    auto entries = shape_entries(*shape);
    if (!indices || !entries) return std::nullopt;
    const int64_t len = static_cast<int64_t>(entries->size());
    std::vector<int64_t> values;
    for (int64_t i : *indices) {
      if (i < 0) i += len;
      if (i < 0 || i >= len || !(*entries)[i]) return std::nullopt;
      values.push_back(*(*entries)[i]);
    }
    const auto& idims = n.input(1)->initializer()->dims();
    return ir::make_int64_tensor(std::vector<int64_t>(idims.begin(), idims.end()), values);
  }

  // Slice(Shape(x), ...) with constant parameters selecting only known dims.
  std::optional<onnx::TensorProto> fold_slice(const ir::Node& n) const {
    const ir::Node* shape = shape_producer(n.input(0));
    if (!shape) return std::nullopt;
    std::optional<std::vector<int64_t>> starts, ends, axes, steps;
    if (n.opset() >= 10) {
      if (n.attributes().size() != 0 || n.inputs().size() < 3 || n.inputs().size() > 5)
        return std::nullopt;
      starts = constant_ints(n.input(1));
      ends = constant_ints(n.input(2));
      if (n.input(3)) {
        axes = constant_ints(n.input(3));
        if (!axes) return std::nullopt;
      }
      if (n.input(4)) {
        steps = constant_ints(n.input(4));
        if (!steps) return std::nullopt;
      }
    } else {
      if (n.inputs().size() != 1) return std::nullopt;
      for (const auto& a : n.attributes())
        if (a.name() != "starts" && a.name() != "ends" && a.name() != "axes") return std::nullopt;
      starts = n.attr_ints("starts");
      ends = n.attr_ints("ends");
      axes = n.attr_ints("axes");
    }
    if (!starts || !ends || starts->size() != 1 || ends->size() != 1) return std::nullopt;
    if (axes && (axes->size() != 1 || ((*axes)[0] != 0 && (*axes)[0] != -1))) return std::nullopt;
    if (steps && steps->size() != 1) return std::nullopt;
    const int64_t step = steps ? (*steps)[0] : 1;
    if (step == 0) return std::nullopt;

    auto entries = shape_entries(*shape);
    if (!entries) return std::nullopt;
    const int64_t len = static_cast<int64_t>(entries->size());
    int64_t start = (*starts)[0], end = (*ends)[0];
    if (start < 0) start += len;
    if (end < 0) end += len;
    if (step > 0) {
      start = clamp(start, 0, len);
      end = clamp(end, 0, len);
    } else {
      start = clamp(start, 0, len - 1);
      end = clamp(end, -1, len - 1);
    }
    std::vector<int64_t> values;
    for (int64_t i = start; step > 0 ? i < end : i > end; i += step) {
      if (!(*entries)[i]) return std::nullopt;
      values.push_back(*(*entries)[i]);
    }
    return ir::make_int64_tensor({static_cast<int64_t>(values.size())}, values);
  }

  // Replaces `n` by its (single) output's constant value, keeping the output's name.
  static void replace_by_constant(ir::Graph& g, ir::Node* n, onnx::TensorProto value,
                                  bool initializers) {
    ir::Value* out = n->output(0);
    g.remove_node(n);  // `out` is used, so it survives without a producer
    if (initializers) {
      g.make_initializer(out, std::move(value));
      return;
    }
    ir::Node* c = g.add_node("Constant", {}, {out->name()});
    value.set_name(out->name());
    c->set_attr(constant_value_attr(std::move(value)));
    g.move_output_name(c, 0, out);
  }

  const ShapeInfo* info_ = nullptr;
};

}  // namespace

std::unique_ptr<Pass> make_fold_shapes() { return std::make_unique<FoldShapes>(); }

PassInfo fold_shapes_pass() {
  return {
      .name = "fold_shapes",
      .level = 1,
      .description = "Shape, Size and shape arithmetic on statically known shapes become constants",
      .options = {},
      .create = make_fold_shapes};
}

}  // namespace graft
