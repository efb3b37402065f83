// PLACEHOLDER: being written.
#include "core/passes/passes.h"
namespace graft {
namespace {
class P final : public Pass {
 public:
  std::string_view name() const override { return "eliminate_identity"; }
  absl::StatusOr<PassResult> run(ir::Model&, PassContext&) override { return PassResult{}; }
};
}  // namespace
std::unique_ptr<Pass> make_eliminate_identity() { return std::make_unique<P>(); }
}  // namespace graft
