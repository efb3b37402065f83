// pad_into_conv_or_pool (core/passes/fuse_pad.cc, in fuse_conv_batchnorm): a constant-mode Pad
// of the spatial axes becomes the pads of the Conv/AveragePool/MaxPool it feeds.
#include <limits>

#include "core/ir/tensor.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

TEST(FusePad, ZeroPadIntoConvAddsToItsPads) {
  // Pads layout [n, c, h, w begins | n, c, h, w ends]; the Conv already pads w by 1 at both ends.
  expect_rewrite("fuse_conv_batchnorm", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,5,5] x) => (float[1,3,6,6] y)
      <float[3,2,3,3] w = {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                           -1, 2, -3, 4, -5, 6, -7, 8, -9, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                           2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1},
       int64[8] pads = {0, 0, 2, 1, 0, 0, 1, 0}> {
      p = Pad (x, pads)
      y = Conv <pads = [0, 1, 0, 1]> (p, w)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,5,5] x) => (float[1,3,6,6] y)
      <float[3,2,3,3] w = {1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                           -1, 2, -3, 4, -5, 6, -7, 8, -9, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                           2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1}> {
      y = Conv <pads = [2, 2, 1, 1]> (x, w)
    }
  )",
                 rewrites(1));
}

// A Pad value of -inf (which the ONNX text syntax cannot write): the initializer `v` is set after
// parsing.
std::unique_ptr<ir::Model> with_minus_infinity(const std::string& text) {
  auto model = parse_text(text);
  if (!model) return model;
  ir::Value* v = model->graph().find_local("v");
  EXPECT_TRUE(v && v->is_constant());
  if (v)
    v->set_initializer(ir::make_float_tensor(onnx::TensorProto::FLOAT, {},
                                             {-std::numeric_limits<double>::infinity()}));
  return model;
}

TEST(FusePad, PoolsTakeThePadWhenTheirPaddingValueMatches) {
  // AveragePool counting the padding (zeros); opset 10 Pad keeps its amounts in an attribute.
  expect_rewrite("fuse_conv_batchnorm", R"(
    <ir_version: 8, opset_import: ["" : 10]>
    g (float[1,1,4,4] x) => (float[1,1,5,5] a) {
      p = Pad <pads = [0, 0, 1, 1, 0, 0, 1, 1]> (x)
      a = AveragePool <kernel_shape = [2, 2], count_include_pad = 1> (p)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 10]>
    g (float[1,1,4,4] x) => (float[1,1,5,5] a) {
      a = AveragePool <kernel_shape = [2, 2], count_include_pad = 1, pads = [1, 1, 1, 1]> (x)
    }
  )",
                 rewrites(1));
  // MaxPool pads with -inf.
  auto model = with_minus_infinity(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,4,4] x) => (float[1,1,5,5] m)
      <int64[8] pads = {0, 0, 1, 0, 0, 0, 1, 2}, float v = {0}> {
      q = Pad (x, pads, v)
      m = MaxPool <kernel_shape = [2, 2], strides = [1, 1]> (q)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(onnx_errors(*model), "");
  ir::Node* pool = only_node(model->graph(), "MaxPool");
  ASSERT_TRUE(pool);
  EXPECT_EQ(input_names(*pool), (std::vector<std::string>{"x"}));
  EXPECT_EQ(pool->attr_ints("pads"), (std::vector<int64_t>{1, 0, 1, 2}));
  EXPECT_EQ(count_ops(*model, "Pad"), 0);
}

TEST(FusePad, FusesInsideSubgraphsAndWithConstantValueInput) {
  expect_rewrite("fuse_conv_batchnorm", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[1,1,3,3] x) => (float[1,1,4,4] y) {
      y = If (cond) <
        then_branch = then_g () => (float[1,1,4,4] r) {
          pads = Constant <value = int64[8] {0, 0, 1, 1, 0, 0, 1, 1}> ()
          zero = Constant <value = float {0}> ()
          w = Constant <value = float[1,1,2,2] {1, -2, 3, 0.5}> ()
          p = Pad (x, pads, zero)
          r = Conv (p, w)
        },
        else_branch = else_g () => (float[1,1,4,4] e) {
          pads_e = Constant <value = int64[8] {0, 0, 1, 0, 0, 0, 0, 1}> ()
          e = Pad <mode = "edge"> (x, pads_e)
        }>
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[1,1,3,3] x) => (float[1,1,4,4] y) {
      y = If (cond) <
        then_branch = then_g () => (float[1,1,4,4] r) {
          w = Constant <value = float[1,1,2,2] {1, -2, 3, 0.5}> ()
          r = Conv <pads = [1, 1, 1, 1]> (x, w)
        },
        else_branch = else_g () => (float[1,1,4,4] e) {
          pads_e = Constant <value = int64[8] {0, 0, 1, 0, 0, 0, 0, 1}> ()
          e = Pad <mode = "edge"> (x, pads_e)
        }>
    }
  )",
                 rewrites(1));
}

TEST(FusePad, LeavesPadsThatAreNotTheConsumersPaddingAlone) {
  // Each case differs from a fusable one in one respect.
  const char* cases[] = {
      // value 1 into Conv (Conv pads with zeros)
      R"(g (float[1,1,3,3] x) => (float[1,1,4,4] y) <float[1,1,2,2] w = {1, 2, 3, 4},
         int64[8] pads = {0, 0, 1, 1, 0, 0, 1, 1}, float v = {1}> {
         p = Pad (x, pads, v)
         y = Conv (p, w) })",
      // reflect mode
      R"(g (float[1,1,3,3] x) => (float[1,1,4,4] y) <float[1,1,2,2] w = {1, 2, 3, 4},
         int64[8] pads = {0, 0, 1, 1, 0, 0, 1, 1}> {
         p = Pad <mode = "reflect"> (x, pads)
         y = Conv (p, w) })",
      // pads the channel axis
      R"(g (float[1,1,3,3] x) => (float[1,1,3,3] y) <float[1,2,1,1] w = {1, 2},
         int64[8] pads = {0, 1, 0, 0, 0, 0, 0, 0}> {
         p = Pad (x, pads)
         y = Conv (p, w) })",
      // a negative pad crops
      R"(g (float[1,1,3,3] x) => (float[1,1,2,3] y) <float[1,1,1,1] w = {2},
         int64[8] pads = {0, 0, -1, 0, 0, 0, 0, 0}> {
         p = Pad (x, pads)
         y = Conv (p, w) })",
      // the padded tensor is read elsewhere too
      R"(g (float[1,1,3,3] x) => (float[1,1,4,4] y, float[1,1,5,5] p) <float[1,1,2,2] w = {1, 2, 3, 4},
         int64[8] pads = {0, 0, 1, 1, 0, 0, 1, 1}> {
         p = Pad (x, pads)
         y = Conv (p, w) })",
      // auto_pad decides the Conv's padding
      R"(g (float[1,1,3,3] x) => (float[1,1,5,5] y) <float[1,1,2,2] w = {1, 2, 3, 4},
         int64[8] pads = {0, 0, 1, 1, 0, 0, 1, 1}> {
         p = Pad (x, pads)
         y = Conv <auto_pad = "SAME_UPPER"> (p, w) })",
      // AveragePool not counting padding (the default)
      R"(g (float[1,1,3,3] x) => (float[1,1,4,4] y) <int64[8] pads = {0, 0, 1, 1, 0, 0, 1, 1}> {
         p = Pad (x, pads)
         y = AveragePool <kernel_shape = [2, 2]> (p) })",
      // MaxPool after a zero Pad (MaxPool pads with -inf)
      R"(g (float[1,1,3,3] x) => (float[1,1,4,4] y) <int64[8] pads = {0, 0, 1, 1, 0, 0, 1, 1}> {
         p = Pad (x, pads)
         y = MaxPool <kernel_shape = [2, 2]> (p) })",
      // ceil_mode
      R"(g (float[1,1,4,4] x) => (float[1,1,3,3] y) <int64[8] pads = {0, 0, 1, 1, 0, 0, 0, 0}> {
         p = Pad (x, pads)
         y = AveragePool <kernel_shape = [2, 2], strides = [2, 2], count_include_pad = 1,
                          ceil_mode = 1> (p) })",
  };
  for (const char* body : cases) {
    SCOPED_TRACE(body);
    expect_no_rewrite("fuse_conv_batchnorm",
                      std::string(R"(<ir_version: 8, opset_import: ["" : 13]>)") + body);
  }
  // MaxPool after a -inf Pad, but its Indices are read.
  auto model = with_minus_infinity(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,3,3] x) => (float[1,1,4,4] y, int64[1,1,4,4] i)
      <int64[8] pads = {0, 0, 1, 1, 0, 0, 1, 1}, float v = {0}> {
      p = Pad (x, pads, v)
      y, i = MaxPool <kernel_shape = [2, 2]> (p)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass(*model, "fuse_conv_batchnorm").changed);
  EXPECT_EQ(count_ops(*model, "Pad"), 1);
}

}  // namespace
}  // namespace graft::testing
