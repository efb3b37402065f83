// Common subexpression elimination: nodes computing the same deterministic op with the same
// attributes on the same input values are merged into the first of them. Nodes are visited in
// topological order with one hash table per graph (as TensorFlow's OptimizeCSE does), so a
// chain of duplicates collapses in a single run: once two producers are merged, their
// consumers see identical inputs.
//
// Deliberately left alone:
//  - ops outside the default ONNX domain (custom ops may have side effects) and ops the ONNX
//    schema registry does not know at the node's opset (a newer opset may add random ops);
//  - nondeterministic ops (Random*, Multinomial, Bernoulli, training-mode Dropout);
//  - nodes holding subgraphs (If/Loop/Scan): equal bodies would need a structural comparison
//    modulo inner value names, which is not worth its risk here;
//  - a duplicate whose output and the kept node's output are both graph outputs: both names
//    are interface, and keeping one of them would need an extra Identity node.
#include <algorithm>
#include <cstring>
#include <functional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <onnx/defs/schema.h>

#include "core/ir/hash.h"
#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/queries.h"
#include "core/passes/rewriter.h"

namespace graft {

namespace {

using onnx::AttributeProto;

template <typename T>
size_t hash_bytes(const T* data, size_t count) {
  if (count == 0) return 0;
  return std::hash<std::string_view>()(
      std::string_view(reinterpret_cast<const char*>(data), count * sizeof(T)));
}

// Attributes up to this size are hashed through their serialization (a small copy); larger ones
// (Constant tensors) are hashed from a few fields read in place, so their bytes are not copied.
constexpr size_t kSerializeHashLimit = 4096;

size_t attribute_hash(const AttributeProto& a) {
  size_t size = a.ByteSizeLong();
  size_t h = std::hash<std::string_view>()(a.name());
  ir::hash_mix(h, size);
  if (size <= kSerializeHashLimit) {
    ir::hash_mix(h, std::hash<std::string>()(a.SerializeAsString()));
    return h;
  }
  ir::hash_mix(h, static_cast<size_t>(a.type()));
  ir::hash_mix(h, hash_bytes(a.ints().data(), a.ints_size()));
  ir::hash_mix(h, hash_bytes(a.floats().data(), a.floats_size()));
  if (a.has_t()) {
    const onnx::TensorProto& t = a.t();
    ir::hash_mix(h, static_cast<size_t>(t.data_type()));
    ir::hash_mix(h, hash_bytes(t.dims().data(), t.dims_size()));
    ir::hash_mix(h, std::hash<std::string_view>()(t.raw_data()));
    ir::hash_mix(h, hash_bytes(t.float_data().data(), t.float_data_size()));
    ir::hash_mix(h, hash_bytes(t.int64_data().data(), t.int64_data_size()));
    ir::hash_mix(h, hash_bytes(t.int32_data().data(), t.int32_data_size()));
  }
  return h;
}

// Attributes sorted by name, or empty with `ok` false when a name repeats (a malformed node
// we do not try to interpret).
std::vector<const AttributeProto*> sorted_attributes(const ir::Node& n, bool& ok) {
  std::vector<const AttributeProto*> out;
  out.reserve(n.attributes().size());
  for (const auto& a : n.attributes()) out.push_back(&a);
  std::sort(out.begin(), out.end(),
            [](const AttributeProto* x, const AttributeProto* y) { return x->name() < y->name(); });
  ok = std::adjacent_find(out.begin(), out.end(), [](const auto* x, const auto* y) {
         return x->name() == y->name();
       }) == out.end();
  return out;
}

// Exact comparison: equal serializations (bitwise for floats, so 0.0 and -0.0 differ).
bool attributes_equal(const ir::Node& a, const ir::Node& b) {
  if (a.attributes().size() != b.attributes().size()) return false;
  bool ok_a = false, ok_b = false;
  auto xs = sorted_attributes(a, ok_a);
  auto ys = sorted_attributes(b, ok_b);
  if (!ok_a || !ok_b) return false;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i]->name() != ys[i]->name() || xs[i]->ByteSizeLong() != ys[i]->ByteSizeLong())
      return false;
  }
  for (size_t i = 0; i < xs.size(); ++i)
    if (xs[i]->SerializeAsString() != ys[i]->SerializeAsString()) return false;
  return true;
}

bool same_output_slots(const ir::Node& a, const ir::Node& b) {
  if (a.outputs().size() != b.outputs().size()) return false;
  for (size_t i = 0; i < a.outputs().size(); ++i)
    if ((a.output(i) == nullptr) != (b.output(i) == nullptr)) return false;
  return true;
}

bool equivalent(const ir::Node& a, const ir::Node& b) {
  return a.op_type() == b.op_type() && a.inputs() == b.inputs() && same_output_slots(a, b) &&
         attributes_equal(a, b);
}

size_t node_hash(const ir::Node& n) {
  size_t h = std::hash<std::string>()(n.op_type());
  for (const ir::Value* v : n.inputs()) ir::hash_mix(h, std::hash<const ir::Value*>()(v));
  ir::hash_mix(h, n.outputs().size());
  for (const ir::Value* v : n.outputs()) ir::hash_mix(h, v != nullptr);
  // A sum does not depend on the order the attributes are listed in.
  size_t attrs = 0;
  for (const auto& a : n.attributes()) attrs += attribute_hash(a);
  ir::hash_mix(h, attrs);
  return h;
}

bool can_merge(const ir::Node& n) {
  if (!n.is_onnx_domain() || !n.subgraphs().empty() || n.outputs().empty()) return false;
  if (std::none_of(n.outputs().begin(), n.outputs().end(),
                   [](const ir::Value* v) { return v != nullptr; }))
    return false;
  int64_t opset = n.opset();
  if (opset <= 0 || !onnx::OpSchemaRegistry::Schema(n.op_type(), static_cast<int>(opset), ""))
    return false;
  return !is_nondeterministic(n);
}

class Cse final : public PerGraphPass {
 public:
  std::string_view name() const override { return "cse"; }

 private:
  absl::Status run_graph(ir::Graph& g, Rewriter& rw, PassContext&, PassResult& result) override {
    std::unordered_map<size_t, std::vector<ir::Node*>> seen;
    for (ir::Node* n : g.nodes()) {
      if (n->dead() || !can_merge(*n)) continue;
      auto& bucket = seen[node_hash(*n)];
      ir::Node* keep = nullptr;
      for (ir::Node* c : bucket) {
        if (equivalent(*c, *n)) {
          keep = c;
          break;
        }
      }
      if (!keep) {
        bucket.push_back(n);
        continue;
      }
      // A graph output name of the duplicate moves onto the kept node; when that output of the
      // kept node is itself a graph output, one value would need two names, and both stay.
      const std::vector<ir::Value*> kept(keep->outputs().begin(), keep->outputs().end());
      if (rw.replace_node(n, kept, /*allow_identity=*/false)) result.add();
    }
    return absl::OkStatus();
  }
};

}  // namespace

PassInfo cse_pass() {
  return describe<Cse>(
      {.name = "cse",
       .level = 1,
       .description =
           "merge nodes computing the same op on the same inputs (deterministic ops only)",
       .options = {}});
}

}  // namespace graft
