// Shared readers of operator parameters (core/ir/op_params.h).
#include "core/ir/op_params.h"

#include <limits>
#include <utility>

#include "tests/testing.h"

namespace graft::testing {
namespace {

using Indices = std::vector<int64_t>;

TEST(OpParams, SliceIndicesFollowOnnxClamping) {
  EXPECT_EQ(ir::slice_indices(4, 0, 4, 1), (Indices{0, 1, 2, 3}));
  EXPECT_EQ(ir::slice_indices(4, 1, 100, 2), (Indices{1, 3}));
  EXPECT_EQ(ir::slice_indices(4, -3, -1, 1), (Indices{1, 2}));
  EXPECT_EQ(ir::slice_indices(4, -100, 2, 1), (Indices{0, 1}));
  // Negative steps: start clamped to [0, len - 1], end to [-1, len - 1].
  EXPECT_EQ(ir::slice_indices(4, 100, -100, -1), (Indices{3, 2, 1, 0}));
  EXPECT_EQ(ir::slice_indices(4, -1, 0, -2), (Indices{3, 1}));
  EXPECT_EQ(ir::slice_indices(4, 2, 2, 1), Indices{});
  // An empty axis and a zero step (an error at run time) select nothing.
  EXPECT_EQ(ir::slice_indices(0, 0, 1, 1), Indices{});
  EXPECT_EQ(ir::slice_indices(0, -1, -100, -1), Indices{});
  EXPECT_EQ(ir::slice_indices(4, 0, 4, 0), Indices{});
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(ir::slice_indices(3, 1, big, 1), (Indices{1, 2}));
  EXPECT_EQ(ir::slice_indices(3, -big, big, big), (Indices{0}));
  EXPECT_EQ(ir::slice_indices(3, 2, big, big), (Indices{2}));  // 2 + step would overflow
  const int64_t least = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(ir::slice_indices(3, 1, least, least), (Indices{1}));
}

// Squeeze's axes: absent means every dim of size 1; given, those; given empty (an attribute with
// no values, or an empty axes input) is read differently by runtimes (ONNX Runtime: every dim of
// size 1; ONNX's reference implementation: none): unknown, so that no pass builds on it (the
// verify fuzzer found shape_op_chain turning Unsqueeze + such a Squeeze into a Reshape that
// dropped a dim the evaluator kept).
TEST(OpParams, SqueezeAxesGivenEmptyAreUnknown) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,1,3] x) => (float[2,3] a, float[2,3] b, float[2,1,3] c) <int64[1] one = {1},
                                                                      int64[0] none = {}> {
      a = Squeeze (x)
      b = Squeeze (x, one)
      c = Squeeze (x, none)
    }
  )");
  ASSERT_NE(model, nullptr);
  auto all = ir::squeeze_axes(*producer(model->graph(), "a"));
  ASSERT_TRUE(all);
  EXPECT_TRUE(all->all);
  auto one = ir::squeeze_axes(*producer(model->graph(), "b"));
  ASSERT_TRUE(one);
  EXPECT_EQ(one->axes, (Indices{1}));
  EXPECT_FALSE(ir::squeeze_axes(*producer(model->graph(), "c")));
}

TEST(OpParams, ShapeRangeReadsStartAndEnd) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 15]>
    g (float[2,3,4,5] x) => (int64[3] a, int64[1] b, int64[0] c, int64[4] d) {
      a = Shape <start = 1> (x)
      b = Shape <start = -2, end = -1> (x)
      c = Shape <start = 3, end = 1> (x)
      d = Shape (x)
    }
  )");
  ASSERT_TRUE(model);
  auto range = [&](const char* out) {
    return ir::shape_range(*model->graph().find_local(out)->producer(), 4);
  };
  EXPECT_EQ(range("a"), std::make_pair(int64_t{1}, int64_t{4}));
  EXPECT_EQ(range("b"), std::make_pair(int64_t{2}, int64_t{3}));
  EXPECT_EQ(range("c"), std::make_pair(int64_t{3}, int64_t{3}));
  EXPECT_EQ(range("d"), std::make_pair(int64_t{0}, int64_t{4}));

  // start/end before opset 15 are not Shape's attributes.
  auto old = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (int64[2] a) {
      a = Shape <start = 1> (x)
    }
  )");
  ASSERT_TRUE(old);
  EXPECT_FALSE(ir::shape_range(*old->graph().find_local("a")->producer(), 2));
}

// A Transpose's perm is checked to be a permutation; without one the axes are reversed, which
// needs a rank from the caller.
TEST(OpParams, TransposePermIsCheckedOrReversed) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] x) => (float[4,2,3] a, float[4,3,2] b, float c, float d, float e) {
      a = Transpose <perm = [2, 0, 1]> (x)
      b = Transpose (x)
      c = Transpose <perm = [0, 0, 1]> (x)
      d = Transpose <perm = [0, 1, 3]> (x)
      e = Transpose <perm = [2, 1, 0], other = 1> (x)
    }
  )");
  ASSERT_TRUE(model);
  auto perm = [&](const char* name, std::optional<int64_t> rank) {
    return ir::transpose_perm(*producer(*model, name), rank);
  };
  EXPECT_EQ(perm("a", std::nullopt), (Indices{2, 0, 1}));
  EXPECT_EQ(perm("b", std::nullopt), std::nullopt);
  EXPECT_EQ(perm("b", 3), (Indices{2, 1, 0}));
  EXPECT_EQ(perm("b", -1), std::nullopt);
  EXPECT_EQ(perm("c", 3), std::nullopt);
  EXPECT_EQ(perm("d", 3), std::nullopt);
  EXPECT_EQ(perm("e", 3), std::nullopt);
  EXPECT_TRUE(ir::is_permutation({}));
  EXPECT_TRUE(ir::is_permutation({1, 0}));
  EXPECT_FALSE(ir::is_permutation({1, 1}));
  EXPECT_FALSE(ir::is_permutation({-1, 0}));
}

}  // namespace
}  // namespace graft::testing
