// Shape rules of the quantization ops (what quantize_dynamic_int8 writes). ConvInteger is with
// Conv (nn.cc), whose rule it shares.
#include "core/ir/shape_rules.h"

namespace graft::ir::shape_rules {

namespace {

using onnx::TensorProto;

// MatMul with an int32 result.
TensorFact matmul_integer(const Node& n, size_t, bool*) {
  return with_type(matmul_fact(input_fact(n, 0), input_fact(n, 1)), TensorProto::INT32);
}

// uint8 of X's shape, and two scalars: the float scale and the uint8 zero point.
TensorFact dynamic_quantize_linear(const Node& n, size_t output, bool*) {
  if (output == 0) return with_type(input_fact(n, 0), TensorProto::UINT8);
  return TensorFact::of_rank(output == 1 ? TensorProto::FLOAT : TensorProto::UINT8, {});
}

// QuantizeLinear has X's shape and its zero point's type, else its output_dtype (opset 21),
// else uint8; DequantizeLinear X's shape and its scale's type, or its output_dtype (opset 23).
// The granularity (per tensor, per axis, blocked by block_size) does not change the shape.
TensorFact quantize_linear(const Node& n, size_t, bool* partial) {
  const bool dequantize = n.op_type() == "DequantizeLinear";
  const onnx::AttributeProto* od = n.attr("output_dtype");
  if (od && (!od->has_i() || n.opset() < (dequantize ? 23 : 21))) return unknown(partial);
  int32_t type = TensorProto::UINT8;
  if (dequantize)
    type = input_fact(n, 1).elem_type;
  else if (n.inputs().size() > 2 && n.input(2))
    type = input_fact(n, 2).elem_type;
  if (od && od->i() != 0) {
    // The zero point's type and output_dtype must agree (QuantizeLinear); a mismatch is an
    // invalid node, whose type is not claimed.
    if (od->i() < 1 || od->i() > 64 || (!dequantize && n.input(2) && type != 0 && type != od->i()))
      return unknown(partial);
    type = static_cast<int32_t>(od->i());
  }
  if (type == 0) *partial = true;
  return with_type(input_fact(n, 0), type);
}

}  // namespace

void add_quantize_rules(Table& t) {
  t.add({"MatMulInteger"}, matmul_integer);
  t.add({"DynamicQuantizeLinear"}, dynamic_quantize_linear);
  t.add({"QuantizeLinear", "DequantizeLinear"}, quantize_linear);
}

}  // namespace graft::ir::shape_rules
