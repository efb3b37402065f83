// Removes nodes that provably return their data input unchanged: Dropout in inference mode,
// Transpose by the identity permutation, shape ops whose result has the input's shape, Cast to
// the input's own type, Slice taking everything, Pad by nothing, Concat of one input and Split
// into one part. Proof comes from constant operands (initializers), attributes and the types the
// model declares; anything unknown (non-constant operands, unknown ranks, attributes the op
// version does not define) keeps the node.
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/rewrite_util.h"

namespace graft {

namespace {

using Shape = std::vector<int64_t>;

// Integer contents of a constant operand; nullopt unless the model fixes it at load time.
std::optional<std::vector<int64_t>> constant_ints(const ir::Value* v) {
  if (!v || !v->is_constant()) return std::nullopt;
  return ir::read_int64s(*v->initializer());
}

const onnx::TensorShapeProto* declared_shape(const ir::Value* v) {
  const onnx::TypeProto* t = v->type();
  if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) return nullptr;
  return &t->tensor_type().shape();
}

std::optional<int64_t> known_rank(const ir::Value* v) {
  const onnx::TensorShapeProto* shape = declared_shape(v);
  if (!shape) return std::nullopt;
  return shape->dim_size();
}

std::optional<int64_t> known_dim(const ir::Value* v, int64_t axis) {
  const onnx::TensorShapeProto* shape = declared_shape(v);
  if (!shape || axis < 0 || axis >= shape->dim_size()) return std::nullopt;
  const auto& d = shape->dim(static_cast<int>(axis));
  if (!d.has_dim_value() || d.dim_value() < 0) return std::nullopt;
  return d.dim_value();
}

bool all_zero(const std::optional<std::vector<int64_t>>& values) {
  if (!values) return false;
  for (int64_t v : *values)
    if (v != 0) return false;
  return true;
}

std::optional<int64_t> product(const Shape& dims, size_t begin, size_t end) {
  return ir::element_count(Shape(dims.begin() + begin, dims.begin() + end));
}

// The output shape declared by the model equals the input's static shape: the fallback proof for
// ops whose parameters are computed at run time.
bool declared_same_shape(const ir::Node& n, const Shape& in) {
  auto out = n.output(0)->static_shape();
  return out && *out == in;
}

bool dropout_is_noop(const ir::Node& n, int64_t opset) {
  if (opset < 7) {
    // Before opset 7 the graph says whether it runs for inference.
    if (!only_attributes(n, {"ratio", "is_test", "consumed_inputs"})) return false;
    if (n.attr_int("is_test", 0) != 1 || n.inputs().size() != 1) return false;
  } else if (opset < 12) {
    if (!only_attributes(n, {"ratio"}) || n.inputs().size() != 1) return false;
  } else {
    if (!only_attributes(n, {"seed"}) || n.inputs().size() > 3) return false;
    if (const ir::Value* mode = n.input(2)) {
      auto training = constant_ints(mode);
      if (!training || training->size() != 1 || (*training)[0] != 0) return false;
    }
  }
  const ir::Value* mask = n.output(1);
  return n.outputs().size() <= 2 && (!mask || mask->use_count() == 0);
}

bool transpose_is_noop(const ir::Node& n) {
  if (!only_attributes(n, {"perm"}) || n.inputs().size() != 1) return false;
  auto perm = n.attr_ints("perm");
  if (perm && !perm->empty()) {
    for (size_t i = 0; i < perm->size(); ++i)
      if ((*perm)[i] != static_cast<int64_t>(i)) return false;
    return true;
  }
  // Without a permutation Transpose reverses the axes, which changes nothing only up to rank 1.
  auto rank = known_rank(n.input(0));
  return rank && *rank <= 1;
}

// Shape Reshape produces from `in` for a constant `target`, nullopt if the target is invalid.
std::optional<Shape> reshape_result(const Shape& in, const std::vector<int64_t>& target,
                                    bool allowzero) {
  Shape out(target.size());
  std::optional<size_t> inferred;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t t = target[i];
    if (t == 0 && !allowzero) {
      if (i >= in.size()) return std::nullopt;
      out[i] = in[i];
    } else if (t == -1) {
      if (inferred) return std::nullopt;
      inferred = i;
      out[i] = 1;
    } else if (t < 0) {
      return std::nullopt;
    } else {
      out[i] = t;
    }
  }
  auto total = ir::element_count(in);
  auto known = ir::element_count(out);
  if (!total || !known) return std::nullopt;
  if (inferred) {
    // -1 is ambiguous next to a zero-sized dim.
    if (*known == 0 || *total % *known != 0) return std::nullopt;
    out[*inferred] = *total / *known;
  } else if (*known != *total) {
    return std::nullopt;
  }
  return out;
}

bool reshape_is_noop(const ir::Node& n, int64_t opset, const Shape& in) {
  std::optional<std::vector<int64_t>> target;
  if (opset < 5) {
    if (!only_attributes(n, {"shape", "consumed_inputs"}) || n.inputs().size() != 1) return false;
    target = n.attr_ints("shape");
  } else {
    if (!only_attributes(n, {"allowzero"}) || n.inputs().size() != 2 || !n.input(1)) return false;
    target = constant_ints(n.input(1));
  }
  if (!target) return declared_same_shape(n, in);
  auto result = reshape_result(in, *target, n.attr_int("allowzero", 0) != 0);
  return result && *result == in;
}

bool expand_is_noop(const ir::Node& n, const Shape& in) {
  if (!only_attributes(n, {}) || n.inputs().size() != 2 || !n.input(1)) return false;
  auto target = constant_ints(n.input(1));
  if (!target) return declared_same_shape(n, in);
  // Broadcasting keeps the input's shape iff the target has no more axes and each of its dims
  // (aligned from the right) is 1 or the input's dim.
  if (target->size() > in.size()) return false;
  size_t offset = in.size() - target->size();
  for (size_t i = 0; i < target->size(); ++i) {
    int64_t t = (*target)[i];
    if (t != 1 && t != in[offset + i]) return false;
  }
  return true;
}

bool squeeze_is_noop(const ir::Node& n, int64_t opset, const Shape& in) {
  std::optional<std::vector<int64_t>> axes;
  if (opset < 13) {
    if (!only_attributes(n, {"axes"}) || n.inputs().size() != 1) return false;
    axes = n.attr_ints("axes");
  } else {
    if (!only_attributes(n, {}) || n.inputs().size() > 2) return false;
    if (n.input(1)) {
      axes = constant_ints(n.input(1));
      if (!axes) return declared_same_shape(n, in);
    }
  }
  // Listed axes must have size 1 and are all removed, so the shape changes; with no axes every
  // size-1 dim goes.
  if (axes && !axes->empty()) return false;
  for (int64_t d : in)
    if (d == 1) return false;
  return true;
}

bool unsqueeze_is_noop(const ir::Node& n, int64_t opset, const Shape& in) {
  if (opset < 13 ? !only_attributes(n, {"axes"}) : !only_attributes(n, {})) return false;
  return declared_same_shape(n, in);
}

bool flatten_is_noop(const ir::Node& n, const Shape& in) {
  if (!only_attributes(n, {"axis"}) || n.inputs().size() != 1) return false;
  int64_t rank = static_cast<int64_t>(in.size());
  int64_t axis = n.attr_int("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) return false;
  auto outer = product(in, 0, static_cast<size_t>(axis));
  auto inner = product(in, static_cast<size_t>(axis), in.size());
  return outer && inner && in == Shape{*outer, *inner};
}

bool cast_is_noop(const ir::Node& n) {
  if (!only_attributes(n, {"to", "saturate"}) || n.inputs().size() != 1) return false;
  const onnx::AttributeProto* to = n.attr("to");
  // Opset 1 names the type as a string; only the integer form is compared.
  if (!to || to->type() != onnx::AttributeProto::INT) return false;
  int32_t from = n.input(0)->elem_type();
  return from != 0 && to->i() == from;
}

bool slice_is_noop(const ir::Node& n, int64_t opset) {
  const ir::Value* data = n.input(0);
  std::optional<std::vector<int64_t>> starts, ends, axes, steps;
  if (opset < 10) {
    if (!only_attributes(n, {"starts", "ends", "axes"}) || n.inputs().size() != 1) return false;
    starts = n.attr_ints("starts");
    ends = n.attr_ints("ends");
    axes = n.attr_ints("axes");
  } else {
    if (!only_attributes(n, {}) || n.inputs().size() < 3 || n.inputs().size() > 5) return false;
    starts = constant_ints(n.input(1));
    ends = constant_ints(n.input(2));
    if (n.input(3) && !(axes = constant_ints(n.input(3)))) return false;
    if (n.input(4) && !(steps = constant_ints(n.input(4)))) return false;
  }
  if (!starts || !ends || starts->size() != ends->size()) return false;
  size_t count = starts->size();
  if ((axes && axes->size() != count) || (steps && steps->size() != count)) return false;
  auto rank = known_rank(data);
  for (size_t i = 0; i < count; ++i) {
    int64_t axis = axes ? (*axes)[i] : static_cast<int64_t>(i);
    if (axis < 0) {
      if (!rank) return false;
      axis += *rank;
    }
    if (axis < 0 || (rank && axis >= *rank)) return false;
    if ((steps && (*steps)[i] != 1) || (*starts)[i] != 0) return false;
    if ((*ends)[i] == INT64_MAX) continue;
    auto dim = known_dim(data, axis);
    if (!dim || (*ends)[i] < *dim) return false;
  }
  return true;
}

bool pad_is_noop(const ir::Node& n, int64_t opset) {
  if (opset < 2) {
    if (!only_attributes(n, {"mode", "paddings", "value"}) || n.inputs().size() != 1) return false;
    return all_zero(n.attr_ints("paddings"));
  }
  if (opset < 11) {
    if (!only_attributes(n, {"mode", "pads", "value"}) || n.inputs().size() != 1) return false;
    return all_zero(n.attr_ints("pads"));
  }
  // Zero pads make mode, constant_value and axes irrelevant.
  if (!only_attributes(n, {"mode"}) || n.inputs().size() < 2 || n.inputs().size() > 4) return false;
  return all_zero(constant_ints(n.input(1)));
}

bool is_noop(const ir::Node& n) {
  if (!n.is_onnx_domain() || !n.input(0) || !n.output(0)) return false;
  int64_t opset = n.opset();
  if (opset <= 0) return false;
  const std::string& op = n.op_type();
  if (op == "Dropout") return dropout_is_noop(n, opset);
  if (n.outputs().size() != 1) return false;
  if (op == "Transpose") return transpose_is_noop(n);
  if (op == "Cast") return cast_is_noop(n);
  if (op == "Slice") return slice_is_noop(n, opset);
  if (op == "Pad") return pad_is_noop(n, opset);
  if (op == "Concat") return only_attributes(n, {"axis"}) && n.inputs().size() == 1;
  if (op == "Split") return only_attributes(n, {"axis", "split", "num_outputs"});

  if (op != "Reshape" && op != "Expand" && op != "Squeeze" && op != "Unsqueeze" && op != "Flatten")
    return false;
  auto in = n.input(0)->static_shape();
  if (!in) return false;
  if (op == "Reshape") return reshape_is_noop(n, opset, *in);
  if (op == "Expand") return expand_is_noop(n, *in);
  if (op == "Squeeze") return squeeze_is_noop(n, opset, *in);
  if (op == "Unsqueeze") return unsqueeze_is_noop(n, opset, *in);
  return flatten_is_noop(n, *in);
}

class EliminateNoop final : public Pass {
 public:
  std::string_view name() const override { return "eliminate_noop"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    PassResult result;
    for (ir::Graph* g : model.all_graphs()) {
      for (ir::Node* n : g->nodes()) {
        if (n->dead() || !is_noop(*n)) continue;
        if (bypass_node(n, n->input(0), n->output(0))) result.add();
      }
    }
    return result;
  }
};

}  // namespace

std::unique_ptr<Pass> make_eliminate_noop() { return std::make_unique<EliminateNoop>(); }

PassInfo eliminate_noop_pass() {
  return {.name = "eliminate_noop",
          .level = 1,
          .description =
              "remove no-op nodes: inference Dropout, identity Transpose/Reshape/Expand/Squeeze/"
              "Unsqueeze/Flatten/Cast/Slice/Pad, one-part Concat/Split",
          .options = {},
          .create = make_eliminate_noop};
}

}  // namespace graft
