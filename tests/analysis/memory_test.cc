// The memory estimator (core/analysis/memory.h), checked by hand-computed sums and against the
// reference evaluator's measured peak (eval::RunStats::peak_bytes): the evaluator frees every
// value after its last reader, like the estimate, so on models without weights or kernel
// scratch the two agree exactly.
#include "core/analysis/memory.h"

#include <limits>

#include "core/eval/executor.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

// The evaluator's peak for zero-filled feeds of the main graph's inputs (dims as declared,
// symbolic dims 1).
uint64_t measured_peak(const ir::Model& model) {
  std::map<std::string, eval::Tensor> feeds;
  for (const auto& in : model.graph().inputs()) {
    if (in.value->is_initializer()) continue;
    std::vector<int64_t> dims;
    for (const ir::Dim& d : in.value->fact().dims) dims.push_back(d.known() ? d.value : 1);
    auto t = eval::Tensor::zeros(in.value->elem_type(), dims, 1 << 30);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) return 0;
    feeds[in.value->name()] = std::move(*t);
  }
  eval::RunStats stats;
  eval::Limits limits;
  auto out = eval::run_model(model, feeds, limits, &stats);
  EXPECT_TRUE(out.ok()) << out.status();
  return stats.peak_bytes;
}

TEST(Memory, ChainHoldsTwoTensorsAtOnce) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1000] x) => (float[1000] y) {
      a = Relu (x)
      b = Neg (a)
      y = Exp (b)
    }
  )");
  ASSERT_TRUE(model);
  MemoryStats s = estimate_memory(*model, {}, 1);
  EXPECT_EQ(s.weight_bytes, 0u);
  EXPECT_EQ(s.peak_activation_bytes, 8000u);  // an input and an output per node
  EXPECT_EQ(s.unknown_size_values, 0);
  EXPECT_EQ(s.largest_tensor, "x");  // equal sizes: the first one seen
  EXPECT_EQ(s.largest_tensor_bytes, 4000u);
  EXPECT_EQ(measured_peak(*model), s.peak_activation_bytes);
}

TEST(Memory, FourBitValuesCountPacked) {
  // 15 int4 elements take 8 bytes, as runtimes hold them (the evaluator holds one per byte).
  auto model = parse_text(R"(
    <ir_version: 10, opset_import: ["" : 21]>
    g (int4[5,3] x, float s) => (float[5,3] y) {
      y = DequantizeLinear (x, s)
    }
  )");
  ASSERT_TRUE(model);
  bool known = false;
  EXPECT_EQ(value_bytes(*model->graph().inputs()[0].value, SizeRule{}, &known), 8u);
  EXPECT_TRUE(known);
  MemoryStats s = estimate_memory(*model, {}, 1);
  EXPECT_EQ(s.peak_activation_bytes, 8u + 4u + 60u);
  EXPECT_EQ(s.unknown_size_values, 0);
}

TEST(Memory, DiamondKeepsBothBranches) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[250] x) => (float[250] y) {
      a = Relu (x)
      b = Neg (x)
      y = Sum (a, b)
    }
  )");
  ASSERT_TRUE(model);
  MemoryStats s = estimate_memory(*model, {}, 1);
  // Neg: x, a and b; Sum: a, b and y.
  EXPECT_EQ(s.peak_activation_bytes, 3000u);
  EXPECT_EQ(s.peak_node, 1);
  EXPECT_EQ(measured_peak(*model), s.peak_activation_bytes);
}

TEST(Memory, SkipConnectionLivesUntilItsLastReader) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[100] x) => (float[100] y) {
      a = Relu (x)
      b = Neg (a)
      c = Exp (b)
      d = Abs (c)
      y = Sum (d, a)
    }
  )");
  ASSERT_TRUE(model);
  MemoryStats s = estimate_memory(*model, {}, 1);
  // From Exp on, a is held beside the chain: 3 tensors of 400 bytes (a chain would hold 2).
  EXPECT_EQ(s.peak_activation_bytes, 1200u);
  EXPECT_EQ(measured_peak(*model), s.peak_activation_bytes);
}

TEST(Memory, UnreadOutputsLiveWhileTheirNodeRuns) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[100] x) => (float[100] y) {
      a = Relu (x)
      big = Concat <axis = 0> (a, a, a, a)
      y = Neg (a)
    }
  )");
  ASSERT_TRUE(model);
  MemoryStats s = estimate_memory(*model, {}, 1);
  // Concat: a (400) + big (1600); big dies at once.
  EXPECT_EQ(s.peak_activation_bytes, 2000u);
  EXPECT_EQ(s.largest_tensor, "big");
  EXPECT_EQ(s.largest_tensor_bytes, 1600u);
  EXPECT_EQ(measured_peak(*model), s.peak_activation_bytes);
}

TEST(Memory, WeightsAreNotActivations) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4] x, float[4] bias = {1.0, 1.0, 1.0, 1.0}) => (float[4] y)
        <float[4] w = {1.0, 2.0, 3.0, 4.0}> {
      a = Mul (x, w)
      y = Add (a, bias)
    }
  )");
  ASSERT_TRUE(model);
  MemoryStats s = estimate_memory(*model, {}, 1);
  EXPECT_EQ(s.weight_bytes, 32u);
  EXPECT_EQ(s.peak_activation_bytes, 32u);  // x and a, then a and y
  // The evaluator also holds the weights it reads (loaded up front, freed after their last
  // reader): its peak lies between the activations and activations plus all weights.
  uint64_t measured = measured_peak(*model);
  EXPECT_GE(measured, s.peak_activation_bytes);
  EXPECT_LE(measured, s.peak_activation_bytes + s.weight_bytes);
}

TEST(Memory, SymbolicDimsAreBoundOrDefaulted) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N, 10] x) => (float[N, 10] y) {
      y = Relu (x)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(estimate_memory(*model, {{"N", 3}}, 1).peak_activation_bytes, 240u);
  EXPECT_EQ(estimate_memory(*model, {}, 5).peak_activation_bytes, 400u);
  EXPECT_EQ(estimate_memory(*model, {{"M", 3}}, 2).peak_activation_bytes, 160u);
  EXPECT_EQ(estimate_memory(*model, {{"N", -7}}, 2).peak_activation_bytes, 0u);
}

TEST(Memory, UnknownShapesCountZeroAndAreCounted) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[6] x, int64[K] shape) => (float[6] y) {
      shape6 = Constant <value = int64[1] {6}> ()
      r = Reshape (x, shape)
      f = Flatten <axis = 0> (r)
      y = Reshape (f, shape6)
    }
  )");
  ASSERT_TRUE(model);
  MemoryStats s = estimate_memory(*model, {}, 1);
  EXPECT_GE(s.unknown_size_values, 1);  // r (rank unknown: the shape's length is K)
  // Known: x (24) and y (24), shape (8 with K = 1), f (rank 2 of unknown dims: 4), shape6 (8).
  EXPECT_LE(s.peak_activation_bytes, 24u + 24u + 8u + 8u + 4u);
}

// Constant nodes hold weights (exporters such as paddle2onnx write every weight that way): they
// count in weight_bytes, not as activations, unless the constant is a graph output.
TEST(Memory, ConstantNodesAreWeights) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4] x) => (float[4] y, float[2] k) {
      w = Constant <value = float[100] {1.0}> ()
      k = Constant <value = float[2] {1.0, 2.0}> ()
      s = ReduceSum <keepdims = 1> (w)
      y = Mul (x, s)
    }
  )");
  ASSERT_TRUE(model);
  MemoryStats s = estimate_memory(*model, {}, 1);
  EXPECT_EQ(s.weight_bytes, 408u);
  // x (16), k (8, an output), s (4), y (16): at Mul x, s, y and k are live.
  EXPECT_EQ(s.peak_activation_bytes, 44u);
  EXPECT_NE(s.largest_tensor, "w");
}

TEST(Memory, HostileDimsSaturate) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4611686018427387904, 4611686018427387904] x, float[1000000000000, 1000000000000] z)
        => (float[4611686018427387904, 4611686018427387904] y) {
      y = Relu (x)
    }
  )");
  ASSERT_TRUE(model);
  MemoryStats s = estimate_memory(*model, {}, 1);
  EXPECT_EQ(s.peak_activation_bytes, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(s.largest_tensor_bytes, std::numeric_limits<uint64_t>::max());
}

TEST(Memory, IfBodyPeakAndCapturesCount) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[100] x, bool c) => (float[100] y) {
      a = Relu (x)
      y = If (c) <
        then_branch = t () => (float[100] t_out) { t_out = Neg (a) },
        else_branch = e () => (float[100] e_out) {
          e1 = Abs (a)
          e_out = Neg (e1)
        }>
    }
  )");
  ASSERT_TRUE(model);
  MemoryStats s = estimate_memory(*model, {}, 1);
  // At the If: c (1) and a (400, captured: live until the If), plus the else branch's peak (e1
  // and e_out, 800) or, once it ends, its output e_out and y (800).
  EXPECT_EQ(s.peak_activation_bytes, 1201u);
  // The evaluator runs the else branch (c is false): the same.
  EXPECT_EQ(measured_peak(*model), s.peak_activation_bytes);
}

TEST(Memory, ExternalWeightsCountByDeclaredSizeUnread) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4] x) => (float[4] y) <float[4] w = {1.0, 2.0, 3.0, 4.0}> {
      y = Mul (x, w)
    }
  )");
  ASSERT_TRUE(model);
  // Make w external (no file: it must not be read).
  ir::Value* w = model->graph().find_local("w");
  ASSERT_NE(w, nullptr);
  onnx::TensorProto t;
  t.set_name("w");
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.add_dims(1000);
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  auto* loc = t.add_external_data();
  loc->set_key("location");
  loc->set_value("missing.bin");
  model->graph().make_initializer(w, t);
  EXPECT_EQ(estimate_memory(*model, {}, 1).weight_bytes, 4000u);
}

// Symbolic dims: the config's memory_dims, else verification's dims, else the default.
TEST(MemoryReport, SymbolicDimsComeFromTheConfigThenVerification) {
  const char* text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N, M] x) => (float[N, M] y) <float[1] w = {2.0}> {
      a = Relu (x)
      y = Mul (a, w)
    }
  )";
  auto run = [&](PipelineConfig config) {
    auto model = parse_text(text);
    EXPECT_TRUE(model);
    config.passes = {"prune"};
    auto report = run_pipeline(model, config);
    EXPECT_TRUE(report.ok()) << report.status();
    return report.ok() ? *report : PipelineReport{};
  };
  // x and a alive at Relu, a and y at Mul: 2 tensors of N*M floats.
  EXPECT_EQ(run({}).memory_before.peak_activation_bytes, 8u);
  EXPECT_EQ(run({}).memory_before.weight_bytes, 4u);
  PipelineConfig dims;
  dims.memory_dims = {{"N", 10}, {"M", 3}};
  PipelineReport r = run(dims);
  EXPECT_EQ(r.memory_before.peak_activation_bytes, 2u * 30 * 4);
  EXPECT_EQ(r.memory_after.peak_activation_bytes, 2u * 30 * 4);
  EXPECT_EQ(r.memory_dims, (DimBindings{{"M", 3}, {"N", 10}}));
  PipelineConfig other;
  other.memory_dims = {{"N", 10}};
  other.memory_default_dim = 5;  // M
  EXPECT_EQ(run(other).memory_before.peak_activation_bytes, 2u * 50 * 4);
  PipelineConfig verify;
  verify.verify = true;
  verify.verify_options.dims = {{"N", 7}, {"M", 2}};
  EXPECT_EQ(run(verify).memory_before.peak_activation_bytes, 2u * 14 * 4);
  verify.memory_dims = {{"N", 1}};  // overrides verification's N
  EXPECT_EQ(run(verify).memory_before.peak_activation_bytes, 2u * 2 * 4);
}

// The saturating helpers every byte count goes through (core/ir/saturating.h).
TEST(Saturating, CountsNeverWrapOrGoNegative) {
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  constexpr uint64_t kHalf = uint64_t{1} << 63;  // INT64_MAX + 1
  EXPECT_EQ(sat_add(kMax - 1, 5), kMax);
  EXPECT_EQ(sat_add(3, 4), 7u);
  EXPECT_EQ(sat_mul(kHalf, 2), kMax);
  EXPECT_EQ(sat_mul(kHalf, 0), 0u);
  EXPECT_EQ(sat_sub(3, 5), 0u);
  EXPECT_EQ(sat_sub(5, 3), 2u);
  // A running count moved by one step's change, at sizes past INT64_MAX.
  EXPECT_EQ(sat_add_change(kHalf + 10, kHalf - 5, kHalf + 10), kHalf - 5);
  EXPECT_EQ(sat_add_change(kMax, kHalf + 1, kMax), kHalf + 1);
  EXPECT_EQ(sat_add_change(kHalf, kMax, 0), kMax);
  EXPECT_EQ(sat_add_change(5, 1, kMax), 0u);  // removed more than the count held
  EXPECT_EQ(clamp_to_i64(kMax), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(clamp_to_i64(42), 42);
}

// Per-pass peaks at estimates past INT64_MAX (hostile dims, short of saturation): the pass's
// row ends at the estimate of what it left, before as after the change crosses INT64_MAX.
// (Signed arithmetic on these counts overflowed, or clamped a huge peak to 0.)
TEST(MemoryReport, PerPassPeaksPastInt64Max) {
  // x, a and b alive at Add before cse; x or a and c after: 3 and 2 tensors of n floats.
  for (const char* n : {"1000000000000000000", "1200000000000000000"}) {
    SCOPED_TRACE(n);
    const std::string text = std::string(R"(
      <ir_version: 8, opset_import: ["" : 13]>
      g (float[)") + n + R"(] x) => (float[)" +
                             n + R"(] y) {
        a = Neg (x)
        b = Neg (x)
        y = Add (a, b)
      }
    )";
    auto model = parse_text(text.c_str());
    ASSERT_TRUE(model);
    PipelineConfig config;
    config.passes = {"cse"};
    auto report = run_pipeline(model, config);
    ASSERT_TRUE(report.ok()) << report.status();
    const uint64_t before = report->memory_before.peak_activation_bytes;
    const uint64_t after = report->memory_after.peak_activation_bytes;
    ASSERT_GT(before, uint64_t{1} << 63);
    ASSERT_LT(before, std::numeric_limits<uint64_t>::max());
    ASSERT_LT(after, before);
    ASSERT_EQ(report->passes.size(), 1u);
    EXPECT_EQ(report->passes[0].peak_before, before);
    EXPECT_EQ(report->passes[0].peak_after, after);
    EXPECT_EQ(report->passes[0].nodes_before, 3u);
    EXPECT_EQ(report->passes[0].nodes_after, 2u);
  }
}

}  // namespace
}  // namespace graft::testing
