// fuse_conv_batchnorm's per-channel Mul and Add rules, and fuse_matmul_add's Transpose into Gemm.
#include "tests/testing.h"

namespace graft::testing {
namespace {

ir::Node* producer_of(const ir::Model& m, const std::string& name) {
  for (ir::Graph* g : m.all_graphs())
    if (ir::Value* v = g->find_local(name)) return v->producer();
  return nullptr;
}

constexpr const char* kConvAdd = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[1,2,3,3] x) => (float[1,3,3,3] y)
    <float[3,2,1,1] w = {1, 2, 3, 4, 5, 6}, float[3] b = {0.5, 0.25, -1},
     float[3,1,1] c = {10, 20, 30}> {
    t = Conv (x, w, b)
    y = Add (t, c)
  }
)";

TEST(FuseConvAffine, PerChannelAddBecomesTheBias) {
  auto model = parse_text(kConvAdd);
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(result.rules.at("add_bias"), 1);
  EXPECT_EQ(count_ops(*model, "Add"), 0);
  ir::Node* conv = producer_of(*model, "y");
  ASSERT_TRUE(conv && conv->is("Conv"));
  // The weights are untouched (a shift does not scale them); the bias absorbed c.
  EXPECT_EQ(conv->input(1)->name(), "w");
  EXPECT_EQ(initializer_values(*model, conv->input(2)->name()),
            (std::vector<double>{10.5, 20.25, 29}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseConvAffine, PerChannelMulScalesWeightsAndBias) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,3,3] x) => (float[1,3,3,3] y)
      <float[3,2,1,1] w = {1, 2, 3, 4, 5, 6}, float[3] b = {0.5, 0.25, -1},
       float[1,3,1,1] s = {2, -1, 0.5}> {
      t = Conv (x, w, b)
      y = Mul (s, t)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
  EXPECT_EQ(result.rules.at("mul_scale"), 1);
  EXPECT_EQ(count_ops(*model, "Mul"), 0);
  ir::Node* conv = producer_of(*model, "y");
  ASSERT_TRUE(conv && conv->is("Conv"));
  EXPECT_EQ(initializer_values(*model, conv->input(1)->name()),
            (std::vector<double>{2, 4, -3, -4, 2.5, 3}));
  EXPECT_EQ(initializer_values(*model, conv->input(2)->name()),
            (std::vector<double>{1, -0.25, -0.5}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseConvAffine, ConvTransposeWithGroupsAndAScalar) {
  // W [C=4, M/group=1, k, k] with group 2: output channels 2; a scalar Mul scales all of them.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,4,2,2] x) => (float[1,2,3,3] y)
      <float[4,1,2,2] w = {1,2,3,4, 5,6,7,8, 9,10,11,12, 13,14,15,16}, float s = {3}> {
      t = ConvTranspose <group = 2> (x, w)
      y = Mul (t, s)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(run_pass_checked(*model, "fuse_conv_batchnorm").rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Mul"), 0);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FuseConvAffine, LookAlikesAreLeftAlone) {
  const char* cases[] = {
      // The constant varies along a spatial axis, not the channels.
      R"(<ir_version: 8, opset_import: ["" : 13]>
      g (float[1,2,3,3] x) => (float[1,3,3,3] y)
        <float[3,2,1,1] w = {1, 2, 3, 4, 5, 6}, float[3,1] c = {1, 2, 3}> {
        t = Conv (x, w)
        y = Add (t, c)
      })",
      // It would broadcast the result to a bigger shape.
      R"(<ir_version: 8, opset_import: ["" : 13]>
      g (float[1,2,3,3] x) => (float[2,3,3,3] y)
        <float[3,2,1,1] w = {1, 2, 3, 4, 5, 6}, float[2,3,1,1] c = {1, 2, 3, 4, 5, 6}> {
        t = Conv (x, w)
        y = Add (t, c)
      })",
      // The Conv's output is read elsewhere too.
      R"(<ir_version: 8, opset_import: ["" : 13]>
      g (float[1,2,3,3] x) => (float[1,3,3,3] y, float[1,3,3,3] t)
        <float[3,2,1,1] w = {1, 2, 3, 4, 5, 6}, float[3,1,1] c = {1, 2, 3}> {
        t = Conv (x, w)
        y = Add (t, c)
      })",
      // The other operand is not a constant.
      R"(<ir_version: 8, opset_import: ["" : 13]>
      g (float[1,2,3,3] x, float[3,1,1] c) => (float[1,3,3,3] y)
        <float[3,2,1,1] w = {1, 2, 3, 4, 5, 6}> {
        t = Conv (x, w)
        y = Mul (t, c)
      })",
      // Sub is not Add.
      R"(<ir_version: 8, opset_import: ["" : 13]>
      g (float[1,2,3,3] x) => (float[1,3,3,3] y)
        <float[3,2,1,1] w = {1, 2, 3, 4, 5, 6}, float[3,1,1] c = {1, 2, 3}> {
        t = Conv (x, w)
        y = Sub (t, c)
      })",
  };
  for (const char* text : cases) {
    auto model = parse_text(text);
    ASSERT_TRUE(model);
    EXPECT_EQ(run_pass_checked(*model, "fuse_conv_batchnorm").rewrites, 0) << text;
  }
}

// A weight with no elements may still declare dims whose product past the zero overflows
// int64: folding must not multiply them (undefined behaviour, caught by UBSan) and leaves it.
TEST(FuseConvAffine, EmptyWeightWithOverflowingDimsIsLeftAlone) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,0,5,5] x) => (float[1,2,5,5] y)
      <float[2,0,4294967296,4294967296] w = {}, float[2,1,1] c = {2, 3}> {
      t = Conv <kernel_shape = [1, 1]> (x, w)
      y = Mul (t, c)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(run_pass(*model, "fuse_conv_batchnorm").rewrites, 0);
  EXPECT_EQ(count_ops(*model, "Mul"), 1);
}

TEST(FuseConvAffine, InsideAnIfBranch) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[1,2,3,3] x) => (float[1,3,3,3] y)
      <float[3,2,1,1] w = {1, 2, 3, 4, 5, 6}, float[3,1,1] c = {10, 20, 30}> {
      y = If (cond) <
        then_branch = then_g () => (float[1,3,3,3] a) {
          t = Conv (x, w)
          a = Add (t, c)
        },
        else_branch = else_g () => (float[1,3,3,3] b) {
          b = Conv (x, w)
        }
      >
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(run_pass_checked(*model, "fuse_conv_batchnorm").rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Add"), 0);
  ir::Node* conv = producer_of(*model, "a");
  ASSERT_TRUE(conv && conv->is("Conv"));
  EXPECT_EQ(conv->inputs().size(), 3u);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(TransposeIntoGemm, TransposedOperandsFlipTheFlags) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[3,4] a, float[3,2] b) => (float[4,2] y) {
      at = Transpose <perm = [1, 0]> (a)
      bt = Transpose (b)
      y = Gemm <transB = 1> (at, bt)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_matmul_add");
  EXPECT_EQ(result.rules.at("transpose_into_gemm"), 2);
  EXPECT_EQ(count_ops(*model, "Transpose"), 0);
  ir::Node* gemm = producer_of(*model, "y");
  ASSERT_TRUE(gemm && gemm->is("Gemm"));
  EXPECT_EQ(input_names(*gemm), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(gemm->attr_int("transA", 0), 1);
  EXPECT_EQ(gemm->attr_int("transB", 0), 0);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(TransposeIntoGemm, LookAlikesAndSharedTransposes) {
  // A 3-D transpose cannot feed Gemm; an identity perm is not a transpose; a Transpose read
  // elsewhere stays for that reader (the Gemm still reads its input directly).
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[3,4] a, float[3,2] b) => (float[4,2] y, float[4,3] at) {
      at = Transpose <perm = [1, 0]> (a)
      same = Transpose <perm = [0, 1]> (b)
      y = Gemm (at, same)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_matmul_add");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Transpose"), 2);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(TransposeIntoGemm, InsideALoopBody) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[3,4] a, float[3,2] b) => (float[3,2] fin, float[2,4,2] ys)
      <int64 n = {2}, bool c = {1}> {
      fin, ys = Loop (n, c, b) <
        body = body_g (int64 i, bool ci, float[3,2] acc) => (bool co, float[3,2] acc_out,
                                                             float[4,2] out) {
          co = Identity (ci)
          acc_out = Identity (acc)
          at = Transpose (a)
          out = Gemm (at, acc)
        }
      >
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(run_pass_checked(*model, "fuse_matmul_add").rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Transpose"), 0);
  EXPECT_EQ(onnx_errors(*model), "");
}

}  // namespace
}  // namespace graft::testing
