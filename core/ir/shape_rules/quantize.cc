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

// QuantizeLinear has X's shape and its zero point's type (uint8 without one); DequantizeLinear
// X's shape and its scale's type.
TensorFact quantize_linear(const Node& n, size_t, bool* partial) {
  if (n.attr("output_dtype")) return unknown(partial);  // opset 21's, not read here
  int32_t type = TensorProto::UINT8;
  if (n.op_type() == "DequantizeLinear")
    type = input_fact(n, 1).elem_type;
  else if (n.inputs().size() > 2 && n.input(2))
    type = input_fact(n, 2).elem_type;
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
