// Fixing symbolic input dims (core/pipeline/fix_dims.h, PipelineConfig::fix_dims/fix_shapes):
// the declarations change before the pipeline, what follows from them folds, the passes are held
// to the fixed interface and verified against the fixed model, and requests that do not fit the
// model are InvalidArgument with the model left as it was.
#include "core/pipeline/fix_dims.h"

#include <absl/strings/str_cat.h>

#include "core/ir/fingerprint.h"
#include "core/passes/registry.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

// A small CNN whose flattening Reshape's target is computed from Shape(r): [N*C, H*W] needs
// the batch and the image size, which one 0 (copy) and one -1 cannot stand for while they are
// symbolic, so only fixed dims fold it.
constexpr char kCnn[] = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[N,3,H,W] x) => (float[A,B] y) {
    w = Constant <value = float[4,3,1,1] {0.5, -1, 0.25, 1, 0.5, -0.5, -0.25, 2, 1, 0.75, -1, 0.5}> ()
    c = Conv (x, w)
    r = Relu (c)
    s = Shape (r)
    i0 = Constant <value = int64 {0}> ()
    i1 = Constant <value = int64 {1}> ()
    i2 = Constant <value = int64 {2}> ()
    i3 = Constant <value = int64 {3}> ()
    ax = Constant <value = int64[1] {0}> ()
    n = Gather <axis = 0> (s, i0)
    ch = Gather <axis = 0> (s, i1)
    h = Gather <axis = 0> (s, i2)
    wd = Gather <axis = 0> (s, i3)
    nc = Mul (n, ch)
    hw = Mul (h, wd)
    u0 = Unsqueeze (nc, ax)
    u1 = Unsqueeze (hw, ax)
    shape = Concat <axis = 0> (u0, u1)
    flat = Reshape (r, shape)
    y = Softmax <axis = 1> (flat)
  }
)";

int shape_ops(const ir::Model& model) {
  return count_ops(model, "Shape") + count_ops(model, "Gather") + count_ops(model, "Concat");
}

// The dims a main graph input declares: a size, or -1 for a symbolic or unknown dim.
std::vector<int64_t> declared_dims(const ir::Model& model, size_t input) {
  std::vector<int64_t> out;
  for (const auto& d : model.graph().inputs()[input].info.type().tensor_type().shape().dim())
    out.push_back(d.has_dim_value() ? d.dim_value() : -1);
  return out;
}

std::string dim_param(const ir::Model& model, size_t input, int dim) {
  return model.graph().inputs()[input].info.type().tensor_type().shape().dim(dim).dim_param();
}

PipelineConfig fixing(std::map<std::string, int64_t> dims,
                      std::map<std::string, std::vector<int64_t>> shapes = {}) {
  PipelineConfig config = test_pipeline_config();
  config.fix_dims = std::move(dims);
  config.fix_shapes = std::move(shapes);
  return config;
}

// run_pipeline on kCnn-like `text` with `config`: expects InvalidArgument containing every one
// of `parts`, and the model unchanged.
void expect_refused(const std::string& text, const PipelineConfig& config,
                    const std::vector<std::string>& parts) {
  auto model = parse_text(text);
  ASSERT_TRUE(model);
  const ModelFingerprint before = fingerprint(*model);
  auto report = run_pipeline(model, config);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument) << report.status();
  for (const auto& part : parts)
    EXPECT_NE(report.status().message().find(part), absl::string_view::npos)
        << "'" << part << "' not in: " << report.status().message();
  EXPECT_EQ(verify_unchanged("fix_dims", before, fingerprint(*model)), absl::OkStatus());
}

TEST(FixDims, FixedDimsFoldTheShapeArithmeticAndVerify) {
  // Without fixing, O2 cannot fold the chain.
  auto symbolic = parse_text(kCnn);
  ASSERT_TRUE(symbolic);
  const int chain = shape_ops(*symbolic);
  EXPECT_EQ(chain, 6);
  auto plain = run_pipeline(symbolic, test_pipeline_config());
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_GT(shape_ops(*symbolic), 0);
  EXPECT_TRUE(plain->fixed_inputs.empty());

  auto model = parse_text(kCnn);
  ASSERT_TRUE(model);
  PipelineConfig config = fixing({{"N", 2}, {"H", 4}, {"W", 5}});
  config.verify = true;
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(shape_ops(*model), 0);
  EXPECT_EQ(count_ops(*model, "Mul"), 0);
  EXPECT_EQ(count_ops(*model, "Unsqueeze"), 0);
  ir::Node* reshape = model->graph().find_local("flat")->producer();
  ASSERT_TRUE(reshape && reshape->input(1)->is_constant());
  EXPECT_EQ(values_of(reshape->input(1)), (std::vector<double>{8, 20}));
  EXPECT_LT(report->nodes_after, plain->nodes_after);
  // Verified against the fixed model, at the fixed sizes: the folded Reshape runs only there,
  // so an original run at other sizes would have rolled fold_shapes back.
  const VerificationReport& v = report->verification;
  EXPECT_EQ(v.result.status, eval::VerifyStatus::kVerified) << v.result.message;
  EXPECT_TRUE(v.rolled_back.empty());
  for (const auto& p : report->passes) EXPECT_EQ(p.rollbacks, 0) << p.name;
  EXPECT_EQ(report->fixed_inputs, std::vector<std::string>{"'x': [N,3,H,W] -> [2,3,4,5]"});

  // The interface is the fixed one; the output's declaration is left as it was.
  EXPECT_EQ(declared_dims(*model, 0), (std::vector<int64_t>{2, 3, 4, 5}));
  const auto& out = model->graph().outputs()[0].info.type().tensor_type().shape();
  ASSERT_EQ(out.dim_size(), 2);
  EXPECT_EQ(out.dim(0).dim_param(), "A");
  EXPECT_EQ(out.dim(1).dim_param(), "B");
  EXPECT_EQ(onnx_errors(*model), "");
  // The memory estimates are of the fixed model: its sizes, not the default 1.
  EXPECT_GT(report->memory_before.peak_activation_bytes, 0u);
  EXPECT_EQ(report->memory_after.largest_tensor_bytes, 2u * 4 * 4 * 5 * 4);
}

TEST(FixDims, FixShapesGivesWholeShapesAndBindsTheirNamesEverywhere) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,S] a, float[N,S] b, float c, float d) => (float[N,S] y) {
      s = Add (a, b)
      t = Mul (c, d)
      y = Add (s, t)
    }
  )");
  ASSERT_TRUE(model);
  // `c` is declared without a shape (a scalar type in the text: give it one afterwards).
  onnx::TypeProto no_shape;
  no_shape.mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  model->graph().set_input_type(2, no_shape);
  std::vector<std::string> changed;
  ASSERT_EQ(fix_input_dims(*model, {}, {{"a", {1, 128}}, {"c", {1}}}, &changed), absl::OkStatus());
  EXPECT_EQ(declared_dims(*model, 0), (std::vector<int64_t>{1, 128}));
  // b's N and S are a's: the same name is the same size.
  EXPECT_EQ(declared_dims(*model, 1), (std::vector<int64_t>{1, 128}));
  EXPECT_EQ(declared_dims(*model, 2), (std::vector<int64_t>{1}));
  EXPECT_EQ(declared_dims(*model, 3), (std::vector<int64_t>{}));
  EXPECT_EQ(changed, (std::vector<std::string>{"'a': [N,S] -> [1,128]", "'b': [N,S] -> [1,128]",
                                               "'c': (no shape) -> [1]"}));
  // Facts follow the new declarations.
  EXPECT_EQ(model->graph().find_local("s")->static_shape(), (std::vector<int64_t>{1, 128}));
  // Fixing again to the same sizes changes nothing.
  changed.clear();
  ASSERT_EQ(fix_input_dims(*model, {}, {{"a", {1, 128}}}, &changed), absl::OkStatus());
  EXPECT_TRUE(changed.empty());
}

TEST(FixDims, UnknownDimsAreFixedOnlyByShapes) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,?] x) => (float[N,?] y) {
      y = Relu (x)
    }
  )");
  ASSERT_TRUE(model);
  std::vector<std::string> changed;
  ASSERT_EQ(fix_input_dims(*model, {{"N", 3}}, {}, &changed), absl::OkStatus());
  EXPECT_EQ(declared_dims(*model, 0), (std::vector<int64_t>{3, -1}));
  EXPECT_EQ(changed, std::vector<std::string>{"'x': [N,?] -> [3,?]"});
  ASSERT_EQ(fix_input_dims(*model, {}, {{"x", {3, 7}}}, nullptr), absl::OkStatus());
  EXPECT_EQ(declared_dims(*model, 0), (std::vector<int64_t>{3, 7}));
}

TEST(FixDims, ANameNoInputCarriesIsRefusedListingThoseTheyCarry) {
  expect_refused(kCnn, fixing({{"batch", 1}}),
                 {"no input dim is named 'batch'", "the inputs' dim names: 'H', 'N', 'W'"});
  // Names from the client and the model are cut in the message.
  const std::string long_name(5000, 'n');
  expect_refused(kCnn, fixing({{long_name, 1}}), {absl::StrCat(long_name.substr(0, 200), "...'")});
  auto model = parse_text(kCnn);
  ASSERT_TRUE(model);
  auto report = run_pipeline(model, fixing({{long_name, 1}}));
  ASSERT_FALSE(report.ok());
  EXPECT_LT(report.status().message().size(), 400u);
}

TEST(FixDims, SizesOutOfRangeAreRefusedBeforeAnyWork) {
  for (int64_t bad : {int64_t{0}, int64_t{-1}, (int64_t{1} << 31) + 1}) {
    expect_refused(kCnn, fixing({{"N", bad}}), {"fix_dims: the size of 'N' must be 1..2147483648"});
    expect_refused(kCnn, fixing({}, {{"x", {1, 3, bad, 4}}}),
                   {"fix_shapes: dim 2 of 'x' must be 1..2147483648"});
    // resolve_pipeline checks it, so a request fails where its config is built.
    EXPECT_EQ(resolve_pipeline(fixing({{"N", bad}})).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(resolve_pipeline(fixing({{"N", int64_t{1} << 31}})).ok());
  expect_refused(kCnn, fixing({{"", 1}}), {"fix_dims: a dim name is empty"});
  expect_refused(kCnn, fixing({}, {{"x", std::vector<int64_t>(kMaxFixRank + 1, 1)}}),
                 {"at most 1024"});
  std::map<std::string, int64_t> many;
  for (size_t i = 0; i <= kMaxFixEntries; ++i) many["d" + std::to_string(i)] = 1;
  expect_refused(kCnn, fixing(many), {"fix_dims: at most 4096 names"});
}

TEST(FixDims, AShapeMustFitTheInputsRankAndStaticDims) {
  expect_refused(kCnn, fixing({}, {{"x", {2, 4, 4, 5}}}),
                 {"fix_shapes: input 'x': dim 1 is 4, the model declares 3 [N,3,H,W]"});
  expect_refused(kCnn, fixing({}, {{"x", {2, 3, 4}}}),
                 {"fix_shapes: input 'x' has rank 4 [N,3,H,W], 3 dims given"});
  expect_refused(kCnn, fixing({}, {{"z", {1}}}),
                 {"fix_shapes: 'z' is not an input of the model; its inputs: 'x'"});
}

TEST(FixDims, OneNameGivenTwoSizesIsRefused) {
  expect_refused(kCnn, fixing({{"N", 2}}, {{"x", {3, 3, 4, 5}}}),
                 {"fix_dims makes 'N' 2, but fix_shapes gives input 'x' dim 0 ('N') 3"});
  // The same size is no conflict.
  auto model = parse_text(kCnn);
  ASSERT_TRUE(model);
  ASSERT_TRUE(run_pipeline(model, fixing({{"N", 2}}, {{"x", {2, 3, 4, 5}}})).ok());
  // Two shapes that give one name two sizes.
  const char* two = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,2] a, float[N,2] b) => (float[N,2] y) {
      y = Add (a, b)
    }
  )";
  expect_refused(two, fixing({}, {{"a", {1, 2}}, {"b", {4, 2}}}),
                 {"fix_shapes gives input 'a' dim 0 ('N') 1, but fix_shapes gives input 'b' dim 0 "
                  "('N') 4"});
}

TEST(FixDims, InputsWithInitializersAreNotFixed) {
  // `b` is a graph input with an initializer: a default the caller may override.
  const char* text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,2] x, float[K,2] b) => (float[N,2] y)
    <float[1,2] b = {1.0, 2.0}>
    {
      y = Add (x, b)
    }
  )";
  auto model = parse_text(text);
  ASSERT_TRUE(model);
  ASSERT_TRUE(model->graph().inputs()[1].value->is_initializer());
  expect_refused(text, fixing({}, {{"b", {1, 2}}}),
                 {"fix_shapes: input 'b' has an initializer, a default the caller may override"});
  expect_refused(text, fixing({{"K", 1}}),
                 {"input 'b' has an initializer",
                  "its dim 0 is 'K', which this request fixes "
                  "to 1"});
  // Nor are they offered for fix_shapes.
  expect_refused(text, fixing({}, {{"w", {1}}}), {"its inputs: 'x'"});
  // The other inputs are fixed as usual.
  auto report = run_pipeline(model, fixing({{"N", 1}}));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(declared_dims(*model, 0), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(dim_param(*model, 1, 0), "K");
}

TEST(FixDims, VerificationSettingsThatContradictTheFixedDimsAreRefused) {
  PipelineConfig config = fixing({{"N", 2}, {"H", 4}, {"W", 5}});
  config.verify = true;
  config.verify_options.dims["N"] = 3;
  expect_refused(kCnn, config, {"verify: dim 'N' is 3, but fix_dims/fix_shapes fix it to 2"});
  config.verify_options.dims["N"] = 2;  // agreeing is fine
  config.verify_options.shapes["x"] = {2, 3, 4, 6};
  expect_refused(kCnn, config,
                 {"verify: the shape of 'x' gives dim 3 size 6, but fix_dims/fix_shapes fix it "
                  "to 5"});
  config.verify_options.shapes["x"] = {2, 3, 4, 5};
  auto model = parse_text(kCnn);
  ASSERT_TRUE(model);
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verification.result.status, eval::VerifyStatus::kVerified);
  // Without verification the verify settings mean nothing and are not checked.
  config.verify = false;
  config.verify_options.dims["N"] = 3;
  model = parse_text(kCnn);
  EXPECT_TRUE(run_pipeline(model, config).ok());
}

// Gives input 0 back its symbolic batch dim: a change of the interface.
class UnfixingPass final : public Pass {
 public:
  std::string_view name() const override { return "unfixing"; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    onnx::TypeProto type = model.graph().inputs()[0].info.type();
    type.mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_param("N");
    model.graph().set_input_type(0, type);
    PassResult r;
    r.add();
    return r;
  }
};

TEST(FixDims, PassesAreHeldToTheFixedInterface) {
  auto model = parse_text(kCnn);
  ASSERT_TRUE(model);
  std::vector<PassSpec> specs = {{"unfixing", [] { return std::make_unique<UnfixingPass>(); }, {}},
                                 {"fold_shapes", find_pass("fold_shapes")->create, {}}};
  auto report = run_specs(model, specs, fixing({{"N", 2}, {"H", 4}, {"W", 5}}));
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->passes.size(), 2u);
  EXPECT_EQ(report->passes[0].rollbacks, 1);
  EXPECT_EQ(report->passes[0].rollback_reason, "the pass changed the model's inputs or outputs");
  EXPECT_EQ(report->passes[1].rollbacks, 0);
  EXPECT_EQ(declared_dims(*model, 0), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(report->fixed_inputs.size(), 1u);
}

TEST(FixDims, NothingToFixLeavesTheModelAlone) {
  auto model = parse_text(kCnn);
  ASSERT_TRUE(model);
  const ModelFingerprint before = fingerprint(*model);
  std::vector<std::string> changed;
  ASSERT_EQ(fix_input_dims(*model, {}, {}, &changed), absl::OkStatus());
  EXPECT_TRUE(changed.empty());
  EXPECT_EQ(verify_unchanged("fix_dims", before, fingerprint(*model)), absl::OkStatus());
}

}  // namespace
}  // namespace graft::testing
