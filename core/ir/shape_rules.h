// Graft's own shape rules (see shapes.h): the fact of a node's output from its inputs' facts and
// constant operands, one function per op or op family, looked up by op type in the default ONNX
// domain. The rules live in core/ir/shape_rules/, one file per family; this header is the
// registry, the helpers every family shares, and the families' registration entry points.
//
// Adding a rule for an op: write `TensorFact my_rule(const Node& n, size_t output, bool* partial)`
// in its family's file and add it in that file's add_*_rules. A rule reads its inputs through
// input_fact (fresh when it runs), operator parameters through op_params.h's readers (which know
// the opsets), and sets *partial wherever libonnx's inference might know more than it tells (see
// unknown() and may_know_more()): a rule that leaves *partial unset promises that its fact tells
// all its inputs' facts allow, and libonnx's inference is then not asked. rules_vs_inference_test
// checks on every libonnx-testdata model that the rules agree with libonnx and that an exact fact
// misses nothing libonnx knows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/ir/model.h"
#include "core/ir/shapes.h"

namespace graft::ir {

// The fact of output `output` of `n`. Sets *partial where it cannot tell all that libonnx's
// inference might (*partial may already be set: a rule never clears it).
using ShapeRule = TensorFact (*)(const Node& n, size_t output, bool* partial);

// The rule for `op` in the default ONNX domain, nullptr if Graft has none.
ShapeRule find_shape_rule(std::string_view op);
// The rule for `op` of `domain` (the default domain as "" or "ai.onnx"; others, e.g.
// com.microsoft, registered as "DOMAIN:OP").
ShapeRule find_shape_rule(std::string_view domain, std::string_view op);
// Every op with a rule, sorted.
std::vector<std::string> shape_rule_ops();

namespace shape_rules {

// Op type -> rule. One rule per op: a second add() of an op is a programming error and aborts
// when the registry is built (on the first fact asked), so no family shadows another silently.
class Table {
 public:
  void add(std::initializer_list<const char*> ops, ShapeRule rule);
  ShapeRule find(std::string_view op) const;
  std::vector<std::string> ops() const;

 private:
  std::map<std::string, ShapeRule, std::less<>> rules_;
};

// The families, one file each in core/ir/shape_rules/ (explicit calls from shape_rules.cc, not
// static initializers, so that linking the static library never drops one).
void add_elementwise_rules(Table& t);   // unary, normalizations, Cast, broadcasting, comparisons
void add_shape_op_rules(Table& t);      // Constant, Shape, Reshape..Split, Gather, Expand, Pad
void add_reduce_rules(Table& t);        // Reduce*, ArgMax/ArgMin
void add_nn_rules(Table& t);            // MatMul, Gemm, Conv and pools, Resize, RNN/GRU/LSTM
void add_quantize_rules(Table& t);      // MatMulInteger, (Dynamic)QuantizeLinear, DequantizeLinear
void add_control_flow_rules(Table& t);  // If, Loop, Scan
void add_detection_rules(Table& t);     // NonMaxSuppression, RoiAlign, GridSample
// ONNX Runtime's com.microsoft ops Graft emits, registered as "com.microsoft:OP".
void add_contrib_rules(Table& t);

// Helpers shared by the families.

// The fact of `v` as last computed (a rule's inputs and subgraph outputs are fresh when it runs);
// unknown for an absent value.
const TensorFact& computed_fact(const Value* v);
// The fact of input `i` of `n` (unknown when absent).
inline const TensorFact& input_fact(const Node& n, size_t i) { return computed_fact(n.input(i)); }

// What a rule returns where it cannot tell more than libonnx might (an operand that is not
// constant, an op or attribute it does not know, an invalid model): marks the fact partial, so
// that libonnx's inference is asked.
TensorFact unknown(bool* partial);
// Where a rule's parameter operands (inputs 1..) are all constant (or it has none) and it still
// could not read them, libonnx might: it reads initializers and Constant nodes (not computed
// values: Graft runs it without data propagation). Marks the fact partial then.
void may_know_more(const Node& n, bool* partial);

TensorFact with_type(TensorFact f, int32_t elem_type);
// A fact of known rank and unknown dims; rank unknown when negative or implausibly large (only
// crafted models have ranks above 1024, and a fact is not worth allocating for them).
TensorFact rank_only(int32_t elem_type, int64_t rank);

// Multidirectional (numpy) broadcasting of the inputs' shapes; rank unknown if one's is, or if
// two known dims cannot broadcast.
TensorFact broadcast(const std::vector<const TensorFact*>& ins, int32_t elem_type);
// MatMul's output (numpy matmul: 1-D operands promoted, batch dims broadcast), of `a`'s element
// type (`b`'s when `a`'s is unknown).
TensorFact matmul_fact(const TensorFact& a, const TensorFact& b);

// Checked arithmetic on dims: sizes come from the model, so a product or sum may not fit (an
// unknown dim then, as for a negative operand or result).
Dim checked_mul(int64_t a, int64_t b);
Dim checked_add(int64_t a, int64_t b);
// The product of dims [begin, end), nullopt unless all known (and it fits).
std::optional<int64_t> product(const std::vector<Dim>& dims, size_t begin, size_t end);

}  // namespace shape_rules
}  // namespace graft::ir
