// NonMaxSuppression, RoiAlign and GridSample (kernels/detection.cc) on what the ONNX test data
// does not cover: hostile operands (wrong ranks, mismatched dims, huge counts, NaN and infinite
// values, out-of-range indices), work beyond the budget, and the opsets without test data
// (NonMaxSuppression-10, RoiAlign-10, GridSample-20 with 1-D and 3-D grids).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/eval/budget.h"
#include "tests/eval/kernel_testing.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor f32(std::vector<int64_t> dims, std::vector<float> values) {
  return make<float>(TensorProto::FLOAT, std::move(dims), std::move(values));
}
Tensor i64(std::vector<int64_t> dims, std::vector<int64_t> values) {
  return make<int64_t>(TensorProto::INT64, std::move(dims), std::move(values));
}

absl::StatusCode code_of(const std::string& text, std::vector<const Tensor*> inputs) {
  std::vector<Tensor> out;
  return run(text, std::move(inputs), &out).code();
}

// Runs the node through run_kernel under a budget of `max_work` operations (1 GiB of memory
// unless given); `*spent` is the work the run charged.
absl::Status run_budgeted(const std::string& text, std::vector<const Tensor*> inputs,
                          uint64_t max_work, uint64_t* spent, uint64_t max_bytes = 1ull << 30) {
  auto parsed = testing::parse_text(text);
  if (!parsed) return absl::InternalError("parse");
  auto budget = Budget::make(max_bytes, max_work);
  BudgetScope scope(budget.get());
  Limits limits;
  limits.max_tensor_bytes = 1ull << 30;
  auto out = run_kernel(*parsed->graph().nodes().at(0), std::move(inputs), limits);
  *spent = budget->work();
  return out.status();
}

// ---------------------------------------------------------------------------------------------
// NonMaxSuppression

std::string nms_model(int opset, const std::string& attrs = "") {
  return model(opset, "(float b, float s, int64 m, float iou, float st) => (int64[K,3] y)",
               "y = NonMaxSuppression " + attrs + " (b, s, m, iou, st)");
}

// `n` unit boxes side by side along x ([y1, x1, y2, x2]): none overlaps another.
Tensor disjoint_boxes(int64_t n) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) {
    const float x = static_cast<float>(2 * i);
    v.insert(v.end(), {0.0f, x, 1.0f, x + 1.0f});
  }
  return f32({1, n, 4}, v);
}

// The selected box indices (column 2), checking columns 0 and 1 are batch 0, class 0.
std::vector<int64_t> selected_boxes(const Tensor& y) {
  std::vector<int64_t> boxes;
  const std::vector<int64_t> v = ints_of(y);
  for (size_t i = 0; i + 2 < v.size(); i += 3) {
    EXPECT_EQ(v[i], 0);
    EXPECT_EQ(v[i + 1], 0);
    boxes.push_back(v[i + 2]);
  }
  return boxes;
}

TEST(NonMaxSuppression, RejectsWrongRanksAndMismatchedDims) {
  const std::string text = nms_model(11);
  Tensor boxes = disjoint_boxes(3), scores = f32({1, 1, 3}, {0.1f, 0.2f, 0.3f});
  Tensor max = i64({}, {3}), iou = f32({}, {0.5f}), st = f32({}, {0.0f});
  const auto ia = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code_of(text, {&boxes, &scores, &max, &iou, &st}), absl::StatusCode::kOk);
  Tensor boxes_2d = f32({3, 4}, {});
  EXPECT_EQ(code_of(text, {&boxes_2d, &scores, &max, &iou, &st}), ia);
  Tensor boxes_5 = f32({1, 3, 5}, {});
  EXPECT_EQ(code_of(text, {&boxes_5, &scores, &max, &iou, &st}), ia);
  Tensor scores_2d = f32({1, 3}, {});
  EXPECT_EQ(code_of(text, {&boxes, &scores_2d, &max, &iou, &st}), ia);
  Tensor scores_batch = f32({2, 1, 3}, {});  // two batches of scores, one of boxes
  EXPECT_EQ(code_of(text, {&boxes, &scores_batch, &max, &iou, &st}), ia);
  Tensor scores_count = f32({1, 1, 4}, {});  // four boxes' scores, three boxes
  EXPECT_EQ(code_of(text, {&boxes, &scores_count, &max, &iou, &st}), ia);
  Tensor two_max = i64({2}, {1, 2}), float_max = f32({}, {3});
  EXPECT_EQ(code_of(text, {&boxes, &scores, &two_max, &iou, &st}), ia);
  EXPECT_EQ(code_of(text, {&boxes, &scores, &float_max, &iou, &st}), ia);
  for (float bad : {-0.1f, 1.5f, kNan}) {
    Tensor bad_iou = f32({}, {bad});
    EXPECT_EQ(code_of(text, {&boxes, &scores, &max, &bad_iou, &st}), ia) << bad;
  }
  EXPECT_EQ(code_of(nms_model(11, "<center_point_box = 2>"), {&boxes, &scores, &max, &iou, &st}),
            ia);
  Tensor boxes_f64 = make<double>(TensorProto::DOUBLE, {1, 3, 4}, {});
  EXPECT_EQ(code_of(text, {&boxes_f64, &scores, &max, &iou, &st}),
            absl::StatusCode::kUnimplemented);
}

// max_output_boxes_per_class near 2^63 selects every box there is, and allocates for those only
// (a reservation of the requested count would pass the 1 MiB memory budget).
TEST(NonMaxSuppression, HugeMaxOutputIsBoundedByTheBoxes) {
  const int64_t n = 1000;
  Tensor boxes = disjoint_boxes(n);
  std::vector<float> s(n);
  for (int64_t i = 0; i < n; ++i) s[i] = static_cast<float>(i);
  Tensor scores = f32({1, 1, n}, s);
  Tensor max = i64({1}, {std::numeric_limits<int64_t>::max()});
  auto parsed = testing::parse_text(nms_model(11));
  ASSERT_TRUE(parsed);
  auto budget = Budget::make(1 << 20, 0);
  BudgetScope scope(budget.get());
  auto out = run_kernel(*parsed->graph().nodes().at(0), {&boxes, &scores, &max}, Limits{});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ((*out)[0].dims(), (std::vector<int64_t>{n, 3}));
  const std::vector<int64_t> picked = selected_boxes((*out)[0]);
  EXPECT_EQ(picked.front(), n - 1);  // highest score first
  EXPECT_EQ(picked.back(), 0);
}

// Scores: NaN sorts after every number (so the order is well defined) and never passes a
// score_threshold; boxes with a NaN coordinate suppress nothing and are never suppressed.
TEST(NonMaxSuppression, NanScoresAndBoxesAreOrderedAndNeverSuppress) {
  Tensor boxes = disjoint_boxes(4);
  Tensor scores = f32({1, 1, 4}, {kNan, 0.5f, kNan, 0.9f});
  Tensor max = i64({}, {10}), iou = f32({}, {0.0f}), st = f32({}, {0.0f});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(nms_model(11), {&boxes, &scores, &max, &iou}, &out).ok());
  EXPECT_EQ(selected_boxes(out[0]), (std::vector<int64_t>{3, 1, 0, 2}));
  ASSERT_TRUE(run(nms_model(11), {&boxes, &scores, &max, &iou, &st}, &out).ok());
  EXPECT_EQ(selected_boxes(out[0]), (std::vector<int64_t>{3, 1}));
  Tensor nan_st = f32({}, {kNan});  // no score is above NaN
  ASSERT_TRUE(run(nms_model(11), {&boxes, &scores, &max, &iou, &nan_st}, &out).ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{0, 3}));

  // Box 1 equals box 0 but for a NaN corner; box 2 equals box 0: only box 2 is suppressed.
  Tensor same = f32({1, 3, 4}, {0, 0, 1, 1, 0, 0, kNan, 1, 0, 0, 1, 1});
  Tensor ordered = f32({1, 1, 3}, {0.9f, 0.8f, 0.7f});
  Tensor half = f32({}, {0.5f});
  ASSERT_TRUE(run(nms_model(11), {&same, &ordered, &max, &half}, &out).ok());
  EXPECT_EQ(selected_boxes(out[0]), (std::vector<int64_t>{0, 1}));
}

// Opset 10 behaves as 11; without max_output_boxes_per_class nothing is selected; a negative
// count is 0; center_point_box 1 reads [x_center, y_center, width, height].
TEST(NonMaxSuppression, Opset10DefaultsAndCenterFormat) {
  Tensor boxes = disjoint_boxes(2), scores = f32({1, 1, 2}, {0.2f, 0.4f});
  Tensor max = i64({}, {5}), negative = i64({}, {-1});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(nms_model(10), {&boxes, &scores, &max}, &out).ok());
  EXPECT_EQ(selected_boxes(out[0]), (std::vector<int64_t>{1, 0}));
  ASSERT_TRUE(run(nms_model(10), {&boxes, &scores}, &out).ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{0, 3}));
  ASSERT_TRUE(run(nms_model(11), {&boxes, &scores, &negative}, &out).ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{0, 3}));
  // Centres (0, 0) and (0.5, 0), width and height 1: they overlap by half, IoU 1/3.
  Tensor centers = f32({1, 2, 4}, {0, 0, 1, 1, 0.5f, 0, 1, 1});
  Tensor third = f32({}, {0.3f});
  ASSERT_TRUE(
      run(nms_model(11, "<center_point_box = 1>"), {&centers, &scores, &max, &third}, &out).ok());
  EXPECT_EQ(selected_boxes(out[0]), (std::vector<int64_t>{1}));
  Tensor above = f32({}, {0.34f});
  ASSERT_TRUE(
      run(nms_model(11, "<center_point_box = 1>"), {&centers, &scores, &max, &above}, &out).ok());
  EXPECT_EQ(selected_boxes(out[0]), (std::vector<int64_t>{1, 0}));
}

// 3000 boxes of one class, all candidates: about 4.5 million IoUs, refused before the first
// (a kernel that only charged as it went would spend the whole budget first).
TEST(NonMaxSuppression, QuadraticWorkIsRefusedBeforeItStarts) {
  const int64_t n = 3000;
  Tensor boxes = disjoint_boxes(n);
  Tensor scores = f32({1, 1, n}, std::vector<float>(n, 1.0f));
  Tensor max = i64({}, {n});
  uint64_t spent = 0;
  const uint64_t budget = 1'000'000;
  absl::Status st = run_budgeted(nms_model(11), {&boxes, &scores, &max}, budget, &spent);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_LT(spent, budget / 10);
  EXPECT_TRUE(run_budgeted(nms_model(11), {&boxes, &scores, &max}, 0, &spent).ok());
}

// ---------------------------------------------------------------------------------------------
// RoiAlign

std::string roi_model(int opset, const std::string& attrs = "") {
  return model(opset, "(float x, float rois, int64 idx) => (float y)",
               "y = RoiAlign " + attrs + " (x, rois, idx)");
}

TEST(RoiAlign, BatchIndicesOutOfRangeAreInvalid) {
  Tensor x = f32({2, 1, 2, 2}, {});
  Tensor rois = f32({1, 4}, {0, 0, 1, 1});
  for (int64_t bad : {int64_t{2}, int64_t{-1}, std::numeric_limits<int64_t>::min()}) {
    Tensor idx = i64({1}, {bad});
    EXPECT_EQ(code_of(roi_model(16), {&x, &rois, &idx}), absl::StatusCode::kInvalidArgument) << bad;
  }
  Tensor ok = i64({1}, {1});
  EXPECT_EQ(code_of(roi_model(16), {&x, &rois, &ok}), absl::StatusCode::kOk);
  // An empty batch has no valid index at all.
  Tensor empty_x = f32({0, 1, 2, 2}, {});
  Tensor zero = i64({1}, {0});
  EXPECT_EQ(code_of(roi_model(16), {&empty_x, &rois, &zero}), absl::StatusCode::kInvalidArgument);
}

TEST(RoiAlign, RejectsWrongRanksTypesAndAttributes) {
  Tensor x = f32({1, 1, 2, 2}, {}), rois = f32({1, 4}, {0, 0, 1, 1}), idx = i64({1}, {0});
  const auto ia = absl::StatusCode::kInvalidArgument;
  Tensor x3 = f32({1, 2, 2}, {});
  EXPECT_EQ(code_of(roi_model(16), {&x3, &rois, &idx}), ia);
  Tensor rois5 = f32({1, 5}, {});
  EXPECT_EQ(code_of(roi_model(16), {&x, &rois5, &idx}), ia);
  Tensor rois1d = f32({4}, {});
  EXPECT_EQ(code_of(roi_model(16), {&x, &rois1d, &idx}), ia);
  Tensor idx2 = i64({2}, {0, 0});  // two indices, one ROI
  EXPECT_EQ(code_of(roi_model(16), {&x, &rois, &idx2}), ia);
  Tensor float_idx = f32({1}, {0});
  EXPECT_EQ(code_of(roi_model(16), {&x, &rois, &float_idx}), ia);
  Tensor rois_f64 = make<double>(TensorProto::DOUBLE, {1, 4}, {0, 0, 1, 1});
  EXPECT_EQ(code_of(roi_model(16), {&x, &rois_f64, &idx}), ia);
  for (const char* attrs :
       {"<mode = \"median\">", "<coordinate_transformation_mode = \"asymmetric\">",
        "<output_height = 0>", "<output_width = -3>", "<sampling_ratio = -1>",
        "<output_height = 4611686018427387904>"}) {
    EXPECT_EQ(code_of(roi_model(16, attrs), {&x, &rois, &idx}), ia) << attrs;
  }
  Tensor xi = make<int32_t>(TensorProto::INT32, {1, 1, 2, 2}, {});
  EXPECT_EQ(code_of(roi_model(16), {&xi, &rois, &idx}), absl::StatusCode::kUnimplemented);
}

// A ROI that is not finite after scaling (a NaN or infinite corner, a NaN spatial_scale) has no
// sample count: InvalidArgument, not a conversion of NaN to an integer.
TEST(RoiAlign, NonFiniteRoisAreInvalid) {
  Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4}), idx = i64({1}, {0});
  for (float bad : {kNan, kInf, -kInf}) {
    Tensor rois = f32({1, 4}, {0, 0, bad, 1});
    EXPECT_EQ(code_of(roi_model(16), {&x, &rois, &idx}), absl::StatusCode::kInvalidArgument) << bad;
  }
  Tensor rois = f32({1, 4}, {0, 0, 1, 1});
  // 3e38 * 3e38 overflows float but not double: still finite, and sampled (outside the map).
  Tensor big = f32({1, 4}, {3e38f, 3e38f, 3e38f, 3e38f});
  std::vector<Tensor> out;
  ASSERT_TRUE(
      run(roi_model(16, "<spatial_scale = 3e38, sampling_ratio = 1>"), {&x, &big, &idx}, &out)
          .ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{0}));
}

// Hand-computed: X = [[1, 2], [3, 4]], ROI (0, 0)-(1, 1), one sample per bin. Unshifted
// (opset 10, output_half_pixel) the sample is at (0.5, 0.5): the mean 2.5, and in max mode the
// largest weighted corner 0.25 * 4 = 1 (the reference's definition); shifted by -0.5 (opset 16's
// default) it is at (0, 0): 1. A ROI beyond the map samples nothing but zeros.
TEST(RoiAlign, ModesAndCoordinateTransforms) {
  Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor rois = f32({1, 4}, {0, 0, 1, 1}), idx = i64({1}, {0});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(roi_model(10, "<sampling_ratio = 1>"), {&x, &rois, &idx}, &out).ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{2.5}));
  ASSERT_TRUE(run(roi_model(16,
                            "<sampling_ratio = 1, coordinate_transformation_mode = "
                            "\"output_half_pixel\">"),
                  {&x, &rois, &idx}, &out)
                  .ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{2.5}));
  ASSERT_TRUE(
      run(roi_model(10, "<sampling_ratio = 1, mode = \"max\">"), {&x, &rois, &idx}, &out).ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{1.0}));
  ASSERT_TRUE(run(roi_model(16, "<sampling_ratio = 1>"), {&x, &rois, &idx}, &out).ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{1.0}));
  Tensor far = f32({1, 4}, {10, 10, 11, 11});
  ASSERT_TRUE(run(roi_model(16), {&x, &far, &idx}, &out).ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{0.0}));
  // Output bins: a 2 x 2 output of the whole map, one sample per bin at the pixel centres.
  Tensor whole = f32({1, 4}, {0, 0, 2, 2});
  ASSERT_TRUE(run(roi_model(16, "<output_height = 2, output_width = 2, sampling_ratio = 1>"),
                  {&x, &whole, &idx}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{1, 2, 3, 4}));
}

// A ROI of 1e30 pixels with sampling_ratio 0 asks for ceil(1e30)^2 samples per bin: refused,
// with nothing spent; an affordable ROI runs under the same budget.
TEST(RoiAlign, HugeSampleCountsAreRefusedBeforeTheyStart) {
  Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4}), idx = i64({1}, {0});
  Tensor huge = f32({1, 4}, {0, 0, 1e30f, 1e30f});
  uint64_t spent = 0;
  absl::Status st = run_budgeted(roi_model(16), {&x, &huge, &idx}, 1'000'000, &spent);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_EQ(spent, 0u);
  // No work limit at all: still refused (no run could finish it), not an overflowed count.
  st = run_budgeted(roi_model(16), {&x, &huge, &idx}, 0, &spent);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  // 2000 x 2000 pixels: 4 million samples of 5 operations, over a budget of one million.
  Tensor big = f32({1, 4}, {0, 0, 2000, 2000});
  st = run_budgeted(roi_model(16), {&x, &big, &idx}, 1'000'000, &spent);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_EQ(spent, 0u);
  Tensor small = f32({1, 4}, {0, 0, 2, 2});
  EXPECT_TRUE(run_budgeted(roi_model(16), {&x, &small, &idx}, 1'000'000, &spent).ok());
}

// ---------------------------------------------------------------------------------------------
// GridSample

std::string grid_model(int opset, const std::string& attrs = "") {
  return model(opset, "(float x, float grid) => (float y)",
               "y = GridSample " + attrs + " (x, grid)");
}

TEST(GridSample, RejectsWrongRanksModesAndTypes) {
  Tensor x = f32({1, 1, 2, 2}, {}), grid = f32({1, 1, 1, 2}, {});
  const auto ia = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code_of(grid_model(16), {&x, &grid}), absl::StatusCode::kOk);
  Tensor x3 = f32({1, 1, 2}, {}), grid3 = f32({1, 1, 1}, {});
  EXPECT_EQ(code_of(grid_model(16), {&x3, &grid3}), ia);  // opset 16: 4-D only
  EXPECT_EQ(code_of(grid_model(20), {&x3, &grid3}), absl::StatusCode::kOk);
  Tensor x2 = f32({1, 1}, {}), grid2 = f32({1, 0}, {});
  EXPECT_EQ(code_of(grid_model(20), {&x2, &grid2}), ia);  // no spatial dims
  Tensor grid_rank = f32({1, 1, 2}, {});
  EXPECT_EQ(code_of(grid_model(16), {&x, &grid_rank}), ia);
  Tensor grid_last = f32({1, 1, 1, 3}, {});
  EXPECT_EQ(code_of(grid_model(16), {&x, &grid_last}), ia);
  Tensor grid_batch = f32({2, 1, 1, 2}, {});
  EXPECT_EQ(code_of(grid_model(16), {&x, &grid_batch}), ia);
  // The modes' names changed in opset 20.
  EXPECT_EQ(code_of(grid_model(16, "<mode = \"linear\">"), {&x, &grid}), ia);
  EXPECT_EQ(code_of(grid_model(16, "<mode = \"bicubic\">"), {&x, &grid}), absl::StatusCode::kOk);
  EXPECT_EQ(code_of(grid_model(20, "<mode = \"bilinear\">"), {&x, &grid}), ia);
  EXPECT_EQ(code_of(grid_model(20, "<mode = \"cubic\">"), {&x, &grid}), absl::StatusCode::kOk);
  EXPECT_EQ(code_of(grid_model(16, "<padding_mode = \"wrap\">"), {&x, &grid}), ia);
  Tensor xi = make<int32_t>(TensorProto::INT32, {1, 1, 2, 2}, {});
  EXPECT_EQ(code_of(grid_model(20), {&xi, &grid}), absl::StatusCode::kUnimplemented);
  Tensor grid_i = make<int32_t>(TensorProto::INT32, {1, 1, 1, 2}, {});
  EXPECT_EQ(code_of(grid_model(16), {&x, &grid_i}), ia);
  Tensor x_empty = f32({1, 1, 0, 2}, {});  // nothing to sample for a non-empty output
  EXPECT_EQ(code_of(grid_model(16), {&x_empty, &grid}), ia);
}

// Non-finite grid values: NaN gives NaN whatever the padding; infinity is outside the input (0
// with zeros, the edge pixel with border) and has no reflection (NaN). Huge finite values are
// outside too, and reflect into the input.
TEST(GridSample, NanAndInfiniteGridValues) {
  Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor grid = f32({1, 1, 5, 2}, {kNan, 0, kInf, 0, 0, -kInf, 1e30f, 0, -1e30f, -1e30f});
  std::vector<Tensor> out;
  for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
    const std::string m = std::string("mode = \"") + mode + "\"";
    ASSERT_TRUE(run(grid_model(16, "<" + m + ">"), {&x, &grid}, &out).ok()) << mode;
    std::vector<double> v = doubles_of(out[0]);
    EXPECT_TRUE(std::isnan(v[0])) << mode;
    EXPECT_EQ(v[1], 0) << mode;
    EXPECT_EQ(v[2], 0) << mode;
    EXPECT_EQ(v[3], 0) << mode;
    EXPECT_EQ(v[4], 0) << mode;

    ASSERT_TRUE(
        run(grid_model(16, "<" + m + ", padding_mode = \"border\">"), {&x, &grid}, &out).ok())
        << mode;
    v = doubles_of(out[0]);
    EXPECT_TRUE(std::isnan(v[0])) << mode;
    // Clamped to the edges: x = +inf to the last column, y = -inf to the first row.
    for (int i = 1; i <= 4; ++i) EXPECT_TRUE(std::isfinite(v[i])) << mode << " " << i;
    // (0, -inf): the first row, pixel 0.5 between columns 0 and 1 (nearest: half to even, 0).
    EXPECT_EQ(v[2], std::string(mode) == "nearest" ? 1.0 : 1.5) << mode;
    EXPECT_EQ(v[4], 1) << mode;  // both far before the start: the top-left pixel

    ASSERT_TRUE(
        run(grid_model(16, "<" + m + ", padding_mode = \"reflection\">"), {&x, &grid}, &out).ok())
        << mode;
    v = doubles_of(out[0]);
    EXPECT_TRUE(std::isnan(v[0])) << mode;
    EXPECT_TRUE(std::isnan(v[1])) << mode;
    EXPECT_TRUE(std::isnan(v[2])) << mode;
    // Reflected into the input: finite, and for the modes without negative weights within
    // X's values.
    for (int i = 3; i <= 4; ++i) {
      EXPECT_TRUE(std::isfinite(v[i])) << mode << " " << i;
      if (std::string(mode) != "bicubic") {
        EXPECT_TRUE(v[i] >= 1 && v[i] <= 4) << mode << " " << v[i];
      }
    }
  }
}

// A NaN coordinate makes the value NaN even when the other coordinate is far outside (which
// alone would make it 0).
TEST(GridSample, NanWinsOverOutside) {
  Tensor x = f32({1, 1, 2, 2}, {1, 2, 3, 4});
  Tensor grid = f32({1, 1, 2, 2}, {1e30f, kNan, kNan, 1e30f});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(grid_model(16), {&x, &grid}, &out).ok());
  for (double v : doubles_of(out[0])) EXPECT_TRUE(std::isnan(v)) << v;
}

// Nearest rounds half to even: with D = 4 and align_corners = 0, grid -0.5 is pixel 0.5 (-> 0)
// and grid 0 is pixel 1.5 (-> 2). Cubic convolution uses Keys' kernel with a = -0.75, linear
// interpolation reproduces a ramp.
TEST(GridSample, NearestRoundsHalfToEvenAndInterpolationWeights) {
  Tensor x = f32({1, 1, 1, 4}, {10, 20, 30, 40});
  Tensor grid = f32({1, 1, 2, 2}, {-0.5f, 0, 0, 0});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(grid_model(16, "<mode = \"nearest\">"), {&x, &grid}, &out).ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{10, 30}));
  Tensor ramp = f32({1, 1, 1, 8}, {0, 1, 2, 3, 4, 5, 6, 7});
  Tensor at = f32({1, 1, 1, 2}, {-0.0625f, 0});  // pixel ((v + 1) * 8 - 1) / 2 = 3.25
  // Keys' weights with a = -0.75 at t = 0.25 are (-0.10546875, 0.87890625, 0.26171875,
  // -0.03515625) over pixels 2..5: 3.296875 (a = -0.5 would reproduce the ramp, 3.25).
  ASSERT_TRUE(run(grid_model(20, "<mode = \"cubic\">"), {&ramp, &at}, &out).ok());
  EXPECT_NEAR(out[0].get_double(0), 3.296875, 1e-6);
  ASSERT_TRUE(run(grid_model(16, "<mode = \"bilinear\">"), {&ramp, &at}, &out).ok());
  EXPECT_NEAR(out[0].get_double(0), 3.25, 1e-6);
}

// Opset 20's 1-D grids, reflection far from the border: D = 3 with align_corners = 1 has
// bounds [0, 2]; pixel 5 reflects to -1, then to 1 (value 2); pixel 4.5 to 0.5 (value 1.5).
TEST(GridSample, OneDimensionalReflection) {
  Tensor x = f32({1, 1, 3}, {1, 2, 3});
  Tensor grid = f32({1, 3, 1}, {4, 3.5f, -2});  // pixels (v + 1) * 1: 5, 4.5, -1
  std::vector<Tensor> out;
  ASSERT_TRUE(
      run(grid_model(20, "<align_corners = 1, padding_mode = \"reflection\">"), {&x, &grid}, &out)
          .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1, 1, 3}));
  const std::vector<double> v = doubles_of(out[0]);
  EXPECT_NEAR(v[0], 2, 1e-6);
  EXPECT_NEAR(v[1], 1.5, 1e-6);
  EXPECT_NEAR(v[2], 2, 1e-6);  // -1 reflects to 1
}

// Opset 20's 3-D grids list (x, y, z), innermost first: X = 0..7 over [D, H, W] = [2, 2, 2];
// with align_corners the corners are the corner voxels, and the centre is their mean.
TEST(GridSample, VolumetricGridsListTheInnermostCoordinateFirst) {
  Tensor x = f32({1, 1, 2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  Tensor grid = f32({1, 1, 1, 4, 3}, {-1, -1, -1, 1, -1, -1, -1, 1, 1, 0, 0, 0});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(grid_model(20, "<align_corners = 1>"), {&x, &grid}, &out).ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1, 1, 1, 1, 4}));
  const std::vector<double> v = doubles_of(out[0]);
  EXPECT_NEAR(v[0], 0, 1e-6);    // (w, h, d) = (0, 0, 0)
  EXPECT_NEAR(v[1], 1, 1e-6);    // w = 1
  EXPECT_NEAR(v[2], 6, 1e-6);    // h = 1, d = 1: 4 + 2
  EXPECT_NEAR(v[3], 3.5, 1e-6);  // the mean of the eight
  ASSERT_TRUE(
      run(grid_model(20, "<align_corners = 1, mode = \"nearest\">"), {&x, &grid}, &out).ok());
  EXPECT_EQ(doubles_of(out[0])[2], 6);
}

// 64 x 64 locations of 64 channels in cubic mode: 16 taps each, about 4.3 million operations,
// refused before any is spent.
TEST(GridSample, WorkBeyondTheBudgetIsRefusedBeforeItStarts) {
  Tensor x = f32({1, 64, 4, 4}, {});
  Tensor grid = f32({1, 64, 64, 2}, {});
  uint64_t spent = 0;
  const std::string text = grid_model(16, "<mode = \"bicubic\">");
  absl::Status st = run_budgeted(text, {&x, &grid}, 1'000'000, &spent);
  EXPECT_TRUE(absl::IsResourceExhausted(st)) << st;
  EXPECT_EQ(spent, 0u);  // not even the output was made
  EXPECT_TRUE(run_budgeted(text, {&x, &grid}, 10'000'000, &spent).ok());
}

}  // namespace
}  // namespace graft::eval
