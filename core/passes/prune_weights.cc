// prune_weights: magnitude pruning of weights (LOSSY on purpose, run only when named). The
// smallest weights by magnitude become exact zeros:
//   - unstructured (pattern=unstructured): the `sparsity` share of each weight's elements, the
//     smallest |w| of the whole weight;
//   - 2:4 (pattern=2:4): in every group of 4 consecutive elements along the reduction axis (a
//     MatMul's K, a Gemm's K, a Conv's input channels x kernel), the 2 smallest: 50% exactly, the
//     pattern sparse tensor cores run (NVIDIA Ampere and later).
// Weights: the constant float32 B of MatMul and Gemm and W of Conv, at least min_weight_elements
// elements. A weight several nodes read is pruned once (the same tensor). What a pruned model
// gains is in its storage and in runtimes with sparse kernels; ONNX Runtime's CPU kernels are
// dense, so on them only the file can shrink, and only when stored sparse (store_sparse). Every
// weight pruned is reported with the sparsity reached (zeros it already had count), and the
// model's error is measured and gated like every lossy pass's (docs/quantization.md).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <unordered_set>
#include <vector>

#include <absl/strings/str_format.h>

#include "core/ir/tensor.h"
#include "core/passes/float32_view.h"
#include "core/passes/passes.h"
#include "core/passes/quantization.h"
#include "core/passes/rewriter.h"

namespace graft {

namespace {

using onnx::TensorProto;

constexpr char kSparsity[] = "sparsity";
constexpr char kPattern[] = "pattern";

struct Config {
  double sparsity = 0.5;
  bool two_four = false;
  WeightFilter filter;
};

// How a weight's elements are laid out: k along the reduction axis per output, n outputs.
struct Layout {
  int64_t k = 0;        // elements along the reduction axis (per output)
  int64_t n = 0;        // outputs
  bool k_major = true;  // element (r, c) at r * n + c (MatMul B [K, N]); else c * k + r
};

class PruneWeights final : public Pass {
 public:
  std::string_view name() const override { return "prune_weights"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override {
    Config cfg;
    cfg.sparsity = std::stod(ctx.enum_option(kSparsity)) / 100.0;
    cfg.two_four = ctx.enum_option(kPattern) == "2:4";
    cfg.filter = weight_filter(ctx);

    PassResult result;
    result.always_explained = true;
    Rewriter rw(model);
    std::unordered_set<const ir::Value*> done;
    for (ir::Graph* g : model.all_graphs())
      for (ir::Node* node : g->nodes()) {
        if (node->dead()) continue;
        std::optional<Layout> layout;
        if (node->is("MatMul") && node->attributes().empty())
          layout = matrix_layout(node->input(1), /*trans=*/false);
        else if (node->is("Gemm"))
          layout = matrix_layout(node->input(1), node->attr_int("transB", 0) != 0);
        else if (node->is("Conv"))
          layout = conv_layout(node->input(1));
        ir::Value* w = node->input(1);
        if (!layout || cfg.filter.skips(*node, node->op_type()) ||
            layout->k * layout->n < cfg.filter.min_elements || done.count(w))
          continue;
        std::string note;
        if (prune(w, *layout, cfg, rw, &note)) {
          done.insert(w);
          result.add();
        }
        if (!note.empty())
          result.explanations.push_back({.rule = done.count(w) ? "pruned" : "kept",
                                         .node = w->name(),
                                         .op = node->op_type(),
                                         .graph = g->parent() ? g->name() : "",
                                         .reason = std::move(note)});
      }
    return result;
  }

 private:
  // A constant float32 [rows, cols] read as [K, N] (transposed when `trans`).
  static std::optional<Layout> matrix_layout(const ir::Value* w, bool trans) {
    const auto* h = w ? constant_header(w) : nullptr;
    if (!h || h->data_type() != TensorProto::FLOAT || h->dims_size() != 2) return std::nullopt;
    if (h->dims(0) <= 0 || h->dims(1) <= 0) return std::nullopt;
    return trans ? Layout{h->dims(1), h->dims(0), false} : Layout{h->dims(0), h->dims(1), true};
  }

  // Conv's W [M, C/group, k...]: per output channel, C/group x prod(k) elements, contiguous.
  static std::optional<Layout> conv_layout(const ir::Value* w) {
    const auto* h = w ? constant_header(w) : nullptr;
    if (!h || h->data_type() != TensorProto::FLOAT || h->dims_size() < 3) return std::nullopt;
    int64_t per = 1;
    for (int i = 1; i < h->dims_size(); ++i) {
      if (h->dims(i) <= 0 || per > (int64_t{1} << 40) / h->dims(i)) return std::nullopt;
      per *= h->dims(i);
    }
    if (h->dims(0) <= 0) return std::nullopt;
    return Layout{per, h->dims(0), false};
  }

  static bool prune(ir::Value* w, const Layout& l, const Config& cfg, Rewriter& rw,
                    std::string* note) {
    ir::Node* constant = w->producer();
    if (!w->is_constant() && !(constant && constant->is("Constant"))) {
      *note = "not a constant (an overridable graph input): kept";
      return false;
    }
    auto view = float32_constant(w);
    if (!view || view->size() != l.k * l.n) return false;
    std::vector<float> v(static_cast<size_t>(view->size()));
    for (int64_t i = 0; i < view->size(); ++i) {
      v[static_cast<size_t>(i)] = (*view)[i];
      if (!std::isfinite(v[static_cast<size_t>(i)])) {
        *note = "the weight holds a NaN or an infinity: kept";
        return false;
      }
    }
    const auto at = [&](int64_t r, int64_t c) -> float& {
      return v[static_cast<size_t>(l.k_major ? r * l.n + c : c * l.k + r)];
    };
    if (cfg.two_four) {
      if (l.k % 4 != 0) {
        *note =
            absl::StrFormat("%d elements along the reduction axis, not a multiple of 4: kept", l.k);
        return false;
      }
      for (int64_t c = 0; c < l.n; ++c)
        for (int64_t r = 0; r < l.k; r += 4) {
          int64_t idx[4] = {r, r + 1, r + 2, r + 3};
          std::sort(idx, idx + 4, [&](int64_t a, int64_t b) {
            return std::fabs(at(a, c)) < std::fabs(at(b, c));
          });
          at(idx[0], c) = 0.0f;
          at(idx[1], c) = 0.0f;
        }
    } else {
      std::vector<float> mags(v.size());
      for (size_t i = 0; i < v.size(); ++i) mags[i] = std::fabs(v[i]);
      const auto cut =
          static_cast<size_t>(std::floor(cfg.sparsity * static_cast<double>(v.size())));
      if (cut == 0) return false;
      std::nth_element(mags.begin(), mags.begin() + static_cast<std::ptrdiff_t>(cut - 1),
                       mags.end());
      const float threshold = mags[cut - 1];
      // Ties at the threshold: zero only as many as the share allows.
      size_t below = 0;
      for (float m : mags) below += m < threshold;
      size_t ties = cut - below;
      for (float& x : v) {
        const float m = std::fabs(x);
        if (m < threshold) {
          x = 0.0f;
        } else if (m == threshold && ties > 0) {
          x = 0.0f;
          --ties;
        }
      }
    }
    size_t zeros = 0, changed = 0;
    double kept = 0, total = 0;
    for (int64_t i = 0; i < view->size(); ++i) {
      const double o = (*view)[i];
      const float x = v[static_cast<size_t>(i)];
      total += o * o;
      kept += static_cast<double>(x) * x;
      zeros += x == 0.0f;
      changed += x != (*view)[i];
    }
    if (changed == 0) return false;  // already as sparse (a second run of the pass)
    const auto* h = constant_header(w);
    std::vector<int64_t> dims(h->dims().begin(), h->dims().end());
    TensorProto t = ir::make_float32_tensor(dims, v);
    t.set_name(w->name());
    if (w->is_constant())
      w->set_initializer(std::move(t));  // journaled: a rolled-back pass restores it
    else if (!rw.replace_with_constant(constant, std::move(t)))
      return false;
    *note = absl::StrFormat("%s: %.1f%% zeros, %.3g of the squared magnitude removed",
                            cfg.two_four ? "2:4" : "unstructured",
                            100.0 * static_cast<double>(zeros) / static_cast<double>(v.size()),
                            total > 0 ? 1 - kept / total : 0.0);
    return true;
  }
};

}  // namespace

PassInfo prune_weights_pass() {
  return describe<PruneWeights>(
      {.name = "prune_weights",
       .level = 3,
       .lossy = true,
       .gate = {.max_rel = 0.1, .min_cosine = 0.995},
       .by_name_only = true,
       .description = "the smallest weights by magnitude (MatMul/Gemm B, Conv W; constant "
                      "float32) become zeros: a share of each weight, or 2 of every 4 along the "
                      "reduction axis (lossy; by name only)",
       .options = {enum_option(kSparsity, "50", {"25", "50", "60", "70", "75", "80", "90"},
                               "percent of each weight's elements zeroed (unstructured)"),
                   enum_option(kPattern, "unstructured", {"unstructured", "2:4"},
                               "unstructured: the smallest of the whole weight; 2:4: the 2 "
                               "smallest of every 4 consecutive along the reduction axis (50%)"),
                   min_weight_elements_option(),
                   exclude_ops_option({}, {"MatMul", "Gemm", "Conv"}, "op types left as they are"),
                   exclude_nodes_option("node names left as they are (in any graph)")}});
}

}  // namespace graft
