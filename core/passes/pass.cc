#include "core/passes/pass.h"

#include "core/base/status.h"
#include "core/passes/rewriter.h"

namespace graft {

absl::StatusOr<PassResult> PerGraphPass::run(ir::Model& model, PassContext& ctx) {
  PassResult result;
  Rewriter rw(model);
  for (ir::Graph* g : model.all_graphs()) RETURN_IF_ERROR(run_graph(*g, rw, ctx, result));
  return result;
}

}  // namespace graft
