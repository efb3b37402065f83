// The rule driver, the matcher and the rewriter (core/passes/rules.h, rewriter.h).
#include "core/passes/rules.h"

#include "tests/testing.h"

namespace graft::testing {
namespace {

constexpr const char* kChain = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[2] x, float[2] z) => (float[2] y)
    <float[2] zero = {0, 0}, float one = {1}> {
    a = Add (x, zero)
    b = Mul (one, a)
    y = Add (b, z)
  }
)";

TEST(Matcher, CapturesCommutativeOperandsAndSingleUse) {
  auto model = parse_text(kChain);
  ASSERT_TRUE(model);
  ir::Graph& g = model->graph();
  ir::Node* mul = g.find_local("b")->producer();
  ir::Value* x = nullptr;
  ir::Node* add = nullptr;
  double scale = 0;
  // Mul(Add(x, 0), 1) with the constant on either side.
  auto pattern =
      m::Op("Mul", {m::Op("Add", {m::Any(&x), m::ConstAll(0)}).bind(&add).one_use(),
                    m::Scalar(&scale)})
          .commutative();
  ASSERT_TRUE(match(*mul, pattern));
  EXPECT_EQ(x, g.find_local("x"));
  EXPECT_EQ(add, g.find_local("a")->producer());
  EXPECT_EQ(scale, 1.0);
  // Not commutative: the constant is the first operand, so the pattern above fails.
  auto ordered = m::Op("Mul", {m::Op("Add", {m::Any(), m::Const()}), m::Const()});
  EXPECT_FALSE(match(*mul, ordered));
  // Single use: `a` gains a second reader.
  g.add_node("Neg", {g.find_local("a")}, {"extra"});
  EXPECT_FALSE(match(*mul, pattern));
  // Exact arity.
  EXPECT_FALSE(match(*mul, m::Op("Mul", {m::Any()}).exact()));
  EXPECT_TRUE(match(*mul, m::Op("Mul", {m::Any()})));
}

// Two toy rules: x + 0 -> x, and 1 * x -> x. Removing the Add makes the Mul read x; the driver
// must revisit what changed rather than stop after one sweep.
std::vector<Rule> toy_rules(int* add_visits) {
  auto drop = [](ir::Node& n, Rewriter& rw, int64_t neutral) {
    ir::Value* x = nullptr;
    if (!match(n, m::Op(n.op_type(), {m::Any(&x), m::ConstAll(neutral)}).exact().commutative()))
      return false;
    return rw.replace_node(&n, {x}, /*allow_identity=*/false);
  };
  return {{"add_zero", {"Add"},
           [=](ir::Node& n, Rewriter& rw) {
             ++*add_visits;
             return drop(n, rw, 0);
           }},
          {"mul_one", {"Mul"}, [=](ir::Node& n, Rewriter& rw) { return drop(n, rw, 1); }}};
}

TEST(RuleDriver, CountsPerRuleAndKeepsOutputNames) {
  auto model = parse_text(kChain);
  ASSERT_TRUE(model);
  auto before = model->clone();
  int add_visits = 0;
  RuleCounts counts = run_rules(*model, toy_rules(&add_visits));
  EXPECT_EQ(counts.total, 2);
  EXPECT_EQ(counts.rewrites.at("add_zero"), 1);
  EXPECT_EQ(counts.rewrites.at("mul_one"), 1);
  ASSERT_TRUE(model->finalize().ok());
  ASSERT_TRUE(model->verify().ok());
  EXPECT_EQ(count_ops(*model, "Add"), 1);
  EXPECT_EQ(count_ops(*model, "Mul"), 0);
  EXPECT_EQ(output_names(model->graph()), (std::vector<std::string>{"y"}));
  // The constants only the removed nodes read went with them.
  EXPECT_EQ(model->graph().find_local("zero"), nullptr);
  EXPECT_EQ(model->graph().find_local("one"), nullptr);
  EXPECT_EQ(same_outputs(*before, *model), "");
  // Each Add is visited a bounded number of times (initially, and once more when touched).
  EXPECT_LE(add_visits, 4);
}

TEST(RuleDriver, RewritesReachSubgraphsAndFunctions) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (bool c, float[2] x) => (float[2] y, float[2] w) {
      y = If (c) <
        then_branch = t () => (float[2] p) {
          zero = Constant <value = float[2] {0, 0}> ()
          nx = Neg (x)
          p = Add (nx, zero)
        },
        else_branch = e () => (float[2] q) { q = Neg (x) }
      >
      w = local.F (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    F (a) => (b) {
      one = Constant <value = float {1}> ()
      t = Neg (a)
      b = Mul (t, one)
    }
  )");
  ASSERT_TRUE(model);
  int add_visits = 0;
  RuleCounts counts = run_rules(*model, toy_rules(&add_visits));
  EXPECT_EQ(counts.total, 2);
  ASSERT_TRUE(model->finalize().ok());
  ASSERT_TRUE(model->verify().ok());
  EXPECT_EQ(count_ops(*model, "Add") + count_ops(*model, "Mul"), 0);
  // The Constant nodes only the removed nodes read went too; the Negs took the output names of
  // the branch and the function body.
  EXPECT_EQ(count_ops(*model, "Constant"), 0);
  EXPECT_EQ(count_ops(*model, "Identity"), 0);
  for (ir::Graph* g : model->all_graphs())
    for (ir::Node* n : g->nodes())
      if (n->is("Neg") && g != &model->graph()) {
        EXPECT_TRUE(n->output(0)->name() == "p" || n->output(0)->name() == "b" ||
                    n->output(0)->name() == "q")
            << n->output(0)->name();
      }
}

TEST(Rewriter, ReplaceAllUsesKeepsInterfaceNames) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, float[2] n) {
      n = Neg (x)
      y = Abs (n)
    }
  )");
  ASSERT_TRUE(model);
  ir::Graph& g = model->graph();
  Rewriter rw(*model);
  ir::Value* y = g.find_local("y");
  ir::Value* n = g.find_local("n");
  // y must keep its name; n is itself an output, so only an Identity can give it two names.
  EXPECT_FALSE(rw.replace_all_uses(y, n, /*allow_identity=*/false));
  EXPECT_TRUE(rw.replace_all_uses(y, n));
  ASSERT_TRUE(model->finalize().ok());
  ASSERT_TRUE(model->verify().ok());
  EXPECT_EQ(output_names(g), (std::vector<std::string>{"y", "n"}));
  EXPECT_TRUE(g.find_local("y")->producer()->is("Identity"));
  // The Abs is no longer read: erase() removes it; a node still read is refused.
  ir::Node* abs = nullptr;
  for (ir::Node* node : g.nodes())
    if (node->is("Abs")) abs = node;
  ASSERT_NE(abs, nullptr);
  EXPECT_TRUE(rw.erase(abs));
  EXPECT_FALSE(rw.erase(g.find_local("n")->producer()));
}

TEST(Rewriter, NewNodesAreNamedAfterTheNodeTheyReplace) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      y = Neg (x)
    }
  )");
  ASSERT_TRUE(model);
  ir::Graph& g = model->graph();
  ir::Node* neg = g.find_local("y")->producer();
  neg->mutable_proto().set_name("the_neg");
  Rewriter rw(*model);
  ir::Node* abs = rw.add_node(g, "Abs", {g.find_local("x")}, 1, neg);
  EXPECT_EQ(abs->name(), "the_neg/Abs");
  EXPECT_EQ(abs->output(0)->name(), "y_Abs");
  EXPECT_TRUE(rw.replace_node(neg, {abs->output(0)}));
  EXPECT_EQ(g.find_local("y")->producer(), abs);
}

// Below the rewriter: Graph::remove_node itself refuses a node whose output is still read (by a
// node, including one inside a subgraph capturing it, or as a graph output), so no edit can
// leave a used value without a producer.
TEST(Graph, RemoveNodeRefusesWhileAnOutputIsUsed) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, bool c) => (float[2] y, float[2] z) {
      n = Neg (x)
      y = Abs (n)
      cap = Relu (x)
      z = If (c) <
        then_branch = t () => (float[2] a) { a = Neg (cap) },
        else_branch = e () => (float[2] b) { b = Abs (cap) }
      >
    }
  )");
  ASSERT_TRUE(model);
  ir::Graph& g = model->graph();
  const std::string before = model->to_proto().SerializeAsString();
  EXPECT_FALSE(g.remove_node(g.find_local("n")->producer()));    // read by Abs
  EXPECT_FALSE(g.remove_node(g.find_local("y")->producer()));    // a graph output
  EXPECT_FALSE(g.remove_node(g.find_local("cap")->producer()));  // captured by the branches
  EXPECT_EQ(model->to_proto().SerializeAsString(), before);
  ASSERT_TRUE(model->verify().ok());
  // Once nothing reads it, it goes, and takes its unused outputs along.
  ir::Node* if_node = g.find_local("z")->producer();
  ir::Node* other = g.add_node("Neg", {g.find_local("x")}, {"z2"});
  g.move_output_name(other, 0, g.find_local("z"));
  EXPECT_TRUE(g.remove_node(if_node));
  EXPECT_TRUE(g.remove_node(g.find_local("cap")->producer()));
  EXPECT_EQ(g.find_local("cap"), nullptr);
  ASSERT_TRUE(model->finalize().ok());
  EXPECT_TRUE(model->verify().ok());
}

}  // namespace
}  // namespace graft::testing
