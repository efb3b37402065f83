// An If whose condition is a constant always runs the same branch: the branch's nodes are
// copied into the If's graph and the If disappears. Exporters leave such Ifs behind when a
// Python-level condition (a shape check, a config flag) is traced into the graph, and shape
// folding turns more of them constant.
//
// Branch-local values get fresh names in the enclosing graph (the model already reserves their
// old names); the If's output names are kept. Branch initializers become initializers of the
// enclosing graph, or Constant nodes where initializers are not allowed (function bodies, IR < 4).
// An If output that is a graph output and whose branch result is not computed by a copied node
// (an outer value, a branch initializer) is produced by an Identity, which eliminate_identity
// removes where it can.
//
// The taken branch may hold nodes with subgraphs of their own (a Loop, a nested If that is not
// constant): the IR copies them whole (Graph::copy_nodes), every value they define renamed, and
// the values they capture from the branch redirected to the copies. Exact: the same nodes
// compute the same values; only names change.
//
// Deliberately not inlined: branches with inputs or sparse initializers, conditions that are
// not one-element bool initializers or Constant nodes (a graph input with an initializer default
// is not constant).
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/rewriter.h"

namespace graft {

namespace {

// The constant value of an If condition, nullopt unless it is a one-element bool constant: an
// initializer, or a Constant node (IR < 4 models keep those, having no initializers to spare).
std::optional<bool> constant_condition(const ir::Value* cond) {
  if (!cond) return std::nullopt;
  const onnx::TensorProto* tensor = nullptr;
  if (cond->is_constant()) {
    tensor = cond->initializer();
  } else if (const ir::Node* p = cond->producer(); p && p->is("Constant")) {
    if (p->attributes().size() != 1 || p->attributes()[0].name() != "value" ||
        !p->attributes()[0].has_t())
      return std::nullopt;
    tensor = &p->attributes()[0].t();
  }
  if (!tensor) return std::nullopt;
  const onnx::TensorProto& t = *tensor;
  if (t.data_type() != onnx::TensorProto::BOOL || ir::is_external(t)) return std::nullopt;
  auto count = ir::element_count(t);
  if (!count || *count != 1) return std::nullopt;
  auto values = ir::read_int64s(t);
  if (!values || values->size() != 1) return std::nullopt;
  return (*values)[0] != 0;
}

const ir::Graph* branch(const ir::Node& n, std::string_view attr) {
  for (const auto& sub : n.subgraphs())
    if (sub.attr_name == attr && sub.index == -1) return sub.graph.get();
  return nullptr;
}

// True if the branch's nodes can be copied into another graph (Graph::copy_nodes checks the
// nodes' own subgraphs).
bool movable(const ir::Graph& b) {
  return b.inputs().empty() && b.rest().sparse_initializer_size() == 0;
}

// Constant-1 only holds floating-point tensors; Constant-9 holds every type.
bool constant_node_can_hold(const ir::Graph& g, int32_t data_type) {
  if (g.opset("") >= 9) return true;
  return data_type == onnx::TensorProto::FLOAT || data_type == onnx::TensorProto::DOUBLE ||
         data_type == onnx::TensorProto::FLOAT16;
}

class InlineConstantIf final : public Pass {
 public:
  std::string_view name() const override { return "inline_constant_if"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    PassResult result;
    // Deepest graphs first: an inlined inner If leaves its enclosing branch free of subgraphs,
    // so the outer If can be inlined in the same run.
    std::vector<ir::Graph*> graphs = model.all_graphs();
    Rewriter rw(model);
    for (auto it = graphs.rbegin(); it != graphs.rend(); ++it) {
      ir::Graph* g = *it;
      if (g->parent() && g->parent()->dead()) continue;
      for (ir::Node* n : g->nodes()) {
        if (n->dead() || !n->is("If")) continue;
        if (inline_if(rw, *g, n)) result.add();
      }
    }
    return result;
  }

 private:
  static bool inline_if(Rewriter& rw, ir::Graph& g, ir::Node* n) {
    ir::Model& model = rw.model();
    auto cond = constant_condition(n->input(0));
    if (!cond || n->inputs().size() != 1) return false;
    const ir::Graph* b = branch(*n, *cond ? "then_branch" : "else_branch");
    if (!b || !movable(*b) || b->outputs().size() != n->outputs().size()) return false;
    const bool initializers = can_hold_new_initializers(model, &g);
    if (!initializers)
      for (const ir::Value* init : b->initializers())
        if (!constant_node_can_hold(g, init->initializer()->data_type())) return false;

    // Branch values -> their copies in `g`. Values from enclosing scopes are not in the map:
    // they are in scope in `g` too, since `g` encloses the branch.
    std::unordered_map<const ir::Value*, ir::Value*> copies;
    auto mapped = [&](ir::Value* v) -> ir::Value* {
      auto it = copies.find(v);
      return it == copies.end() ? v : it->second;
    };
    // Undone unless the whole inlining completes.
    Rewriter::Transaction transaction(rw);
    for (ir::Value* init : b->initializers())
      if (init->use_count() > 0)
        copies[init] = rw.add_constant(g, *init->initializer(), init->name());
    std::vector<const ir::Node*> inner;
    for (const ir::Node* node : b->nodes()) inner.push_back(node);
    std::vector<ir::Node*> copied = g.copy_nodes(inner, mapped);
    if (!inner.empty() && copied.empty()) return false;
    std::unordered_set<const ir::Node*> created(copied.begin(), copied.end());
    for (size_t k = 0; k < inner.size(); ++k)
      for (size_t i = 0; i < inner[k]->outputs().size(); ++i)
        if (ir::Value* out = inner[k]->output(i)) copies[out] = copied[k]->output(i);

    // The If's outputs take over the branch results; an output name of `g` moves onto the
    // copied node computing it (once: a branch result listed twice makes the second If output
    // read the first), or an Identity produces it.
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      ir::Value* out = n->output(i);
      if (!out) continue;
      ir::Value* branch_out = b->outputs()[i].value;
      ir::Value* result = mapped(branch_out);
      ir::Node* p = result->producer();
      rw.replace_all_uses(out, result, /*allow_identity=*/true,
                          /*keep_name=*/p && created.count(p) > 0);
      if (result->dead()) copies[branch_out] = out;  // renamed to `out`
    }
    rw.erase(n);
    transaction.commit();
    return true;
  }
};

}  // namespace

PassInfo inline_constant_if_pass() {
  return describe<InlineConstantIf>(
      {.name = "inline_constant_if",
       .level = 1,
       .description = "If with a constant condition becomes the nodes of its taken branch",
       .options = {}});
}

}  // namespace graft
