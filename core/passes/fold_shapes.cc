// Placeholder: the pass is registered so the pipeline order is fixed; it changes nothing yet.
#include "core/passes/passes.h"

namespace graft {

namespace {

class FoldShapes final : public Pass {
 public:
  std::string_view name() const override { return "fold_shapes"; }
  absl::StatusOr<PassResult> run(ir::Model&, PassContext&) override { return PassResult{}; }
};

}  // namespace

std::unique_ptr<Pass> make_fold_shapes() { return std::make_unique<FoldShapes>(); }

}  // namespace graft
