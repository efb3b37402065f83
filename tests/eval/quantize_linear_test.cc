// QuantizeLinear and DequantizeLinear (core/eval/kernels/nn.cc) beyond the ONNX backend cases
// (opsets 10 and 13, which conformance_test runs): blocked quantization and the 4-bit and 16-bit
// types of opset 21, float16 scales (19), output_dtype (QuantizeLinear 21, DequantizeLinear 23),
// hand-computed, and every malformed operand refused with InvalidArgument.
#include <cstdint>
#include <filesystem>
#include <map>
#include <vector>

#include <gtest/gtest.h>

#include "core/eval/executor.h"
#include "core/eval/verify.h"
#include "core/ir/tensor.h"
#include "core/pipeline/pipeline.h"
#include "tests/eval/kernel_testing.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

std::string dq(int opset, const std::string& attrs, bool zero_point = true) {
  return model(opset, "(int4[A,B] x, float[C,D] s, int4[C,D] z) => (float[A,B] y)",
               "y = DequantizeLinear " + attrs + (zero_point ? " (x, s, z)" : " (x, s)"));
}

Tensor int4(int32_t dtype, std::vector<int64_t> dims, std::vector<int8_t> values) {
  return make<int8_t>(dtype, std::move(dims), std::move(values));
}

TEST(DequantizeLinear, BlockedAlongAxisZeroWithARemainderBlock) {
  // x [5, 2] int4, block_size 2 along axis 0: blocks rows {0,1}, {2,3}, {4}; scale [3, 2].
  Tensor x = int4(ir::kInt4, {5, 2}, {1, -2, 3, 4, -8, 7, 0, 5, 2, -1});
  Tensor s = make<float>(TensorProto::FLOAT, {3, 2}, {0.5f, 2.0f, 0.25f, 1.0f, 4.0f, -1.0f});
  Tensor z = int4(ir::kInt4, {3, 2}, {1, 0, 0, -1, 2, 0});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(dq(21, "<axis = 0, block_size = 2>"), {&x, &s, &z}, &out).ok());
  EXPECT_EQ(out[0].dtype(), TensorProto::FLOAT);
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{5, 2}));
  // y[r][c] = (x - z[r / 2][c]) * s[r / 2][c]
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{
                                    (1 - 1) * 0.5, (-2 - 0) * 2.0,   // row 0, block 0
                                    (3 - 1) * 0.5, (4 - 0) * 2.0,    // row 1, block 0
                                    (-8 - 0) * 0.25, (7 + 1) * 1.0,  // row 2, block 1
                                    (0 - 0) * 0.25, (5 + 1) * 1.0,   // row 3, block 1
                                    (2 - 2) * 4.0, (-1 - 0) * -1.0,  // row 4, block 2
                                }));
}

TEST(DequantizeLinear, BlockedAlongTheLastAxisOfARank3Tensor) {
  // x [2, 1, 4] uint4, axis -1, block 2: scale [2, 1, 2], no zero point.
  Tensor x = int4(ir::kUint4, {2, 1, 4}, {1, 2, 3, 4, 15, 0, 8, 9});
  Tensor s = make<float>(TensorProto::FLOAT, {2, 1, 2}, {1, 10, 100, 1000});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(dq(21, "<axis = -1, block_size = 2>", false), {&x, &s}, &out).ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{1, 2, 30, 40, 1500, 0, 8000, 9000}));
}

TEST(DequantizeLinear, PerTensorAndPerAxisStillWorkOnFourBitTypes) {
  Tensor x = int4(ir::kInt4, {2, 3}, {-8, 0, 7, 1, 2, 3});
  Tensor s0 = make<float>(TensorProto::FLOAT, {}, {0.5f});
  Tensor z0 = int4(ir::kInt4, {}, {-1});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(dq(21, ""), {&x, &s0, &z0}, &out).ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{-3.5, 0.5, 4, 1, 1.5, 2}));
  Tensor s1 = make<float>(TensorProto::FLOAT, {3}, {1, 2, 4});
  ASSERT_TRUE(run(dq(21, "<axis = 1>", false), {&x, &s1}, &out).ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{-8, 0, 28, 1, 4, 12}));
}

TEST(DequantizeLinear, Float16ScaleGivesAFloat16OutputAndOutputDtypeOverridesIt) {
  Tensor x = make<int8_t>(TensorProto::INT8, {2}, {3, -5});
  Tensor s = make<uint16_t>(TensorProto::FLOAT16, {}, {ir::float_to_half(0.5f)});
  const std::string m19 =
      model(19, "(int8[2] x, float16 s) => (float16[2] y)", "y = DequantizeLinear (x, s)");
  std::vector<Tensor> out;
  ASSERT_TRUE(run(m19, {&x, &s}, &out).ok());
  EXPECT_EQ(out[0].dtype(), TensorProto::FLOAT16);
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{1.5, -2.5}));
  // output_dtype exists from opset 23: float from a float16 scale.
  const std::string m23 = model(23, "(int8[2] x, float16 s) => (float[2] y)",
                                "y = DequantizeLinear <output_dtype = 1> (x, s)");
  ASSERT_TRUE(run(m23, {&x, &s}, &out).ok());
  EXPECT_EQ(out[0].dtype(), TensorProto::FLOAT);
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{1.5, -2.5}));
  // Before opset 19 a float16 scale is not a DequantizeLinear scale.
  const std::string m13 =
      model(13, "(int8[2] x, float16 s) => (float16[2] y)", "y = DequantizeLinear (x, s)");
  EXPECT_FALSE(run(m13, {&x, &s}, &out).ok());
}

TEST(DequantizeLinear, SixteenBitTypesAtOpset21) {
  Tensor x = make<int16_t>(TensorProto::INT16, {2}, {-30000, 1000});
  Tensor s = make<float>(TensorProto::FLOAT, {}, {0.5f});
  Tensor z = make<int16_t>(TensorProto::INT16, {}, {1000});
  const std::string m =
      model(21, "(int16[2] x, float s, int16 z) => (float[2] y)", "y = DequantizeLinear (x, s, z)");
  std::vector<Tensor> out;
  ASSERT_TRUE(run(m, {&x, &s, &z}, &out).ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{-15500, 0}));
  // int16 is not a quantized type before opset 21.
  const std::string m19 =
      model(19, "(int16[2] x, float s, int16 z) => (float[2] y)", "y = DequantizeLinear (x, s, z)");
  EXPECT_FALSE(run(m19, {&x, &s, &z}, &out).ok());
}

TEST(DequantizeLinear, RefusesEveryMismatchWithInvalidArgument) {
  Tensor x = int4(ir::kInt4, {4, 2}, {});
  Tensor s = make<float>(TensorProto::FLOAT, {2, 2}, {});
  Tensor z = int4(ir::kInt4, {2, 2}, {});
  Tensor z_u = int4(ir::kUint4, {2, 2}, {});
  Tensor z_short = int4(ir::kInt4, {2, 1}, {});
  Tensor s_rows = make<float>(TensorProto::FLOAT, {3, 2}, {});  // ceil(4 / 2) is 2, not 3
  Tensor s_cols = make<float>(TensorProto::FLOAT, {2, 3}, {});  // x has 2 columns
  Tensor s_rank1 = make<float>(TensorProto::FLOAT, {2}, {});    // blocked needs x's rank
  Tensor s_rank3 = make<float>(TensorProto::FLOAT, {2, 2, 1}, {});
  std::vector<Tensor> out;
  auto invalid = [&](const std::string& attrs, std::vector<const Tensor*> in) {
    const absl::Status st = run(dq(21, attrs), std::move(in), &out);
    return absl::IsInvalidArgument(st) ? ::testing::AssertionSuccess()
                                       : ::testing::AssertionFailure() << attrs << ": " << st;
  };
  ASSERT_TRUE(run(dq(21, "<axis = 0, block_size = 2>"), {&x, &s, &z}, &out).ok());
  EXPECT_TRUE(invalid("<axis = 0, block_size = 0>", {&x, &s, &z}));   // 2-D scale, no blocks
  EXPECT_TRUE(invalid("<axis = 0, block_size = -2>", {&x, &s, &z}));  // negative block size
  EXPECT_TRUE(invalid("<axis = 0, block_size = 1>", {&x, &s, &z}));   // 4 blocks, scale has 2
  EXPECT_TRUE(invalid("<axis = 0, block_size = 2>", {&x, &s_rows, &z}));
  EXPECT_TRUE(invalid("<axis = 0, block_size = 2>", {&x, &s_cols, &z}));
  EXPECT_TRUE(invalid("<axis = 0, block_size = 2>", {&x, &s_rank1, nullptr}));
  EXPECT_TRUE(invalid("<axis = 0, block_size = 2>", {&x, &s_rank3, nullptr}));
  EXPECT_TRUE(invalid("<axis = 0, block_size = 2>", {&x, &s, &z_u}));      // zero point type
  EXPECT_TRUE(invalid("<axis = 0, block_size = 2>", {&x, &s, &z_short}));  // zero point shape
  EXPECT_TRUE(invalid("<axis = 2, block_size = 2>", {&x, &s, &z}));        // axis out of range
  EXPECT_TRUE(invalid("<axis = 0, block_size = 2>", {&x}));                // missing scale
  // block_size does not exist before opset 21.
  Tensor x8 = make<int8_t>(TensorProto::INT8, {4, 2}, {});
  ASSERT_TRUE(run(dq(21, "<axis = 0, block_size = 2>", false), {&x8, &s}, &out).ok());
  EXPECT_TRUE(
      absl::IsInvalidArgument(run(dq(19, "<axis = 0, block_size = 2>", false), {&x8, &s}, &out)));
}

std::string q(int opset, const std::string& attrs, const std::string& zp_type,
              bool zero_point = true) {
  return model(opset,
               "(float[A,B] x, float[C,D] s, " + zp_type + "[C,D] z) => (" + zp_type + "[A,B] y)",
               "y = QuantizeLinear " + attrs + (zero_point ? " (x, s, z)" : " (x, s)"));
}

TEST(QuantizeLinear, BlockedInt4SaturatesAndRoundsHalfToEven) {
  // x [4, 2], block 2 along axis 0: scale [2, 2].
  Tensor x = make<float>(TensorProto::FLOAT, {4, 2},
                         {1.0f, 100.0f, -3.0f, 2.5f,    // block 0
                          0.5f, -100.0f, 1.5f, 3.0f});  // block 1
  Tensor s = make<float>(TensorProto::FLOAT, {2, 2}, {1.0f, 1.0f, 1.0f, 2.0f});
  Tensor z = int4(ir::kInt4, {2, 2}, {0, 0, 1, 0});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(q(21, "<axis = 0, block_size = 2>", "int4"), {&x, &s, &z}, &out).ok());
  EXPECT_EQ(out[0].dtype(), ir::kInt4);
  // 100 saturates to 7, -100 / 2 to -8; 2.5 and 0.5 round to even (2, 0), 1.5 to 2.
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{1, 7, -3, 2, 0 + 1, -8, 2 + 1, 2}));
  // The result packs: it is a valid int4 tensor.
  TensorProto packed = out[0].to_proto();
  EXPECT_EQ(packed.raw_data().size(), 4u);
}

TEST(QuantizeLinear, Uint4ByOutputDtypeWithoutAZeroPoint) {
  Tensor x = make<float>(TensorProto::FLOAT, {3}, {-1.0f, 7.0f, 40.0f});
  Tensor s = make<float>(TensorProto::FLOAT, {}, {1.0f});
  const std::string m = model(21, "(float[3] x, float s) => (uint4[3] y)",
                              "y = QuantizeLinear <output_dtype = 21> (x, s)");
  std::vector<Tensor> out;
  ASSERT_TRUE(run(m, {&x, &s}, &out).ok());
  EXPECT_EQ(out[0].dtype(), ir::kUint4);
  EXPECT_EQ(ints_of(out[0]), (std::vector<int64_t>{0, 7, 15}));
  // output_dtype and the zero point's type must agree; output_dtype needs opset 21.
  Tensor z = make<uint8_t>(TensorProto::UINT8, {}, {0});
  const std::string both = model(21, "(float[3] x, float s, uint8 z) => (uint4[3] y)",
                                 "y = QuantizeLinear <output_dtype = 21> (x, s, z)");
  EXPECT_TRUE(absl::IsInvalidArgument(run(both, {&x, &s, &z}, &out)));
  const std::string old = model(19, "(float[3] x, float s) => (uint4[3] y)",
                                "y = QuantizeLinear <output_dtype = 21> (x, s)");
  EXPECT_TRUE(absl::IsInvalidArgument(run(old, {&x, &s}, &out)));
}

TEST(QuantizeLinear, QuantizeThenDequantizeBlockedIsWithinHalfAStep) {
  // A round trip through int4 blocks of 4 along axis 1: |x - dq(q(x))| <= scale / 2.
  std::vector<float> xs;
  for (int i = 0; i < 16; ++i) xs.push_back(static_cast<float>((i * 37) % 23) / 4.0f - 3.0f);
  Tensor x = make<float>(TensorProto::FLOAT, {2, 8}, xs);
  Tensor s = make<float>(TensorProto::FLOAT, {2, 2}, {0.5f, 0.75f, 1.0f, 0.4f});
  std::vector<Tensor> quantized, out;
  ASSERT_TRUE(run(q(21, "<axis = 1, block_size = 4, output_dtype = 22>", "int4", false), {&x, &s},
                  &quantized)
                  .ok());
  ASSERT_EQ(quantized[0].dtype(), ir::kInt4);
  ASSERT_TRUE(run(dq(21, "<axis = 1, block_size = 4>", false), {&quantized[0], &s}, &out).ok());
  for (int64_t i = 0; i < 16; ++i) {
    const float scale = s.data<float>()[(i / 8) * 2 + (i % 8) / 4];
    const double v = xs[static_cast<size_t>(i)];
    if (v / scale > 7 || v / scale < -8) continue;  // saturated
    EXPECT_LE(std::abs(out[0].get_double(i) - v), scale / 2 + 1e-6) << i;
  }
}

TEST(QuantizeLinear, RefusesMismatchesLikeDequantizeLinear) {
  Tensor x = make<float>(TensorProto::FLOAT, {4, 2}, {});
  Tensor s_rows = make<float>(TensorProto::FLOAT, {1, 2}, {});  // ceil(4 / 2) = 2 rows
  Tensor s = make<float>(TensorProto::FLOAT, {2, 2}, {});
  std::vector<Tensor> out;
  EXPECT_TRUE(absl::IsInvalidArgument(
      run(q(21, "<axis = 0, block_size = 2>", "int4", false), {&x, &s_rows}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      run(q(21, "<axis = 0, block_size = -1>", "int4", false), {&x, &s}, &out)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      run(q(19, "<axis = 0, block_size = 2>", "int8", false), {&x, &s}, &out)));
  // A 4-bit zero point before opset 21 is not a quantized type there.
  Tensor z = int4(ir::kInt4, {2, 2}, {});
  EXPECT_FALSE(run(q(19, "<axis = 0>", "int4"), {&x, &s, &z}, &out).ok());
}

TEST(QuantizeLinear, FuzzSeedEvaluatesAndSurvivesO2WithVerification) {
  // fuzz/seeds/quantize_int4.onnxtxt: blocked int4 and uint4 weights (with zero points) under
  // MatMul, a blocked QuantizeLinear to int4 of a table dequantized and gathered, 4-bit
  // Transposes, a uint4 QuantizeLinear by output_dtype.
  auto model = testing::parse_text(testing::read_file(std::filesystem::path(GRAFT_SOURCE_DIR) /
                                                      "fuzz" / "seeds" / "quantize_int4.onnxtxt"));
  ASSERT_TRUE(model);
  std::map<std::string, Tensor> feeds;
  Tensor x = make<float>(TensorProto::FLOAT, {2, 40}, {});
  for (int64_t i = 0; i < x.size(); ++i) x.data<float>()[i] = static_cast<float>(i % 7) - 3;
  feeds.emplace("x", x);
  feeds.emplace("ids", make<int64_t>(TensorProto::INT64, {3}, {4, 0, 2}));
  auto out = run_model(*model, feeds);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 5u);
  EXPECT_EQ((*out)[3].dtype(), ir::kUint4);
  PipelineConfig config = testing::test_pipeline_config();
  config.level = 2;
  config.verify = true;
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  for (const auto& pass : report->passes) EXPECT_EQ(pass.rollbacks, 0) << pass.name;
  EXPECT_EQ(report->verification.result.status, VerifyStatus::kVerified)
      << report->verification.result.message;
}

}  // namespace
}  // namespace graft::eval
