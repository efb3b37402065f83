// convert_layout (core/passes/convert_layout.cc): optimize_transposes' push_transpose with
// Resize and the global pools moved too; optimize_transposes itself leaves them.
#include <string>

#include "tests/testing.h"

namespace graft::testing {
namespace {

constexpr char kPass[] = "convert_layout";

// NHWC frames upsampled in NCHW and given back in NHWC (a segmentation head served
// channels-last): the Resize's scales move to the NHWC axes and both Transposes go.
TEST(ConvertLayout, ResizeScalesMoveToTheOtherAxes) {
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,4,2] x) => (float[1,6,8,2] y) <float[4] scales = {1.0, 1.0, 2.0, 2.0}> {
      t = Transpose <perm = [0, 3, 1, 2]> (x)
      r = Resize <mode = "linear"> (t, , scales)
      y = Transpose <perm = [0, 2, 3, 1]> (r)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,4,2] x) => (float[1,6,8,2] y) <float[4] y_scales = {1.0, 2.0, 2.0, 1.0}> {
      y = Resize <mode = "linear"> (x, , y_scales)
    }
  )",
                 rewrites(1));
}

TEST(ConvertLayout, ResizeSizesMoveToTheOtherAxes) {
  auto model = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,4,2] x) => (float[1,5,7,2] y) <int64[4] sizes = {1, 2, 5, 7}> {
      t = Transpose <perm = [0, 3, 1, 2]> (x)
      r = Resize <mode = "nearest"> (t, , , sizes)
      y = Transpose <perm = [0, 2, 3, 1]> (r)
    }
  )",
                           rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Transpose"), 0);
  const ir::Node* resize = only_node(model->graph(), "Resize");
  ASSERT_TRUE(resize);
  EXPECT_EQ(values_of(resize->input(3)), (std::vector<double>{1, 5, 7, 2}));
}

TEST(ConvertLayout, GlobalPoolsBecomeReductionsOverTheMovedAxes) {
  // Both pools read the NCHW view of NHWC x: ReduceMean/ReduceMax over axes 1, 2 of x.
  auto model = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4,5] x) => (float[2,1,1,5] a, float[2,1,1,5] m) {
      t = Transpose <perm = [0, 3, 1, 2]> (x)
      pa = GlobalAveragePool (t)
      pm = GlobalMaxPool (t)
      a = Transpose <perm = [0, 2, 3, 1]> (pa)
      m = Transpose <perm = [0, 2, 3, 1]> (pm)
    }
  )",
                           rewrites(1));
  ASSERT_TRUE(model);
  EXPECT_EQ(count_ops(*model, "Transpose"), 0);
  EXPECT_EQ(count_ops(*model, "GlobalAveragePool") + count_ops(*model, "GlobalMaxPool"), 0);
  const ir::Node* mean = only_node(model->graph(), "ReduceMean");
  ASSERT_TRUE(mean);
  EXPECT_EQ(mean->attr_ints("axes"), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(mean->attr_int("keepdims", 1), 1);
  ASSERT_TRUE(only_node(model->graph(), "ReduceMax"));
}

TEST(ConvertLayout, AxesInputFromOpset18) {
  auto model = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[2,3,4,5] x) => (float[2,1,1,5] a) {
      t = Transpose <perm = [0, 3, 1, 2]> (x)
      pa = GlobalAveragePool (t)
      a = Transpose <perm = [0, 2, 3, 1]> (pa)
    }
  )",
                           rewrites(1));
  ASSERT_TRUE(model);
  const ir::Node* mean = only_node(model->graph(), "ReduceMean");
  ASSERT_TRUE(mean);
  EXPECT_EQ(values_of(mean->input(1)), (std::vector<double>{1, 2}));
}

TEST(ConvertLayout, OptimizeTransposesLeavesLayoutSensitiveOps) {
  const std::string text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,4,2] x) => (float[1,6,8,2] y) <float[4] scales = {1.0, 1.0, 2.0, 2.0}> {
      t = Transpose <perm = [0, 3, 1, 2]> (x)
      r = Resize <mode = "linear"> (t, , scales)
      y = Transpose <perm = [0, 2, 3, 1]> (r)
    }
  )";
  expect_no_rewrite("optimize_transposes", text);
}

TEST(ConvertLayout, RefusesWhatItCannotRemap) {
  // Scales from the graph, tf_crop_and_resize (roi per axis), a 1-D global pool (rank 3 is
  // fine; its spatial axis moves), and Resize before opset 11.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,4,2] x, float[4] s) => (float[1,2,?,?] y) {
      t = Transpose <perm = [0, 3, 1, 2]> (x)
      r = Resize <mode = "linear"> (t, , s)
      y = Transpose <perm = [0, 2, 3, 1]> (r)
    }
  )",
                    compare_outputs(Outputs::kNotCompared));  // random scales cannot be run
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,4,2] x) => (float[1,2,2,2] y)
      <float[8] roi = {0, 0, 0, 0, 1, 1, 1, 1}, int64[4] sizes = {1, 2, 2, 2}> {
      t = Transpose <perm = [0, 3, 1, 2]> (x)
      r = Resize <mode = "linear", coordinate_transformation_mode = "tf_crop_and_resize"> (t, roi, , sizes)
      y = Transpose <perm = [0, 2, 3, 1]> (r)
    }
  )");
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 10]>
    g (float[1,3,4,2] x) => (float[1,6,8,2] y) <float[4] scales = {1.0, 1.0, 2.0, 2.0}> {
      t = Transpose <perm = [0, 3, 1, 2]> (x)
      r = Resize <mode = "linear"> (t, scales)
      y = Transpose <perm = [0, 2, 3, 1]> (r)
    }
  )");
}

}  // namespace
}  // namespace graft::testing
