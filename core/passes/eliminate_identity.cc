// Identity nodes copy a value under a new name; consumers can read the original directly. Names
// listed as graph outputs (main graph, subgraph or function body) are kept: the producer of the
// copied value is renamed to output them, or the Identity stays when that is impossible (it
// forwards a graph input, an initializer, an outer-scope value or another graph output).
#include "core/passes/passes.h"
#include "core/passes/rules.h"

namespace graft {

namespace {

std::vector<Rule> identity_rules() {
  return {{"identity", {"Identity"}, [](ir::Node& n, Rewriter& rw) {
             if (n.inputs().size() != 1 || n.outputs().size() != 1 || !n.attributes().empty())
               return false;
             return rw.replace_node(&n, {n.input(0)}, /*allow_identity=*/false);
           }}};
}

}  // namespace

PassInfo eliminate_identity_pass() {
  return describe({.name = "eliminate_identity",
                   .level = 1,
                   .description = "remove Identity nodes (graph output names are kept)",
                   .options = {}},
                  {identity_rules});
}

}  // namespace graft
