// Operand queries (core/passes/queries.h) that rules lean on for shapes and readers.
#include "core/passes/queries.h"

#include <string>

#include "tests/testing.h"

namespace graft::testing {
namespace {

// TopK's output t gets its last dim only from a declaration ([2, 4]), which facts never use,
// whether libonnx knows the opset (13) or not (18).
std::unique_ptr<ir::Model> topk_model(int opset) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : )" +
                          std::to_string(opset) + R"(]>
    g (float[N,8] x, int64[1] k) => (float[N,8] y, float[2,4] u) {
      y = Relu (x)
      t, i = TopK (x, k)
      u = Neg (t)
    }
  )");
  EXPECT_TRUE(model);
  if (model) model->graph().find_local("t")->set_type(float_type({2, 4}));
  return model;
}

TEST(Queries, KnownDimComesFromFactsNotFromNodeOutputDeclarations) {
  auto checked = topk_model(13);
  ASSERT_TRUE(checked);
  const ir::Graph& g = checked->graph();
  EXPECT_EQ(known_dim(g.find_local("x"), -1), 8);
  EXPECT_EQ(known_dim(g.find_local("x"), 1), 8);
  EXPECT_EQ(known_dim(g.find_local("x"), 0), std::nullopt);  // symbolic
  EXPECT_EQ(known_dim(g.find_local("x"), 2), std::nullopt);  // no such axis
  EXPECT_EQ(known_dim(g.find_local("x"), -3), std::nullopt);
  EXPECT_EQ(known_dim(g.find_local("y"), -1), 8);  // Graft's rules: Relu keeps the shape
  EXPECT_EQ(known_dim(g.find_local("t"), -1), std::nullopt);

  auto unchecked = topk_model(18);
  ASSERT_TRUE(unchecked);
  const ir::Graph& h = unchecked->graph();
  EXPECT_EQ(known_dim(h.find_local("t"), -1), std::nullopt);
  // A graph input's declaration is the model's contract.
  EXPECT_EQ(known_dim(h.find_local("x"), -1), 8);
  EXPECT_EQ(known_dim(nullptr, 0), std::nullopt);
}

TEST(Queries, OnlyReadByAllowsSeveralReadersInsideAPattern) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, float[2] m) => (float[2] y, float[2] e) {
      d = Sub (x, m)
      p = Mul (d, d)
      y = Div (d, p)
      e = Neg (x)
    }
  )");
  ASSERT_TRUE(model);
  const ir::Graph& g = model->graph();
  const ir::Value* d = g.find_local("d");
  const ir::Node* p = producer(g, "p");
  const ir::Node* y = producer(g, "y");
  EXPECT_TRUE(only_read_by(d, {p, y}));  // p reads it twice
  EXPECT_FALSE(only_read_by(d, {p}));    // y reads it too
  EXPECT_FALSE(only_read_by(d, {}));
  EXPECT_FALSE(only_read_by(g.find_local("e"), {}));  // a graph output, no reader
  EXPECT_FALSE(only_read_by(g.find_local("y"), {p, y}));
  EXPECT_FALSE(only_read_by(nullptr, {p}));
}

TEST(Queries, AttributeBuilders) {
  const onnx::AttributeProto f = float_attr("epsilon", 1e-5);
  EXPECT_EQ(f.name(), "epsilon");
  EXPECT_EQ(f.type(), onnx::AttributeProto::FLOAT);
  EXPECT_EQ(f.f(), 1e-5f);
  const onnx::AttributeProto s = string_attr("approximate", "tanh");
  EXPECT_EQ(s.name(), "approximate");
  EXPECT_EQ(s.type(), onnx::AttributeProto::STRING);
  EXPECT_EQ(s.s(), "tanh");
}

}  // namespace
}  // namespace graft::testing
