// The rotary matcher (core/passes/patterns/rotary.h) that fuse_blocks and fuse_onnxruntime
// share: what it finds in the exported form and its variants, why it refuses the look-alikes,
// and the caches it makes (first halves, made once per table).
#include <string>
#include <vector>

#include "core/passes/patterns/rotary.h"
#include "core/passes/rules.h"
#include "tests/passes/rotary_model.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

// The Add computing `y` in the main graph of `model`.
ir::Node& root_of(const ir::Model& model) {
  ir::Node* add = producer(model, "y");
  EXPECT_TRUE(add && add->is("Add"));
  return *add;
}

// The reasons match_rotary gives at `add`, in order.
std::vector<std::string> reasons(ir::Model& model) {
  std::vector<std::string> said;
  NoMatchListener listener(
      model, [&](const ir::Node&, std::string_view reason) { said.emplace_back(reason); });
  EXPECT_FALSE(match_rotary(root_of(model)));
  return said;
}

std::vector<std::string> names(const std::vector<ir::Node*>& nodes) {
  std::vector<std::string> out;
  for (const ir::Node* n : nodes) out.push_back(n->output(0)->name());
  return out;
}

TEST(RotaryPattern, FindsTheExportedForm) {
  auto model = parse_text(rotary_block());
  ASSERT_TRUE(model);
  std::optional<RotaryMatch> m = match_rotary(root_of(*model));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->x->name(), "x");
  EXPECT_EQ(m->position_ids->name(), "ids");
  EXPECT_EQ(m->cos_table->name(), "cos_table");
  EXPECT_EQ(m->sin_table->name(), "sin_table");
  EXPECT_EQ(m->head, 4);
  EXPECT_EQ(m->elem_type, onnx::TensorProto::FLOAT);
  EXPECT_EQ(names(m->block), (std::vector<std::string>{"y", "xc", "rs", "rot", "neg", "x1", "x2"}));
  EXPECT_EQ(names(m->shared), (std::vector<std::string>{"cos", "gc", "sin", "gs"}));
}

TEST(RotaryPattern, EitherOperandOrderAndSplitHalves) {
  std::string text = rotary_block();
  text = with(text, "xc = Mul (x, cos)", "xc = Mul (cos, x)");
  text = with(text, "rs = Mul (rot, sin)", "rs = Mul (sin, rot)");
  text = with(text, "y = Add (xc, rs)", "y = Add (rs, xc)");
  auto model = parse_text(text);
  ASSERT_TRUE(model);
  std::optional<RotaryMatch> m = match_rotary(root_of(*model));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->cos_table->name(), "cos_table");  // the table that multiplies x
  EXPECT_EQ(m->sin_table->name(), "sin_table");  // the one that multiplies rotate_half(x)
  // The halves as one Split (explicit sizes), the tables shared by one Unsqueeze.
  text = rotary_block();
  text = with(text, "      x2 = Slice (x, two, big, last)\n", "");
  text = with(text, "      x1 = Slice (x, zero, two, last)\n",
              "      x1, x2 = Split <axis = -1> (x, sizes)\n");
  text = with(text, "int64[1] zero = {0},", "int64[2] sizes = {2, 2}, int64[1] zero = {0},");
  model = parse_text(text);
  ASSERT_TRUE(model);
  m = match_rotary(root_of(*model));
  ASSERT_TRUE(m);
  EXPECT_EQ(names(m->block), (std::vector<std::string>{"y", "xc", "rs", "rot", "neg", "x1"}));
}

TEST(RotaryPattern, SaysWhyALookAlikeIsNoRotary) {
  const std::string base = rotary_block();
  auto model =
      parse_text(with(base, "x1 = Slice (x, zero, two, last)", "x1 = Slice (x, zero, one, last)"));
  ASSERT_TRUE(model);
  EXPECT_EQ(reasons(*model),
            std::vector<std::string>{"the Slices do not take the two halves of x's last axis"});
  model = parse_text(with(base, "cos = Unsqueeze (gc, one)", "cos = Identity (gc)"));
  ASSERT_TRUE(model);
  EXPECT_EQ(reasons(*model),
            std::vector<std::string>{"cos is not an Unsqueeze over axis 1 (the heads' axis)"});
  RotaryBlock int32_ids;
  int32_ids.ids_type = "int32";
  model = parse_text(rotary_block(int32_ids));
  ASSERT_TRUE(model);
  EXPECT_EQ(reasons(*model),
            std::vector<std::string>{"the position ids are not known to be int64"});
  // Not a rotary at all (no product with a Concat): refused without a reason.
  model = parse_text(with(base, "rs = Mul (rot, sin)", "rs = Mul (x, sin)"));
  ASSERT_TRUE(model);
  EXPECT_TRUE(reasons(*model).empty());
}

TEST(RotaryPattern, TablesSlicedToTheirLeadingRowsAtRunTime) {
  auto model = parse_text(rotary_sliced(rotary_block()));
  ASSERT_TRUE(model);
  std::optional<RotaryMatch> m = match_rotary(root_of(*model));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->cos_table->name(), "cos_table");  // the whole constant, through the Slice
  EXPECT_EQ(m->sin_table->name(), "sin_table");
  EXPECT_EQ(names(m->shared),
            (std::vector<std::string>{"cos", "gc", "sin", "gs", "cut_cos", "cut_sin"}));
  // Axes and steps may be left out (axis 0, step 1) or given as -2 and 1.
  for (const char* form : {"zero, total", "zero, total, last2, one"}) {
    std::string text = rotary_sliced(rotary_block(), form);
    text = with(text, "int64[1] zero = {0},", "int64[1] last2 = {-2}, int64[1] zero = {0},");
    model = parse_text(text);
    ASSERT_TRUE(model);
    EXPECT_TRUE(match_rotary(root_of(*model))) << form;
  }
  // Not the leading rows: from row 1, along the other axis, every second row.
  for (const char* form : {"one, total, zero", "zero, total, one", "zero, total, zero, two"}) {
    model = parse_text(rotary_sliced(rotary_block(), form));
    ASSERT_TRUE(model);
    EXPECT_EQ(reasons(*model), std::vector<std::string>{"cos's table is not a 2-D constant"})
        << form;
  }
}

TEST(RotaryPattern, CachesAreTheFirstHalvesMadeOncePerTable) {
  auto model = parse_text(rotary_block());
  ASSERT_TRUE(model);
  ir::Node& add = root_of(*model);
  std::optional<RotaryMatch> m = match_rotary(add);
  ASSERT_TRUE(m);
  Rewriter rw(*model);
  std::optional<RotaryCaches> first = rotary_caches(rw, add, *m);
  ASSERT_TRUE(first && first->cos && first->sin);
  EXPECT_EQ(dims_of(first->cos), (std::vector<int64_t>{5, 2}));
  const std::vector<double> table = values_of(m->cos_table);
  std::vector<double> half;
  for (int r = 0; r < 5; ++r) half.insert(half.end(), {table[4 * r], table[4 * r + 1]});
  EXPECT_EQ(values_of(first->cos), half);
  // A second rotary over the same tables gets the same constants.
  std::optional<RotaryCaches> again = rotary_caches(rw, add, *m);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->cos, first->cos);
  EXPECT_EQ(again->sin, first->sin);
}

TEST(RotaryPattern, TablesWithUnequalHalvesMakeNoCaches) {
  RotaryBlock unequal;
  unequal.equal_halves = false;
  auto model = parse_text(rotary_block(unequal));
  ASSERT_TRUE(model);
  ir::Node& add = root_of(*model);
  std::optional<RotaryMatch> m = match_rotary(add);
  ASSERT_TRUE(m);  // the halves are compared only when the caches are made
  Rewriter rw(*model);
  EXPECT_FALSE(rotary_caches(rw, add, *m));
}

}  // namespace
}  // namespace graft::testing
