#include <set>

#include "core/ir/operands.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

std::set<std::string> function_names(const ir::Model& model) {
  std::set<std::string> names;
  for (const auto& fn : model.functions()) names.insert(fn.rest.name());
  return names;
}

std::set<std::string> imported_domains(const ir::Model& model) {
  std::set<std::string> domains;
  for (const auto& op : model.rest().opset_import()) domains.insert(op.domain());
  return domains;
}

// The fuzz seed's model (fuzz/seeds/local_functions.onnxtxt): an attribute reference set by one
// call and not by the other, a nested call, an unused output.
constexpr char kLocalFunctions[] = R"(
  <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
  g (float[4] x, float[4] lo) => (float[4] y, float[4] c, float[4] w) {
    y = local.Leaky <alpha = 0.25> (x, lo)
    c = local.Leaky (x, lo)
    w, unused = local.Twice (x)
  }
  <domain: "local", opset_import: ["" : 13]>
  Leaky <alpha> (a, m) => (b) {
    r = LeakyRelu <alpha: float = @alpha> (a)
    b = Max (r, m)
  }
  <domain: "local", opset_import: ["" : 13, "local" : 1]>
  Twice (a) => (b, c) {
    s = Add (a, a)
    b = local.Square (s)
    c = Neg (a)
  }
  <domain: "local", opset_import: ["" : 13]>
  Square (p) => (q) {
    q = Mul (p, p)
  }
)";

TEST(InlineFunctions, CallsBecomeBodiesWithAttributesBound) {
  auto model = parse_text(kLocalFunctions);
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "inline_functions");
  // Square into Twice's body, then the three calls of the main graph.
  EXPECT_EQ(result.rewrites, 4);
  EXPECT_TRUE(model->functions().empty());
  EXPECT_EQ(imported_domains(*model), (std::set<std::string>{""}));
  ir::Graph& g = model->graph();
  EXPECT_EQ(output_names(g), (std::vector<std::string>{"y", "c", "w"}));
  // y's LeakyRelu takes the call's alpha; c's call sets none, so the op's default applies.
  ir::Node* y_max = producer(g, "y");
  ASSERT_TRUE(y_max && y_max->is("Max"));
  ir::Node* y_leaky = y_max->input(0)->producer();
  ASSERT_TRUE(y_leaky && y_leaky->is("LeakyRelu"));
  ASSERT_TRUE(y_leaky->attr("alpha"));
  EXPECT_EQ(y_leaky->attr("alpha")->f(), 0.25f);
  EXPECT_TRUE(y_leaky->attr("alpha")->ref_attr_name().empty());
  EXPECT_EQ(input_names(*y_max)[1], "lo");
  ir::Node* c_leaky = producer(g, "c")->input(0)->producer();
  ASSERT_TRUE(c_leaky && c_leaky->is("LeakyRelu"));
  EXPECT_EQ(c_leaky->attributes().size(), 0);
  // w = Square(Add(x, x)) through two levels of calls.
  ir::Node* mul = producer(g, "w");
  ASSERT_TRUE(mul && mul->is("Mul"));
  ir::Node* add = mul->input(0)->producer();
  ASSERT_TRUE(add && add->is("Add"));
  EXPECT_EQ(input_names(*add), (std::vector<std::string>{"x", "x"}));
  EXPECT_EQ(count_ops(*model, "Square") + count_ops(*model, "Twice") + count_ops(*model, "Leaky"),
            0);
  EXPECT_TRUE(names_unique(*model));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineFunctions, BodyNamesNeverClashWithTheCallSite) {
  // The body defines t, y and x_out; the main graph has t and y too, and calls F twice.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] y, float[2] t) {
      t = Neg (x)
      u = local.F (t)
      y = local.F (u)
    }
    <domain: "local", opset_import: ["" : 13]>
    F (x) => (x_out) {
      t = Abs (x)
      y = Exp (t)
      x_out = Sigmoid (y)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "inline_functions");
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "Sigmoid"), 2);
  EXPECT_TRUE(names_unique(*model));
  EXPECT_EQ(output_names(model->graph()), (std::vector<std::string>{"y", "t"}));
  EXPECT_EQ(producer_op(model->graph(), "y"), "Sigmoid");
  EXPECT_EQ(producer_op(model->graph(), "t"), "Neg");
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineFunctions, AttributeReferenceOfAnotherTypeStays) {
  // The call gives alpha as an integer where the body declares a float reference: invalid, so
  // neither binding it nor dropping it would be faithful.
  expect_no_rewrite("inline_functions", R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[4] x) => (float[4] y) {
      y = local.Leaky <alpha = 2> (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    Leaky <alpha> (a) => (b) {
      b = LeakyRelu <alpha: float = @alpha> (a)
    }
  )",
                    compare_outputs(Outputs::kNotCompared));  // the evaluator would accept it
}

TEST(InlineFunctions, AttributeReferencesInsideNestedSubgraphs) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[4] x, bool k) => (float[4] y) {
      y = local.F <alpha = 0.5, beta = 0.75> (x, k)
    }
    <domain: "local", opset_import: ["" : 13]>
    F <alpha, beta> (a, flag) => (b) {
      b = If (flag) <
        then_branch = t () => (float[4] p) {
          p = LeakyRelu <alpha: float = @alpha> (a)
        },
        else_branch = e () => (float[4] q) {
          q = Elu <alpha: float = @beta> (a)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto before = model->clone();
  auto result = run_pass_checked(*model, "inline_functions");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(count_ops(*model, "F"), 0);
  ir::Node* if_node = producer(model->graph(), "y");
  ASSERT_TRUE(if_node && if_node->is("If"));
  for (const auto& sub : if_node->subgraphs()) {
    ir::Node* inner = sub.graph->outputs()[0].value->producer();
    ASSERT_TRUE(inner && inner->attr("alpha"));
    EXPECT_EQ(inner->attr("alpha")->f(), inner->is("LeakyRelu") ? 0.5f : 0.75f);
    EXPECT_EQ(inner->input(0), model->graph().find_local("x"));
  }
  // Both branches run on some of the seeds.
  for (uint32_t seed = 1; seed <= 6; ++seed) EXPECT_EQ(same_outputs(*before, *model, seed), "");
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineFunctions, ReferencePassedOnThroughANestedCall) {
  // Outer's body calls Inner with alpha = @alpha: once Inner is inlined into Outer, its
  // LeakyRelu refers to Outer's alpha, which the main graph's call sets.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[4] x) => (float[4] y, float[4] z) {
      y = local.Outer <alpha = 0.5> (x)
      z = local.Outer (x)
    }
    <domain: "local", opset_import: ["" : 13, "local" : 1]>
    Outer <alpha> (a) => (b) {
      b = local.Inner <alpha: float = @alpha> (a)
    }
    <domain: "local", opset_import: ["" : 13]>
    Inner <alpha> (a) => (b) {
      b = LeakyRelu <alpha: float = @alpha> (a)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "inline_functions");
  EXPECT_EQ(result.rewrites, 3);
  EXPECT_TRUE(model->functions().empty());
  ir::Node* y = producer(model->graph(), "y");
  ASSERT_TRUE(y && y->is("LeakyRelu") && y->attr("alpha"));
  EXPECT_EQ(y->attr("alpha")->f(), 0.5f);
  ir::Node* z = producer(model->graph(), "z");
  ASSERT_TRUE(z && z->is("LeakyRelu"));
  EXPECT_EQ(z->attributes().size(), 0);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineFunctions, MissingOptionalInputsAndOutputs) {
  // The call leaves F's optional `hi` out (an empty name) and ignores its second output; Clip
  // then has no max, and the unused output's nodes are dead code for prune.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[4] x) => (float[4] y) {
      lo = Constant <value = float {-0.5}> ()
      y, = local.F (x, lo, )
    }
    <domain: "local", opset_import: ["" : 13]>
    F (a, low, hi) => (b, c) {
      b = Clip (a, low, hi)
      c = Neg (a)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "inline_functions");
  EXPECT_EQ(result.rewrites, 1);
  ir::Node* clip = producer(model->graph(), "y");
  ASSERT_TRUE(clip && clip->is("Clip"));
  EXPECT_EQ(input_names(*clip), (std::vector<std::string>{"x", "lo", ""}));
  EXPECT_TRUE(model->functions().empty());
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineFunctions, FormalAsResultAndGraphOutputs) {
  // F passes `a` through as its first result: the call's output, a graph output, becomes an
  // Identity of the actual input; the second result keeps the output name on the copied node.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] y, float[2] z) {
      y, z = local.F (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    F (a) => (a, n) {
      n = Neg (a)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "inline_functions");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(output_names(model->graph()), (std::vector<std::string>{"y", "z"}));
  EXPECT_EQ(producer_op(model->graph(), "y"), "Identity");
  EXPECT_EQ(producer_op(model->graph(), "z"), "Neg");
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineFunctions, UnboundFormalAsUsedResultStays) {
  // The call reads F's result `hi`, which is its own unbound optional input: nothing defines it.
  expect_no_rewrite("inline_functions", R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] y, float[2] z) {
      y, z = local.F (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    F (a, hi) => (n, hi) {
      n = Neg (a)
    }
  )",
                    compare_outputs(Outputs::kNotCompared));  // the evaluator cannot run it
}

TEST(InlineFunctions, RecursiveFunctionsStayOthersInline) {
  // R calls itself, A and B call each other, C calls A: none of them is inlined (nor does the
  // pass loop). D is an ordinary function and is.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] y, float[2] r, float[2] c) {
      y = local.D (x)
      r = local.R (x)
      c = local.C (x)
    }
    <domain: "local", opset_import: ["" : 13, "local" : 1]>
    R (a) => (b) {
      b = local.R (a)
    }
    <domain: "local", opset_import: ["" : 13, "local" : 1]>
    A (a) => (b) {
      b = local.B (a)
    }
    <domain: "local", opset_import: ["" : 13, "local" : 1]>
    B (a) => (b) {
      n = Neg (a)
      b = local.A (n)
    }
    <domain: "local", opset_import: ["" : 13, "local" : 1]>
    C (a) => (b) {
      e = local.D (a)
      b = local.A (e)
    }
    <domain: "local", opset_import: ["" : 13]>
    D (a) => (b) {
      b = Abs (a)
    }
  )");
  ASSERT_TRUE(model);
  // Not run_pass_checked: the evaluator rejects the recursion (before and after alike).
  auto result = run_pass(*model, "inline_functions");
  // D into C's body and into the main graph.
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(function_names(*model), (std::set<std::string>{"R", "A", "B", "C"}));
  EXPECT_EQ(producer_op(model->graph(), "y"), "Abs");
  EXPECT_EQ(producer_op(model->graph(), "r"), "R");
  EXPECT_EQ(producer_op(model->graph(), "c"), "C");
  EXPECT_EQ(imported_domains(*model), (std::set<std::string>{"", "local"}));
  // A second run finds nothing more.
  EXPECT_FALSE(run_pass(*model, "inline_functions").changed);
}

TEST(InlineFunctions, DifferentOpsetVersionStays) {
  // F imports opset 12 where the model has 13: inlining would change its ops' versions.
  expect_no_rewrite("inline_functions", R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] y) {
      y = local.F (x)
    }
    <domain: "local", opset_import: ["" : 12]>
    F (a) => (b) {
      b = Relu (a)
    }
  )");
}

TEST(InlineFunctions, DomainTheModelDoesNotImportIsAdded) {
  // Only F imports the default domain: the model gets the import at F's version.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["local" : 1]>
    g (float[2] x) => (float[2] y) {
      y = local.F (x)
    }
    <domain: "local", opset_import: ["" : 14]>
    F (a) => (b) {
      b = Relu (a)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "inline_functions");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(model->opset(""), 14);
  EXPECT_EQ(imported_domains(*model), (std::set<std::string>{""}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineFunctions, DomainTheModelUsesWithoutImportingStays) {
  // The model's own Abs has no version (no import of the default domain); importing F's would
  // give it one, and with it rules it was never held to (verify fuzzer: an If missing
  // then_branch became invalid once the inlined body brought the import).
  expect_no_rewrite("inline_functions", R"(
    <ir_version: 8, opset_import: ["local" : 1]>
    g (float[2] x) => (float[2] y, float[2] z) {
      y = local.F (x)
      z = Abs (x)
    }
    <domain: "local", opset_import: ["" : 14]>
    F (a) => (b) {
      b = Relu (a)
    }
  )",
                    compare_outputs(Outputs::kSameIfVerifiable));
}

TEST(InlineFunctions, CallsInsideIfBranchAndLoopBody) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (bool k, float[2] x) => (float[2] y, float[2] z) {
      y = If (k) <
        then_branch = t () => (float[2] p) {
          p = local.F (x)
        },
        else_branch = e () => (float[2] q) {
          q = Neg (x)
        }>
      trip = Constant <value = int64 {3}> ()
      go = Constant <value = bool {1}> ()
      z = Loop (trip, go, x) <
        body = body (int64 i, bool c_in, float[2] acc) => (bool c_out, float[2] acc_out) {
          c_out = Identity (c_in)
          acc_out = local.F (acc)
        }>
    }
    <domain: "local", opset_import: ["" : 13]>
    F (a) => (b) {
      h = Constant <value = float {0.5}> ()
      b = Mul (a, h)
    }
  )");
  ASSERT_TRUE(model);
  auto before = model->clone();
  auto result = run_pass_checked(*model, "inline_functions");
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "F"), 0);
  EXPECT_EQ(count_ops(*model, "Mul"), 2);
  ir::Node* if_node = producer(model->graph(), "y");
  ASSERT_TRUE(if_node);
  for (const auto& sub : if_node->subgraphs())
    if (sub.attr_name == "then_branch") {
      ir::Node* mul = sub.graph->outputs()[0].value->producer();
      ASSERT_TRUE(mul && mul->is("Mul"));
      EXPECT_EQ(mul->graph(), sub.graph.get());
      EXPECT_EQ(output_names(*sub.graph), (std::vector<std::string>{"p"}));
    }
  EXPECT_TRUE(model->functions().empty());
  for (uint32_t seed = 1; seed <= 6; ++seed) EXPECT_EQ(same_outputs(*before, *model, seed), "");
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(InlineFunctions, KeepFunctionsOption) {
  RewriteOptions keep = compare_outputs(Outputs::kSame);
  keep.pass_options = {{"keep_functions", "true"}};
  expect_no_rewrite("inline_functions", kLocalFunctions, keep);
}

TEST(InlineFunctions, UncalledFunctionsStay) {
  // A function nobody calls may be there for a runtime's sake: only functions the pass left
  // without calls are removed.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] y) {
      y = local.F (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    F (a) => (b) {
      b = Relu (a)
    }
    <domain: "local", opset_import: ["" : 13]>
    Library (a) => (b) {
      b = Neg (a)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "inline_functions");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(function_names(*model), (std::set<std::string>{"Library"}));
  EXPECT_EQ(imported_domains(*model), (std::set<std::string>{"", "local"}));
}

TEST(InlineFunctions, StandardDomainFunctionsStay) {
  expect_no_rewrite("inline_functions", R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      y = MyOp (x)
    }
    <domain: "", opset_import: ["" : 13]>
    MyOp (a) => (b) {
      b = Relu (a)
    }
  )",
                    compare_outputs(Outputs::kSameIfVerifiable));
}

TEST(InlineFunctions, ExponentialNestingIsBounded) {
  // F0 calls F1 twice, F1 calls F2 twice, ...: fully inlined, F0 would be 2^30 nodes.
  std::string text = R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] y) {
      y = local.F0 (x)
    }
  )";
  constexpr int kDepth = 30;
  for (int i = 0; i < kDepth; ++i)
    text += "<domain: \"local\", opset_import: [\"\" : 13, \"local\" : 1]>\nF" + std::to_string(i) +
            " (a) => (b) {\n  t = local.F" + std::to_string(i + 1) + " (a)\n  b = local.F" +
            std::to_string(i + 1) + " (t)\n}\n";
  text += "<domain: \"local\", opset_import: [\"\" : 13]>\nF" + std::to_string(kDepth) +
          " (a) => (b) {\n  b = Neg (a)\n}\n";
  auto model = parse_text(text);
  ASSERT_TRUE(model);
  const size_t nodes = model->total_nodes();
  // Not run_pass_checked: the reference would run 2^30 Negs. Nothing is inlined, in any round.
  EXPECT_FALSE(run_pass(*model, "inline_functions").changed);
  PipelineConfig config = test_pipeline_config();
  config.passes = {"inline_functions", "prune"};
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(model->total_nodes(), nodes);
  EXPECT_EQ(model->functions().size(), static_cast<size_t>(kDepth + 1));
}

TEST(InlineFunctions, LargeConstantsCountTowardsGrowth) {
  // F's body holds a 256 KiB Constant: two calls may be inlined, 64 would hold 16 MiB of copies.
  for (int calls : {2, 64}) {
    SCOPED_TRACE(calls);
    std::string text = R"(
      <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
      g (float[2] x) => (float[2] y0) {
        y0 = local.F (x)
    )";
    for (int i = 1; i < calls; ++i)
      text += "y" + std::to_string(i) + " = local.F (y" + std::to_string(i - 1) + ")\n";
    text += R"(
      }
      <domain: "local", opset_import: ["" : 13]>
      F (a) => (b) {
        big = Constant <value = float[2] {1.0, 2.0}> ()
        s = ReduceSum <keepdims = 0> (big)
        b = Add (a, s)
      }
    )";
    // The graph output must be the last call's.
    text.replace(text.find("float[2] y0)"), 12, "float[2] y" + std::to_string(calls - 1) + ")");
    auto model = parse_text(text);
    ASSERT_TRUE(model);
    ir::Node* big = producer(*model->functions()[0].body, "big");
    ASSERT_TRUE(big);
    onnx::TensorProto tensor = big->attr("value")->t();
    tensor.clear_float_data();
    tensor.set_dims(0, 64 << 10);
    tensor.set_raw_data(std::string((64 << 10) * 4, '\0'));
    big->mutable_proto().mutable_attribute(0)->mutable_t()->Swap(&tensor);
    auto result = run_pass(*model, "inline_functions");
    EXPECT_EQ(result.rewrites, calls == 2 ? 2 : 0);
    EXPECT_EQ(model->functions().size(), calls == 2 ? 0u : 1u);
  }
}

TEST(InlineFunctions, OnlyLevelTwoInlines) {
  for (int level : {1, 2}) {
    SCOPED_TRACE(level);
    auto model = parse_text(kLocalFunctions);
    ASSERT_TRUE(model);
    PipelineConfig config = test_pipeline_config();
    config.level = level;
    config.verify = true;
    auto report = run_pipeline(model, config);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->verification.rolled_back.empty());
    EXPECT_EQ(model->functions().size(), level == 1 ? 3u : 0u);
    EXPECT_EQ(count_ops(*model, "Leaky"), level == 1 ? 2 : 0);
    EXPECT_EQ(count_ops(*model, "LeakyRelu"), level == 1 ? 1 : 2);  // in Leaky's body at O1
  }
}

TEST(InlineFunctions, NestedFunctionsFuzzSeedAtO2) {
  // fuzz/seeds/nested_functions.onnxtxt: calls in an If branch and a Loop body, a call inside a
  // function's If passing an attribute reference on, omitted inputs and outputs, and a recursive
  // function the pipeline must leave alone.
  auto model = parse_text(read_file(std::filesystem::path(GRAFT_SOURCE_DIR) / "fuzz" / "seeds" /
                                    "nested_functions.onnxtxt"));
  ASSERT_TRUE(model);
  PipelineConfig config = test_pipeline_config();
  config.level = 2;
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  for (const auto& pass : report->passes) EXPECT_EQ(pass.rollbacks, 0) << pass.name;
  EXPECT_EQ(function_names(*model), (std::set<std::string>{"Rec"}));
  EXPECT_EQ(count_ops(*model, "LeakyRelu"), 2);
  EXPECT_EQ(count_ops(*model, "Inner") + count_ops(*model, "Outer"), 0);
  EXPECT_TRUE(model->verify().ok());
  // Numbers: inputs that take the else branch reach the recursion, which the evaluator refuses
  // (the other tests compare outputs).
}

// A call that omits an input its body's Mul requires (not valid ONNX, found by the verify
// fuzzer): inlining would leave the Mul without an operand, so the call stays and the model
// stays loadable.
TEST(InlineFunctions, CallOmittingARequiredInputStays) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2] x) => (float[2] y, float[2] z) {
      y = local.Square ()
      z = local.Square (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    Square (p) => (q) {
      q = Mul (p, p)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass(*model, "inline_functions");
  EXPECT_EQ(result.rewrites, 1);  // the call with x only
  EXPECT_TRUE(ir::check_model_operands(*model).ok()) << ir::check_model_operands(*model);
  EXPECT_EQ(count_ops(*model, "Square"), 1);
  auto reloaded = ir::Model::parse(model->to_proto().SerializeAsString());
  EXPECT_TRUE(reloaded.ok()) << reloaded.status();
}

// The same where the main graph does not import the default domain: the import comes with the
// inlined nodes, and with it their schemas' rules, so those are checked with it (a Max reading
// an omitted formal passed the check without a version, then the import made the model invalid;
// found by the verify fuzzer, seed 41). The call stays, the import is not added, and the model
// reloads.
TEST(InlineFunctions, CallOmittingARequiredInputStaysWhereTheImportWouldComeWithIt) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["local" : 1]>
    g (float[4] x, float[4] lo) => (float[4] y) {
      y = local.Leaky (lo)
    }
    <domain: "local", opset_import: ["" : 13]>
    Leaky (a, m) => (b) {
      r = LeakyRelu (a)
      b = Max (r, m)
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "inline_functions");
  int calls = 0, inlined = 0;
  for (const ir::Node* n : model->graph().nodes()) {
    calls += n->op_type() == "Leaky" ? 1 : 0;
    inlined += n->is("Max") || n->is("LeakyRelu") ? 1 : 0;
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(inlined, 0);
  const auto* imports = model->opset_imports(&model->graph());
  ASSERT_NE(imports, nullptr);
  for (const auto& op : *imports) EXPECT_NE(op.domain(), "") << op.version();
  // Serialized as graftd returns it (trailing empty inputs kept).
  auto bytes = model->serialize_and_release();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto reloaded = ir::Model::parse(*bytes);
  EXPECT_TRUE(reloaded.ok()) << reloaded.status();
}

}  // namespace
}  // namespace graft::testing
