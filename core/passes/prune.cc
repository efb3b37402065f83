// Removes nodes and initializers whose values reach no graph output, and value_info entries that
// name nothing. Liveness is relative to each root graph (the main graph, every function body):
// a node is live if it computes an output of its graph, must run for its effects, or computes a
// value that a live node reads, directly or from inside one of its subgraphs (which capture outer
// values by name). Inside a live node's subgraph the same rule applies relative to the
// subgraph's outputs.
//
// Kept regardless: graph inputs (interface, even unused), initializers that are also graph inputs
// (caller-overridable defaults, so interface too), opset imports, unused functions, and nodes
// that may have effects we cannot see: ops outside the standard ONNX domains, and the calls and
// control flow that contain them (their operands stay live with them).
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/passes/passes.h"
#include "core/passes/rewriter.h"

namespace graft {

namespace {

// Nodes that must run even when nobody reads their outputs: ops outside the standard ONNX domains
// (their effects are unknown), calls of model-local functions whose bodies hold such nodes, and
// control flow whose subgraphs hold such nodes.
class Effects {
 public:
  explicit Effects(const ir::Model& model) {
    for (const auto& fn : model.functions())
      functions_[{fn.rest.domain(), fn.rest.name()}] = fn.body.get();
  }

  bool pinned(const ir::Node* n) const { return pinned_.count(n) != 0; }

  // Computes pinned() for every node of `root` and of its nested subgraphs.
  void analyze(const ir::Graph& root) {
    if (!state_.try_emplace(&root, kInProgress).second) return;
    std::vector<const ir::Graph*> graphs{&root};
    for (size_t i = 0; i < graphs.size(); ++i)
      for (ir::Node* n : graphs[i]->nodes())
        for (const auto& sub : n->subgraphs()) graphs.push_back(sub.graph.get());
    // Innermost graphs first, so that a pinned node pins its enclosing nodes in turn.
    for (auto it = graphs.rbegin(); it != graphs.rend(); ++it) {
      for (ir::Node* n : (*it)->nodes()) {
        if (!pinned(n) && !pure_op(*n)) pinned_.insert(n);
        if (pinned(n) && (*it)->parent()) pinned_.insert((*it)->parent());
      }
    }
    state_[&root] = kDone;
  }

 private:
  bool pure_op(const ir::Node& n) {
    // ONNX and ONNX-ML ops are functions of their inputs (random generators included).
    if (n.is_onnx_domain() || n.domain() == "ai.onnx.ml") return true;
    auto fn = functions_.find({n.domain(), n.op_type()});
    if (fn == functions_.end()) return false;
    const ir::Graph* body = fn->second;
    analyze(*body);
    // A body still being analyzed calls itself, which ONNX forbids: keep the call.
    if (state_[body] != kDone) return false;
    for (ir::Node* inner : body->nodes())
      if (pinned(inner)) return false;
    return true;
  }

  enum State { kInProgress, kDone };
  std::map<std::pair<std::string, std::string>, const ir::Graph*> functions_;
  std::unordered_map<const ir::Graph*, State> state_;
  std::unordered_set<const ir::Node*> pinned_;
};

// Backward reachability from graph outputs and pinned nodes. Every value is pushed at most once
// per use (or output reference), and every node is marked once, so the walk is linear in the
// size of the model.
class Liveness {
 public:
  Liveness(const Effects& effects, size_t expected_nodes) : effects_(effects) {
    live_.reserve(expected_nodes);
  }

  bool is_live(const ir::Node* n) const { return live_.count(n) != 0; }

  // Makes live everything `g`'s outputs and pinned nodes depend on.
  void enter(const ir::Graph& g) {
    for (const auto& out : g.outputs()) work_.push_back(out.value);
    for (ir::Node* n : g.nodes())
      if (effects_.pinned(n)) mark(n);
    drain();
  }

 private:
  void mark(ir::Node* n) {
    if (!live_.insert(n).second) return;
    for (ir::Value* v : n->inputs())
      if (v) work_.push_back(v);
    // A live node runs its subgraphs, which are live relative to their own outputs; values they
    // capture from outer scopes show up as inputs of their nodes.
    for (const auto& sub : n->subgraphs()) {
      for (const auto& out : sub.graph->outputs()) work_.push_back(out.value);
      for (ir::Node* inner : sub.graph->nodes())
        if (effects_.pinned(inner)) mark(inner);
    }
  }

  void drain() {
    while (!work_.empty()) {
      ir::Value* v = work_.back();
      work_.pop_back();
      if (ir::Node* p = v->producer()) mark(p);
    }
  }

  const Effects& effects_;
  std::unordered_set<const ir::Node*> live_;
  std::vector<ir::Value*> work_;
};

class Prune final : public Pass {
  Rewriter* rw_ = nullptr;

 public:
  std::string_view name() const override { return "prune"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    PassResult result;
    Effects effects(model);
    Rewriter rw(model);
    rw_ = &rw;
    std::vector<ir::Graph*> roots{&model.graph()};
    for (auto& fn : model.functions()) roots.push_back(fn.body.get());
    // Purity of every function is settled before any body is pruned.
    for (ir::Graph* root : roots) effects.analyze(*root);
    for (ir::Graph* root : roots) prune_root(*root, effects, result);
    rw_ = nullptr;
    return result;
  }

 private:
  static int64_t initializer_count(const ir::Model& model) {
    int64_t n = 0;
    for (ir::Graph* g : model.all_graphs()) n += static_cast<int64_t>(g->initializers().size());
    return n;
  }

  void prune_root(ir::Graph& root, const Effects& effects, PassResult& result) {
    Liveness liveness(effects, root.num_nodes());
    liveness.enter(root);

    // The graphs that survive: the root and the subgraphs of its live nodes, parents first.
    std::vector<ir::Graph*> graphs{&root};
    std::vector<ir::Node*> dead;
    ir::Model& model = *root.model();
    // Erasing a node also erases the constants only it read: count removals model-wide.
    const int64_t nodes_before = static_cast<int64_t>(model.total_nodes());
    const int64_t initializers_before = initializer_count(model);
    for (size_t i = 0; i < graphs.size(); ++i) {
      ir::Graph* g = graphs[i];
      std::vector<ir::Node*> nodes = g->nodes();
      // Consumers go before producers so that each removed output has no uses left.
      for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
        ir::Node* n = *it;
        if (liveness.is_live(n)) {
          for (const auto& sub : n->subgraphs()) graphs.push_back(sub.graph.get());
          continue;
        }
        dead.push_back(n);
      }
    }
    // Consumers go before producers so that each erased node's outputs have no readers left. A
    // dead reader in another graph, or out of order (nodes appended by an earlier pass are not
    // sorted yet), leaves a node for a later sweep.
    for (bool progress = true; progress;) {
      progress = false;
      for (ir::Node* n : dead) {
        if (n->dead()) continue;
        if (rw_->erase(n)) progress = true;
      }
    }
    result.add(nodes_before - static_cast<int64_t>(model.total_nodes()));

    int64_t removed_info = 0;
    for (ir::Graph* g : graphs) {
      if (g->parent() && g->parent()->dead()) continue;
      for (ir::Value* v : g->initializers()) rw_->erase_if_unused(v);
      removed_info += g->prune_orphan_value_info();
    }
    result.add(initializers_before - initializer_count(model));
    // value_info is metadata, not a rewrite, but dropping it still changes the model.
    if (removed_info > 0) result.changed = true;
  }
};

}  // namespace

PassInfo prune_pass() {
  return describe<Prune>(
      {.name = "prune",
       .level = 1,
       .description = "remove nodes, initializers and value_info that reach no graph output",
       .options = {}});
}

}  // namespace graft
