// Older opset versions (consumed_inputs, pre-7 broadcasting) and the simple ops of
// kernels/extra.cc on cases the ONNX test data does not cover.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <absl/strings/str_cat.h>

#include "tests/eval/kernel_testing.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

Tensor f32(std::vector<int64_t> dims, std::vector<float> values) {
  return make<float>(TensorProto::FLOAT, std::move(dims), std::move(values));
}

TEST(ExtraKernelsTest, LegacyBroadcastAlignsFromAxis) {
  // A [2, 3, 2] plus B [3] at axis 1: B[j] is added to A[i, j, k].
  std::vector<float> av(12);
  for (size_t i = 0; i < av.size(); ++i) av[i] = static_cast<float>(i);
  Tensor a = f32({2, 3, 2}, av), b = f32({3}, {10, 20, 30});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(6, "(float[2,3,2] a, float[3] b) => (float[2,3,2] y)",
                        "y = Add <broadcast = 1, axis = 1> (a, b)"),
                  {&a, &b}, &out)
                  .ok());
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) want.push_back(av[(i * 3 + j) * 2 + k] + 10.0 * (j + 1));
  EXPECT_EQ(doubles_of(out[0]), want);
  // Default axis: trailing alignment (B [2] against A's last dim), here with Sub.
  Tensor c = f32({2}, {1, 2});
  ASSERT_TRUE(run(model(6, "(float[2,3,2] a, float[2] c) => (float[2,3,2] y)",
                        "y = Sub <broadcast = 1> (a, c)"),
                  {&a, &c}, &out)
                  .ok());
  for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(out[0].get_double(i), av[i] - (i % 2 == 0 ? 1 : 2));
  // Without broadcast = 1 the shapes must match.
  EXPECT_EQ(run(model(6, "(float[2,3,2] a, float[3] b) => (float[2,3,2] y)", "y = Mul (a, b)"),
                {&a, &b}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
  // An axis past the end, up to the largest int64 (found by the kernel fuzzer: the check added
  // B's rank to it and overflowed), is an error, not a wrapped comparison.
  for (const char* axis : {"2", "9223372036854775807"})
    EXPECT_EQ(run(model(6, "(float[2,3,2] a, float[3] b) => (float[2,3,2] y)",
                        absl::StrCat("y = Add <broadcast = 1, axis = ", axis, "> (a, b)")),
                  {&a, &b}, &out)
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << axis;
}

TEST(ExtraKernelsTest, ConsumedInputsIsIgnored) {
  Tensor x = f32({3}, {-1, 0.5f, 2});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(1, "(float[3] x) => (float[3] y)", "y = Relu <consumed_inputs = [0]> (x)"),
                  {&x}, &out)
                  .ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{0, 0.5, 2}));
}

TEST(ExtraKernelsTest, PReluPerChannelOnlyBeforeOpset7) {
  // Slope [2] against X [1, 2, 3]: per channel at opset 6; at opset 9 it must broadcast.
  Tensor x = f32({1, 2, 3}, {-1, 2, -3, -4, 5, -6}), slope = f32({2}, {0.5f, 0.25f});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(6, "(float[1,2,3] x, float[2] s) => (float[1,2,3] y)", "y = PRelu (x, s)"),
                  {&x, &slope}, &out)
                  .ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{-0.5, 2, -1.5, -1, 5, -1.5}));
  EXPECT_EQ(run(model(9, "(float[1,2,3] x, float[2] s) => (float[1,2,3] y)", "y = PRelu (x, s)"),
                {&x, &slope}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ExtraKernelsTest, HardmaxAxisMeaningChangedInOpset13) {
  // [[1, 3], [4, 2]]: opset 13 picks per row along the last axis; opset 11 with axis 0 flattens
  // everything into one row and picks the single maximum.
  Tensor x = f32({2, 2}, {1, 3, 4, 2});
  std::vector<Tensor> out;
  ASSERT_TRUE(
      run(model(13, "(float[2,2] x) => (float[2,2] y)", "y = Hardmax (x)"), {&x}, &out).ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{0, 1, 1, 0}));
  ASSERT_TRUE(
      run(model(11, "(float[2,2] x) => (float[2,2] y)", "y = Hardmax <axis = 0> (x)"), {&x}, &out)
          .ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{0, 0, 1, 0}));
}

TEST(ExtraKernelsTest, IsInfDirections) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = f32({4}, {inf, -inf, 1, std::nanf("")});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(10, "(float[4] x) => (bool[4] y)", "y = IsInf <detect_positive = 0> (x)"),
                  {&x}, &out)
                  .ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{0, 1, 0, 0}));
  ASSERT_TRUE(run(model(13, "(float[4] x) => (bool[4] y)", "y = IsNaN (x)"), {&x}, &out).ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{0, 0, 0, 1}));
}

TEST(ExtraKernelsTest, MeanVarianceNormalizationOverChosenAxes) {
  // Over axis 1 of [[1, 3], [2, 6]]: each row becomes (v - mean) / std = [-1, 1].
  Tensor x = f32({2, 2}, {1, 3, 2, 6});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(13, "(float[2,2] x) => (float[2,2] y)",
                        "y = MeanVarianceNormalization <axes = [1]> (x)"),
                  {&x}, &out)
                  .ok());
  const std::vector<double> got = doubles_of(out[0]);
  const std::vector<double> want = {-1, 1, -1, 1};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6);
}

}  // namespace
}  // namespace graft::eval
