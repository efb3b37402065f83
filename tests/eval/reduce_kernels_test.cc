// Reduction kernels on cases the ONNX test data does not cover: attribute vs input axes across
// opsets, exact integer results, ties, and errors instead of crashes.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/eval/kernel_testing.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

// x = [[1, 2, 3], [4, 5, 6]]
Tensor matrix() { return make<float>(TensorProto::FLOAT, {2, 3}, {1, 2, 3, 4, 5, 6}); }

TEST(ReduceKernelsTest, ReduceSumAxesAttributeThenInput) {
  Tensor x = matrix();
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(11, "(float[2,3] x) => (float[2] y)",
                        "y = ReduceSum <axes = [-1], keepdims = 0> (x)"),
                  {&x}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2}));
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{6, 15}));
  Tensor axes = ints({0});
  ASSERT_TRUE(run(model(13, "(float[2,3] x, int64[1] a) => (float[1,3] y)", "y = ReduceSum (x, a)"),
                  {&x, &axes}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{5, 7, 9}));
  // No axes: everything, unless noop_with_empty_axes.
  ASSERT_TRUE(
      run(model(13, "(float[2,3] x) => (float[1,1] y)", "y = ReduceSum (x)"), {&x}, &out).ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{21}));
  ASSERT_TRUE(run(model(13, "(float[2,3] x) => (float[2,3] y)",
                        "y = ReduceSum <noop_with_empty_axes = 1> (x)"),
                  {&x}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), x.dims());
  EXPECT_EQ(doubles_of(out[0]), doubles_of(x));
  Tensor bad = ints({2});
  EXPECT_EQ(run(model(13, "(float[2,3] x, int64[1] a) => (float[1,3] y)", "y = ReduceSum (x, a)"),
                {&x, &bad}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
  Tensor twice = ints({1, -1});
  EXPECT_EQ(run(model(13, "(float[2,3] x, int64[2] a) => (float[2,1] y)", "y = ReduceSum (x, a)"),
                {&x, &twice}, &out)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ReduceKernelsTest, OtherReductionsUseTheAttributeBefore18) {
  Tensor x = matrix();
  std::vector<Tensor> out;
  struct Case {
    const char* op;
    std::vector<double> want;  // over axis 1
  };
  for (const Case& c :
       {Case{"ReduceMean", {2, 5}}, Case{"ReduceMax", {3, 6}}, Case{"ReduceMin", {1, 4}},
        Case{"ReduceProd", {6, 120}}, Case{"ReduceSumSquare", {14, 77}}, Case{"ReduceL1", {6, 15}},
        Case{"ReduceL2", {std::sqrt(14.0), std::sqrt(77.0)}},
        Case{"ReduceLogSum", {std::log(6.0), std::log(15.0)}},
        Case{"ReduceLogSumExp",
             {std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)),
              std::log(std::exp(4.0) + std::exp(5.0) + std::exp(6.0))}}}) {
    ASSERT_TRUE(run(model(13, "(float[2,3] x) => (float[2,1] y)",
                          std::string("y = ") + c.op + " <axes = [1]> (x)"),
                    {&x}, &out)
                    .ok())
        << c.op;
    ASSERT_EQ(out[0].dims(), (std::vector<int64_t>{2, 1})) << c.op;
    for (int i = 0; i < 2; ++i) EXPECT_NEAR(out[0].get_double(i), c.want[i], 1e-5) << c.op;
  }
}

TEST(ReduceKernelsTest, IntegersStayExact) {
  const int64_t big = (int64_t{1} << 53) + 1;  // not representable in double
  Tensor x = make<int64_t>(TensorProto::INT64, {2}, {big, 2});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(13, "(int64[2] x) => (int64[1] y)", "y = ReduceSum (x)"), {&x}, &out).ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{big + 2}));
  ASSERT_TRUE(run(model(13, "(int64[2] x) => (int64[1] y)", "y = ReduceMax (x)"), {&x}, &out).ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{big}));
  // Integer mean truncates toward zero (numpy's mean then astype).
  Tensor y = make<int32_t>(TensorProto::INT32, {2}, {-3, 0});
  ASSERT_TRUE(
      run(model(13, "(int32[2] x) => (int32[1] y)", "y = ReduceMean (x)"), {&y}, &out).ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{-1}));
  Tensor u = make<uint64_t>(TensorProto::UINT64, {2}, {std::numeric_limits<uint64_t>::max(), 1});
  ASSERT_TRUE(
      run(model(13, "(uint64[2] x) => (uint64[1] y)", "y = ReduceMax (x)"), {&u}, &out).ok());
  EXPECT_EQ(out[0].data<uint64_t>()[0], std::numeric_limits<uint64_t>::max());
}

TEST(ReduceKernelsTest, ArgMaxTiesAndSelectLastIndex) {
  Tensor x = make<float>(TensorProto::FLOAT, {2, 3}, {1, 3, 3, 2, 2, 0});
  std::vector<Tensor> out;
  ASSERT_TRUE(
      run(model(13, "(float[2,3] x) => (int64[2,1] y)", "y = ArgMax <axis = 1> (x)"), {&x}, &out)
          .ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{1, 0}));
  ASSERT_TRUE(run(model(13, "(float[2,3] x) => (int64[2] y)",
                        "y = ArgMax <axis = 1, keepdims = 0, select_last_index = 1> (x)"),
                  {&x}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2}));
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{2, 1}));
  ASSERT_TRUE(
      run(model(13, "(float[2,3] x) => (int64[1,3] y)", "y = ArgMin (x)"), {&x}, &out).ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(
      run(model(13, "(float[2,3] x) => (int64[2,1] y)", "y = ArgMax <axis = 2> (x)"), {&x}, &out)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(ReduceKernelsTest, TopKFormsAndTies) {
  Tensor x = make<float>(TensorProto::FLOAT, {5}, {3, 1, 3, 5, 1});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(1, "(float[5] x) => (float[3] v, int64[3] i)", "v, i = TopK <k = 3> (x)"),
                  {&x}, &out)
                  .ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{5, 3, 3}));
  EXPECT_EQ(ints_of(out[1]), (std::vector<int64_t>{3, 0, 2}));  // equal values: lower index first
  Tensor k = ints({2});
  ASSERT_TRUE(run(model(11, "(float[5] x, int64[1] k) => (float[2] v, int64[2] i)",
                        "v, i = TopK <largest = 0> (x, k)"),
                  {&x, &k}, &out)
                  .ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{1, 1}));
  EXPECT_EQ(ints_of(out[1]), (std::vector<int64_t>{1, 4}));
  Tensor too_many = ints({6});
  EXPECT_EQ(
      run(model(11, "(float[5] x, int64[1] k) => (float[2] v, int64[2] i)", "v, i = TopK (x, k)"),
          {&x, &too_many}, &out)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(ReduceKernelsTest, Opset18TakesAxesAsInput) {
  Tensor x = matrix();
  Tensor axes = ints({1});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(18, "(float[2,3] x, int64[1] a) => (float[2] y)",
                        "y = ReduceMax <keepdims = 0> (x, a)"),
                  {&x, &axes}, &out)
                  .ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{3, 6}));
  ASSERT_TRUE(run(model(18, "(float[2,3] x) => (float[2,3] y)",
                        "y = ReduceL2 <noop_with_empty_axes = 1> (x)"),
                  {&x}, &out)
                  .ok());
  EXPECT_EQ(doubles_of(out[0]), doubles_of(x));
}

TEST(ReduceKernelsTest, CumSumExclusiveReverseAndExactIntegers) {
  const int64_t big = (int64_t{1} << 53) + 1;
  Tensor x = make<int64_t>(TensorProto::INT64, {3}, {big, 1, 2});
  Tensor axis = make<int32_t>(TensorProto::INT32, {}, {0});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(14, "(int64[3] x, int32 a) => (int64[3] y)", "y = CumSum (x, a)"),
                  {&x, &axis}, &out)
                  .ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{big, big + 1, big + 3}));
  ASSERT_TRUE(run(model(14, "(int64[3] x, int32 a) => (int64[3] y)",
                        "y = CumSum <exclusive = 1, reverse = 1> (x, a)"),
                  {&x, &axis}, &out)
                  .ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{3, 2, 0}));
  Tensor bad = make<int32_t>(TensorProto::INT32, {}, {1});
  EXPECT_EQ(
      run(model(14, "(int64[3] x, int32 a) => (int64[3] y)", "y = CumSum (x, a)"), {&x, &bad}, &out)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace graft::eval
