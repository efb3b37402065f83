// Bad input gets a precise InvalidArgument error, never a crash.
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

onnx::ModelProto relu_neg() {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] z) {
      y = Relu (x)
      z = Neg (y)
    }
  )");
  return model->to_proto();
}

void expect_invalid(const onnx::ModelProto& proto, const std::string& fragment) {
  auto model = ir::Model::parse(proto.SerializeAsString());
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(model.status().message()).find(fragment), std::string::npos)
      << model.status();
}

TEST(LoadErrors, NotProtobuf) {
  auto model = ir::Model::parse("this is not an onnx model at all \xff\xff\xff");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(model.status().message()).find("protobuf"), std::string::npos);
}

TEST(LoadErrors, EmptyBytes) {
  auto model = ir::Model::parse("");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(LoadErrors, EveryTruncationIsAnErrorOrAValidModel) {
  std::string bytes = relu_neg().SerializeAsString();
  int errors = 0;
  for (size_t len = 1; len < bytes.size(); ++len) {
    auto model = ir::Model::parse(std::string_view(bytes).substr(0, len));
    if (!model.ok()) {
      EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
      ++errors;
    } else {
      EXPECT_TRUE((*model)->verify().ok());
    }
  }
  EXPECT_GT(errors, static_cast<int>(bytes.size()) / 2);
}

TEST(LoadErrors, Cycle) {
  onnx::ModelProto proto = relu_neg();
  // Relu reads z, Neg reads y: y -> z -> y.
  proto.mutable_graph()->mutable_node(0)->set_input(0, "z");
  expect_invalid(proto, "cycle");
}

TEST(LoadErrors, InputNamingNoValue) {
  onnx::ModelProto proto = relu_neg();
  proto.mutable_graph()->mutable_node(1)->set_input(0, "nowhere");
  expect_invalid(proto, "'nowhere'");
}

TEST(LoadErrors, TwoNodesProducingOneName) {
  onnx::ModelProto proto = relu_neg();
  proto.mutable_graph()->mutable_node(1)->set_output(0, "y");
  expect_invalid(proto, "produced twice");
}

TEST(LoadErrors, GraphOutputNobodyProduces) {
  onnx::ModelProto proto = relu_neg();
  proto.mutable_graph()->mutable_output(0)->set_name("ghost");
  expect_invalid(proto, "graph output 'ghost'");
}

TEST(LoadErrors, NoGraph) {
  onnx::ModelProto proto;
  proto.set_ir_version(8);
  expect_invalid(proto, "no graph");
}

TEST(LoadErrors, DanglingNameInsideSubgraph) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool c, float[2] x) => (float[2] y) {
      y = If (c) <
        then_branch = t () => (float[2] a) { a = Relu (x) },
        else_branch = e () => (float[2] b) { b = Neg (x) }>
    }
  )");
  onnx::ModelProto proto = model->to_proto();
  proto.mutable_graph()
      ->mutable_node(0)
      ->mutable_attribute(0)
      ->mutable_g()
      ->mutable_node(0)
      ->set_input(0, "missing");
  expect_invalid(proto, "'missing'");
}

TEST(LoadErrors, NewerOpsetIsNotAnError) {
  onnx::ModelProto proto = relu_neg();
  proto.set_ir_version(99);
  proto.mutable_opset_import(0)->set_version(99);
  auto* node = proto.mutable_graph()->add_node();
  node->set_op_type("FutureOp");
  node->add_input("z");
  node->add_output("w");
  auto model = ir::Model::parse(proto.SerializeAsString());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->graph().num_nodes(), 3u);
  std::string skipped;
  EXPECT_TRUE(onnx_check(**model, true, &skipped).ok());
  EXPECT_NE(skipped.find("newer"), std::string::npos);
}

TEST(LoadErrors, DeepChainLoadsWithoutRecursion) {
  // 200k nodes in reverse order: sorting must be iterative (no stack overflow) and linear.
  onnx::ModelProto proto = relu_neg();
  auto* g = proto.mutable_graph();
  g->clear_node();
  const int n = 200000;
  for (int i = n - 1; i >= 0; --i) {
    auto* node = g->add_node();
    node->set_op_type("Relu");
    node->add_input(i == 0 ? "x" : "v" + std::to_string(i - 1));
    node->add_output(i == n - 1 ? "z" : "v" + std::to_string(i));
  }
  auto model = ir::Model::parse(proto.SerializeAsString());
  ASSERT_TRUE(model.ok()) << model.status();
  auto nodes = (*model)->graph().nodes();
  ASSERT_EQ(nodes.size(), static_cast<size_t>(n));
  EXPECT_EQ(nodes.front()->input(0)->name(), "x");
  EXPECT_EQ(nodes.back()->output(0)->name(), "z");
}

}  // namespace
}  // namespace graft::testing
