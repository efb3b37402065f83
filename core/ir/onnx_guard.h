// Guards in front of libonnx's shape inference.
//
// libonnx 1.12's inference functions trust what they read: some index the dims of one input by
// the rank of another or by an attribute, read value 0 of an initializer that may hold none,
// divide by a stride, a count or a product that may be 0 (or INT64_MIN by -1), count down a dim
// one stride at a time, or size a vector by a length. On an inconsistent node (reachable from any
// client model: ranks are often known only once inference has run upstream) they read or write
// out of bounds, trap, spin or allocate without bound. The registry below answers
// as libonnx's own does, except that those ops' inference functions first check the shapes and
// attributes the inference context holds, and fail inference for the node (an InferenceError,
// which libonnx records like any other) where libonnx's code would go wrong.
//
// Every InferShapes call in Graft passes this registry. tests/ir/onnx_guard_test.cc holds one
// model per hazard; fuzz/regressions/model the fuzzer's findings.
#pragma once

#include <cstdint>

#include <onnx/defs/schema.h>

namespace graft::ir {

// libonnx's inference gives ConstantOfShape, Expand and Reshape one output dim per element of a
// 1-D shape operand whose values it does not know: a length past this is refused, whether
// declared (shapes.cc's has_huge_shape_tensor skips such a model) or found by inference (the
// guard refuses the node).
constexpr int64_t kMaxShapeTensorLength = 1024;

// The registry to pass to onnx::shape_inference::InferShapes. Built once, read-only after, safe
// to use from several threads.
const onnx::ISchemaRegistry* guarded_schemas();

}  // namespace graft::ir
