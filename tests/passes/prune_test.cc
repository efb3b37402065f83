#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include "tests/testing.h"

namespace graft::testing {
namespace {

std::vector<std::string> value_info_names(const onnx::GraphProto& g) {
  std::vector<std::string> names;
  for (const auto& vi : g.value_info()) names.push_back(vi.name());
  return names;
}

TEST(Prune, RemovesDeadNodesAndInitializers) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, float[2] unused) => (float[2] y) <float[2] w = {1.0, 2.0},
                                                     float[2] dead_w = {3.0, 4.0}> {
      a = Mul (x, w)
      y = Relu (a)
      d1 = Add (x, dead_w)
      d2 = Neg (d1)
      d3 = Sigmoid (d2)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "prune");
  EXPECT_TRUE(result.changed);
  EXPECT_EQ(result.rewrites, 4);  // 3 nodes + 1 initializer
  EXPECT_EQ(op_types(model->graph()), (std::vector<std::string>{"Mul", "Relu"}));
  EXPECT_EQ(initializer_names(model->graph()), (std::vector<std::string>{"w"}));
  for (const char* name : {"d1", "d2", "d3", "dead_w"})
    EXPECT_EQ(model->graph().find_local(name), nullptr) << name;
  // Graph inputs are interface even when nothing reads them.
  EXPECT_EQ(input_names(model->graph()), (std::vector<std::string>{"x", "unused"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Prune, NothingToDoOnALiveGraph) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, float[2] z) <float[2] w = {1.0, 2.0}> {
      a = Mul (x, w)
      y = Relu (a)
      z = Neg (a)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "prune");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(result.rewrites, 0);
  EXPECT_EQ(model->graph().num_nodes(), 3u);
}

TEST(Prune, KeepsInitializersThatAreGraphInputsAndOutputs) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, float[2] bias = {1.0, 2.0}) => (float[2] y, float[2] c) <float[2] c = {5.0, 6.0},
                                                                           float[2] gone = {7.0, 8.0}> {
      y = Relu (x)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "prune");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(initializer_names(model->graph()), (std::vector<std::string>{"bias", "c"}));
  EXPECT_EQ(input_names(model->graph()), (std::vector<std::string>{"x", "bias"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Prune, DropsValueInfoOfDeadAndUnknownValues) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "unused.domain" : 1]>
    g (float[2] x) => (float[2] y) <float[2] a, float[2] d, float[2] nowhere> {
      a = Relu (x)
      y = Neg (a)
      d = Abs (x)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "prune");
  EXPECT_TRUE(result.changed);
  EXPECT_EQ(result.rewrites, 1);
  auto proto = model->to_proto();
  EXPECT_EQ(value_info_names(proto.graph()), (std::vector<std::string>{"a"}));
  // Opset imports are not pruned, even unused ones.
  EXPECT_EQ(proto.opset_import_size(), 2);
}

TEST(Prune, OnlyOrphanValueInfoStillCountsAsAChange) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) <float[2] nowhere> {
      y = Relu (x)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "prune");
  EXPECT_TRUE(result.changed);
  EXPECT_EQ(result.rewrites, 0);
  EXPECT_EQ(model->to_proto().graph().value_info_size(), 0);
  EXPECT_FALSE(run_pass_checked(*model, "prune").changed);
}

TEST(Prune, ValuesReadOnlyInsideLiveSubgraphsAreLive) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2] x) => (float[2] y) <float[2] k = {2.0, 2.0}> {
      captured = Relu (x)
      forwarded = Neg (x)
      y = If (cond) <
        then_branch = then_g () => (float[2] t_out) {
          t_out = Mul (captured, k)
          t_dead = Abs (captured)
        },
        else_branch = else_g () => (float[2] forwarded) {
          e_dead = Sigmoid (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "prune");
  // Only the branch-local dead nodes go: Relu feeds the then branch, Neg is the else branch's
  // output (captured from the outer scope), k is read inside the branch.
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(op_types(model->graph()), (std::vector<std::string>{"Relu", "Neg", "If"}));
  EXPECT_EQ(initializer_names(model->graph()), (std::vector<std::string>{"k"}));
  EXPECT_EQ(count_ops(*model, "Abs"), 0);
  EXPECT_EQ(count_ops(*model, "Sigmoid"), 0);
  EXPECT_EQ(count_ops(*model, "Mul"), 1);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Prune, DeadControlFlowGoesWithItsSubgraphsAndWhatOnlyTheyRead) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2] x) => (float[2] y) <float[2] k = {2.0, 2.0}> {
      y = Relu (x)
      only_for_if = Neg (x)
      unused = If (cond) <
        then_branch = then_g () => (float[2] t_out) {
          t_out = Mul (only_for_if, k)
        },
        else_branch = else_g () => (float[2] e_out) {
          e1 = Abs (x)
          e_out = Sigmoid (e1)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "prune");
  // If + its 3 nested nodes + Neg, and the initializer k.
  EXPECT_EQ(result.rewrites, 6);
  EXPECT_EQ(op_types(model->graph()), (std::vector<std::string>{"Relu"}));
  EXPECT_TRUE(model->graph().initializers().empty());
  EXPECT_EQ(model->total_nodes(), 1u);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Prune, LoopBodiesArePrunedRelativeToTheirOutputs) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64 trip, bool cond, float[2] x) => (float[2] y) {
      y = Loop (trip, cond, x) <
        body = body_g (int64 i, bool c_in, float[2] v) => (bool c_out, float[2] v_out) {
          c_out = Identity (c_in)
          v_out = Neg (v)
          junk = Cast <to = 1> (i)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "prune");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "Cast"), 0);
  // Body inputs are the Loop's interface, used or not.
  ir::Node* loop = model->graph().nodes()[0];
  EXPECT_EQ(input_names(*loop->subgraphs()[0].graph), (std::vector<std::string>{"i", "c_in", "v"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Prune, FunctionBodies) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] y) {
      y = local.F (x, x)
    }
    <domain: "local", opset_import: ["" : 13]>
    F (a, unused_in) => (b) {
      s = Add (a, a)
      b = Relu (s)
      dead = Neg (a)
      dead2 = Abs (dead)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "prune");
  EXPECT_EQ(result.rewrites, 2);
  const ir::Graph& body = *model->functions()[0].body;
  EXPECT_EQ(op_types(body), (std::vector<std::string>{"Add", "Relu"}));
  EXPECT_EQ(input_names(body), (std::vector<std::string>{"a", "unused_in"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(Prune, KeepsNodesOfOtherDomainsAndWhatTheyRead) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1, "ai.onnx.ml" : 3]>
    g (float[2] x) => (float[2] y) {
      y = Relu (x)
      fed = Neg (x)
      side_effect = custom.Log (fed)
      n = ai.onnx.ml.Normalizer (x)
    }
  )");
  ASSERT_TRUE(model);
  // Not run_pass_checked: the evaluator cannot run custom-domain ops.
  auto result = run_pass(*model, "prune");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(op_types(model->graph()), (std::vector<std::string>{"Relu", "Neg", "Log"}));
}

TEST(Prune, ControlFlowAndCallsHoldingForeignOpsStay) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1, "local" : 1]>
    g (bool cond, float[2] x) => (float[2] y) {
      y = Relu (x)
      pure_call = local.Pure (x)
      effect_call = local.Effect (x)
      effect_if = If (cond) <
        then_branch = then_g () => (float[2] t_out) {
          t_out = custom.Print (x)
        },
        else_branch = else_g () => (float[2] e_out) {
          e_out = Neg (x)
        }>
      pure_if = If (cond) <
        then_branch = then_g2 () => (float[2] t_out2) {
          t_out2 = Abs (x)
        },
        else_branch = else_g2 () => (float[2] e_out2) {
          e_out2 = local.Pure (x)
        }>
    }
    <domain: "local", opset_import: ["" : 13]>
    Pure (a) => (b) {
      b = Neg (a)
    }
    <domain: "local", opset_import: ["" : 13, "custom" : 1]>
    Effect (a) => (b) {
      b = custom.Print (a)
    }
  )");
  ASSERT_TRUE(model);
  // Not run_pass_checked: the evaluator cannot run custom-domain ops.
  auto result = run_pass(*model, "prune");
  // pure_call, and pure_if with its two nested nodes.
  EXPECT_EQ(result.rewrites, 4);
  EXPECT_EQ(op_types(model->graph()), (std::vector<std::string>{"Relu", "Effect", "If"}));
  // Inside the kept If, the pure branch still computes its output.
  EXPECT_EQ(count_ops(*model, "Neg"), 2);  // the else branch and the body of Pure
  EXPECT_EQ(model->functions().size(), 2u);
}

TEST(Prune, DeadNodesAppendedOutOfOrder) {
  // A previous pass may leave new nodes after their consumers in the order; removal must not
  // depend on the order.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      d = Relu (x)
      y = Neg (x)
      e = Exp (d)
    }
  )");
  ASSERT_TRUE(model);
  ir::Graph& g = model->graph();
  ir::Node* relu = g.find_local("d")->producer();
  ir::Node* late = g.add_node("Abs", {g.find_local("x")}, {"late"});
  relu->set_input(0, late->output(0));
  // The evaluator runs nodes in their stored order, so the reference is a sorted copy.
  auto before = model->clone();
  ASSERT_TRUE(before->finalize().ok());
  auto result = run_pass(*model, "prune");
  EXPECT_EQ(same_outputs(*before, *model), "");
  EXPECT_EQ(result.rewrites, 3);
  EXPECT_EQ(op_types(g), (std::vector<std::string>{"Neg"}));
  for (const char* name : {"late", "d", "e"}) EXPECT_EQ(g.find_local(name), nullptr) << name;
  EXPECT_EQ(onnx_errors(*model), "");
}

// A long chain with a dead branch of the same length: a recursive walk would overflow the stack
// (and a quadratic one would run into the test's timeout; bench/ measures the speed).
TEST(Prune, LongChainsArePrunedWithoutRecursion) {
  constexpr int kLength = 200000;
  onnx::ModelProto proto;
  proto.set_ir_version(8);
  proto.add_opset_import()->set_version(13);
  auto* g = proto.mutable_graph();
  g->set_name("chain");
  auto add_io = [](onnx::ValueInfoProto* info, const std::string& name) {
    info->set_name(name);
    auto* t = info->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_value(2);
  };
  add_io(g->add_input(), "x");
  for (const char* prefix : {"live", "dead"}) {
    std::string prev = "x";
    for (int i = 0; i < kLength; ++i) {
      auto* n = g->add_node();
      n->set_op_type("Neg");
      n->add_input(prev);
      prev = std::string(prefix) + std::to_string(i);
      n->add_output(prev);
    }
  }
  add_io(g->add_output(), "live" + std::to_string(kLength - 1));
  auto model = ir::Model::from_proto(std::move(proto));
  ASSERT_TRUE(model.ok()) << model.status();
  auto result = run_pass_checked(**model, "prune");
  EXPECT_EQ(result.rewrites, kLength);
  EXPECT_EQ((*model)->graph().num_nodes(), static_cast<size_t>(kLength));
  EXPECT_EQ((*model)->graph().find_local("dead0"), nullptr);
}

}  // namespace
}  // namespace graft::testing
