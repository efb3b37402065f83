// The test harness must itself be able to fail: canonical_text tells apart models that differ in
// anything but invented names and storage order, expect_rewrite and expect_no_rewrite fail on a
// wrong result, on changed outputs and on a wrong report, and run_pass catches a pass that edits
// the model while reporting no change.
#include <gtest/gtest-spi.h>

#include "core/ir/tensor.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

constexpr const char* kChain = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[4,3] a) => (float[4,2] y)
    <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
    t = MatMul (a, w)
    u = Add (t, c)
    y = Relu (u)
  }
)";

// A pass given by the test rather than the registry: runs `edit` on the main graph and reports
// `changed` (whatever the edit did).
class EditPass final : public Pass {
 public:
  EditPass(std::function<void(ir::Graph&)> edit, bool changed)
      : edit_(std::move(edit)), changed_(changed) {}
  std::string_view name() const override { return "edit"; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    edit_(model.graph());
    PassResult r;
    if (changed_) r.add();
    return r;
  }

 private:
  std::function<void(ir::Graph&)> edit_;
  bool changed_;
};

PassSpec edit_pass(const std::string& name, std::function<void(ir::Graph&)> edit, bool changed) {
  return {name, [=] { return std::make_unique<EditPass>(edit, changed); }, {}};
}

void set_relu_alpha(ir::Graph& g) {
  onnx::AttributeProto a;
  a.set_name("alpha");
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(0.5f);
  for (ir::Node* n : g.nodes())
    if (n->op_type() == "Relu") n->set_attr(a);
}

std::string canonical(const std::string& text) {
  auto model = parse_text(text);
  return model ? canonical_text(*model) : "";
}

// ------------------------------------------------------------------ canonical_text

TEST(CanonicalText, ShowsEverythingInAFixedForm) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["local" : 1, "" : 13]>
    g (bool cond, float[N,2] x) => (float[N,2] y, float[2] z) <float[2] w = {0.1, 2}> {
      k = Constant <value = int64[2] {1, -2}> ()
      z = local.F <alpha = 0.5> (w)
      y = If (cond) <
        then_branch = then_g () => (float[N,2] r) {
          r = Add (x, w)
        },
        else_branch = else_g () => (float[N,2] e) {
          e = Neg (x)
        }>
    }
    <domain: "local", opset_import: ["" : 13]>
    F <alpha> (p) => (q) {
      s = Neg (p)
      q = Relu (s)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(canonical_text(*model), R"(<ir_version: 8, opset_import: ["" : 13, "local" : 1]>
graph g (bool[] cond, float[N,2] x) => (float[N,2] y, float[2] z) {
  initializer %0 = float[2] {0.1, 2}
  y = If (cond) <
    else_branch = graph () => (float[N,2] e) {
      e = Neg (x)
    }
    then_branch = graph () => (float[N,2] r) {
      r = Add (x, %0)
    }
  >
  z = local.F <alpha: float = 0.5> (%0)
  %1 = Constant <value: tensor = int64[2] {1, -2}> ()
}
<domain: "local", opset_import: ["" : 13], attributes: [alpha]>
function F (p) => (q) {
  %0 = Neg (p)
  q = Relu (%0)
}
)");
  // Initializers of the model before a pass keep their names when asked.
  EXPECT_NE(canonical_text(*model, {"w"}).find("initializer w = float[2] {0.1, 2}"),
            std::string::npos);
}

TEST(CanonicalText, IgnoresInventedNamesAndStorageOrder) {
  // The same graph: other names for everything but the interface, nodes and initializers stored
  // in another order, values stored as raw_data rather than floats, node names added.
  const std::string a = canonical(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, float[2] z) <float[2] c = {1, 2}, float[2] d = {3, 4}> {
      p = Add (x, c)
      q = Mul (x, d)
      y = Sub (p, q)
      r = Neg (x)
      z = Abs (r)
    }
  )");
  auto other = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, float[2] z) <float[2] k2 = {3, 4}, float[2] k1 = {1, 2}> {
      n1 = Neg (x)
      m2 = Mul (x, k2)
      m1 = Add (x, k1)
      z = Abs (n1)
      y = Sub (m1, m2)
    }
  )");
  ASSERT_TRUE(other);
  for (ir::Value* v : other->graph().initializers())
    v->set_initializer(ir::make_float_tensor(onnx::TensorProto::FLOAT, dims_of(v), values_of(v)));
  for (ir::Node* n : other->graph().nodes()) n->mutable_proto().set_name("node_" + n->op_type());
  EXPECT_EQ(canonical_text(*other), a);
}

TEST(CanonicalText, LoopBodiesAreCanonicalisedToo) {
  auto loop = [](const std::string& temp, const std::string& op) {
    return canonical(R"(
      <ir_version: 8, opset_import: ["" : 13]>
      g (int64 n, bool go, float[2] x) => (float[2] y) <float[2] k = {1, 2}> {
        y = Loop (n, go, x) <
          body = b (int64 i, bool c, float[2] v) => (bool c_out, float[2] v_out) {
            c_out = Identity (c)
            )" + temp +
                     " = " + op + R"( (v, k)
            v_out = Neg ()" +
                     temp + R"()
          }>
      }
    )");
  };
  const std::string want = loop("t", "Add");
  ASSERT_NE(want, "");
  EXPECT_EQ(loop("other_name", "Add"), want);
  EXPECT_NE(loop("t", "Mul"), want);
  EXPECT_NE(want.find("body = graph (int64[] i, bool[] c, float[2] v) => (bool[] c_out, "
                      "float[2] v_out)"),
            std::string::npos)
      << want;
}

TEST(CanonicalText, TellsApartModelsThatDiffer) {
  const std::string base = R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (bool cond, float[2] x) => (float[2] y, float[2] z) <float[2] c = {0.1, 2}, float[2] v> {
      v = Add (x, c)
      y = If (cond) <
        then_branch = then_g () => (float[2] r) {
          r = LeakyRelu <alpha = 0.5> (v)
        },
        else_branch = else_g () => (float[2] e) {
          e = Neg (v)
        }>
      z = local.F (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    F (p) => (q) {
      q = Relu (p)
    }
  )";
  const std::string want = canonical(base);
  ASSERT_NE(want, "");
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"Add (x, c)", "Sub (x, c)"},                         // op type
      {"Add (x, c)", "Add (c, x)"},                         // input order
      {"{0.1, 2}", "{0.10000001, 2}"},                      // one ulp of a weight
      {"float[2] c = {0.1, 2}", "double[2] c = {0.1, 2}"},  // weight type
      {"<alpha = 0.5>", "<alpha = 0.25>"},                  // attribute inside a subgraph
      {"e = Neg (v)", "e = Abs (v)"},                       // the other branch
      {"q = Relu (p)", "q = Abs (p)"},                      // a function body
      {"float[2] v>", "float[3] v>"},                       // value_info
      {"\"\" : 13, \"local\"", "\"\" : 14, \"local\""},     // opset
      {"float[2] y,", "float[N] y,"},                       // declared output type
  };
  for (const auto& [from, to] : edits) {
    SCOPED_TRACE(to);
    std::string text = base;
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos);
    text.replace(at, from.size(), to);
    const std::string changed = canonical(text);
    ASSERT_NE(changed, "");
    EXPECT_NE(changed, want);
  }
}

// ------------------------------------------------------------------ expect_rewrite

TEST(ExpectRewrite, AcceptsTheResultUnderOtherNames) {
  // The fused node's output is a fresh name in the result and `f` here.
  expect_rewrite("fuse_matmul_add", kChain, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      f = Gemm (a, w, c)
      y = Relu (f)
    }
  )",
                 rewrites(1));
}

TEST(ExpectRewrite, FailsWhenTheResultDiffersFromAfter) {
  EXPECT_NONFATAL_FAILURE(expect_rewrite("fuse_matmul_add", kChain, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      f = Gemm <beta = 1.0> (a, w, c)
      y = Relu (f)
    }
  )"),
                          "did not rewrite as expected");
  // A new weight under the name of one the pass did not keep is a difference too.
  EXPECT_NONFATAL_FAILURE(expect_rewrite("fuse_matmul_add", kChain, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w2 = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      f = Gemm (a, w2, c)
      y = Relu (f)
    }
  )"),
                          "-   initializer w = float[3,2]");
}

TEST(ExpectRewrite, FailsWhenTheOutputsChange) {
  // Turns Add into Sub: `after` says exactly that, so only the numeric check can object.
  PassSpec add_to_sub = edit_pass(
      "add_to_sub",
      [](ir::Graph& g) {
        for (ir::Node* n : g.nodes())
          if (n->op_type() == "Add") n->mutable_proto().set_op_type("Sub");
      },
      /*changed=*/true);
  EXPECT_NONFATAL_FAILURE(expect_rewrite(add_to_sub, kChain, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,3] a) => (float[4,2] y)
      <float[3,2] w = {1, 2, 3, 4, 5, 6}, float[2] c = {0.5, -0.5}> {
      t = MatMul (a, w)
      u = Sub (t, c)
      y = Relu (u)
    }
  )"),
                          "pass add_to_sub changed the outputs");
}

TEST(ExpectRewrite, FailsOnAWrongRewriteCountOrNoRewrite) {
  EXPECT_NONFATAL_FAILURE(run_rewrite("fuse_matmul_add", kChain, rewrites(2)), "Which is: 1");
  EXPECT_NONFATAL_FAILURE(run_rewrite("cse", kChain), "pass cse did not rewrite");
}

TEST(ExpectNoRewrite, FailsWhenThePassReportsAChange) {
  // Rebuilds the Relu as it was: the model is the same, but the report says it changed.
  PassSpec rebuild = edit_pass(
      "rebuild",
      [](ir::Graph& g) {
        ir::Node* relu = only_node(g, "Relu");
        ir::Value* y = relu->output(0);
        ir::Node* copy = g.add_node("Relu", {relu->input(0)}, {"r"});
        g.move_output_name(copy, 0, y);
        ASSERT_TRUE(g.remove_node(relu));
      },
      /*changed=*/true);
  EXPECT_NONFATAL_FAILURE(expect_no_rewrite(rebuild, kChain), "rewrote what it must leave alone");
}

// ------------------------------------------------------------------ the unchanged check

TEST(RunPass, CatchesAPassThatEditsButReportsNoChange) {
  const std::vector<std::pair<std::string, std::function<void(ir::Graph&)>>> lies = {
      {"sets an attribute", set_relu_alpha},
      {"replaces a weight",
       [](ir::Graph& g) {
         ir::Value* c = g.find_local("c");
         c->set_initializer(ir::make_float_tensor(onnx::TensorProto::FLOAT, {2}, {0.5, -0.25}));
       }},
      {"stores a weight differently",  // the same numbers as raw_data: other bytes
       [](ir::Graph& g) {
         ir::Value* c = g.find_local("c");
         c->set_initializer(ir::make_float_tensor(onnx::TensorProto::FLOAT, {2}, {0.5, -0.5}));
       }},
      {"adds a node", [](ir::Graph& g) { g.add_node("Neg", {g.find_local("a")}, {"unused"}); }},
  };
  for (const auto& [what, edit] : lies) {
    SCOPED_TRACE(what);
    auto model = parse_text(kChain);
    ASSERT_TRUE(model);
    EXPECT_NONFATAL_FAILURE(run_pass(*model, edit_pass("liar", edit, /*changed=*/false)),
                            "pass 'liar' reported no change but edited the model");
  }
  // Passes that leave the same bytes pass: one that does nothing, one that puts an equal copy of
  // a weight in its place.
  const std::vector<std::function<void(ir::Graph&)>> honest = {
      [](ir::Graph&) {},
      [](ir::Graph& g) {
        ir::Value* c = g.find_local("c");
        c->set_initializer(*c->initializer());
      }};
  for (const auto& edit : honest) {
    auto model = parse_text(kChain);
    ASSERT_TRUE(model);
    EXPECT_FALSE(run_pass(*model, edit_pass("honest", edit, /*changed=*/false)).changed);
  }
}

}  // namespace
}  // namespace graft::testing
