// The com.microsoft kernels (core/eval/kernels/contrib.cc): each fused op against the same
// computation written out in standard ops, on the same random inputs (same_outputs), and each
// malformed operand refused with an error, never a crash.
#include <string>

#include <absl/strings/str_cat.h>

#include "tests/eval/kernel_testing.h"

namespace graft::eval {
namespace {

using testing::parse_text;
using testing::same_outputs;

constexpr const char* kImports = R"(<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>)";

// Runs both models on the same seeded random inputs (several seeds) and expects equal outputs.
void expect_same(const std::string& fused, const std::string& reference, double rtol = 1e-4,
                 double atol = 1e-5) {
  auto a = parse_text(fused);
  auto b = parse_text(reference);
  ASSERT_TRUE(a && b);
  for (uint32_t seed : {1u, 2u, 3u})
    EXPECT_EQ(same_outputs(*b, *a, seed, rtol, atol), "") << "seed " << seed;
}

TEST(ContribKernels, SkipLayerNormalizationIsAddThenLayerNorm) {
  const std::string sig =
      R"(g (float[2,3,4] x, float[2,3,4] s) => (float[2,3,4] y, float[2,3,4] sum)
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}, float[4] beta = {0.1, 0.2, 0.3, -0.4},
       float[4] bias = {1, -1, 0.5, 0}>)";
  expect_same(std::string(kImports) + sig + R"( {
      y, m, iv, sum = com.microsoft.SkipLayerNormalization <epsilon = 1e-5> (x, s, gamma, beta, bias)
    })",
              std::string(kImports) + sig + R"( {
      a = Add (x, s)
      sum = Add (a, bias)
      y = LayerNormalization <axis = -1, epsilon = 1e-5> (sum, gamma, beta)
    })");
}

TEST(ContribKernels, SkipLayerNormalizationBroadcastsSkipOverTheBatch) {
  const std::string sig = R"(g (float[2,3,4] x, float[3,4] s) => (float[2,3,4] y)
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}>)";
  expect_same(std::string(kImports) + sig + R"( {
      y = com.microsoft.SkipLayerNormalization <epsilon = 1e-5> (x, s, gamma)
    })",
              std::string(kImports) + sig + R"( {
      a = Add (x, s)
      y = LayerNormalization <axis = -1, epsilon = 1e-5> (a, gamma)
    })");
}

TEST(ContribKernels, SkipSimplifiedLayerNormalizationIsAddThenRms) {
  const std::string sig = R"(g (float[2,3,4] x, float[2,3,4] s) => (float[2,3,4] y)
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}, float eps = {1e-6}, float two = {2.0}>)";
  expect_same(std::string(kImports) + sig + R"( {
      y = com.microsoft.SkipSimplifiedLayerNormalization <epsilon = 1e-6> (x, s, gamma)
    })",
              std::string(kImports) + sig + R"( {
      a = Add (x, s)
      p = Pow (a, two)
      m = ReduceMean <axes = [-1]> (p)
      e = Add (m, eps)
      r = Sqrt (e)
      n = Div (a, r)
      y = Mul (n, gamma)
    })");
}

TEST(ContribKernels, GelusMatchTheirFormulas) {
  const std::string sig = R"(g (float[2,3,4] x) => (float[2,3,4] y)
      <float[4] b = {0.5, -1.0, 2.0, 0}, float half = {0.5}, float one = {1.0},
       float rt2 = {1.4142135623730951}, float c = {0.7978845608028654}, float k = {0.044715},
       float three = {3.0}, float alpha = {1.702}>)";
  const std::string imports = kImports;
  // BiasGelu: erf GELU of x + b.
  expect_same(imports + sig + " { y = com.microsoft.BiasGelu (x, b) }", imports + sig + R"( {
      u = Add (x, b)
      d = Div (u, rt2)
      e = Erf (d)
      t = Add (e, one)
      p = Mul (u, t)
      y = Mul (p, half)
    })");
  // FastGelu with a bias: tanh GELU of x + b.
  expect_same(imports + sig + " { y = com.microsoft.FastGelu (x, b) }", imports + sig + R"( {
      u = Add (x, b)
      u3 = Pow (u, three)
      ku3 = Mul (u3, k)
      s = Add (u, ku3)
      cs = Mul (s, c)
      th = Tanh (cs)
      t = Add (th, one)
      p = Mul (u, t)
      y = Mul (p, half)
    })");
  // QuickGelu: x * sigmoid(1.702 x).
  expect_same(imports + sig + " { y = com.microsoft.QuickGelu (x) }", imports + sig + R"( {
      ax = Mul (x, alpha)
      sg = Sigmoid (ax)
      y = Mul (x, sg)
    })");
}

TEST(ContribKernels, FusedMatMulTransposesAndScales) {
  const std::string sig = R"(g (float[2,4,3] a, float[5,4] b) => (float[2,3,5] y)
      <float alpha = {0.25}>)";
  expect_same(std::string(kImports) + sig + R"( {
      y = com.microsoft.FusedMatMul <alpha = 0.25, transA = 1, transB = 1> (a, b)
    })",
              std::string(kImports) + sig + R"( {
      at = Transpose <perm = [0, 2, 1]> (a)
      bt = Transpose <perm = [1, 0]> (b)
      p = MatMul (at, bt)
      y = Mul (p, alpha)
    })");
}

// Self-attention over x [2, 3, 4] with 2 heads of 2: the reference is the decomposition
// exporters write, with the additive bias `ab` [2, 1, 3, 3].
constexpr const char* kAttentionWeights = R"(
      <float[4,12] w = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.9, 1.0, -1.1, 1.2,
                        0.2, 0.1, -0.4, 0.3, 0.6, -0.5, 0.8, 0.7, -1.0, 0.9, 1.2, -1.1,
                        -0.3, 0.4, 0.1, -0.2, 0.7, 0.8, -0.5, 0.6, 1.1, -1.2, 0.9, 1.0,
                        0.4, 0.3, -0.2, 0.1, -0.8, 0.7, 0.6, -0.5, 1.2, 1.1, -1.0, 0.9},
       float[12] bias = {0.01, 0.02, 0.03, 0.04, -0.01, -0.02, -0.03, -0.04, 0.1, 0.2, 0.3, 0.4},
       int64[4] split = {0, 0, 2, 2}, int64[3] merge = {0, 0, 4}, float scale = {0.7071067811865476},
       int64[1] k0 = {0}, int64[1] k4 = {4}, int64[1] k8 = {8}, int64[1] k12 = {12},
       int64[1] axis1 = {1}>)";

std::string attention_reference(const std::string& sig, const std::string& mask_add) {
  return std::string(kImports) + sig + kAttentionWeights + R"( {
      p = MatMul (x, w)
      pb = Add (p, bias)
      two = Constant <value = int64[1] {2}> ()
      qp = Slice (pb, k0, k4, two)
      kp = Slice (pb, k4, k8, two)
      vp = Slice (pb, k8, k12, two)
      q2 = Reshape (qp, split)
      q = Transpose <perm = [0, 2, 1, 3]> (q2)
      k2 = Reshape (kp, split)
      kt = Transpose <perm = [0, 2, 3, 1]> (k2)
      v2 = Reshape (vp, split)
      v = Transpose <perm = [0, 2, 1, 3]> (v2)
      s0 = MatMul (q, kt)
      s1 = Mul (s0, scale)
)" + mask_add +
         R"(
      pr = Softmax <axis = -1> (s2)
      c0 = MatMul (pr, v)
      c1 = Transpose <perm = [0, 2, 1, 3]> (c0)
      y = Reshape (c1, merge)
    })";
}

TEST(ContribKernels, AttentionIsScaledDotProductAttention) {
  const std::string sig = "g (float[2,3,4] x) => (float[2,3,4] y)";
  expect_same(std::string(kImports) + sig + kAttentionWeights +
                  " { y = com.microsoft.Attention <num_heads = 2> (x, w, bias) }",
              attention_reference(sig, "s2 = Identity (s1)"));
}

TEST(ContribKernels, AttentionAddsAttentionBias) {
  const std::string sig = "g (float[2,3,4] x, float[2,1,3,3] ab) => (float[2,3,4] y)";
  expect_same(std::string(kImports) + sig + kAttentionWeights +
                  " { y = com.microsoft.Attention <num_heads = 2, scale = 0.7071067811865476> "
                  "(x, w, bias, , , ab) }",
              attention_reference(sig, "s2 = Add (s1, ab)"));
}

TEST(ContribKernels, AttentionUnidirectionalMasksTheFuture) {
  const std::string sig = "g (float[2,3,4] x) => (float[2,3,4] y)";
  // The causal mask as an additive constant: -10000 above the diagonal (mask_filter_value).
  expect_same(
      std::string(kImports) + sig + kAttentionWeights +
          " { y = com.microsoft.Attention <num_heads = 2, unidirectional = 1> (x, w, bias) }",
      attention_reference(sig, R"(
      causal = Constant <value = float[3,3] {0, -10000, -10000, 0, 0, -10000, 0, 0, 0}> ()
      s2 = Add (s1, causal))"));
}

TEST(ContribKernels, AttentionRawMaskFiltersPaddedKeys) {
  // mask_index (batch, total) int32: 0 marks a padded key, which gets mask_filter_value.
  const std::string fused =
      std::string(kImports) + "g (float[2,3,4] x) => (float[2,3,4] y)" + kAttentionWeights + R"( {
      m = Constant <value = int32[2,3] {1, 1, 0, 1, 1, 1}> ()
      y = com.microsoft.Attention <num_heads = 2, mask_filter_value = -10000.0> (x, w, bias, m)
    })";
  const std::string reference = attention_reference("g (float[2,3,4] x) => (float[2,3,4] y)", R"(
      add = Constant <value = float[2,1,1,3] {0, 0, -10000, 0, 0, 0}> ()
      s2 = Add (s1, add))");
  expect_same(fused, reference);
}

TEST(ContribKernels, AttentionWithPastConcatenatesKeysAndValues) {
  // present = (2, B, N, P + S, H) holds past then the new keys (values); the output attends over
  // all P + S positions. Checked against the same attention over [past ; new] written out.
  const std::string sig =
      "g (float[2,3,4] x, float[2,2,2,1,2] past) => (float[2,3,4] y, float[2,2,2,4,2] present)";
  const std::string fused =
      std::string(kImports) + sig + kAttentionWeights +
      " { y, present = com.microsoft.Attention <num_heads = 2> (x, w, bias, , past) }";
  const std::string reference = std::string(kImports) + sig + kAttentionWeights + R"( {
      p = MatMul (x, w)
      pb = Add (p, bias)
      two = Constant <value = int64[1] {2}> ()
      qp = Slice (pb, k0, k4, two)
      kp = Slice (pb, k4, k8, two)
      vp = Slice (pb, k8, k12, two)
      q2 = Reshape (qp, split)
      q = Transpose <perm = [0, 2, 1, 3]> (q2)
      k2 = Reshape (kp, split)
      kn = Transpose <perm = [0, 2, 1, 3]> (k2)
      v2 = Reshape (vp, split)
      vn = Transpose <perm = [0, 2, 1, 3]> (v2)
      pk, pv = Split <axis = 0> (past)
      pk4 = Squeeze (pk, k0)
      pv4 = Squeeze (pv, k0)
      kall = Concat <axis = 2> (pk4, kn)
      vall = Concat <axis = 2> (pv4, vn)
      kt = Transpose <perm = [0, 1, 3, 2]> (kall)
      s0 = MatMul (q, kt)
      s2 = Mul (s0, scale)
      pr = Softmax <axis = -1> (s2)
      c0 = MatMul (pr, vall)
      c1 = Transpose <perm = [0, 2, 1, 3]> (c0)
      y = Reshape (c1, merge)
      ku = Unsqueeze (kall, k0)
      vu = Unsqueeze (vall, k0)
      present = Concat <axis = 0> (ku, vu)
    })";
  expect_same(fused, reference);
}

TEST(ContribKernels, MultiHeadAttentionAppendsToThePastAndAddsTheBias) {
  // q, k, v (2, 3, 4) in 2 heads of 2, pasts (2, 2, 1, 2), attention_bias (2, 1, 3, 4):
  // present = past then the new keys (values); the output attends over all 4 positions.
  const std::string sig =
      "g (float[2,3,4] q3, float[2,3,4] k3, float[2,3,4] v3, float[2,1,3,4] ab, float[2,2,1,2] pk, "
      "float[2,2,1,2] pv) => (float[2,3,4] y, float[2,2,4,2] present_key, float[2,2,4,2] "
      "present_value)";
  const std::string fused = std::string(kImports) + sig + R"( {
      y, present_key, present_value = com.microsoft.MultiHeadAttention <num_heads = 2, scale = 0.25>
          (q3, k3, v3, , , ab, pk, pv)
    })";
  const std::string reference = std::string(kImports) + sig +
                                R"( <int64[4] split = {0, 0, 2, 2}, int64[3] merge = {0, 0, 4},
      float scale = {0.25}> {
      q2 = Reshape (q3, split)
      q = Transpose <perm = [0, 2, 1, 3]> (q2)
      k2 = Reshape (k3, split)
      kn = Transpose <perm = [0, 2, 1, 3]> (k2)
      v2 = Reshape (v3, split)
      vn = Transpose <perm = [0, 2, 1, 3]> (v2)
      present_key = Concat <axis = 2> (pk, kn)
      present_value = Concat <axis = 2> (pv, vn)
      kt = Transpose <perm = [0, 1, 3, 2]> (present_key)
      s0 = MatMul (q, kt)
      s1 = Mul (s0, scale)
      s2 = Add (s1, ab)
      pr = Softmax <axis = -1> (s2)
      c0 = MatMul (pr, present_value)
      c1 = Transpose <perm = [0, 2, 1, 3]> (c0)
      y = Reshape (c1, merge)
    })";
  expect_same(fused, reference);
  // Without past or bias, the default scale 1/sqrt(H).
  const std::string plain_sig =
      "g (float[2,3,4] q3, float[2,3,4] k3, float[2,3,4] v3) => (float[2,3,4] y)";
  expect_same(std::string(kImports) + plain_sig +
                  " { y = com.microsoft.MultiHeadAttention <num_heads = 2> (q3, k3, v3) }",
              std::string(kImports) + plain_sig +
                  R"( <int64[4] split = {0, 0, 2, 2}, int64[3] merge = {0, 0, 4},
      float scale = {0.7071067811865476}> {
      q2 = Reshape (q3, split)
      q = Transpose <perm = [0, 2, 1, 3]> (q2)
      k2 = Reshape (k3, split)
      kt = Transpose <perm = [0, 2, 3, 1]> (k2)
      v2 = Reshape (v3, split)
      v = Transpose <perm = [0, 2, 1, 3]> (v2)
      s0 = MatMul (q, kt)
      s1 = Mul (s0, scale)
      pr = Softmax <axis = -1> (s1)
      c0 = MatMul (pr, v)
      c1 = Transpose <perm = [0, 2, 1, 3]> (c0)
      y = Reshape (c1, merge)
    })");
}

// Malformed operands: an error naming the op, never a crash or a wrong-size read.
TEST(ContribKernels, MalformedOperandsAreErrors) {
  struct Case {
    const char* what;
    std::string text;
    std::vector<Tensor> inputs;
  };
  const auto f = onnx::TensorProto::FLOAT;
  auto x3 = make<float>(f, {2, 3, 4}, {});
  std::vector<Case> cases = {
      {"skip of another shape",
       std::string(kImports) +
           R"(g (float[2,3,4] x, float[2,2,4] s, float[4] g) => (float[2,3,4] y) {
         y = com.microsoft.SkipLayerNormalization (x, s, g) })",
       {x3, make<float>(f, {2, 2, 4}, {}), make<float>(f, {4}, {})}},
      {"gamma of another size",
       std::string(kImports) +
           R"(g (float[2,3,4] x, float[2,3,4] s, float[3] g) => (float[2,3,4] y) {
         y = com.microsoft.SkipLayerNormalization (x, s, g) })",
       {x3, x3, make<float>(f, {3}, {})}},
      {"4-D input",
       std::string(kImports) +
           R"(g (float[1,2,3,4] x, float[1,2,3,4] s, float[4] g) => (float[1,2,3,4] y) {
         y = com.microsoft.SkipLayerNormalization (x, s, g) })",
       {make<float>(f, {1, 2, 3, 4}, {}), make<float>(f, {1, 2, 3, 4}, {}),
        make<float>(f, {4}, {})}},
      {"BiasGelu without bias",
       std::string(kImports) +
           R"(g (float[2,3,4] x) => (float[2,3,4] y) { y = com.microsoft.BiasGelu (x) })",
       {x3}},
      {"Attention without num_heads",
       std::string(kImports) + R"(g (float[2,3,4] x, float[4,12] w) => (float[2,3,4] y) {
         y = com.microsoft.Attention (x, w) })",
       {x3, make<float>(f, {4, 12}, {})}},
      {"Attention weights of the wrong width",
       std::string(kImports) + R"(g (float[2,3,4] x, float[4,10] w) => (float[2,3,4] y) {
         y = com.microsoft.Attention <num_heads = 2> (x, w) })",
       {x3, make<float>(f, {4, 10}, {})}},
      {"Attention heads not dividing the hidden size",
       std::string(kImports) + R"(g (float[2,3,4] x, float[4,12] w) => (float[2,3,4] y) {
         y = com.microsoft.Attention <num_heads = 3> (x, w) })",
       {x3, make<float>(f, {4, 12}, {})}},
      {"Attention past of the wrong shape",
       std::string(kImports) +
           R"(g (float[2,3,4] x, float[4,12] w, float[2,2,2,1,3] past) => (float[2,3,4] y) {
         y = com.microsoft.Attention <num_heads = 2> (x, w, , , past) })",
       {x3, make<float>(f, {4, 12}, {}), make<float>(f, {2, 2, 2, 1, 3}, {})}},
      {"Attention mask of another form",
       std::string(kImports) +
           R"(g (float[2,3,4] x, float[4,12] w, int32[2,1,3,3] m) => (float[2,3,4] y) {
         y = com.microsoft.Attention <num_heads = 2> (x, w, , m) })",
       {x3, make<float>(f, {4, 12}, {}),
        make<int32_t>(onnx::TensorProto::INT32, {2, 1, 3, 3}, {})}},
      {"Attention weights with a zero row count and huge width",
       std::string(kImports) + R"(g (float[2,3,0] x, float[0,3000000000] w) => (float[2,3,4] y) {
         y = com.microsoft.Attention <num_heads = 1> (x, w) })",
       {make<float>(f, {2, 3, 0}, {}), make<float>(f, {0, 3000000000}, {})}},
      {"MultiHeadAttention past_key without past_value",
       std::string(kImports) +
           R"(g (float[2,3,4] q, float[2,2,1,2] pk) => (float[2,3,4] y) {
         y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, q, q, , , , pk) })",
       {x3, make<float>(f, {2, 2, 1, 2}, {})}},
      {"MultiHeadAttention past of another head size",
       std::string(kImports) +
           R"(g (float[2,3,4] q, float[2,2,1,3] pk) => (float[2,3,4] y) {
         y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, q, q, , , , pk, pk) })",
       {x3, make<float>(f, {2, 2, 1, 3}, {})}},
      {"MultiHeadAttention key of another width",
       std::string(kImports) + R"(g (float[2,3,4] q, float[2,3,6] k) => (float[2,3,4] y) {
         y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, k, q) })",
       {x3, make<float>(f, {2, 3, 6}, {})}},
      {"MultiHeadAttention bias of the wrong shape",
       std::string(kImports) + R"(g (float[2,3,4] q, float[2,1,3,5] ab) => (float[2,3,4] y) {
         y = com.microsoft.MultiHeadAttention <num_heads = 2> (q, q, q, , , ab) })",
       {x3, make<float>(f, {2, 1, 3, 5}, {})}},
      {"MultiHeadAttention packed (no key)",
       std::string(kImports) + R"(g (float[2,3,4] q) => (float[2,3,4] y) {
         y = com.microsoft.MultiHeadAttention <num_heads = 2> (q) })",
       {x3}},
      {"MultiHeadAttention unidirectional",
       std::string(kImports) + R"(g (float[2,3,4] q) => (float[2,3,4] y) {
         y = com.microsoft.MultiHeadAttention <num_heads = 2, unidirectional = 1> (q, q, q) })",
       {x3}},
      {"MultiHeadAttention huge heads of nothing",
       std::string(kImports) +
           R"(g (float[2,3,0] q, float[2,3000000000,0] k) => (float[2,3,0] y) {
         y = com.microsoft.MultiHeadAttention <num_heads = 1> (q, k, k) })",
       {make<float>(f, {2, 3, 0}, {}), make<float>(f, {2, 3000000000, 0}, {})}},
      {"FusedMatMul inner dims differ",
       std::string(kImports) + R"(g (float[2,3] a, float[4,5] b) => (float[2,5] y) {
         y = com.microsoft.FusedMatMul (a, b) })",
       {make<float>(f, {2, 3}, {}), make<float>(f, {4, 5}, {})}},
  };
  for (const Case& c : cases) {
    std::vector<const Tensor*> in;
    for (const Tensor& t : c.inputs) in.push_back(&t);
    auto parsed = parse_text(c.text);
    ASSERT_TRUE(parsed) << c.what;
    auto result = run_kernel(*parsed->graph().nodes().at(0), in, Limits{});
    EXPECT_FALSE(result.ok()) << c.what;
    if (!result.ok()) {
      EXPECT_TRUE(absl::IsInvalidArgument(result.status()) ||
                  absl::IsUnimplemented(result.status()) ||
                  absl::IsResourceExhausted(result.status()))
          << c.what << ": " << result.status();
    }
  }
}

// GatherBlockQuantized: the rows gathered, then dequantized with their blocks' scales (and
// zero points), equal to DequantizeLinear of the whole table then Gather; negative ids count from
// the end. Malformed attributes and operands are errors.
TEST(ContribKernels, GatherBlockQuantizedIsDequantizeThenGather) {
  constexpr const char* kImports21 =
      R"(<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>)";
  std::string table, scales, zeros;
  for (int i = 0; i < 5 * 32; ++i) absl::StrAppend(&table, i ? ", " : "", (i * 7) % 16 - 8);
  for (int i = 0; i < 5 * 2; ++i) absl::StrAppend(&scales, i ? ", " : "", 0.125 * (i + 1));
  const std::string sig = absl::StrCat(R"(g (int64[3] ids) => (float[3, 32] y)
      <int4[5, 32] q = {)",
                                       table, R"(}, float[5, 2] s = {)", scales, "}>");
  expect_same(std::string(kImports21) + sig + R"( {
      y = com.microsoft.GatherBlockQuantized <block_size = 16> (q, ids, s)
    })",
              std::string(kImports21) + sig + R"( {
      d = DequantizeLinear <axis = 1, block_size = 16> (q, s)
      y = Gather (d, ids)
    })",
              0, 0);
  std::string utable, uzeros;
  for (int i = 0; i < 5 * 32; ++i) absl::StrAppend(&utable, i ? ", " : "", (i * 5) % 16);
  for (int i = 0; i < 5 * 2; ++i) absl::StrAppend(&uzeros, i ? ", " : "", (i * 3) % 16);
  const std::string usig = absl::StrCat(R"(g (int64[3] ids) => (float[3, 32] y)
      <uint4[5, 32] q = {)",
                                        utable, R"(}, float[5, 2] s = {)", scales,
                                        R"(}, uint4[5, 2] z = {)", uzeros, "}>");
  expect_same(std::string(kImports21) + usig + R"( {
      y = com.microsoft.GatherBlockQuantized <block_size = 16> (q, ids, s, z)
    })",
              std::string(kImports21) + usig + R"( {
      d = DequantizeLinear <axis = 1, block_size = 16> (q, s, z)
      y = Gather (d, ids)
    })",
              0, 0);

  // Errors, not crashes: block sizes, scales' dims, an index outside the table.
  Tensor q = make<int8_t>(ir::kInt4, {4, 32}, std::vector<int8_t>(128, 1));
  Tensor s = make<float>(onnx::TensorProto::FLOAT, {4, 2}, std::vector<float>(8, 0.5f));
  Tensor s_bad = make<float>(onnx::TensorProto::FLOAT, {4, 3}, std::vector<float>(12, 0.5f));
  Tensor ids = ints({0, -1});
  Tensor far = ints({4});
  const std::string node = std::string(kImports21) +
                           "g (int4[4, 32] q, int64[2] i, float[4, 2] s) => (float[2, 32] y) { y = "
                           "com.microsoft.GatherBlockQuantized <block_size = BS> (q, i, s) }";
  auto with_block = [&](const std::string& bs) {
    std::string t = node;
    t.replace(t.find("BS"), 2, bs);
    return t;
  };
  std::vector<Tensor> out;
  ASSERT_TRUE(run(with_block("16"), {&q, &ids, &s}, &out).ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2, 32}));
  EXPECT_EQ(out[0].get_double(0), 0.5);
  EXPECT_TRUE(absl::IsInvalidArgument(run(with_block("8"), {&q, &ids, &s}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(run(with_block("24"), {&q, &ids, &s}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(run(with_block("16"), {&q, &ids, &s_bad}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(run(with_block("16"), {&q, &far, &s}, &out)));
}

// MatMulNBits: A @ W with W read from 4-bit blocks along K, column by column (two values a byte,
// low nibble first, zero point 8 or given per block, packed two a byte), equal to
// DequantizeLinear of the same int4 (uint4) [K, N] matrix blocked along axis 0 then MatMul. K = 40
// is not a multiple of the block (16): the last block is padded. A bias is added per column.
// Malformed attributes and operands are errors.
TEST(ContribKernels, MatMulNBitsIsDequantizeThenMatMul) {
  constexpr const char* kImports21 =
      R"(<ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>)";
  constexpr int K = 40, N = 3, B = 16, kBlocks = 3;
  auto qv = [](int k, int n) { return (k * 7 + n * 5) % 16 - 8; };  // int4 values, [K, N]
  auto zv = [](int n, int kb) { return (n * 3 + kb * 5) % 16; };    // uint4 zero points
  std::string kn, ukn, packed, upacked, scales_kn, scales_n, zeros_kn, zeros_packed, bias;
  for (int k = 0; k < K; ++k)
    for (int n = 0; n < N; ++n) {
      absl::StrAppend(&kn, k + n ? ", " : "", qv(k, n));
      absl::StrAppend(&ukn, k + n ? ", " : "", qv(k, n) + 8);
    }
  for (int n = 0; n < N; ++n)
    for (int kb = 0; kb < kBlocks; ++kb)
      for (int e = 0; e < B; e += 2) {
        auto at = [&](int k) { return k < K ? qv(k, n) + 8 : 8; };
        const int k = kb * B + e;
        absl::StrAppend(&packed, n + kb + e ? ", " : "", at(k) | (at(k + 1) << 4));
      }
  upacked = packed;  // the same stored values, read against explicit zero points below
  for (int kb = 0; kb < kBlocks; ++kb)
    for (int n = 0; n < N; ++n) {
      absl::StrAppend(&scales_kn, kb + n ? ", " : "", 0.0625 * (kb * N + n + 1));
      absl::StrAppend(&zeros_kn, kb + n ? ", " : "", zv(n, kb));
    }
  for (int n = 0; n < N; ++n) {
    for (int kb = 0; kb < kBlocks; ++kb)
      absl::StrAppend(&scales_n, n + kb ? ", " : "", 0.0625 * (kb * N + n + 1));
    absl::StrAppend(&zeros_packed, n ? ", " : "", zv(n, 0) | (zv(n, 1) << 4), ", ", zv(n, 2));
    absl::StrAppend(&bias, n ? ", " : "", 0.5 * n - 0.25);
  }
  const std::string a_sig = "g (float[2, 2, 40] a) => (float[2, 2, 3] y)";
  // Zero point 8: the signed int4 values.
  expect_same(absl::StrCat(kImports21, a_sig, " <uint8[3, 3, 8] b = {", packed, "}, float[9] s = {",
                           scales_n, R"(}> {
      y = com.microsoft.MatMulNBits <K = 40, N = 3, bits = 4, block_size = 16,
                                     accuracy_level = 4> (a, b, s)
    })"),
              absl::StrCat(kImports21, a_sig, " <int4[40, 3] q = {", kn, "}, float[3, 3] s = {",
                           scales_kn, R"(}> {
      w = DequantizeLinear <axis = 0, block_size = 16> (q, s)
      y = MatMul (a, w)
    })"),
              1e-6, 1e-5);
  // Explicit zero points and a bias.
  expect_same(
      absl::StrCat(kImports21, a_sig, " <uint8[3, 3, 8] b = {", upacked, "}, float[3, 3] s = {",
                   scales_n, "}, uint8[6] z = {", zeros_packed, "}, float[3] c = {", bias, R"(}> {
      y = com.microsoft.MatMulNBits <K = 40, N = 3, bits = 4, block_size = 16> (a, b, s, z, , c)
    })"),
      absl::StrCat(kImports21, a_sig, " <uint4[40, 3] q = {", ukn, "}, float[3, 3] s = {",
                   scales_kn, "}, uint4[3, 3] z = {", zeros_kn, "}, float[3] c = {", bias,
                   R"(}> {
      w = DequantizeLinear <axis = 0, block_size = 16> (q, s, z)
      p = MatMul (a, w)
      y = Add (p, c)
    })"),
      1e-6, 1e-5);

  // Errors, not crashes.
  Tensor a = make<float>(onnx::TensorProto::FLOAT, {2, 40}, std::vector<float>(80, 0.5f));
  Tensor a_bad = make<float>(onnx::TensorProto::FLOAT, {2, 39}, std::vector<float>(78, 0.5f));
  Tensor b = make<uint8_t>(onnx::TensorProto::UINT8, {3, 3, 8}, std::vector<uint8_t>(72, 0x98));
  Tensor b_bad = make<uint8_t>(onnx::TensorProto::UINT8, {3, 2, 8}, std::vector<uint8_t>(48, 1));
  Tensor s = make<float>(onnx::TensorProto::FLOAT, {9}, std::vector<float>(9, 0.5f));
  Tensor s_bad = make<float>(onnx::TensorProto::FLOAT, {8}, std::vector<float>(8, 0.5f));
  const std::string node = std::string(kImports21) +
                           "g (float[2, 40] a, uint8[3, 3, 8] b, float[9] s) => (float[2, 3] y) { "
                           "y = com.microsoft.MatMulNBits <ATTRS> (a, b, s) }";
  auto with = [&](const std::string& attrs) {
    std::string t = node;
    t.replace(t.find("ATTRS"), 5, attrs);
    return t;
  };
  const std::string good = "K = 40, N = 3, bits = 4, block_size = 16";
  std::vector<Tensor> out;
  ASSERT_TRUE(run(with(good), {&a, &b, &s}, &out).ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2, 3}));
  EXPECT_DOUBLE_EQ(out[0].get_double(0), 20 * 0.5 * 0.5);  // stored 8, 9: 0 and 1 alternately
  EXPECT_TRUE(absl::IsInvalidArgument(run(with(good), {&a_bad, &b, &s}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(run(with(good), {&a, &b_bad, &s}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(run(with(good), {&a, &b, &s_bad}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      run(with("K = 40, N = 3, bits = 4, block_size = 8"), {&a, &b, &s}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      run(with("K = 40, N = 3, bits = 4, block_size = 24"), {&a, &b, &s}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      run(with("K = 40, N = 3, block_size = 16, accuracy_level = 5"), {&a, &b, &s}, &out)));
  EXPECT_TRUE(
      absl::IsInvalidArgument(run(with("K = 0, N = 3, block_size = 16"), {&a, &b, &s}, &out)));
  EXPECT_TRUE(
      absl::IsInvalidArgument(run(with("K = 40, N = 4, block_size = 16"), {&a, &b, &s}, &out)));
  EXPECT_TRUE(absl::IsUnimplemented(
      run(with("K = 40, N = 3, bits = 8, block_size = 16"), {&a, &b, &s}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      run(with("K = 40, N = 3, block_size = 9223372036854775807"), {&a, &b, &s}, &out)));
}

}  // namespace
}  // namespace graft::eval
