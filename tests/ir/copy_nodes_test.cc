// Graph::copy_nodes: nodes copied into another graph with their subgraphs, every value they
// define renamed, values read from outside them (inputs and captures) resolved by the caller.
#include <algorithm>
#include <set>

#include "tests/testing.h"

namespace graft::testing {
namespace {

const ir::Graph* subgraph(const ir::Node& n, const std::string& attr) {
  for (const auto& sub : n.subgraphs())
    if (sub.attr_name == attr) return sub.graph.get();
  return nullptr;
}

// The If's then branch holds a Loop whose body captures a branch value (s), a main graph value
// (w) and has a nested If capturing the Loop body's own value (acc) and s.
constexpr char kBranchWithLoop[] = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[2] x, float[2] w) => (float[2] y) {
    c = Constant <value = bool {1}> ()
    r = If (c) <
      then_branch = then_g () => (float[2] a) {
        s = Mul (x, w)
        trip = Constant <value = int64 {3}> ()
        go = Constant <value = bool {1}> ()
        a = Loop (trip, go, x) <
          body = body (int64 i, bool c_in, float[2] acc) => (bool c_out, float[2] acc_out) {
            c_out = Identity (c_in)
            t = Add (acc, s)
            acc_out = If (c_in) <
              then_branch = inner_then () => (float[2] p) {
                p = Sub (t, w)
              },
              else_branch = inner_else () => (float[2] q) {
                q = Neg (acc)
              }>
          }>
      },
      else_branch = else_g () => (float[2] b) {
        b = Neg (x)
      }>
    y = Abs (r)
  }
)";

// Copies the then branch of the If computing `r` into the main graph in the given order, points
// r's reader at the copied result and removes the If.
void inline_then_branch(ir::Model& model, bool reversed) {
  ir::Graph& g = model.graph();
  ir::Node* if_node = producer(g, "r");
  ASSERT_TRUE(if_node);
  const ir::Graph* branch = subgraph(*if_node, "then_branch");
  ASSERT_TRUE(branch);
  std::vector<const ir::Node*> srcs;
  for (const ir::Node* n : branch->nodes()) srcs.push_back(n);
  if (reversed) std::reverse(srcs.begin(), srcs.end());
  std::vector<ir::Value*> asked;
  std::vector<ir::Node*> copies = g.copy_nodes(srcs, [&](ir::Value* v) {
    asked.push_back(v);
    return v;  // x and w: main graph values, in scope where the copies go
  });
  ASSERT_EQ(copies.size(), srcs.size());
  // Only the values from outside the branch were asked, each once.
  std::set<std::string> asked_names;
  for (ir::Value* v : asked) asked_names.insert(v->name());
  EXPECT_EQ(asked_names, (std::set<std::string>{"x", "w"}));
  EXPECT_EQ(asked.size(), 2u);
  ir::Value* result = nullptr;
  for (size_t i = 0; i < srcs.size(); ++i) {
    EXPECT_EQ(copies[i]->graph(), &g);
    EXPECT_EQ(copies[i]->op_type(), srcs[i]->op_type());
    if (srcs[i]->output(0) == branch->outputs()[0].value) result = copies[i]->output(0);
  }
  ASSERT_TRUE(result);
  ir::Graph::replace_all_uses(if_node->output(0), result);
  ASSERT_TRUE(g.remove_node(if_node));
  ASSERT_TRUE(model.finalize().ok());
  ASSERT_TRUE(model.verify().ok()) << model.verify();
}

TEST(CopyNodes, LoopWithNestedIfMovesOutOfABranch) {
  for (bool reversed : {false, true}) {
    SCOPED_TRACE(reversed ? "reversed order" : "stored order");
    auto model = parse_text(kBranchWithLoop);
    ASSERT_TRUE(model);
    auto before = model->clone();
    inline_then_branch(*model, reversed);
    EXPECT_EQ(count_ops(*model, "Neg"), 1);  // the nested If's else branch; the outer else left
    EXPECT_EQ(count_ops(*model, "If"), 1);   // the nested one, inside the copied Loop body
    ir::Graph& g = model->graph();
    ir::Node* loop = producer(g, "y")->input(0)->producer();
    ASSERT_TRUE(loop && loop->is("Loop"));
    const ir::Graph* body = subgraph(*loop, "body");
    ASSERT_TRUE(body);
    EXPECT_EQ(body->parent(), loop);
    // The body's Add reads its own carried value and the copy of s (now in the main graph).
    ir::Node* nested_if = body->outputs()[1].value->producer();
    ASSERT_TRUE(nested_if && nested_if->is("If"));
    const ir::Graph* inner_then = subgraph(*nested_if, "then_branch");
    ASSERT_TRUE(inner_then);
    ir::Node* sub = inner_then->outputs()[0].value->producer();
    ASSERT_TRUE(sub && sub->is("Sub"));
    ir::Node* t = sub->input(0)->producer();
    ASSERT_TRUE(t && t->is("Add"));
    EXPECT_EQ(t->graph(), body);
    EXPECT_EQ(t->input(0), body->inputs()[2].value);
    ir::Node* s = t->input(1)->producer();
    ASSERT_TRUE(s && s->is("Mul"));
    EXPECT_EQ(s->graph(), &g);
    EXPECT_EQ(sub->input(1), g.find_local("w"));
    // Captured uses are recorded on the outer values (pruning and sorting rely on them).
    bool captured = false;
    for (const ir::Use& u : s->output(0)->uses()) captured |= u.node == t;
    EXPECT_TRUE(captured);
    EXPECT_TRUE(names_unique(*model));
    EXPECT_EQ(same_outputs(*before, *model), "");
    EXPECT_EQ(onnx_errors(*model), "");
    // The result saves, loads and clones like any model.
    auto reloaded = ir::Model::from_proto(model->to_proto());
    ASSERT_TRUE(reloaded.ok()) << reloaded.status();
    EXPECT_EQ(same_outputs(*before, **reloaded), "");
    EXPECT_EQ(same_outputs(*before, *model->clone()), "");
  }
}

TEST(CopyNodes, CopiesCanBeMadeTwiceWithDistinctNames) {
  auto model = parse_text(kBranchWithLoop);
  ASSERT_TRUE(model);
  ir::Graph& g = model->graph();
  ir::Node* if_node = producer(g, "r");
  const ir::Graph* branch = subgraph(*if_node, "then_branch");
  std::vector<const ir::Node*> srcs;
  for (const ir::Node* n : branch->nodes()) srcs.push_back(n);
  auto same = [](ir::Value* v) { return v; };
  auto first = g.copy_nodes(srcs, same);
  auto second = g.copy_nodes(srcs, same);
  ASSERT_EQ(first.size(), 4u);  // s, trip, go, the Loop
  ASSERT_EQ(second.size(), 4u);
  ASSERT_TRUE(model->finalize().ok());
  ASSERT_TRUE(model->verify().ok()) << model->verify();
  EXPECT_TRUE(names_unique(*model));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(CopyNodes, FunctionBodyWithFormalsBoundAndAnAbsentInput) {
  // A function body copied into the main graph: formals map to the call's actuals; the nested
  // If captures a formal and an intermediate; the unbound optional formal makes Clip's max
  // input absent.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x, bool k) => (float[2] y) {
      y = local.F (x, k)
    }
    <domain: "local", opset_import: ["" : 13]>
    F (a, flag, hi) => (b) {
      lo = Constant <value = float {-0.5}> ()
      m = Clip (a, lo, hi)
      b = If (flag) <
        then_branch = t () => (float[2] p) {
          p = Add (m, a)
        },
        else_branch = e () => (float[2] q) {
          q = Neg (m)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto before = model->clone();
  ir::Graph& g = model->graph();
  ir::Node* call = producer(g, "y");
  const ir::Graph& body = *model->functions()[0].body;
  std::vector<const ir::Node*> srcs;
  for (const ir::Node* n : body.nodes()) srcs.push_back(n);
  auto copies = g.copy_nodes(srcs, [&](ir::Value* v) -> ir::Value* {
    for (size_t i = 0; i < body.inputs().size(); ++i)
      if (body.inputs()[i].value == v) return call->input(i);  // nullptr past the call's inputs
    return nullptr;
  });
  ASSERT_EQ(copies.size(), 3u);
  ir::Node* clip = copies[1];
  ASSERT_TRUE(clip->is("Clip"));
  EXPECT_EQ(clip->input(0), g.find_local("x"));
  EXPECT_EQ(clip->input(2), nullptr);
  ir::Node* copied_if = copies[2];
  ir::Graph::replace_all_uses(call->output(0), copied_if->output(0));
  ASSERT_TRUE(g.remove_node(call));
  ASSERT_TRUE(model->finalize().ok());
  ASSERT_TRUE(model->verify().ok()) << model->verify();
  const ir::Graph* then_g = subgraph(*copied_if, "then_branch");
  ir::Node* add = then_g->outputs()[0].value->producer();
  EXPECT_EQ(add->input(0), clip->output(0));
  EXPECT_EQ(add->input(1), g.find_local("x"));
  EXPECT_TRUE(names_unique(*model));
  EXPECT_EQ(same_outputs(*before, *model), "");
}

TEST(CopyNodes, RefusesWhenASubgraphOutputHasNoValue) {
  // The nested branch outputs the formal `a` itself; with `a` unbound the copy cannot be made.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x, bool k) => (float[2] y) {
      y = local.F (x, k)
    }
    <domain: "local", opset_import: ["" : 13]>
    F (a, flag) => (b) {
      b = If (flag) <
        then_branch = t () => (float[2] a) {
          unused = Neg (a)
        },
        else_branch = e () => (float[2] q) {
          q = Neg (a)
        }>
    }
  )");
  ASSERT_TRUE(model);
  const std::string bytes = model->to_proto().SerializeAsString();
  const ir::Graph& body = *model->functions()[0].body;
  std::vector<const ir::Node*> srcs;
  for (const ir::Node* n : body.nodes()) srcs.push_back(n);
  auto copies = model->graph().copy_nodes(srcs, [](ir::Value*) -> ir::Value* { return nullptr; });
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(model->graph().num_nodes(), 1u);
  EXPECT_EQ(model->to_proto().SerializeAsString(), bytes);
  EXPECT_TRUE(model->verify().ok());
}

}  // namespace
}  // namespace graft::testing
