// same_outputs is what every pass test relies on to catch numeric changes, so it must itself be
// able to fail: these tests feed it models that differ and expect a precise complaint.
#include <limits>

#include "core/ir/tensor.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

constexpr const char* kAffine = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[N,3] x) => (float[N,3] y) <float[3] w = {1.0, 2.0, 3.0}, float[3] b = {0.5, 0.0, -0.5}> {
    t = Mul (x, w)
    y = Add (t, b)
  }
)";

// A clone of `model` whose main graph initializer `name` holds `values` (float, same dims).
std::unique_ptr<ir::Model> with_initializer(const ir::Model& model, const std::string& name,
                                            const std::vector<double>& values) {
  auto copy = model.clone();
  ir::Value* v = copy->graph().find_local(name);
  EXPECT_TRUE(v && v->initializer()) << name;
  if (!v || !v->initializer()) return copy;
  std::vector<int64_t> dims(v->initializer()->dims().begin(), v->initializer()->dims().end());
  v->set_initializer(ir::make_float_tensor(onnx::TensorProto::FLOAT, dims, values));
  return copy;
}

TEST(SameOutputs, EqualForACloneAndSymbolicDims) {
  auto model = parse_text(kAffine);
  ASSERT_TRUE(model);
  EXPECT_EQ(same_outputs(*model, *model->clone()), "");
  EXPECT_EQ(same_outputs(*model, *model->clone(), /*seed=*/7), "");
}

TEST(SameOutputs, ReportsAChangedInitializer) {
  auto model = parse_text(kAffine);
  ASSERT_TRUE(model);
  auto changed = with_initializer(*model, "b", {0.5, 0.0, -0.25});
  std::string diff = same_outputs(*model, *changed);
  // Index 2 is the first element touched by the changed bias (row 0, column 2).
  EXPECT_NE(diff.find("output 'y' [2]"), std::string::npos) << diff;
  EXPECT_EQ(diff.find("not verifiable"), std::string::npos) << diff;
}

TEST(SameOutputs, ToleratesRoundingButNotMore) {
  auto model = parse_text(kAffine);
  ASSERT_TRUE(model);
  // A relative change of 1e-6 is float rounding; 1e-2 is a different model.
  EXPECT_EQ(same_outputs(*model, *with_initializer(*model, "w", {1.0, 2.0, 3.0 * (1 + 1e-6)})), "");
  EXPECT_NE(same_outputs(*model, *with_initializer(*model, "w", {1.0, 2.0, 3.0 * (1 + 1e-2)})), "");
}

TEST(SameOutputs, ReportsShapeAndTypeChanges) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[6] y) <int64[1] s = {6}> {
      y = Reshape (x, s)
    }
  )");
  auto reshaped = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[6] y) <int64[2] s = {3, 2}> {
      y = Reshape (x, s)
    }
  )");
  auto cast = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[6] y) <int64[1] s = {6}> {
      r = Reshape (x, s)
      y = Cast <to = 11> (r)
    }
  )");
  ASSERT_TRUE(model && reshaped && cast);
  EXPECT_NE(same_outputs(*model, *reshaped).find("shape [6] became [3,2]"), std::string::npos)
      << same_outputs(*model, *reshaped);
  EXPECT_NE(same_outputs(*model, *cast).find("element type FLOAT became DOUBLE"), std::string::npos)
      << same_outputs(*model, *cast);
}

TEST(SameOutputs, ComparesIntegersAndBoolsExactly) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[4] n, bool[4] p) => (int64[4] m, bool[4] q) <int64[1] one = {1}> {
      m = Add (n, one)
      q = Not (p)
    }
  )");
  auto plus_two = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[4] n, bool[4] p) => (int64[4] m, bool[4] q) <int64[1] one = {2}> {
      m = Add (n, one)
      q = Not (p)
    }
  )");
  auto identity = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[4] n, bool[4] p) => (int64[4] m, bool[4] q) <int64[1] one = {1}> {
      m = Add (n, one)
      q = Identity (p)
    }
  )");
  ASSERT_TRUE(model && plus_two && identity);
  EXPECT_EQ(same_outputs(*model, *model->clone()), "");
  EXPECT_NE(same_outputs(*model, *plus_two).find("output 'm' [0]"), std::string::npos)
      << same_outputs(*model, *plus_two);
  // Not differs from Identity on every element, whatever the random bools are.
  EXPECT_NE(same_outputs(*model, *identity).find("output 'q'"), std::string::npos)
      << same_outputs(*model, *identity);
}

TEST(SameOutputs, NanEqualsNan) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) <float[2] zero = {0.0, 0.0}> {
      nan = Div (zero, zero)
      y = Add (x, nan)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(same_outputs(*model, *model->clone()), "");
  // NaN must still differ from a number.
  auto number = with_initializer(*model, "zero", {1.0, 1.0});
  EXPECT_NE(same_outputs(*model, *number), "");
}

TEST(SameOutputs, CustomDomainIsNotVerifiable) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[2] x) => (float[2] y) {
      y = custom.Frobnicate (x)
    }
  )");
  ASSERT_TRUE(model);
  std::string result = same_outputs(*model, *model->clone());
  EXPECT_EQ(result.rfind("not verifiable: ", 0), 0u) << result;
  EXPECT_NE(result.find("Frobnicate"), std::string::npos) << result;
}

TEST(SameOutputs, RunPassCheckedAcceptsAnExactRewrite) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      t = Identity (x)
      y = Relu (t)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_TRUE(run_pass_checked(*model, "eliminate_identity").changed);
}

}  // namespace
}  // namespace graft::testing
