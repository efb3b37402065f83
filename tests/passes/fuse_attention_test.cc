// fuse_attention: scaled dot-product attention over 4-D heads becomes ONNX's Attention (opset
// 23). Every positive case runs on the reference evaluator before and after (the decomposition
// op by op, Attention with its kernel, itself checked in tests/eval/attention_kernel_test.cc).
// Opset 23 is newer than libonnx 1.12 knows, so the ONNX checker is skipped for these models.
#include <string>

#include "tests/testing.h"

namespace graft::testing {
namespace {

// Q (2, 2, 3, 4), K (2, 2, 5, 4) written as K^T by `kt_line`, V (2, 2, 5, 3); `scale_line`
// computes s1 from s0 and `mask_line` s2 from s1 (an empty line: the value passes as it is).
std::string sdpa(const std::string& inputs, const std::string& kt_line,
                 const std::string& scale_line, const std::string& mask_line,
                 const std::string& opset = "23") {
  std::string body = kt_line + "\n      s0 = MatMul (q, kt)\n";
  std::string last = "s0";
  if (!scale_line.empty()) {
    body += "      " + scale_line + "\n";
    last = "s1";
  }
  if (!mask_line.empty()) {
    std::string line = mask_line;
    for (size_t at; last != "s1" && (at = line.find("s1")) != std::string::npos;)
      line.replace(at, 2, last);
    body += "      " + line + "\n";
    last = "s2";
  }
  return R"(<ir_version: 10, opset_import: ["" : )" + opset + R"(]>
    g ()" +
         inputs +
         R"() => (float[2,2,3,3] y) <float c = {0.5}, float r = {2.0}, float fill = {-3.4028234663852886e38}> {
      )" +
         body + "      p = Softmax <axis = -1> (" + last + R"()
      y = MatMul (p, v)
    })";
}

const char* kQkv = "float[2,2,3,4] q, float[2,2,5,4] k, float[2,2,5,3] v";

TEST(FuseAttention, ScaledMaskedAttentionBecomesAttention) {
  // A padding mask (B, 1, 1, T) is expanded over the queries: ONNX Runtime's kernel wants the
  // mask's last two dims to be exactly (S, T).
  expect_rewrite(
      "fuse_attention",
      sdpa(std::string(kQkv) + ", float[2,1,1,5] m", "kt = Transpose <perm = [0, 1, 3, 2]> (k)",
           "s1 = Div (s0, r)", "s2 = Add (s1, m)"),
      R"(<ir_version: 10, opset_import: ["" : 23]>
    g (float[2,2,3,4] q, float[2,2,5,4] k, float[2,2,5,3] v, float[2,1,1,5] m)
        => (float[2,2,3,3] y)
      <float c = {0.5}, float fill = {-3.4028234663852886e38}, int64[4] shape = {1, 1, 3, 1}> {
      queries = Expand (m, shape)
      y = Attention <scale = 0.5> (q, k, v, queries)
    })",
      rewrites(1));
}

TEST(FuseAttention, KeysSplitIntoHeadsAreTransposedOnceAndTheMaskMayComeFirst) {
  // K^T = Transpose(X, [0, 2, 3, 1]) of X (B, T, N, H): K is Transpose(X, [0, 2, 1, 3]).
  auto m = run_rewrite(
      "fuse_attention",
      sdpa("float[2,2,3,4] q, float[2,5,2,4] x, float[2,2,5,3] v, float[2,2,3,5] m",
           "kt = Transpose <perm = [0, 2, 3, 1]> (x)", "s1 = Mul (c, s0)", "s2 = Add (m, s1)"),
      rewrites(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "Attention"), 1);
  EXPECT_EQ(count_ops(*m, "Transpose"), 1);
  EXPECT_EQ(count_ops(*m, "Softmax"), 0);
  EXPECT_EQ(count_ops(*m, "MatMul"), 0);
}

TEST(FuseAttention, UnscaledUnmaskedWithAnyKeyTransposeAndOneSharedKeyValueHead) {
  // K^T is a graph input: K = Transpose(K^T, [0, 1, 3, 2]) is added. One key/value head that
  // MatMul broadcasts over the two query heads: Attention's kv heads = 1.
  auto m = run_rewrite("fuse_attention",
                       sdpa("float[2,2,3,4] q, float[2,1,4,5] kt, float[2,1,5,3] v", "", "", ""),
                       rewrites(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "Attention"), 1);
  EXPECT_EQ(count_ops(*m, "Transpose"), 1);
}

TEST(FuseAttention, TheScaleSplitOntoQAndKIsOneScale) {
  // torch's export of scaled_dot_product_attention: Q * sqrt(s) and K^T * sqrt(s), s = 1/2 here.
  std::string text = sdpa(kQkv,
                          "kt0 = Transpose <perm = [0, 1, 3, 2]> (k)\n      qs = Mul (q, h)\n"
                          "      kt = Mul (h, kt0)",
                          "", "");
  text.replace(text.find("s0 = MatMul (q, kt)"), 19, "s0 = MatMul (qs, kt)");
  text.replace(text.find("<float c = {0.5},"), 17,
               "<float h = {0.7071067811865476}, float c = {0.5},");
  auto m = run_rewrite("fuse_attention", text, rewrites(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "Attention"), 1);
  EXPECT_EQ(count_ops(*m, "Mul"), 0);
  EXPECT_EQ(count_ops(*m, "Transpose"), 0);  // K^T's Transpose undone: Attention takes K
  for (const ir::Node* n : m->graph().nodes()) {
    if (n->op_type() == "Attention") {
      EXPECT_FLOAT_EQ(n->attr_float("scale", 0.0f), 0.5f);
    }
  }
  // Only constant scalars move into the scale: a Mul by a tensor (per batch here) stays, and
  // what it computes is attention's Q and K^T.
  const std::string scalar = "<float h = {0.7071067811865476},";
  text.replace(text.find(scalar), scalar.size(), "<float[2,1,1,1] h = {0.7, 0.8},");
  m = run_rewrite("fuse_attention", text, rewrites(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "Mul"), 2);
  for (const ir::Node* n : m->graph().nodes()) {
    if (n->op_type() == "Attention") {
      EXPECT_FLOAT_EQ(n->attr_float("scale", 0.0f), 1.0f);
    }
  }
}

TEST(FuseAttention, CausalWhereAndPaddingMaskBecomeOneAdditiveMask) {
  // GPT-2: Where(causal, scores, float's lowest) + the padding mask -> Attention with
  // Where(causal, mask, lowest + mask).
  auto m = run_rewrite("fuse_attention",
                       sdpa(std::string(kQkv) + ", bool[1,1,3,5] allowed, float[2,1,1,5] m",
                            "kt = Transpose <perm = [0, 1, 3, 2]> (k)", "s1 = Div (s0, r)",
                            "w = Where (allowed, s1, fill)\n      s2 = Add (w, m)"),
                       rewrites(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "Attention"), 1);
  EXPECT_EQ(count_ops(*m, "Where"), 1);
  EXPECT_EQ(count_ops(*m, "Softmax"), 0);
  // Without the padding mask: Where(causal, 0, lowest).
  m = run_rewrite(
      "fuse_attention",
      sdpa(std::string(kQkv) + ", bool[3,5] allowed", "kt = Transpose <perm = [0, 1, 3, 2]> (k)",
           "s1 = Div (s0, r)", "s2 = Where (allowed, s1, fill)"),
      rewrites(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "Attention"), 1);
  EXPECT_EQ(count_ops(*m, "Add"), 0);
  // A fill that a score could be near (-10000 is above -1e30), or not a constant: left alone.
  std::string near =
      sdpa(std::string(kQkv) + ", bool[3,5] allowed", "kt = Transpose <perm = [0, 1, 3, 2]> (k)",
           "s1 = Div (s0, r)", "s2 = Where (allowed, s1, fill)");
  near.replace(near.find("-3.4028234663852886e38"), 22, "-10000");
  expect_no_rewrite("fuse_attention", near);
  expect_no_rewrite("fuse_attention", sdpa(std::string(kQkv) + ", bool[3,5] allowed, float low",
                                           "kt = Transpose <perm = [0, 1, 3, 2]> (k)",
                                           "s1 = Div (s0, r)", "s2 = Where (allowed, s1, low)"));
}

TEST(FuseAttention, MasksAreShapedForOnnxRuntimesKernel) {
  const std::string kt = "kt = Transpose <perm = [0, 1, 3, 2]> (k)";
  // A symbolic query length: the padding mask is expanded by Q's dim 2 read at run time.
  auto m =
      run_rewrite("fuse_attention",
                  sdpa("float[2,2,S,4] q, float[2,2,5,4] k, float[2,2,5,3] v, float[2,1,1,5] m", kt,
                       "s1 = Mul (s0, c)", "s2 = Add (s1, m)"),
                  rewrites(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "Expand"), 1);
  EXPECT_EQ(count_ops(*m, "Shape"), 1);
  // A full (B, 1, S, T) mask needs nothing.
  m = run_rewrite("fuse_attention",
                  sdpa("float[2,2,3,4] q, float[2,2,5,4] k, float[2,2,5,3] v, float[3,5] m", kt,
                       "s1 = Mul (s0, c)", "s2 = Add (s1, m)"),
                  rewrites(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "Expand"), 0);
  // Refused: a mask of one key broadcast over the keys, a per-head mask where one key/value
  // head is shared, a rank-1 mask.
  expect_no_rewrite("fuse_attention",
                    sdpa("float[2,2,3,4] q, float[2,2,5,4] k, float[2,2,5,3] v, float[2,1,3,1] m",
                         kt, "s1 = Mul (s0, c)", "s2 = Add (s1, m)"));
  expect_no_rewrite("fuse_attention",
                    sdpa("float[2,2,3,4] q, float[2,1,5,4] k, float[2,1,5,3] v, float[2,2,3,5] m",
                         kt, "s1 = Mul (s0, c)", "s2 = Add (s1, m)"));
  expect_no_rewrite("fuse_attention",
                    sdpa("float[2,2,3,4] q, float[2,2,5,4] k, float[2,2,5,3] v, float[5] m", kt,
                         "s1 = Mul (s0, c)", "s2 = Add (s1, m)"));
}

TEST(FuseAttention, LookAlikesAreLeftAlone) {
  const std::string kt = "kt = Transpose <perm = [0, 1, 3, 2]> (k)";
  // Opset 22 has no Attention.
  expect_no_rewrite("fuse_attention", sdpa(kQkv, kt, "s1 = Mul (s0, c)", "", "22"));
  // Softmax over another axis.
  std::string other_axis = sdpa(kQkv, kt, "s1 = Mul (s0, c)", "");
  other_axis.replace(other_axis.find("axis = -1"), 9, "axis = 2 ");
  expect_no_rewrite("fuse_attention", other_axis);
  // The scores are read elsewhere too (an extra graph output).
  std::string read_twice = sdpa(kQkv, kt, "s1 = Mul (s0, c)", "");
  read_twice.replace(read_twice.find("(float[2,2,3,3] y)"), 18,
                     "(float[2,2,3,3] y, float[2,2,3,5] s1)");
  expect_no_rewrite("fuse_attention", read_twice);
  // A mask that broadcasts the scores to more batches than Q has.
  expect_no_rewrite("fuse_attention",
                    sdpa("float[1,2,3,4] q, float[1,2,5,4] k, float[1,2,5,3] v, float[2,1,1,5] m",
                         kt, "s1 = Mul (s0, c)", "s2 = Add (s1, m)"),
                    compare_outputs(Outputs::kNotCompared));
  // Q's batch of 1 broadcast against K's batch of 2 by MatMul: Attention does not broadcast.
  expect_no_rewrite(
      "fuse_attention",
      sdpa("float[1,2,3,4] q, float[2,2,5,4] k, float[2,2,5,3] v", kt, "s1 = Mul (s0, c)", ""),
      compare_outputs(Outputs::kNotCompared));
  // A scale that is not a constant.
  expect_no_rewrite("fuse_attention",
                    sdpa(std::string(kQkv) + ", float w", kt, "s1 = Mul (s0, w)", ""));
  // Double: ONNX Runtime's CPU kernel takes float and float16.
  std::string dbl = sdpa(kQkv, kt, "", "");
  for (size_t at; (at = dbl.find("float[")) != std::string::npos;) dbl.replace(at, 5, "double");
  expect_no_rewrite("fuse_attention", dbl);
}

}  // namespace
}  // namespace graft::testing
