// The guarded schema registry: each model below makes libonnx 1.12's own inference function
// read out of bounds, trap or spin (run them with OpSchemaRegistry::Instance() under ASan to
// see); through the guard, inference fails for that node with a message and goes on.
#include "core/ir/onnx_guard.h"

#include <string>

#include <gtest/gtest.h>
#include <onnx/defs/parser.h>
#include <onnx/shape_inference/implementation.h>

#include "core/ir/model.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

onnx::ModelProto parse_proto(const std::string& text) {
  onnx::ModelProto proto;
  auto status = onnx::OnnxParser::Parse(proto, text.c_str());
  EXPECT_TRUE(status.IsOK()) << status.ErrorMessage();
  return proto;
}

// Strict inference through the guard: the error message, or "" when inference succeeded.
std::string strict_error(onnx::ModelProto proto) {
  onnx::ShapeInferenceOptions options{/*check_type=*/false, /*error_mode=*/1,
                                      /*enable_data_propagation=*/false};
  try {
    onnx::shape_inference::InferShapes(proto, ir::guarded_schemas(), options);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The shape libonnx infers for `name` through the guard, lenient mode, as text.
std::string inferred_shape(const std::string& text, const std::string& name) {
  onnx::ModelProto proto = parse_proto(text);
  onnx::ShapeInferenceOptions options{false, 0, false};
  onnx::shape_inference::InferShapes(proto, ir::guarded_schemas(), options);
  for (const auto& list : {proto.graph().value_info(), proto.graph().output()})
    for (const auto& info : list) {
      if (info.name() != name) continue;
      if (!info.type().tensor_type().has_shape()) return "?";
      std::string out;
      for (const auto& d : info.type().tensor_type().shape().dim())
        out += (out.empty() ? "" : ",") +
               (d.has_dim_value() ? std::to_string(d.dim_value()) : std::string("_"));
      return "[" + out + "]";
    }
  return "none";
}

TEST(OnnxGuard, ConvWhoseInferredInputRankDiffersFromW) {
  // X's rank is known only once Reshape is inferred, so no declared rank could flag it.
  const char* text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,12] x) => (float y) <int64[3] s = {1, 3, 4}, float[2,3,1,1] w = {1, 2, 3, 4, 5, 6}> {
      r = Reshape (x, s)
      y = Conv (r, w)
      z = Relu (r)
    }
  )";
  EXPECT_NE(strict_error(parse_proto(text)).find("W has rank 4 but X has rank 3"),
            std::string::npos);
  // The rest of the model is still inferred.
  EXPECT_EQ(inferred_shape(text, "z"), "[1,3,4]");
}

TEST(OnnxGuard, ZeroStride) {
  EXPECT_NE(strict_error(parse_proto(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,4] x) => (float y) {
      y = MaxPool <kernel_shape = [1], strides = [0]> (x)
    }
  )")).find("strides must be positive, got 0"),
            std::string::npos);
}

TEST(OnnxGuard, SamePaddingOfAHugeDim) {
  EXPECT_NE(strict_error(parse_proto(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,4611686018427387904] x) => (float y) {
      y = AveragePool <kernel_shape = [3], strides = [2], auto_pad = "SAME_UPPER"> (x)
    }
  )")).find("is too large to pad"),
            std::string::npos);
}

TEST(OnnxGuard, AttributeLengthsFollowTheInputRank) {
  EXPECT_NE(strict_error(parse_proto(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,4,4] x, float[3,2,1,1] w) => (float y) {
      y = ConvTranspose <output_padding = [0]> (x, w)
    }
  )")).find("output_padding has 1 values for 2 spatial axes"),
            std::string::npos);
  EXPECT_NE(strict_error(parse_proto(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,4,4] x, float[3] w) => (float y) {
      y = ConvTranspose <kernel_shape = [1, 1]> (x, w)
    }
  )")).find("W has rank 1 but X has rank 4"),
            std::string::npos);
}

TEST(OnnxGuard, MaxUnpoolIndicesOfUnknownShape) {
  EXPECT_NE(strict_error(parse_proto(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,2,2] x, int64 i) => (float y) {
      y = MaxUnpool <kernel_shape = [2, 2]> (x, i)
    }
  )")).find("indices need a known shape"),
            std::string::npos);
}

TEST(OnnxGuard, MaxRoiPoolWithOneSpatialAxis) {
  EXPECT_NE(strict_error(parse_proto(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,4] x, float[2,5] rois) => (float y) {
      y = MaxRoiPool <pooled_shape = [2]> (x, rois)
    }
  )")).find("pooled_shape needs 2 values, got 1"),
            std::string::npos);
}

// Consistent nodes are inferred exactly as libonnx infers them.
TEST(OnnxGuard, ConsistentNodesAreInferredAsBefore) {
  const char* text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,8,8] x, float[4,3,3,3] w, float[4,2,2,2] wt, int64[1,4,3,3] i)
        => (float[n1,c1,h1,w1] c, float[n2,c2,h2,w2] p, float[n3,c3,h3,w3] t,
            float[n4,c4,h4,w4] u) {
      c = Conv <pads = [1, 1, 1, 1], strides = [2, 2]> (x, w)
      p = MaxPool <kernel_shape = [2, 2], strides = [2, 2], auto_pad = "SAME_UPPER"> (x)
      t = ConvTranspose <strides = [2, 2]> (c, wt)
      u = MaxUnpool <kernel_shape = [2, 2], strides = [2, 2]> (c, i)
    }
  )";
  EXPECT_EQ(strict_error(parse_proto(text)), "");
  EXPECT_EQ(inferred_shape(text, "c"), "[1,4,4,4]");
  EXPECT_EQ(inferred_shape(text, "p"), "[1,3,4,4]");
  EXPECT_EQ(inferred_shape(text, "t"), "[1,2,8,8]");
  EXPECT_EQ(inferred_shape(text, "u"), "[1,4,8,8]");
}

// The facts engine and the pipeline's checker go through the guard.
TEST(OnnxGuard, FactsOfAModelWithAnInconsistentConv) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,12] x) => (float y) <int64[3] s = {1, 3, 4}, float[2,3,1,1] w = {1, 2, 3, 4, 5, 6}> {
      r = Reshape (x, s)
      c = Conv (r, w)
      y = ReduceSum <keepdims = 0> (c)
    }
  )");
  ASSERT_TRUE(model);
  const ir::TensorFact& fact = model->graph().nodes()[1]->output(0)->fact();
  EXPECT_EQ(fact.to_string(), "FLOAT[1,2,?]");  // Graft's rule alone: libonnx refused the node
  PipelineConfig config;
  config.level = 1;
  config.shape_inference = true;
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  // The input fails the check, which the report says, and passes are not judged by it.
  EXPECT_NE(report->checker_note.find("W has rank 4 but X has rank 3"), std::string::npos)
      << report->checker_note;
}

}  // namespace
}  // namespace graft::testing
