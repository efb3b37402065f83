// LayerNormalization (17), Gelu (20, both approximations) and RMSNormalization (23) against
// values computed by hand (the ONNX 1.12 test data has no Gelu or RMSNormalization cases), and
// their refusals of malformed attributes and operands.
#include <vector>

#include <gtest/gtest.h>

#include "tests/eval/kernel_testing.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

Tensor f32(std::vector<int64_t> dims, std::vector<float> values) {
  return make<float>(TensorProto::FLOAT, std::move(dims), std::move(values));
}

void expect_values(const Tensor& t, const std::vector<double>& want) {
  testing::expect_near(doubles_of(t), want, 1e-6, 1e-6);
}

TEST(NormKernelsTest, LayerNormalizationLastAxisWithScaleAndBias) {
  // Row 1: mean 2.5, variance 1.25; row 2: mean 2, variance 4 (std 2). epsilon 0.
  Tensor x = f32({2, 4}, {1, 2, 3, 4, 0, 0, 4, 4});
  Tensor scale = f32({4}, {2, 1, 1, 1}), bias = f32({4}, {0, 0, 0, 1});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(17, "(float[2,4] x, float[4] s, float[4] b) => (float[2,4] y)",
                        "y = LayerNormalization <epsilon = 0.0> (x, s, b)"),
                  {&x, &scale, &bias}, &out)
                  .ok());
  expect_values(out[0], {-2.6832815729997477, -0.4472135954999579, 0.4472135954999579,
                         2.341640786499874, -2, -1, 1, 2});
}

TEST(NormKernelsTest, LayerNormalizationOverAllAxesAndStatistics) {
  // Mean 4, variance 5 over the whole [2, 2] tensor (axis 0); Mean and InvStdDev outputs [1, 1].
  Tensor x = f32({2, 2}, {1, 3, 5, 7});
  Tensor scale = f32({2, 2}, {1, 1, 1, 1});
  std::vector<Tensor> out;
  ASSERT_TRUE(
      run(model(17, "(float[2,2] x, float[2,2] s) => (float[2,2] y, float[1,1] m, float[1,1] i)",
                "y, m, i = LayerNormalization <axis = 0, epsilon = 0.0> (x, s)"),
          {&x, &scale}, &out)
          .ok());
  expect_values(out[0],
                {-1.3416407864998738, -0.4472135954999579, 0.4472135954999579, 1.3416407864998738});
  EXPECT_EQ(out[1].dims(), (std::vector<int64_t>{1, 1}));
  expect_values(out[1], {4});
  expect_values(out[2], {0.4472135954999579});  // 1 / sqrt(5)
}

TEST(NormKernelsTest, LayerNormalizationRefusesBadAxisAndScale) {
  Tensor x = f32({2, 4}, {1, 2, 3, 4, 0, 0, 4, 4});
  Tensor scale = f32({4}, {1, 1, 1, 1}), wrong = f32({3}, {1, 1, 1});
  std::vector<Tensor> out;
  const std::string sig = "(float[2,4] x, float[4] s) => (float[2,4] y)";
  for (const char* axis : {"2", "-3", "9223372036854775807"}) {
    absl::Status st =
        run(model(17, sig, std::string("y = LayerNormalization <axis = ") + axis + "> (x, s)"),
            {&x, &scale}, &out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << axis << ": " << st;
  }
  absl::Status st = run(model(17, sig, "y = LayerNormalization (x, s)"), {&x, &wrong}, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("broadcast"), std::string::npos) << st;
  st = run(model(17, sig, "y = LayerNormalization (x, s)"), {&x, nullptr}, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  Tensor scalar = f32({}, {1});
  st = run(model(17, "(float x, float s) => (float y)", "y = LayerNormalization (x, s)"),
           {&scalar, &scalar}, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
}

TEST(NormKernelsTest, GeluBothApproximations) {
  Tensor x = f32({4}, {-1, 0, 1, 2});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(20, "(float[4] x) => (float[4] y)", "y = Gelu (x)"), {&x}, &out).ok());
  // 0.5 x (1 + erf(x / sqrt(2)))
  expect_values(out[0], {-0.15865525393145707, 0, 0.8413447460685429, 1.9544997361036416});
  ASSERT_TRUE(
      run(model(20, "(float[4] x) => (float[4] y)", "y = Gelu <approximate = \"tanh\"> (x)"), {&x},
          &out)
          .ok());
  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
  expect_values(out[0], {-0.15880800939172324, 0, 0.8411919906082768, 1.954597694087775});
  absl::Status st =
      run(model(20, "(float[4] x) => (float[4] y)", "y = Gelu <approximate = \"erf\"> (x)"), {&x},
          &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  // Only from opset 20.
  EXPECT_EQ(run(model(19, "(float[4] x) => (float[4] y)", "y = Gelu (x)"), {&x}, &out).code(),
            absl::StatusCode::kNotFound);
}

TEST(NormKernelsTest, RmsNormalizationLastAxisAndTrailingBlock) {
  // Row 1: mean of squares 7.5; row 2: 6.25 (rms 2.5). epsilon 0.
  Tensor x = f32({2, 4}, {1, 2, 3, 4, 0, 0, 3, 4});
  Tensor scale = f32({4}, {2, 1, 1, 1});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(23, "(float[2,4] x, float[4] s) => (float[2,4] y)",
                        "y = RMSNormalization <epsilon = 0.0> (x, s)"),
                  {&x, &scale}, &out)
                  .ok());
  expect_values(out[0], {0.7302967433402214, 0.7302967433402214, 1.0954451150103321,
                         1.4605934866804429, 0, 0, 1.2, 1.6});
  // Over the last two axes of [1, 2, 2] with a Scale of one element that broadcasts; epsilon
  // 0.75 makes the mean of squares (9 + 16) / 4 + 0.75 = 7, then 1 / sqrt(7).
  Tensor x3 = f32({1, 2, 2}, {3, 4, 0, 0});
  Tensor one = f32({1}, {2});
  ASSERT_TRUE(run(model(23, "(float[1,2,2] x, float[1] s) => (float[1,2,2] y)",
                        "y = RMSNormalization <axis = -2, epsilon = 0.75> (x, s)"),
                  {&x3, &one}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1, 2, 2}));
  expect_values(out[0], {6 / 2.6457513110645907, 8 / 2.6457513110645907, 0, 0});
}

TEST(NormKernelsTest, RmsNormalizationRefusesBadAxisScaleAndStash) {
  Tensor x = f32({2, 4}, {1, 2, 3, 4, 0, 0, 3, 4});
  Tensor scale = f32({4}, {1, 1, 1, 1}), wrong = f32({2, 4}, {});
  std::vector<Tensor> out;
  const std::string sig = "(float[2,4] x, float[4] s) => (float[2,4] y)";
  for (const char* attrs : {"axis = 2", "axis = -3", "stash_type = 7"}) {
    absl::Status st =
        run(model(23, sig, std::string("y = RMSNormalization <") + attrs + "> (x, s)"),
            {&x, &scale}, &out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << attrs << ": " << st;
  }
  // Scale [2, 4] against the normalized shape [4].
  absl::Status st = run(model(23, sig, "y = RMSNormalization (x, s)"), {&x, &wrong}, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.message().find("broadcast"), std::string::npos) << st;
  st = run(model(23, sig, "y = RMSNormalization (x, s)"), {&x, nullptr}, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  Tensor ints = make<int64_t>(TensorProto::INT64, {2}, {1, 2});
  st = run(model(23, "(int64[2] x, float[2] s) => (float[2] y)", "y = RMSNormalization (x, s)"),
           {&ints, &scale}, &out);
  EXPECT_FALSE(st.ok());
  // Only from opset 23.
  EXPECT_EQ(run(model(22, sig, "y = RMSNormalization (x, s)"), {&x, &scale}, &out).code(),
            absl::StatusCode::kNotFound);
}

TEST(NormKernelsTest, StatisticsAreComputedInStashType) {
  // Deviations of 1e20: their squares (1e40) exceed float's range, so with stash_type float
  // (the default) the variance is infinity, 1 / StdDev is 0 and Y is B; RMSNormalization's mean
  // of squares likewise, so Y is 0. With stash_type double the statistics fit and Y is the
  // normalized row.
  Tensor x = f32({1, 2}, {-1e20f, 1e20f});
  Tensor scale = f32({2}, {1, 1}), bias = f32({2}, {0.25, -0.5});
  std::vector<Tensor> out;
  const std::string sig = "(float[1,2] x, float[2] s, float[2] b) => (float[1,2] y, float[1,1] i)";
  ASSERT_TRUE(
      run(model(17, sig, "y, m, i = LayerNormalization (x, s, b)"), {&x, &scale, &bias}, &out)
          .ok());
  expect_values(out[0], {0.25, -0.5});
  expect_values(out[1], {0});
  ASSERT_TRUE(run(model(17, sig, "y, m, i = LayerNormalization <stash_type = 11> (x, s, b)"),
                  {&x, &scale, &bias}, &out)
                  .ok());
  expect_values(out[0], {-1 + 0.25, 1 - 0.5});
  const std::string rms_sig = "(float[1,2] x, float[2] s) => (float[1,2] y)";
  ASSERT_TRUE(run(model(23, rms_sig, "y = RMSNormalization (x, s)"), {&x, &scale}, &out).ok());
  expect_values(out[0], {0, 0});
  ASSERT_TRUE(
      run(model(23, rms_sig, "y = RMSNormalization <stash_type = 11> (x, s)"), {&x, &scale}, &out)
          .ok());
  expect_values(out[0], {-1, 1});
}

TEST(NormKernelsTest, EmptyBatchIsFine) {
  // No rows: nothing to normalize, an empty result of the input's shape.
  Tensor x = f32({0, 4}, {});
  Tensor scale = f32({4}, {1, 1, 1, 1});
  std::vector<Tensor> out;
  ASSERT_TRUE(
      run(model(23, "(float[0,4] x, float[4] s) => (float[0,4] y)", "y = RMSNormalization (x, s)"),
          {&x, &scale}, &out)
          .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{0, 4}));
  ASSERT_TRUE(run(model(17, "(float[0,4] x, float[4] s) => (float[0,4] y)",
                        "y = LayerNormalization (x, s)"),
                  {&x, &scale}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{0, 4}));
}

}  // namespace
}  // namespace graft::eval
