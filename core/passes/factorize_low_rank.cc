// factorize_low_rank: a large weight matrix becomes the product of two thin ones, by truncated
// SVD (LOSSY on purpose, run only when named):
//
//   MatMul(x, W)              W: constant float32 [K, N]
//     -> MatMul(MatMul(x, A), B)            A = U_r sqrt(S_r) [K, r], B = sqrt(S_r) V_r^T [r, N]
//   Gemm(x, W, C) (transA 0, W read transposed when transB)
//     -> Gemm(MatMul(x, A), B, C) with the same alpha and beta
//   Conv(x, W) with a 1x1 kernel W [M, C, 1, 1], group 1
//     -> Conv(Conv(x, A' [r, C, 1, 1], the node's strides and pads), B' [M, r, 1, 1], bias)
//
// The rank r of each weight is the smallest that keeps `energy` of the squared singular values
// and a relative reconstruction error ||W - AB|| / ||W|| (Frobenius) of at most `max_error`
// (the error is sqrt(1 - kept energy)). A weight is factorized only when r (K + N) is at most
// 3/4 of K N: the two factors then hold at least 25% fewer values and cost at least 25% fewer
// multiply-adds per row than W. Trained weights are often close to low rank; random (Gaussian)
// weights are not (their singular values spread evenly): on them nothing qualifies, as it should.
//
// A weight several nodes read is left alone (factorized per reader it would be stored once per
// reader). Every weight tried is reported (always, as findings): the rank chosen, the fraction of
// bytes and multiply-adds kept, the reconstruction error, or why it stayed (the rank the energy
// needs saves too little, too small, too large to decompose). The model's error is measured and
// gated like every lossy pass's (docs/quantization.md).
//
// The SVD is LAPACK's dgesdd (divide and conquer) from OpenBLAS, the library the evaluator's
// products use, on the weight in double. Its cost grows as K N min(K, N): weights above
// max_weight_elements are left alone (reported).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>

#include "core/ir/tensor.h"
#include "core/passes/float32_view.h"
#include "core/passes/passes.h"
#include "core/passes/quantization.h"
#include "core/passes/rewriter.h"
#include "core/passes/weights.h"

extern "C" void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda,
                        double* s, double* u, const int* ldu, double* vt, const int* ldvt,
                        double* work, const int* lwork, int* iwork, int* info);

namespace graft {

namespace {

using onnx::TensorProto;

constexpr char kEnergy[] = "energy";
constexpr char kMaxError[] = "max_error";
constexpr char kMaxWeightElements[] = "max_weight_elements";

struct Config {
  double energy = 0.99;
  double max_error = 0.1;
  int64_t max_elements = int64_t{1} << 24;
  WeightFilter filter;
};

// The two factors of a [K, N] matrix, row-major: a [K, r], b [r, N].
struct Factors {
  int64_t rank = 0;
  double error = 0;  // relative Frobenius reconstruction error
  std::vector<float> a, b;
};

// The truncated SVD of the [K, N] matrix `at(row, col)` under cfg; `why` says why not.
template <typename At>
std::optional<Factors> factorize(const At& at, int64_t k, int64_t n, const Config& cfg,
                                 std::string* why) {
  const int64_t p = std::min(k, n);
  if (k > INT32_MAX || n > INT32_MAX) {
    *why = "too large for LAPACK's 32-bit sizes";
    return std::nullopt;
  }
  // LAPACK is column-major: the [N, K] column-major matrix holding W^T is W's row-major layout.
  // Its SVD W^T = U S V^T gives W = V S U^T.
  std::vector<double> w(static_cast<size_t>(k * n));
  double total = 0;
  for (int64_t r = 0; r < k; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const double v = at(r, c);
      if (!std::isfinite(v)) {
        *why = "the weight holds a NaN or an infinity";
        return std::nullopt;
      }
      w[static_cast<size_t>(r * n + c)] = v;
      total += v * v;
    }
  if (total == 0) {
    *why = "the weight is all zeros";
    return std::nullopt;
  }
  const int m32 = static_cast<int>(n), n32 = static_cast<int>(k), p32 = static_cast<int>(p);
  std::vector<double> s(static_cast<size_t>(p)), u(static_cast<size_t>(n * p)),
      vt(static_cast<size_t>(p * k));
  std::vector<int> iwork(static_cast<size_t>(8 * p));
  int info = 0, lwork = -1;
  double query = 0;
  dgesdd_("S", &m32, &n32, w.data(), &m32, s.data(), u.data(), &m32, vt.data(), &p32, &query,
          &lwork, iwork.data(), &info);
  if (info != 0 || !(query >= 1) || query > 1e10) {
    *why = absl::StrCat("LAPACK's dgesdd workspace query failed (info ", info, ")");
    return std::nullopt;
  }
  lwork = static_cast<int>(query);
  std::vector<double> work(static_cast<size_t>(lwork));
  dgesdd_("S", &m32, &n32, w.data(), &m32, s.data(), u.data(), &m32, vt.data(), &p32, work.data(),
          &lwork, iwork.data(), &info);
  if (info != 0) {
    *why = absl::StrCat("LAPACK's dgesdd did not converge (info ", info, ")");
    return std::nullopt;
  }
  double energy_total = 0;
  for (double v : s) energy_total += v * v;
  const double need = std::max(cfg.energy, 1 - cfg.max_error * cfg.max_error);
  int64_t rank = 0;
  double kept = 0;
  while (rank < p && kept < need * energy_total) {
    const double v = s[static_cast<size_t>(rank)];
    kept += v * v;
    ++rank;
  }
  Factors f;
  f.rank = rank;
  f.error = std::sqrt(std::max(0.0, 1 - kept / energy_total));
  if (static_cast<double>(rank) * static_cast<double>(k + n) >
      0.75 * static_cast<double>(k) * static_cast<double>(n)) {
    *why = absl::StrFormat(
        "keeping %.4g of the energy (error %.3g) needs rank %d of %d: the factors would hold "
        "%.2fx the weight's values, above 0.75x",
        kept / energy_total, f.error, rank, p,
        static_cast<double>(rank) * static_cast<double>(k + n) / (static_cast<double>(k) * n));
    return std::nullopt;
  }
  // W = V S U^T: A = V_r sqrt(S_r) [K, r] (V = vt^T: V[row, j] = vt[j + row * p]), B =
  // sqrt(S_r) U_r^T [r, N] (U[col, j] = u[col + j * N]).
  f.a.resize(static_cast<size_t>(k * rank));
  f.b.resize(static_cast<size_t>(rank * n));
  for (int64_t j = 0; j < rank; ++j) {
    const double root = std::sqrt(s[static_cast<size_t>(j)]);
    for (int64_t r = 0; r < k; ++r)
      f.a[static_cast<size_t>(r * rank + j)] =
          static_cast<float>(vt[static_cast<size_t>(j + r * p)] * root);
    for (int64_t c = 0; c < n; ++c)
      f.b[static_cast<size_t>(j * n + c)] =
          static_cast<float>(u[static_cast<size_t>(c + j * n)] * root);
  }
  return f;
}

std::string describe_factors(const Factors& f, int64_t k, int64_t n) {
  const double kept = static_cast<double>(f.rank) * static_cast<double>(k + n) /
                      (static_cast<double>(k) * static_cast<double>(n));
  return absl::StrFormat(
      "[%d, %d] factorized at rank %d of %d: values and multiply-adds %.3fx, reconstruction "
      "error %.3g",
      k, n, f.rank, std::min(k, n), kept, f.error);
}

class FactorizeLowRank final : public Pass {
 public:
  std::string_view name() const override { return "factorize_low_rank"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override {
    Config cfg;
    cfg.energy = std::stod(ctx.enum_option(kEnergy));
    cfg.max_error = std::stod(ctx.enum_option(kMaxError));
    cfg.max_elements = ctx.int_option(kMaxWeightElements);
    cfg.filter = weight_filter(ctx);

    PassResult result;
    result.always_explained = true;
    Rewriter rw(model);
    for (ir::Graph* g : model.all_graphs())
      for (ir::Node* node : g->nodes()) {
        if (node->dead()) continue;
        std::string note;
        bool done = false;
        if ((node->is("MatMul") || node->is("Gemm")) && !cfg.filter.skips(*node, node->op_type()))
          done = product(*node, cfg, rw, &note);
        else if (node->is("Conv") && !cfg.filter.skips(*node, "Conv"))
          done = pointwise_conv(*node, cfg, rw, &note);
        if (done) result.add();
        if (!note.empty())
          result.explanations.push_back({.rule = done ? "factorized" : "kept",
                                         .node = label(*node),
                                         .op = node->op_type(),
                                         .graph = g->parent() ? g->name() : "",
                                         .reason = std::move(note)});
      }
    return result;
  }

 private:
  static std::string label(const ir::Node& n) {
    if (!n.name().empty()) return n.name();
    return n.output(0) ? n.output(0)->name() : std::string();
  }

  // A weight several nodes read would be stored once per reader, factorized.
  static std::string shared_note(int64_t k, int64_t n) {
    return absl::StrCat("[", k, ", ", n, "]: read by several nodes; factorized for each it would ",
                        "be stored once per reader: kept");
  }

  // Whether the weight's size is one to try; `note` says why not when it is big enough to tell.
  static bool sized(int64_t k, int64_t n, const Config& cfg, std::string* note) {
    if (k * n < cfg.filter.min_elements) return false;  // below the size users asked about: silent
    if (k * n > cfg.max_elements) {
      *note = absl::StrCat("[", k, ", ", n, "]: above max_weight_elements (", cfg.max_elements,
                           "), not decomposed");
      return false;
    }
    if (std::min(k, n) < 4) {
      *note = absl::StrCat("[", k, ", ", n, "]: too thin to factorize");
      return false;
    }
    return true;
  }

  // MatMul(x, W) and Gemm(x, W, C): the first product by A, then B in the node's place.
  static bool product(ir::Node& node, const Config& cfg, Rewriter& rw, std::string* note) {
    const bool gemm = node.is("Gemm");
    if (node.inputs().size() < 2 || node.outputs().size() != 1 || !node.output(0)) return false;
    if (gemm && (node.inputs().size() > 3 ||
                 !only_attributes(node, {"alpha", "beta", "transA", "transB"}) ||
                 node.attr_int("transA", 0) != 0))
      return false;
    if (!gemm && !node.attributes().empty()) return false;
    ir::Value* x = node.input(0);
    if (!x || x->elem_type() != TensorProto::FLOAT) return false;
    auto ref = read_matmul_weight(node.input(1), gemm && node.attr_int("transB", 0) != 0, 0);
    if (!ref || !sized(ref->k, ref->n, cfg, note)) return false;
    if (ref->source->use_count() > 1 ||
        (ref->transpose && ref->transpose->output(0)->use_count() > 1)) {
      *note = shared_note(ref->k, ref->n);
      return false;
    }
    auto w = float32_constant(ref->source);
    if (!w || w->size() != ref->k * ref->n) return false;
    std::optional<Factors> f;
    const int64_t k = ref->k, n = ref->n;
    if (ref->transposed)
      f = factorize([&](int64_t r, int64_t c) { return (*w)[c * k + r]; }, k, n, cfg, note);
    else
      f = factorize([&](int64_t r, int64_t c) { return (*w)[r * n + c]; }, k, n, cfg, note);
    if (!f) {
      *note = absl::StrCat("[", k, ", ", n, "]: ", *note);
      return false;
    }
    ir::Graph& g = *node.graph();
    const std::string base = ref->source->name();
    ir::Value* a = rw.add_constant(g, ir::make_float32_tensor({k, f->rank}, f->a), base + "_lr_a");
    ir::Value* b = rw.add_constant(g, ir::make_float32_tensor({f->rank, n}, f->b), base + "_lr_b");
    ir::Value* h = rw.add_node(g, "MatMul", {x, a}, 1, &node)->output(0);
    ir::Value* y = nullptr;
    if (gemm) {
      std::vector<ir::Value*> inputs{h, b};
      if (node.input(2)) inputs.push_back(node.input(2));
      ir::Node* second = rw.add_node(g, "Gemm", inputs, 1, &node);
      for (const char* attr : {"alpha", "beta"})
        if (const auto* at = node.attr(attr)) rw.set_attr(second, *at);
      y = second->output(0);
    } else {
      y = rw.add_node(g, "MatMul", {h, b}, 1, &node)->output(0);
    }
    if (!rw.replace_node(&node, {y})) return false;
    if (ref->transpose && !ref->transpose->dead() && ref->transpose->output(0)->use_count() == 0)
      rw.erase(ref->transpose);
    *note = describe_factors(*f, k, n);
    return true;
  }

  // Conv with a 1x1 kernel [M, C, 1, 1] and one group: the [M, C] matrix W (K = C in, N = M
  // out as y = W x per pixel), factorized as two 1x1 convolutions.
  static bool pointwise_conv(ir::Node& node, const Config& cfg, Rewriter& rw, std::string* note) {
    if (node.inputs().size() < 2 || node.inputs().size() > 3 || node.outputs().size() != 1 ||
        !node.output(0) || node.attr_int("group", 1) != 1)
      return false;
    if (!only_attributes(node,
                         {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}))
      return false;
    ir::Value* x = node.input(0);
    if (!x || x->elem_type() != TensorProto::FLOAT) return false;
    const auto* h = constant_header(node.input(1));
    if (!h || h->data_type() != TensorProto::FLOAT || h->dims_size() < 3) return false;
    for (int i = 2; i < h->dims_size(); ++i)
      if (h->dims(i) != 1) return false;
    const int64_t m = h->dims(0), c = h->dims(1);
    if (m <= 0 || c <= 0 || !sized(c, m, cfg, note)) return false;
    if (node.input(1)->use_count() > 1) {
      *note = shared_note(c, m) + " (1x1 Conv)";
      return false;
    }
    auto w = float32_constant(node.input(1));
    if (!w || w->size() != m * c) return false;
    // As a product: y[m] = sum_c W[m, c] x[c], the [K = C, N = M] matrix W^T.
    auto f = factorize([&](int64_t r, int64_t col) { return (*w)[col * c + r]; }, c, m, cfg, note);
    if (!f) {
      *note = absl::StrCat("[", c, ", ", m, "] (1x1 Conv): ", *note);
      return false;
    }
    ir::Graph& g = *node.graph();
    const auto kernel_rank = static_cast<int64_t>(h->dims_size() - 2);
    auto conv_weight = [&](int64_t out, int64_t in, const std::vector<float>& values) {
      std::vector<int64_t> dims{out, in};
      dims.insert(dims.end(), static_cast<size_t>(kernel_rank), 1);
      return ir::make_float32_tensor(dims, values);
    };
    // First: r outputs from C inputs, A^T [r, C]; second: M outputs from r, B^T [M, r].
    std::vector<float> first(static_cast<size_t>(f->rank * c)),
        second(static_cast<size_t>(m * f->rank));
    for (int64_t j = 0; j < f->rank; ++j) {
      for (int64_t i = 0; i < c; ++i)
        first[static_cast<size_t>(j * c + i)] = f->a[static_cast<size_t>(i * f->rank + j)];
      for (int64_t o = 0; o < m; ++o)
        second[static_cast<size_t>(o * f->rank + j)] = f->b[static_cast<size_t>(j * m + o)];
    }
    const std::string base = node.input(1)->name();
    ir::Value* wa = rw.add_constant(g, conv_weight(f->rank, c, first), base + "_lr_a");
    ir::Value* wb = rw.add_constant(g, conv_weight(m, f->rank, second), base + "_lr_b");
    ir::Node* c1 = rw.add_node(g, "Conv", {x, wa}, 1, &node);
    for (const auto& a : node.attributes())
      if (a.name() != "kernel_shape") rw.set_attr(c1, a);
    std::vector<ir::Value*> inputs{c1->output(0), wb};
    if (node.input(2)) inputs.push_back(node.input(2));
    ir::Node* c2 = rw.add_node(g, "Conv", inputs, 1, &node);
    if (!rw.replace_node(&node, {c2->output(0)})) return false;
    *note = describe_factors(*f, c, m) + " (1x1 Conv)";
    return true;
  }
};

}  // namespace

PassInfo factorize_low_rank_pass() {
  return describe<FactorizeLowRank>(
      {.name = "factorize_low_rank",
       .level = 3,
       .lossy = true,
       // A weight is replaced only within max_error (default 0.1) of reconstruction error; the
       // model's outputs are held to this gate on top.
       .gate = {.max_rel = 0.1, .min_cosine = 0.995},
       .by_name_only = true,
       .description = "MatMul/Gemm weights and 1x1 Conv kernels (constant float32) become two "
                      "thin factors by truncated SVD where the rank that keeps `energy` saves "
                      "at least 25% of the values and multiply-adds (lossy; by name only)",
       .options = {enum_option(kEnergy, "0.99", {"0.9", "0.95", "0.98", "0.99", "0.995", "0.999"},
                               "share of the squared singular values each weight keeps"),
                   enum_option(kMaxError, "0.1", {"0.01", "0.02", "0.05", "0.1", "0.2", "0.3"},
                               "largest relative (Frobenius) reconstruction error of a weight"),
                   integer_option(kMinWeightElements, 65536, 0, std::numeric_limits<int64_t>::max(),
                                  "weights with fewer elements stay as they are"),
                   integer_option(kMaxWeightElements, int64_t{1} << 24, 1, int64_t{1} << 28,
                                  "weights with more elements are not decomposed (the SVD's "
                                  "time grows as K N min(K, N))"),
                   exclude_ops_option({}, {"MatMul", "Gemm", "Conv"}, "op types left as they are"),
                   exclude_nodes_option("node names left as they are (in any graph)")}});
}

}  // namespace graft
