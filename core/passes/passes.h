// Factories of the built-in passes, one per file in core/passes/.
#pragma once

#include <memory>
#include <vector>

#include "core/passes/pass.h"

namespace graft {

std::unique_ptr<Pass> make_extract_constants();
std::unique_ptr<Pass> make_fold_constants();
std::unique_ptr<Pass> make_fold_shapes();
std::unique_ptr<Pass> make_inline_constant_if();
std::unique_ptr<Pass> make_simplify_arithmetic();
std::unique_ptr<Pass> make_eliminate_identity();
std::unique_ptr<Pass> make_eliminate_noop();
std::unique_ptr<Pass> make_dedup_initializers();
std::unique_ptr<Pass> make_cse();
std::unique_ptr<Pass> make_fuse_conv_batchnorm();
std::unique_ptr<Pass> make_fuse_matmul_add();
std::unique_ptr<Pass> make_prune();

// Rule sets split across files (one pass made of both).
struct Rule;
std::vector<Rule> arithmetic_rules();  // simplify_arithmetic.cc
std::vector<Rule> chain_rules();       // simplify_chains.cc

}  // namespace graft
