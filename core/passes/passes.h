// The built-in passes. Each core/passes/<name>.cc defines, at its end, the pass's factory and
// its descriptor (name, level, description, option schema); registry.cc lists the descriptors
// in pipeline order.
#pragma once

#include <memory>
#include <vector>

#include "core/passes/pass.h"

namespace graft {

std::unique_ptr<Pass> make_inline_functions();
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
std::unique_ptr<Pass> make_optimize_transposes();
std::unique_ptr<Pass> make_fuse_blocks();
std::unique_ptr<Pass> make_convert_fp16();
std::unique_ptr<Pass> make_schedule_memory();
std::unique_ptr<Pass> make_prune();

// Rule sets split across files (one pass made of both).
struct Rule;
std::vector<Rule> arithmetic_rules();  // simplify_arithmetic.cc
std::vector<Rule> chain_rules();       // simplify_chains.cc
std::vector<Rule> reshape_chain_rules();  // reshape_chains.cc (in fold_shapes)
std::vector<Rule> pad_fusion_rules();     // fuse_pad.cc (in fuse_conv_batchnorm)

PassInfo inline_functions_pass();
PassInfo extract_constants_pass();
PassInfo fold_constants_pass();
PassInfo fold_shapes_pass();
PassInfo inline_constant_if_pass();
PassInfo simplify_arithmetic_pass();
PassInfo eliminate_identity_pass();
PassInfo eliminate_noop_pass();
PassInfo dedup_initializers_pass();
PassInfo cse_pass();
PassInfo fuse_conv_batchnorm_pass();
PassInfo fuse_matmul_add_pass();
PassInfo optimize_transposes_pass();
PassInfo fuse_blocks_pass();
PassInfo quantize_dynamic_int8_pass();
PassInfo convert_fp16_pass();
PassInfo schedule_memory_pass();
PassInfo prune_pass();

}  // namespace graft
