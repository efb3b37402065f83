// A node whose inputs are all constants is computed once, here, with the reference evaluator,
// and its outputs become initializers. Exported models carry long chains of such nodes (shape
// arithmetic, weight preprocessing) that otherwise run on every inference.
//
// Deliberately not folded: DequantizeLinear (a quantized weight is stored that way on purpose:
// folding would give the float weight back, and runtimes fuse the pair into integer kernels),
// nondeterministic ops, nodes with subgraphs, ops the evaluator cannot
// run at the node's opset, results above `max_bytes`, and results much larger than their inputs
// (ConstantOfShape/Expand/Tile/Range would trade a tiny computation for a bloated model file).
// Function bodies cannot hold initializers, and IR < 4 models would gain graph inputs.
#include <limits>
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
        if (fold(n)) result.add();
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

  // Evaluates `n` and replaces it by initializers; false (model untouched) if it should stay.
  bool fold(ir::Node* n) {
    if (!foldable(*n)) return false;
    // A Constant holding external data already is a constant, and reading it would only bring
    // its bytes into memory (extract_constants moves it, reference and all).
    if (n->is("Constant"))
      for (const auto& a : n->attributes())
        if (a.has_t() && ir::is_external(a.t())) return false;

    // Inputs are read under the same cap: a crafted initializer must not make us allocate more.
    std::vector<eval::Tensor> storage;
    storage.reserve(n->inputs().size());
    std::unordered_set<const ir::Value*> counted;
    for (ir::Value* v : n->inputs()) {
      if (!v) continue;
      // An external input is read (after the size check) for this fold and released with it.
      auto t = eval::Tensor::from_proto(*v->initializer(), limits_.max_tensor_bytes,
                                        ir::external_data_of(v));
      if (!t.ok()) return false;  // unreadable external data, segments, malformed or too large
      storage.push_back(std::move(*t));
    }
    std::vector<const eval::Tensor*> inputs;
    size_t next = 0;
    for (ir::Value* v : n->inputs()) inputs.push_back(v ? &storage[next++] : nullptr);
    // Any kernel error (unsupported op or attribute, invalid or missing input, over a limit)
    // means "keep the node".
    auto computed = eval::run_kernel(*n, std::move(inputs), limits_);
    if (!computed.ok()) return false;

    uint64_t output_bytes = 0;
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      if (!n->output(i)) continue;
      const eval::Tensor& t = (*computed)[i];
      if (t.dtype() == 0) return false;  // the kernel did not produce this output
      if (tensor_bytes(t) > limits_.max_tensor_bytes) return false;
      output_bytes += tensor_bytes(t);
    }
    // Growth is measured against the input bytes folding frees. An input only this node reads
    // is freed whole. One that every reader can fold (e.g. a weight split into slices) goes
    // once all of them are folded, so each reader is credited an equal share of it: folding all
    // of them adds at most max_growth times the input. An input some runtime node also reads
    // (a slice of a weight that a Gather still uses), or a constant reader whose fold will be
    // refused for its size (refused_for_size), stays, so nothing is credited: folding would
    // duplicate it.
    uint64_t freed_bytes = 0;
    counted.clear();
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
    if (grows(*n, output_bytes, freed_bytes)) return false;
    // Inputs freed here may still be held until pruning, so only the additions are counted.
    if (max_weight_bytes_ && !n->is("Constant") &&
        output_bytes > max_weight_bytes_ - std::min(weight_bytes_, max_weight_bytes_))
      return false;
    weight_bytes_ += output_bytes;

    std::vector<onnx::TensorProto> results;
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      ir::Value* out = n->output(i);
      results.push_back(out ? (*computed)[i].to_proto(out->name()) : onnx::TensorProto());
    }
    // The outputs keep their names: consumers, nested subgraphs and graph outputs refer to them.
    return rw_->replace_with_constants(n, std::move(results));
  }

  eval::Limits limits_;
  uint64_t max_growth_ = 4;
  uint64_t max_weight_bytes_ = 0;
  uint64_t weight_bytes_ = 0;
  Rewriter* rw_ = nullptr;
};

}  // namespace

static std::unique_ptr<Pass> make_fold_constants() { return std::make_unique<FoldConstants>(); }

PassInfo fold_constants_pass() {
  return {
      .name = "fold_constants",
      .level = 1,
      .description =
          "nodes whose inputs are all constants become initializers holding their results "
          "(deterministic ops the reference evaluator supports)",
      .options =
          {
              bytes_option(kMaxBytes, 16ll << 20, kMaxFoldBytes, "largest folded result in bytes"),
              integer_option(kMaxGrowth, 4, 0, std::numeric_limits<int64_t>::max(),
                             "never fold when the result is more than this many times larger than "
                             "the constant inputs folding frees (an input only foldable nodes read "
                             "counts as an equal share for each; results under 64 KiB always "
                             "fold)"),
          },
      .create = make_fold_constants};
}

}  // namespace graft
