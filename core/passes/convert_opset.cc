// convert_opset: raises the model's default-domain opset to the request's target opset
// (PipelineConfig::target_opset, `--target-opset N`) with raise_opset (core/passes/opset.h:
// every node whose schema changed on the way is converted to the new form with the same
// meaning), so that the passes after it may write the newer ops (LayerNormalization from 17,
// Gelu from 20, RMSNormalization from 23...).
//
// The pipeline puts it first when a request gives a target opset, after checking that the raise
// is possible (check_raise_opset: a refusal is the request's error, INVALID_ARGUMENT naming the
// node); as a pass it is verified and bisected like the others. It never lowers an opset: a
// model already at or above the target is left as it is. Rules of the conversion are reported
// per rule name, as the rule driver counts them.
#include <absl/strings/str_cat.h>

#include "core/passes/opset.h"
#include "core/passes/passes.h"

namespace graft {

namespace {

constexpr char kOpset[] = "opset";

class ConvertOpset : public Pass {
 public:
  std::string_view name() const override { return "convert_opset"; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override {
    PassResult result;
    const int64_t target = ctx.int_option(kOpset);
    if (target == 0 || model.opset("") >= target) return result;
    RuleRunOptions options;
    options.check_transactions = ctx.check_transactions;
    const ir::Model::Checkpoint cp = model.checkpoint();
    auto raised = raise_opset(model, target, options);
    if (!raised.ok()) {
      model.rollback(cp);
      return raised.status();
    }
    if (raised->refused) {
      model.rollback(cp);
      return absl::InvalidArgumentError(
          absl::StrCat("the opset cannot be raised to ", target, ": ", raised->refused->message()));
    }
    model.release(cp);
    if (!raised->changed) return result;
    result.changed = true;
    result.rules = raised->conversions;
    // The raise itself counts as one rewrite even where no node needed converting.
    result.rewrites = 1;
    for (const auto& [rule, count] : raised->conversions) result.rewrites += count;
    result.add_model_finding("raise_opset", raised->summary(), "opset_import");
    return result;
  }
};

}  // namespace

PassInfo convert_opset_pass() {
  return describe<ConvertOpset>(
      {.name = "convert_opset",
       .level = 1,
       .by_name_only = true,
       .description = "raises the default-domain opset to `opset`, converting the nodes "
                      "whose schema changed (--target-opset N puts it first; by name only)",
       .options = {integer_option(kOpset, 0, 0, kMaxRaisableOpset,
                                  "the opset to raise to (0: none; 13..23)")}});
}

}  // namespace graft
