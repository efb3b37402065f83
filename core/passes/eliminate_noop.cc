// Removes nodes that provably return their data input unchanged: Dropout in inference mode,
// Transpose by the identity permutation, shape ops whose result has the input's shape, Cast to
// the input's own type, Slice taking everything, Pad by nothing, Concat of one input and Split
// into one part, Sum/Mean/Max/Min of one operand. Proof comes from constant operands (initializers
// or Constant nodes), attributes and shape facts (declarations checked against inference, in every
// graph); anything unknown (non-constant operands, unknown dims, attributes the op version does not
// define) keeps the node. One rule per op, each named after it.
#include <cstdint>
#include <optional>
#include <vector>

#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/rules.h"

namespace graft {

namespace {

// Input and output facts both fully known and equal: for ops that only reshape or broadcast, the
// proof that they copy their input.
bool same_static_shape(const ir::Node& n) {
  auto in = n.input(0)->static_shape();
  auto out = n.output(0)->static_shape();
  return in && out && *in == *out;
}

bool dropout_is_noop(const ir::Node& n) {
  const int64_t opset = n.opset();
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
  auto rank = n.input(0)->rank();
  return rank && *rank <= 1;
}

// A constant Reshape target that gives back the input's dims: each entry copies (0), equals the
// input's known dim, or is the single -1 where every other entry matched (the remaining dim).
bool reshape_target_is_identity(const ir::TensorFact& in, const std::vector<int64_t>& target,
                                bool allowzero) {
  if (!in.has_rank || in.dims.size() != target.size()) return false;
  int minus_one = 0;
  for (size_t i = 0; i < target.size(); ++i) {
    const int64_t t = target[i];
    const ir::Dim& d = in.dims[i];
    if (t == 0 && !allowzero) continue;
    if (t == -1) {
      ++minus_one;
      continue;
    }
    if (!d.known() || d.value != t) return false;
  }
  // -1 next to a zero-sized dim is ambiguous (the count says nothing about it).
  if (minus_one == 1)
    for (const ir::Dim& d : in.dims)
      if (d.known() && d.value == 0) return false;
  return minus_one <= 1;
}

bool reshape_is_noop(const ir::Node& n) {
  std::optional<std::vector<int64_t>> target;
  if (n.opset() < 5) {
    if (!only_attributes(n, {"shape", "consumed_inputs"}) || n.inputs().size() != 1) return false;
    target = n.attr_ints("shape");
  } else {
    if (!only_attributes(n, {"allowzero"}) || n.inputs().size() != 2 || !n.input(1)) return false;
    target = constant_ints(n.input(1));
  }
  if (target &&
      reshape_target_is_identity(n.input(0)->fact(), *target, n.attr_int("allowzero", 0) != 0))
    return true;
  return same_static_shape(n);
}

bool expand_is_noop(const ir::Node& n) {
  if (!only_attributes(n, {}) || n.inputs().size() != 2 || !n.input(1)) return false;
  auto target = constant_ints(n.input(1));
  if (!target) return same_static_shape(n);
  // Broadcasting keeps the input's shape iff the target has no more axes and each of its dims
  // (aligned from the right) is 1 or the input's dim.
  const ir::TensorFact& in = n.input(0)->fact();
  if (!in.has_rank || target->size() > in.dims.size()) return false;
  const size_t offset = in.dims.size() - target->size();
  for (size_t i = 0; i < target->size(); ++i) {
    const int64_t t = (*target)[i];
    const ir::Dim& d = in.dims[offset + i];
    if (t != 1 && !(d.known() && d.value == t)) return false;
  }
  return true;
}

bool squeeze_is_noop(const ir::Node& n) {
  if (n.opset() < 13 ? !only_attributes(n, {"axes"}) || n.inputs().size() != 1
                     : !only_attributes(n, {}) || n.inputs().size() > 2)
    return false;
  auto p = ir::squeeze_axes(n);
  if (!p) return same_static_shape(n);
  // Listed axes must have size 1 and are all removed, so the shape changes; with no axes every
  // size-1 dim goes.
  if (!p->all) return false;
  const ir::TensorFact& in = n.input(0)->fact();
  if (!in.has_rank) return false;
  for (const ir::Dim& d : in.dims)
    if (!d.known() || d.value == 1) return false;
  return true;
}

bool unsqueeze_is_noop(const ir::Node& n) {
  if (n.opset() < 13 ? !only_attributes(n, {"axes"}) : !only_attributes(n, {})) return false;
  auto axes = ir::unsqueeze_axes(n);
  if (axes) return axes->empty();
  return same_static_shape(n);
}

bool flatten_is_noop(const ir::Node& n) {
  if (!only_attributes(n, {"axis"}) || n.inputs().size() != 1) return false;
  const ir::TensorFact& in = n.input(0)->fact();
  if (in.rank() != 2) return false;
  // [a, b] stays [a, b] at axis 1; at axis 0 it becomes [1, a*b], at 2 [a*b, 1].
  int64_t axis = n.attr_int("axis", 1);
  if (axis < 0) axis += 2;
  if (axis == 1) return true;
  if (axis == 0) return in.dim(0) == 1;
  if (axis == 2) return in.dim(1) == 1;
  return false;
}

bool cast_is_noop(const ir::Node& n) {
  if (!only_attributes(n, {"to", "saturate"}) || n.inputs().size() != 1) return false;
  // Opset 1 names the type as a string; only the integer form is compared.
  auto to = ir::cast_to(n);
  const int32_t from = n.input(0)->elem_type();
  return to && from != 0 && *to == from;
}

bool slice_is_noop(const ir::Node& n) {
  if (n.opset() < 10 ? !only_attributes(n, {"starts", "ends", "axes"}) || n.inputs().size() != 1
                     : !only_attributes(n, {}) || n.inputs().size() < 3 || n.inputs().size() > 5)
    return false;
  auto p = ir::slice_params(n);
  if (!p) return false;
  const ir::TensorFact& data = n.input(0)->fact();
  for (size_t i = 0; i < p->starts.size(); ++i) {
    int64_t axis = p->axes[i];
    if (axis < 0) {
      if (!data.has_rank) return false;
      axis += static_cast<int64_t>(data.dims.size());
    }
    if (axis < 0 || (data.has_rank && axis >= static_cast<int64_t>(data.dims.size()))) return false;
    if (p->steps[i] != 1 || p->starts[i] != 0) return false;
    if (p->ends[i] == INT64_MAX) continue;
    auto dim = data.dim(axis);
    if (!dim || p->ends[i] < *dim) return false;
  }
  return true;
}

// Tile by all ones (repeats a constant).
bool tile_is_noop(const ir::Node& n) {
  if (n.opset() < 6 || !only_attributes(n, {}) || n.inputs().size() != 2) return false;
  auto repeats = constant_ints(n.input(1));
  if (!repeats || n.input(0)->rank() != static_cast<int64_t>(repeats->size())) return false;
  for (int64_t r : *repeats)
    if (r != 1) return false;
  return true;
}

bool pad_is_noop(const ir::Node& n) {
  const int64_t opset = n.opset();
  if (opset < 2) {
    if (!only_attributes(n, {"mode", "paddings", "value"}) || n.inputs().size() != 1) return false;
  } else if (opset < 11) {
    if (!only_attributes(n, {"mode", "pads", "value"}) || n.inputs().size() != 1) return false;
  } else if (!only_attributes(n, {"mode"}) || n.inputs().size() < 2 || n.inputs().size() > 4) {
    return false;
  }
  // Zero pads make mode, constant_value and axes irrelevant.
  auto p = ir::pad_params(n);
  if (!p) {
    // A constant_value that is not a constant does not matter either.
    auto pads = opset >= 11 ? constant_ints(n.input(1)) : std::nullopt;
    if (!pads) return false;
    p = ir::PadParams{*pads, "constant", std::nullopt, std::nullopt};
  }
  for (int64_t v : p->pads)
    if (v != 0) return false;
  return true;
}

// Sum, Mean, Max and Min of a single operand return it (from opset 6: earlier versions have
// consumed_inputs). Mean divides by one, which is exact.
bool single_operand(const ir::Node& n) {
  return n.opset() >= 6 && n.attributes().empty() && n.inputs().size() == 1;
}

// Where(c, a, b) whose condition is a constant all true (all false) is a (b), when the condition
// and the other operand broadcast into that operand's shape.
bool where_constant_condition(ir::Node& n, Rewriter& rw) {
  if (n.opset() < 9 || !n.attributes().empty() || n.inputs().size() != 3) return false;
  auto c = constant_tensor(n.input(0));
  if (!c || c->dtype() != onnx::TensorProto::BOOL || c->size() == 0) return false;
  const bool first = c->get_int64(0) != 0;
  for (int64_t i = 1; i < c->size(); ++i)
    if ((c->get_int64(i) != 0) != first) return false;
  ir::Value* kept = n.input(first ? 1 : 2);
  ir::Value* other = n.input(first ? 2 : 1);
  if (!broadcasts_into(n.input(0), kept) || !broadcasts_into(other, kept)) return false;
  return rw.replace_node(&n, {kept}, /*allow_identity=*/false);
}

// A rule removing `op` nodes for which `is_noop` holds: readers read the data input instead.
Rule noop_rule(const char* name, const char* op, bool (*is_noop)(const ir::Node&)) {
  return Rule{name, {op}, [is_noop](ir::Node& n, Rewriter& rw) {
                if (!n.input(0) || !n.output(0) || !is_noop(n)) return false;
                // Only the first output may be read (Dropout's mask is checked by its rule).
                for (size_t i = 1; i < n.outputs().size(); ++i)
                  if (n.output(i) && n.output(i)->use_count() > 0) return false;
                return rw.replace_node(&n, {n.input(0)}, /*allow_identity=*/false);
              }};
}

std::vector<Rule> noop_rules() {
  return {
      noop_rule("dropout", "Dropout", dropout_is_noop),
      noop_rule("transpose", "Transpose", transpose_is_noop),
      noop_rule("reshape", "Reshape", reshape_is_noop),
      noop_rule("expand", "Expand", expand_is_noop),
      noop_rule("squeeze", "Squeeze", squeeze_is_noop),
      noop_rule("unsqueeze", "Unsqueeze", unsqueeze_is_noop),
      noop_rule("flatten", "Flatten", flatten_is_noop),
      noop_rule("cast", "Cast", cast_is_noop),
      noop_rule("slice", "Slice", slice_is_noop),
      noop_rule("pad", "Pad", pad_is_noop),
      noop_rule("tile", "Tile", tile_is_noop),
      Rule{"where", {"Where"}, where_constant_condition},
      noop_rule(
          "concat", "Concat",
          [](const ir::Node& n) { return only_attributes(n, {"axis"}) && n.inputs().size() == 1; }),
      noop_rule(
          "split", "Split",
          [](const ir::Node& n) {
            return n.outputs().size() == 1 && only_attributes(n, {"axis", "split", "num_outputs"});
          }),
      noop_rule("sum", "Sum", single_operand),
      noop_rule("mean", "Mean", single_operand),
      noop_rule("max", "Max", single_operand),
      noop_rule("min", "Min", single_operand),
  };
}

}  // namespace

PassInfo eliminate_noop_pass() {
  return describe(
      {.name = "eliminate_noop",
       .level = 1,
       .description =
           "remove no-op nodes: inference Dropout, identity Transpose/Reshape/Expand/Squeeze/"
           "Unsqueeze/Flatten/Cast/Slice/Pad/Tile, one-part Concat/Split, one-operand "
           "Sum/Mean/Max/Min, Where with a constant condition",
       .options = {}},
      {noop_rules});
}

}  // namespace graft
