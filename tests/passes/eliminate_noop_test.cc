#include "tests/testing.h"

namespace graft::testing {
namespace {

// Wraps `nodes` (which compute `t` from `x`) in a model whose output y = Relu(t), so the node under
// test never computes a graph output itself.
std::string model_text(int opset, const std::string& x_type, const std::string& t_type,
                       const std::string& extra, const std::string& nodes) {
  return "<ir_version: 8, opset_import: [\"\" : " + std::to_string(opset) + "]>\n" + "g (" +
         x_type + " x) => (" + t_type + " y) <" + extra + "> {\n" + nodes + "\n  y = Relu (t)\n}\n";
}

struct Case {
  std::string name;
  int opset;
  std::string x_type;
  std::string t_type;
  std::string extra;  // value_info and initializers; must not be empty for the parser
  std::string nodes;
};

// run_pass_checked, except that a model the evaluator cannot run (training-mode Dropout is
// random, and it runs no custom-domain op) may be "not verifiable" and is then only checked
// structurally.
PassResult run_noop(ir::Model& model) {
  bool unsupported = count_ops(model, "Dropout") > 0 || model.graph().opset("") < 6;
  for (ir::Graph* g : model.all_graphs())
    for (ir::Node* n : g->nodes()) unsupported |= !n->is_onnx_domain();
  if (!unsupported) return run_pass_checked(model, "eliminate_noop");
  auto before = model.clone();
  PassResult result = run_pass(model, "eliminate_noop");
  std::string same = same_outputs(*before, model);
  if (same.rfind("not verifiable: ", 0) != 0) {
    EXPECT_EQ(same, "");
  }
  return result;
}

// Runs eliminate_noop on a model with one candidate node and reports whether it was removed.
// Removed nodes must leave Relu reading x directly and a model ONNX accepts.
bool removes(const Case& c) {
  auto model = parse_text(model_text(c.opset, c.x_type, c.t_type, c.extra, c.nodes));
  EXPECT_TRUE(model) << c.name;
  if (!model) return false;
  size_t before = model->graph().num_nodes();
  auto result = run_noop(*model);
  bool removed = model->graph().num_nodes() < before;
  EXPECT_EQ(result.changed, removed) << c.name;
  EXPECT_EQ(result.rewrites, removed ? 1 : 0) << c.name;
  if (removed) {
    EXPECT_EQ(input_names(only_node(model->graph(), "Relu")), (std::vector<std::string>{"x"}))
        << c.name;
    EXPECT_EQ(model->graph().find_local("t"), nullptr) << c.name;
  }
  EXPECT_EQ(onnx_errors(*model), "") << c.name;
  return removed;
}

constexpr const char* kInt64Max = "9223372036854775807";

TEST(EliminateNoop, RemovesProvableNoops) {
  const std::string max = kInt64Max;
  std::vector<Case> cases = {
      {"dropout13", 13, "float[2,3]", "float[2,3]", "float[2,3] t", "t = Dropout (x)"},
      // A Constant node is as constant as an initializer (function bodies only have those).
      {"slice_constant_node_starts", 13, "float[2,3]", "float[2,3]",
       "int64[1] st, int64[1] en = {3}",
       "st = Constant <value = int64[1] {0}> ()\n  t = Slice (x, st, en)"},
      {"dropout13_ratio_and_false_mode", 13, "float[2,3]", "float[2,3]",
       "float r = {0.5}, bool m = {0}", "t = Dropout (x, r, m)"},
      {"dropout13_unused_mask", 13, "float[2,3]", "float[2,3]", "float[2,3] t",
       "t, mask = Dropout (x)"},
      {"dropout10", 10, "float[2,3]", "float[2,3]", "float[2,3] t",
       "t = Dropout <ratio = 0.3> (x)"},
      {"dropout6_is_test", 6, "float[2,3]", "float[2,3]", "float[2,3] t",
       "t = Dropout <is_test = 1> (x)"},
      {"transpose_identity_perm", 13, "float[2,3,4]", "float[2,3,4]", "float[2,3,4] t",
       "t = Transpose <perm = [0, 1, 2]> (x)"},
      {"transpose_rank1_no_perm", 13, "float[5]", "float[5]", "float[5] t", "t = Transpose (x)"},
      {"transpose_symbolic_rank1_no_perm", 13, "float[N]", "float[N]", "float[N] t",
       "t = Transpose (x)"},
      {"reshape_same_shape", 13, "float[2,3]", "float[2,3]", "int64[2] s = {2, 3}",
       "t = Reshape (x, s)"},
      {"reshape_zero_and_minus_one", 14, "float[2,3]", "float[2,3]", "int64[2] s = {0, -1}",
       "t = Reshape (x, s)"},
      {"expand_broadcast_to_same", 13, "float[2,3]", "float[2,3]", "int64[2] s = {1, 3}",
       "t = Expand (x, s)"},
      {"squeeze_nothing_to_squeeze", 13, "float[2,3]", "float[2,3]", "float[2,3] t",
       "t = Squeeze (x)"},
      {"squeeze11_no_axes", 11, "float[2,3]", "float[2,3]", "float[2,3] t", "t = Squeeze (x)"},
      {"flatten_2d_axis1", 13, "float[2,3]", "float[2,3]", "float[2,3] t",
       "t = Flatten <axis = 1> (x)"},
      {"flatten_2d_axis_minus1", 13, "float[2,3]", "float[2,3]", "float[2,3] t",
       "t = Flatten <axis = -1> (x)"},
      {"cast_float_to_float", 13, "float[2,3]", "float[2,3]", "float[2,3] t",
       "t = Cast <to = 1> (x)"},
      {"cast_int_to_int", 14, "int64[2,3]", "int64[2,3]", "int64[2,3] t", "t = Cast <to = 7> (x)"},
      {"slice_to_int64_max_unknown_dims", 13, "float[N,M]", "float[N,M]",
       "int64[2] st = {0, 0}, int64[2] en = {" + max + ", " + max + "}", "t = Slice (x, st, en)"},
      {"slice_exact_ends_axes_steps", 13, "float[2,3]", "float[2,3]",
       "int64[1] st = {0}, int64[1] en = {3}, int64[1] ax = {-1}, int64[1] sp = {1}",
       "t = Slice (x, st, en, ax, sp)"},
      {"slice_ends_past_dim", 13, "float[2,3]", "float[2,3]",
       "int64[1] st = {0}, int64[1] en = {100}", "t = Slice (x, st, en)"},
      {"slice9_attributes", 9, "float[2,3]", "float[2,3]", "float[2,3] t",
       "t = Slice <starts = [0, 0], ends = [2, " + max + "]> (x)"},
      {"pad_zero_pads", 13, "float[2,3]", "float[2,3]", "int64[4] p = {0, 0, 0, 0}",
       "t = Pad (x, p)"},
      {"pad_zero_pads_reflect", 13, "float[2,3]", "float[2,3]", "int64[4] p = {0, 0, 0, 0}",
       "t = Pad <mode = \"reflect\"> (x, p)"},
      {"pad2_attribute", 2, "float[2,3]", "float[2,3]", "float[2,3] t",
       "t = Pad <pads = [0, 0, 0, 0]> (x)"},
      {"concat_single_input", 13, "float[2,3]", "float[2,3]", "float[2,3] t",
       "t = Concat <axis = 0> (x)"},
      {"split_single_output", 13, "float[2,3]", "float[2,3]", "float[2,3] t",
       "t = Split <axis = 1> (x)"},
      {"sum_one_operand", 13, "float[2,3]", "float[2,3]", "float[2,3] t", "t = Sum (x)"},
      {"mean_one_operand", 13, "float[2,3]", "float[2,3]", "float[2,3] t", "t = Mean (x)"},
      {"max_one_operand", 8, "double[2,3]", "double[2,3]", "double[2,3] t", "t = Max (x)"},
      {"min_one_operand", 6, "float[2,3]", "float[2,3]", "float[2,3] t", "t = Min (x)"},
  };
  for (const Case& c : cases) EXPECT_TRUE(removes(c)) << c.name;
}

TEST(EliminateNoop, KeepsLookAlikes) {
  std::vector<Case> cases = {
      // Only t's own declaration says the Reshape keeps x's shape: an exporter's claim, not a
      // fact (in the pipeline, fold_shapes first makes s a constant, and then it is one).
      {"reshape_dynamic_shape_declared_same", 13, "float[2,3]", "float[2,3]",
       "float[2,3] t, int64[2] s", "s = Shape (x)\n  t = Reshape (x, s)"},
      {"dropout13_training_mode_input", 13, "float[2,3]", "float[2,3]", "float r = {0.5}, bool m",
       "m = Constant <value = bool {1}> ()\n  t = Dropout (x, r, m)"},
      {"dropout13_training_true", 13, "float[2,3]", "float[2,3]", "float r = {0.5}, bool m = {1}",
       "t = Dropout (x, r, m)"},
      {"dropout6_default_is_training", 6, "float[2,3]", "float[2,3]", "float[2,3] t",
       "t = Dropout (x)"},
      {"dropout6_is_test_0", 6, "float[2,3]", "float[2,3]", "float[2,3] t",
       "t = Dropout <is_test = 0> (x)"},
      {"transpose_swaps", 13, "float[3,3]", "float[3,3]", "float[3,3] t",
       "t = Transpose <perm = [1, 0]> (x)"},
      {"transpose_reverse_rank2", 13, "float[3,3]", "float[3,3]", "float[3,3] t",
       "t = Transpose (x)"},
      {"transpose_unknown_rank", 13, "float[3,3]", "float[3,3]", "float[3,3] t",
       "u = Identity (x)\n  t = Transpose (u)"},
      {"reshape_minus_one_flattens", 13, "float[2,3]", "float[6]", "int64[1] s = {-1}",
       "t = Reshape (x, s)"},
      {"reshape_swaps_dims", 13, "float[2,3]", "float[3,2]", "int64[2] s = {3, 2}",
       "t = Reshape (x, s)"},
      {"reshape_dynamic_shape_unknown_result", 13, "float[2,3]", "float[6]", "int64[2] s",
       "s = Shape (x)\n  p = ReduceProd <keepdims = 1> (s)\n  t = Reshape (x, p)"},
      {"expand_grows", 13, "float[2,3]", "float[2,2,3]", "int64[3] s = {2, 1, 3}",
       "t = Expand (x, s)"},
      {"squeeze_removes_dim", 13, "float[1,3]", "float[3]", "int64[1] a = {0}",
       "t = Squeeze (x, a)"},
      {"squeeze_all_ones", 13, "float[1,3]", "float[3]", "float[3] t", "t = Squeeze (x)"},
      {"unsqueeze_adds_dim", 13, "float[2,3]", "float[1,2,3]", "int64[1] a = {0}",
       "t = Unsqueeze (x, a)"},
      {"flatten_3d", 13, "float[2,3,4]", "float[2,12]", "float[2,12] t",
       "t = Flatten <axis = 1> (x)"},
      {"flatten_axis0", 13, "float[2,3]", "float[1,6]", "float[1,6] t",
       "t = Flatten <axis = 0> (x)"},
      {"cast_int_to_float", 13, "int64[2,3]", "float[2,3]", "float[2,3] t",
       "t = Cast <to = 1> (x)"},
      {"cast_float_to_double", 13, "float[2,3]", "double[2,3]", "double[2,3] t",
       "t = Cast <to = 11> (x)"},
      {"slice_nonzero_start", 13, "float[2,3]", "float[2,2]",
       "int64[1] st = {1}, int64[1] en = {3}, int64[1] ax = {1}", "t = Slice (x, st, en, ax)"},
      {"slice_short_end", 13, "float[2,3]", "float[2,2]",
       "int64[1] st = {0}, int64[1] en = {2}, int64[1] ax = {1}", "t = Slice (x, st, en, ax)"},
      {"slice_step_two", 13, "float[2,3]", "float[2,2]",
       "int64[1] st = {0}, int64[1] en = {3}, int64[1] ax = {1}, int64[1] sp = {2}",
       "t = Slice (x, st, en, ax, sp)"},
      {"slice_reverse", 13, "float[2,3]", "float[2,3]",
       "int64[1] st = {-1}, int64[1] en = {-9999}, int64[1] ax = {1}, int64[1] sp = {-1}",
       "t = Slice (x, st, en, ax, sp)"},
      {"slice_end_vs_unknown_dim", 13, "float[2,M]", "float[2,K]",
       "int64[1] st = {0}, int64[1] en = {3}, int64[1] ax = {1}", "t = Slice (x, st, en, ax)"},
      {"slice9_short_end", 9, "float[2,3]", "float[1,3]", "float[1,3] t",
       "t = Slice <starts = [0], ends = [1]> (x)"},
      {"pad_nonzero", 13, "float[2,3]", "float[2,5]", "int64[4] p = {0, 1, 0, 1}",
       "t = Pad (x, p)"},
      {"pad2_nonzero_attribute", 2, "float[2,3]", "float[4,3]", "float[4,3] t",
       "t = Pad <pads = [1, 0, 1, 0]> (x)"},
      {"concat_two_inputs", 13, "float[2,3]", "float[4,3]", "float[4,3] t",
       "t = Concat <axis = 0> (x, x)"},
      {"split_two_outputs", 13, "float[2,4]", "float[2,2]", "float[2,2] t",
       "t, u = Split <axis = 1> (x)"},
      {"sum_two_operands", 13, "float[2,3]", "float[2,3]", "float[2,3] t", "t = Sum (x, x)"},
      {"max_broadcasting_operands", 13, "float[2,3]", "float[2,3]", "float[3] c = {1, 2, 3}",
       "t = Max (x, c)"},
      {"mean5_consumed_inputs", 5, "float[2,3]", "float[2,3]", "float[2,3] t",
       "t = Mean <consumed_inputs = [0]> (x)"},
  };
  for (const Case& c : cases) EXPECT_FALSE(removes(c)) << c.name;
}

TEST(EliminateNoop, DropoutWithUsedMaskStays) {
  expect_no_rewrite("eliminate_noop", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, bool[2] m) {
      y, m = Dropout (x)
    }
  )");
  expect_no_rewrite("eliminate_noop", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      t, m = Dropout (x)
      mf = Cast <to = 1> (m)
      y = Mul (t, mf)
    }
  )");
}

TEST(EliminateNoop, GraphOutputsKeepTheirNames) {
  // y: Relu now outputs it. z: x is a graph input, so the Cast stays to give it the name z.
  // w: y is a graph output itself, so the Dropout stays to give it a second name.
  expect_rewrite("eliminate_noop", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y, float[2,3] z, float[2,3] w) {
      a = Relu (x)
      y = Transpose <perm = [0, 1]> (a)
      z = Cast <to = 1> (x)
      w = Dropout (y)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y, float[2,3] z, float[2,3] w) {
      y = Relu (x)
      z = Cast <to = 1> (x)
      w = Dropout (y)
    }
  )",
                 rewrites(1));
}

TEST(EliminateNoop, ChainsCollapse) {
  // The last Cast names the graph output and would have to rename x, a graph input: it stays.
  expect_rewrite("eliminate_noop", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y) <int64[2] s = {2, 3}, float[2,3] a, float[2,3] b,
                                        float[2,3] c> {
      a = Reshape (x, s)
      b = Dropout (a)
      c = Concat <axis = 1> (b)
      y = Cast <to = 1> (c)
    }
  )",
                 // The Reshape's shape went with it (nothing else read it).
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y) {
      y = Cast <to = 1> (x)
    }
  )",
                 rewrites(3));
}

TEST(EliminateNoop, InsideSubgraphs) {
  expect_rewrite("eliminate_noop", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2,3] x) => (float[2,3] y) {
      y = If (cond) <
        then_branch = then_g () => (float[2,3] t_out) <float[2,3] n, float[2,3] d> {
          n = Neg (x)
          d = Dropout (n)
          t_out = Transpose <perm = [0, 1]> (d)
        },
        else_branch = else_g () => (float[2,3] e_out) <float[2,3] e> {
          e = Cast <to = 1> (x)
          e_out = Abs (e)
        }>
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2,3] x) => (float[2,3] y) {
      y = If (cond) <
        then_branch = then_g () => (float[2,3] t_out) {
          t_out = Neg (x)
        },
        else_branch = else_g () => (float[2,3] e_out) {
          e_out = Abs (x)
        }>
    }
  )",
                 rewrites(3));
}

TEST(EliminateNoop, LeavesOtherDomainsAndUnknownAttributesAlone) {
  expect_no_rewrite("eliminate_noop", R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[2,3] x) => (float[2,3] y) <float[2,3] a, float[2,3] b> {
      a = custom.Transpose <perm = [0, 1]> (x)
      b = Cast <to = 1, future_flag = 1> (a)
      y = Relu (b)
    }
  )",
                    compare_outputs(Outputs::kSameIfVerifiable));  // no custom-domain kernels
}

TEST(EliminateNoop, OverridableInitializersAreNotConstants) {
  // A training_mode or pads that callers may override proves nothing.
  expect_no_rewrite("eliminate_noop", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x, bool m = {0}, int64[4] p = {0, 0, 0, 0}) => (float[2,3] y) <float r = {0.5},
                                                                  float[2,3] a, float[2,3] b> {
      a = Dropout (x, r, m)
      b = Pad (a, p)
      y = Relu (b)
    }
  )");
}

TEST(EliminateNoop, TileByOnesAndWhereWithAConstantCondition) {
  // Where's all-true condition selects a, all-false selects b (b broadcast into x's shape:
  // float[3] into [2,3]); Tile by [1, 1].
  expect_rewrite("eliminate_noop", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x, float[3] b) => (float[2,3] y, float[2,3] z, float[2,3] w)
      <bool[2,3] yes = {1, 1, 1, 1, 1, 1}, bool no = {0}, int64[2] ones = {1, 1}> {
      t = Where (yes, x, b)
      y = Neg (t)
      u = Where (no, b, x)
      z = Abs (u)
      v = Tile (x, ones)
      w = Relu (v)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x, float[3] b) => (float[2,3] y, float[2,3] z, float[2,3] w) {
      y = Neg (x)
      z = Abs (x)
      w = Relu (x)
    }
  )",
                 rewrites(3));
  // A mixed condition, a selected operand smaller than the result (b: [3] broadcast to [2,3]),
  // a condition that is a graph input, Tile by 2: unchanged.
  expect_no_rewrite("eliminate_noop", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x, float[3] b, bool[3] c) => (float[2,3] y, float[2,3] z, float[2,3] w,
                                               float[4,3] v2)
      <bool[3] mixed = {1, 0, 1}, bool yes = {1}, int64[2] two = {2, 1}> {
      t = Where (mixed, x, b)
      y = Neg (t)
      u = Where (yes, b, x)
      z = Abs (u)
      v = Where (c, x, b)
      w = Relu (v)
      v2 = Tile (x, two)
    }
  )");
}

}  // namespace
}  // namespace graft::testing
