// Placeholder: the pass is registered so the pipeline order is fixed; it changes nothing yet.
#include "core/passes/passes.h"

namespace graft {

namespace {

class InlineConstantIf final : public Pass {
 public:
  std::string_view name() const override { return "inline_constant_if"; }
  absl::StatusOr<PassResult> run(ir::Model&, PassContext&) override { return PassResult{}; }
};

}  // namespace

std::unique_ptr<Pass> make_inline_constant_if() { return std::make_unique<InlineConstantIf>(); }

}  // namespace graft
