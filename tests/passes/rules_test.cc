// The rule driver, transactions, explanations and the rewriter (core/passes/rules.h, rewriter.h).
#include "core/passes/rules.h"
#include "core/eval/executor.h"

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

// Two toy rules: x + 0 -> x, and 1 * x -> x. Removing the Add makes the Mul read x; the driver
// must revisit what changed rather than stop after one sweep.
std::vector<Rule> toy_rules(int* add_visits) {
  auto drop = [](ir::Node& n, Rewriter& rw, int64_t neutral) -> bool {
    if (n.inputs().size() != 2) return no_match(n, "not two operands");
    for (int side = 0; side < 2; ++side) {
      auto t = constant_tensor(n.input(1 - side));
      if (t && all_equal(*t, neutral))
        return rw.replace_node(&n, {n.input(side)}, /*allow_identity=*/false);
    }
    return no_match(n, "no neutral constant operand");
  };
  return {{"add_zero",
           {"Add"},
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

// Opset imports (the model's and a function's) and the IR version are edits like any other: a
// rollback puts them back, a release keeps them (passes that import a domain or raise the opset
// for a try rely on it).
TEST(Model, OpsetImportsAndIrVersionAreJournaled) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] w) { w = local.F (x) }
    <domain: "local", opset_import: ["" : 13]>
    F (a) => (b) { b = Neg (a) }
  )");
  ASSERT_TRUE(model);
  ASSERT_EQ(model->functions().size(), 1u);
  const ir::Graph* body = model->functions()[0].body.get();
  const std::string main_before = model->rest().SerializeAsString();
  const std::string fn_before = model->functions()[0].rest.SerializeAsString();
  const uint64_t generation = model->generation();
  auto edit = [&] {
    model->edit_opset_imports(nullptr, [](ir::Model::OpsetImports& imports) {
      imports.Mutable(0)->set_version(17);
      auto* op = imports.Add();
      op->set_domain("com.microsoft");
      op->set_version(1);
    });
    model->edit_opset_imports(
        body, [](ir::Model::OpsetImports& imports) { imports.Mutable(0)->set_version(17); });
    model->set_ir_version(9);
  };
  {
    const ir::Model::Checkpoint cp = model->checkpoint();
    edit();
    EXPECT_EQ(model->opset(""), 17);
    EXPECT_EQ(model->opset("com.microsoft"), 1);
    EXPECT_EQ(model->functions()[0].rest.opset_import(0).version(), 17);
    EXPECT_EQ(model->rest().ir_version(), 9);
    EXPECT_NE(model->generation(), generation);
    model->rollback(cp);
  }
  EXPECT_EQ(model->rest().SerializeAsString(), main_before);
  EXPECT_EQ(model->functions()[0].rest.SerializeAsString(), fn_before);
  EXPECT_EQ(model->opset(""), 13);
  EXPECT_EQ(model->generation(), generation);
  {
    const ir::Model::Checkpoint cp = model->checkpoint();
    edit();
    model->release(cp);
  }
  EXPECT_EQ(model->opset(""), 17);
  EXPECT_EQ(model->functions()[0].rest.opset_import(0).version(), 17);
  EXPECT_EQ(model->rest().ir_version(), 9);
  // A graph that is no function's body changes nothing.
  const std::string now = model->rest().SerializeAsString();
  auto other = parse_text(kChain);
  model->edit_opset_imports(&other->graph(),
                            [](ir::Model::OpsetImports& imports) { imports.Clear(); });
  EXPECT_EQ(model->rest().SerializeAsString(), now);
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

// ------------------------------------------------------------------------- transactions

constexpr const char* kTransactionModel = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[2] x, bool c) => (float[2] y, float[2] z, float[2] w) {
    n = Neg (x)
    y = Abs (n)
    cap = Relu (x)
    z = If (c) <
      then_branch = t () => (float[2] a) { a = Neg (cap) },
      else_branch = e () => (float[2] b) { b = Abs (cap) }
    >
    w = Add (n, x)
  }
)";

// Every kind of edit, made inside a transaction and undone: the model serializes as before,
// passes the structural checks, and a pass run afterwards gives the same result, names
// included, as on a copy that never saw the edits.
TEST(Transaction, RollbackRestoresEveryKindOfEdit) {
  auto model = parse_text(kTransactionModel);
  ASSERT_TRUE(model);
  auto pristine = model->clone();
  const ModelFingerprint before = fingerprint(*model);
  const uint64_t generation = model->generation();
  ir::Graph& g = model->graph();
  Rewriter rw(*model);
  {
    Rewriter::Transaction transaction(rw);
    ir::Value* x = g.find_local("x");
    ir::Value* n = g.find_local("n");
    // Facts asked mid-transaction must not survive it.
    EXPECT_EQ(g.find_local("w")->fact().rank(), 1);
    ir::Node* relu = rw.add_node(g, "Relu", {x}, 1, n->producer());
    rw.set_attr(relu, int_attr("dummy", 1));
    EXPECT_TRUE(rw.replace_node(n->producer(), {relu->output(0)}));  // n's readers move
    ir::Node* add = g.find_local("w")->producer();
    rw.set_input(add, 1, relu->output(0));
    rw.set_attr(add, int_attr("also", 2));
    rw.remove_attr(add, "also");
    rw.set_inputs(add, {x});
    // A graph output moves onto another producer (move_output_name), an If with subgraphs
    // capturing `cap` is erased, a node becomes a constant (make_initializer).
    ir::Node* sign = rw.add_node(g, "Sign", {x}, 1);
    EXPECT_TRUE(rw.replace_all_uses(g.find_local("z"), sign->output(0)));
    for (ir::Node* node : g.nodes()) {
      if (node->is("If")) {
        EXPECT_TRUE(rw.erase(node));
      }
    }
    EXPECT_TRUE(rw.erase(g.find_local("cap")->producer()));
    onnx::TensorProto t;
    t.set_data_type(onnx::TensorProto::FLOAT);
    t.add_dims(2);
    t.add_float_data(1);
    t.add_float_data(2);
    EXPECT_TRUE(rw.replace_with_constant(g.find_local("y")->producer(), t));
    rw.add_constant(g, t, "extra");
    g.find_local("x")->set_type(g.find_local("x")->type() ? *g.find_local("x")->type()
                                                          : onnx::TypeProto());
    EXPECT_NE(fingerprint(*model).structure, before.structure);
    transaction.rollback();
  }
  EXPECT_EQ(model->generation(), generation);
  EXPECT_TRUE(verify_unchanged("rollback", before, fingerprint(*model)).ok()) << print(*model);
  ASSERT_TRUE(model->verify().ok());
  ASSERT_TRUE(model->finalize().ok());
  EXPECT_EQ(g.find_local("w")->fact().rank(), 1);
  // The same pass on the rolled-back model and on the untouched copy: the same bytes.
  run_pass(*model, "eliminate_noop");
  run_pass(*pristine, "eliminate_noop");
  run_pass(*model, "cse");
  run_pass(*pristine, "cse");
  EXPECT_EQ(print(*model), print(*pristine));
  EXPECT_EQ(model->to_proto().SerializeAsString(), pristine->to_proto().SerializeAsString());
}

// The positional removals (a Loop's carried value from the node and its body): refused while
// read, and undone exactly; a committed removal leaves a model that verifies, whose later
// outputs moved down one place.
TEST(Transaction, RollbackRestoresRemovedInputsAndOutputs) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, float[1] z) => (float[2] y) <int64 trips = {3}, bool go = {1}> {
      y, s, last = Loop (trips, go, x, z) <body = body (int64 i, bool c, float[2] v, float[1] a)
          => (bool co, float[2] vo, float[1] ao, float[2] each) {
        co = Identity (c)
        vo = Neg (v)
        ao = Abs (a)
        each = Identity (vo)
      }>
    }
  )");
  ASSERT_TRUE(model);
  ir::Node* loop = only_node(model->graph(), "Loop");
  ASSERT_NE(loop, nullptr);
  ir::Graph& body = *loop->subgraphs().at(0).graph;
  const ModelFingerprint before = fingerprint(*model);
  Rewriter rw(*model);
  for (bool commit : {false, true}) {
    Rewriter::Transaction transaction(rw);
    EXPECT_FALSE(rw.remove_graph_input(body, 3));             // `a` is still read by the Abs
    EXPECT_FALSE(rw.remove_graph_output(model->graph(), 0));  // a model's interface
    EXPECT_FALSE(rw.remove_output(loop, 0));                  // y is a graph output
    EXPECT_TRUE(rw.remove_graph_output(body, 2));             // ao, and the Abs with it
    EXPECT_TRUE(rw.remove_output(loop, 1));                   // s
    EXPECT_TRUE(rw.remove_graph_input(body, 3));
    rw.set_inputs(loop, {loop->input(0), loop->input(1), loop->input(2)});
    EXPECT_EQ(op_types(body), (std::vector<std::string>{"Identity", "Neg", "Identity"}));
    EXPECT_EQ(body.outputs().size(), 3u);
    EXPECT_EQ(body.outputs()[2].value->name(), "each");
    EXPECT_EQ(loop->output(1)->name(), "last");
    EXPECT_EQ(loop->output(1)->producer_index(), 1);
    if (commit) {
      transaction.commit();
      break;
    }
    transaction.rollback();
    EXPECT_TRUE(verify_unchanged("rollback", before, fingerprint(*model)).ok()) << print(*model);
    ASSERT_TRUE(model->verify().ok());
    EXPECT_EQ(loop->output(2)->producer_index(), 2);
    EXPECT_TRUE(body.outputs()[3].value->is_output_of(body));
  }
  ASSERT_TRUE(model->finalize().ok());
  ASSERT_TRUE(model->verify().ok());
  EXPECT_EQ(onnx_errors(*model), "");
  auto out =
      eval::run_model(*model, {{"x", *eval::Tensor::zeros(onnx::TensorProto::FLOAT, {2}, 64)},
                               {"z", *eval::Tensor::zeros(onnx::TensorProto::FLOAT, {1}, 64)}});
  EXPECT_TRUE(out.ok()) << out.status();
}

TEST(Transaction, CommitKeepsTheEditsAndNestedRollbackUndoesOnlyItsOwn) {
  auto model = parse_text(kTransactionModel);
  ASSERT_TRUE(model);
  ir::Graph& g = model->graph();
  Rewriter rw(*model);
  ir::Node* outer_node = nullptr;
  {
    Rewriter::Transaction outer(rw);
    outer_node = rw.add_node(g, "Relu", {g.find_local("x")}, 1);
    {
      Rewriter::Transaction inner(rw);
      rw.add_node(g, "Sigmoid", {g.find_local("x")}, 1);
    }  // rolled back by its destructor
    outer.commit();
  }
  EXPECT_FALSE(outer_node->dead());
  EXPECT_EQ(count_ops(*model, "Relu"), 2);
  EXPECT_EQ(count_ops(*model, "Sigmoid"), 0);
  EXPECT_FALSE(model->journaling());
  ASSERT_TRUE(model->finalize().ok());
  EXPECT_TRUE(model->verify().ok());
}

// A rule may build its replacement and then give up: the driver undoes it.
TEST(RuleDriver, UndoesTheEditsOfARuleThatGivesUp) {
  auto model = parse_text(kChain);
  ASSERT_TRUE(model);
  const ModelFingerprint before = fingerprint(*model);
  int tries = 0;
  std::vector<Rule> rules{{"builds_then_gives_up", {"Add", "Mul"}, [&](ir::Node& n, Rewriter& rw) {
                             ++tries;
                             ir::Node* neg = rw.add_node(*n.graph(), "Neg", {n.input(0)}, 1, &n);
                             rw.add_constant(*n.graph(), onnx::TensorProto(), "c");
                             EXPECT_TRUE(rw.replace_node(&n, {neg->output(0)}));
                             return false;
                           }}};
  RuleRunOptions options;
  options.check_transactions = true;
  RuleCounts counts = run_rules(*model, rules, options);
  EXPECT_TRUE(counts.error.ok()) << counts.error;
  EXPECT_EQ(counts.total, 0);
  EXPECT_EQ(tries, 3);  // each node once: nothing an undone attempt touched is re-queued
  EXPECT_TRUE(verify_unchanged("rules", before, fingerprint(*model)).ok());
  ASSERT_TRUE(model->finalize().ok());
  EXPECT_TRUE(model->verify().ok());
}

// What the journal cannot undo (the model's own protos) is caught by the check.
TEST(RuleDriver, CheckCatchesAnEditTheRollbackCannotUndo) {
  auto model = parse_text(kChain);
  ASSERT_TRUE(model);
  std::vector<Rule> rules{{"edits_opsets", {"Add"}, [](ir::Node& n, Rewriter& rw) {
                             rw.add_node(*n.graph(), "Neg", {n.input(0)}, 1);
                             auto* op = rw.model().mutable_rest().add_opset_import();
                             op->set_domain("x.y");
                             op->set_version(1);
                             return false;
                           }}};
  RuleRunOptions options;
  options.check_transactions = true;
  RuleCounts counts = run_rules(*model, rules, options);
  ASSERT_FALSE(counts.error.ok());
  EXPECT_NE(counts.error.message().find("edits_opsets"), std::string::npos) << counts.error;
  // Without the check the run goes on (the opset import is the rule's bug, not the driver's).
  auto again = parse_text(kChain);
  EXPECT_TRUE(run_rules(*again, rules).error.ok());
}

// Rules undoing each other stop at the cap, and the result says so.
TEST(RuleDriver, ReportsHittingTheCap) {
  auto model = parse_text(kChain);
  ASSERT_TRUE(model);
  auto flip = [](ir::Node& n, Rewriter& rw) {
    rw.set_attr(&n, int_attr("flip", n.attr_int("flip", 0) ^ 1));
    return true;
  };
  RuleCounts counts = run_rules(*model, {{"flip", {"Add"}, flip}});
  EXPECT_TRUE(counts.capped);
  EXPECT_GT(counts.total, 0);
  auto fixed = parse_text(kChain);
  int visits = 0;
  EXPECT_FALSE(run_rules(*fixed, toy_rules(&visits)).capped);
}

TEST(RuleDriver, ExplainsWhyARuleDidNotMatch) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, float[2] z) => (float[2] y) <float[2] zero = {0, 0}> {
      named = Add (x, z)
      y = Add (named, zero)
    }
  )");
  ASSERT_TRUE(model);
  int visits = 0;
  RuleRunOptions options;
  options.explain = {"add_zero"};
  RuleCounts counts = run_rules(*model, toy_rules(&visits), options);
  EXPECT_EQ(counts.total, 1);
  ASSERT_EQ(counts.explanations.size(), 1u);
  const RuleExplanation& e = counts.explanations[0];
  EXPECT_EQ(e.rule, "add_zero");
  EXPECT_EQ(e.node, "named");
  EXPECT_EQ(e.op, "Add");
  EXPECT_EQ(e.reason, "no neutral constant operand");
  // Not asked: nothing recorded, and no listener left on the model.
  auto quiet = parse_text(kChain);
  EXPECT_TRUE(run_rules(*quiet, toy_rules(&visits)).explanations.empty());
  EXPECT_FALSE(NoMatchListener::listening(*model));
  EXPECT_FALSE(NoMatchListener::listening(*quiet));
}

}  // namespace
}  // namespace graft::testing
