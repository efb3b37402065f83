// Shape and data-movement kernels on cases the ONNX test data does not cover: the attribute
// forms of old opsets, opset-18+ forms, strings, edge modes, errors instead of crashes, and the
// allocation limit.
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/eval/kernel_testing.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

Tensor floats(std::vector<int64_t> dims, std::vector<float> values) {
  return make<float>(TensorProto::FLOAT, std::move(dims), std::move(values));
}

std::vector<float> values_of(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.size());
}

TEST(ShapeKernelsTest, ReshapeAttributeFormAndZeroCopy) {
  Tensor x = floats({2, 3}, {1, 2, 3, 4, 5, 6});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(1, "(float[2,3] x) => (float[3,2] y)", "y = Reshape <shape = [3, -1]> (x)"),
                  {&x}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(values_of(out[0]), values_of(x));
  // 0 copies the input dim (allowzero = 0).
  Tensor shape = ints({0, 3, 1});
  ASSERT_TRUE(run(model(14, "(float[2,3] x, int64[3] s) => (float[2,3,1] y)", "y = Reshape (x, s)"),
                  {&x, &shape}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2, 3, 1}));
  Tensor bad = ints({4, -1, -1});
  EXPECT_EQ(run(model(14, "(float[2,3] x, int64[3] s) => (float[2,3,1] y)", "y = Reshape (x, s)"),
                {&x, &bad}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
  Tensor wrong = ints({4, 2});
  EXPECT_EQ(run(model(14, "(float[2,3] x, int64[2] s) => (float[4,2] y)", "y = Reshape (x, s)"),
                {&x, &wrong}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShapeKernelsTest, SliceAttributesAndExtremeBounds) {
  Tensor x = floats({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(9, "(float[2,4] x) => (float[1,2] y)",
                        "y = Slice <starts = [1, -3], ends = [100, 3], axes = [0, 1]> (x)"),
                  {&x}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{5, 6}));
  // Reversal with the extreme end value exporters use.
  Tensor starts = ints({-1}), ends = ints({std::numeric_limits<int64_t>::min()}), axes = ints({1}),
         steps = ints({-2});
  ASSERT_TRUE(run(model(13,
                        "(float[2,4] x, int64[1] s, int64[1] e, int64[1] a, int64[1] t) => "
                        "(float[2,2] y)",
                        "y = Slice (x, s, e, a, t)"),
                  {&x, &starts, &ends, &axes, &steps}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{3, 1, 7, 5}));
  Tensor zero = ints({0});
  EXPECT_EQ(run(model(13,
                      "(float[2,4] x, int64[1] s, int64[1] e, int64[1] a, int64[1] t) => "
                      "(float[2,2] y)",
                      "y = Slice (x, s, e, a, t)"),
                {&x, &starts, &ends, &axes, &zero}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShapeKernelsTest, PadModes) {
  Tensor x = floats({3}, {1, 2, 3});
  std::vector<Tensor> out;
  // Opset 2: pads and value as attributes.
  ASSERT_TRUE(
      run(model(2, "(float[3] x) => (float[6] y)", "y = Pad <pads = [1, 2], value = 9.0> (x)"),
          {&x}, &out)
          .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{9, 1, 2, 3, 9, 9}));
  // Reflect further than one period repeats the reflection like numpy.pad.
  Tensor pads = ints({5, 0});
  ASSERT_TRUE(run(model(13, "(float[3] x, int64[2] p) => (float[8] y)",
                        "y = Pad <mode = \"reflect\"> (x, p)"),
                  {&x, &pads}, &out)
                  .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{2, 1, 2, 3, 2, 1, 2, 3}));
  Tensor pads2 = ints({2, 1});
  ASSERT_TRUE(
      run(model(13, "(float[3] x, int64[2] p) => (float[6] y)", "y = Pad <mode = \"edge\"> (x, p)"),
          {&x, &pads2}, &out)
          .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{1, 1, 1, 2, 3, 3}));
  // Negative pads crop.
  Tensor crop = ints({-1, 1});
  Tensor value = floats({}, {7});
  ASSERT_TRUE(
      run(model(13, "(float[3] x, int64[2] p, float v) => (float[3] y)", "y = Pad (x, p, v)"),
          {&x, &crop, &value}, &out)
          .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{2, 3, 7}));
  Tensor too_much = ints({-4, 0});
  EXPECT_EQ(run(model(13, "(float[3] x, int64[2] p) => (float[3] y)", "y = Pad (x, p)"),
                {&x, &too_much}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
  // A crop larger than the axis is refused even when a pad at the other end keeps the sum valid
  // (the coordinates would not fit in int64).
  for (std::vector<int64_t> p : {std::vector<int64_t>{std::numeric_limits<int64_t>::min(),
                                                      std::numeric_limits<int64_t>::max()},
                                 std::vector<int64_t>{6, -5}, std::vector<int64_t>{-4, 5}}) {
    Tensor far = ints(p);
    EXPECT_EQ(run(model(13, "(float[3] x, int64[2] p) => (float[4] y)", "y = Pad (x, p)"),
                  {&x, &far}, &out)
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << p[0] << "," << p[1];
  }
}

TEST(ShapeKernelsTest, SplitForms) {
  Tensor x = floats({5}, {0, 1, 2, 3, 4});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(11, "(float[5] x) => (float[2] a, float[3] b)",
                        "a, b = Split <split = [2, 3]> (x)"),
                  {&x}, &out)
                  .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{0, 1}));
  EXPECT_EQ(values_of(out[1]), (std::vector<float>{2, 3, 4}));
  // Without split sizes the dim must divide evenly before opset 18.
  EXPECT_EQ(
      run(model(13, "(float[5] x) => (float[2] a, float[3] b)", "a, b = Split (x)"), {&x}, &out)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(ShapeKernelsTest, ExpandTileAndStrings) {
  Tensor x = floats({3, 1}, {1, 2, 3});
  Tensor shape = ints({1, 2});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(13, "(float[3,1] x, int64[2] s) => (float[3,2] y)", "y = Expand (x, s)"),
                  {&x, &shape}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{1, 1, 2, 2, 3, 3}));
  Tensor reps = ints({2, 2});
  ASSERT_TRUE(run(model(13, "(float[3,1] x, int64[2] r) => (float[6,2] y)", "y = Tile (x, r)"),
                  {&x, &reps}, &out)
                  .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{1, 1, 2, 2, 3, 3, 1, 1, 2, 2, 3, 3}));
  // Strings move like any other element.
  auto s = Tensor::zeros(TensorProto::STRING, {2, 2}, 1 << 20);
  ASSERT_TRUE(s.ok());
  s->strings() = {"a", "b", "c", "d"};
  ASSERT_TRUE(
      run(model(13, "(string[2,2] x) => (string[2,2] y)", "y = Transpose (x)"), {&*s}, &out).ok());
  EXPECT_EQ(out[0].strings(), (std::vector<std::string>{"a", "c", "b", "d"}));
}

TEST(ShapeKernelsTest, GatherFamilyChecksIndices) {
  Tensor x = floats({2, 3}, {0, 1, 2, 3, 4, 5});
  std::vector<Tensor> out;
  Tensor idx = ints({-1, 0});
  ASSERT_TRUE(
      run(model(13, "(float[2,3] x, int64[2] i) => (float[2,2] y)", "y = Gather <axis = 1> (x, i)"),
          {&x, &idx}, &out)
          .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{2, 0, 5, 3}));
  Tensor bad = ints({3});
  EXPECT_EQ(
      run(model(13, "(float[2,3] x, int64[1] i) => (float[2,1] y)", "y = Gather <axis = 1> (x, i)"),
          {&x, &bad}, &out)
          .code(),
      absl::StatusCode::kInvalidArgument);
  Tensor nd = make<int64_t>(TensorProto::INT64, {1, 2}, {1, 5});
  EXPECT_EQ(run(model(13, "(float[2,3] x, int64[1,2] i) => (float[1] y)", "y = GatherND (x, i)"),
                {&x, &nd}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
  Tensor nd_ok = make<int64_t>(TensorProto::INT64, {1, 2}, {1, -1});
  ASSERT_TRUE(run(model(13, "(float[2,3] x, int64[1,2] i) => (float[1] y)", "y = GatherND (x, i)"),
                  {&x, &nd_ok}, &out)
                  .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{5}));
}

TEST(ShapeKernelsTest, ScatterElementsAndNDReductions) {
  Tensor x = floats({4}, {1, 1, 1, 1});
  Tensor idx = make<int64_t>(TensorProto::INT64, {3}, {0, 0, 3});
  Tensor upd = floats({3}, {2, 3, 4});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(16, "(float[4] x, int64[3] i, float[3] u) => (float[4] y)",
                        "y = ScatterElements <reduction = \"add\"> (x, i, u)"),
                  {&x, &idx, &upd}, &out)
                  .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{6, 1, 1, 5}));
  Tensor nd_idx = make<int64_t>(TensorProto::INT64, {2, 1}, {1, 1});
  Tensor nd_upd = floats({2}, {3, 5});
  ASSERT_TRUE(run(model(16, "(float[4] x, int64[2,1] i, float[2] u) => (float[4] y)",
                        "y = ScatterND <reduction = \"mul\"> (x, i, u)"),
                  {&x, &nd_idx, &nd_upd}, &out)
                  .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{1, 15, 1, 1}));
  Tensor far = make<int64_t>(TensorProto::INT64, {3}, {0, 4, 1});
  EXPECT_EQ(run(model(13, "(float[4] x, int64[3] i, float[3] u) => (float[4] y)",
                      "y = ScatterElements (x, i, u)"),
                {&x, &far, &upd}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShapeKernelsTest, SqueezeUnsqueezeAttributeAndInputForms) {
  Tensor x = floats({1, 2, 1}, {1, 2});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(11, "(float[1,2,1] x) => (float[2,1] y)", "y = Squeeze <axes = [0]> (x)"),
                  {&x}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2, 1}));
  ASSERT_TRUE(
      run(model(13, "(float[1,2,1] x) => (float[2] y)", "y = Squeeze (x)"), {&x}, &out).ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2}));
  Tensor axis1 = ints({1});
  EXPECT_EQ(run(model(13, "(float[1,2,1] x, int64[1] a) => (float[2] y)", "y = Squeeze (x, a)"),
                {&x, &axis1}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
  Tensor axes = ints({-1, 0});
  ASSERT_TRUE(
      run(model(13, "(float[1,2,1] x, int64[2] a) => (float[1,1,2,1,1] y)", "y = Unsqueeze (x, a)"),
          {&x, &axes}, &out)
          .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1, 1, 2, 1, 1}));
}

TEST(ShapeKernelsTest, ShapeSliceAndNonZero) {
  Tensor x = floats({2, 3, 4}, std::vector<float>(24, 0.0f));
  x.data<float>()[5] = 1;   // (0, 1, 1)
  x.data<float>()[23] = 2;  // (1, 2, 3)
  std::vector<Tensor> out;
  ASSERT_TRUE(
      run(model(15, "(float[2,3,4] x) => (int64[2] y)", "y = Shape <start = -2> (x)"), {&x}, &out)
          .ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{3, 4}));
  ASSERT_TRUE(
      run(model(13, "(float[2,3,4] x) => (int64[3,2] y)", "y = NonZero (x)"), {&x}, &out).ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{0, 1, 1, 2, 1, 3}));
}

TEST(ShapeKernelsTest, AllocationLimitAndBadShapes) {
  std::vector<Tensor> out;
  Tensor huge = ints({1 << 20, 1 << 20});
  EXPECT_EQ(
      run(model(13, "(int64[2] s) => (float[N,M] y)", "y = ConstantOfShape (s)"), {&huge}, &out)
          .code(),
      absl::StatusCode::kResourceExhausted);
  Tensor negative = ints({2, -3});
  EXPECT_EQ(
      run(model(13, "(int64[2] s) => (float[N,M] y)", "y = ConstantOfShape (s)"), {&negative}, &out)
          .code(),
      absl::StatusCode::kInvalidArgument);
  Tensor x = floats({2}, {1, 2});
  Tensor reps = ints({std::numeric_limits<int64_t>::max()});
  EXPECT_FALSE(run(model(13, "(float[2] x, int64[1] r) => (float[N] y)", "y = Tile (x, r)"),
                   {&x, &reps}, &out)
                   .ok());
  Tensor start = make<int64_t>(TensorProto::INT64, {}, {std::numeric_limits<int64_t>::min()});
  Tensor limit = make<int64_t>(TensorProto::INT64, {}, {std::numeric_limits<int64_t>::max()});
  Tensor delta = make<int64_t>(TensorProto::INT64, {}, {1});
  EXPECT_EQ(run(model(13, "(int64 a, int64 b, int64 c) => (int64[N] y)", "y = Range (a, b, c)"),
                {&start, &limit, &delta}, &out)
                .code(),
            absl::StatusCode::kResourceExhausted);
  Tensor expand_to = ints({3, 5});
  Tensor x3 = floats({3}, {1, 2, 3});
  EXPECT_EQ(run(model(13, "(float[3] x, int64[2] s) => (float[3,5] y)", "y = Expand (x, s)"),
                {&x3, &expand_to}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShapeKernelsTest, RangeComputesEachElement) {
  Tensor a = make<int32_t>(TensorProto::INT32, {}, {10});
  Tensor b = make<int32_t>(TensorProto::INT32, {}, {1});
  Tensor c = make<int32_t>(TensorProto::INT32, {}, {-4});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(13, "(int32 a, int32 b, int32 c) => (int32[N] y)", "y = Range (a, b, c)"),
                  {&a, &b, &c}, &out)
                  .ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{10, 6, 2}));
}

TEST(ShapeKernelsTest, Opset18And19Forms) {
  Tensor x = floats({5}, {0, 1, 2, 3, 4});
  std::vector<Tensor> out;
  // num_outputs: every part ceil(5/3) = 2 long but the last.
  ASSERT_TRUE(run(model(18, "(float[5] x) => (float[2] a, float[2] b, float[1] c)",
                        "a, b, c = Split <num_outputs = 3> (x)"),
                  {&x}, &out)
                  .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{0, 1}));
  EXPECT_EQ(values_of(out[1]), (std::vector<float>{2, 3}));
  EXPECT_EQ(values_of(out[2]), (std::vector<float>{4}));
  // Pad with axes (18) and wrap mode (19).
  Tensor m = floats({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor pads = ints({1, 2});
  Tensor axes = ints({-1});
  ASSERT_TRUE(run(model(19, "(float[2,3] x, int64[2] p, float v, int64[1] a) => (float[2,6] y)",
                        "y = Pad <mode = \"wrap\"> (x, p, , a)"),
                  {&m, &pads, nullptr, &axes}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{3, 1, 2, 3, 1, 2, 6, 4, 5, 6, 4, 5}));
  EXPECT_EQ(run(model(18, "(float[2,3] x, int64[2] p) => (float[2,6] y)",
                      "y = Pad <mode = \"wrap\"> (x, p)"),
                {&m, &pads}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShapeKernelsTest, LessCommonDataMovementOps) {
  std::vector<Tensor> out;
  Tensor x = floats({3}, {1, 2, 3});
  auto cond = Tensor::zeros(TensorProto::BOOL, {4}, 1 << 20);
  ASSERT_TRUE(cond.ok());
  cond->data<bool>()[0] = true;
  cond->data<bool>()[2] = true;
  ASSERT_TRUE(run(model(11, "(float[3] x, bool[4] c) => (float[2] y)", "y = Compress (x, c)"),
                  {&x, &*cond}, &out)
                  .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{1, 3}));
  cond->data<bool>()[3] = true;  // selects a fourth element that does not exist
  EXPECT_EQ(run(model(11, "(float[3] x, bool[4] c) => (float[2] y)", "y = Compress (x, c)"),
                {&x, &*cond}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
  // OneHot: negative indices count from the end since opset 11, are "off" before.
  Tensor idx = ints({-1, 1});
  Tensor depth = ints({3});
  Tensor onoff = floats({2}, {0, 5});
  ASSERT_TRUE(run(model(11, "(int64[2] i, int64[1] d, float[2] v) => (float[2,3] y)",
                        "y = OneHot (i, d, v)"),
                  {&idx, &depth, &onoff}, &out)
                  .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{0, 0, 5, 0, 5, 0}));
  ASSERT_TRUE(run(model(9, "(int64[2] i, int64[1] d, float[2] v) => (float[2,3] y)",
                        "y = OneHot (i, d, v)"),
                  {&idx, &depth, &onoff}, &out)
                  .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{0, 0, 0, 0, 5, 0}));
  // ReverseSequence reverses only the first len steps of each batch entry.
  Tensor seq = floats({3, 2}, {1, 10, 2, 20, 3, 30});  // [time, batch]
  Tensor lens = ints({3, 2});
  ASSERT_TRUE(
      run(model(10, "(float[3,2] x, int64[2] l) => (float[3,2] y)", "y = ReverseSequence (x, l)"),
          {&seq, &lens}, &out)
          .ok());
  EXPECT_EQ(values_of(out[0]), (std::vector<float>{3, 20, 2, 10, 1, 30}));
  Tensor image = floats({1, 2, 1, 1}, {1, 2});
  EXPECT_EQ(run(model(13, "(float[1,2,1,1] x) => (float[1,1,2,2] y)",
                      "y = DepthToSpace <blocksize = 2> (x)"),
                {&image}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace graft::eval
