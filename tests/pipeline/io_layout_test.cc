// Serving inputs and outputs in another layout (core/pipeline/io_layout.h,
// PipelineConfig::io_layout): the converted model computes on transposed inputs what the
// original computes, the boundary Transposes move inward and cancel against the model's own,
// the report says what changed, and requests that do not fit the model are InvalidArgument with
// the model left as it was.
#include "core/pipeline/io_layout.h"

#include <cmath>

#include "core/eval/executor.h"
#include "core/ir/fingerprint.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

// A small NCHW CNN: normalization, Conv, Relu, a global pool and a classifier head, and a
// feature map output.
constexpr char kCnn[] = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[N,3,8,6] x) => (float[N,4,8,6] feat, float[N,4] y) {
    mean = Constant <value = float[1,3,1,1] {0.5, 0.25, -0.5}> ()
    scale = Constant <value = float[1,3,1,1] {2, 4, 0.5}> ()
    w = Constant <value = float[4,3,3,3] {0.5, -1, 0.25, 1, 0.5, -0.5, -0.25, 2, 1, 0.75, -1, 0.5,
        0.5, -1, 0.25, 1, 0.5, -0.5, -0.25, 2, 1, 0.75, -1, 0.5, 0.5, -1, 0.25,
        1, 0.5, -0.5, -0.25, 2, 1, 0.75, -1, 0.5, 0.5, -1, 0.25, 1, 0.5, -0.5,
        -0.25, 2, 1, 0.75, -1, 0.5, 0.5, -1, 0.25, 1, 0.5, -0.5, -0.25, 2, 1,
        0.75, -1, 0.5, 0.5, -1, 0.25, 1, 0.5, -0.5, -0.25, 2, 1, 0.75, -1, 0.5,
        0.5, -1, 0.25, 1, 0.5, -0.5, -0.25, 2, 1, 0.75, -1, 0.5, 0.5, -1, 0.25,
        1, 0.5, -0.5, -0.25, 2, 1, 0.75, -1, 0.5, 0.5, -1, 0.25, 1, 0.5, -0.5,
        -0.25, 2, 1, 0.75, -1, 0.5}> ()
    centred = Sub (x, mean)
    scaled = Mul (centred, scale)
    c = Conv <pads = [1, 1, 1, 1]> (scaled, w)
    feat = Relu (c)
    p = GlobalAveragePool (feat)
    y = Flatten (p)
  }
)";

// A tf2onnx-style export: the graph takes NHWC, transposes to NCHW around the Conv, and gives
// NHWC back.
constexpr char kTf2onnx[] = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[1,5,4,2] x) => (float[1,5,4,3] y) {
    w = Constant <value = float[3,2,1,1] {0.5, -1, 0.25, 1, 2, -0.5}> ()
    b = Constant <value = float[3] {0.1, -0.2, 0.3}> ()
    t = Transpose <perm = [0, 3, 1, 2]> (x)
    c = Conv (t, w, b)
    r = Relu (c)
    y = Transpose <perm = [0, 2, 3, 1]> (r)
  }
)";

// A tensor of `dims` with distinct values.
eval::Tensor ramp(const std::vector<int64_t>& dims) {
  auto t = eval::Tensor::zeros(onnx::TensorProto::FLOAT, dims, 1 << 20);
  EXPECT_TRUE(t.ok());
  for (int64_t i = 0; i < t->size(); ++i)
    t->set_double(i, std::sin(0.37 * static_cast<double>(i)) * (1 + i % 3));
  return *std::move(t);
}

// `t` transposed: result dim i is t's dim perm[i].
eval::Tensor transposed(const eval::Tensor& t, const std::vector<int64_t>& perm) {
  auto out = eval::transposed(t, t.dims(), perm, 1 << 24);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *std::move(out) : eval::Tensor();
}

std::vector<int64_t> declared(const onnx::ValueInfoProto& info) {
  std::vector<int64_t> out;
  for (const auto& d : info.type().tensor_type().shape().dim())
    out.push_back(d.has_dim_value() ? d.dim_value() : -1);
  return out;
}

PipelineConfig converting(std::map<std::string, std::string> layouts, bool verify = true) {
  PipelineConfig config = test_pipeline_config();
  config.io_layout = std::move(layouts);
  config.verify = verify;
  return config;
}

TEST(IoLayout, Permutations) {
  EXPECT_EQ(layout_perm("NCHW", "NHWC"), (std::vector<int64_t>{0, 2, 3, 1}));
  EXPECT_EQ(layout_perm("NHWC", "NCHW"), (std::vector<int64_t>{0, 3, 1, 2}));
  EXPECT_EQ(layout_perm("NCW", "NWC"), (std::vector<int64_t>{0, 2, 1}));
  EXPECT_EQ(layout_perm("NCDHW", "NDHWC"), (std::vector<int64_t>{0, 2, 3, 4, 1}));
}

// The converted model computes on NHWC inputs what the original computes on NCHW ones, and its
// NHWC output is the original's transposed; the optimized one too, with one Transpose left
// (at the Conv, which needs NCHW) and the feature output's Transpose after the Relu.
TEST(IoLayout, ServedChannelsLastComputesTheSame) {
  auto original = parse_text(kCnn);
  auto model = parse_text(kCnn);
  ASSERT_TRUE(original && model);
  auto report = run_pipeline(model, converting({{"x", "NHWC"}, {"feat", "NHWC"}}));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verification.result.status, eval::VerifyStatus::kVerified);
  EXPECT_EQ(declared(model->graph().inputs()[0].info), (std::vector<int64_t>{-1, 8, 6, 3}));
  EXPECT_EQ(model->graph().inputs()[0].value->name(), "x");
  EXPECT_EQ(declared(model->graph().outputs()[0].info), (std::vector<int64_t>{-1, 8, 6, 4}));
  EXPECT_EQ(declared(model->graph().outputs()[1].info), (std::vector<int64_t>{-1, 4}));
  EXPECT_EQ(output_names(model->graph()), (std::vector<std::string>{"feat", "y"}));
  ASSERT_EQ(report->layout_changes.size(), 2u);
  EXPECT_EQ(report->layout_changes[0], "input 'x': NCHW [N,3,8,6] -> NHWC [N,8,6,3]");
  EXPECT_EQ(report->layout_changes[1], "output 'feat': NCHW [N,4,8,6] -> NHWC [N,8,6,4]");
  EXPECT_EQ(report->transposes_before, 0);
  EXPECT_EQ(report->transposes_after, count_ops(*model, "Transpose"));
  EXPECT_EQ(count_ops(*model, "Transpose"), 2);
  EXPECT_EQ(onnx_errors(*model), "");

  const eval::Tensor x = ramp({2, 3, 8, 6});
  auto want = eval::run_model(*original, {{"x", x}});
  auto got = eval::run_model(*model, {{"x", transposed(x, {0, 2, 3, 1})}});
  ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
  EXPECT_EQ(compare_recorded((*got)[0], transposed((*want)[0], {0, 2, 3, 1})), "");
  EXPECT_EQ(compare_recorded((*got)[1], (*want)[1]), "");
}

// Served in the layout it was exported from, a tf2onnx graph keeps none of its Transposes: the
// boundary ones cancel against them.
TEST(IoLayout, CancelsAgainstTheModelsOwnTransposes) {
  auto original = parse_text(kTf2onnx);
  auto model = parse_text(kTf2onnx);
  ASSERT_TRUE(original && model);
  auto report = run_pipeline(model, converting({{"x", "NCHW"}, {"y", "NCHW"}}));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->transposes_before, 2);
  EXPECT_EQ(report->transposes_after, 0);
  EXPECT_EQ(count_ops(*model, "Transpose"), 0);
  EXPECT_EQ(declared(model->graph().inputs()[0].info), (std::vector<int64_t>{1, 2, 5, 4}));
  EXPECT_EQ(declared(model->graph().outputs()[0].info), (std::vector<int64_t>{1, 3, 5, 4}));
  // [1,5,4,2] read as NHWC has 2 channels and a larger H: no note; nor for the output.
  EXPECT_EQ(report->layout_changes[0], "input 'x': NHWC [1,5,4,2] -> NCHW [1,2,5,4]");

  const eval::Tensor x = ramp({1, 5, 4, 2});
  auto want = eval::run_model(*original, {{"x", x}});
  auto got = eval::run_model(*model, {{"x", transposed(x, {0, 3, 1, 2})}});
  ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
  EXPECT_EQ(compare_recorded((*got)[0], transposed((*want)[0], {0, 3, 1, 2})), "");
}

// What an exporter wrote (PaddleOCR's direction classifier, opset 9: a Conv stem after the
// input): served NHWC it keeps one Transpose, before the first Conv, and computes the same.
TEST(IoLayout, APaddleExportServedChannelsLast) {
  const std::string file = std::string(GRAFT_SOURCE_DIR) + "/models/ppocr_mobile_v2_cls.onnx";
  auto original = ir::Model::load_file(file);
  auto loaded = ir::Model::load_file(file);
  ASSERT_TRUE(original.ok() && loaded.ok()) << original.status();
  std::unique_ptr<ir::Model> model = *std::move(loaded);
  auto report = run_pipeline(model, converting({{"x", "NHWC"}}));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verification.result.status, eval::VerifyStatus::kVerified);
  EXPECT_EQ(report->transposes_before, 0);
  EXPECT_EQ(report->transposes_after, 1);
  const ir::Node* t =
      producer(*model, model->graph().inputs()[0].value->uses()[0].node->output(0)->name());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->op_type(), "Transpose");
  ASSERT_EQ(t->output(0)->uses().size(), 1u);
  EXPECT_EQ(t->output(0)->uses()[0].node->op_type(), "Conv");
  EXPECT_EQ(onnx_errors(*model), "");

  const eval::Tensor x = ramp({1, 3, 48, 192});
  auto want = eval::run_model(**original, {{"x", x}});
  auto got = eval::run_model(*model, {{"x", transposed(x, {0, 2, 3, 1})}});
  ASSERT_TRUE(want.ok() && got.ok()) << want.status() << got.status();
  ASSERT_EQ(want->size(), got->size());
  for (size_t i = 0; i < want->size(); ++i)
    EXPECT_EQ(compare_recorded((*got)[i], (*want)[i]), "") << "output " << i;
}

// An input that already looks channels-last gets a note: [1,8,6,3] read as NCHW would have 8
// channels and a width of 3.
TEST(IoLayout, NotesAnInputThatLooksConvertedAlready) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,8,6,3] x) => (float[1,8,6,3] y) { y = Relu (x) }
  )");
  ASSERT_TRUE(model);
  std::vector<std::string> changed;
  ASSERT_TRUE(convert_io_layout(*model, {{"x", "NHWC"}}, &changed).ok());
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_NE(changed[0].find("it may be in NHWC already"), std::string::npos) << changed[0];
}

void expect_refused(const std::string& text, const std::map<std::string, std::string>& layouts,
                    const std::vector<std::string>& parts) {
  auto model = parse_text(text);
  ASSERT_TRUE(model);
  const ModelFingerprint before = fingerprint(*model);
  auto report = run_pipeline(model, converting(layouts, false));
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  for (const auto& part : parts)
    EXPECT_NE(report.status().message().find(part), std::string::npos)
        << report.status() << " lacks " << part;
  EXPECT_EQ(verify_unchanged("io_layout", before, fingerprint(*model)), absl::OkStatus());
}

TEST(IoLayout, RefusesWhatDoesNotFit) {
  expect_refused(kCnn, {{"z", "NHWC"}}, {"'z' is neither an input nor an output", "'feat'"});
  expect_refused(kCnn, {{"y", "NHWC"}}, {"'y' has rank 2", "NHWC needs rank 4"});
  expect_refused(kCnn, {{"x", "NHWC"}, {"y", "NWC"}}, {"'y' has rank 2"});  // nothing applied
  expect_refused(kCnn, {{"x", "HWCN"}}, {"'x' given 'HWCN'", "'NHWC'"});
  expect_refused(kCnn, {{"", "NHWC"}}, {"an empty name"});
  expect_refused(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,4,4] x) => (float[1,3,4,4] x) {}
  )",
                 {{"x", "NHWC"}}, {"both an input and an output"});
  expect_refused(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float x) => (float y) { y = Relu (x) }
  )",
                 {{"x", "NHWC"}}, {"'x' has rank 0"});
  expect_refused(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,3,4,4] x, float[1,3,4,4] d) => (float[1,3,4,4] y)
      <float[1,3,4,4] d = {0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0}> {
      y = Add (x, d)
    }
  )",
                 {{"d", "NHWC"}}, {"has an initializer"});
}

}  // namespace
}  // namespace graft::testing
