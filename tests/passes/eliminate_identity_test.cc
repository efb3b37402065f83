#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include "tests/testing.h"

namespace graft::testing {
namespace {

TEST(EliminateIdentity, ConsumersReadTheInputDirectly) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      a = Relu (x)
      b = Identity (a)
      c = Identity (b)
      y = Add (b, c)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "eliminate_identity");
  EXPECT_TRUE(result.changed);
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "Identity"), 0);
  EXPECT_EQ(input_names(only_node(model->graph(), "Add")), (std::vector<std::string>{"a", "a"}));
  EXPECT_EQ(model->graph().find_local("b"), nullptr);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(EliminateIdentity, GraphOutputNameMovesToTheProducer) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, float[2] z) {
      a = Relu (x)
      y = Identity (a)
      z = Sigmoid (a)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "eliminate_identity");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Identity"), 0);
  EXPECT_EQ(output_names(model->graph()), (std::vector<std::string>{"y", "z"}));
  EXPECT_EQ(producer_op(model->graph(), "y"), "Relu");
  // The other reader of the renamed value follows it.
  EXPECT_EQ(input_names(only_node(model->graph(), "Sigmoid")), (std::vector<std::string>{"y"}));
  EXPECT_EQ(model->graph().find_local("a"), nullptr);
  // The declared output type is kept.
  EXPECT_EQ(model->graph().outputs()[0].info.type().tensor_type().elem_type(),
            onnx::TensorProto::FLOAT);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(EliminateIdentity, ChainEndingInAGraphOutput) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      a = Neg (x)
      b = Identity (a)
      y = Identity (b)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "eliminate_identity");
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "Identity"), 0);
  EXPECT_EQ(producer_op(model->graph(), "y"), "Neg");
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(EliminateIdentity, KeepsIdentitiesThatNameGraphOutputsOfInputsOrConstants) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, float[2] d = {1.0, 2.0}) => (float[2] y1, float[2] y2, float[2] y3,
                                              float[2] a, float[2] y4) <float[2] w = {3.0, 4.0}> {
      y1 = Identity (x)
      y2 = Identity (w)
      y3 = Identity (d)
      a = Relu (x)
      y4 = Identity (a)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "eliminate_identity");
  // x is an input, w an initializer, d a caller-overridable default, a itself an output: every
  // output needs its own name, so each Identity stays.
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(count_ops(*model, "Identity"), 4);
  EXPECT_EQ(output_names(model->graph()), (std::vector<std::string>{"y1", "y2", "y3", "a", "y4"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(EliminateIdentity, InputsAndInitializersCanBeReadDirectlyByNodes) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) <float[2] w = {3.0, 4.0}> {
      xi = Identity (x)
      wi = Identity (w)
      y = Mul (xi, wi)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "eliminate_identity");
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(input_names(only_node(model->graph(), "Mul")), (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(EliminateIdentity, LeavesOtherDomainsAlone) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[2] x) => (float[2] y) {
      a = custom.Identity (x)
      y = Relu (a)
    }
  )");
  ASSERT_TRUE(model);
  // Not run_pass_checked: the evaluator cannot run custom-domain ops.
  auto result = run_pass(*model, "eliminate_identity");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(count_ops(*model, "Identity"), 1);
}

TEST(EliminateIdentity, InsideIfBranches) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2] x) => (float[2] y) {
      y = If (cond) <
        then_branch = then_g () => (float[2] t_out) {
          t = Neg (x)
          t_out = Identity (t)
        },
        else_branch = else_g () => (float[2] e_out) {
          e_out = Identity (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "eliminate_identity");
  EXPECT_EQ(result.rewrites, 1);
  ir::Node* if_node = only_node(model->graph(), "If");
  ASSERT_EQ(if_node->subgraphs().size(), 2u);
  for (const auto& sub : if_node->subgraphs()) {
    const ir::Graph& branch = *sub.graph;
    if (sub.attr_name == "then_branch") {
      // The branch-local producer now outputs the branch output's name.
      EXPECT_EQ(output_names(branch), (std::vector<std::string>{"t_out"}));
      EXPECT_EQ(producer_op(branch, "t_out"), "Neg");
      EXPECT_EQ(branch.num_nodes(), 1u);
    } else {
      // Forwarding an outer-scope value as a subgraph output needs the Identity.
      EXPECT_EQ(output_names(branch), (std::vector<std::string>{"e_out"}));
      EXPECT_EQ(producer_op(branch, "e_out"), "Identity");
    }
  }
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(EliminateIdentity, OuterIdentityReadBySubgraphs) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2] x) => (float[2] y) {
      a = Relu (x)
      b = Identity (a)
      y = If (cond) <
        then_branch = then_g () => (float[2] t_out) {
          t_out = Neg (b)
        },
        else_branch = else_g () => (float[2] e_out) {
          e_out = Abs (b)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "eliminate_identity");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Identity"), 0);
  for (const auto& sub : only_node(model->graph(), "If")->subgraphs())
    for (ir::Node* n : sub.graph->nodes())
      EXPECT_EQ(input_names(*n), (std::vector<std::string>{"a"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(EliminateIdentity, LoopBodyPassThroughStays) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64 trip, bool cond, float[2] x) => (float[2] y) {
      y = Loop (trip, cond, x) <
        body = body_g (int64 i, bool c_in, float[2] v) => (bool c_out, float[2] v_out) {
          c_out = Identity (c_in)
          n = Neg (v)
          n2 = Identity (n)
          v_out = Identity (n2)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "eliminate_identity");
  EXPECT_EQ(result.rewrites, 2);
  const ir::Graph& body = *only_node(model->graph(), "Loop")->subgraphs()[0].graph;
  EXPECT_EQ(producer_op(body, "c_out"), "Identity");
  EXPECT_EQ(producer_op(body, "v_out"), "Neg");
  EXPECT_EQ(output_names(body), (std::vector<std::string>{"c_out", "v_out"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(EliminateIdentity, FunctionBodies) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] y, float[2] z) {
      y, z = local.Twice (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    Twice (a) => (b, c) {
      s = Add (a, a)
      t = Identity (s)
      b = Identity (t)
      c = Identity (a)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "eliminate_identity");
  EXPECT_EQ(result.rewrites, 2);
  const ir::Graph& body = *model->functions()[0].body;
  EXPECT_EQ(output_names(body), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(producer_op(body, "b"), "Add");
  // The function input forwarded as an output keeps its Identity.
  EXPECT_EQ(producer_op(body, "c"), "Identity");
  auto proto = model->to_proto();
  ASSERT_EQ(proto.functions_size(), 1);
  EXPECT_EQ(proto.functions(0).output(0), "b");
  EXPECT_EQ(proto.functions(0).node_size(), 2);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(EliminateIdentity, SecondRunFindsNothing) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, float[2] z) {
      a = Relu (x)
      y = Identity (a)
      z = Identity (y)
    }
  )");
  ASSERT_TRUE(model);
  auto first = run_pass_checked(*model, "eliminate_identity");
  EXPECT_EQ(first.rewrites, 1);
  EXPECT_EQ(producer_op(model->graph(), "y"), "Relu");
  EXPECT_EQ(producer_op(model->graph(), "z"), "Identity");
  auto second = run_pass_checked(*model, "eliminate_identity");
  EXPECT_FALSE(second.changed);
  EXPECT_EQ(onnx_errors(*model), "");
}

}  // namespace
}  // namespace graft::testing
