#include <set>

#include "core/ir/tensor.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

constexpr char kTwoBranches[] = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, float[2] z) {
      c = Constant <value = bool {%d}> ()
      y = If (c) <
        then_branch = then_g () => (float[2] a) {
          two = Constant <value = float[2] {2.0, 2.0}> ()
          a = Mul (x, two)
        },
        else_branch = else_g () => (float[2] b) {
          b = Neg (x)
        }>
      z = Abs (y)
    }
  )";

std::unique_ptr<ir::Model> two_branches(bool cond) {
  char buf[1024];
  std::snprintf(buf, sizeof(buf), kTwoBranches, cond ? 1 : 0);
  auto model = parse_text(buf);
  if (model) run_pass(*model, "extract_constants");
  return model;
}

TEST(InlineConstantIf, ThenBranchTaken) {
  auto model = two_branches(true);
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "If"), 0);
  EXPECT_EQ(count_ops(*model, "Neg"), 0);
  // The graph output y is now produced by the branch's Mul, whose constant moved along.
  ir::Node* mul = model->graph().find_local("y")->producer();
  ASSERT_TRUE(mul && mul->is("Mul"));
  EXPECT_EQ(mul->input(0)->name(), "x");
  ASSERT_TRUE(mul->input(1)->is_constant());
  EXPECT_EQ(mul->input(1)->owner(), &model->graph());
  EXPECT_EQ(ir::read_doubles(*mul->input(1)->initializer()), (std::vector<double>{2.0, 2.0}));
  EXPECT_EQ(output_names(model->graph()), (std::vector<std::string>{"y", "z"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineConstantIf, ElseBranchTaken) {
  auto model = two_branches(false);
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "If"), 0);
  EXPECT_EQ(count_ops(*model, "Mul"), 0);
  ir::Node* neg = model->graph().find_local("y")->producer();
  ASSERT_TRUE(neg && neg->is("Neg"));
  EXPECT_EQ(input_names(*neg), (std::vector<std::string>{"x"}));
  EXPECT_EQ(input_names(*model->graph().find_local("z")->producer()),
            (std::vector<std::string>{"y"}));
  // The condition went with the If: nothing else read it.
  EXPECT_EQ(model->graph().initializers().size(), 0u);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineConstantIf, BranchUsingOuterValuesAndIntermediates) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, float[2] w) => (float[2] y) {
      c = Constant <value = bool {1}> ()
      s = Sub (x, w)
      r = If (c) <
        then_branch = then_g () => (float[2] a) {
          t = Mul (s, w)
          u = Add (t, x)
          a = Relu (u)
        },
        else_branch = else_g () => (float[2] b) {
          b = Identity (s)
        }>
      y = Sigmoid (r)
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "If"), 0);
  EXPECT_EQ(model->graph().num_nodes(), 5u);  // Sub, Mul, Add, Relu, Sigmoid
  ir::Node* relu = model->graph().find_local("r")->producer();
  ASSERT_TRUE(relu && relu->is("Relu"));
  ir::Node* add = relu->input(0)->producer();
  ASSERT_TRUE(add && add->is("Add"));
  EXPECT_EQ(add->graph(), &model->graph());
  EXPECT_EQ(add->input(1)->name(), "x");
  ir::Node* mul = add->input(0)->producer();
  ASSERT_TRUE(mul && mul->is("Mul"));
  EXPECT_EQ(input_names(*mul), (std::vector<std::string>{"s", "w"}));
  EXPECT_TRUE(names_unique(*model));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineConstantIf, BranchLocalNamesAreRenamedOnClash) {
  // Both Ifs define a branch-local `t`; both land in the main graph.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      c = Constant <value = bool {1}> ()
      p = If (c) <
        then_branch = g1 () => (float[2] a) {
          t = Neg (x)
          a = Abs (t)
        },
        else_branch = g2 () => (float[2] b) {
          t = Exp (x)
          b = Abs (t)
        }>
      q = If (c) <
        then_branch = g3 () => (float[2] a2) {
          t = Relu (x)
          a2 = Abs (t)
        },
        else_branch = g4 () => (float[2] b2) {
          b2 = Identity (x)
        }>
      y = Add (p, q)
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "If"), 0);
  EXPECT_EQ(count_ops(*model, "Abs"), 2);
  EXPECT_TRUE(names_unique(*model));
  ir::Node* neg = model->graph().find_local("p")->producer()->input(0)->producer();
  ir::Node* relu = model->graph().find_local("q")->producer()->input(0)->producer();
  ASSERT_TRUE(neg && relu);
  EXPECT_TRUE(neg->is("Neg"));
  EXPECT_TRUE(relu->is("Relu"));
  EXPECT_NE(neg->output(0)->name(), relu->output(0)->name());
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineConstantIf, IfNestedInLoopBody) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      trip = Constant <value = int64 {3}> ()
      go = Constant <value = bool {1}> ()
      flag = Constant <value = bool {0}> ()
      y = Loop (trip, go, x) <
        body = body (int64 i, bool c_in, float[2] acc) => (bool c_out, float[2] acc_out) {
          c_out = Identity (c_in)
          acc_out = If (flag) <
            then_branch = t_g () => (float[2] a) {
              a = Add (acc, acc)
            },
            else_branch = e_g () => (float[2] b) {
              one = Constant <value = float[2] {1.0, 1.0}> ()
              b = Add (acc, one)
            }>
        }>
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "If"), 0);
  ir::Node* loop = model->graph().find_local("y")->producer();
  ASSERT_TRUE(loop && loop->is("Loop"));
  const ir::Graph* body = loop->subgraphs()[0].graph.get();
  EXPECT_EQ(output_names(*body), (std::vector<std::string>{"c_out", "acc_out"}));
  ir::Node* add = body->outputs()[1].value->producer();
  ASSERT_TRUE(add && add->is("Add"));
  EXPECT_EQ(add->graph(), body);
  EXPECT_EQ(add->input(0)->name(), "acc");
  ASSERT_TRUE(add->input(1)->is_constant());
  EXPECT_EQ(add->input(1)->owner(), body);  // the branch constant now lives in the body
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineConstantIf, NestedConstantIfsInlineInOneRun) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      c1 = Constant <value = bool {1}> ()
      c2 = Constant <value = bool {0}> ()
      y = If (c1) <
        then_branch = outer_then () => (float[2] a) {
          a = If (c2) <
            then_branch = inner_then () => (float[2] p) {
              p = Neg (x)
            },
            else_branch = inner_else () => (float[2] q) {
              q = Exp (x)
            }>
        },
        else_branch = outer_else () => (float[2] b) {
          b = Abs (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "If"), 0);
  ir::Node* exp = model->graph().find_local("y")->producer();
  ASSERT_TRUE(exp && exp->is("Exp"));
  EXPECT_EQ(model->graph().num_nodes(), 1u);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineConstantIf, BranchOutputIsAnOuterValue) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      c = Constant <value = bool {1}> ()
      r = If (c) <
        then_branch = then_g () => (float[2] x) {
          unused = Neg (x)
        },
        else_branch = else_g () => (float[2] b) {
          b = Neg (x)
        }>
      y = Abs (r)
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "If"), 0);
  EXPECT_EQ(count_ops(*model, "Identity"), 0);  // r was no graph output: Abs reads x directly
  EXPECT_EQ(input_names(*model->graph().find_local("y")->producer()),
            (std::vector<std::string>{"x"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineConstantIf, OuterValueAsGraphOutputKeepsTheOutputName) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, float[2] z) {
      c = Constant <value = bool {0}> ()
      y, z = If (c) <
        then_branch = then_g () => (float[2] a, float[2] a2) {
          a = Neg (x)
          a2 = Neg (a)
        },
        else_branch = else_g () => (float[2] x, float[2] k) {
          k = Constant <value = float[2] {3.0, -1.0}> ()
        }>
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");  // k becomes a branch initializer
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "If"), 0);
  EXPECT_EQ(count_ops(*model, "Identity"), 2);
  EXPECT_EQ(output_names(model->graph()), (std::vector<std::string>{"y", "z"}));
  ir::Node* y = model->graph().find_local("y")->producer();
  ASSERT_TRUE(y && y->is("Identity"));
  EXPECT_EQ(input_names(*y), (std::vector<std::string>{"x"}));
  ir::Node* z = model->graph().find_local("z")->producer();
  ASSERT_TRUE(z && z->is("Identity"));
  ASSERT_TRUE(z->input(0)->is_constant());
  EXPECT_EQ(ir::read_doubles(*z->input(0)->initializer()), (std::vector<double>{3.0, -1.0}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineConstantIf, SameBranchResultTwice) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, float[2] z) {
      c = Constant <value = bool {1}> ()
      y, z = If (c) <
        then_branch = then_g () => (float[2] a, float[2] a) {
          a = Neg (x)
        },
        else_branch = else_g () => (float[2] b, float[2] b2) {
          b = Neg (x)
          b2 = Abs (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Neg"), 1);
  ir::Node* z = model->graph().find_local("z")->producer();
  ASSERT_TRUE(z && z->is("Identity"));
  EXPECT_EQ(input_names(*z), (std::vector<std::string>{"y"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineConstantIf, NonConstantConditionStays) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool c, float[2] x) => (float[2] y) {
      y = If (c) <
        then_branch = then_g () => (float[2] a) {
          a = Neg (x)
        },
        else_branch = else_g () => (float[2] b) {
          b = Abs (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(count_ops(*model, "If"), 1);
}

TEST(InlineConstantIf, ConditionComputedByANodeStays) {
  // Not folded yet: fold_constants would first make the condition an initializer.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      c = Constant <value = bool {1}> ()
      nc = Not (c)
      y = If (nc) <
        then_branch = then_g () => (float[2] a) {
          a = Neg (x)
        },
        else_branch = else_g () => (float[2] b) {
          b = Abs (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(count_ops(*model, "If"), 1);
}

TEST(InlineConstantIf, ConditionWithTwoElementsStays) {
  // Invalid (If needs one element), so neither branch is known to run.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      c = Constant <value = bool[2] {1, 0}> ()
      y = If (c) <
        then_branch = then_g () => (float[2] a) {
          a = Neg (x)
        },
        else_branch = else_g () => (float[2] b) {
          b = Abs (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass(*model, "inline_constant_if");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(count_ops(*model, "If"), 1);
}

TEST(InlineConstantIf, BranchWithALoopIsInlined) {
  // The taken branch holds a Loop whose body captures a branch value (s) and an outer one (w);
  // the Loop's result is the If's output and a graph output.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, float[2] w) => (float[2] y) {
      c = Constant <value = bool {1}> ()
      y = If (c) <
        then_branch = then_g () => (float[2] a) {
          s = Mul (x, w)
          trip = Constant <value = int64 {2}> ()
          go = Constant <value = bool {1}> ()
          a = Loop (trip, go, x) <
            body = body (int64 i, bool c_in, float[2] acc) => (bool c_out, float[2] acc_out) {
              c_out = Identity (c_in)
              t = Add (acc, s)
              acc_out = Sub (t, w)
            }>
        },
        else_branch = else_g () => (float[2] b) {
          b = Abs (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "If"), 0);
  ir::Graph& g = model->graph();
  ir::Node* loop = g.find_local("y")->producer();
  ASSERT_TRUE(loop && loop->is("Loop"));
  EXPECT_EQ(loop->graph(), &g);
  EXPECT_EQ(output_names(g), (std::vector<std::string>{"y"}));
  const ir::Graph* body = loop->subgraphs()[0].graph.get();
  ir::Node* sub = body->outputs()[1].value->producer();
  ASSERT_TRUE(sub && sub->is("Sub"));
  EXPECT_EQ(sub->input(1), g.find_local("w"));
  ir::Node* add = sub->input(0)->producer();
  ASSERT_TRUE(add && add->is("Add"));
  ir::Node* mul = add->input(1)->producer();
  ASSERT_TRUE(mul && mul->is("Mul"));
  EXPECT_EQ(mul->graph(), &g);  // the copy of s, in the main graph
  EXPECT_TRUE(names_unique(*model));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineConstantIf, BranchWithANestedIfReadingOuterValues) {
  // The inner If's condition is an input, so it stays; its branches read an outer value (x), a
  // value of the taken branch (s), and names that the enclosing graph defines too (t, u).
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, bool k) => (float[2] y, float[2] t) {
      c = Constant <value = bool {0}> ()
      t = Neg (x)
      r = If (c) <
        then_branch = then_g () => (float[2] a) {
          a = Identity (x)
        },
        else_branch = else_g () => (float[2] b) {
          s = Exp (x)
          b = If (k) <
            then_branch = inner_then () => (float[2] p) {
              u = Mul (s, x)
              p = Add (u, t)
            },
            else_branch = inner_else () => (float[2] q) {
              u = Sub (s, x)
              q = Relu (u)
            }>
        }>
      u = Abs (r)
      y = Sigmoid (u)
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto before = model->clone();
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "If"), 1);
  ir::Graph& g = model->graph();
  ir::Node* inner = g.find_local("u")->producer()->input(0)->producer();
  ASSERT_TRUE(inner && inner->is("If"));
  EXPECT_EQ(inner->graph(), &g);
  EXPECT_EQ(inner->input(0), g.find_local("k"));
  for (const auto& sub : inner->subgraphs()) {
    ir::Node* out = sub.graph->outputs()[0].value->producer();
    ASSERT_TRUE(out);
    ir::Node* u = out->input(0)->producer();
    ASSERT_TRUE(u);
    EXPECT_EQ(u->graph(), sub.graph.get());
    EXPECT_NE(u->output(0)->name(), "u");  // the main graph's u keeps its name
    ir::Node* exp = u->input(0)->producer();
    ASSERT_TRUE(exp && exp->is("Exp"));
    EXPECT_EQ(exp->graph(), &g);
    EXPECT_EQ(u->input(1), g.find_local("x"));
    if (out->is("Add")) {
      EXPECT_EQ(out->input(1), g.find_local("t"));
    }
  }
  EXPECT_EQ(producer_op(g, "u"), "Abs");
  EXPECT_TRUE(names_unique(*model));
  for (uint32_t seed = 1; seed <= 6; ++seed) EXPECT_EQ(same_outputs(*before, *model, seed), "");
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineConstantIf, InnerConstantIfFeedingABranchNodeAndALoop) {
  // Deepest first: the inner If is inlined into the outer branch (its nodes appended after the
  // Relu reading them), then the outer branch, with the Loop holding a third constant If, lands
  // in the main graph: one run, whatever the order the branch's nodes are stored in.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      c = Constant <value = bool {1}> ()
      y = If (c) <
        then_branch = then_g () => (float[2] a) {
          i = If (c) <
            then_branch = it () => (float[2] p) {
              p = Neg (x)
            },
            else_branch = ie () => (float[2] q) {
              q = Exp (x)
            }>
          r = Relu (i)
          trip = Constant <value = int64 {2}> ()
          go = Constant <value = bool {1}> ()
          a = Loop (trip, go, r) <
            body = body (int64 n, bool c_in, float[2] acc) => (bool c_out, float[2] acc_out) {
              c_out = Identity (c_in)
              acc_out = If (c) <
                then_branch = lt () => (float[2] lp) {
                  lp = Add (acc, r)
                },
                else_branch = le () => (float[2] lq) {
                  lq = Identity (acc)
                }>
            }>
        },
        else_branch = else_g () => (float[2] b) {
          b = Abs (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_EQ(result.rewrites, 3);
  EXPECT_EQ(count_ops(*model, "If"), 0);
  EXPECT_EQ(op_types(model->graph()), (std::vector<std::string>{"Neg", "Relu", "Loop"}));
  EXPECT_TRUE(names_unique(*model));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineConstantIf, BranchWithALoopInAFunctionBody) {
  // In a function body (no initializers there): the condition and the branch's constants are
  // Constant nodes, and the copied Loop's body captures the copy of a branch value.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] y) {
      y = local.F (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    F (a) => (b) {
      c = Constant <value = bool {1}> ()
      b = If (c) <
        then_branch = then_g () => (float[2] r) {
          s = Neg (a)
          trip = Constant <value = int64 {3}> ()
          go = Constant <value = bool {1}> ()
          r = Loop (trip, go, a) <
            body = body (int64 i, bool c_in, float[2] acc) => (bool c_out, float[2] acc_out) {
              c_out = Identity (c_in)
              acc_out = Add (acc, s)
            }>
        },
        else_branch = else_g () => (float[2] e) {
          e = Abs (a)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "If"), 0);
  const ir::Graph& body = *model->functions()[0].body;
  ir::Node* loop = body.outputs()[0].value->producer();
  ASSERT_TRUE(loop && loop->is("Loop"));
  EXPECT_EQ(loop->graph(), &body);
  EXPECT_EQ(output_names(body), (std::vector<std::string>{"b"}));
  ir::Node* add = loop->subgraphs()[0].graph->outputs()[1].value->producer();
  ASSERT_TRUE(add && add->is("Add"));
  ir::Node* neg = add->input(1)->producer();
  ASSERT_TRUE(neg && neg->is("Neg"));
  EXPECT_EQ(neg->graph(), &body);
  EXPECT_TRUE(body.initializers().empty());
  EXPECT_TRUE(names_unique(*model));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineConstantIf, CustomDomainIfStays) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[2] x) => (float[2] y) {
      c = Constant <value = bool {1}> ()
      y = custom.If (c) <
        then_branch = then_g () => (float[2] a) {
          a = Neg (x)
        },
        else_branch = else_g () => (float[2] b) {
          b = Abs (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass(*model, "inline_constant_if");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(count_ops(*model, "If"), 1);
}

TEST(InlineConstantIf, OldIrVersionsGetConstantNodesForBranchInitializers) {
  auto model = parse_text(R"(
    <ir_version: 3, opset_import: ["" : 9]>
    g (float[2] x) => (float[2] y) {
      c = Constant <value = bool {1}> ()
      y = If (c) <
        then_branch = then_g () => (float[2] a) {
          two = Constant <value = float[2] {2.0, 2.0}> ()
          a = Mul (x, two)
        },
        else_branch = else_g () => (float[2] b) {
          b = Neg (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  // IR 3 models keep Constant nodes (the condition here). A branch initializer, made by hand,
  // must become a Constant node too.
  ir::Node* if_node = model->graph().find_local("y")->producer();
  ir::Graph* then_g = nullptr;
  for (const auto& sub : if_node->subgraphs())
    if (sub.attr_name == "then_branch") then_g = sub.graph.get();
  ASSERT_TRUE(then_g);
  ir::Value* two = then_g->find_local("two");
  ir::Node* two_constant = two->producer();
  then_g->make_initializer(two, ir::make_float_tensor(onnx::TensorProto::FLOAT, {2}, {2, 2}));
  ASSERT_TRUE(then_g->remove_node(two_constant));
  ASSERT_TRUE(model->finalize().ok());

  auto result = run_pass_checked(*model, "inline_constant_if");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "If"), 0);
  EXPECT_TRUE(model->graph().initializers().empty());
  ir::Node* mul = model->graph().find_local("y")->producer();
  ASSERT_TRUE(mul && mul->is("Mul"));
  ir::Node* constant = mul->input(1)->producer();
  ASSERT_TRUE(constant && constant->is("Constant"));
  EXPECT_EQ(ir::read_doubles(constant->attr("value")->t()), (std::vector<double>{2.0, 2.0}));
  EXPECT_EQ(onnx_errors(*model), "");
}

}  // namespace
}  // namespace graft::testing
