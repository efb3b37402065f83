#include "core/passes/registry.h"

#include "core/passes/passes.h"

namespace graft {

const std::vector<PassInfo>& all_passes() {
  // Order matters: function calls are inlined first, so every other pass sees their nodes;
  // constants become initializers first so later passes see them; cleanups
  // expose fusions; prune runs last to drop what the others left unused.
  // clang-format off
  static const std::vector<PassInfo> passes = {
      // Put first by the pipeline when a request gives a target opset (by name only).
      convert_opset_pass(),
      inline_functions_pass(),
      extract_constants_pass(),
      fold_shapes_pass(),
      fold_constants_pass(),
      inline_constant_if_pass(),
      simplify_arithmetic_pass(),
      // After folding and the chain rules (constants are initializers, adjacent Transposes
      // merged), before the cleanups that tidy what it leaves (identity Transposes, duplicate
      // constants and Transposes) and before the fusions that absorb a remaining Transpose.
      optimize_transposes_pass(),
      eliminate_identity_pass(),
      eliminate_noop_pass(),
      dedup_initializers_pass(),
      cse_pass(),
      fuse_blocks_pass(),
      // After fuse_blocks (its LayerNormalizations), before fuse_matmul_add turns the
      // projections it matches into Gemms.
      fuse_onnxruntime_pass(),
      // After fuse_onnxruntime: where ONNX Runtime's Attention takes the projections too, that
      // one is made; the standard op takes what is left.
      fuse_attention_pass(),
      fuse_conv_batchnorm_pass(),
      fuse_matmul_add_pass(),
      quantize_dynamic_int8_pass(),
      quantize_static_int8_pass(),
      quantize_weights_int4_pass(),
      convert_fp16_pass(),
      // Last but prune: orders the nodes the others left (prune only removes, never reorders).
      schedule_memory_pass(),
      prune_pass(),
  };
  // clang-format on
  return passes;
}

const PassInfo* find_pass(std::string_view name) {
  for (const auto& p : all_passes())
    if (p.name == name) return &p;
  return nullptr;
}

std::vector<std::string> passes_for_level(int level, const Target& target) {
  std::vector<std::string> out;
  for (const auto& p : all_passes())
    if (p.level <= level && !p.by_name_only && (!p.target || *p.target == target.kind))
      out.push_back(p.name);
  return out;
}

}  // namespace graft
