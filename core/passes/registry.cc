#include "core/passes/registry.h"

#include "core/passes/passes.h"

namespace graft {

const std::vector<PassInfo>& all_passes() {
  // Order matters: constants become initializers first so later passes see them; cleanups
  // expose fusions; prune runs last to drop what the others left unused.
  static const std::vector<PassInfo> passes = {
      {"extract_constants", "Constant nodes become initializers", 1, {}, make_extract_constants},
      {"fold_shapes",
       "Shape, Size and shape arithmetic on statically known shapes become constants",
       1,
       {},
       make_fold_shapes},
      {"fold_constants",
       "nodes whose inputs are all constants become initializers holding their results "
       "(deterministic ops the reference evaluator supports)",
       1,
       {{"max_bytes", "16777216", "largest folded result in bytes"},
        {"max_growth", "4",
         "never fold when the result is more than this many times larger than the constant "
         "inputs folding frees, i.e. those only this node reads (results under 1 KiB always "
         "fold)"}},
       make_fold_constants},
      {"inline_constant_if",
       "If with a constant condition becomes the nodes of its taken branch",
       1,
       {},
       make_inline_constant_if},
      {"simplify_arithmetic",
       "exact algebraic rewrites: constant push-down, neutral and absorbing elements, "
       "inverse pairs, Transpose/Reshape/Squeeze/Unsqueeze/Cast chains",
       1,
       {},
       make_simplify_arithmetic},
      {"eliminate_identity",
       "remove Identity nodes (graph output names are kept)",
       1,
       {},
       make_eliminate_identity},
      {"eliminate_noop",
       "remove no-op nodes: inference Dropout, identity Transpose/Reshape/Expand/Squeeze/"
       "Unsqueeze/Flatten/Cast/Slice/Pad, one-part Concat/Split",
       1,
       {},
       make_eliminate_noop},
      {"dedup_initializers",
       "merge initializers with equal type, shape and bytes",
       1,
       {},
       make_dedup_initializers},
      {"cse",
       "merge nodes computing the same op on the same inputs (deterministic ops only)",
       1,
       {},
       make_cse},
      {"fuse_conv_batchnorm",
       "fold inference BatchNormalization into a preceding Conv/ConvTranspose/Gemm/MatMul",
       2,
       {},
       make_fuse_conv_batchnorm},
      {"fuse_matmul_add",
       "2-D MatMul followed by Add of a constant bias becomes Gemm",
       2,
       {},
       make_fuse_matmul_add},
      {"prune",
       "remove nodes, initializers and value_info that reach no graph output",
       1,
       {},
       make_prune},
  };
  return passes;
}

const PassInfo* find_pass(std::string_view name) {
  for (const auto& p : all_passes())
    if (p.name == name) return &p;
  return nullptr;
}

std::vector<std::string> passes_for_level(int level) {
  std::vector<std::string> out;
  for (const auto& p : all_passes())
    if (p.level <= level) out.push_back(p.name);
  return out;
}

}  // namespace graft
