// ONNX's Attention (opset 23, core/eval/kernels/attention.cc): each form against the same
// computation written out in standard ops on seeded random inputs (same_outputs), the
// fully-masked row, and malformed operands refused with an error, never a crash.
#include <cmath>
#include <string>

#include "tests/eval/kernel_testing.h"

namespace graft::eval {
namespace {

using testing::parse_text;
using testing::same_outputs;

constexpr const char* kImports = R"(<ir_version: 10, opset_import: ["" : 23]>)";

void expect_same(const std::string& sig, const std::string& fused, const std::string& reference) {
  auto a = parse_text(std::string(kImports) + sig + " {" + fused + "}");
  auto b = parse_text(std::string(kImports) + sig + " {" + reference + "}");
  ASSERT_TRUE(a && b);
  for (uint32_t seed : {1u, 2u, 3u})
    EXPECT_EQ(same_outputs(*b, *a, seed, 1e-5, 1e-6), "") << "seed " << seed;
}

TEST(AttentionKernel, FourDimensionalWithFloatMaskAndScale) {
  expect_same(
      "g (float[2,2,3,4] q, float[2,2,5,4] k, float[2,2,5,3] v, float[2,1,1,5] m) => "
      "(float[2,2,3,3] y) <float s = {0.3}>",
      " y = Attention <scale = 0.3> (q, k, v, m) ", R"(
      kt = Transpose <perm = [0, 1, 3, 2]> (k)
      p = MatMul (q, kt)
      ps = Mul (p, s)
      pm = Add (ps, m)
      w = Softmax <axis = -1> (pm)
      y = MatMul (w, v))");
}

TEST(AttentionKernel, DefaultScaleIsOneOverTheSquareRootOfTheHeadSize) {
  expect_same(
      "g (float[1,2,3,4] q, float[1,2,3,4] k, float[1,2,3,4] v) => (float[1,2,3,4] y) "
      "<float s = {0.5}>",
      " y = Attention (q, k, v) ", R"(
      kt = Transpose <perm = [0, 1, 3, 2]> (k)
      p = MatMul (q, kt)
      ps = Mul (p, s)
      w = Softmax <axis = -1> (ps)
      y = MatMul (w, v))");
}

TEST(AttentionKernel, ThreeDimensionalWithGroupedKeyValueHeads) {
  // 4 query heads of 2 sharing 2 key/value heads (heads 0, 1 read kv head 0; 2, 3 read 1).
  expect_same(
      "g (float[2,3,8] q, float[2,5,4] k, float[2,5,6] v) => (float[2,3,12] y) "
      "<int64[4] qs = {2, 3, 4, 2}, int64[4] ks = {2, 5, 2, 2}, int64[4] vs = {2, 5, 2, 3},"
      " int64[3] out = {2, 3, 12}, float s = {0.7071067811865476}>",
      " y = Attention <q_num_heads = 4, kv_num_heads = 2> (q, k, v) ", R"(
      q4 = Reshape (q, qs)
      qh = Transpose <perm = [0, 2, 1, 3]> (q4)
      k4 = Reshape (k, ks)
      kh = Transpose <perm = [0, 2, 1, 3]> (k4)
      v4 = Reshape (v, vs)
      vh = Transpose <perm = [0, 2, 1, 3]> (v4)
      qa, qb = Split <axis = 1, num_outputs = 2> (qh)
      ka, kb = Split <axis = 1, num_outputs = 2> (kh)
      va, vb = Split <axis = 1, num_outputs = 2> (vh)
      kat = Transpose <perm = [0, 1, 3, 2]> (ka)
      kbt = Transpose <perm = [0, 1, 3, 2]> (kb)
      pa = MatMul (qa, kat)
      pb = MatMul (qb, kbt)
      sa = Mul (pa, s)
      sb = Mul (pb, s)
      wa = Softmax <axis = -1> (sa)
      wb = Softmax <axis = -1> (sb)
      ya = MatMul (wa, va)
      yb = MatMul (wb, vb)
      yh = Concat <axis = 1> (ya, yb)
      yt = Transpose <perm = [0, 2, 1, 3]> (yh)
      y = Reshape (yt, out))");
}

TEST(AttentionKernel, PastKeysAndValuesComeFirstAndArePresent) {
  // With a past of 2 and is_causal: query i (of 3) sees keys j <= i + 2; present = [past ; new].
  expect_same(
      "g (float[1,2,3,4] q, float[1,2,3,4] k, float[1,2,3,4] v, float[1,2,2,4] pk, "
      "float[1,2,2,4] pv) => (float[1,2,3,4] y, float[1,2,5,4] kk, float[1,2,5,4] vv) "
      "<float s = {0.5}, float[3,5] causal = {0, 0, 0, -1e30, -1e30, 0, 0, 0, 0, -1e30, 0, 0, 0, "
      "0, "
      "0}>",
      " y, kk, vv = Attention <is_causal = 1> (q, k, v, , pk, pv) ", R"(
      kk = Concat <axis = 2> (pk, k)
      vv = Concat <axis = 2> (pv, v)
      kt = Transpose <perm = [0, 1, 3, 2]> (kk)
      p = MatMul (q, kt)
      ps = Mul (p, s)
      pm = Add (ps, causal)
      w = Softmax <axis = -1> (pm)
      y = MatMul (w, vv))");
}

TEST(AttentionKernel, BooleanMaskAllowsWhereTrueAndSoftcapBoundsTheScores) {
  expect_same(
      "g (float[2,2,3,4] q, float[2,2,3,4] k, float[2,2,3,4] v) => (float[2,2,3,4] y) "
      "<bool[3,3] m = {1, 0, 1, 1, 1, 0, 0, 1, 1}, float[3,3] add = {0, -1e30, 0, 0, 0, "
      "-1e30, -1e30, 0, 0}, float s = {0.5}, float cap = {2.0}>",
      " y = Attention <softcap = 2.0> (q, k, v, m) ", R"(
      kt = Transpose <perm = [0, 1, 3, 2]> (k)
      p = MatMul (q, kt)
      ps = Mul (p, s)
      pc = Div (ps, cap)
      th = Tanh (pc)
      capped = Mul (th, cap)
      pm = Add (capped, add)
      w = Softmax <axis = -1> (pm)
      y = MatMul (w, v))");
}

TEST(AttentionKernel, AFullyMaskedQueryRowIsZeros) {
  auto q = make<float>(onnx::TensorProto::FLOAT, {1, 1, 2, 2}, {1, 2, 3, 4});
  auto k = make<float>(onnx::TensorProto::FLOAT, {1, 1, 2, 2}, {0.5, -1, 2, 1});
  auto v = make<float>(onnx::TensorProto::FLOAT, {1, 1, 2, 2}, {1, 2, 3, 4});
  // Row 0 may see nothing; row 1 sees both keys.
  auto m = make<bool>(onnx::TensorProto::BOOL, {2, 2}, {false, false, true, true});
  std::vector<Tensor> out;
  const std::string text = R"(<ir_version: 10, opset_import: ["" : 23]>
    g (float[1,1,2,2] q, float[1,1,2,2] k, float[1,1,2,2] v, bool[2,2] m) => (float[1,1,2,2] y) {
      y = Attention (q, k, v, m)
    })";
  ASSERT_TRUE(run(text, {&q, &k, &v, &m}, &out).ok());
  const std::vector<double> y = doubles_of(out.at(0));
  EXPECT_EQ(y[0], 0.0);
  EXPECT_EQ(y[1], 0.0);
  for (double e : {y[2], y[3]}) EXPECT_TRUE(std::isfinite(e) && e != 0.0) << e;
}

TEST(AttentionKernel, MalformedOperandsAreErrors) {
  struct Case {
    const char* what;
    std::string sig_body;
    std::vector<Tensor> inputs;
  };
  const auto f = onnx::TensorProto::FLOAT;
  auto t4 = [&](std::vector<int64_t> d) { return make<float>(f, d, {}); };
  const std::vector<Case> cases = {
      {"ranks differ",
       "g (float[1,2,3,4] q, float[1,3,8] k, float[1,3,8] v) => (float[1,2,3,4] y) "
       "{ y = Attention (q, k, v) }",
       {t4({1, 2, 3, 4}), t4({1, 3, 8}), t4({1, 3, 8})}},
      {"3-D without head counts",
       "g (float[1,3,8] q, float[1,3,8] k, float[1,3,8] v) => (float[1,3,8] y) "
       "{ y = Attention (q, k, v) }",
       {t4({1, 3, 8}), t4({1, 3, 8}), t4({1, 3, 8})}},
      {"q heads not a multiple of kv heads",
       "g (float[1,3,1,4] q, float[1,2,3,4] k, float[1,2,3,4] v) => (float[1,3,1,4] y) "
       "{ y = Attention (q, k, v) }",
       {t4({1, 3, 1, 4}), t4({1, 2, 3, 4}), t4({1, 2, 3, 4})}},
      {"head sizes differ",
       "g (float[1,2,3,4] q, float[1,2,3,5] k, float[1,2,3,4] v) => (float[1,2,3,4] y) "
       "{ y = Attention (q, k, v) }",
       {t4({1, 2, 3, 4}), t4({1, 2, 3, 5}), t4({1, 2, 3, 4})}},
      {"past_key without past_value",
       "g (float[1,2,3,4] q, float[1,2,3,4] k, float[1,2,3,4] v, float[1,2,1,4] pk) => "
       "(float[1,2,3,4] y) { y = Attention (q, k, v, , pk) }",
       {t4({1, 2, 3, 4}), t4({1, 2, 3, 4}), t4({1, 2, 3, 4}), t4({1, 2, 1, 4})}},
      {"mask that does not broadcast",
       "g (float[1,2,3,4] q, float[1,2,3,4] k, float[1,2,3,4] v, float[4,4] m) => "
       "(float[1,2,3,4] y) { y = Attention (q, k, v, m) }",
       {t4({1, 2, 3, 4}), t4({1, 2, 3, 4}), t4({1, 2, 3, 4}), t4({4, 4})}},
      {"qk_matmul_output asked for",
       "g (float[1,2,3,4] q, float[1,2,3,4] k, float[1,2,3,4] v) => (float[1,2,3,4] y, "
       "float[1,2,3,3] s) { y, , , s = Attention (q, k, v) }",
       {t4({1, 2, 3, 4}), t4({1, 2, 3, 4}), t4({1, 2, 3, 4})}},
      {"values shorter than keys",
       "g (float[1,2,3,4] q, float[1,2,3,4] k, float[1,2,2,4] v) => (float[1,2,3,4] y) "
       "{ y = Attention (q, k, v) }",
       {t4({1, 2, 3, 4}), t4({1, 2, 3, 4}), t4({1, 2, 2, 4})}},
  };
  for (const Case& c : cases) {
    std::vector<const Tensor*> in;
    for (const Tensor& t : c.inputs) in.push_back(&t);
    std::vector<Tensor> out;
    const absl::Status st = run(std::string(kImports) + c.sig_body, in, &out);
    EXPECT_FALSE(st.ok()) << c.what;
    EXPECT_TRUE(absl::IsInvalidArgument(st) || absl::IsUnimplemented(st) ||
                absl::IsResourceExhausted(st))
        << c.what << ": " << st;
  }
}

}  // namespace
}  // namespace graft::eval
