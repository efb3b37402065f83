// The built-in passes. Each core/passes/<name>.cc defines, at its end, its descriptor (name, level,
// description, option schema); registry.cc lists the descriptors in pipeline order.
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
PassInfo convert_opset_pass();
PassInfo fuse_onnxruntime_pass();
PassInfo fuse_attention_pass();
PassInfo quantize_dynamic_int8_pass();
PassInfo quantize_static_int8_pass();
PassInfo quantize_weights_int4_pass();
PassInfo convert_fp16_pass();
PassInfo schedule_memory_pass();
PassInfo prune_pass();

}  // namespace graft
