// Placeholder: the pass is registered so the pipeline order is fixed; it changes nothing yet.
#include "core/passes/passes.h"

namespace graft {

namespace {

class SimplifyArithmetic final : public Pass {
 public:
  std::string_view name() const override { return "simplify_arithmetic"; }
  absl::StatusOr<PassResult> run(ir::Model&, PassContext&) override { return PassResult{}; }
};

}  // namespace

std::unique_ptr<Pass> make_simplify_arithmetic() { return std::make_unique<SimplifyArithmetic>(); }

}  // namespace graft
