// fuse_blocks: decomposed LayerNormalization, Gelu and RMSNormalization blocks become the op.
//
// Every positive case is compared on the reference evaluator before and after (expect_rewrite /
// run_rewrite), which runs the decomposition op by op and the fused op with its own kernel.
//
// The ONNX checker: libonnx here is ONNX 1.12 and knows opsets up to 17. LayerNormalization
// cases (opset 17) are checked by it, schema and shape inference included; for the Gelu (opset
// 20) and RMSNormalization (opset 23) cases onnx_errors() answers "skipped: opset ... is newer"
// and run_rewrite skips the check, so there it cannot tell whether the fused node fits its
// schema: the attributes and inputs are pinned by the golden text instead, and the kernels check
// them (tests/eval/norm_kernels_test.cc). Shape facts at those opsets rest on Graft's own rules
// and the graph inputs' declarations (rank facts, known_dim), which these models give.
#include <string>

#include "tests/passes/rotary_model.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

// ---------------------------------------------------------------------------------------------
// LayerNormalization

// A LayerNormalization block over the last axis of x as PyTorch exports it (opset 17: axes as
// an attribute), with gamma and beta.
std::string layer_norm_block(int opset, const std::string& signature, const std::string& extra,
                             const std::string& body_end) {
  return "<ir_version: 8, opset_import: [\"\" : " + std::to_string(opset) + "]>\n" + signature +
         R"(
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}, float[4] beta = {0.1, 0.2, 0.3, -0.4},
       float eps = {1e-5}, float two = {2.0})" +
         extra + R"(> {
      m = ReduceMean <axes = [-1]> (x)
      d = Sub (x, m)
      p = Pow (d, two)
      v = ReduceMean <axes = [-1]> (p)
      a = Add (v, eps)
      s = Sqrt (a)
      n = Div (d, s)
)" + body_end +
         "}";
}

constexpr const char* kAffine = R"(
      z = Mul (n, gamma)
      y = Add (z, beta)
)";

TEST(FuseBlocks, LayerNormWithGammaAndBeta) {
  expect_rewrite("fuse_blocks",
                 layer_norm_block(17, "g (float[2,3,4] x) => (float[2,3,4] y)", "", kAffine),
                 R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] x) => (float[2,3,4] y)
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}, float[4] beta = {0.1, 0.2, 0.3, -0.4}> {
      y = LayerNormalization <axis = -1, epsilon = 1e-5> (x, gamma, beta)
    }
  )",
                 rewrites(1));
}

TEST(FuseBlocks, LayerNormReciprocalMulSquareAndAxesInputAtOpset18) {
  // d * Reciprocal(s), Mul(d, d) for the square, gamma and beta first, ReduceMean's axes as an
  // input (opset 18), positive axes over the last two of three: axis = -2, Scale [3, 4].
  expect_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[2,3,4] x) => (float[2,3,4] y)
      <int64[2] axes = {1, 2}, float[3,4] gamma = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
       float[3,4] beta = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}, float[1] eps = {1e-3}> {
      m = ReduceMean (x, axes)
      d = Sub (x, m)
      p = Mul (d, d)
      v = ReduceMean (p, axes)
      a = Add (eps, v)
      s = Sqrt (a)
      r = Reciprocal (s)
      n = Mul (r, d)
      z = Mul (gamma, n)
      y = Add (beta, z)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[2,3,4] x) => (float[2,3,4] y)
      <float[3,4] gamma = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
       float[3,4] beta = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}> {
      y = LayerNormalization <axis = -2, epsilon = 1e-3> (x, gamma, beta)
    }
  )",
                 rewrites(1));
}

TEST(FuseBlocks, LayerNormWithoutAffineGetsOnesScale) {
  // No gamma: Scale is all ones of the normalized shape (ONNX Runtime wants its exact size).
  // Also 1 / s (before simplify_arithmetic makes it a Reciprocal).
  expect_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[5,3] x) => (float[5,3] y) <float eps = {1e-5}, float two = {2.0}, float one = {1.0}> {
      m = ReduceMean <axes = [1]> (x)
      d = Sub (x, m)
      p = Pow (d, two)
      v = ReduceMean <axes = [1]> (p)
      a = Add (v, eps)
      s = Sqrt (a)
      r = Div (one, s)
      y = Mul (d, r)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[5,3] x) => (float[5,3] y) <float[3] scale = {1, 1, 1}> {
      y = LayerNormalization <axis = -1, epsilon = 1e-5> (x, scale)
    }
  )",
                 rewrites(1));
}

TEST(FuseBlocks, LayerNormGammaWithLeadingOnesIsReshapedAndGammaOnly) {
  // gamma [1,1,4] broadcasts over x's outer axes only: Scale becomes [4]. No beta: the Mul ends
  // the block. (The template's own gamma and beta are not read here; pruning them is not this
  // pass's job.)
  expect_rewrite("fuse_blocks",
                 layer_norm_block(17, "g (float[2,3,4] x) => (float[2,3,4] y)",
                                  ", float[1,1,4] g3 = {1, 2, 3, 4}", R"(
      y = Mul (n, g3)
)"),
                 R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] x) => (float[2,3,4] y)
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}, float[4] beta = {0.1, 0.2, 0.3, -0.4},
       float[4] g4 = {1, 2, 3, 4}> {
      y = LayerNormalization <axis = -1, epsilon = 1e-5> (x, g4)
    }
  )",
                 rewrites(1));
}

TEST(FuseBlocks, LayerNormRuntimeGammaAndSymbolicBatch) {
  // gamma and beta may be values (here graph inputs) of exactly the normalized shape; the batch
  // dim may be symbolic, only the normalized dims must be known.
  expect_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[N,4] x, float[4] gm, float[4] bt) => (float[N,4] y)
      <float eps = {1e-5}, float two = {2.0}> {
      m = ReduceMean <axes = [-1]> (x)
      d = Sub (x, m)
      p = Pow (d, two)
      v = ReduceMean <axes = [-1]> (p)
      a = Add (v, eps)
      s = Sqrt (a)
      n = Div (d, s)
      z = Mul (n, gm)
      y = Add (z, bt)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[N,4] x, float[4] gm, float[4] bt) => (float[N,4] y) {
      y = LayerNormalization <axis = -1, epsilon = 1e-5> (x, gm, bt)
    }
  )",
                 rewrites(1));
}

TEST(FuseBlocks, LayerNormFloat16KeepsFloatStash) {
  // float16: the fused op keeps its statistics in float (stash_type default), accepted. ONNX
  // 1.12's text parser cannot read float16 initializers, so the block's constants are float
  // Casts that fold_constants turns into float16 initializers first.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float16[2,8] x) => (float16[2,8] y)
      <float e32 = {1e-3}, float t32 = {2.0}, float[8] g32 = {1, 2, 3, 4, 5, 6, 7, 8}> {
      eps = Cast <to = 10> (e32)
      two = Cast <to = 10> (t32)
      gamma = Cast <to = 10> (g32)
      m = ReduceMean <axes = [-1]> (x)
      d = Sub (x, m)
      p = Pow (d, two)
      v = ReduceMean <axes = [-1]> (p)
      a = Add (v, eps)
      s = Sqrt (a)
      n = Div (d, s)
      y = Mul (n, gamma)
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "fold_constants");
  EXPECT_EQ(run_pass_checked(*model, "fuse_blocks").rewrites, 1);
  EXPECT_EQ(op_types(model->graph()), std::vector<std::string>{"LayerNormalization"});
  const ir::Node* ln = only_node(model->graph(), "LayerNormalization");
  ASSERT_TRUE(ln);
  EXPECT_EQ(ln->attr_int("stash_type", 1), 1);
  EXPECT_FLOAT_EQ(ln->attr_float("epsilon", 0), 0.0010004043579101562f);  // 1e-3 in float16
  EXPECT_EQ(ln->input(1)->elem_type(), onnx::TensorProto::FLOAT16);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseBlocks, LayerNormAndRmsNormOverflowAsTheirDecomposition) {
  // x scaled by 1e30: d * d (and x * x) exceed float's range, so the decomposition's variance is
  // infinity and its normalized values 0 (y = beta). The fused ops compute their steps in
  // stash_type float too (the kernels round each step), so they give the same outputs; kernels
  // that kept the statistics in double would give finite normalized values here and fail the
  // comparison.
  expect_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] in) => (float[2,3,4] y)
      <float big = {1e30}, float[4] gamma = {0.5, 1.0, -2.0, 3.0},
       float[4] beta = {0.1, 0.2, 0.3, -0.4}, float eps = {1e-5}> {
      x = Mul (in, big)
      m = ReduceMean <axes = [-1]> (x)
      d = Sub (x, m)
      p = Mul (d, d)
      v = ReduceMean <axes = [-1]> (p)
      a = Add (v, eps)
      s = Sqrt (a)
      n = Div (d, s)
      z = Mul (n, gamma)
      y = Add (z, beta)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] in) => (float[2,3,4] y)
      <float big = {1e30}, float[4] gamma = {0.5, 1.0, -2.0, 3.0},
       float[4] beta = {0.1, 0.2, 0.3, -0.4}> {
      x = Mul (in, big)
      y = LayerNormalization <axis = -1, epsilon = 1e-5> (x, gamma, beta)
    }
  )",
                 rewrites(1));
  expect_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 23]>
    g (float[2,3,4] in) => (float[2,3,4] y)
      <float big = {1e30}, int64[1] axes = {-1}, float eps = {1e-6},
       float[4] gamma = {0.5, 1.0, -2.0, 3.0}> {
      x = Mul (in, big)
      p = Mul (x, x)
      v = ReduceMean (p, axes)
      a = Add (v, eps)
      s = Sqrt (a)
      n = Div (x, s)
      y = Mul (n, gamma)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 23]>
    g (float[2,3,4] in) => (float[2,3,4] y)
      <float big = {1e30}, float[4] gamma = {0.5, 1.0, -2.0, 3.0}> {
      x = Mul (in, big)
      y = RMSNormalization <axis = -1, epsilon = 1e-6> (x, gamma)
    }
  )",
                 rewrites(1));
}

TEST(FuseBlocks, LayerNormInsideIfBranch) {
  expect_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (bool cond, float[2,4] x) => (float[2,4] y)
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}, float eps = {1e-5}, float two = {2.0}> {
      y = If (cond) <
        then_branch = then_g () => (float[2,4] t) {
          m = ReduceMean <axes = [-1]> (x)
          d = Sub (x, m)
          p = Pow (d, two)
          v = ReduceMean <axes = [-1]> (p)
          a = Add (v, eps)
          s = Sqrt (a)
          n = Div (d, s)
          t = Mul (n, gamma)
        },
        else_branch = else_g () => (float[2,4] e) {
          e = Identity (x)
        }>
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (bool cond, float[2,4] x) => (float[2,4] y) <float[4] gamma = {0.5, 1.0, -2.0, 3.0}> {
      y = If (cond) <
        then_branch = then_g () => (float[2,4] t) {
          t = LayerNormalization <axis = -1, epsilon = 1e-5> (x, gamma)
        },
        else_branch = else_g () => (float[2,4] e) {
          e = Identity (x)
        }>
    }
  )",
                 rewrites(1));
}

TEST(FuseBlocks, LayerNormKeepsAGammaThatBroadcastsInsideTheNormalizedAxes) {
  // Over the last two axes, gamma [4] would have to broadcast over axis 1 as Scale, which ONNX
  // Runtime refuses: the normalization is fused with a ones Scale and the Mul stays.
  auto model = run_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] x) => (float[2,3,4] y)
      <float[4] gamma = {0.5, 1.0, -2.0, 3.0}, float eps = {1e-5}, float two = {2.0}> {
      m = ReduceMean <axes = [-2, -1]> (x)
      d = Sub (x, m)
      p = Pow (d, two)
      v = ReduceMean <axes = [-1, -2]> (p)
      a = Add (v, eps)
      s = Sqrt (a)
      n = Div (d, s)
      y = Mul (n, gamma)
    }
  )",
                           rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(op_types(model->graph()), (std::vector<std::string>{"LayerNormalization", "Mul"}));
  const ir::Node* ln = only_node(model->graph(), "LayerNormalization");
  ASSERT_TRUE(ln);
  EXPECT_EQ(ln->attr_int("axis", 0), -2);
  EXPECT_EQ(dims_of(ln->input(1)), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(values_of(ln->input(1)), std::vector<double>(12, 1.0));
}

// x's normalized dim known only from a declaration on TopK's output, which facts never use: left
// alone at opset 17 and 18, where the Scale's size could be wrong.
TEST(FuseBlocks, LayerNormNeedsKnownNormalizedDims) {
  auto make = [](int opset) {
    const std::string axes = opset >= 18 ? "" : " <axes = [-1]>";
    const std::string axes_in = opset >= 18 ? ", ax" : "";
    auto model = parse_text(R"(
      <ir_version: 8, opset_import: ["" : )" +
                            std::to_string(opset) + R"(]>
      g (float[2,8] w, int64[1] k) => (float[2,4] y)
        <float eps = {1e-5}, float two = {2.0}, int64[1] ax = {-1}> {
        x, i = TopK (w, k)
        m = ReduceMean)" + axes +
                            " (x" + axes_in + R"()
        d = Sub (x, m)
        p = Pow (d, two)
        v = ReduceMean)" + axes +
                            " (p" + axes_in + R"()
        a = Add (v, eps)
        s = Sqrt (a)
        y = Div (d, s)
      }
    )");
    EXPECT_TRUE(model);
    if (model) model->graph().find_local("x")->set_type(float_type({2, 4}));
    return model;
  };
  for (int opset : {17, 18}) {
    auto model = make(opset);
    ASSERT_TRUE(model);
    EXPECT_FALSE(run_pass(*model, "fuse_blocks").changed) << opset;
  }
}

// Look-alikes.

TEST(FuseBlocks, LayerNormNeedsOpset17) {
  expect_no_rewrite("fuse_blocks",
                    layer_norm_block(16, "g (float[2,3,4] x) => (float[2,3,4] y)", "", kAffine));
}

TEST(FuseBlocks, LayerNormLookAlikesStay) {
  const std::string sig = "g (float[2,3,4] x) => (float[2,3,4] y)";
  // The two means over different axes.
  std::string text = layer_norm_block(17, sig, "", kAffine);
  text.replace(text.find("v = ReduceMean <axes = [-1]>"), 28, "v = ReduceMean <axes = [-2]>");
  expect_no_rewrite("fuse_blocks", text);
  // A non-trailing axis.
  text = layer_norm_block(17, sig, "", kAffine);
  for (size_t at = text.find("axes = [-1]"); at != std::string::npos; at = text.find("axes = [-1]"))
    text.replace(at, 11, "axes = [1]");
  expect_no_rewrite("fuse_blocks", text);
  // Means without kept dims cannot broadcast back the same way: the model computes something
  // else (and stays).
  text = layer_norm_block(17, sig, "", kAffine);
  text.replace(text.find("m = ReduceMean <axes = [-1]>"), 28,
               "m = ReduceMean <axes = [-1], keepdims = 0>");
  expect_no_rewrite("fuse_blocks", text, compare_outputs(Outputs::kNotCompared));
  // eps that is not a scalar.
  text = layer_norm_block(17, sig, "", kAffine);
  text.replace(text.find("float eps = {1e-5}"), 18,
               "float[2,3,1] eps = {1e-5, 1e-5, 1e-5, 1e-5, 1e-5, 1e-5}");
  expect_no_rewrite("fuse_blocks", text);
  // x - m not squared: Pow(d, 3).
  text = layer_norm_block(17, sig, "", kAffine);
  text.replace(text.find("float two = {2.0}"), 17, "float two = {3.0}");
  expect_no_rewrite("fuse_blocks", text);
  // Double: a float stash would lose precision.
  expect_no_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (double[2,4] x) => (double[2,4] y) <double eps = {1e-5}, double two = {2.0}> {
      m = ReduceMean <axes = [-1]> (x)
      d = Sub (x, m)
      p = Pow (d, two)
      v = ReduceMean <axes = [-1]> (p)
      a = Add (v, eps)
      s = Sqrt (a)
      y = Div (d, s)
    }
  )");
  // The normalized dim unknown: no Scale of its size can be made.
  expect_no_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,C] x) => (float[2,C] y) <float eps = {1e-5}, float two = {2.0}> {
      m = ReduceMean <axes = [-1]> (x)
      d = Sub (x, m)
      p = Pow (d, two)
      v = ReduceMean <axes = [-1]> (p)
      a = Add (v, eps)
      s = Sqrt (a)
      y = Div (d, s)
    }
  )");
}

TEST(FuseBlocks, LayerNormIntermediateWithAnotherReaderStays) {
  // d is also a graph output; then the variance read elsewhere.
  expect_no_rewrite(
      "fuse_blocks",
      layer_norm_block(17, "g (float[2,3,4] x) => (float[2,3,4] y, float[2,3,4] d)", "", kAffine));
  expect_no_rewrite("fuse_blocks",
                    layer_norm_block(17, "g (float[2,3,4] x) => (float[2,3,4] y, float[2,3,1] w)",
                                     "", std::string(kAffine) + "      w = Neg (v)\n"));
}

TEST(FuseBlocks, LayerNormBetaThatWouldGrowTheResultStaysOutside) {
  // beta [2,3,4] is not of the normalized shape: LayerNormalization(x, gamma) and the Add stays.
  auto model = run_rewrite("fuse_blocks",
                           layer_norm_block(17, "g (float[2,3,4] x) => (float[2,3,4] y)",
                                            ", float[2,1,4] wide = {1, 2, 3, 4, 5, 6, 7, 8}", R"(
      z = Mul (n, gamma)
      y = Add (z, wide)
)"),
                           rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(op_types(model->graph()), (std::vector<std::string>{"LayerNormalization", "Add"}));
}

// ---------------------------------------------------------------------------------------------
// Gelu (opset 20: the checker is skipped, see the top of the file)

TEST(FuseBlocks, GeluErfAsPyTorchExportsIt) {
  expect_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 20]>
    g (float[2,3] x) => (float[2,3] y)
      <float sqrt2 = {1.4142135381698608}, float one = {1.0}, float half = {0.5}> {
      u = Div (x, sqrt2)
      e = Erf (u)
      t = Add (e, one)
      p = Mul (x, t)
      y = Mul (p, half)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 20]>
    g (float[2,3] x) => (float[2,3] y) {
      y = Gelu (x)
    }
  )",
                 rewrites(1));
}

TEST(FuseBlocks, GeluErfOtherOrdersAndMulByInverseSqrt2) {
  // 0.5 * x first, then times (1 + erf(x * 0.70710678)); and x * (t * 0.5).
  expect_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 20]>
    g (float[2,3] x, float[3] w) => (float[2,3] y, float[3] z)
      <float isqrt2 = {0.70710678}, float one = {1.0}, float half = {0.5},
       float[1] sqrt2 = {1.41421356}> {
      u = Mul (isqrt2, x)
      e = Erf (u)
      t = Add (one, e)
      h = Mul (half, x)
      y = Mul (h, t)
      u2 = Div (w, sqrt2)
      e2 = Erf (u2)
      t2 = Add (e2, one)
      q = Mul (t2, half)
      z = Mul (w, q)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 20]>
    g (float[2,3] x, float[3] w) => (float[2,3] y, float[3] z) {
      y = Gelu (x)
      z = Gelu (w)
    }
  )",
                 rewrites(2));
}

TEST(FuseBlocks, GeluTanhWithPowAndWithProducts) {
  expect_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 20]>
    g (float[2,3] x, double[4] w) => (float[2,3] y, double[4] z)
      <float c = {0.7978845608}, float k = {0.044715}, float three = {3.0}, float one = {1.0},
       float half = {0.5}, double dc = {0.7978845608}, double dk = {0.044715},
       double done = {1.0}, double dhalf = {0.5}> {
      cube = Pow (x, three)
      kc = Mul (k, cube)
      inner = Add (x, kc)
      sc = Mul (c, inner)
      th = Tanh (sc)
      t = Add (th, one)
      h = Mul (half, x)
      y = Mul (h, t)
      sq = Mul (w, w)
      wc = Mul (sq, w)
      kw = Mul (wc, dk)
      in2 = Add (kw, w)
      s2 = Mul (in2, dc)
      th2 = Tanh (s2)
      t2 = Add (done, th2)
      p2 = Mul (w, t2)
      z = Mul (p2, dhalf)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 20]>
    g (float[2,3] x, double[4] w) => (float[2,3] y, double[4] z) {
      y = Gelu <approximate = "tanh"> (x)
      z = Gelu <approximate = "tanh"> (w)
    }
  )",
                 rewrites(2));
}

TEST(FuseBlocks, GeluInsideLoopBodyAndFunction) {
  // In a Loop body (the constants captured from the main graph) ...
  expect_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 20]>
    g (float[3] x) => (float[3] y)
      <int64 trips = {2}, bool go = {1}, float sqrt2 = {1.4142135381698608}, float one = {1.0},
       float half = {0.5}> {
      y = Loop (trips, go, x) <body = body (int64 i, bool c, float[3] acc) => (bool co, float[3] out) {
        co = Identity (c)
        u = Div (acc, sqrt2)
        e = Erf (u)
        t = Add (e, one)
        p = Mul (acc, t)
        out = Mul (p, half)
      }>
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 20]>
    g (float[3] x) => (float[3] y) <int64 trips = {2}, bool go = {1}> {
      y = Loop (trips, go, x) <body = body (int64 i, bool c, float[3] acc) => (bool co, float[3] out) {
        co = Identity (c)
        out = Gelu (acc)
      }>
    }
  )",
                 rewrites(1));
  // ... and in a model-local function, where the constants are Constant nodes.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 20, "local" : 1]>
    g (float[3] x) => (float[3] y) {
      y = local.MyGelu (x)
    }
    <domain: "local", opset_import: ["" : 20]>
    MyGelu (a) => (b) {
      sqrt2 = Constant <value = float {1.4142135381698608}> ()
      one = Constant <value = float {1.0}> ()
      half = Constant <value = float {0.5}> ()
      u = Div (a, sqrt2)
      e = Erf (u)
      t = Add (e, one)
      p = Mul (a, t)
      b = Mul (p, half)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_blocks");
  EXPECT_EQ(result.rewrites, 1);
  const ir::Graph& body = *model->functions()[0].body;
  EXPECT_EQ(op_types(body), std::vector<std::string>{"Gelu"});
}

TEST(FuseBlocks, GeluLookAlikesStay) {
  const std::string pytorch = R"(
    <ir_version: 8, opset_import: ["" : OPSET]>
    g (float[2,3] x) => (float[2,3] y)
      <float sqrt2 = {SQRT2}, float one = {1.0}, float half = {HALF}> {
      u = Div (x, sqrt2)
      e = Erf (u)
      t = Add (e, one)
      p = Mul (x, t)
      y = Mul (p, half)
    }
  )";
  auto variant = [&](const std::string& opset, const std::string& sqrt2, const std::string& half) {
    std::string text = pytorch;
    text.replace(text.find("OPSET"), 5, opset);
    text.replace(text.find("SQRT2"), 5, sqrt2);
    text.replace(text.find("HALF"), 4, half);
    return text;
  };
  // Sanity: the template itself fuses.
  run_rewrite("fuse_blocks", variant("20", "1.4142135381698608", "0.5"), rewrites(1));
  expect_no_rewrite("fuse_blocks", variant("19", "1.4142135381698608", "0.5"));  // no Gelu yet
  expect_no_rewrite("fuse_blocks", variant("20", "1.4142135381698608", "0.6"));  // not 0.5
  expect_no_rewrite("fuse_blocks", variant("20", "1.4142", "0.5"));  // sqrt(2) to 5 digits only
  // Erf of another value than the one multiplied.
  expect_no_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 20]>
    g (float[2,3] x, float[2,3] w) => (float[2,3] y)
      <float sqrt2 = {1.4142135381698608}, float one = {1.0}, float half = {0.5}> {
      u = Div (w, sqrt2)
      e = Erf (u)
      t = Add (e, one)
      p = Mul (x, t)
      y = Mul (p, half)
    }
  )");
  // The Erf read elsewhere too.
  expect_no_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 20]>
    g (float[2,3] x) => (float[2,3] y, float[2,3] e)
      <float sqrt2 = {1.4142135381698608}, float one = {1.0}, float half = {0.5}> {
      u = Div (x, sqrt2)
      e = Erf (u)
      t = Add (e, one)
      p = Mul (x, t)
      y = Mul (p, half)
    }
  )");
  // A 0.5 of rank 3 would broadcast x [2,3] to [1,2,3].
  expect_no_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 20]>
    g (float[2,3] x) => (float[1,2,3] y)
      <float sqrt2 = {1.4142135381698608}, float one = {1.0}, float[1,1,1] half = {0.5}> {
      u = Div (x, sqrt2)
      e = Erf (u)
      t = Add (e, one)
      p = Mul (x, t)
      y = Mul (p, half)
    }
  )");
  // tanh form with 0.04 instead of 0.044715.
  expect_no_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 20]>
    g (float[2,3] x) => (float[2,3] y)
      <float c = {0.7978845608}, float k = {0.04}, float three = {3.0}, float one = {1.0},
       float half = {0.5}> {
      cube = Pow (x, three)
      kc = Mul (k, cube)
      inner = Add (x, kc)
      sc = Mul (c, inner)
      th = Tanh (sc)
      t = Add (th, one)
      h = Mul (half, x)
      y = Mul (h, t)
    }
  )");
}

// ---------------------------------------------------------------------------------------------
// RMSNormalization (opset 23: the checker is skipped, see the top of the file)

TEST(FuseBlocks, RmsNormAsLlamaExportsIt) {
  // x^2, mean over the last axis (axes as an input), + eps, sqrt, 1 / s, x * r, gamma * y.
  expect_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 23]>
    g (float[2,3,4] x) => (float[2,3,4] y)
      <float two = {2.0}, int64[1] axes = {-1}, float eps = {1e-6}, float one = {1.0},
       float[4] gamma = {0.5, 1.0, -2.0, 3.0}> {
      p = Pow (x, two)
      v = ReduceMean (p, axes)
      a = Add (v, eps)
      s = Sqrt (a)
      r = Div (one, s)
      n = Mul (x, r)
      y = Mul (gamma, n)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 23]>
    g (float[2,3,4] x) => (float[2,3,4] y) <float[4] gamma = {0.5, 1.0, -2.0, 3.0}> {
      y = RMSNormalization <axis = -1, epsilon = 1e-6> (x, gamma)
    }
  )",
                 rewrites(1));
}

TEST(FuseBlocks, RmsNormDivWithoutGammaOverTwoAxes) {
  expect_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 23]>
    g (float[2,3,4] x) => (float[2,3,4] y) <int64[2] axes = {-2, -1}, float eps = {1e-5}> {
      p = Mul (x, x)
      v = ReduceMean (p, axes)
      a = Add (eps, v)
      s = Sqrt (a)
      y = Div (x, s)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 23]>
    g (float[2,3,4] x) => (float[2,3,4] y)
      <float[3,4] scale = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}> {
      y = RMSNormalization <axis = -2, epsilon = 1e-5> (x, scale)
    }
  )",
                 rewrites(1));
}

TEST(FuseBlocks, RmsNormNeedsOpset23AndLayerNormWinsThere) {
  const std::string rms = R"(
    <ir_version: 8, opset_import: ["" : OPSET]>
    g (float[2,4] x) => (float[2,4] y) <int64[1] axes = {-1}, float eps = {1e-5}> {
      p = Mul (x, x)
      v = ReduceMean (p, axes)
      a = Add (v, eps)
      s = Sqrt (a)
      y = Div (x, s)
    }
  )";
  std::string at22 = rms;
  at22.replace(at22.find("OPSET"), 5, "22");
  expect_no_rewrite("fuse_blocks", at22);
  // A centred block at opset 23 is a LayerNormalization, not an RMSNormalization of x - mean.
  auto model = run_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 23]>
    g (float[2,4] x) => (float[2,4] y) <int64[1] axes = {-1}, float eps = {1e-5}> {
      m = ReduceMean (x, axes)
      d = Sub (x, m)
      p = Mul (d, d)
      v = ReduceMean (p, axes)
      a = Add (v, eps)
      s = Sqrt (a)
      y = Div (d, s)
    }
  )",
                           rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(op_types(model->graph()), std::vector<std::string>{"LayerNormalization"});
}

TEST(FuseBlocks, RmsNormLookAlikesStay) {
  // x^2 of another value than the one divided.
  expect_no_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 23]>
    g (float[2,4] x, float[2,4] w) => (float[2,4] y) <int64[1] axes = {-1}, float eps = {1e-5}> {
      p = Mul (w, w)
      v = ReduceMean (p, axes)
      a = Add (v, eps)
      s = Sqrt (a)
      y = Div (x, s)
    }
  )");
  // Mean over the first axis.
  expect_no_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 23]>
    g (float[2,4] x) => (float[2,4] y) <int64[1] axes = {0}, float eps = {1e-5}> {
      p = Mul (x, x)
      v = ReduceMean (p, axes)
      a = Add (v, eps)
      s = Sqrt (a)
      y = Div (x, s)
    }
  )");
  // The Sqrt also read elsewhere.
  expect_no_rewrite("fuse_blocks", R"(
    <ir_version: 8, opset_import: ["" : 23]>
    g (float[2,4] x) => (float[2,4] y, float[2,1] s) <int64[1] axes = {-1}, float eps = {1e-5}> {
      p = Mul (x, x)
      v = ReduceMean (p, axes)
      a = Add (v, eps)
      s = Sqrt (a)
      y = Div (x, s)
    }
  )");
}

// ---------------------------------------------------------------------------------------------
// RotaryEmbedding (opset 23: the checker is skipped, see the top of the file). The matcher's own
// cases are in tests/passes/patterns/rotary_test.cc; the kernels are checked against the same
// decomposition in tests/eval/rotary_kernels_test.cc.

TEST(FuseBlocks, RotaryAsLlamaExportsIt) {
  expect_rewrite("fuse_blocks", rotary_block(),
                 absl::StrCat(R"(<ir_version: 8, opset_import: ["" : 23]>
    g (float[2,2,3,4] x, int64[2,3] ids) => (float[2,2,3,4] y) <)",
                              rotary_caches_decl(), R"(> {
      y = RotaryEmbedding (x, cos_cache, sin_cache, ids)
    })"),
                 rewrites(1));
}

TEST(FuseBlocks, RotaryOfQueriesAndKeysShareTheCaches) {
  // Q and K rotated by the same gathered tables: two fused ops, one pair of caches, the Gathers
  // gone with the second.
  std::string text = rotary_block();
  text = with(text, "g (float[2,2,3,4] x, int64[2,3] ids) => (float[2,2,3,4] y)",
              "g (float[2,2,3,4] x, float[2,2,3,4] k, int64[2,3] ids) => (float[2,2,3,4] y, "
              "float[2,2,3,4] yk)");
  text = with(text, "      y = Add (xc, rs)\n", R"(      y = Add (xc, rs)
      kc = Mul (cos, k)
      k2 = Slice (k, two, big, last)
      kneg = Neg (k2)
      k1 = Slice (k, zero, two, last)
      krot = Concat <axis = -1> (kneg, k1)
      ks = Mul (sin, krot)
      yk = Add (ks, kc)
)");
  expect_rewrite("fuse_blocks", text,
                 absl::StrCat(R"(<ir_version: 8, opset_import: ["" : 23]>
    g (float[2,2,3,4] x, float[2,2,3,4] k, int64[2,3] ids) => (float[2,2,3,4] y,
                                                               float[2,2,3,4] yk) <)",
                              rotary_caches_decl(), R"(> {
      y = RotaryEmbedding (x, cos_cache, sin_cache, ids)
      yk = RotaryEmbedding (k, cos_cache, sin_cache, ids)
    })"),
                 rewrites(2));
}

TEST(FuseBlocks, RotaryExpandsPositionIdsTheDecompositionBroadcasts) {
  // Position ids (1, S) broadcast over the batch; RotaryEmbedding wants x's (B, S), so it reads
  // them expanded to that, at run time.
  expect_rewrite("fuse_blocks", with(rotary_block(), "int64[2,3] ids", "int64[1,3] ids"),
                 absl::StrCat(R"(<ir_version: 8, opset_import: ["" : 23]>
    g (float[2,2,3,4] x, int64[1,3] ids) => (float[2,2,3,4] y)
      <int64[2] axes = {0, 2}, )",
                              rotary_caches_decl(), R"(> {
      shape = Shape (x)
      bs = Gather <axis = 0> (shape, axes)
      e = Expand (ids, bs)
      y = RotaryEmbedding (x, cos_cache, sin_cache, e)
    })"),
                 rewrites(1));
}

TEST(FuseBlocks, RotaryWithSplitHalves) {
  // rotate_half as Split into two halves (opset 18's num_outputs), operands in the other order.
  std::string text = rotary_block();
  text = with(text, "      x2 = Slice (x, two, big, last)\n", "");
  text = with(text, "      x1 = Slice (x, zero, two, last)\n",
              "      x1, x2 = Split <axis = 3, num_outputs = 2> (x)\n");
  text = with(text, "xc = Mul (x, cos)", "xc = Mul (cos, x)");
  text = with(text, "rs = Mul (rot, sin)", "rs = Mul (sin, rot)");
  text = with(text, "y = Add (xc, rs)", "y = Add (rs, xc)");
  auto model = run_rewrite("fuse_blocks", text, rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(op_types(model->graph()), std::vector<std::string>{"RotaryEmbedding"});
}

TEST(FuseBlocks, RotaryInsideIfBranch) {
  auto model = run_rewrite("fuse_blocks", rotary_inside_if(rotary_block()), rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "RotaryEmbedding"), 1);
  EXPECT_EQ(count_ops(*model, "Gather"), 0);
  EXPECT_EQ(count_ops(*model, "Concat"), 0);
}

TEST(FuseBlocks, RotaryLookAlikesStay) {
  RotaryBlock at22, unequal, int32_ids;
  at22.opset = 22;
  unequal.equal_halves = false;
  int32_ids.ids_type = "int32";
  // Opset 22: no RotaryEmbedding yet.
  expect_no_rewrite("fuse_blocks", rotary_block(at22));
  // Tables whose halves differ: the decomposition rotates by other angles in each half.
  expect_no_rewrite("fuse_blocks", rotary_block(unequal));
  // int32 position ids (RotaryEmbedding takes int64).
  expect_no_rewrite("fuse_blocks", rotary_block(int32_ids));
  const std::string base = rotary_block();
  // The halves are cut at 1 (x[1:], x[:1]), not at D/2.
  expect_no_rewrite(
      "fuse_blocks",
      with(with(base, "x2 = Slice (x, two, big, last)", "x2 = Slice (x, one, big, last)"),
           "x1 = Slice (x, zero, two, last)", "x1 = Slice (x, zero, one, last)"));
  // rotate_half along the heads' axis.
  expect_no_rewrite(
      "fuse_blocks",
      with(with(with(base, "x2 = Slice (x, two, big, last)", "x2 = Slice (x, one, big, one)"),
                "x1 = Slice (x, zero, two, last)", "x1 = Slice (x, zero, one, one)"),
           "Concat <axis = -1>", "Concat <axis = 1>"));
  // x (B, S, N, D) = (2, 3, 2, 4) with the tables broadcast over axis 2: the heads are not
  // before the sequence, which RotaryEmbedding's 4-D form wants.
  std::string sequence_first =
      with(with(base, "cos = Unsqueeze (gc, one)", "cos = Unsqueeze (gc, two)"),
           "sin = Unsqueeze (gs, one)", "sin = Unsqueeze (gs, two)");
  sequence_first = with(sequence_first, "g (float[2,2,3,4] x", "g (float[2,3,2,4] x");
  sequence_first = with(sequence_first, "=> (float[2,2,3,4] y)", "=> (float[2,3,2,4] y)");
  expect_no_rewrite("fuse_blocks", sequence_first);
  // A product read elsewhere too.
  expect_no_rewrite("fuse_blocks", with(base, "=> (float[2,2,3,4] y)",
                                        "=> (float[2,2,3,4] y, float[2,2,3,4] xc)"));
  // sin gathered by other ids than cos.
  expect_no_rewrite("fuse_blocks",
                    with(with(base, "int64[2,3] ids)", "int64[2,3] ids, int64[2,3] ids2)"),
                         "gs = Gather (sin_table, ids)", "gs = Gather (sin_table, ids2)"));
  // A Sub instead of the Add.
  expect_no_rewrite("fuse_blocks", with(base, "y = Add (xc, rs)", "y = Sub (xc, rs)"));
}

// --explain: a near-miss LayerNormalization (its epsilon a graph input, not a constant) stays,
// and the pipeline's report says why at the Add that should have held the constant.
TEST(FuseBlocks, ExplainsANearMissLayerNorm) {
  const std::string text = near_miss_layer_norm();
  auto model = parse_text(text);
  ASSERT_TRUE(model);
  model->graph().find_local("y")->producer()->mutable_proto().set_name("/encoder/LayerNorm/Div");
  model->graph().find_local("a")->producer()->mutable_proto().set_name("/encoder/LayerNorm/Add");
  PipelineConfig config = test_pipeline_config();
  config.passes = {"fuse_blocks"};
  config.explain = {"fuse_blocks/layer_norm"};
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(count_ops(*model, "LayerNormalization"), 0);
  ASSERT_EQ(report->passes.size(), 1u);
  const auto& explained = report->passes[0].explanations;
  ASSERT_EQ(explained.size(), 1u);
  EXPECT_EQ(explained[0].rule, "layer_norm");
  EXPECT_EQ(explained[0].node, "/encoder/LayerNorm/Div");
  EXPECT_EQ(explained[0].op, "Div");
  EXPECT_EQ(explained[0].reason,
            "epsilon is not a constant (one finite element of x's type, not broadcasting x) (at "
            "/encoder/LayerNorm/Add)");
  // Asked for another rule only, or not at all: nothing.
  auto again = parse_text(text);
  config.explain = {"fuse_blocks/gelu_erf"};
  report = run_pipeline(again, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(report->passes[0].explanations.empty());
  // Unknown names are refused before any work, naming what is valid.
  config.explain = {"fuse_blocks/layer_nrom"};
  report = run_pipeline(again, config);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("its rules: layer_norm, rms_norm"), std::string::npos)
      << report.status();
  config.explain = {"cse"};
  report = run_pipeline(again, config);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("not in this run"), std::string::npos)
      << report.status();
}

}  // namespace
}  // namespace graft::testing
