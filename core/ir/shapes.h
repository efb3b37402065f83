// Shape and type facts: what is known of every tensor value in every graph (main graph, If/Loop/
// Scan bodies, model-local function bodies) — its element type, its rank and each dim, where a
// dim is a known integer, a named symbol (ONNX dim_param: the same name is the same size
// wherever it appears) or unknown.
//
// Sources, combined per value (Value::fact()):
//  - sources: graph input declarations (the model's interface) and initializer tensors. The
//    declarations of node outputs (value_info, graph output types) are the exporter's claims
//    and are not used: whatever they say beyond the rules and libonnx's inference is what
//    nobody checked (a batch size fixed at export, the size of a data-dependent output);
//  - ONNX shape inference (libonnx) over the main graph and, through If, its branches — run
//    on a data-less copy the first time Graft's rules leave a fact incomplete and not exact
//    (fact_exact below: so never on a model the rules cover, symbolic dims or not), and again
//    after Model::refresh_shape_inference(). Loop and Scan bodies are not taken from it: a
//    loop-carried value may change shape between iterations, which its inference ignores;
//  - Graft's own rules (shape_rules.h): element type and shape of the common ops from their
//    inputs' facts and constant operands, in every graph and for opsets newer than libonnx
//    knows.
// Where the two inference sources disagree, the fact is left unknown.
//
// Facts stay correct across rewrites. A fact describes the tensor a value computes, and a
// semantics-preserving rewrite never changes what a surviving value computes, with one
// exception: editing a node in place (its inputs, attributes) or an initializer's tensor gives
// its outputs a new meaning, so those edits drop the outputs' facts (graph.cc). New values get
// facts from the rules the first time they are asked; an incomplete fact is recomputed once the
// model's generation changed (more may be known now).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

namespace graft::ir {

struct Dim {
  int64_t value = -1;  // >= 0 when known
  std::string symbol;  // ONNX dim_param, when the size is unknown but named
  // An unknown size Graft named itself: the size of one dim of one value (where the fact engine
  // first met it unknown), so that every value sharing it (copied through MatMul, Reshape's 0,
  // Transpose, elementwise ops...) is known to have the same size there, as values sharing a
  // dim_param are. Never written into a model (to_type) and never equal to a dim_param, whatever
  // its spelling.
  bool anonymous = false;

  static Dim of(int64_t v) { return Dim{v, {}}; }
  static Dim named(std::string s) { return Dim{-1, std::move(s)}; }
  static Dim anon(std::string key) { return Dim{-1, std::move(key), true}; }
  bool known() const { return value >= 0; }
  bool is_symbol() const { return value < 0 && !symbol.empty(); }
  // A dim_param from the model (or libonnx), not an anonymous one.
  bool is_named() const { return is_symbol() && !anonymous; }
  // Same size for sure: equal known values or the same symbol.
  bool same_as(const Dim& o) const {
    return known() ? o.value == value
                   : (is_symbol() && o.symbol == symbol && o.anonymous == anonymous);
  }
  bool operator==(const Dim&) const = default;
};

struct TensorFact {
  int32_t elem_type = 0;  // TensorProto::DataType, 0 when unknown
  bool has_rank = false;  // whether `dims` is meaningful
  std::vector<Dim> dims;

  static TensorFact of_rank(int32_t elem_type, std::vector<Dim> dims) {
    return TensorFact{elem_type, true, std::move(dims)};
  }
  // The fact an ONNX type describes (a non-tensor type describes nothing).
  static TensorFact from_type(const onnx::TypeProto& type);

  std::optional<int64_t> rank() const {
    return has_rank ? std::optional<int64_t>(static_cast<int64_t>(dims.size())) : std::nullopt;
  }
  // The known size of `axis` (negative counts from the end), nullopt otherwise.
  std::optional<int64_t> dim(int64_t axis) const;
  // Every dim known.
  std::optional<std::vector<int64_t>> static_shape() const;
  // Dims with -1 for unknown and symbolic ones; nullopt if the rank is unknown.
  std::optional<std::vector<int64_t>> dims_or_minus_one() const;
  std::optional<int64_t> element_count() const;
  // Nothing more can be learnt: element type and every dim known.
  bool complete() const;
  // Writes the fact as a tensor type (dims that are unknown are left without value or name).
  void to_type(onnx::TypeProto* type) const;
  std::string to_string() const;  // e.g. "float[batch,3,?]", "?[?]" / "float[*]" if rank unknown
  bool operator==(const TensorFact&) const = default;
};

// Combines two facts about the same value from independent sources: what one knows fills the
// other's unknowns. A disagreement (element type, rank, or two known dims) leaves that part
// unknown and sets *conflict.
TensorFact merge_facts(const TensorFact& a, const TensorFact& b, bool* conflict = nullptr);

// The fact a type from libonnx's inference describes: dims it named itself ("unk__N") are
// unknowns, not symbols shared with the model's own.
TensorFact inferred_fact(const onnx::TypeProto& type);

// Removes from `g` and its subgraphs what facts do not use: value_info, and the shapes declared
// for graph outputs (element types stay). libonnx's inference runs on what is left, so what it
// knows comes from graph inputs, constants and operators only.
void strip_declarations(onnx::GraphProto* g);

// Whether libonnx knows the model's IR version and every standard opset it imports: its shape
// inference (and checker) would apply old operator semantics to a newer model.
class Model;
bool libonnx_knows(const Model& model);

// True if the model declares (or holds as an initializer) a 1-D integer tensor longer than 1024:
// libonnx's inference would make an output rank of that length (ConstantOfShape, Expand, Reshape
// of unknown values), so it is not run on such models.
bool has_huge_shape_tensor(const Model& model);

// True if model-local functions call each other in a cycle, or in chains deeper than 64 calls:
// libonnx's inference (and checker) expands calls recursively without a bound, so such a model
// would exhaust the stack. ONNX forbids recursion; a hostile model may have it anyway. Neither is
// run on such models.
bool has_deep_function_calls(const Model& model);

// Writes what the facts add into the value_info entries the model already has (an element type
// or dims they leave unknown), never creating an entry or changing a known part, so a model that
// had none keeps none and a round trip without rewrites is unchanged. Entries whose fact
// contradicts them are left as they are. Returns the number of entries refined.
int refine_value_info(Model& model);

// Value::fact()'s implementation.
class Value;
const TensorFact& fact_of(const Value& v);

// Whether libonnx's inference could not tell more about `v` than fact_of(v): every rule on the
// way from the graph's sources (inputs, initializers, constants) told all it could, so unknown
// dims come from unknown or symbolic source dims. libonnx's inference runs only when a fact is
// incomplete and not exact. Computes the fact if needed.
bool fact_exact(const Value& v);

}  // namespace graft::ir
