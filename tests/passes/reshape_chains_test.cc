// Shape-chain fusion for Reshape (core/passes/reshape_chains.cc, part of fold_shapes).
#include <string>

#include "tests/testing.h"

namespace graft::testing {
namespace {

// x.view(x.size(0), x.size(1), 2, -1) as torch.onnx writes it, with batch and sequence symbolic.
TEST(ReshapeChains, TorchViewOfOwnDimsBecomesZeroCopies) {
  auto model = expect_rewrite("fold_shapes", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[B,S,8] x) => (float[B,S,2,4] y) {
      s = Shape (x)
      i0 = Constant <value = int64 {0}> ()
      i1 = Constant <value = int64 {1}> ()
      ax = Constant <value = int64[1] {0}> ()
      d0 = Gather <axis = 0> (s, i0)
      d1 = Gather <axis = 0> (s, i1)
      u0 = Unsqueeze (d0, ax)
      u1 = Unsqueeze (d1, ax)
      rest = Constant <value = int64[2] {2, -1}> ()
      shape = Concat <axis = 0> (u0, u1, rest)
      y = Reshape (x, shape)
    }
  )",
                              R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[B,S,8] x) => (float[B,S,2,4] y) <int64[4] tgt = {0, 0, 2, -1}> {
      y = Reshape (x, tgt)
    }
  )",
                              rewrites(1));
  ASSERT_TRUE(model);
  // The chain, read by nothing else, went with the rewrite (Rewriter::erase_unread_producers).
  EXPECT_EQ(count_ops(*model, "Shape"), 0);
  EXPECT_EQ(count_ops(*model, "Concat"), 0);
  EXPECT_EQ(model->total_nodes(), 1u);
}

// The attention-merge reshape: x.view(x.size()[:-2] + (H * D,)), through Slice of the Shape and
// a product of two dims that becomes the one inferred (-1) entry.
TEST(ReshapeChains, SliceOfShapeAndOneComputedDim) {
  expect_rewrite("fold_shapes", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[B,S,H,D] x) => (float[B,S,?] y) {
      s = Shape (x)
      st = Constant <value = int64[1] {0}> ()
      en = Constant <value = int64[1] {-2}> ()
      head = Slice (s, st, en)
      i2 = Constant <value = int64 {2}> ()
      i3 = Constant <value = int64 {3}> ()
      h = Gather (s, i2)
      d = Gather (s, i3)
      hd = Mul (h, d)
      ax = Constant <value = int64[1] {0}> ()
      u = Unsqueeze (hd, ax)
      shape = Concat <axis = 0> (head, u)
      y = Reshape (x, shape)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[B,S,H,D] x) => (float[B,S,?] y) <int64[3] tgt = {0, 0, -1}> {
      y = Reshape (x, tgt)
    }
  )",
                 rewrites(1));
}

// Dims of another tensor with the same symbols as the input's at the same positions (one read
// through an int32 round trip) are 0s.
TEST(ReshapeChains, SameSymbolElsewhereThroughCasts) {
  expect_rewrite("fold_shapes", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[B,T,2] x, float[B,T] other) => (float[B,T,2] y) {
      so = Shape (other)
      s32 = Cast <to = 6> (so)
      s64 = Cast <to = 7> (s32)
      i0 = Constant <value = int64[1] {0}> ()
      i1 = Constant <value = int64[1] {1}> ()
      b = Gather (s64, i0)
      t = Gather (so, i1)
      two = Constant <value = int64[1] {2}> ()
      shape = Concat <axis = 0> (b, t, two)
      y = Reshape (x, shape)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[B,T,2] x, float[B,T] other) => (float[B,T,2] y) <int64[3] tgt = {0, 0, 2}> {
      y = Reshape (x, tgt)
    }
  )",
                 compare_outputs(Outputs::kSame));
}

// Look-alikes that must stay: two entries that only -1 could express (B * S and T at position
// 1); a dim copied to another
// position of a different-sized symbol together with a -1 of the model's own; allowzero=1 with
// an unknown dim at its own position next to a computed one; a target that is not a shape chain.
TEST(ReshapeChains, LookAlikesStay) {
  const char* models[] = {
      R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[B,S,T] x) => (float[?,?] y) {
      s = Shape (x)
      i0 = Constant <value = int64 {0}> ()
      i1 = Constant <value = int64 {1}> ()
      i2 = Constant <value = int64 {2}> ()
      d0 = Gather (s, i0)
      d1 = Gather (s, i1)
      d2 = Gather (s, i2)
      a = Mul (d0, d1)
      ax = Constant <value = int64[1] {0}> ()
      ua = Unsqueeze (a, ax)
      ub = Unsqueeze (d2, ax)
      shape = Concat <axis = 0> (ua, ub)
      y = Reshape (x, shape)
    }
  )",
      R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[B,S] x) => (float[?,?] y) {
      s = Shape (x)
      i1 = Constant <value = int64[1] {1}> ()
      d1 = Gather (s, i1)
      m = Constant <value = int64[1] {-1}> ()
      shape = Concat <axis = 0> (d1, m)
      y = Reshape (x, shape)
    }
  )",
      R"(
    <ir_version: 8, opset_import: ["" : 14]>
    g (float[B,S,8] x) => (float[?,?,?] y) {
      s = Shape (x)
      i0 = Constant <value = int64[1] {0}> ()
      i1 = Constant <value = int64[1] {1}> ()
      d0 = Gather (s, i0)
      d1 = Gather (s, i1)
      e = Constant <value = int64[1] {-1}> ()
      shape = Concat <axis = 0> (d0, d1, e)
      y = Reshape <allowzero = 1> (x, shape)
    }
  )",
      R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[B,8] x, int64[2] t) => (float[?,?] y) {
      y = Reshape (x, t)
    }
  )"};
  // The last one's random target does not fit x: the evaluator cannot run it.
  for (const char* text : models)
    expect_no_rewrite("fold_shapes", text, compare_outputs(Outputs::kSameIfVerifiable));
}

// In an If branch, the Shape read from the outer scope.
TEST(ReshapeChains, InsideASubgraph) {
  expect_rewrite("fold_shapes", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool c, float[B,6] x) => (float[B,2,3] y) {
      y = If (c) <
        then_branch = then_g () => (float[B,2,3] r) {
          s = Shape (x)
          i0 = Constant <value = int64[1] {0}> ()
          b = Gather (s, i0)
          k = Constant <value = int64[2] {2, 3}> ()
          shape = Concat <axis = 0> (b, k)
          r = Reshape (x, shape)
        },
        else_branch = else_g () => (float[B,2,3] e) {
          k2 = Constant <value = int64[3] {-1, 2, 3}> ()
          e = Reshape (x, k2)
        }>
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool c, float[B,6] x) => (float[B,2,3] y) {
      y = If (c) <
        then_branch = then_g () => (float[B,2,3] r) <int64[3] tgt = {0, 2, 3}> {
          r = Reshape (x, tgt)
        },
        else_branch = else_g () => (float[B,2,3] e) {
          k2 = Constant <value = int64[3] {-1, 2, 3}> ()
          e = Reshape (x, k2)
        }>
    }
  )",
                 rewrites(1));
}

// TopK's output dims depend on k; only a declaration says t is [2,1]. Declarations of node
// outputs are the exporter's claims, never facts: the entry would need a second -1, so the
// Reshape stays, whether libonnx knows the opset (13) or not (18). With k a constant, libonnx's
// inference gives the dims at opset 13 and the target becomes a constant.
TEST(ReshapeChains, DeclarationsOfNodeOutputsAreNotUsed) {
  auto make = [](int opset, bool constant_k) {
    auto model =
        parse_text(R"(
      <ir_version: 8, opset_import: ["" : )" +
                   std::to_string(opset) + R"(]>
      g (float[2,3] x, int64[1] k, float[1,6] v) => (float[1,6] y) {
        )" +
                   (constant_k ? "kc = Constant <value = int64[1] {1}> ()\n t, i = TopK (x, kc)"
                               : "t, i = TopK (x, k)") +
                   R"(
        s = Shape (t)
        one = Constant <value = int64[1] {1}> ()
        d = Gather (s, one)
        m = Constant <value = int64[1] {-1}> ()
        shape = Concat <axis = 0> (d, m)
        y = Reshape (v, shape)
      }
    )");
    EXPECT_TRUE(model);
    if (!model) return model;
    model->graph().find_local("t")->set_type(float_type({2, 1}));
    return model;
  };
  for (int opset : {13, 18}) {
    SCOPED_TRACE(opset);
    auto declared = make(opset, false);
    ASSERT_TRUE(declared);
    EXPECT_FALSE(run_pass(*declared, "fold_shapes").changed);
    EXPECT_FALSE(declared->graph().find_local("y")->producer()->input(1)->is_constant());

    if (opset != 13) continue;
    auto known = make(opset, true);
    ASSERT_TRUE(known);
    EXPECT_TRUE(run_pass_checked(*known, "fold_shapes").changed);
    EXPECT_TRUE(known->graph().find_local("y")->producer()->input(1)->is_constant());
  }
}

}  // namespace
}  // namespace graft::testing
