// ONNX's text syntax (onnx/defs/parser.h) with the 4-bit types, which libonnx 1.12's parser
// predates: `int4` and `uint4` may be written for declared values and named tensors
// (`<int4[2,2] w = {1, -2, 3, 7}>`, a Constant's `value = uint4[3] c {1, 2, 3}`). They are
// parsed as int8/uint8, then given back their type by name, tensors stored packed in raw_data.
// Used by the tests (parse_text) and by fuzz/tools/onnx_from_text (the fuzz seeds).
#pragma once

#include <string>

#include <onnx/onnx_pb.h>

namespace graft::testing {

// Parses `text` into `proto`; "" on success, else the parser's message.
std::string parse_onnx_text(const std::string& text, onnx::ModelProto* proto);

}  // namespace graft::testing
