// DynamicQuantizeLinear and MatMulInteger (core/eval/kernels/quantize_dynamic.cc) and ConvInteger
// (core/eval/kernels/nn.cc, the Conv kernel on 8-bit operands): hand-computed cases and hostile
// operands. The ONNX backend cases run in conformance_test.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "tests/eval/kernel_testing.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

const std::string kDql = model(11, "(float[N] x) => (uint8[N] y, float s, uint8 z)",
                               "y, s, z = DynamicQuantizeLinear (x)");

TEST(DynamicQuantizeLinear, SpecExample) {
  // range [-3, 2]: scale 5 / 255, zero point round(3 / scale) = 153.
  Tensor x = make<float>(TensorProto::FLOAT, {6}, {0, 2, -3, -2.5f, 1.34f, 0.5f});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(kDql, {&x}, &out).ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{153, 255, 0, 26, 221, 179}));
  EXPECT_FLOAT_EQ(out[1].data<float>()[0], 5.0f / 255.0f);
  EXPECT_EQ(out[1].rank(), 0);
  EXPECT_EQ(out[2].data<uint8_t>()[0], 153);
}

TEST(DynamicQuantizeLinear, PositiveOnlyRangeIncludesZero) {
  // min(0, min x) = 0: scale 2 / 255, zero point 0; 0.4 / scale = 51.
  Tensor x = make<float>(TensorProto::FLOAT, {2}, {2, 0.4f});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(kDql, {&x}, &out).ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{255, 51}));
  EXPECT_EQ(out[2].data<uint8_t>()[0], 0);
}

TEST(DynamicQuantizeLinear, AllZeroAndEmptyInputsGiveZeroScaleWithoutDividing) {
  for (int64_t n : {3, 0}) {
    Tensor x = make<float>(TensorProto::FLOAT, {n}, {});
    std::vector<Tensor> out;
    ASSERT_TRUE(run(kDql, {&x}, &out).ok()) << n;
    EXPECT_EQ(ints_of(out[0]), std::vector<int64_t>(static_cast<size_t>(n), 0));
    EXPECT_EQ(out[1].data<float>()[0], 0.0f);
    EXPECT_EQ(out[2].data<uint8_t>()[0], 0);
  }
}

TEST(DynamicQuantizeLinear, NanAndInfinityDoNotCrash) {
  Tensor x = make<float>(
      TensorProto::FLOAT, {3},
      {std::numeric_limits<float>::quiet_NaN(), 1.0f, std::numeric_limits<float>::infinity()});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(kDql, {&x}, &out).ok());
  EXPECT_TRUE(std::isinf(out[1].data<float>()[0]));
}

TEST(DynamicQuantizeLinear, RefusesNonFloatAndMissingInput) {
  Tensor x = make<int32_t>(TensorProto::INT32, {2}, {1, 2});
  std::vector<Tensor> out;
  EXPECT_TRUE(absl::IsInvalidArgument(run(kDql, {&x}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(run(kDql, {}, &out)));
}

const std::string kMmi4 =
    model(10, "(uint8[M,K] a, uint8[K,N] b, uint8 az, uint8 bz) => (int32[M,N] y)",
          "y = MatMulInteger (a, b, az, bz)");
const std::string kMmi2 =
    model(10, "(uint8[M,K] a, uint8[K,N] b) => (int32[M,N] y)", "y = MatMulInteger (a, b)");

TEST(MatMulInteger, SpecExampleWithZeroPoints) {
  Tensor a = make<uint8_t>(TensorProto::UINT8, {4, 3}, {11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0});
  Tensor b = make<uint8_t>(TensorProto::UINT8, {3, 2}, {1, 4, 2, 5, 3, 6});
  Tensor az = make<uint8_t>(TensorProto::UINT8, {}, {12});
  Tensor bz = make<uint8_t>(TensorProto::UINT8, {}, {0});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(kMmi4, {&a, &b, &az, &bz}, &out).ok());
  EXPECT_EQ(out[0].dtype(), TensorProto::INT32);
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{-38, -83, -44, -98, -50, -113, -56, -128}));
}

TEST(MatMulInteger, Int8PerColumnAndPerRowZeroPoints) {
  // b - bz = [[2, -3], [4, 7]]: [-1, 2] x that = [6, 17].
  Tensor a = make<int8_t>(TensorProto::INT8, {1, 2}, {-1, 2});
  Tensor b = make<int8_t>(TensorProto::INT8, {2, 2}, {3, -4, 5, 6});
  Tensor bz = make<int8_t>(TensorProto::INT8, {2}, {1, -1});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(kMmi4, {&a, &b, nullptr, &bz}, &out).ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{6, 17}));

  // Per row of A: a - az = [[0, 1], [0, 1]] times the identity; uint8 A with int8 B.
  Tensor a2 = make<uint8_t>(TensorProto::UINT8, {2, 2}, {1, 2, 3, 4});
  Tensor az2 = make<uint8_t>(TensorProto::UINT8, {2}, {1, 3});
  Tensor eye = make<int8_t>(TensorProto::INT8, {2, 2}, {1, 0, 0, 1});
  ASSERT_TRUE(run(kMmi4, {&a2, &eye, &az2, nullptr}, &out).ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{0, 1, 0, 1}));
}

TEST(MatMulInteger, BatchedAndVectorOperands) {
  // [2, 1, 2] x [2, 1]: each batch row dotted with [1, 2].
  Tensor a = make<uint8_t>(TensorProto::UINT8, {2, 1, 2}, {1, 1, 3, 4});
  Tensor b = make<uint8_t>(TensorProto::UINT8, {2, 1}, {1, 2});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(kMmi2, {&a, &b}, &out).ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{3, 11}));
  Tensor v = make<uint8_t>(TensorProto::UINT8, {2}, {2, 3});
  ASSERT_TRUE(run(kMmi2, {&v, &b}, &out).ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1}));
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{8}));
}

TEST(MatMulInteger, Int32AccumulationWrapsInsteadOfOverflowingUndefined) {
  // 255 * (127 - -128) = 65025 per term; 33100 terms pass 2^31 and wrap like int32 hardware.
  const int64_t k = 33100;
  Tensor a = make<uint8_t>(TensorProto::UINT8, {1, k}, std::vector<uint8_t>(k, 255));
  Tensor b = make<int8_t>(TensorProto::INT8, {k, 1}, std::vector<int8_t>(k, 127));
  Tensor bz = make<int8_t>(TensorProto::INT8, {}, {-128});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(kMmi4, {&a, &b, nullptr, &bz}, &out).ok());
  const int64_t exact = int64_t{65025} * k;
  EXPECT_EQ(ints_of(out[0])[0], exact - (int64_t{1} << 32));
}

TEST(MatMulInteger, HostileOperandsAreInvalidArgument) {
  Tensor a = make<uint8_t>(TensorProto::UINT8, {2, 3}, {});
  Tensor b = make<uint8_t>(TensorProto::UINT8, {3, 2}, {});
  Tensor b_bad_k = make<uint8_t>(TensorProto::UINT8, {4, 2}, {});
  Tensor f = make<float>(TensorProto::FLOAT, {2, 3}, {});
  Tensor i8zp = make<int8_t>(TensorProto::INT8, {}, {0});
  Tensor zp2d = make<uint8_t>(TensorProto::UINT8, {1, 1}, {0});
  Tensor zp_len = make<uint8_t>(TensorProto::UINT8, {3}, {});
  Tensor scalar = make<uint8_t>(TensorProto::UINT8, {}, {1});
  std::vector<Tensor> out;
  auto invalid = [&](std::vector<const Tensor*> in) {
    return absl::IsInvalidArgument(run(kMmi4, std::move(in), &out));
  };
  EXPECT_TRUE(invalid({&f, &b}));                    // float operand
  EXPECT_TRUE(invalid({&a, &b_bad_k}));              // inner dims differ
  EXPECT_TRUE(invalid({&scalar, &b}));               // rank 0
  EXPECT_TRUE(invalid({&a, &b, &i8zp, nullptr}));    // zero point type != A's
  EXPECT_TRUE(invalid({&a, &b, nullptr, &zp2d}));    // 2-D zero point
  EXPECT_TRUE(invalid({&a, &b, &zp_len, nullptr}));  // 3 != M (2)
  EXPECT_TRUE(invalid({&a, &b, nullptr, &zp_len}));  // 3 != N (2)
  EXPECT_TRUE(invalid({&a}));                        // missing B
  Tensor a_batch = make<uint8_t>(TensorProto::UINT8, {3, 2, 3}, {});
  Tensor b_batch = make<uint8_t>(TensorProto::UINT8, {2, 3, 2}, {});
  EXPECT_TRUE(invalid({&a_batch, &b_batch}));  // batch dims do not broadcast
}

TEST(MatMulInteger, RefusesWorkOverTheBudgetBeforeStarting) {
  auto parsed = testing::parse_text(kMmi2);
  ASSERT_NE(parsed, nullptr);
  Tensor a = make<uint8_t>(TensorProto::UINT8, {64, 64}, {});
  Tensor b = make<uint8_t>(TensorProto::UINT8, {64, 64}, {});
  Limits limits;
  limits.max_work = 1000;  // 64^3 multiply-adds do not fit
  auto r = run_kernel(*parsed->graph().nodes().at(0), {&a, &b}, limits);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  limits.max_work = 0;
  EXPECT_TRUE(run_kernel(*parsed->graph().nodes().at(0), {&a, &b}, limits).ok());
}

std::string conv_integer_model(const std::string& attrs) {
  return model(10,
               "(uint8[N,C,H,W] x, uint8[M,C,KH,KW] w, uint8 xz, uint8 wz) => (int32[N,M,P,Q] y)",
               "y = ConvInteger " + attrs + " (x, w, xz, wz)");
}

TEST(ConvInteger, SpecExampleWithPaddingAndZeroPoint) {
  // x - 1 = [[1, 2, 3], [4, 5, 6], [7, 8, 9]] padded by 1 (padding counts 0, not -zero point),
  // a 2x2 kernel of ones.
  Tensor x = make<uint8_t>(TensorProto::UINT8, {1, 1, 3, 3}, {2, 3, 4, 5, 6, 7, 8, 9, 10});
  Tensor w = make<uint8_t>(TensorProto::UINT8, {1, 1, 2, 2}, {1, 1, 1, 1});
  Tensor xz = make<uint8_t>(TensorProto::UINT8, {}, {1});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(conv_integer_model("<pads = [1, 1, 1, 1]>"), {&x, &w, &xz, nullptr}, &out).ok());
  EXPECT_EQ(out[0].dtype(), TensorProto::INT32);
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{1, 1, 4, 4}));
  EXPECT_EQ(ints_of(out[0]),
            (std::vector<int64_t>{1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9}));
}

TEST(ConvInteger, Int8WeightsPerChannelZeroPointAndGroups) {
  // group 2, one channel each: 3 * (4 - 1) = 9 and 5 * (-2 - -1) = -5.
  Tensor x = make<uint8_t>(TensorProto::UINT8, {1, 2, 1, 1}, {3, 5});
  Tensor w = make<int8_t>(TensorProto::INT8, {2, 1, 1, 1}, {4, -2});
  Tensor wz = make<int8_t>(TensorProto::INT8, {2}, {1, -1});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(conv_integer_model("<group = 2>"), {&x, &w, nullptr, &wz}, &out).ok());
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{9, -5}));
}

TEST(ConvInteger, Int32AccumulationWraps) {
  // As MatMulInteger: 33100 terms of 255 * (127 - -128) pass 2^31 and wrap.
  const int64_t k = 33100;
  Tensor x = make<uint8_t>(TensorProto::UINT8, {1, 1, 1, k}, std::vector<uint8_t>(k, 255));
  Tensor w = make<int8_t>(TensorProto::INT8, {1, 1, 1, k}, std::vector<int8_t>(k, 127));
  Tensor wz = make<int8_t>(TensorProto::INT8, {}, {-128});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(conv_integer_model(""), {&x, &w, nullptr, &wz}, &out).ok());
  EXPECT_EQ(ints_of(out[0])[0], int64_t{65025} * k - (int64_t{1} << 32));
}

TEST(ConvInteger, HostileOperandsAreInvalidArgument) {
  Tensor x = make<uint8_t>(TensorProto::UINT8, {1, 2, 3, 3}, {});
  Tensor w = make<uint8_t>(TensorProto::UINT8, {2, 2, 2, 2}, {});
  Tensor f = make<float>(TensorProto::FLOAT, {1, 2, 3, 3}, {});
  Tensor w_rank = make<uint8_t>(TensorProto::UINT8, {2, 2, 2}, {});
  Tensor w_channels = make<uint8_t>(TensorProto::UINT8, {2, 3, 2, 2}, {});
  Tensor i8zp = make<int8_t>(TensorProto::INT8, {}, {0});
  Tensor zp2 = make<uint8_t>(TensorProto::UINT8, {2}, {0, 0});
  Tensor zp3 = make<uint8_t>(TensorProto::UINT8, {3}, {});
  Tensor zp2d = make<uint8_t>(TensorProto::UINT8, {1, 1}, {0});
  std::vector<Tensor> out;
  auto invalid = [&](const std::string& attrs, std::vector<const Tensor*> in) {
    return absl::IsInvalidArgument(run(conv_integer_model(attrs), std::move(in), &out));
  };
  EXPECT_TRUE(run(conv_integer_model(""), {&x, &w}, &out).ok());  // the control
  EXPECT_TRUE(invalid("", {&f, &w}));                             // float operand
  EXPECT_TRUE(invalid("", {&x, &w_rank}));                        // W rank != X rank
  EXPECT_TRUE(invalid("", {&x, &w_channels}));                    // channels differ
  EXPECT_TRUE(invalid("<group = 2>", {&x, &w}));                  // W has C, not C / group
  EXPECT_TRUE(invalid("<group = 0>", {&x, &w}));                  // group < 1
  EXPECT_TRUE(invalid("", {&x, &w, &i8zp, nullptr}));             // x zero point type
  EXPECT_TRUE(invalid("", {&x, &w, &zp2, nullptr}));              // x zero point per channel
  EXPECT_TRUE(invalid("", {&x, &w, nullptr, &zp3}));              // 3 != M (2)
  EXPECT_TRUE(invalid("", {&x, &w, nullptr, &zp2d}));             // 2-D zero point
  EXPECT_TRUE(invalid("<strides = [0, 1]>", {&x, &w}));           // stride 0
  EXPECT_TRUE(invalid("<pads = [1, 1]>", {&x, &w}));              // pads of the wrong length
  EXPECT_TRUE(invalid("<pads = [-1, 0, 0, 0]>", {&x, &w}));       // negative pad
  EXPECT_TRUE(invalid("<kernel_shape = [3, 3]>", {&x, &w}));      // kernel_shape != W's
  EXPECT_TRUE(invalid("<dilations = [4, 4]>", {&x, &w}));         // window past the input
  EXPECT_TRUE(invalid("", {&x}));                                 // missing W
  EXPECT_TRUE(
      run(conv_integer_model(""), {&x, &w, nullptr, &zp2}, &out).ok());  // w per output channel
}

TEST(ConvInteger, RefusesWorkOverTheBudgetBeforeStarting) {
  auto parsed = testing::parse_text(conv_integer_model(""));
  ASSERT_NE(parsed, nullptr);
  Tensor x = make<uint8_t>(TensorProto::UINT8, {1, 16, 32, 32}, {});
  Tensor w = make<uint8_t>(TensorProto::UINT8, {16, 16, 3, 3}, {});
  Limits limits;
  limits.max_work = 1000;
  auto r = run_kernel(*parsed->graph().nodes().at(0), {&x, &w}, limits);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(r.status())) << r.status();
  limits.max_work = 0;
  EXPECT_TRUE(run_kernel(*parsed->graph().nodes().at(0), {&x, &w}, limits).ok());
}

}  // namespace
}  // namespace graft::eval
