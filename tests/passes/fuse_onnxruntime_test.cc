// fuse_onnxruntime: attention and skip-LayerNorm blocks become ONNX Runtime's com.microsoft ops,
// for target onnxruntime only and only where the target's kernel table has the op for the
// element type.
//
// Every positive case is compared on the reference evaluator before and after (run_rewrite /
// expect_rewrite), which runs the decomposition op by op and the fused op with its kernel
// (core/eval/kernels/contrib.cc, itself checked against decompositions in
// tests/eval/contrib_kernels_test.cc). The ONNX checker accepts the results: nodes of a custom
// domain are checked for their domain's import only.
#include <cmath>
#include <string>

#include "tests/passes/rotary_model.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

// Self-attention over x [2, 3, 4] with 2 heads of 2, as exporters write it: three projections
// with biases, heads split by Reshape + Transpose, Q K^T scaled by a constant, an additive mask
// (`mask_line` computes s2 from s1), Softmax, times V, heads merged.
std::string attention_model(const std::string& inputs, const std::string& mask_line,
                            const std::string& type = "float", const std::string& extra = "") {
  return R"(<ir_version: 8, opset_import: ["" : 17]>
    g ()" +
         inputs + ") => (" + type + R"([2,3,4] y)
      <)" +
         type +
         R"([4,4] wq = {0.1, -0.2, 0.3, 0.4, -0.5, 0.6, 0.7, -0.8, 0.9, 1.0, -1.1, 1.2, 0.2, 0.1, -0.4, 0.3},
       )" +
         type +
         R"([4,4] wk = {0.6, -0.5, 0.8, 0.7, -1.0, 0.9, 1.2, -1.1, -0.3, 0.4, 0.1, -0.2, 0.7, 0.8, -0.5, 0.6},
       )" +
         type +
         R"([4,4] wv = {1.1, -1.2, 0.9, 1.0, 0.4, 0.3, -0.2, 0.1, -0.8, 0.7, 0.6, -0.5, 1.2, 1.1, -1.0, 0.9},
       )" +
         type + R"([4] bq = {0.01, 0.02, 0.03, 0.04}, )" + type +
         R"([4] bk = {-0.01, -0.02, -0.03, -0.04},
       )" +
         type + R"([4] bv = {0.1, 0.2, 0.3, 0.4}, )" + type + R"( scale = {0.7071067811865476},
       int64[4] split = {0, 0, 2, 2}, int64[3] merge = {0, 0, 4})" +
         extra + R"(> {
      q0 = MatMul (x, wq)
      q1 = Add (q0, bq)
      q2 = Reshape (q1, split)
      q = Transpose <perm = [0, 2, 1, 3]> (q2)
      k0 = MatMul (x, wk)
      k1 = Add (bk, k0)
      k2 = Reshape (k1, split)
      kt = Transpose <perm = [0, 2, 3, 1]> (k2)
      v0 = MatMul (x, wv)
      v1 = Add (v0, bv)
      v2 = Reshape (v1, split)
      v = Transpose <perm = [0, 2, 1, 3]> (v2)
      s0 = MatMul (q, kt)
      s1 = Mul (s0, scale)
      )" +
         mask_line + R"(
      p = Softmax <axis = -1> (s2)
      c0 = MatMul (p, v)
      c1 = Transpose <perm = [0, 2, 1, 3]> (c0)
      y = Reshape (c1, merge)
    })";
}

// `text` (float16 graph inputs and outputs, float initializers: ONNX 1.12's text parser cannot
// write float16 literals) with every float initializer made float16.
std::unique_ptr<ir::Model> float16_weights(const std::string& text) {
  auto model = parse_text(text);
  if (!model) return nullptr;
  for (ir::Value* v : model->graph().initializers()) {
    if (v->initializer()->data_type() != onnx::TensorProto::FLOAT) continue;
    auto values = ir::read_doubles(*v->initializer());
    EXPECT_TRUE(values);
    std::vector<int64_t> dims(v->initializer()->dims().begin(), v->initializer()->dims().end());
    v->set_initializer(ir::make_float_tensor(onnx::TensorProto::FLOAT16, dims, *values));
  }
  EXPECT_EQ(onnx_errors(*model), "");
  return model;
}

// The scale attribute of the model's one com.microsoft Attention (NaN and a failure if none).
float attention_scale(const ir::Model& model) {
  for (const ir::Node* n : model.graph().nodes())
    if (n->op_type() == "Attention") return n->attr_float("scale", 0.0f);
  ADD_FAILURE() << "no Attention";
  return NAN;
}

TEST(FuseOnnxRuntime, AttentionWithPaddingMaskBecomesAttention) {
  // A (B, 1, 1, T) padding mask: expanded over the query axis into attention_bias.
  auto m = run_rewrite(
      "fuse_onnxruntime",
      attention_model("float[2,3,4] x, float[2,1,1,3] mask", "s2 = Add (s1, mask)"), rewrites(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "Attention"), 1);
  EXPECT_EQ(count_ops(*m, "Expand"), 1);
  EXPECT_EQ(count_ops(*m, "Softmax"), 0);
  EXPECT_EQ(count_ops(*m, "MatMul"), 0);
  EXPECT_EQ(m->opset("com.microsoft"), 1);
}

TEST(FuseOnnxRuntime, AttentionWithTheQueryScaledAfterItsProjection) {
  // Whisper's encoder: q = (x Wq + bq) * head_dim^-0.5, and no scale on the scores; the key
  // projection without bias. The scale moves into the op's scale.
  std::string text =
      attention_model("float[2,3,4] x", "s2 = Identity (s1)", "float", ", float qscale = {0.5}");
  text.replace(text.find("q2 = Reshape (q1, split)"), 24,
               "qs = Mul (qscale, q1)\n      q2 = Reshape (qs, split)");
  text.replace(text.find("k1 = Add (bk, k0)"), 17, "");
  text.replace(text.find("k2 = Reshape (k1, split)"), 24, "k2 = Reshape (k0, split)");
  text.replace(text.find("s1 = Mul (s0, scale)"), 20, "");
  text.replace(text.find("s2 = Identity (s1)"), 18, "");
  text.replace(text.find("Softmax <axis = -1> (s2)"), 24, "Softmax <axis = -1> (s0)");
  auto m = run_rewrite("fuse_onnxruntime", text, rewrites(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "Attention"), 1);
  EXPECT_EQ(count_ops(*m, "Mul"), 0);
  EXPECT_FLOAT_EQ(attention_scale(*m), 0.5f);
}

TEST(FuseOnnxRuntime, AttentionWithTheScaleSplitOntoQAndK) {
  // torch's export of scaled_dot_product_attention: Q * sqrt(s) and K^T * sqrt(s) (s = 1/sqrt(H)
  // computed from the head size, constants once it is known), no scale on the scores.
  std::string text = attention_model("float[2,3,4] x", "s2 = Identity (s0)", "float",
                                     ", float root = {0.8408964152537145}");
  text.replace(text.find("s0 = MatMul (q, kt)"), 19,
               "qs = Mul (q, root)\n      kts = Mul (root, kt)\n      s0 = MatMul (qs, kts)");
  text.replace(text.find("s1 = Mul (s0, scale)"), 20, "");
  text.replace(text.find("s2 = Identity (s0)"), 18, "");
  text.replace(text.find("Softmax <axis = -1> (s2)"), 24, "Softmax <axis = -1> (s0)");
  auto m = run_rewrite("fuse_onnxruntime", text, rewrites(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "Attention"), 1);
  EXPECT_EQ(count_ops(*m, "Mul"), 0);
  EXPECT_FLOAT_EQ(attention_scale(*m), 0.70710677f);
}

TEST(FuseOnnxRuntime, AttentionWithoutMaskAndDivByScale) {
  // Scores divided by sqrt(H) instead of multiplied: scale = 1 / 1.4142...
  std::string text = attention_model("float[2,3,4] x", "s2 = Identity (s1)", "float",
                                     ", float root = {1.4142135623730951}");
  text.replace(text.find("s1 = Mul (s0, scale)"), 20, "s1 = Div (s0, root) ");
  text.replace(text.find("s2 = Identity (s1)"), 18, "");
  text.replace(text.find("Softmax <axis = -1> (s2)"), 24, "Softmax <axis = -1> (s1)");
  auto m = run_rewrite("fuse_onnxruntime", text, rewrites(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "Attention"), 1);
  EXPECT_EQ(count_ops(*m, "Expand"), 0);
  // The one node left computes y.
  EXPECT_EQ(m->graph().num_nodes(), 1u);
}

TEST(FuseOnnxRuntime, AttentionWithFullMaskNeedsNoExpand) {
  auto m = run_rewrite(
      "fuse_onnxruntime",
      attention_model("float[2,3,4] x, float[2,1,3,3] mask", "s2 = Add (mask, s1)"), rewrites(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "Attention"), 1);
  EXPECT_EQ(count_ops(*m, "Expand"), 0);
}

TEST(FuseOnnxRuntime, AttentionMaskComputedByAMulOnTheFirstSide) {
  // A one-layer model: the padding mask (1 - m) * -10000 is a Mul read only by the scores' Add,
  // written first; the scores (a Mul of Q K^T) are the other operand.
  std::string text = attention_model("float[2,3,4] x, float[2,1,1,3] m",
                                     "d = Sub (one, m)\n      mask = Mul (d, big)\n"
                                     "      s2 = Add (mask, s1)",
                                     "float", ", float one = {1.0}, float big = {-10000.0}");
  auto model = run_rewrite("fuse_onnxruntime", text, rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Attention"), 1);
  EXPECT_EQ(count_ops(*model, "Sub"), 1);  // the mask's arithmetic stays, as attention_bias
}

TEST(FuseOnnxRuntime, AttentionLookAlikesStay) {
  // Target onnx (the default): nothing is emitted.
  expect_no_rewrite(PassRef("fuse_onnxruntime").for_target("onnx"),
                    attention_model("float[2,3,4] x", "s2 = Identity (s1)"));
  // A per-head mask (B, N, S, T): not an attention_bias this rule writes.
  expect_no_rewrite("fuse_onnxruntime",
                    attention_model("float[2,3,4] x, float[2,2,3,3] mask", "s2 = Add (s1, mask)"));
  // Cross-attention: K and V from another input.
  {
    std::string text = attention_model("float[2,3,4] x, float[2,3,4] z", "s2 = Identity (s1)");
    text.replace(text.find("k0 = MatMul (x, wk)"), 19, "k0 = MatMul (z, wk)");
    expect_no_rewrite("fuse_onnxruntime", text);
  }
  // Softmax over another axis.
  {
    std::string text = attention_model("float[2,3,4] x", "s2 = Identity (s1)");
    text.replace(text.find("Softmax <axis = -1>"), 19, "Softmax <axis = 2> ");
    expect_no_rewrite("fuse_onnxruntime", text);
  }
  // The scores are also a graph output: they cannot be absorbed.
  {
    std::string text = attention_model("float[2,3,4] x", "s2 = Identity (s1)");
    text.replace(text.find("=> (float[2,3,4] y)"), 19, "=> (float[2,3,4] y, float[2,2,3,3] s1)");
    expect_no_rewrite("fuse_onnxruntime", text);
  }
  // float16: Attention has no float16 kernel on ONNX Runtime's CPU provider.
  {
    std::string text = attention_model("float16[2,3,4] x", "s2 = Identity (s1)");
    text.replace(text.find("(float[2,3,4] y)"), 16, "(float16[2,3,4] y)");
    auto model = float16_weights(text);
    ASSERT_TRUE(model);
    EXPECT_EQ(run_pass(*model, "fuse_onnxruntime").rewrites, 0);
    EXPECT_EQ(count_ops(*model, "Attention"), 0);
  }
}

// ------------------------------------------------------------------------------ skip_layer_norm
//
// Off by default (measured slower under ONNX Runtime 1.30 on CPU): these cases ask for it.

const PassOptions kSkip = {{"fusions", "skip_layer_norm"}};

RewriteOptions skip_options(int64_t count = -1) {
  RewriteOptions o;
  o.pass_options = kSkip;
  o.rewrites = count;
  return o;
}

constexpr const char* kPostNorm = R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] x, float[2,3,4] r) => (float[2,3,4] y)
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}, float[4] beta = {0.1, 0.2, 0.3, -0.4}> {
      a = Add (x, r)
      y = LayerNormalization <axis = -1, epsilon = 1e-5> (a, gamma, beta)
    }
  )";

TEST(FuseOnnxRuntime, SkipLayerNormIsNotADefaultFusion) {
  expect_no_rewrite("fuse_onnxruntime", kPostNorm);
}

TEST(FuseOnnxRuntime, PostNormResidualBecomesSkipLayerNormalization) {
  expect_rewrite("fuse_onnxruntime", R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] x, float[2,3,4] r) => (float[2,3,4] y)
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}, float[4] beta = {0.1, 0.2, 0.3, -0.4}> {
      a = Add (x, r)
      y = LayerNormalization <axis = -1, epsilon = 1e-5> (a, gamma, beta)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
    g (float[2,3,4] x, float[2,3,4] r) => (float[2,3,4] y)
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}, float[4] beta = {0.1, 0.2, 0.3, -0.4}> {
      y = com.microsoft.SkipLayerNormalization <epsilon = 1e-5> (x, r, gamma, beta)
    }
  )",
                 skip_options(1));
}

TEST(FuseOnnxRuntime, ProjectionBiasMovesIntoSkipLayerNormalization) {
  expect_rewrite("fuse_onnxruntime", R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] x, float[2,3,4] r) => (float[2,3,4] y)
      <float[4,4] w = {1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1},
       float[4] b = {0.5, -0.5, 0.25, 0}, float[4] gamma = {0.5, 1.0, -2.0, 3.0}> {
      p = MatMul (x, w)
      pb = Add (b, p)
      a = Add (r, pb)
      y = LayerNormalization <axis = -1, epsilon = 1e-5> (a, gamma)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
    g (float[2,3,4] x, float[2,3,4] r) => (float[2,3,4] y)
      <float[4,4] w = {1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 1, 1},
       float[4] b = {0.5, -0.5, 0.25, 0}, float[4] gamma = {0.5, 1.0, -2.0, 3.0}> {
      p = MatMul (x, w)
      y = com.microsoft.SkipLayerNormalization <epsilon = 1e-5> (r, p, gamma, , b)
    }
  )",
                 skip_options(1));
}

TEST(FuseOnnxRuntime, PreNormResidualKeepsTheSumAsFourthOutput) {
  // The sum feeds the next residual Add too (a pre-LN stream): output 3 carries it.
  auto m = run_rewrite("fuse_onnxruntime", R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] x, float[2,3,4] r) => (float[2,3,4] y, float[2,3,4] z)
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}> {
      a = Add (x, r)
      y = LayerNormalization <axis = -1, epsilon = 1e-5> (a, gamma)
      z = Mul (a, a)
    }
  )",
                       skip_options(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "SkipLayerNormalization"), 1);
  EXPECT_EQ(count_ops(*m, "Add"), 0);
}

TEST(FuseOnnxRuntime, SkipLayerNormLookAlikesStay) {
  const std::string over_two_axes = R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] x, float[2,3,4] r) => (float[2,3,4] y)
      <float[3,4] gamma = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}> {
      a = Add (x, r)
      y = LayerNormalization <axis = -2> (a, gamma)
    }
  )";
  expect_no_rewrite("fuse_onnxruntime", over_two_axes, skip_options());
  // A skip broadcast over the sequence (B, 1, H) is not a form the op takes.
  expect_no_rewrite("fuse_onnxruntime", R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] x, float[2,1,4] r) => (float[2,3,4] y)
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}> {
      a = Add (x, r)
      y = LayerNormalization <axis = -1> (a, gamma)
    }
  )",
                    skip_options());
  const std::string fp16 = R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float16[2,3,4] x, float16[2,3,4] r) => (float16[2,3,4] y)
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}> {
      a = Add (x, r)
      y = LayerNormalization <axis = -1> (a, gamma)
    }
  )";
  // float16 SkipLayerNormalization is in the CPU provider from 1.18 by the kernel table, so
  // an older target gets nothing and the default one gets the fusion.
  auto old = float16_weights(fp16);
  ASSERT_TRUE(old);
  EXPECT_EQ(
      run_pass(*old, PassRef("fuse_onnxruntime").for_target("onnxruntime:1.17"), kSkip).rewrites,
      0);
  auto m = float16_weights(fp16);
  ASSERT_TRUE(m);
  auto before = m->clone();
  EXPECT_EQ(run_pass(*m, "fuse_onnxruntime", kSkip).rewrites, 1);
  EXPECT_EQ(count_ops(*m, "SkipLayerNormalization"), 1);
  EXPECT_EQ(same_outputs(*before, *m, 1, 1e-2, 1e-2), "");
}

// ------------------------------------------------------------------------ attention_with_cache
// A decoder's self-attention with a KV cache, as GPT-2's export writes it: q3, k3, v3 (1, 2, 4)
// split into 2 heads of 2, the new keys and values appended to the pasts (1, 2, 3, 2) along the
// sequence (the present outputs), scores scaled and masked, Softmax, times V, heads merged.
// `mask_lines` compute `mask` (1, 1, 2, 5).
std::string cached_attention(const std::string& mask_lines = "",
                             const std::string& mask_input = ", float[1,1,2,5] mask",
                             const std::string& extra = "") {
  return R"(<ir_version: 8, opset_import: ["" : 17]>
    g (float[1,2,4] q3, float[1,2,4] k3, float[1,2,4] v3, float[1,2,3,2] past_key,
       float[1,2,3,2] past_value)" +
         mask_input +
         R"() => (float[1,2,4] y, float[1,2,5,2] present_key, float[1,2,5,2] present_value)
      <int64[4] split = {0, 0, 2, 2}, int64[3] merge = {0, 0, 4}, float half = {0.5})" +
         extra + R"(> {)" + mask_lines + R"(
      q4 = Reshape (q3, split)
      q = Transpose <perm = [0, 2, 1, 3]> (q4)
      k4 = Reshape (k3, split)
      k = Transpose <perm = [0, 2, 1, 3]> (k4)
      v4 = Reshape (v3, split)
      v = Transpose <perm = [0, 2, 1, 3]> (v4)
      present_key = Concat <axis = 2> (past_key, k)
      present_value = Concat <axis = -2> (past_value, v)
      kt = Transpose <perm = [0, 1, 3, 2]> (present_key)
      s0 = MatMul (q, kt)
      s1 = Mul (s0, half)
      s2 = Add (s1, mask)
      p = Softmax <axis = -1> (s2)
      c0 = MatMul (p, present_value)
      c1 = Transpose <perm = [0, 2, 1, 3]> (c0)
      y = Reshape (c1, merge)
    })";
}

// attention_with_cache is off by default (measured no faster, docs/performance.md).
const PassOptions kWithCache = {{"fusions", "attention,attention_with_cache,rotary_embedding"}};

RewriteOptions with_cache(int64_t count) {
  RewriteOptions o = rewrites(count);
  o.pass_options = kWithCache;
  return o;
}

TEST(FuseOnnxRuntime, AttentionWithACacheIsNotADefaultFusion) {
  expect_no_rewrite("fuse_onnxruntime", cached_attention());
}

TEST(FuseOnnxRuntime, AttentionWithACacheBecomesMultiHeadAttention) {
  expect_rewrite("fuse_onnxruntime", cached_attention(),
                 R"(<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
    g (float[1,2,4] q3, float[1,2,4] k3, float[1,2,4] v3, float[1,2,3,2] past_key,
       float[1,2,3,2] past_value, float[1,1,2,5] mask)
      => (float[1,2,4] y, float[1,2,5,2] present_key, float[1,2,5,2] present_value)
      <int64[3] merge = {0, 0, 4}, int64[4] heads = {0, 0, 2, 2}> {
      o, present_key, present_value = com.microsoft.MultiHeadAttention <num_heads = 2, scale = 0.5>
          (q3, k3, v3, , , mask, past_key, past_value)
      o4 = Reshape (o, heads)
      y = Reshape (o4, merge)
    })",
                 with_cache(1));
}

TEST(FuseOnnxRuntime, ACacheLengthReadOffTheCacheIsComputedFromThePast) {
  // GPT-2 slices its causal mask to the total length read off the keys' cache: that Shape is
  // computed from the past and the new keys (reading the op's present would form a cycle), and a
  // one-row padding mask is expanded over the queries.
  const std::string lines = R"(
      total = Shape <start = 2, end = 3> (present_key)
      causal = Slice (table, zero, total, three)
      mask = Add (causal, pad))";
  auto m = run_rewrite("fuse_onnxruntime",
                       cached_attention(lines, ", float[1,1,1,5] pad",
                                        ", float[1,1,2,8] table = {0, 0, 0, 0, -1e9, -1e9, -1e9, "
                                        "-1e9, 0, 0, 0, 0, 0, -1e9, -1e9, -1e9}, int64[1] zero = "
                                        "{0}, int64[1] three = {3}"),
                       with_cache(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "MultiHeadAttention"), 1);
  EXPECT_EQ(count_ops(*m, "Concat"), 0);
  EXPECT_EQ(count_ops(*m, "Softmax"), 0);
  const ir::Node* shape = producer(*m, "total");
  ASSERT_NE(shape, nullptr);
  EXPECT_EQ(shape->op_type(), "Add");  // Shape(past_key)[2:3] + 1 * Shape(k3)[1:2]
}

TEST(FuseOnnxRuntime, AttentionWithACacheLookAlikesStay) {
  // Fewer key/value heads than query heads (grouped-query attention's caches): another pattern.
  std::string gqa = cached_attention();
  gqa = with(gqa, "float[1,2,3,2] past_key", "float[1,1,3,2] past_key");
  gqa = with(gqa, "float[1,2,3,2] past_value", "float[1,1,3,2] past_value");
  gqa = with(gqa, "float[1,2,4] k3, float[1,2,4] v3", "float[1,2,2] k3, float[1,2,2] v3");
  gqa = with(gqa, "int64[3] merge = {0, 0, 4},",
             "int64[3] merge = {0, 0, 4}, int64[4] kvsplit = {0, 0, 1, 2},");
  gqa = with(gqa, "k4 = Reshape (k3, split)", "k4 = Reshape (k3, kvsplit)");
  gqa = with(gqa, "v4 = Reshape (v3, split)", "v4 = Reshape (v3, kvsplit)");
  gqa = with(gqa, "float[1,2,5,2] present_key, float[1,2,5,2] present_value",
             "float[1,1,5,2] present_key, float[1,1,5,2] present_value");
  expect_no_rewrite("fuse_onnxruntime", gqa, with_cache(-1));
  // The cache read by another op than the attention and Shape.
  std::string read =
      with(cached_attention(), "=> (float[1,2,4] y,", "=> (float[1,2,5,2] twice, float[1,2,4] y,");
  read = with(read, "      y = Reshape (c1, merge)",
              "      y = Reshape (c1, merge)\n      twice = Add (present_key, present_key)");
  expect_no_rewrite("fuse_onnxruntime", read, with_cache(-1));
  // A target without the kernel (MultiHeadAttention's CPU kernel: ONNX Runtime 1.15).
  expect_no_rewrite(PassRef("fuse_onnxruntime").for_target("onnxruntime:1.14"), cached_attention(),
                    with_cache(-1));
}

TEST(FuseOnnxRuntime, RotatedQueriesAndKeysWithACacheAreRotatedIn3D) {
  // LLaMA: Q and K rotated in heads (RotaryEmbedding, as this pass's rotary rule writes it) are
  // rotated in MultiHeadAttention's 3-D form instead (num_heads = 2).
  std::string text = cached_attention("", ", float[1,1,2,5] mask, int64[1,2] ids",
                                      ", float[8,1] cos = {1, 0.5, 0.25, 0, -0.25, -0.5, -0.75, "
                                      "-1}, float[8,1] sin = {0, 0.8, 0.9, 1, 0.9, 0.8, 0.6, 0}");
  text =
      with(text, R"(opset_import: ["" : 17])", R"(opset_import: ["" : 17, "com.microsoft" : 1])");
  text = with(text, "      q = Transpose <perm = [0, 2, 1, 3]> (q4)",
              "      qh = Transpose <perm = [0, 2, 1, 3]> (q4)\n      q = "
              "com.microsoft.RotaryEmbedding (qh, ids, cos, sin)");
  text = with(text, "      k = Transpose <perm = [0, 2, 1, 3]> (k4)",
              "      kh = Transpose <perm = [0, 2, 1, 3]> (k4)\n      k = "
              "com.microsoft.RotaryEmbedding (kh, ids, cos, sin)");
  auto m = run_rewrite("fuse_onnxruntime", text, with_cache(1));
  ASSERT_TRUE(m);
  EXPECT_EQ(count_ops(*m, "MultiHeadAttention"), 1);
  EXPECT_EQ(count_ops(*m, "Transpose"), 0);
  int rotated = 0;
  for (const ir::Node* n : m->graph().nodes()) {
    if (n->op_type() != "RotaryEmbedding") continue;
    ++rotated;
    EXPECT_EQ(n->attr_int("num_heads", 0), 2);
    EXPECT_TRUE(n->input(0)->name() == "q3" || n->input(0)->name() == "k3");
  }
  EXPECT_EQ(rotated, 2);
}

// ---------------------------------------------------------------------------- rotary_embedding
// The rotary block of tests/passes/rotary_model.h (its matcher's cases are in
// tests/passes/patterns/rotary_test.cc; fuse_blocks' rule, which shares it, has the look-alikes).

const PassOptions kRotary = {{"fusions", "rotary_embedding"}};

RewriteOptions rotary_options(int64_t count) {
  RewriteOptions o;
  o.pass_options = kRotary;
  o.rewrites = count;
  return o;
}

std::string rotary_at17(bool equal_halves = true) {
  RotaryBlock b;
  b.opset = 17;
  b.equal_halves = equal_halves;
  return rotary_block(b);
}

TEST(FuseOnnxRuntime, RotaryBecomesRotaryEmbedding) {
  expect_rewrite("fuse_onnxruntime", rotary_at17(),
                 absl::StrCat(R"(<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
    g (float[2,2,3,4] x, int64[2,3] ids) => (float[2,2,3,4] y) <)",
                              rotary_caches_decl(), R"(> {
      y = com.microsoft.RotaryEmbedding (x, ids, cos_cache, sin_cache)
    })"),
                 rotary_options(1));
}

TEST(FuseOnnxRuntime, RotaryOverTablesSlicedAtRunTime) {
  // transformers' cos_cached[:seq_len]: the caches are the whole tables' first halves and the
  // Slices, with the length computed for them, are gone.
  expect_rewrite("fuse_onnxruntime", rotary_sliced(rotary_at17()),
                 absl::StrCat(R"(<ir_version: 8, opset_import: ["" : 17, "com.microsoft" : 1]>
    g (float[2,2,3,4] x, int64[2,3] ids) => (float[2,2,3,4] y) <)",
                              rotary_caches_decl(), R"(> {
      y = com.microsoft.RotaryEmbedding (x, ids, cos_cache, sin_cache)
    })"),
                 rotary_options(1));
}

TEST(FuseOnnxRuntime, RotaryInsideIfBranch) {
  auto model = run_rewrite("fuse_onnxruntime", rotary_inside_if(rotary_at17()), rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "RotaryEmbedding"), 1);
  EXPECT_EQ(count_ops(*model, "Concat"), 0);
}

TEST(FuseOnnxRuntime, RotaryIsADefaultFusion) {
  auto model = run_rewrite("fuse_onnxruntime", rotary_at17(), rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "RotaryEmbedding"), 1);
}

TEST(FuseOnnxRuntime, RotaryLookAlikesStay) {
  // Target onnx: nothing is emitted.
  expect_no_rewrite(PassRef("fuse_onnxruntime").for_target("onnx"), rotary_at17(),
                    rotary_options(-1));
  // Tables whose halves differ.
  expect_no_rewrite("fuse_onnxruntime", rotary_at17(false), rotary_options(-1));
  // Not asked for.
  RewriteOptions attention_only;
  attention_only.pass_options = {{"fusions", "attention"}};
  expect_no_rewrite("fuse_onnxruntime", rotary_at17(), attention_only);
}

TEST(FuseOnnxRuntime, RotaryAsksTheKernelTable) {
  // ONNX Runtime 1.16's kernel takes 3-D inputs only: the 4-D form waits for 1.17.
  expect_no_rewrite(PassRef("fuse_onnxruntime").for_target("onnxruntime:1.16"), rotary_at17(),
                    rotary_options(-1));
  auto model = parse_text(rotary_at17());
  ASSERT_TRUE(model);
  EXPECT_EQ(run_pass(*model, PassRef("fuse_onnxruntime").for_target("onnxruntime:1.17"), kRotary)
                .rewrites,
            1);
  // float16 from 1.20.
  const std::string fp16 = with(with(rotary_at17(), "g (float[2,2,3,4] x", "g (float16[2,2,3,4] x"),
                                "=> (float[2,2,3,4] y)", "=> (float16[2,2,3,4] y)");
  auto old = float16_weights(fp16);
  ASSERT_TRUE(old);
  EXPECT_EQ(
      run_pass(*old, PassRef("fuse_onnxruntime").for_target("onnxruntime:1.19"), kRotary).rewrites,
      0);
  auto m = float16_weights(fp16);
  ASSERT_TRUE(m);
  auto before = m->clone();
  EXPECT_EQ(
      run_pass(*m, PassRef("fuse_onnxruntime").for_target("onnxruntime:1.20"), kRotary).rewrites,
      1);
  EXPECT_EQ(count_ops(*m, "RotaryEmbedding"), 1);
  EXPECT_EQ(same_outputs(*before, *m, 1, 1e-2, 1e-2), "");
}

}  // namespace
}  // namespace graft::testing
