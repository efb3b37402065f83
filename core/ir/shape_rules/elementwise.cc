// Shape rules of the elementwise ops: unary math and activations, normalizations, Cast, the
// broadcasting arithmetic, comparisons and logic, Where.
#include <vector>

#include "core/ir/op_params.h"
#include "core/ir/shape_rules.h"

namespace graft::ir::shape_rules {

namespace {

using onnx::TensorProto;

// The first output has the shape and type of the first input; other outputs are not modelled.
TensorFact same_as_input(const Node& n, size_t output, bool*) {
  return output == 0 ? input_fact(n, 0) : TensorFact{};
}

TensorFact dropout(const Node& n, size_t output, bool*) {
  if (output == 1) return with_type(input_fact(n, 0), TensorProto::BOOL);
  return output == 0 ? input_fact(n, 0) : TensorFact{};
}

// Y is X; the running statistics (BatchNormalization) and mean and inverse deviation
// (LayerNormalization) are left to libonnx.
TensorFact normalization(const Node& n, size_t output, bool* partial) {
  if (output > 0) return unknown(partial);
  return input_fact(n, 0);
}

// Y has X's shape and Scale's element type.
TensorFact rms_normalization(const Node& n, size_t output, bool* partial) {
  if (output > 0) return TensorFact{};
  const int32_t type = input_fact(n, 1).elem_type;
  if (type == 0) *partial = true;
  return with_type(input_fact(n, 0), type);
}

TensorFact cast(const Node& n, size_t, bool* partial) {
  auto to = cast_to(n);
  if (!to) *partial = true;
  return with_type(input_fact(n, 0), to ? *to : 0);
}

TensorFact cast_like(const Node& n, size_t, bool*) {
  return with_type(input_fact(n, 0), input_fact(n, 1).elem_type);
}

TensorFact bool_of_input(const Node& n, size_t, bool*) {
  return with_type(input_fact(n, 0), TensorProto::BOOL);
}

TensorFact broadcast_inputs(const Node& n, int32_t elem_type, bool* partial) {
  std::vector<const TensorFact*> ins;
  for (size_t i = 0; i < n.inputs().size(); ++i) ins.push_back(&input_fact(n, i));
  if (ins.empty()) return unknown(partial);
  return broadcast(ins, elem_type);
}

TensorFact arithmetic(const Node& n, size_t, bool* partial) {
  return broadcast_inputs(n, input_fact(n, 0).elem_type, partial);
}

TensorFact comparison(const Node& n, size_t, bool* partial) {
  return broadcast_inputs(n, TensorProto::BOOL, partial);
}

// X's type: input 0 is the condition.
TensorFact where(const Node& n, size_t, bool* partial) {
  return broadcast_inputs(n, input_fact(n, 1).elem_type, partial);
}

}  // namespace

void add_elementwise_rules(Table& t) {
  t.add({"Identity", "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round",
         "Sign", "Erf"},
        same_as_input);
  t.add({"Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh"},
        same_as_input);
  t.add({"Relu", "Sigmoid", "Tanh", "Softplus", "Softsign", "Softmax", "LogSoftmax", "Hardmax"},
        same_as_input);
  t.add({"Elu", "Selu", "Celu", "LeakyRelu", "ThresholdedRelu", "HardSigmoid", "HardSwish", "Gelu",
         "Mish", "Shrink", "Clip", "PRelu"},
        same_as_input);
  t.add({"InstanceNormalization", "LpNormalization", "MeanVarianceNormalization", "LRN"},
        same_as_input);
  t.add({"CumSum", "Trilu", "ReverseSequence", "ScatterND", "ScatterElements", "Scatter",
         "BitwiseNot"},
        same_as_input);
  t.add({"Dropout"}, dropout);
  t.add({"BatchNormalization", "LayerNormalization"}, normalization);
  t.add({"RMSNormalization"}, rms_normalization);
  // Y is X (RotaryEmbedding rotates pairs of elements in place).
  t.add({"RotaryEmbedding"}, same_as_input);
  t.add({"Cast"}, cast);
  t.add({"CastLike"}, cast_like);
  t.add({"Not", "IsNaN", "IsInf"}, bool_of_input);
  t.add({"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "BitShift",
         "BitwiseAnd", "BitwiseOr", "BitwiseXor"},
        arithmetic);
  t.add({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"},
        comparison);
  t.add({"Where"}, where);
}

}  // namespace graft::ir::shape_rules
