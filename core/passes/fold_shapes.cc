// Shape and Size of tensors whose dims are known become constants, so the shape arithmetic that
// exporters emit around them (PyTorch's Shape -> Gather -> Unsqueeze -> Concat -> Reshape) is
// folded by fold_constants. Where only some dims are known, a Gather or Slice that reads only
// known entries of a Shape becomes a constant on its own, and the dynamic part stays.
//
// Dims come from the IR's shape facts (core/ir/shapes.h): graph-input declarations and constants
// carried through Graft's rules and ONNX shape inference, in every graph (If branches and
// function bodies included). Node outputs' own declarations (value_info) are never used: a model
// libonnx cannot infer (newer IR or opset) is folded as far as Graft's rules alone reach.
//
// A Reshape whose target is computed from Shapes gets a constant target using Reshape's 0 and
// -1 entries even where dims are symbolic: reshape_chains.cc.
//
// Deliberately not folded: symbolic dims (even two equal symbols), Size with any unknown dim,
// shapes of graph inputs that only an initializer default describes (a caller may override it),
// Shape with attributes other than start/end (or start/end before opset 15), and any result
// nobody reads (prune removes those).
#include <optional>
#include <vector>

#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/rules.h"

namespace graft {

namespace {

using Dims = std::vector<ir::Dim>;

// Whether a constant can replace `n` in its graph (a Constant node holds int64 from opset 9).
bool can_fold(const ir::Node& n) {
  if (!n.is_onnx_domain() || n.outputs().size() != 1 || !n.output(0) ||
      n.output(0)->use_count() == 0)
    return false;
  const ir::Model& model = *n.graph()->model();
  return can_hold_new_initializers(model, n.graph()) || n.graph()->opset("") >= 9;
}

// The entries of a Shape node's output, known or not; nullopt if its input's rank is unknown or
// the node has attributes we do not understand.
std::optional<Dims> shape_entries(const ir::Node& n) {
  const ir::TensorFact& f = n.input(0)->fact();
  if (!f.has_rank) return std::nullopt;
  auto range = ir::shape_range(n, static_cast<int64_t>(f.dims.size()));
  if (!range) return std::nullopt;
  return Dims(f.dims.begin() + range->first, f.dims.begin() + range->second);
}

// Known values of `entries[i]` for each index, nullopt if one is unknown.
std::optional<std::vector<int64_t>> known(const Dims& entries) {
  std::vector<int64_t> values;
  for (const ir::Dim& d : entries) {
    if (!d.known()) return std::nullopt;
    values.push_back(d.value);
  }
  return values;
}

bool fold_shape(ir::Node& n, Rewriter& rw) {
  if (!can_fold(n) || !n.input(0)) return false;
  auto entries = shape_entries(n);
  auto values = entries ? known(*entries) : std::nullopt;
  if (!values) return false;
  return rw.replace_with_constant(
      &n, ir::make_int64_tensor({static_cast<int64_t>(values->size())}, *values));
}

bool fold_size(ir::Node& n, Rewriter& rw) {
  if (!can_fold(n) || !n.input(0) || !n.attributes().empty()) return false;
  auto count = n.input(0)->fact().element_count();
  if (!count) return false;
  return rw.replace_with_constant(&n, ir::make_int64_tensor({}, {*count}));
}

// Gather(Shape(x), constant indices) reading only known dims.
bool fold_gather(ir::Node& n, Rewriter& rw) {
  const ir::Node* shape = producer(n.input(0), "Shape");
  if (!shape || !can_fold(n) || n.inputs().size() != 2 || !only_attributes(n, {"axis"}))
    return false;
  const int64_t axis = n.attr_int("axis", 0);
  if (axis != 0 && axis != -1) return false;
  const auto* indices_proto = constant_header(n.input(1));
  auto indices = constant_ints(n.input(1));
  auto entries = shape_entries(*shape);
  if (!indices || !entries) return false;
  const int64_t len = static_cast<int64_t>(entries->size());
  std::vector<int64_t> values;
  for (int64_t i : *indices) {
    if (i < 0) i += len;
    if (i < 0 || i >= len || !(*entries)[static_cast<size_t>(i)].known()) return false;
    values.push_back((*entries)[static_cast<size_t>(i)].value);
  }
  const auto& idims = indices_proto->dims();
  return rw.replace_with_constant(
      &n, ir::make_int64_tensor(std::vector<int64_t>(idims.begin(), idims.end()), values));
}

// Slice(Shape(x), ...) with constant parameters selecting only known dims.
bool fold_slice(ir::Node& n, Rewriter& rw) {
  const ir::Node* shape = producer(n.input(0), "Shape");
  if (!shape || !can_fold(n)) return false;
  if (n.opset() >= 10 ? !n.attributes().empty() || n.inputs().size() < 3 || n.inputs().size() > 5
                      : n.inputs().size() != 1 || !only_attributes(n, {"starts", "ends", "axes"}))
    return false;
  auto p = ir::slice_params(n);
  if (!p || p->starts.size() != 1 || (p->axes[0] != 0 && p->axes[0] != -1) || p->steps[0] == 0)
    return false;  // a zero step is an error at run time
  auto entries = shape_entries(*shape);
  if (!entries) return false;
  std::vector<int64_t> values;
  for (int64_t i : ir::slice_indices(static_cast<int64_t>(entries->size()), p->starts[0],
                                     p->ends[0], p->steps[0])) {
    if (!(*entries)[static_cast<size_t>(i)].known()) return false;
    values.push_back((*entries)[static_cast<size_t>(i)].value);
  }
  return rw.replace_with_constant(
      &n, ir::make_int64_tensor({static_cast<int64_t>(values.size())}, values));
}

// Shape<start, end>(Transpose(x, perm)), the Transpose's only reader: Gather(Shape(x),
// perm[start:end]), the input's dims in the transposed order; the Transpose, computed for its
// dims alone, goes (as many nodes, one copy less at run time). An export reads a query's length
// off its heads for a causal mask's slice, and that is all that reads them once attention is
// fused from the 3-D queries.
bool shape_of_transpose(ir::Node& n, Rewriter& rw) {
  ir::Node* t = producer(n.input(0), "Transpose");
  if (!t || !n.is_onnx_domain() || t->graph() != n.graph() || t->outputs().size() != 1 ||
      !single_use(t->output(0)) || t->output(0)->is_graph_output())
    return false;
  const ir::TensorFact& f = t->input(0)->fact();
  if (!f.has_rank) return false;
  auto perm = ir::transpose_perm(*t, static_cast<int64_t>(f.dims.size()));
  if (!perm || perm->size() != f.dims.size()) return false;
  auto range = ir::shape_range(n, static_cast<int64_t>(perm->size()));
  if (!range) return false;
  const std::vector<int64_t> picked(perm->begin() + range->first, perm->begin() + range->second);
  ir::Graph& g = *n.graph();
  ir::Node* shape = rw.add_node(g, "Shape", {t->input(0)}, 1, &n);
  ir::Value* indices = rw.add_constant(
      g, ir::make_int64_tensor({static_cast<int64_t>(picked.size())}, picked), "transposed_dims");
  ir::Node* gather = rw.add_node(g, "Gather", {shape->output(0), indices}, 1, &n);
  rw.set_attr(gather, int_attr("axis", 0));
  if (!rw.replace_node(&n, {gather->output(0)})) return false;
  rw.erase(t);
  return true;
}

std::vector<Rule> shape_rules() {
  return {{"shape", {"Shape"}, fold_shape},
          {"shape_of_transpose", {"Shape"}, shape_of_transpose},
          {"size", {"Size"}, fold_size},
          {"gather_of_shape", {"Gather"}, fold_gather},
          {"slice_of_shape", {"Slice"}, fold_slice}};
}

}  // namespace

PassInfo fold_shapes_pass() {
  return describe(
      {.name = "fold_shapes",
       .level = 1,
       .description = "Shape, Size and shape arithmetic on statically known shapes become "
                      "constants; a Reshape target computed from Shapes becomes a constant with "
                      "0 (copy) and -1 (inferred) entries",
       .options = {}},
      {shape_rules, reshape_chain_rules});
}

}  // namespace graft
