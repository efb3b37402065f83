// The built-in passes. Each core/passes/<name>.cc defines, at its end, its descriptor (name, level,
// description, option schema) with describe() (pass.h, rules.h); passes.def lists the passes in
// pipeline order, and this file and registry.cc expand that list.
#pragma once

#include <memory>
#include <vector>

#include "core/passes/pass.h"

namespace graft {

// Rule sets split across files (one pass made of both).
struct Rule;
std::vector<Rule> arithmetic_rules();     // simplify_arithmetic.cc
std::vector<Rule> chain_rules();          // simplify_chains.cc
std::vector<Rule> reshape_chain_rules();  // reshape_chains.cc (in fold_shapes)
std::vector<Rule> pad_fusion_rules();     // fuse_pad.cc (in fuse_conv_batchnorm)
// optimize_transposes' push_transpose taking layout-sensitive ops too (in convert_layout).
std::vector<Rule> layout_sensitive_transpose_rules();  // optimize_transposes.cc

// Every pass's descriptor, `PassInfo name_pass()`, defined at the end of core/passes/<name>.cc.
#define GRAFT_PASS(name) PassInfo name##_pass();
#include "core/passes/passes.def"
#undef GRAFT_PASS

}  // namespace graft
