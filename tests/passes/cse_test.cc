#include <string>

#include "tests/testing.h"

namespace graft::testing {
namespace {

TEST(Cse, MergesEqualNodesOnSameInputs) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      a = Relu (x)
      b = Relu (x)
      y = Add (a, b)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "cse");
  EXPECT_TRUE(result.changed);
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Relu"), 1);
  const ir::Node* add = producer(*model, "y");
  ASSERT_TRUE(add);
  ASSERT_TRUE(add->input(0));
  EXPECT_EQ(add->input(0), add->input(1));
  EXPECT_EQ(add->input(0)->name(), "a");  // the first node in topological order is kept
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Cse, ChainOfDuplicatesCollapsesInOneRun) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, float[2] z) => (float[2] y) {
      a1 = Relu (x)
      b1 = Sigmoid (a1)
      c1 = Mul (b1, z)
      a2 = Relu (x)
      b2 = Sigmoid (a2)
      c2 = Mul (b2, z)
      y = Sub (c1, c2)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "cse");
  EXPECT_EQ(result.rewrites, 3);
  EXPECT_EQ(count_ops(*model, "Relu"), 1);
  EXPECT_EQ(count_ops(*model, "Sigmoid"), 1);
  EXPECT_EQ(count_ops(*model, "Mul"), 1);
  const ir::Node* sub = producer(*model, "y");
  ASSERT_TRUE(sub);
  EXPECT_EQ(sub->input(0), sub->input(1));
  // Nothing left to merge: a second run is a no-op.
  EXPECT_FALSE(run_pass_checked(*model, "cse").changed);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Cse, AttributeOrderDoesNotMatterButValuesDo) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x, float[3,2] w) => (float[2,2] y, float[2,3] z) {
      g1 = Gemm <alpha = 2.0, transA = 0> (x, w)
      g2 = Gemm <transA = 0, alpha = 2.0> (x, w)
      y = Add (g1, g2)
      l1 = LeakyRelu <alpha = 0.1> (x)
      l2 = LeakyRelu <alpha = 0.2> (x)
      t1 = Transpose <perm = [1, 0]> (x)
      t2 = Transpose (x)
      tt = Add (t1, t2)
      u = Transpose (tt)
      z = Sum (l1, l2, u)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "cse");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Gemm"), 1);
  EXPECT_EQ(count_ops(*model, "LeakyRelu"), 2);
  // Transpose without perm is the default reversal, equal in effect but not in attributes:
  // CSE compares attributes exactly and does not merge them.
  EXPECT_EQ(count_ops(*model, "Transpose"), 3);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Cse, InputOrderMattersAndCommutedInputsAreNotMerged) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, float[2] w) => (float[2] y) {
      a = Add (x, w)
      b = Add (w, x)
      c = Sub (x, w)
      d = Sub (w, x)
      e = Mul (a, b)
      f = Mul (c, d)
      y = Add (e, f)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "cse");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(count_ops(*model, "Add"), 3);
  EXPECT_EQ(count_ops(*model, "Sub"), 2);
  EXPECT_EQ(count_ops(*model, "Mul"), 2);
}

TEST(Cse, DifferentOpsOnSameInputsAreNotMerged) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      a = Relu (x)
      b = Neg (x)
      c = Abs (x)
      d = Add (a, b)
      y = Add (d, c)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass_checked(*model, "cse").changed);
  EXPECT_EQ(model->graph().num_nodes(), 5u);
}

TEST(Cse, RandomOpsAreNeverMerged) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      r1 = RandomUniformLike <seed = 1.0> (x)
      r2 = RandomUniformLike <seed = 1.0> (x)
      n1 = RandomNormal <shape = [2], seed = 3.0> ()
      n2 = RandomNormal <shape = [2], seed = 3.0> ()
      b1 = Bernoulli <seed = 2.0> (r1)
      b2 = Bernoulli <seed = 2.0> (r1)
      s = Sum (r1, r2, n1, n2)
      bb = Add (b1, b2)
      y = Add (s, bb)
    }
  )");
  ASSERT_TRUE(model);
  // Not run_pass_checked: random ops have no reference kernel (nor reproducible outputs).
  EXPECT_FALSE(run_pass(*model, "cse").changed);
  EXPECT_EQ(count_ops(*model, "RandomUniformLike"), 2);
  EXPECT_EQ(count_ops(*model, "RandomNormal"), 2);
  EXPECT_EQ(count_ops(*model, "Bernoulli"), 2);
}

TEST(Cse, DropoutMergedOnlyInInferenceMode) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) <float r = {0.5}, bool on = {1}, bool off = {0}> {
      i1 = Dropout (x)
      i2 = Dropout (x)
      f1 = Dropout (x, r, off)
      f2 = Dropout (x, r, off)
      t1 = Dropout (x, r, on)
      t2 = Dropout (x, r, on)
      y = Sum (i1, i2, f1, f2, t1, t2)
    }
  )");
  ASSERT_TRUE(model);
  // Not run_pass_checked: training-mode Dropout (t1, t2) is random.
  auto result = run_pass(*model, "cse");
  // i2 into i1, f2 into f1; the training-mode pair stays.
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "Dropout"), 4);
  EXPECT_TRUE(producer(*model, "t1"));
  EXPECT_TRUE(producer(*model, "t2"));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Cse, OldDropoutMergedOnlyWithIsTest) {
  auto model = parse_text(R"(
    <ir_version: 3, opset_import: ["" : 6]>
    g (float[2] x) => (float[2] y) {
      a1 = Dropout <is_test = 1> (x)
      a2 = Dropout <is_test = 1> (x)
      b1 = Dropout (x)
      b2 = Dropout (x)
      y = Sum (a1, a2, b1, b2)
    }
  )");
  ASSERT_TRUE(model);
  // Not run_pass_checked: Dropout without is_test (b1, b2) is random before opset 7.
  auto result = run_pass(*model, "cse");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_FALSE(producer(*model, "a2"));
  EXPECT_TRUE(producer(*model, "b1"));
  EXPECT_TRUE(producer(*model, "b2"));
}

TEST(Cse, CustomDomainsAreLeftAlone) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[2] x) => (float[2] y) {
      a = custom.Relu (x)
      b = custom.Relu (x)
      y = Add (a, b)
    }
  )");
  ASSERT_TRUE(model);
  // Not run_pass_checked: the evaluator cannot run custom-domain ops.
  EXPECT_FALSE(run_pass(*model, "cse").changed);
  EXPECT_EQ(count_ops(*model, "Relu"), 2);
}

TEST(Cse, EqualConstantsAndMultiOutputNodesMerge) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4] x) => (float[2] y, int64[2] i) {
      k1 = Constant <value = int64[1] {2}> ()
      k2 = Constant <value = int64[1] {2}> ()
      k3 = Constant <value = int64[1] {3}> ()
      v1, i1 = TopK (x, k1)
      v2, i2 = TopK (x, k2)
      v3, i3 = TopK (x, k3)
      y = Add (v1, v2)
      i = Add (i1, i2)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "cse");
  EXPECT_EQ(result.rewrites, 2);  // k2 into k1, then the TopK pair
  EXPECT_EQ(count_ops(*model, "Constant"), 2);
  EXPECT_EQ(count_ops(*model, "TopK"), 2);
  const ir::Node* s = producer(*model, "y");
  const ir::Node* i = producer(*model, "i");
  ASSERT_TRUE(s && i);
  EXPECT_EQ(s->input(0), s->input(1));
  EXPECT_EQ(i->input(0), i->input(1));
  EXPECT_EQ(s->input(0)->producer(), i->input(0)->producer());
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Cse, KeepsGraphOutputNames) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, float[2] z) {
      t = Relu (x)
      y = Relu (x)
      z = Neg (t)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "cse");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Relu"), 1);
  EXPECT_EQ(output_names(model->graph()), (std::vector<std::string>{"y", "z"}));
  // The kept Relu now defines the graph output name, and Neg reads it.
  const ir::Node* relu = producer(*model, "y");
  ASSERT_TRUE(relu);
  EXPECT_EQ(relu->op_type(), "Relu");
  EXPECT_EQ(model->graph().find_local("t"), nullptr);
  const ir::Node* neg = producer(*model, "z");
  ASSERT_TRUE(neg);
  EXPECT_EQ(neg->input(0)->name(), "y");
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Cse, TwoGraphOutputsOfEqualNodesAreNotMerged) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, float[2] z) {
      y = Relu (x)
      z = Relu (x)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass_checked(*model, "cse").changed);
  EXPECT_EQ(count_ops(*model, "Relu"), 2);
  EXPECT_EQ(output_names(model->graph()), (std::vector<std::string>{"y", "z"}));
}

TEST(Cse, OutputNameTakenOnlyOnce) {
  // The first duplicate hands its output name to the kept node; a second duplicate that is
  // also a graph output must then stay.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, float[2] z, float[2] w) {
      t = Relu (x)
      y = Relu (x)
      z = Relu (x)
      w = Neg (t)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "cse");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Relu"), 2);
  EXPECT_EQ(output_names(model->graph()), (std::vector<std::string>{"y", "z", "w"}));
  const ir::Node* neg = producer(*model, "w");
  ASSERT_TRUE(neg);
  EXPECT_EQ(neg->input(0)->name(), "y");
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Cse, MergesWithinOneSubgraphButNotAcrossScopes) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2] x) => (float[2] y, float[2] o) {
      o = Sigmoid (x)
      y = If (cond) <
        then_branch = then_g () => (float[2] a) {
          p = Relu (x)
          q = Relu (x)
          a = Add (p, q)
        },
        else_branch = else_g () => (float[2] b) {
          r = Relu (x)
          s = Sigmoid (x)
          b = Add (r, s)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "cse");
  // Only q into p: the Relu in the other branch and the Sigmoid in the main graph differ in
  // scope and stay.
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Relu"), 2);
  EXPECT_EQ(count_ops(*model, "Sigmoid"), 2);
  const ir::Node* if_node = producer(*model, "y");
  ASSERT_TRUE(if_node);
  ASSERT_EQ(if_node->subgraphs().size(), 2u);
  for (const auto& sub : if_node->subgraphs()) {
    for (const ir::Node* n : sub.graph->nodes())
      if (n->op_type() == "Add" && sub.attr_name == "then_branch") {
        EXPECT_EQ(n->input(0), n->input(1));
      }
  }
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Cse, RedirectsValuesCapturedBySubgraphs) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2] x) => (float[2] y) {
      a = Relu (x)
      b = Relu (x)
      y = If (cond) <
        then_branch = then_g () => (float[2] p) { p = Neg (b) },
        else_branch = else_g () => (float[2] q) { q = Abs (a) }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "cse");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(model->graph().find_local("b"), nullptr);
  const ir::Value* a = model->graph().find_local("a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->uses().size(), 2u);  // both captures, one per branch
  for (const ir::Use& u : a->uses()) EXPECT_NE(u.node->graph(), &model->graph());
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Cse, NodesWithSubgraphsAreNotMerged) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2] x) => (float[2] y) {
      a = If (cond) <
        then_branch = t1 () => (float[2] a1) { a1 = Relu (x) },
        else_branch = e1 () => (float[2] a2) { a2 = Neg (x) }>
      b = If (cond) <
        then_branch = t2 () => (float[2] b1) { b1 = Relu (x) },
        else_branch = e2 () => (float[2] b2) { b2 = Neg (x) }>
      y = Add (a, b)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass_checked(*model, "cse").changed);
  EXPECT_EQ(count_ops(*model, "If"), 2);
}

TEST(Cse, MergesInsideFunctionBodiesKeepingTheirOutputs) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] y) {
      y, w = local.Twice (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    Twice (a) => (b, c) {
      r1 = Relu (a)
      b = Relu (a)
      c = Add (r1, b)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "cse");
  EXPECT_EQ(result.rewrites, 1);
  const ir::Graph& body = *model->functions()[0].body;
  ASSERT_EQ(body.outputs().size(), 2u);
  EXPECT_EQ(body.outputs()[0].value->name(), "b");
  EXPECT_EQ(body.outputs()[1].value->name(), "c");
  EXPECT_EQ(body.num_nodes(), 2u);
  // The kept Relu now defines the function output `b`, which the Add reads twice.
  const ir::Value* b = body.find_local("b");
  ASSERT_TRUE(b && b->producer());
  EXPECT_EQ(b->producer()->op_type(), "Relu");
  const ir::Value* c = body.find_local("c");
  ASSERT_TRUE(c && c->producer());
  EXPECT_EQ(c->producer()->input(0), b);
  EXPECT_EQ(c->producer()->input(1), b);
  // onnx_errors() skips models with local function domains, so save and reload instead.
  auto reloaded = ir::Model::from_proto(model->to_proto());
  EXPECT_TRUE(reloaded.ok()) << reloaded.status();
}

}  // namespace
}  // namespace graft::testing
