// Element-wise kernels on cases the ONNX test data does not cover: errors instead of crashes,
// integer edge cases, broadcasting, and the allocation limit.
#include <cmath>

#include <gtest/gtest.h>

#include "tests/eval/kernel_testing.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

constexpr char kDivInt[] = R"(
  <ir_version: 8, opset_import: ["" : 17]>
  g (int32[N] a, int32[M] b) => (int32[K] y) { y = Div (a, b) }
)";

TEST(ElementwiseTest, IntegerDivisionTruncatesAndRejectsZero) {
  Tensor a =
      make<int32_t>(TensorProto::INT32, {4}, {7, -7, 7, std::numeric_limits<int32_t>::min()});
  Tensor b = make<int32_t>(TensorProto::INT32, {4}, {2, 2, -2, -1});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(kDivInt, {&a, &b}, &out).ok());
  const int32_t* y = out[0].data<int32_t>();
  EXPECT_EQ(y[0], 3);
  EXPECT_EQ(y[1], -3);
  EXPECT_EQ(y[2], -3);
  EXPECT_EQ(y[3], std::numeric_limits<int32_t>::min());  // wraps instead of trapping
  Tensor zero = make<int32_t>(TensorProto::INT32, {}, {0});
  EXPECT_EQ(run(kDivInt, {&a, &zero}, &out).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ElementwiseTest, ModFollowsDivisorSignUnlessFmod) {
  Tensor a = make<int64_t>(TensorProto::INT64, {4}, {-7, 7, -7, 7});
  Tensor b = make<int64_t>(TensorProto::INT64, {4}, {3, -3, -3, 3});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[4] a, int64[4] b) => (int64[4] y) { y = Mod (a, b) }
  )",
                  {&a, &b}, &out)
                  .ok());
  for (int i = 0; i < 4; ++i) {
    int64_t x = a.data<int64_t>()[i], m = b.data<int64_t>()[i];
    int64_t want = ((x % m) + m) % m;  // Python's x % m
    EXPECT_EQ(out[0].data<int64_t>()[i], want) << i;
  }
  ASSERT_TRUE(run(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[4] a, int64[4] b) => (int64[4] y) { y = Mod <fmod = 1> (a, b) }
  )",
                  {&a, &b}, &out)
                  .ok());
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(out[0].data<int64_t>()[i], a.data<int64_t>()[i] % b.data<int64_t>()[i]);
  }
  Tensor f = make<float>(TensorProto::FLOAT, {1}, {1.5f});
  EXPECT_FALSE(run(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1] a, float[1] b) => (float[1] y) { y = Mod (a, b) }
  )",
                   {&f, &f}, &out)
                   .ok());  // floats need fmod=1
}

constexpr char kAddFloat[] = R"(
  <ir_version: 8, opset_import: ["" : 14]>
  g (float[N] a, float[M] b) => (float[K] y) { y = Add (a, b) }
)";

TEST(ElementwiseTest, BroadcastsAndRejectsBadShapesAndTypes) {
  Tensor col = make<float>(TensorProto::FLOAT, {2, 1}, {10, 20});
  Tensor row = make<float>(TensorProto::FLOAT, {3}, {1, 2, 3});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(kAddFloat, {&col, &row}, &out).ok());
  ASSERT_EQ(out[0].dims(), (std::vector<int64_t>{2, 3}));
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(out[0].data<float>()[r * 3 + c], col.data<float>()[r] + row.data<float>()[c]);
    }
  }
  Tensor two = make<float>(TensorProto::FLOAT, {2}, {1, 2});
  EXPECT_EQ(run(kAddFloat, {&row, &two}, &out).code(), absl::StatusCode::kInvalidArgument);
  Tensor ints = make<int32_t>(TensorProto::INT32, {3}, {1, 2, 3});
  EXPECT_EQ(run(kAddFloat, {&row, &ints}, &out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(run(kAddFloat, {&row, nullptr}, &out).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ElementwiseTest, OutputLargerThanLimitIsRefused) {
  Tensor col = make<float>(TensorProto::FLOAT, {512, 1}, {});
  Tensor row = make<float>(TensorProto::FLOAT, {1, 512}, {});
  std::vector<Tensor> out;
  EXPECT_EQ(run(kAddFloat, {&col, &row}, &out, 1 << 16).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(ElementwiseTest, ClipAttributesBeforeOpset11AndInputsAfter) {
  Tensor x = make<float>(TensorProto::FLOAT, {3}, {-5, 0.5f, 5});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(R"(
    <ir_version: 6, opset_import: ["" : 6]>
    g (float[3] x) => (float[3] y) { y = Clip <min = -1.0, max = 1.0> (x) }
  )",
                  {&x}, &out)
                  .ok());
  EXPECT_EQ(out[0].data<float>()[0], -1.0f);
  EXPECT_EQ(out[0].data<float>()[1], 0.5f);
  EXPECT_EQ(out[0].data<float>()[2], 1.0f);
  Tensor lo = make<float>(TensorProto::FLOAT, {}, {0.0f});
  ASSERT_TRUE(run(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[3] x, float lo) => (float[3] y) { y = Clip (x, lo) }
  )",
                  {&x, &lo}, &out)
                  .ok());
  EXPECT_EQ(out[0].data<float>()[0], 0.0f);
  EXPECT_EQ(out[0].data<float>()[2], 5.0f);  // no max
  Tensor bad = make<float>(TensorProto::FLOAT, {2}, {0, 1});
  EXPECT_FALSE(run(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[3] x, float[2] lo) => (float[3] y) { y = Clip (x, lo) }
  )",
                   {&x, &bad}, &out)
                   .ok());
}

TEST(ElementwiseTest, Float16ArithmeticRoundsToHalf) {
  auto a = Tensor::zeros(TensorProto::FLOAT16, {2}, 1 << 10);
  ASSERT_TRUE(a.ok());
  a->set_double(0, 1.0);
  a->set_double(1, 2048.0);
  std::vector<Tensor> out;
  ASSERT_TRUE(run(R"(
    <ir_version: 8, opset_import: ["" : 14]>
    g (float16[2] a, float16[2] b) => (float16[2] y) { y = Add (a, b) }
  )",
                  {&*a, &*a}, &out)
                  .ok());
  EXPECT_EQ(out[0].dtype(), TensorProto::FLOAT16);
  EXPECT_EQ(out[0].get_double(0), 2.0);
  EXPECT_EQ(out[0].get_double(1), 4096.0);
}

TEST(ElementwiseTest, CastBetweenIntegersWrapsAndFloatsTruncate) {
  Tensor x = make<float>(TensorProto::FLOAT, {3}, {2.9f, -2.9f, NAN});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[3] x) => (int32[3] y) { y = Cast <to = 6> (x) }
  )",
                  {&x}, &out)
                  .ok());
  EXPECT_EQ(out[0].data<int32_t>()[0], 2);
  EXPECT_EQ(out[0].data<int32_t>()[1], -2);
  ASSERT_TRUE(run(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[3] x) => (bool[3] y) { y = Cast <to = 9> (x) }
  )",
                  {&x}, &out)
                  .ok());
  EXPECT_TRUE(out[0].data<bool>()[2]);  // NaN is truthy, as in numpy
  Tensor i = make<int64_t>(TensorProto::INT64, {2}, {300, -1});
  ASSERT_TRUE(run(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[2] x) => (uint8[2] y) { y = Cast <to = 2> (x) }
  )",
                  {&i}, &out)
                  .ok());
  EXPECT_EQ(out[0].data<uint8_t>()[0], 44);
  EXPECT_EQ(out[0].data<uint8_t>()[1], 255);
}

TEST(ElementwiseTest, WhereSelectsStrings) {
  Tensor c = make<bool>(TensorProto::BOOL, {2}, {true, false});
  auto x = Tensor::zeros(TensorProto::STRING, {2}, 1 << 10);
  auto z = Tensor::zeros(TensorProto::STRING, {}, 1 << 10);
  x->strings() = {"a", "b"};
  z->strings() = {"z"};
  std::vector<Tensor> out;
  ASSERT_TRUE(run(R"(
    <ir_version: 8, opset_import: ["" : 16]>
    g (bool[2] c, string[2] x, string z) => (string[2] y) { y = Where (c, x, z) }
  )",
                  {&c, &*x, &*z}, &out)
                  .ok());
  EXPECT_EQ(out[0].strings(), (std::vector<std::string>{"a", "z"}));
}

}  // namespace
}  // namespace graft::eval
