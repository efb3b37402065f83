#include <cmath>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "core/ir/tensor.h"
#include "core/passes/registry.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

TEST(FoldConstants, ArithmeticChainBecomesOneInitializer) {
  const std::vector<double> c1 = {1.5, -2.0, 3.0}, c2 = {0.25, 4.0, -1.0}, c3 = {2.0, 0.5, -3.0},
                            c4 = {1.0, 1.0, 0.5};
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[3] x) => (float[3] y)
      <float[3] c1 = {1.5, -2.0, 3.0}, float[3] c2 = {0.25, 4.0, -1.0},
       float[3] c3 = {2.0, 0.5, -3.0}, float[3] c4 = {1.0, 1.0, 0.5}> {
      a = Add (c1, c2)
      b = Mul (a, c3)
      d = Sub (b, c4)
      e = Sqrt (c4)
      f = Div (d, e)
      y = Add (x, f)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_constants");
  EXPECT_TRUE(result.changed);
  EXPECT_EQ(result.rewrites, 5);
  EXPECT_EQ(model->graph().num_nodes(), 1u);
  EXPECT_EQ(count_ops(*model, "Add"), 1);
  std::vector<double> expected;
  for (size_t i = 0; i < 3; ++i)
    expected.push_back(((c1[i] + c2[i]) * c3[i] - c4[i]) / std::sqrt(c4[i]));
  expect_near(initializer_values(*model, "f"), expected, 1e-5);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldConstants, ShapeGatherConcatReshapeChainFolds) {
  std::vector<double> w;
  for (int i = 0; i < 24; ++i) w.push_back(i * 0.5 - 3.0);
  auto model = parse_text(absl::StrCat(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,12] x) => (float[2,12] y)
      <float[2,3,4] w = {)",
                                       absl::StrJoin(w, ", "), R"(},
       int64 zero = {0}, int64[1] axes = {0}, int64[1] minus1 = {-1}> {
      s = Shape (w)
      d0 = Gather <axis = 0> (s, zero)
      u = Unsqueeze (d0, axes)
      n = Concat <axis = 0> (u, minus1)
      r = Reshape (w, n)
      y = Add (x, r)
    }
  )"));
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_constants");
  EXPECT_EQ(result.rewrites, 5);
  EXPECT_EQ(model->graph().num_nodes(), 1u);
  // The folded shape arithmetic went with the Reshape that was its only reader.
  for (const char* gone : {"s", "d0", "u", "n", "zero", "axes", "minus1", "w"})
    EXPECT_EQ(model->graph().find_local(gone), nullptr) << gone;
  EXPECT_EQ(dims_of(*model, "r"), (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(initializer_values(*model, "r"), w);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldConstants, MultiOutputNodeAndGraphOutputKeepTheirNames) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[3] x) => (float[3] y, float[1] p, float[2] q)
      <float[3] c = {4.0, 9.0, 16.0}, int64[2] sizes = {1, 2}> {
      p, q = Split <axis = 0> (c, sizes)
      r = Sqrt (c)
      y = Mul (x, r)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_constants");
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(initializer_values(*model, "p"), (std::vector<double>{4.0}));
  EXPECT_EQ(initializer_values(*model, "q"), (std::vector<double>{9.0, 16.0}));
  expect_near(initializer_values(*model, "r"), {2.0, 3.0, 4.0}, 1e-5);
  ASSERT_EQ(model->graph().outputs().size(), 3u);
  EXPECT_EQ(model->graph().outputs()[1].value->name(), "p");
  EXPECT_EQ(model->graph().outputs()[2].value->name(), "q");
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldConstants, NonConstantInputsAreNotFolded) {
  // `w` is an initializer that is also a graph input: callers may override it.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, float[2] w) => (float[2] y) <float[2] w = {1.0, 2.0}, float[2] c = {3.0, 4.0}> {
      a = Add (x, c)
      b = Neg (w)
      y = Add (a, b)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass_checked(*model, "fold_constants").changed);
  EXPECT_EQ(count_ops(*model, "Add"), 2);
  EXPECT_EQ(count_ops(*model, "Neg"), 1);
}

TEST(FoldConstants, NondeterministicOpsAreNotFolded) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) <float[2] c = {3.0, 4.0}> {
      r = RandomUniformLike (c)
      n = RandomNormalLike (c)
      s = Add (r, n)
      y = Add (x, s)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass(*model, "fold_constants").changed);
  EXPECT_EQ(count_ops(*model, "RandomUniformLike"), 1);
  EXPECT_EQ(count_ops(*model, "RandomNormalLike"), 1);
  EXPECT_EQ(count_ops(*model, "Add"), 2);
}

TEST(FoldConstants, CustomDomainsAndKernelErrorsAreLeftAlone) {
  // The Reshape is invalid (6 elements into 4): the kernel refuses, the pass keeps the node.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[4] x) => (float[4] y, float[2] z)
      <float[6] c = {1, 2, 3, 4, 5, 6}, int64[1] shape = {4}, float[2] d = {1, 2}> {
      r = Reshape (c, shape)
      y = Add (x, r)
      z = custom.Neg (d)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass(*model, "fold_constants").changed);
  EXPECT_EQ(count_ops(*model, "Reshape"), 1);
  EXPECT_EQ(count_ops(*model, "Neg"), 1);
}

constexpr char kConstantOfShape[] = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1000,1000] x, float[15,15] x2) => (float[1000,1000] y, float[15,15] y2)
      <int64[2] big = {1000, 1000}, int64[2] small = {15, 15}> {
      f = ConstantOfShape <value = float[1] {0.5}> (big)
      y = Add (x, f)
      f2 = ConstantOfShape <value = float[1] {0.5}> (small)
      y2 = Add (x2, f2)
    }
  )";

TEST(FoldConstants, GrowthCapKeepsBlowUps) {
  auto model = parse_text(kConstantOfShape);
  ASSERT_TRUE(model);
  // 1M floats from a 16-byte shape stays; 225 floats (under 64 KiB) fold despite the growth.
  auto result = run_pass(*model, "fold_constants");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "ConstantOfShape"), 1);
  ir::Value* f = model->graph().find_local("f");
  ASSERT_TRUE(f);
  EXPECT_FALSE(f->is_initializer());
  EXPECT_EQ(initializer_values(*model, "f2"), std::vector<double>(225, 0.5));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldConstants, ResultsUnder64KiBFoldWhateverTheirGrowth) {
  // A detector's anchor grid: 40 KB of floats tiled from 16 bytes folds (the Tile would run on
  // every inference); the same tiling to 80 KB stays.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[100,100] x, float[200,100] z) => (float[100,100] y, float[200,100] w)
      <float[2,2] a = {1, 2, 3, 4}, int64[2] r = {50, 50}, int64[2] r2 = {100, 50}> {
      t = Tile (a, r)
      y = Add (x, t)
      t2 = Tile (a, r2)
      w = Add (z, t2)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_constants");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_TRUE(model->graph().find_local("t")->is_initializer());
  EXPECT_FALSE(model->graph().find_local("t2")->is_initializer());
}

TEST(FoldConstants, MaxGrowthOptionAllowsLargerResults) {
  auto model = parse_text(kConstantOfShape);
  ASSERT_TRUE(model);
  auto result = run_pass(*model, "fold_constants", {{"max_growth", "1000000"}});
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "ConstantOfShape"), 0);
  EXPECT_EQ(dims_of(*model, "f"), (std::vector<int64_t>{1000, 1000}));
}

constexpr char kConcat[] = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[500] x) => (float[500] y)
      <float[250] a = {%s}, float[250] b = {%s}> {
      c = Concat <axis = 0> (a, b)
      y = Add (x, c)
    }
  )";

std::unique_ptr<ir::Model> concat_model(std::vector<double>* expected) {
  std::vector<double> a, b;
  for (int i = 0; i < 250; ++i) {
    a.push_back(i);
    b.push_back(-0.5 * i);
  }
  *expected = a;
  expected->insert(expected->end(), b.begin(), b.end());
  std::string text = kConcat;
  text.replace(text.find("%s"), 2, absl::StrJoin(a, ", "));
  text.replace(text.find("%s"), 2, absl::StrJoin(b, ", "));
  return parse_text(text);
}

TEST(FoldConstants, MaxBytesOptionIsRespected) {
  // Each input is 1000 bytes, the result 2000 bytes (no growth).
  std::vector<double> expected;
  auto capped = concat_model(&expected);
  ASSERT_TRUE(capped);
  EXPECT_FALSE(run_pass(*capped, "fold_constants", {{"max_bytes", "1500"}}).changed);
  EXPECT_EQ(count_ops(*capped, "Concat"), 1);

  auto model = concat_model(&expected);
  ASSERT_TRUE(model);
  EXPECT_EQ(run_pass_checked(*model, "fold_constants", {{"max_bytes", "2000"}}).rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Concat"), 0);
  EXPECT_EQ(initializer_values(*model, "c"), expected);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldConstants, FoldsInsideSubgraphsUsingOuterConstants) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2] x) => (float[2] y) <float[2] c1 = {1.5, 2.0}, float[2] c2 = {-4.0, 0.25}> {
      y = If (cond) <
        then_branch = then_g () => (float[2] a) {
          m = Mul (c1, c2)
          a = Add (x, m)
        },
        else_branch = else_g () => (float[2] b) {
          b = Sub (c1, c2)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_constants");
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "Mul"), 0);
  EXPECT_EQ(count_ops(*model, "Sub"), 0);
  EXPECT_EQ(count_ops(*model, "Add"), 1);
  std::vector<ir::Graph*> graphs = model->all_graphs();
  const ir::Graph* then_g = nullptr;
  const ir::Graph* else_g = nullptr;
  for (ir::Graph* g : graphs) {
    if (g->name() == "then_g") then_g = g;
    if (g->name() == "else_g") else_g = g;
  }
  ASSERT_TRUE(then_g && else_g);
  expect_near(values_of(then_g->find_local("m")), {1.5 * -4.0, 2.0 * 0.25}, 1e-5);
  expect_near(values_of(else_g->find_local("b")), {1.5 - -4.0, 2.0 - 0.25}, 1e-5);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldConstants, OldIrVersionsAndFunctionBodiesAreLeftAlone) {
  // Before IR 4 every initializer must be a graph input: folding would change the interface.
  auto old = parse_text(R"(
    <ir_version: 3, opset_import: ["" : 8]>
    g (float[2] x) => (float[2] y) {
      c = Constant <value = float[2] {1.0, 2.0}> ()
      n = Neg (c)
      y = Add (x, n)
    }
  )");
  ASSERT_TRUE(old);
  EXPECT_FALSE(run_pass(*old, "fold_constants").changed);
  EXPECT_EQ(count_ops(*old, "Constant"), 1);
  EXPECT_EQ(count_ops(*old, "Neg"), 1);
  EXPECT_EQ(onnx_errors(*old), "");

  // Function bodies cannot hold initializers.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] y) {
      y = local.AddTwo (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    AddTwo (a) => (b) {
      one = Constant <value_float = 1.0> ()
      two = Add (one, one)
      b = Add (a, two)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass(*model, "fold_constants").changed);
  EXPECT_EQ(count_ops(*model, "Add"), 2);
}

// Bad values are configuration errors (tests/passes/options_test.cc has the parser's cases).
TEST(FoldConstants, BadOptionsAreConfigurationErrors) {
  const PassInfo* info = find_pass("fold_constants");
  ASSERT_NE(info, nullptr);
  for (const char* bad : {"-1", "abc", "2147483649", "1.5", ""})
    EXPECT_EQ(parse_options("fold_constants", info->options, {{"max_bytes", bad}}).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  EXPECT_FALSE(parse_options("fold_constants", info->options, {{"max_growth", "-1"}}).ok());
  auto edge =
      parse_options("fold_constants", info->options, {{"max_bytes", "2GiB"}, {"max_growth", "0"}});
  ASSERT_TRUE(edge.ok()) << edge.status();
  EXPECT_EQ(edge->integer("max_bytes"), int64_t{1} << 31);
  EXPECT_EQ(edge->integer("max_growth"), 0);
}

}  // namespace
}  // namespace graft::testing

namespace graft::testing {
namespace {

// A weight split into slices that are all folded moves into the slices: the model does not
// grow (LSTM gate reordering in exported RNNs: Slice, Slice, Slice, Concat). A weight that a
// runtime node also reads would be duplicated, so its slices stay.
TEST(FoldConstants, SlicesOfAWeightFoldOnlyWhenTheWeightGoes) {
  std::vector<std::string> values(128 * 256);  // slices of 64 KiB: not folded for size alone
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::to_string(i % 7);
  const std::string weight = absl::StrJoin(values, ",");
  auto model = parse_text(absl::StrCat(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1, 128] x) => (float[1, 256] y) <float[128, 256] w = {)",
                                       weight, R"(},
        int64[1] s0 = {0}, int64[1] e0 = {128}, int64[1] s1 = {128}, int64[1] e1 = {256},
        int64[1] ax = {1}> {
      a = Slice (w, s0, e0, ax)
      b = Slice (w, s1, e1, ax)
      r = Concat <axis = 1> (b, a)
      y = MatMul (x, r)
    }
  )"));
  ASSERT_TRUE(model);
  const uint64_t bytes_before = model->initializer_bytes();
  auto result = run_pass_checked(*model, "fold_constants");
  EXPECT_EQ(result.rewrites, 3);
  run_pass(*model, "prune");
  EXPECT_EQ(count_ops(*model, "Slice"), 0);
  EXPECT_EQ(count_ops(*model, "Concat"), 0);
  EXPECT_LE(model->initializer_bytes(), bytes_before);

  auto shared = parse_text(absl::StrCat(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1, 128] x, int64[2] i) => (float[1, 128] y, float[1, 128] z, float[2, 256] g)
      <float[128, 256] w = {)",
                                        weight, R"(},
        int64[1] s0 = {0}, int64[1] e0 = {128}, int64[1] s1 = {128}, int64[1] e1 = {256},
        int64[1] ax = {1}> {
      a = Slice (w, s0, e0, ax)
      b = Slice (w, s1, e1, ax)
      y = MatMul (x, a)
      z = MatMul (x, b)
      g = Gather (w, i)
    }
  )"));
  ASSERT_TRUE(shared);
  EXPECT_FALSE(run_pass(*shared, "fold_constants").changed);
  EXPECT_EQ(count_ops(*shared, "Slice"), 2);
}

// A weight read by a reader that will not fold stays, so its other readers are not folded
// either: a tied int4 embedding (quantize_weights_int4) is read by a DequantizeLinear (never
// folded), and through a Transpose by the LM head's DequantizeLinear; folding that Transpose
// would store the table twice.
TEST(FoldConstants, ATransposeOfAWeightAReaderKeepsStaysATranspose) {
  // eq: int4 [512, 256], 64 KiB packed (not folded for size alone); es: scales [512, 8].
  std::vector<std::string> q(512 * 256), scales(512 * 8, "0.125");
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::to_string(static_cast<int>(i % 15) - 7);
  auto model = parse_text(absl::StrCat(R"(
    <ir_version: 10, opset_import: ["" : 21]>
    g (int64[2] ids, float[2,256] h) => (float[2,256] emb, float[2,512] logits)
      <int4[512,256] eq = {)",
                                       absl::StrJoin(q, ","), R"(}, float[512,8] es = {)",
                                       absl::StrJoin(scales, ","), R"(}> {
      ed = DequantizeLinear <axis = 1, block_size = 32> (eq, es)
      emb = Gather (ed, ids)
      eqt = Transpose <perm = [1, 0]> (eq)
      est = Transpose <perm = [1, 0]> (es)
      etd = DequantizeLinear <axis = 0, block_size = 32> (eqt, est)
      logits = MatMul (h, etd)
    }
  )"));
  ASSERT_TRUE(model);
  const uint64_t bytes_before = model->initializer_bytes();
  EXPECT_TRUE(run_pass_checked(*model, "fold_constants").changed);
  EXPECT_EQ(count_ops(*model, "Transpose"), 1);  // the scales' Transpose (16 KiB) folds
  EXPECT_EQ(producer_op(model->graph(), "eqt"), "Transpose");
  EXPECT_LE(model->initializer_bytes(), bytes_before + 16384);
}

// --- Constant cones: a node whose result alone grows too much, judged with the nodes it makes
// constant (what they leave in the model, up to 64 KiB per node folded).

std::string joined(const std::vector<double>& values) { return absl::StrJoin(values, ", "); }

// RAFT's first refinement step: pixel centroids [points, 1, 1, 2] plus a 7x7 neighbourhood of
// offsets [1, 7, 7, 2] (a [points, 7, 7, 2] grid), split into x and y, scaled to [-1, 1] and
// concatenated again for GridSample; the centroids are constant in the first step.
std::string sampling_grid_model(int points, std::vector<double>* expected) {
  std::vector<double> centroids, offsets;
  for (int i = 0; i < points; ++i) {
    centroids.push_back(i % 16);
    centroids.push_back(i / 16);
  }
  for (int i = -3; i <= 3; ++i)
    for (int j = -3; j <= 3; ++j) {
      offsets.push_back(j);
      offsets.push_back(i);
    }
  expected->clear();
  for (int p = 0; p < points; ++p)
    for (int k = 0; k < 49; ++k)
      for (int c = 0; c < 2; ++c)
        expected->push_back(2.0 * (centroids[2 * p + c] + offsets[2 * k + c]) / 15.0 - 1.0);
  const std::string n = std::to_string(points);
  return absl::StrCat(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[)",
                      n, R"(,7,7,2] x) => (float[)", n, R"(,7,7,2] y)
      <float[)",
                      n, R"(,1,1,2] centroids = {)", joined(centroids), R"(},
       float[1,7,7,2] offsets = {)",
                      joined(offsets), R"(},
       int64[2] halves = {1, 1}, float two = {2.0}, float w = {15.0}, float one = {1.0}> {
      s = Add (centroids, offsets)
      sx, sy = Split <axis = -1> (s, halves)
      mx = Mul (sx, two)
      dx = Div (mx, w)
      nx = Sub (dx, one)
      my = Mul (sy, two)
      dy = Div (my, w)
      ny = Sub (dy, one)
      grid = Concat <axis = -1> (nx, ny)
      y = Add (x, grid)
    }
  )");
}

TEST(FoldConstants, ABroadcastFoldsWithTheArithmeticItFeeds) {
  // 256 points: the Add's 100,352 bytes grow 41 times over its inputs, and so does the grid it
  // leaves, but that is under 64 KiB for each of the nine nodes that no longer run.
  std::vector<double> expected;
  auto model = parse_text(sampling_grid_model(256, &expected));
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_constants");
  EXPECT_EQ(result.rewrites, 9);
  EXPECT_EQ(model->graph().num_nodes(), 1u);
  EXPECT_EQ(dims_of(*model, "grid"), (std::vector<int64_t>{256, 7, 7, 2}));
  expect_near(initializer_values(*model, "grid"), expected, 1e-5);
  for (const char* gone : {"s", "sx", "sy", "mx", "dx", "nx", "my", "dy", "ny", "centroids"})
    EXPECT_EQ(model->graph().find_local(gone), nullptr) << gone;
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldConstants, AConeLeavingTooMuchStays) {
  // 2048 points: an 802,816-byte grid is more than 64 KiB for each of the nine nodes.
  std::vector<double> expected;
  auto model = parse_text(sampling_grid_model(2048, &expected));
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass(*model, "fold_constants").changed);
  EXPECT_EQ(model->graph().num_nodes(), 10u);
  // A larger growth cap lets it fold (the cone's result against the constants it frees).
  EXPECT_EQ(run_pass(*model, "fold_constants", {{"max_growth", "1000"}}).rewrites, 9);
}

TEST(FoldConstants, AConeIsJudgedByWhatItLeaves) {
  // The Tile's 80 KB would stay alone (ResultsUnder64KiBFoldWhateverTheirGrowth); the sum over
  // its rows that is all the model reads is 400 bytes.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,100] x) => (float[1,100] y)
      <float[2,2] a = {1, 2, 3, 4}, int64[2] r = {100, 50}, int64[1] rows = {0}> {
      t = Tile (a, r)
      s = ReduceSum <keepdims = 1> (t, rows)
      y = Add (x, s)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_constants");
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "Tile"), 0);
  EXPECT_EQ(dims_of(*model, "s"), (std::vector<int64_t>{1, 100}));
  std::vector<double> sums;
  for (int j = 0; j < 100; ++j) sums.push_back(j % 2 == 0 ? 400.0 : 600.0);
  EXPECT_EQ(initializer_values(*model, "s"), sums);
  EXPECT_EQ(model->graph().find_local("t"), nullptr);
}

TEST(FoldConstants, AConvOfAConstantWithSharedWeightsFoldsWithWhatFollows) {
  // RAFT's first flow-encoder call: the flow is constant (zero), the convolutions' weights are
  // shared with the later calls, so nothing is freed and the first Conv's 64 KiB stays alone;
  // the 32 KiB the two Conv+Relu pairs leave is under 64 KiB per node.
  std::vector<double> w1(64 * 2 * 7 * 7), w2(32 * 64 * 3 * 3), b1(64), b2(32), f(2 * 16 * 16);
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = static_cast<double>(i % 13) / 13.0 - 0.4;
  for (size_t i = 0; i < w2.size(); ++i) w2[i] = static_cast<double>(i % 11) / 22.0 - 0.2;
  for (size_t i = 0; i < b1.size(); ++i) b1[i] = static_cast<double>(i % 5) / 10.0 - 0.2;
  for (size_t i = 0; i < b2.size(); ++i) b2[i] = static_cast<double>(i % 3) / 10.0;
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<double>(i % 7) - 3.0;
  auto model = parse_text(absl::StrCat(
      R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,2,16,16] flow, float[1,32,16,16] x) => (float[1,32,16,16] y, float[1,32,16,16] z)
      <float[1,2,16,16] f0 = {)",
      joined(f), R"(}, float[64,2,7,7] w1 = {)", joined(w1), R"(}, float[64] b1 = {)", joined(b1),
      R"(}, float[32,64,3,3] w2 = {)", joined(w2), R"(}, float[32] b2 = {)", joined(b2), R"(}> {
      c1 = Conv <pads = [3, 3, 3, 3]> (f0, w1, b1)
      r1 = Relu (c1)
      c2 = Conv <pads = [1, 1, 1, 1]> (r1, w2, b2)
      r2 = Relu (c2)
      y = Add (x, r2)
      d1 = Conv <pads = [3, 3, 3, 3]> (flow, w1, b1)
      e1 = Relu (d1)
      d2 = Conv <pads = [1, 1, 1, 1]> (e1, w2, b2)
      z = Relu (d2)
    }
  )"));
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_constants");
  EXPECT_EQ(result.rewrites, 4);
  EXPECT_EQ(count_ops(*model, "Conv"), 2);
  EXPECT_EQ(count_ops(*model, "Relu"), 2);
  EXPECT_EQ(dims_of(*model, "r2"), (std::vector<int64_t>{1, 32, 16, 16}));
  EXPECT_EQ(model->graph().find_local("c1"), nullptr);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldConstants, AConeFoldsWhollyOrNotAtAll) {
  // The Reshape is invalid (25,088 elements into 4): the cone cannot be computed to its end, and
  // folding only the Add would leave its 100 KB in the model for nothing.
  std::vector<double> expected;
  std::string text = sampling_grid_model(256, &expected);
  text.replace(text.find("y = Add (x, grid)"), std::string("y = Add (x, grid)").size(),
               "bad = Reshape (grid, four)\n      y = Add (x4, bad)");
  text.replace(text.find("int64[2] halves"), std::string("int64[2] halves").size(),
               "int64[1] four = {4}, int64[2] halves");
  text.replace(text.find(") => (float[256,7,7,2] y)"),
               std::string(") => (float[256,7,7,2] y)").size(), ", float[4] x4) => (float[4] y)");
  auto model = parse_text(text);
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass(*model, "fold_constants").changed);
  EXPECT_EQ(model->graph().num_nodes(), 11u);
}

TEST(FoldConstants, ConesFoldInsideSubgraphs) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[1,100] x) => (float[1,100] y)
      <float[2,2] a = {1, 2, 3, 4}, int64[2] r = {100, 50}, int64[1] rows = {0}> {
      y = If (cond) <
        then_branch = then_g () => (float[1,100] p) {
          t = Tile (a, r)
          s = ReduceSum <keepdims = 1> (t, rows)
          p = Add (x, s)
        },
        else_branch = else_g () => (float[1,100] q) {
          q = Neg (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_constants");
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "Tile"), 0);
  EXPECT_EQ(count_ops(*model, "ReduceSum"), 0);
  EXPECT_EQ(onnx_errors(*model), "");
}
}  // namespace
}  // namespace graft::testing
