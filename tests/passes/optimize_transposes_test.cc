// optimize_transposes (core/passes/optimize_transposes.cc): Transposes pushed down until they
// cancel, merge or fold into constants.
#include <string>

#include "tests/testing.h"

namespace graft::testing {
namespace {

constexpr char kPass[] = "optimize_transposes";

// Runs the pass (numeric check with the evaluator and the ONNX checker included) and returns the
// number of Transposes left in all graphs.
int transposes_after(const std::string& text, const RewriteOptions& options = {}) {
  auto model = run_rewrite(kPass, text, options);
  if (!model) return -1;
  return count_ops(*model, "Transpose");
}

TEST(OptimizeTransposes, UnaryChainBetweenInversePairsCancels) {
  // NHWC -> NCHW, unary ops (Cast, Clip with constant bounds, LeakyRelu...), NCHW -> NHWC.
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,3,4] x) => (float[1,2,3,4] y) <float lo = {-1.0}, float hi = {1.5}> {
      t = Transpose <perm = [0, 3, 1, 2]> (x)
      a = Relu (t)
      b = LeakyRelu <alpha = 0.2> (a)
      c = Clip (b, lo, hi)
      d = Cast <to = 11> (c)
      e = Sigmoid (d)
      f = Cast <to = 1> (e)
      y = Transpose <perm = [0, 2, 3, 1]> (f)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,3,4] x) => (float[1,2,3,4] y) <float lo = {-1.0}, float hi = {1.5}> {
      a = Relu (x)
      b = LeakyRelu <alpha = 0.2> (a)
      c = Clip (b, lo, hi)
      d = Cast <to = 11> (c)
      e = Sigmoid (d)
      y = Cast <to = 1> (e)
    }
  )",
                 rewrites(1));
}

TEST(OptimizeTransposes, NonInverseEndsMergeIntoOne) {
  // Transpose(Relu(Transpose(x, p1)), p2) is Transpose(Relu(x), p1 o p2): two become one.
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] x) => (float[3,2,4] y) {
      t = Transpose <perm = [1, 2, 0]> (x)
      a = Neg (t)
      y = Transpose <perm = [0, 2, 1]> (a)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] x) => (float[3,2,4] y) {
      a = Neg (x)
      y = Transpose <perm = [1, 0, 2]> (a)
    }
  )",
                 rewrites(1));
}

TEST(OptimizeTransposes, ConstantOperandIsTransposed) {
  // Add(Transpose(x, [0, 3, 1, 2]), c[3, 1, 1]) with c unsqueezed to [1, 3, 1, 1]; the new
  // constant is [1, 1, 1, 3] (the channel moves last). Where and Mul too, with a scalar operand.
  auto model = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,2,3] x, float s) => (float[1,2,2,3] y)
      <float[3,1,1] c = {1.0, 2.0, 3.0}, bool[3,1,1] m = {1, 0, 1}> {
      t = Transpose <perm = [0, 3, 1, 2]> (x)
      a = Add (t, c)
      b = Mul (s, a)
      w = Where (m, b, t)
      y = Transpose <perm = [0, 2, 3, 1]> (w)
    }
  )",
                           rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Transpose"), 0);
  const ir::Node* add = only_node(model->graph(), "Add");
  ASSERT_TRUE(add);
  EXPECT_EQ(add->input(0)->name(), "x");
  EXPECT_EQ(dims_of(add->input(1)), (std::vector<int64_t>{1, 1, 1, 3}));
  EXPECT_EQ(values_of(add->input(1)), (std::vector<double>{1, 2, 3}));
  const ir::Node* where = only_node(model->graph(), "Where");
  ASSERT_TRUE(where);
  EXPECT_EQ(dims_of(where->input(0)), (std::vector<int64_t>{1, 1, 1, 3}));
  EXPECT_EQ(where->input(2)->name(), "x");
}

TEST(OptimizeTransposes, TwoOperandsWithTheSamePermBecomeOneTranspose) {
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] a, float[2,3] b) => (float[3,2] y) {
      ta = Transpose <perm = [1, 0]> (a)
      tb = Transpose <perm = [1, 0]> (b)
      y = Sub (ta, tb)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] a, float[2,3] b) => (float[3,2] y) {
      s = Sub (a, b)
      y = Transpose <perm = [1, 0]> (s)
    }
  )",
                 rewrites(1));
}

TEST(OptimizeTransposes, ReductionsRemapAxes) {
  // keepdims = 1 keeps the permutation; keepdims = 0 drops the reduced axes from it. ReduceSum
  // takes its axes as an input from opset 13, ReduceMean as an attribute until 18.
  auto model = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4,5] x) => (float[2,5,4] y, float[2,1,1,1] z) <int64[1] ax = {1}> {
      t = Transpose <perm = [0, 3, 1, 2]> (x)
      m = ReduceMean <axes = [2], keepdims = 0> (t)
      y = Transpose <perm = [0, 1, 2]> (m)
      s = ReduceSum <keepdims = 1> (t, ax)
      z = ReduceMax <axes = [2, 3], keepdims = 1> (s)
    }
  )");
  ASSERT_TRUE(model);
  const ir::Node* mean = only_node(model->graph(), "ReduceMean");
  ASSERT_TRUE(mean);
  EXPECT_EQ(mean->input(0)->name(), "x");
  EXPECT_EQ(mean->attr_ints("axes"), (std::vector<int64_t>{1}));
  const ir::Node* sum = only_node(model->graph(), "ReduceSum");
  ASSERT_TRUE(sum);
  EXPECT_EQ(sum->input(0)->name(), "x");
  EXPECT_EQ(values_of(sum->input(1)), (std::vector<double>{3}));
  const ir::Node* max = only_node(model->graph(), "ReduceMax");
  ASSERT_TRUE(max);
  EXPECT_EQ(max->attr_ints("axes"), (std::vector<int64_t>{1, 2}));
}

TEST(OptimizeTransposes, ReduceAxesInputFromOpset18) {
  // ReduceMax takes its axes as an input from opset 18 (libonnx 1.12 cannot check this model;
  // the evaluator still compares the outputs).
  auto model = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[2,3,4] x) => (float[2,3] y) <int64[1] ax = {-1}> {
      t = Transpose <perm = [1, 0, 2]> (x)
      m = ReduceMax <keepdims = 0> (t, ax)
      y = Transpose <perm = [1, 0]> (m)
    }
  )",
                           rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Transpose"), 0);
  const ir::Node* max = only_node(model->graph(), "ReduceMax");
  ASSERT_TRUE(max);
  EXPECT_EQ(max->input(0)->name(), "x");
  EXPECT_EQ(values_of(max->input(1)), (std::vector<double>{2}));
}

TEST(OptimizeTransposes, ReductionToFewerElementsMovesTheTranspose) {
  // One Transpose either way, but after the ReduceMean it moves 2*4 elements instead of 2*3*4.
  auto model = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] x, float[2,4] w) => (float[4,4] y) {
      t = Transpose <perm = [2, 0, 1]> (x)
      m = ReduceMean <axes = [2], keepdims = 0> (t)
      y = MatMul (m, w)
    }
  )",
                           rewrites(1));
  ASSERT_TRUE(model);
  const ir::Node* mean = only_node(model->graph(), "ReduceMean");
  ASSERT_TRUE(mean);
  EXPECT_EQ(mean->input(0)->name(), "x");
  EXPECT_EQ(mean->attr_ints("axes"), (std::vector<int64_t>{1}));
  EXPECT_EQ(producer_op(model->graph(), input_names(producer(*model, "y"))[0]), "Transpose");
}

TEST(OptimizeTransposes, ArgMaxAndSoftmaxFollowTheirAxis) {
  EXPECT_EQ(transposes_after(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] x) => (float[2,3,4] y, int64[2,3] z) {
      t = Transpose <perm = [2, 0, 1]> (x)
      s = Softmax <axis = 1> (t)
      l = LogSoftmax <axis = -1> (s)
      y = Transpose <perm = [1, 2, 0]> (l)
      a = ArgMax <axis = 0, keepdims = 0> (t)
      z = Neg (a)
    }
  )"),
            0);
}

TEST(OptimizeTransposes, SoftmaxBeforeOpset13Stays) {
  // Softmax-11 flattens the input at `axis`: it is not a per-axis op, so nothing moves past it.
  expect_no_rewrite(kPass, R"(
    <ir_version: 7, opset_import: ["" : 11]>
    g (float[2,3,4] x) => (float[2,3,4] y) {
      t = Transpose <perm = [2, 0, 1]> (x)
      s = Softmax <axis = 1> (t)
      y = Transpose <perm = [1, 2, 0]> (s)
    }
  )");
}

TEST(OptimizeTransposes, ConcatSplitPadSliceMoveTheirAxes) {
  auto model = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,2,3] x, float[1,2,2,3] x2) => (float[1,3,3,2] y, float[1,2,2,6] z)
      <float[1,3,2,2] k = {1,2,3,4,5,6,7,8,9,10,11,12}, int64[8] pads = {0,0,1,0, 0,0,0,1},
       int64[2] st = {0, 1}, int64[2] en = {1, 3}, int64[2] parts = {3, 6}> {
      t = Transpose <perm = [0, 3, 1, 2]> (x)
      t2 = Transpose <perm = [0, 3, 1, 2]> (x2)
      c = Concat <axis = 1> (t, k, t2)
      s1, s2 = Split <axis = 1> (c, parts)
      p = Pad (s1, pads)
      q = Slice (p, st, en)
      y = Transpose <perm = [0, 2, 3, 1]> (q)
      z = Transpose <perm = [0, 2, 3, 1]> (s2)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Transpose"), 0);
  EXPECT_EQ(only_node(model->graph(), "Concat")->attr_int("axis", 0), 3);
  EXPECT_EQ(only_node(model->graph(), "Split")->attr_int("axis", 0), 3);
  const ir::Node* pad = only_node(model->graph(), "Pad");
  EXPECT_EQ(values_of(pad->input(1)), (std::vector<double>{0, 1, 0, 0, 0, 0, 1, 0}));
  const ir::Node* slice = only_node(model->graph(), "Slice");
  ASSERT_EQ(slice->inputs().size(), 4u);
  EXPECT_EQ(values_of(slice->input(3)), (std::vector<double>{0, 3}));
  EXPECT_EQ(dims_of(only_node(model->graph(), "Concat")->input(1)),
            (std::vector<int64_t>{1, 2, 2, 3}));
}

TEST(OptimizeTransposes, OldOpsetsWriteAttributes) {
  // Pad-2 pads, Slice-1 axes, Squeeze/Unsqueeze-11 axes are attributes.
  auto model = run_rewrite(kPass, R"(
    <ir_version: 7, opset_import: ["" : 9]>
    g (float[2,3,4] x) => (float[5,3,2] y) {
      t = Transpose <perm = [1, 2, 0]> (x)
      p = Pad <pads = [0, 1, 0, 0, 0, 0]> (t)
      s = Slice <starts = [0], ends = [2], axes = [2]> (p)
      y = Transpose <perm = [1, 0, 2]> (s)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Transpose"), 1);
  EXPECT_EQ(only_node(model->graph(), "Pad")->attr_ints("pads"),
            (std::vector<int64_t>{0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(only_node(model->graph(), "Slice")->attr_ints("axes"), (std::vector<int64_t>{0}));
}

TEST(OptimizeTransposes, SqueezeAndUnsqueezeChangeThePermutation) {
  for (const char* opset : {"11", "13"}) {
    SCOPED_TRACE(opset);
    const bool inputs = std::string(opset) == "13";
    const std::string squeeze = inputs ? "Squeeze (t, sq)" : "Squeeze <axes = [1]> (t)";
    const std::string unsqueeze = inputs ? "Unsqueeze (s, uq)" : "Unsqueeze <axes = [0, 3]> (s)";
    EXPECT_EQ(transposes_after(std::string(R"(
      <ir_version: 7, opset_import: ["" : )") +
                               opset + R"(]>
      g (float[2,1,3,4] x) => (float[1,3,2,1,4] y) <int64[1] sq = {1}, int64[2] uq = {0, 3}> {
        t = Transpose <perm = [2, 1, 0, 3]> (x)
        s = )" + squeeze + R"(
        u = )" + unsqueeze + R"(
        e = Exp (u)
        y = Transpose <perm = [0, 1, 2, 3, 4]> (e)
      }
    )"),
              1);
  }
  // Unsqueeze then the inverse of the moved permutation: everything cancels.
  EXPECT_EQ(transposes_after(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,1,3] y) <int64[1] uq = {1}> {
      t = Transpose <perm = [1, 0]> (x)
      u = Unsqueeze (t, uq)
      y = Transpose <perm = [2, 1, 0]> (u)
    }
  )"),
            0);
}

TEST(OptimizeTransposes, TensorflowStyleLayoutChainCollapses) {
  // What tf2onnx writes around NCHW-only ops: every NHWC op is wrapped in Transposes. Between
  // the two Convs everything moves; only the model's own boundary Transposes stay.
  auto model = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,4,4,2] x) => (float[1,4,4,2] y)
      <float[2,2,1,1] w1 = {1, -1, 0.5, 2}, float[2,2,1,1] w2 = {0.5, 1, -2, 1},
       float[2] bias = {0.25, -0.5}, float[1,1,1,2] scale = {2, 3}> {
      a = Transpose <perm = [0, 3, 1, 2]> (x)
      c1 = Conv (a, w1)
      b = Transpose <perm = [0, 2, 3, 1]> (c1)
      d = Add (b, bias)
      e = Mul (d, scale)
      f = Relu (e)
      g1 = Transpose <perm = [0, 3, 1, 2]> (f)
      c2 = Conv (g1, w2)
      h = Transpose <perm = [0, 2, 3, 1]> (c2)
      y = Sigmoid (h)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Transpose"), 2);
  const ir::Node* add = only_node(model->graph(), "Add");
  EXPECT_EQ(add->input(0)->name(), "c1");
  EXPECT_EQ(dims_of(add->input(1)), (std::vector<int64_t>{1, 2, 1, 1}));
  // The first and last Transposes stay: one on the input, one before the output's Sigmoid.
  EXPECT_EQ(producer_op(model->graph(), "y"), "Sigmoid");
}

TEST(OptimizeTransposes, PureLayoutChainCollapsesEntirely) {
  EXPECT_EQ(transposes_after(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,4,4,2] x) => (float[1,4,5,1] y)
      <float[2] bias = {0.25, -0.5}, int64[8] pads = {0, 0, 1, 1, 0, 0, 0, 0},
       int64[1] st = {1}, int64[1] en = {5}, int64[1] ax = {2}> {
      a = Transpose <perm = [0, 3, 1, 2]> (x)
      b = Transpose <perm = [0, 2, 3, 1]> (a)
      c = Add (b, bias)
      d = Transpose <perm = [0, 3, 1, 2]> (c)
      e = Pad <mode = "reflect"> (d, pads)
      f = Slice (e, st, en, ax)
      g1 = Transpose <perm = [0, 2, 3, 1]> (f)
      h = Tanh (g1)
      k = Transpose <perm = [0, 3, 1, 2]> (h)
      m = ReduceMax <axes = [1], keepdims = 1> (k)
      y = Transpose <perm = [0, 2, 3, 1]> (m)
    }
  )"),
            0);
}

TEST(OptimizeTransposes, StaysWhenNothingIsGained) {
  // One Transpose before, one after, the same number of elements: no rewrite.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] x, float[3,4] w) => (float[4,2,4] y) {
      t = Transpose <perm = [2, 0, 1]> (x)
      r = Relu (t)
      y = MatMul (r, w)
    }
  )");
  // Pushing past the Relu, Neg and Exp would need a Transpose for each MatMul.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x, float[2,2] w) => (float[3,2] y, float[3,2] z) {
      t = Transpose <perm = [1, 0]> (x)
      r = Relu (t)
      n = Neg (r)
      e = Exp (r)
      y = MatMul (n, w)
      z = MatMul (e, w)
    }
  )");
  // A runtime operand that is not a scalar nor transposed the same way stops the move.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x, float[3,2] b) => (float[2,3] y) {
      t = Transpose <perm = [1, 0]> (x)
      a = Add (t, b)
      y = Transpose <perm = [1, 0]> (a)
    }
  )");
}

TEST(OptimizeTransposes, BranchesEndingInTheSameTransposeMoveTogether) {
  // Neither Transpose can move alone (the Add's other operand is computed at run time), but the
  // Mul that reads tb joins ta's region with tb, and the Add's result meets the Transpose back.
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] a, float[2,3] b) => (float[2,3] y) <float[3,1] c = {1.0, 2.0, 3.0}> {
      ta = Transpose <perm = [1, 0]> (a)
      tb = Transpose <perm = [1, 0]> (b)
      ma = Mul (ta, c)
      mb = Mul (tb, c)
      nb = Relu (mb)
      s = Add (ma, nb)
      y = Transpose <perm = [1, 0]> (s)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] a, float[2,3] b) => (float[2,3] y) <float[1,3] ct = {1.0, 2.0, 3.0}> {
      ma = Mul (a, ct)
      mb = Mul (b, ct)
      nb = Relu (mb)
      y = Add (ma, nb)
    }
  )",
                 rewrites(1));
}

// The stage of a ConvNeXt: a residual stream in NCHW read by each block's depthwise Conv, whose
// branch runs in NHWC (LayerNormalization and the MLP, here a MatMul) and ends in
// Transpose(0, 3, 1, 2), a layer-scale Mul and the residual Add. The stage starts from a
// Transpose (the stem's LayerNormalization went back to NCHW) and ends in Transpose(0, 2, 3, 1)
// (the downsampling LayerNormalization). The whole stream moves to NHWC: each Conv reads it
// through a Transpose, and the branches' and the end's Transposes go (6 -> 4).
constexpr char kResidualStage[] = R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[1,4,4,3] h, float[3,1,3,3] w, float[3,3] k) => (float[1,4,4,3] y)
      <float[3,1,1] g1 = {0.5, -1.0, 2.0}, float[3,1,1] g2 = {1.5, 0.25, -0.75}> {
      x = Transpose <perm = [0, 3, 1, 2]> (h)
      d1 = Conv <group = 3, pads = [1, 1, 1, 1]> (x, w)
      e1 = Transpose <perm = [0, 2, 3, 1]> (d1)
      f1 = MatMul (e1, k)
      t1 = Transpose <perm = [0, 3, 1, 2]> (f1)
      l1 = Mul (g1, t1)
      x1 = Add (l1, x)
      d2 = Conv <group = 3, pads = [1, 1, 1, 1]> (x1, w)
      e2 = Transpose <perm = [0, 2, 3, 1]> (d2)
      f2 = MatMul (e2, k)
      t2 = Transpose <perm = [0, 3, 1, 2]> (f2)
      l2 = Mul (g2, t2)
      x2 = Add (l2, x1)
      y = Transpose <perm = [0, 2, 3, 1]> (x2)
    }
  )";

TEST(OptimizeTransposes, ResidualStreamOfTransposedBranchesMovesToTheirLayout) {
  expect_rewrite(kPass, kResidualStage, R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[1,4,4,3] h, float[3,1,3,3] w, float[3,3] k) => (float[1,4,4,3] y)
      <float[1,1,1,3] g1t = {0.5, -1.0, 2.0}, float[1,1,1,3] g2t = {1.5, 0.25, -0.75}> {
      x = Transpose <perm = [0, 3, 1, 2]> (h)
      d1 = Conv <group = 3, pads = [1, 1, 1, 1]> (x, w)
      e1 = Transpose <perm = [0, 2, 3, 1]> (d1)
      f1 = MatMul (e1, k)
      l1 = Mul (g1t, f1)
      x1 = Add (l1, h)
      x1t = Transpose <perm = [0, 3, 1, 2]> (x1)
      d2 = Conv <group = 3, pads = [1, 1, 1, 1]> (x1t, w)
      e2 = Transpose <perm = [0, 2, 3, 1]> (d2)
      f2 = MatMul (e2, k)
      l2 = Mul (g2t, f2)
      y = Add (l2, x1)
    }
  )",
                 rewrites(1));
}

TEST(OptimizeTransposes, ResidualStreamFromAConvStays) {
  // The same stage after a strided Conv (ConvNeXt's later stages): the stream starts in NCHW,
  // so moving it would cost a Transpose at its start for each one it saves.
  std::string text = kResidualStage;
  text.replace(text.find("x = Transpose <perm = [0, 3, 1, 2]> (h)"),
               std::string("x = Transpose <perm = [0, 3, 1, 2]> (h)").size(),
               "x = Conv <group = 3, pads = [1, 1, 1, 1]> (hc, w)");
  text.replace(text.find("float[1,4,4,3] h,"), std::string("float[1,4,4,3] h,").size(),
               "float[1,3,4,4] hc,");
  expect_no_rewrite(kPass, text);
  // A branch whose other operand is computed at run time without a Transpose does not join.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] a, float[2,3] b, float[3,2] z) => (float[2,3] y) {
      ta = Transpose <perm = [1, 0]> (a)
      tb = Transpose <perm = [1, 0]> (b)
      mb = Mul (tb, z)
      s = Add (ta, mb)
      y = Transpose <perm = [1, 0]> (s)
    }
  )");
}

TEST(OptimizeTransposes, ARootsOwnInputDoesNotJoin) {
  // t reads m as it is, so m cannot be planned to carry t's permutation for the Add that reads
  // both; and tb alone would leave as many Transposes (t merges into one by [2, 0, 1]).
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,2,2] b) => (float[2,2,2] y) <float[2,1,1] c = {1.0, 2.0}> {
      tb = Transpose <perm = [1, 2, 0]> (b)
      m = Mul (tb, c)
      t = Transpose <perm = [1, 2, 0]> (m)
      s = Add (t, m)
      y = Transpose <perm = [2, 0, 1]> (s)
    }
  )");
}

TEST(OptimizeTransposes, RegionValueReadElsewhereKeepsATranspose) {
  // r is a graph output: it gets a Transpose back, and the pair around Exp still cancels.
  auto model = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y, float[3,2] r) {
      t = Transpose <perm = [1, 0]> (x)
      r = Relu (t)
      e = Exp (r)
      y = Transpose <perm = [1, 0]> (e)
    }
  )",
                           rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Transpose"), 1);
  EXPECT_EQ(producer_op(model->graph(), "r"), "Transpose");
  EXPECT_EQ(producer_op(model->graph(), "y"), "Exp");
}

TEST(OptimizeTransposes, InvalidPermsAndUnknownRanksStay) {
  // Not a permutation.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float y) {
      t = Transpose <perm = [0, 0]> (x)
      r = Relu (t)
      y = Transpose <perm = [1, 0]> (r)
    }
  )",
                    compare_outputs(Outputs::kNotCompared));  // invalid model
  // An attribute the rule does not know.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float y) {
      t = Transpose <perm = [1, 0], extra = 1> (x)
      r = Relu (t)
      y = Transpose <perm = [1, 0]> (r)
    }
  )",
                    compare_outputs(Outputs::kNotCompared));
  // No perm (reversal) and a rank nothing tells.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[2,3] x) => (float y) {
      u = custom.Op (x)
      t = Transpose (u)
      r = Relu (t)
      y = Transpose (r)
    }
  )",
                    compare_outputs(Outputs::kNotCompared));  // custom op
  // A perm whose length the input's rank does not confirm.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[2,3] x) => (float y) {
      u = custom.Op (x)
      t = Transpose <perm = [1, 0]> (u)
      r = Relu (t)
      y = Transpose <perm = [1, 0]> (r)
    }
  )",
                    compare_outputs(Outputs::kNotCompared));
}

TEST(OptimizeTransposes, MalformedParametersStay) {
  // Axes out of range or repeated, pads of the wrong length, a constant of a higher rank: the
  // node is left where it is (and the pair around it stays).
  for (const char* op :
       {"ReduceSum <axes = [5]> (t)", "ReduceSum <axes = [0, -2]> (t)",
        "Pad <pads = [0, 1, 0]> (t)", "Concat <axis = 2> (t, t)", "ArgMax <axis = 7> (t)",
        "Slice <starts = [0], ends = [1], axes = [4]> (t)", "Squeeze <axes = [3]> (t)",
        "Unsqueeze <axes = [1, 1]> (t)", "Add (t, k)", "Split <axis = -9> (t)"}) {
    SCOPED_TRACE(op);
    expect_no_rewrite(kPass, std::string(R"(
      <ir_version: 7, opset_import: ["" : 9]>
      g (float[2,3] x) => (float y) <float[1,1,3] k = {1, 2, 3}> {
        t = Transpose <perm = [1, 0]> (x)
        r = )") + op + R"(
        y = Transpose <perm = [1, 0]> (r)
      }
    )",
                      compare_outputs(Outputs::kNotCompared));  // invalid models
  }
}

TEST(OptimizeTransposes, LargeSharedConstantIsNotCopied) {
  // c (128 KiB) is also read by another node: transposing it would keep both copies.
  std::string values;
  for (int i = 0; i < 32 * 1024; ++i) values += (i ? "," : "") + std::to_string(i % 7);
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[256,128] x) => (float[256,128] y, float[128,256] z) <float[128,256] c = {)" +
                               values + R"(}> {
      t = Transpose <perm = [1, 0]> (x)
      a = Add (t, c)
      y = Transpose <perm = [1, 0]> (a)
      z = Neg (c)
    }
  )");
}

TEST(OptimizeTransposes, InsideIfBranches) {
  EXPECT_EQ(transposes_after(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2,3] x) => (float[2,3] y) <float[3,1] c = {1, 2, 3}> {
      y = If (cond) <
        then_branch = then_g () => (float[2,3] a) {
          t = Transpose <perm = [1, 0]> (x)
          r = Add (t, c)
          a = Transpose <perm = [1, 0]> (r)
        },
        else_branch = else_g () => (float[2,3] b) {
          b = Relu (x)
        }>
    }
  )"),
            0);
}

TEST(OptimizeTransposes, BranchesMoveTogetherInsideIfBranches) {
  EXPECT_EQ(transposes_after(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2,3] a, float[2,3] b) => (float[2,3] y) <float[3,1] c = {1, 2, 3}> {
      y = If (cond) <
        then_branch = then_g () => (float[2,3] r) {
          ta = Transpose <perm = [1, 0]> (a)
          tb = Transpose <perm = [1, 0]> (b)
          ma = Mul (ta, c)
          mb = Mul (tb, c)
          s = Add (ma, mb)
          r = Transpose <perm = [1, 0]> (s)
        },
        else_branch = else_g () => (float[2,3] q) {
          q = Relu (a)
        }>
    }
  )"),
            0);
}

TEST(OptimizeTransposes, RootStaysForItsOtherReaders) {
  // t also feeds a MatMul: it stays for it, while the pair around Relu still cancels (2 -> 1).
  auto model = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x, float[2,2] w) => (float[2,3] y, float[3,2] z) {
      t = Transpose <perm = [1, 0]> (x)
      r = Relu (t)
      y = Transpose <perm = [1, 0]> (r)
      z = MatMul (t, w)
    }
  )",
                           rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Transpose"), 1);
  EXPECT_EQ(producer_op(model->graph(), "y"), "Relu");
  EXPECT_EQ(input_names(producer(*model, "y")), (std::vector<std::string>{"x"}));
  EXPECT_EQ(producer_op(model->graph(), input_names(producer(*model, "z"))[0]), "Transpose");
}

TEST(OptimizeTransposes, RegionValueCapturedByABranchGetsATransposeBack) {
  // r is read inside the If's branch: that reader is outside the region, so r keeps its layout
  // through a Transpose in the outer graph, while the pair around Exp cancels.
  auto model = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2,3] x) => (float[2,3] y, float[3,2] z) {
      t = Transpose <perm = [1, 0]> (x)
      r = Relu (t)
      e = Exp (r)
      y = Transpose <perm = [1, 0]> (e)
      z = If (cond) <
        then_branch = then_g () => (float[3,2] a) {
          a = Neg (r)
        },
        else_branch = else_g () => (float[3,2] b) {
          b = Abs (r)
        }>
    }
  )",
                           rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Transpose"), 1);
  EXPECT_EQ(producer_op(model->graph(), "y"), "Exp");
  const ir::Node* iff = only_node(model->graph(), "If");
  ASSERT_TRUE(iff);
  const ir::Graph& then_g = *iff->subgraphs()[0].graph;
  EXPECT_EQ(producer_op(model->graph(), input_names(only_node(then_g, "Neg"))[0]), "Transpose");
}

TEST(OptimizeTransposes, InsideFunctionBodies) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2,3] x) => (float[2,3] y) {
      y = local.F (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    F (a) => (b) {
      shape = Constant <value = int64[2] {2, 3}> ()
      r = Reshape (a, shape)
      c = Constant <value = float[3,1] {1.0, 2.0, 3.0}> ()
      t = Transpose <perm = [1, 0]> (r)
      m = Mul (t, c)
      b = Transpose <perm = [1, 0]> (m)
    }
  )");
  ASSERT_TRUE(model);
  // Not run_pass_checked: the evaluator does not run local functions.
  auto result = run_pass(*model, kPass);
  EXPECT_EQ(result.rewrites, 1);
  const ir::Graph& body = *model->functions()[0].body;
  EXPECT_EQ(count_ops(*model, "Transpose"), 0);
  const ir::Value* b = body.find_local("b");
  ASSERT_TRUE(b && b->producer() && b->producer()->op_type() == "Mul");
  const ir::Node* c = b->producer()->input(1)->producer();
  ASSERT_TRUE(c && c->op_type() == "Constant");
  EXPECT_EQ(std::vector<int64_t>(c->attr("value")->t().dims().begin(),
                                 c->attr("value")->t().dims().end()),
            (std::vector<int64_t>{1, 3}));
  auto reloaded = ir::Model::from_proto(model->to_proto());
  EXPECT_TRUE(reloaded.ok()) << reloaded.status();
}

// transpose_tied_constant ------------------------------------------------------------------

// A tied embedding: w [8, 2] is gathered by token ids and read transposed by the projection.
constexpr char kTiedWeight[] =
    "float[8,2] w = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}";

TEST(OptimizeTransposes, TiedEmbeddingIsStoredTransposed) {
  expect_rewrite(kPass,
                 std::string(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[2,3] ids, float[2,3,2] x) => (float[2,3,2] e, float[2,3,8] y) <)") +
                     kTiedWeight +
                     R"(> {
      e = Gather (w, ids)
      t = Transpose <perm = [1, 0]> (w)
      y = MatMul (x, t)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[2,3] ids, float[2,3,2] x) => (float[2,3,2] e, float[2,3,8] y)
        <float[2,8] wt = {1, 3, 5, 7, 9, 11, 13, 15, 2, 4, 6, 8, 10, 12, 14, 16}> {
      r = Gather <axis = 1> (wt, ids)
      e = Transpose <perm = [1, 2, 0]> (r)
      y = MatMul (x, wt)
    }
  )",
                 rewrites(1));
}

TEST(OptimizeTransposes, TiedEmbeddingWithAScalarIndexNeedsNoTransposeBack) {
  // Gather(w, i) of a scalar i is a row [2]; Gather(wt, i, axis 1) is the same column.
  auto model = run_rewrite(kPass,
                           std::string(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64 i, float[3,2] x) => (float[2] e, float[3,8] y) <)") +
                               kTiedWeight +
                               R"(> {
      e = Gather <axis = -2> (w, i)
      t = Transpose (w)
      y = MatMul (x, t)
    }
  )",
                           rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Transpose"), 0);
  EXPECT_EQ(producer_op(model->graph(), "e"), "Gather");
  EXPECT_EQ(dims_of(model->graph().find_local(input_names(producer(*model, "y"))[1])),
            (std::vector<int64_t>{2, 8}));
}

TEST(OptimizeTransposes, TiedLookAlikesStay) {
  const std::string weight = std::string("<") + kTiedWeight + ">";
  const std::vector<std::string> cases = {
      // w has a third reader that needs it as it is.
      R"(g (int64[2,3] ids, float[3,2] x) => (float[2,3,2] e, float[3,8] y, float[8,2] z) )" +
          weight + R"( {
        e = Gather (w, ids)
        t = Transpose <perm = [1, 0]> (w)
        y = MatMul (x, t)
        z = Neg (w)
      })",
      // A Gather of columns (axis 1).
      R"(g (int64[2,3] ids, float[3,2] x) => (float[8,2,3] e, float[3,8] y) )" + weight + R"( {
        e = Gather <axis = 1> (w, ids)
        t = Transpose <perm = [1, 0]> (w)
        y = MatMul (x, t)
      })",
      // As many indices as rows: the moved Transpose would not be smaller.
      R"(g (int64[2,4] ids, float[3,2] x) => (float[2,4,2] e, float[3,8] y) )" + weight + R"( {
        e = Gather (w, ids)
        t = Transpose <perm = [1, 0]> (w)
        y = MatMul (x, t)
      })",
      // Indices of unknown rank: the Transpose back cannot be written.
      R"(g (int64[] ids, float[3,2] x) => (float[] e, float[3,8] y) )" + weight + R"( {
        e = Gather (w, ids)
        t = Transpose <perm = [1, 0]> (w)
        y = MatMul (x, t)
      })",
      // w is also a graph output.
      R"(g (int64[2,3] ids, float[3,2] x) => (float[2,3,2] e, float[3,8] y, float[8,2] w) )" +
          weight + R"( {
        e = Gather (w, ids)
        t = Transpose <perm = [1, 0]> (w)
        y = MatMul (x, t)
      })",
      // A branch reads w: the rewrite stays in one graph.
      R"(g (int64[2,3] ids, float[3,2] x, bool c) => (float[2,3,2] e, float[3,8] y, float[8,2] z) )" +
          weight + R"( {
        e = Gather (w, ids)
        t = Transpose <perm = [1, 0]> (w)
        y = MatMul (x, t)
        z = If (c) <then_branch = tg () => (float[8,2] a) { a = Neg (w) },
                    else_branch = eg () => (float[8,2] b) { b = Abs (w) }>
      })",
  };
  for (const std::string& body : cases) {
    SCOPED_TRACE(body);
    // Some cannot run: indices up to 3 on an axis of 2, indices of unknown rank.
    expect_no_rewrite(kPass, R"(<ir_version: 8, opset_import: ["" : 13]>
    )" + body,
                      compare_outputs(Outputs::kSameIfVerifiable));
  }
}

TEST(OptimizeTransposes, TiedOverridableWeightStays) {
  // An initializer that is also a graph input is a default a caller may replace.
  expect_no_rewrite(kPass, std::string(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[2,3] ids, float[3,2] x, float[8,2] w) => (float[2,3,2] e, float[3,8] y) <)") +
                               kTiedWeight + R"(> {
      e = Gather (w, ids)
      t = Transpose <perm = [1, 0]> (w)
      y = MatMul (x, t)
    }
  )");
}

TEST(OptimizeTransposes, TiedEmbeddingInsideIfBranches) {
  auto model = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool c, int64[2,3] ids, float[3,2] x) => (float[2,3,2] e, float[3,8] y) {
      e, y = If (c) <
        then_branch = tg () => (float[2,3,2] te, float[3,8] ty) {
          w = Constant <value = float[8,2] {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}> ()
          te = Gather (w, ids)
          t = Transpose <perm = [1, 0]> (w)
          ty = MatMul (x, t)
        },
        else_branch = eg () => (float[2,3,2] ee, float[3,8] ey) {
          w2 = Constant <value = float[8,2] {0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}> ()
          ee = Gather (w2, ids)
          ey = MatMul (x, w2t)
          w2t = Transpose <perm = [1, 0]> (w2)
        }>
    }
  )",
                           rewrites(2));
  ASSERT_TRUE(model);
  const ir::Node* iff = only_node(model->graph(), "If");
  ASSERT_TRUE(iff);
  for (const auto& sub : iff->subgraphs()) {
    const ir::Graph& b = *sub.graph;
    EXPECT_EQ(count_ops(*model, "Transpose"), 2);  // one back per Gather
    const ir::Node* matmul = only_node(b, "MatMul");
    ASSERT_TRUE(matmul);
    EXPECT_EQ(dims_of(matmul->input(1)), (std::vector<int64_t>{2, 8}));
    EXPECT_EQ(only_node(b, "Gather")->attr_int("axis", 0), 1);
  }
}

TEST(OptimizeTransposes, TiedEmbeddingInsideFunctionBodies) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (int64[2,3] ids, float[3,2] x) => (float[2,3,2] e, float[3,8] y) {
      e, y = local.F (ids, x)
    }
    <domain: "local", opset_import: ["" : 13]>
    F (i, a) => (ge, my) {
      w = Constant <value = float[8,2] {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}> ()
      r = Reshape (i, shape)
      shape = Constant <value = int64[2] {2, 3}> ()
      ge = Gather (w, r)
      t = Transpose <perm = [1, 0]> (w)
      my = MatMul (a, t)
    }
  )");
  ASSERT_TRUE(model);
  // Not run_pass_checked: the evaluator does not run local functions.
  auto result = run_pass(*model, kPass);
  EXPECT_EQ(result.rewrites, 1);
  const ir::Graph& body = *model->functions()[0].body;
  const ir::Node* matmul = only_node(body, "MatMul");
  ASSERT_TRUE(matmul && matmul->input(1)->producer());
  const ir::Node* c = matmul->input(1)->producer();
  EXPECT_EQ(c->op_type(), "Constant");
  EXPECT_EQ(std::vector<int64_t>(c->attr("value")->t().dims().begin(),
                                 c->attr("value")->t().dims().end()),
            (std::vector<int64_t>{2, 8}));
  EXPECT_EQ(producer_op(body, "ge"), "Transpose");
  auto reloaded = ir::Model::from_proto(model->to_proto());
  EXPECT_TRUE(reloaded.ok()) << reloaded.status();
}

// ShuffleNet's channel shuffle: [N, G*K, H, W] -> [N, G, K, H, W] -> [N, K, G, H, W] -> back is
// a permutation of the channels, one Gather (channel c*G + g reads g*K + c). A symbolic batch
// and the Reshapes' 0 and -1 are read through the shape facts.
TEST(OptimizeTransposes, ChannelShuffleBecomesAGather) {
  struct Case {
    std::string x;        // the value's type, the result's too
    std::string shapes;   // the two Reshapes' targets, s1 and s2
    std::string perm;     // the Transpose's
    std::string indices;  // the Gather's constant
  };
  const Case cases[] = {
      {"float[N,6,4,4]", "int64[5] s1 = {0, 2, 3, 4, -1}, int64[4] s2 = {0, -1, 4, 4}",
       "[0, 2, 1, 3, 4]", "int64[6] idx = {0, 3, 1, 4, 2, 5}"},
      // Three factors, the middle axis of a rank-3 value: [2, 3*2*2, 16] split [3, 2, 2],
      // permuted (2, 0, 1): output index (c, a, b) over dims (2, 3, 2) reads a*4 + b*2 + c.
      {"float[2,12,16]", "int64[5] s1 = {2, 3, 2, 2, 16}, int64[3] s2 = {2, 12, 16}",
       "[0, 3, 1, 2, 4]", "int64[12] idx = {0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11}"}};
  for (const Case& c : cases) {
    const std::string signature = "g (" + c.x + " x) => (" + c.x + " y) <";
    expect_rewrite(kPass,
                   R"(
      <ir_version: 8, opset_import: ["" : 13]>
      )" + signature + c.shapes +
                       R"(> {
        r = Reshape (x, s1)
        t = Transpose <perm = )" +
                       c.perm + R"(> (r)
        y = Reshape (t, s2)
      }
    )",
                   R"(
      <ir_version: 8, opset_import: ["" : 13]>
      )" + signature + c.indices +
                       R"(> {
        y = Gather <axis = 1> (x, idx)
      }
    )",
                   rewrites(1));
  }
}

// What stays: a shuffle of the innermost axis (each index would move one element: a Gather
// there measured slower than the Transpose), a Transpose that also moves another axis, a result
// of another shape, and a split Reshape that other nodes read.
TEST(OptimizeTransposes, ChannelShuffleStaysWhereAGatherDoesNotFit) {
  auto unchanged = [](const std::string& body, const std::string& shapes,
                      const std::string& x_dims = "1,6,4,4",
                      const std::string& split_dims = "1,2,3,4,4") {
    const std::string text = R"(
      <ir_version: 8, opset_import: ["" : 13]>
      g (float[)" + x_dims + R"(] x) => (float[)" +
                             x_dims + R"(] y, float[)" + split_dims + R"(] extra) <)" + shapes +
                             R"(> {
        )" + body + R"(
      }
    )";
    auto model = parse_text(text);
    if (!model) return false;
    const PassResult r = run_pass(*model, kPass);
    return r.rewrites == 0 && count_ops(*model, "Gather") == 0;
  };
  const std::string shapes =
      "int64[5] s1 = {1, 2, 3, 4, 4}, int64[4] s2 = {1, 6, 4, 4}, int64[5] s3 = {1, 6, 4, 2, 2}";
  // Innermost: [1, 6, 4, 4] -> [1, 6, 4, 2, 2], swap the last two.
  EXPECT_TRUE(unchanged(R"(r = Reshape (x, s3)
        t = Transpose <perm = [0, 1, 2, 4, 3]> (r)
        y = Reshape (t, s2)
        extra = Reshape (x, s1))",
                        shapes));
  // The Transpose also swaps H and W.
  EXPECT_TRUE(unchanged(R"(r = Reshape (x, s1)
        t = Transpose <perm = [0, 2, 1, 4, 3]> (r)
        y = Reshape (t, s2)
        extra = Reshape (x, s1))",
                        shapes));
  // An axis of more entries than a Gather's indices may hold (dims a model declares are hostile:
  // the constant would be built from them).
  EXPECT_TRUE(unchanged(R"(r = Reshape (x, s1)
        t = Transpose <perm = [0, 2, 1, 3, 4]> (r)
        y = Reshape (t, s2)
        extra = Reshape (x, s1))",
                        "int64[5] s1 = {1, 2, 100000, 4, 4}, int64[4] s2 = {1, 200000, 4, 4}",
                        "1,200000,4,4", "1,2,100000,4,4"));
  // The split value is also an output.
  EXPECT_TRUE(unchanged(R"(extra = Reshape (x, s1)
        t = Transpose <perm = [0, 2, 1, 3, 4]> (extra)
        y = Reshape (t, s2))",
                        shapes));
}

}  // namespace
}  // namespace graft::testing
