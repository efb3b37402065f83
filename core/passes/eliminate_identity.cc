// Identity nodes copy a value under a new name; consumers can read the original directly. Names
// listed as graph outputs (main graph, subgraph or function body) are kept: the producer of the
// copied value is renamed to output them, or the Identity stays when that is impossible (it
// forwards a graph input, an initializer, an outer-scope value or another graph output).
#include "core/passes/passes.h"
#include "core/passes/rewrite_util.h"

namespace graft {

namespace {

class EliminateIdentity final : public Pass {
 public:
  std::string_view name() const override { return "eliminate_identity"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    PassResult result;
    for (ir::Graph* g : model.all_graphs()) {
      for (ir::Node* n : g->nodes()) {
        if (n->dead() || !n->is("Identity") || n->inputs().size() != 1 ||
            n->outputs().size() != 1 || !n->attributes().empty())
          continue;
        if (bypass_node(n, n->input(0), n->output(0))) result.add();
      }
    }
    return result;
  }
};

}  // namespace

std::unique_ptr<Pass> make_eliminate_identity() { return std::make_unique<EliminateIdentity>(); }

PassInfo eliminate_identity_pass() {
  return {.name = "eliminate_identity",
          .level = 1,
          .description = "remove Identity nodes (graph output names are kept)",
          .options = {},
          .create = make_eliminate_identity};
}

}  // namespace graft
