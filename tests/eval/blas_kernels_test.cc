// The dgemm path of MatMul, Gemm, FusedMatMul, Conv and ConvInteger (core/eval/gemm.h) against
// their reference loops (ReferenceKernelsScope), on many random shapes: broadcast batches and
// vectors, Gemm's transposes, alpha, beta and C broadcasts, Conv's groups, strides, dilations,
// pads and auto_pad in 1-D, 2-D and 3-D, for float, double and float16 operands. Both paths
// accumulate in double, so they agree to a few units in the last place of the output type;
// ConvInteger's sums are exact in both and must be equal.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "core/eval/gemm.h"
#include "tests/eval/kernel_testing.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

constexpr uint64_t kLimit = 64 << 20;

// A tensor of `dims` with random values: uniform in [-1, 1] for floating-point types, in the
// type's range for 8-bit integers.
Tensor random_tensor(std::mt19937& rng, int32_t dtype, std::vector<int64_t> dims) {
  auto t = Tensor::zeros(dtype, std::move(dims), kLimit);
  EXPECT_TRUE(t.ok());
  if (is_float_type(dtype)) {
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (int64_t i = 0; i < t->size(); ++i) t->set_double(i, u(rng));
  } else {
    std::uniform_int_distribution<int> u(dtype == TensorProto::INT8 ? -128 : 0,
                                         dtype == TensorProto::INT8 ? 127 : 255);
    for (int64_t i = 0; i < t->size(); ++i) t->set_int64(i, u(rng));
  }
  return *t;
}

const char* type_name(int32_t dtype) {
  switch (dtype) {
    case TensorProto::FLOAT:
      return "float";
    case TensorProto::DOUBLE:
      return "double";
    case TensorProto::FLOAT16:
      return "float16";
    case TensorProto::INT8:
      return "int8";
    default:
      return "uint8";
  }
}

// How far the two paths may differ, relative to the output's magnitude: a couple of units in
// the last place of the output type (each path rounds its double sum once), plus double rounding
// of the sums themselves.
double tolerance(int32_t dtype) {
  switch (dtype) {
    case TensorProto::DOUBLE:
      return 1e-12;
    case TensorProto::FLOAT16:
      return 2e-3;
    case TensorProto::FLOAT:
      return 3e-7;
    default:
      return 0;  // integers: exact
  }
}

// Runs `text`'s one node on `inputs` on the dgemm path and on the reference loops; both must
// succeed (or fail alike) and agree element by element. The dgemm path runs twice and must give
// the same bits both times. Counts the cases that ran in `ran` (the tests check that most did,
// so a malformed case generator cannot pass by failing on both paths alike).
int ran = 0;
void expect_agree(const std::string& text, const std::vector<Tensor>& inputs,
                  const std::string& what) {
  SCOPED_TRACE(what + "\n" + text);
  std::vector<const Tensor*> in;
  for (const Tensor& t : inputs) in.push_back(&t);
  std::vector<Tensor> fast, fast_again, ref;
  const absl::Status fs = run(text, in, &fast, kLimit);
  const absl::Status fs2 = run(text, in, &fast_again, kLimit);
  absl::Status rs;
  {
    ReferenceKernelsScope reference;
    ASSERT_TRUE(reference_kernels());
    rs = run(text, in, &ref, kLimit);
  }
  ASSERT_FALSE(reference_kernels());
  ASSERT_EQ(fs.ok(), rs.ok()) << fs << " / " << rs;
  if (!fs.ok()) {
    std::cerr << "both failed: " << fs << "\n";
    return;
  }
  ++ran;
  ASSERT_TRUE(fs2.ok());
  ASSERT_EQ(fast.size(), ref.size());
  for (size_t o = 0; o < ref.size(); ++o) {
    ASSERT_EQ(fast[o].dims(), ref[o].dims());
    ASSERT_EQ(fast[o].dtype(), ref[o].dtype());
    ASSERT_TRUE(fast[o] == fast_again[o]) << "dgemm path not deterministic";
    const double tol = tolerance(ref[o].dtype());
    int failures = 0;
    for (int64_t i = 0; i < ref[o].size() && failures < 5; ++i) {
      const double f = fast[o].get_double(i), r = ref[o].get_double(i);
      const bool same = (std::isnan(f) && std::isnan(r)) || f == r ||
                        std::abs(f - r) <= tol * std::max(1.0, std::abs(r));
      if (!same) {
        ++failures;
        ADD_FAILURE() << "output " << o << " element " << i << ": dgemm " << f << ", reference "
                      << r;
      }
    }
  }
}

std::string dims_text(const std::vector<int64_t>& d) {
  return absl::StrCat("[", absl::StrJoin(d, ","), "]");
}

int64_t pick(std::mt19937& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

int32_t float_type(std::mt19937& rng) {
  static constexpr int32_t kTypes[] = {TensorProto::FLOAT, TensorProto::FLOAT, TensorProto::DOUBLE,
                                       TensorProto::FLOAT16};
  return kTypes[pick(rng, 0, 3)];
}

// ------------------------------------------------------------------------------------ MatMul

void check_matmul(std::mt19937& rng, int32_t t, std::vector<int64_t> ad, std::vector<int64_t> bd) {
  const std::string ty = type_name(t);
  const std::string text =
      model(13, absl::StrCat("(", ty, " a, ", ty, " b) => (", ty, " y)"), "y = MatMul (a, b)");
  expect_agree(text, {random_tensor(rng, t, ad), random_tensor(rng, t, bd)},
               absl::StrCat("MatMul ", ty, " ", dims_text(ad), " x ", dims_text(bd)));
}

TEST(BlasKernels, MatMulRandomShapes) {
  ran = 0;
  std::mt19937 rng(1);
  for (int c = 0; c < 200; ++c) {
    const int32_t t = float_type(rng);
    const int64_t m = pick(rng, 1, 40), k = pick(rng, 1, 70), n = pick(rng, 1, 40);
    // Batch dims of up to 3 axes, each side 1 or the common extent, ranks differing.
    const int64_t rank = pick(rng, 0, 3);
    std::vector<int64_t> ab, bb;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t e = pick(rng, 1, 3);
      ab.push_back(pick(rng, 0, 2) == 0 ? 1 : e);
      bb.push_back(pick(rng, 0, 2) == 0 ? 1 : e);
    }
    ab.erase(ab.begin(), ab.begin() + pick(rng, 0, rank));
    bb.erase(bb.begin(), bb.begin() + pick(rng, 0, rank));
    std::vector<int64_t> ad = ab, bd = bb;
    const int vec = static_cast<int>(pick(rng, 0, 5));  // 0: a is 1-D, 1: b is 1-D, 2: both
    if (vec == 0 || vec == 2) {
      ad = {k};
    } else {
      ad.push_back(m);
      ad.push_back(k);
    }
    if (vec == 1 || vec == 2) {
      bd = {k};
    } else {
      bd.push_back(k);
      bd.push_back(n);
    }
    check_matmul(rng, t, ad, bd);
  }
  EXPECT_EQ(ran, 200);
}

TEST(BlasKernels, MatMulLargeProductsSpanSeveralBlocks) {
  ran = 0;
  std::mt19937 rng(2);
  // Products of several blocks (gemm_blocks): 300 rows are two blocks of rows; 2000 columns at
  // k = 2000 are five blocks of columns; a batch of A's against one weight matrix is one product
  // of stacked rows.
  check_matmul(rng, TensorProto::FLOAT, {300, 300}, {300, 300});
  check_matmul(rng, TensorProto::DOUBLE, {40, 2000}, {2000, 2000});
  check_matmul(rng, TensorProto::DOUBLE, {3, 70, 200}, {200, 90});
  check_matmul(rng, TensorProto::FLOAT, {2, 1, 50, 64}, {3, 64, 20});
  check_matmul(rng, TensorProto::FLOAT, {1, 2000}, {2000, 1});
  EXPECT_EQ(ran, 5);
}

// -------------------------------------------------------------------------------------- Gemm

// Gemm of op(A) (m x k) and op(B) (k x n) with C of `c_shape` (none when null).
void check_gemm(std::mt19937& rng, int32_t t, int64_t m, int64_t k, int64_t n, bool ta, bool tb,
                double alpha, double beta, const std::vector<int64_t>* c_shape) {
  const std::string ty = type_name(t);
  std::vector<Tensor> in = {
      random_tensor(rng, t, ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}),
      random_tensor(rng, t, tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n})};
  std::string args = "a, b", sig = absl::StrCat("(", ty, " a, ", ty, " b");
  if (c_shape != nullptr) {
    in.push_back(random_tensor(rng, t, *c_shape));
    args += ", c";
    sig += absl::StrCat(", ", ty, " c");
  }
  const std::string text =
      model(13, sig + absl::StrCat(") => (", ty, " y)"),
            absl::StrCat("y = Gemm <transA = ", ta, ", transB = ", tb, ", alpha = ", alpha,
                         ", beta = ", beta, "> (", args, ")"));
  expect_agree(text, in,
               absl::StrCat("Gemm ", ty, " m=", m, " k=", k, " n=", n, " C ",
                            c_shape != nullptr ? dims_text(*c_shape) : "none"));
}

TEST(BlasKernels, GemmRandomShapes) {
  ran = 0;
  std::mt19937 rng(3);
  for (int c = 0; c < 200; ++c) {
    const int32_t t = float_type(rng);
    const int64_t m = pick(rng, 1, 40), k = pick(rng, 1, 70), n = pick(rng, 1, 40);
    const bool ta = pick(rng, 0, 1), tb = pick(rng, 0, 1);
    static constexpr double kScales[] = {1.0, 0.5, -2.0, 0.0};
    const double alpha = kScales[pick(rng, 0, 3)], beta = kScales[pick(rng, 0, 3)];
    const std::vector<std::vector<int64_t>> c_shapes = {{},     {n},    {1},   {m, 1},
                                                        {1, n}, {m, n}, {1, 1}};
    const int64_t ci = pick(rng, -1, static_cast<int64_t>(c_shapes.size()) - 1);
    check_gemm(rng, t, m, k, n, ta, tb, alpha, beta, ci >= 0 ? &c_shapes[ci] : nullptr);
  }
  EXPECT_EQ(ran, 200);
}

TEST(BlasKernels, GemmLargeProductsSpanSeveralBlocks) {
  ran = 0;
  std::mt19937 rng(10);
  // 300 rows are two blocks of rows, 1000 columns at k = 600 five blocks of columns; C
  // broadcast by rows and by columns, both operands transposed or not.
  const std::vector<int64_t> by_row = {300, 1}, by_col = {1000};
  check_gemm(rng, TensorProto::FLOAT, 300, 600, 1000, true, true, 0.5, 2.0, &by_row);
  check_gemm(rng, TensorProto::DOUBLE, 300, 600, 1000, false, false, 1.0, -1.0, &by_col);
  check_gemm(rng, TensorProto::FLOAT, 300, 600, 1000, true, false, 1.0, 1.0, nullptr);
  EXPECT_EQ(ran, 3);
}

// -------------------------------------------------------------------------------- FusedMatMul

TEST(BlasKernels, FusedMatMulRandomShapes) {
  ran = 0;
  std::mt19937 rng(4);
  for (int c = 0; c < 60; ++c) {
    const int32_t t = pick(rng, 0, 1) ? TensorProto::FLOAT : TensorProto::DOUBLE;
    const std::string ty = type_name(t);
    const int64_t m = pick(rng, 1, 30), k = pick(rng, 1, 50), n = pick(rng, 1, 30);
    const bool ta = pick(rng, 0, 1), tb = pick(rng, 0, 1);
    const int64_t e = pick(rng, 1, 3);
    std::vector<int64_t> ad = {pick(rng, 0, 1) ? e : 1}, bd = {pick(rng, 0, 1) ? e : 1};
    if (pick(rng, 0, 1)) bd.clear();
    ad.push_back(ta ? k : m);
    ad.push_back(ta ? m : k);
    bd.push_back(tb ? n : k);
    bd.push_back(tb ? k : n);
    const std::string text = absl::StrCat(
        R"(<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>)", "\ng (", ty, " a, ", ty,
        " b) => (", ty, " y) { y = com.microsoft.FusedMatMul <transA = ", ta, ", transB = ", tb,
        ", alpha = 0.75> (a, b) }");
    expect_agree(text, {random_tensor(rng, t, ad), random_tensor(rng, t, bd)},
                 absl::StrCat("FusedMatMul ", dims_text(ad), " x ", dims_text(bd)));
  }
  EXPECT_EQ(ran, 60);
}

// -------------------------------------------------------------------------------------- Conv

struct ConvCase {
  int64_t batch, group, cg, mg;
  std::vector<int64_t> in, kernel, strides, dilations, pads;
  std::string auto_pad;  // empty: NOTSET
  bool bias;
};

std::string conv_attrs(const ConvCase& c) {
  std::vector<std::string> attrs = {absl::StrCat("group = ", c.group),
                                    absl::StrCat("strides = ", dims_text(c.strides)),
                                    absl::StrCat("dilations = ", dims_text(c.dilations))};
  if (c.auto_pad.empty()) {
    attrs.push_back(absl::StrCat("pads = ", dims_text(c.pads)));
  } else {
    attrs.push_back(absl::StrCat("auto_pad = \"", c.auto_pad, "\""));
  }
  return absl::StrJoin(attrs, ", ");
}

void check_conv(std::mt19937& rng, int32_t t, const ConvCase& c) {
  const std::string ty = type_name(t);
  std::vector<int64_t> xd = {c.batch, c.group * c.cg}, wd = {c.group * c.mg, c.cg};
  xd.insert(xd.end(), c.in.begin(), c.in.end());
  wd.insert(wd.end(), c.kernel.begin(), c.kernel.end());
  std::vector<Tensor> in = {random_tensor(rng, t, xd), random_tensor(rng, t, wd)};
  std::string sig = absl::StrCat("(", ty, " x, ", ty, " w"), args = "x, w";
  if (c.bias) {
    in.push_back(random_tensor(rng, t, {c.group * c.mg}));
    sig += absl::StrCat(", ", ty, " b");
    args += ", b";
  }
  const std::string text = model(17, sig + absl::StrCat(") => (", ty, " y)"),
                                 absl::StrCat("y = Conv <", conv_attrs(c), "> (", args, ")"));
  expect_agree(text, in, absl::StrCat("Conv ", ty, " x ", dims_text(xd), " w ", dims_text(wd)));
}

ConvCase random_conv(std::mt19937& rng) {
  ConvCase c;
  const int64_t rank = pick(rng, 1, 3);
  c.batch = pick(rng, 1, 3);
  c.group = pick(rng, 0, 2) == 0 ? pick(rng, 2, 4) : 1;
  c.cg = pick(rng, 1, 5);
  c.mg = pick(rng, 1, 5);
  if (pick(rng, 0, 5) == 0) {  // depthwise
    c.cg = 1;
    c.mg = 1;
    c.group = pick(rng, 2, 8);
  }
  static const char* const kAutoPads[] = {"", "", "", "VALID", "SAME_UPPER", "SAME_LOWER"};
  c.auto_pad = kAutoPads[pick(rng, 0, 5)];
  c.bias = pick(rng, 0, 1);
  c.pads.assign(2 * rank, 0);
  for (int64_t d = 0; d < rank; ++d) {
    c.kernel.push_back(pick(rng, 1, rank == 3 ? 3 : 4));
    c.strides.push_back(pick(rng, 1, 3));
    c.dilations.push_back(pick(rng, 0, 3) == 0 ? 2 : 1);
    c.pads[d] = pick(rng, 0, 2);
    c.pads[rank + d] = pick(rng, 0, 2);
    const int64_t eff = (c.kernel[d] - 1) * c.dilations[d] + 1;
    c.in.push_back(eff + pick(rng, 0, rank == 3 ? 4 : 9));
  }
  return c;
}

TEST(BlasKernels, ConvRandomShapes) {
  ran = 0;
  std::mt19937 rng(5);
  for (int i = 0; i < 300; ++i) check_conv(rng, float_type(rng), random_conv(rng));
  EXPECT_EQ(ran, 300);
}

TEST(BlasKernels, ConvLargeChannelCountsSpanSeveralTiles) {
  ran = 0;
  std::mt19937 rng(6);
  // 64 channels of a 3x3x3 kernel are 1728 rows of gathered values: a tile of 2^18 values holds
  // 151 output positions, far fewer than the 2 * 512 there are (the last tile is partial).
  ConvCase c{2, 1, 64, 8, {8, 8, 8}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1, 1, 1, 1}, "", true};
  check_conv(rng, TensorProto::FLOAT, c);
  // Grouped, strided and dilated 2-D, the same.
  ConvCase g{3, 2, 200, 4, {20, 20}, {3, 3}, {2, 1}, {2, 1}, {1, 0, 2, 1}, "", true};
  check_conv(rng, TensorProto::FLOAT, g);
  EXPECT_EQ(ran, 2);
}

TEST(BlasKernels, ConvIntegerIsExact) {
  ran = 0;
  std::mt19937 rng(7);
  for (int i = 0; i < 60; ++i) {
    ConvCase c = random_conv(rng);
    c.bias = false;
    const int32_t xt = pick(rng, 0, 1) ? TensorProto::UINT8 : TensorProto::INT8;
    const int32_t wt = pick(rng, 0, 1) ? TensorProto::UINT8 : TensorProto::INT8;
    std::vector<int64_t> xd = {c.batch, c.group * c.cg}, wd = {c.group * c.mg, c.cg};
    xd.insert(xd.end(), c.in.begin(), c.in.end());
    wd.insert(wd.end(), c.kernel.begin(), c.kernel.end());
    const std::string text =
        model(17,
              absl::StrCat("(", type_name(xt), " x, ", type_name(wt), " w, ", type_name(xt),
                           " xz, ", type_name(wt), " wz) => (int32 y)"),
              absl::StrCat("y = ConvInteger <", conv_attrs(c), "> (x, w, xz, wz)"));
    expect_agree(text,
                 {random_tensor(rng, xt, xd), random_tensor(rng, wt, wd),
                  random_tensor(rng, xt, {}), random_tensor(rng, wt, {c.group * c.mg})},
                 absl::StrCat("ConvInteger x ", dims_text(xd), " w ", dims_text(wd)));
  }
  EXPECT_EQ(ran, 60);
}

// Non-finite operands give the same NaNs and infinities on both paths.
TEST(BlasKernels, NonFiniteValuesAgree) {
  ran = 0;
  std::mt19937 rng(8);
  Tensor a = random_tensor(rng, TensorProto::FLOAT, {4, 5});
  Tensor b = random_tensor(rng, TensorProto::FLOAT, {5, 3});
  a.data<float>()[2] = INFINITY;
  b.data<float>()[7] = NAN;
  expect_agree(model(13, "(float a, float b) => (float y)", "y = MatMul (a, b)"), {a, b}, "MatMul");
  expect_agree(model(13, "(float a, float b) => (float y)", "y = Gemm <alpha = 0.0> (a, b)"),
               {a, b}, "Gemm alpha 0");
  EXPECT_EQ(ran, 2);
}

// graftd's workers run the evaluator at once: dgemm called from several threads gives each the
// bits it gives alone.
TEST(BlasKernels, ConcurrentCallersGetTheSameBits) {
  std::mt19937 rng(9);
  const std::string text = model(13, "(float a, float b) => (float y)", "y = MatMul (a, b)");
  const Tensor a = random_tensor(rng, TensorProto::FLOAT, {3, 96, 200});
  const Tensor b = random_tensor(rng, TensorProto::FLOAT, {200, 120});
  std::vector<Tensor> alone;
  ASSERT_TRUE(run(text, {&a, &b}, &alone, kLimit).ok());
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < 20; ++r) {
        std::vector<Tensor> out;
        if (!run(text, {&a, &b}, &out, kLimit).ok() || !(out.at(0) == alone.at(0))) ++mismatches[t];
      }
    });
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace graft::eval
