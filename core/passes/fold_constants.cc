// A node whose inputs are all constants is computed once, here, with the reference evaluator,
// and its outputs become initializers. Exported models carry long chains of such nodes (shape
// arithmetic, weight preprocessing) that otherwise run on every inference.
//
// Deliberately not folded: DequantizeLinear (a quantized weight is stored that way on purpose:
// folding would give the float weight back, and runtimes fuse the pair into integer kernels),
// nondeterministic ops, nodes with subgraphs, ops the evaluator cannot
// run at the node's opset, results above `max_bytes`, and results much larger than their inputs
// (ConstantOfShape/Expand/Tile/Range would trade a tiny computation for a bloated model file).
// A node whose result alone is too large is judged together with the nodes that folding it
// makes constant (its cone, fold_cone): by what the cone leaves in the model, which may be
// 64 KiB per node the cone removes, since each of them would otherwise run on every inference.
// Function bodies cannot hold initializers, and IR < 4 models would gain graph inputs.
#include <limits>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include <absl/strings/str_cat.h>

#include "core/eval/kernel.h"
#include "core/eval/tensor.h"
#include "core/ir/external_data.h"
#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/queries.h"
#include "core/passes/rewriter.h"

namespace graft {

namespace {

// Results under this size (kSmallConstantBytes, queries.h) are always worth folding, whatever
// their growth: a shape vector, a mask or a detector's anchor grid costs little in the file and
// nothing at run time, where the nodes computing it would run on every inference. ONNX Runtime
// folds every constant subgraph; the pipeline's weight cap bounds what many such folds can add
// together.
constexpr uint64_t kAlwaysFoldBytes = kSmallConstantBytes;

// The most nodes fold_cone folds at once (it evaluates them all before deciding).
constexpr size_t kMaxConeNodes = 256;

constexpr char kMaxBytes[] = "max_bytes";
constexpr char kMaxGrowth[] = "max_growth";
// A folded result becomes an initializer of a model that protobuf must serialize in one
// message, which cannot exceed 2 GiB.
constexpr int64_t kMaxFoldBytes = int64_t{1} << 31;

// Approximate in-file size of a tensor: element bytes (4-bit ones packed), or string lengths
// plus a small overhead.
uint64_t tensor_bytes(const eval::Tensor& t) {
  if (ir::is_4bit(t.dtype())) return *ir::payload_size(t.dtype(), t.size());
  if (t.dtype() != onnx::TensorProto::STRING) return t.bytes();
  uint64_t total = 0;
  for (const auto& s : t.strings()) total += s.size() + 2;
  return total;
}

class FoldConstants final : public Pass {
 public:
  std::string_view name() const override { return "fold_constants"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override {
    limits_.max_tensor_bytes = static_cast<uint64_t>(ctx.int_option(kMaxBytes));
    max_growth_ = static_cast<uint64_t>(ctx.int_option(kMaxGrowth));

    PassResult result;
    if (!model.allows_new_initializers()) return result;
    max_weight_bytes_ = ctx.max_weight_bytes;
    weight_bytes_ = model.initializer_bytes();
    Rewriter rw(model);
    rw_ = &rw;
    // Parents before their subgraphs, so values captured from outer graphs are already folded.
    std::vector<ir::Graph*> graphs{&model.graph()};
    for (size_t i = 0; i < graphs.size(); ++i) {
      ir::Graph* g = graphs[i];
      for (ir::Node* n : g->nodes()) {
        if (n->dead()) continue;
        for (const auto& sub : n->subgraphs()) graphs.push_back(sub.graph.get());
        for (size_t folded = fold(n); folded > 0; --folded) result.add();
      }
    }
    rw_ = nullptr;
    return result;
  }

 private:
  bool foldable(const ir::Node& n) const {
    if (!n.is_onnx_domain() || !n.subgraphs().empty() || is_nondeterministic(n) ||
        n.op_type() == "DequantizeLinear")
      return false;
    for (ir::Value* v : n.inputs())
      if (v && !v->is_constant()) return false;
    // A node whose results nobody reads is prune's business; computing it would be wasted work.
    bool used = false;
    for (ir::Value* out : n.outputs()) used = used || (out && out->use_count() > 0);
    return used;
  }

  // The size rule: `n`'s results (`out` bytes) are too large to fold against the `in` bytes
  // folding frees. A Constant's result is its own attribute, so folding it never adds bytes.
  bool grows(const ir::Node& n, uint64_t out, uint64_t in) const {
    return !n.is("Constant") && out >= kAlwaysFoldBytes &&
           static_cast<unsigned __int128>(out) > static_cast<unsigned __int128>(max_growth_) * in;
  }

  // Whether folding `n` would be refused for its size (grows, or a result above max_bytes),
  // judged before evaluating it from its outputs' shape facts (unknown: no). A reader that will
  // not fold keeps a shared input alive, so the other readers folding it would duplicate it
  // rather than replace it (a weight sliced by one reader and tiled far larger by another).
  bool refused_for_size(const ir::Node& n) const {
    uint64_t out = 0, in = 0;
    for (const ir::Value* o : n.outputs()) {
      if (!o || o->use_count() == 0) continue;
      const auto shape = o->static_shape();
      const auto count = shape ? ir::element_count(*shape) : std::nullopt;
      const auto bytes = count ? ir::payload_size(o->elem_type(), *count) : std::nullopt;
      if (!bytes) return false;
      if (*bytes > limits_.max_tensor_bytes) return true;
      out += *bytes;
    }
    for (const ir::Value* v : n.inputs())
      if (v && v->initializer()) in += ir::payload_bytes(*v->initializer()).value_or(0);
    return grows(n, out, in);
  }

  // Evaluates `n` and replaces it by initializers, or with the nodes its results make constant
  // (fold_cone); the number of nodes folded, 0 (model untouched) if it should stay.
  size_t fold(ir::Node* n) {
    if (!foldable(*n)) return 0;
    // A Constant holding external data already is a constant, and reading it would only bring
    // its bytes into memory (extract_constants moves it, reference and all).
    if (n->is("Constant"))
      for (const auto& a : n->attributes())
        if (a.has_t() && ir::is_external(a.t())) return 0;

    auto computed = evaluate(*n);
    if (!computed) return 0;
    uint64_t output_bytes = 0;
    for (size_t i = 0; i < n->outputs().size(); ++i)
      if (n->output(i)) output_bytes += tensor_bytes((*computed)[i]);
    // Growth is measured against the input bytes folding frees. An input only this node reads
    // is freed whole. One that every reader can fold (e.g. a weight split into slices) goes
    // once all of them are folded, so each reader is credited an equal share of it: folding all
    // of them adds at most max_growth times the input. An input some runtime node also reads
    // (a slice of a weight that a Gather still uses), or a constant reader whose fold will be
    // refused for its size (refused_for_size), stays, so nothing is credited: folding would
    // duplicate it.
    uint64_t freed_bytes = 0;
    std::unordered_set<const ir::Value*> counted;
    for (ir::Value* v : n->inputs()) {
      if (!v || !counted.insert(v).second || v->is_graph_output()) continue;
      std::unordered_set<const ir::Node*> readers;
      bool all_fold = true;
      for (const ir::Use& u : v->uses()) {
        if (!readers.insert(u.node).second) continue;
        all_fold = all_fold && (u.node == n || (foldable(*u.node) && !refused_for_size(*u.node)));
      }
      if (all_fold && !readers.empty())
        freed_bytes += ir::payload_bytes(*v->initializer()).value_or(0) / readers.size();
    }
    if (grows(*n, output_bytes, freed_bytes)) return fold_cone(n, std::move(*computed));
    if (!within_weight_cap(*n, output_bytes)) return 0;
    if (!replace(n, std::move(*computed))) return 0;
    weight_bytes_ += output_bytes;
    return 1;
  }

  // Inputs are read under the same cap: a crafted initializer must not make us allocate more.
  // Any kernel error (unsupported op or attribute, invalid or missing input, over a limit) means
  // "keep the node" (nullopt), as does a result above max_bytes.
  std::optional<std::vector<eval::Tensor>> evaluate(const ir::Node& n) {
    std::vector<eval::Tensor> storage;
    storage.reserve(n.inputs().size());
    for (ir::Value* v : n.inputs()) {
      if (!v) continue;
      // An external input is read (after the size check) for this fold and released with it.
      auto t = eval::Tensor::from_proto(*v->initializer(), limits_.max_tensor_bytes,
                                        ir::external_data_of(v));
      if (!t.ok()) return std::nullopt;  // unreadable external data, segments, malformed, large
      storage.push_back(std::move(*t));
    }
    std::vector<const eval::Tensor*> inputs;
    size_t next = 0;
    for (ir::Value* v : n.inputs()) inputs.push_back(v ? &storage[next++] : nullptr);
    auto computed = eval::run_kernel(n, std::move(inputs), limits_);
    if (!computed.ok()) return std::nullopt;
    for (size_t i = 0; i < n.outputs().size(); ++i) {
      if (!n.output(i)) continue;
      const eval::Tensor& t = (*computed)[i];
      if (t.dtype() == 0) return std::nullopt;  // the kernel did not produce this output
      if (tensor_bytes(t) > limits_.max_tensor_bytes) return std::nullopt;
    }
    return std::move(*computed);
  }

  // Inputs freed here may still be held until pruning, so only the additions are counted.
  bool within_weight_cap(const ir::Node& n, uint64_t added_bytes) const {
    return !max_weight_bytes_ || n.is("Constant") ||
           added_bytes <= max_weight_bytes_ - std::min(weight_bytes_, max_weight_bytes_);
  }

  // `n`'s outputs become initializers holding `computed`.
  bool replace(ir::Node* n, std::vector<eval::Tensor> computed) {
    std::vector<onnx::TensorProto> results;
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      ir::Value* out = n->output(i);
      results.push_back(out ? computed[i].to_proto(out->name()) : onnx::TensorProto());
    }
    // The outputs keep their names: consumers, nested subgraphs and graph outputs refer to them.
    return rw_->replace_with_constants(n, std::move(results));
  }

  // The constant cone of `n`: `n` and the nodes of its graph that folding it makes foldable,
  // transitively, in topological order (a node joins once every input is a constant or a
  // result of the cone). Empty when it would pass kMaxConeNodes.
  std::vector<ir::Node*> constant_cone(ir::Node* n) const {
    std::vector<ir::Node*> cone{n};
    std::unordered_set<const ir::Node*> in_cone{n};
    std::unordered_set<const ir::Value*> results;
    for (size_t i = 0; i < cone.size(); ++i) {
      for (ir::Value* out : cone[i]->outputs())
        if (out) results.insert(out);
      for (ir::Value* out : cone[i]->outputs()) {
        if (!out) continue;
        for (const ir::Use& u : out->uses()) {
          ir::Node* r = u.node;
          if (in_cone.count(r) || r->graph() != n->graph() || !r->is_onnx_domain() ||
              !r->subgraphs().empty() || is_nondeterministic(*r) || r->is("DequantizeLinear"))
            continue;
          bool ready = true, used = false;
          for (const ir::Value* v : r->inputs())
            ready = ready && (!v || v->is_constant() || results.count(v));
          for (const ir::Value* o : r->outputs()) used = used || (o && o->use_count() > 0);
          if (!ready || !used) continue;  // a node with another input in the cone comes back
          if (cone.size() == kMaxConeNodes) return {};
          in_cone.insert(r);
          cone.push_back(r);
        }
      }
    }
    return cone;
  }

  // Folds `n`, whose result alone grows too much (`computed`), together with its constant cone
  // when what the cone leaves in the model (the results read outside it) is within the growth
  // cap against the constants only the cone reads, or below kAlwaysFoldBytes per node folded: a
  // chain that broadcasts small constants into a larger grid and then computes on it
  // elementwise (the sampling coordinates of an optical-flow network's first step), or a
  // convolution of a constant whose weights a runtime node shares, followed by a smaller one.
  // Each node of the cone would otherwise run on every inference. All or nothing: the number
  // of nodes folded, or 0 with the model untouched.
  size_t fold_cone(ir::Node* n, std::vector<eval::Tensor> computed) {
    const std::vector<ir::Node*> cone = constant_cone(n);
    if (cone.size() < 2) return 0;
    const std::unordered_set<const ir::Node*> in_cone(cone.begin(), cone.end());
    // The results that stay: read by a node outside the cone (or in a subgraph), or an output.
    std::unordered_set<const ir::Value*> kept;
    uint64_t freed_bytes = 0;
    std::unordered_set<const ir::Value*> inputs;
    for (const ir::Node* c : cone) {
      for (const ir::Value* out : c->outputs()) {
        if (!out) continue;
        bool outside = out->is_graph_output();
        for (const ir::Use& u : out->uses()) outside = outside || !in_cone.count(u.node);
        if (outside) kept.insert(out);
      }
      for (const ir::Value* v : c->inputs()) {
        if (!v || !v->is_constant() || !inputs.insert(v).second || v->is_graph_output()) continue;
        bool only_cone = true;
        for (const ir::Use& u : v->uses()) only_cone = only_cone && in_cone.count(u.node);
        if (only_cone) freed_bytes += ir::payload_bytes(*v->initializer()).value_or(0);
      }
    }
    auto too_large = [&](uint64_t kept_bytes) {
      const auto per_node = static_cast<unsigned __int128>(cone.size()) * kAlwaysFoldBytes;
      return (kept_bytes >= per_node && grows(*n, kept_bytes, freed_bytes)) ||
             !within_weight_cap(*n, kept_bytes);
    };
    // Judged on the facts first, so a cone that will not fold is not computed.
    uint64_t expected = 0;
    for (const ir::Value* v : kept) {
      const auto shape = v->static_shape();
      const auto count = shape ? ir::element_count(*shape) : std::nullopt;
      const auto bytes = count ? ir::payload_size(v->elem_type(), *count) : std::nullopt;
      if (!bytes) {
        expected = 0;
        break;
      }
      expected += *bytes;
    }
    if (expected > 0 && too_large(expected)) return 0;

    Rewriter::Transaction transaction(*rw_);
    uint64_t kept_bytes = 0;
    auto add_kept = [&](const ir::Node& c, const std::vector<eval::Tensor>& results) {
      for (size_t i = 0; i < c.outputs().size(); ++i)
        if (kept.count(c.output(i))) kept_bytes += tensor_bytes(results[i]);
    };
    add_kept(*n, computed);
    if (!replace(n, std::move(computed))) return 0;
    for (size_t i = 1; i < cone.size(); ++i) {
      ir::Node* c = cone[i];
      auto results = evaluate(*c);
      if (!results) return 0;
      add_kept(*c, *results);
      if (!replace(c, std::move(*results))) return 0;
    }
    if (too_large(kept_bytes)) return 0;
    transaction.commit();
    weight_bytes_ += kept_bytes;
    return cone.size();
  }

  eval::Limits limits_;
  uint64_t max_growth_ = 4;
  uint64_t max_weight_bytes_ = 0;
  uint64_t weight_bytes_ = 0;
  Rewriter* rw_ = nullptr;
};

}  // namespace

PassInfo fold_constants_pass() {
  return describe<FoldConstants>(
      {.name = "fold_constants",
       .level = 1,
       .description =
           "nodes whose inputs are all constants become initializers holding their results "
           "(deterministic ops the reference evaluator supports)",
       .options = {
           evaluator_bytes_option(kMaxBytes, 16ll << 20, kMaxFoldBytes,
                                  "largest folded result in bytes"),
           integer_option(kMaxGrowth, 4, 0, std::numeric_limits<int64_t>::max(),
                          "never fold when the result is more than this many times larger than "
                          "the constant inputs folding frees (an input only foldable nodes read "
                          "counts as an equal share for each; results under 64 KiB always "
                          "fold; a node with a larger result folds with the nodes it makes "
                          "constant when their results read elsewhere are within the cap or "
                          "under 64 KiB per node folded)"),
       }});
}

}  // namespace graft
