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

#include "core/ir/tensor.h"
#include "core/passes/passes.h"

namespace graft {

namespace {

using onnx::AttributeProto;

void mix(size_t& seed, size_t h) { seed ^= h + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2); }

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
  mix(h, size);
  if (size <= kSerializeHashLimit) {
    mix(h, std::hash<std::string>()(a.SerializeAsString()));
    return h;
  }
  mix(h, static_cast<size_t>(a.type()));
  mix(h, hash_bytes(a.ints().data(), a.ints_size()));
  mix(h, hash_bytes(a.floats().data(), a.floats_size()));
  if (a.has_t()) {
    const onnx::TensorProto& t = a.t();
    mix(h, static_cast<size_t>(t.data_type()));
    mix(h, hash_bytes(t.dims().data(), t.dims_size()));
    mix(h, std::hash<std::string_view>()(t.raw_data()));
    mix(h, hash_bytes(t.float_data().data(), t.float_data_size()));
    mix(h, hash_bytes(t.int64_data().data(), t.int64_data_size()));
    mix(h, hash_bytes(t.int32_data().data(), t.int32_data_size()));
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
  for (const ir::Value* v : n.inputs()) mix(h, std::hash<const ir::Value*>()(v));
  mix(h, n.outputs().size());
  for (const ir::Value* v : n.outputs()) mix(h, v != nullptr);
  // A sum does not depend on the order the attributes are listed in.
  size_t attrs = 0;
  for (const auto& a : n.attributes()) attrs += attribute_hash(a);
  mix(h, attrs);
  return h;
}

// True if a Dropout node may drop values: its result is random unless it runs in inference
// mode, which is is_test=1 before opset 7, implicit in opsets 7-11, and a training_mode input
// that is absent or a constant false from opset 12.
bool dropout_may_be_random(const ir::Node& n) {
  if (n.opset() < 7) return n.attr_int("is_test", 0) == 0;
  const ir::Value* mode = n.input(2);
  if (!mode) return false;
  if (!mode->is_constant() || ir::is_external(*mode->initializer())) return true;
  auto values = ir::read_int64s(*mode->initializer());
  if (!values || values->empty()) return true;
  return std::any_of(values->begin(), values->end(), [](int64_t v) { return v != 0; });
}

bool is_nondeterministic(const ir::Node& n) {
  static constexpr std::string_view kRandomOps[] = {"RandomNormal",     "RandomUniform",
                                                    "RandomNormalLike", "RandomUniformLike",
                                                    "Multinomial",      "Bernoulli"};
  for (std::string_view op : kRandomOps)
    if (n.op_type() == op) return true;
  return n.op_type() == "Dropout" && dropout_may_be_random(n);
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

class Cse final : public Pass {
 public:
  std::string_view name() const override { return "cse"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    PassResult result;
    for (ir::Graph* g : model.all_graphs()) run_graph(*g, result);
    return result;
  }

 private:
  // A graph output name that must move onto the kept node once the scan is done.
  struct Rename {
    ir::Node* keep;
    int slot;
    ir::Value* name_holder;
  };

  static void run_graph(ir::Graph& g, PassResult& result) {
    std::unordered_map<size_t, std::vector<ir::Node*>> seen;
    // Outputs of kept nodes that will take over a graph output name (at most one each).
    std::unordered_set<const ir::Value*> renamed;
    std::vector<Rename> renames;
    std::vector<ir::Node*> removed_later;

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
      if (!merge_is_safe(*keep, *n, renamed)) continue;
      bool deferred = false;
      for (size_t i = 0; i < n->outputs().size(); ++i) {
        ir::Value* dup = n->output(i);
        if (!dup) continue;
        ir::Value* kept = keep->output(i);
        // Graph outputs keep pointing at `dup` until its name moves onto `keep` below; redirecting
        // the node uses now lets later duplicates of the consumers match in this same scan.
        ir::Graph::replace_all_uses(dup, kept, /*keep_outputs=*/true);
        if (dup->is_graph_output()) {
          renames.push_back({keep, static_cast<int>(i), dup});
          renamed.insert(kept);
          deferred = true;
        }
      }
      if (deferred) {
        removed_later.push_back(n);
      } else {
        g.remove_node(n);
      }
      result.add();
    }

    for (const Rename& r : renames) g.move_output_name(r.keep, r.slot, r.name_holder);
    for (ir::Node* n : removed_later) g.remove_node(n);
  }

  // Both outputs of a slot being graph outputs (or about to be) would need two names for one
  // value.
  static bool merge_is_safe(const ir::Node& keep, const ir::Node& dup,
                            const std::unordered_set<const ir::Value*>& renamed) {
    for (size_t i = 0; i < dup.outputs().size(); ++i) {
      const ir::Value* d = dup.output(i);
      const ir::Value* k = keep.output(i);
      if (d && d->is_graph_output() && (k->is_graph_output() || renamed.count(k))) return false;
    }
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_cse() { return std::make_unique<Cse>(); }

PassInfo cse_pass() {
  return {.name = "cse",
          .level = 1,
          .description =
              "merge nodes computing the same op on the same inputs (deterministic ops only)",
          .options = {},
          .create = make_cse};
}

}  // namespace graft
