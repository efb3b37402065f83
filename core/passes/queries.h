// Operand queries shared by every pass: constants (initializers and Constant nodes alike, in any
// graph), operator parameters read by opset (core/ir/op_params.h), uses and producers, and
// attribute checks. A pass never reads these things its own way.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "core/eval/tensor.h"
#include "core/ir/model.h"
#include "core/ir/op_params.h"
#include "core/passes/rewriter.h"

namespace graft {

using ir::constant_doubles;
using ir::constant_header;
using ir::constant_ints;
using ir::constant_proto;
using ir::is_constant_value;

// Largest constant the queries decode into an eval::Tensor.
inline constexpr uint64_t kMaxConstantBytes = 16ull << 20;
// A constant this small costs little in the file: fold_constants always folds results up to
// this size, and rewrites may copy one (e.g. transposed) while the original stays for others.
inline constexpr uint64_t kSmallConstantBytes = 64 << 10;

// Largest external weight the weight rewrites (float_constant, weights.h) read for one rewrite:
// in-memory weights have no such limit, but an external one is read from disk for the call.
inline constexpr uint64_t kMaxExternalWeightBytes = 256ull << 20;

// Reading constants: every query below reads an external tensor's payload through the model's
// ExternalData (ir::constant_proto, eval::Tensor::from_proto), checking its size first and
// releasing it after; a pass never reads external bytes any other way.
// The constant `v` holds (see ir::constant_proto), decoded; nullopt for strings, tensors over
// `max_bytes` (an external one is then not read), external tensors that cannot be read, or
// malformed payloads.
std::optional<eval::Tensor> constant_tensor(const ir::Value* v,
                                            uint64_t max_bytes = kMaxConstantBytes);
// A constant float tensor (FLOAT, DOUBLE or FLOAT16) with its type and dims, values as doubles
// (an external one up to kMaxExternalWeightBytes).
struct FloatConstant {
  int32_t dtype = 0;
  std::vector<int64_t> dims;
  std::vector<double> values;
};
std::optional<FloatConstant> float_constant(const ir::Value* v);
// The type and dims of such a constant without decoding its values (cheap on large weights; an
// external one is not read).
struct FloatConstantType {
  int32_t dtype = 0;
  std::vector<int64_t> dims;
};
std::optional<FloatConstantType> float_constant_type(const ir::Value* v);
// A constant scalar (any element count of 1) as a double.
std::optional<double> constant_scalar(const ir::Value* v);

// True if every element of `t` equals `value` (floats compared as doubles, -0.0 == 0.0).
bool all_equal(const eval::Tensor& t, int64_t value);

// `v` broadcasts into `x`'s shape (numpy-style, aligned from the right) without changing it:
// both ranks known, v's no larger, and each of v's dims 1 or the same as x's (equal sizes or the
// same symbol), by facts.
bool broadcasts_into(const ir::Value* v, const ir::Value* x);
// `v`'s size along `axis` (negative counts from the back) by its fact; nullopt when the rank or
// the dim is unknown or symbolic.
std::optional<int64_t> known_dim(const ir::Value* v, int64_t axis);

// Exactly one node reads `v` and it is not a graph output: a rewrite may change or absorb it.
bool single_use(const ir::Value* v);
// The live producer of `v` if it is op `op` of the ONNX domain in the same graph as `v`'s
// readers can see, else nullptr.
ir::Node* producer(const ir::Value* v, std::string_view op);
// The producer of `v` if it is op `op` at the same opset as `n`, with one output, in n's graph:
// the inner node of a chain n(op(x)) that folds into one node.
ir::Node* chain_producer(const ir::Value* v, std::string_view op, const ir::Node& n);
// The producer of `v` if it is op `op` with one output in `root`'s graph and `v` is read by that
// one reader only (single_use): an inner node of a pattern rooted at `root`, which a rewrite
// replacing the pattern absorbs.
ir::Node* absorbed_producer(const ir::Value* v, std::string_view op, const ir::Node& root);
// The value `v` forwards unchanged: `v` itself, or the input of the Identity nodes that compute
// it (at most `depth` of them, in any graph): a body's condition output Identity(c).
const ir::Value* through_identities(const ir::Value* v, int depth = 16);
// The only node reading `v` (nullptr unless single_use).
ir::Node* only_reader(const ir::Value* v);
// Every reader of `v` is one of `readers` (a node may read it through several inputs) and `v` is
// not a graph output: a fused pattern that replaces all of `readers` may absorb `v`, which has
// several readers inside the pattern (e.g. x - mean, read by both the variance and the quotient
// of a layer normalization).
bool only_read_by(const ir::Value* v, std::initializer_list<const ir::Node*> readers);
// The graph output `v` is a view of (the same values moved: Transpose, Reshape, Squeeze...; see
// ir::moves_values), through at least one such op and at most `depth`, or nullptr: a decoder's
// key cache read transposed by attention is a view of the `present` output.
const ir::Value* viewed_graph_output(const ir::Value* v, int depth = 8);
// The graph output that `v`'s values reach unchanged, or nullptr: `v` itself, or one computed
// from it by ops that move values (ir::moves_values), Splits and Concats that hold it, at most
// `depth` of them along the way (and 64 nodes looked at): a decoder's new keys, split from a
// fused projection, reshaped into heads and appended to the cache, reach the `present` output.
const ir::Value* returned_as_graph_output(const ir::Value* v, int depth = 8);

// True if every attribute of `n` is named in `known`. An attribute outside it may change the
// meaning of the node (or come from an op version the pass does not reason about).
bool only_attributes(const ir::Node& n, std::initializer_list<std::string_view> known);
// An INTS attribute named `name` holding `values`, for rewrites that set one.
onnx::AttributeProto ints_attr(std::string_view name, const std::vector<int64_t>& values);
// An INT attribute named `name` holding `value`.
onnx::AttributeProto int_attr(std::string_view name, int64_t value);
// A FLOAT attribute named `name` holding `value` (rounded to float).
onnx::AttributeProto float_attr(std::string_view name, double value);
// A STRING attribute named `name` holding `value`.
onnx::AttributeProto string_attr(std::string_view name, std::string_view value);

// Ops whose result may differ between two runs on the same inputs: the random generators, and
// Dropout unless it runs in inference mode (is_test=1 before opset 7, always in 7-11, and a
// training_mode input that is absent or a constant false from 12).
bool is_nondeterministic(const ir::Node& n);

using eval::is_float_type;    // FLOAT, DOUBLE, FLOAT16, BFLOAT16
using eval::is_integer_type;  // signed and unsigned integers (not bool)
// FLOAT, DOUBLE, FLOAT16: the types weights are rewritten in (ir::make_float_tensor).
bool is_ieee_float(int32_t dtype);

}  // namespace graft
