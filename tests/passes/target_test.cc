// Targets (core/passes/target.h): the spellings a request may use, and the kernel table that
// keeps a fusion from emitting an op the target's runtime cannot run.
#include "core/passes/target.h"

#include <gtest/gtest.h>

#include "core/passes/registry.h"
#include "core/pipeline/pipeline.h"

namespace graft {
namespace {

using onnx::TensorProto;

TEST(Target, ParsesTheThreeForms) {
  auto onnx_target = parse_target("onnx");
  ASSERT_TRUE(onnx_target.ok());
  EXPECT_FALSE(onnx_target->onnxruntime());
  EXPECT_EQ(onnx_target->str(), "onnx");
  auto empty = parse_target("");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->str(), "onnx");
  auto ort = parse_target("onnxruntime");
  ASSERT_TRUE(ort.ok());
  EXPECT_TRUE(ort->onnxruntime());
  EXPECT_EQ(ort->ort, kDefaultOrtVersion);
  EXPECT_EQ(ort->str(), "onnxruntime:1.18");
  auto pinned = parse_target("onnxruntime:1.16");
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(pinned->str(), "onnxruntime:1.16");
  auto later = parse_target("onnxruntime:2.3");
  ASSERT_TRUE(later.ok());
  EXPECT_EQ(later->str(), "onnxruntime:2.3");
}

TEST(Target, RefusesWhatItDoesNotKnow) {
  for (const char* bad :
       {"tensorrt", "ONNX", "onnxruntime:", "onnxruntime:1", "onnxruntime:1.", "onnxruntime:.5",
        "onnxruntime:1.x", "onnxruntime:1.18.1", "onnxruntime1.18", "onnxruntime:-1.2",
        "onnxruntime:1234.1", "onnxruntime:1.9", "onnxruntime:0.99"}) {
    auto t = parse_target(bad);
    EXPECT_FALSE(t.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(t.status())) << bad << ": " << t.status();
  }
  // The message names the accepted forms, and a long hostile value is cut.
  auto t = parse_target(std::string(10000, 'x'));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("onnxruntime:MAJOR.MINOR"), std::string::npos);
  EXPECT_LT(t.status().message().size(), 300u);
}

TEST(Target, KernelTableByVersionAndType) {
  const Target onnx_target = *parse_target("onnx");
  const Target ort = *parse_target("onnxruntime");
  const Target old = *parse_target("onnxruntime:1.14");
  // The standard target never emits runtime ops.
  EXPECT_FALSE(onnx_target.has_kernel(kMicrosoftDomain, "Attention", TensorProto::FLOAT));
  EXPECT_TRUE(ort.has_kernel(kMicrosoftDomain, "Attention", TensorProto::FLOAT));
  // Attention has no float16 CPU kernel; MultiHeadAttention came after 1.14.
  EXPECT_FALSE(ort.has_kernel(kMicrosoftDomain, "Attention", TensorProto::FLOAT16));
  EXPECT_TRUE(ort.has_kernel(kMicrosoftDomain, "MultiHeadAttention", TensorProto::FLOAT));
  EXPECT_FALSE(old.has_kernel(kMicrosoftDomain, "MultiHeadAttention", TensorProto::FLOAT));
  // BiasSoftmax has kernels on GPU providers only: a CPU target never gets it.
  EXPECT_FALSE(ort.has_kernel(kMicrosoftDomain, "BiasSoftmax", TensorProto::FLOAT));
  // Another domain, or an op of the standard domain, is not in the table.
  EXPECT_FALSE(ort.has_kernel("", "Attention", TensorProto::FLOAT));
  EXPECT_FALSE(ort.has_kernel("com.example", "Attention", TensorProto::FLOAT));
}

TEST(Target, RuntimePassesRunOnlyForTheirTarget) {
  auto names = [](const Target& t) { return passes_for_level(2, t); };
  auto has = [](const std::vector<std::string>& v, const char* n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  EXPECT_FALSE(has(names(*parse_target("onnx")), "fuse_onnxruntime"));
  EXPECT_TRUE(has(names(*parse_target("onnxruntime")), "fuse_onnxruntime"));
  EXPECT_FALSE(has(passes_for_level(1, *parse_target("onnxruntime")), "fuse_onnxruntime"));
}

TEST(Target, NamingARuntimePassForAnotherTargetIsAnError) {
  PipelineConfig config;
  config.passes = {"fold_constants", "fuse_onnxruntime"};
  auto specs = resolve_pipeline(config);
  ASSERT_FALSE(specs.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(specs.status()));
  EXPECT_NE(specs.status().message().find("runs only with target onnxruntime"), std::string::npos)
      << specs.status();
  config.target = *parse_target("onnxruntime:1.16");
  EXPECT_TRUE(resolve_pipeline(config).ok());
}

}  // namespace
}  // namespace graft
