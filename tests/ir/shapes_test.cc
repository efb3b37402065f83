// Shape and type facts (core/ir/shapes.h): sources, rules, subgraphs, functions, rewrites.
#include "core/ir/shapes.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "core/ir/shape_rules.h"
#include "core/ir/tensor.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

// The value named `name` in any graph of the model (main, subgraphs, function bodies).
ir::Value* any_value(const ir::Model& model, const std::string& name) {
  for (ir::Graph* g : model.all_graphs())
    if (ir::Value* v = g->find_local(name)) return v;
  return nullptr;
}

std::string fact(const ir::Model& model, const std::string& name) {
  ir::Value* v = any_value(model, name);
  return v ? v->fact().to_string() : "no value " + name;
}

TEST(ShapeFacts, RulesPropagateDimsAndSymbols) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[batch,3,4,5] x, float[5] b) => (float[batch,60] y)
      <int64[2] shape = {0, -1}, int64[1] axes = {1}> {
      r = Relu (x)
      t = Transpose <perm = [0, 2, 3, 1]> (r)
      s = Add (t, b)
      y = Reshape (r, shape)
      sh = Shape (x)
      u = Unsqueeze (x, axes)
      c = Cast <to = 7> (x)
      m = Equal (s, s)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "r"), "FLOAT[batch,3,4,5]");
  EXPECT_EQ(fact(*model, "t"), "FLOAT[batch,4,5,3]");
  // Broadcasting [batch,4,5,3] against [5]: 3 vs 5 cannot broadcast (an invalid model), so only
  // the element type is known.
  EXPECT_EQ(fact(*model, "s"), "FLOAT[*]");
  EXPECT_EQ(fact(*model, "y"), "FLOAT[batch,60]");
  EXPECT_EQ(fact(*model, "sh"), "INT64[4]");
  EXPECT_EQ(fact(*model, "u"), "FLOAT[batch,1,3,4,5]");
  EXPECT_EQ(fact(*model, "c"), "INT64[batch,3,4,5]");
  EXPECT_EQ(fact(*model, "m"), "BOOL[*]");
}

TEST(ShapeFacts, SliceBoundsReadAtRunTimeKeepTheOtherAxes) {
  // GPT-2's causal mask, a (1, 1, 1024, 1024) buffer cut to the lengths at run time: axes 0 and
  // 1 keep their dims; without a constant `axes` nothing is known but the rank.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,1,16,16] table, int64[1] from, int64[1] to) => (float[1,1,?,?] y, float[?,?,?,?] z)
      <int64[1] two = {2}, int64[2] last = {2, 3}> {
      a = Slice (table, from, to, two)
      y = Slice (a, from, to, last)
      z = Slice (table, from, to)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "a"), "FLOAT[1,1,?,16]");
  EXPECT_EQ(fact(*model, "y"), "FLOAT[1,1,?,?]");
  EXPECT_EQ(fact(*model, "z"), "FLOAT[?,?,?,?]");
}

// Rules are looked up by op type in the default ONNX domain only: a custom op named like a
// standard one, or an op without a rule, gets no fact from them.
TEST(ShapeFacts, RulesAreFoundByOpTypeInTheOnnxDomain) {
  EXPECT_NE(ir::find_shape_rule("Add"), nullptr);
  EXPECT_NE(ir::find_shape_rule("Conv"), nullptr);
  EXPECT_EQ(ir::find_shape_rule("NoSuchOp"), nullptr);
  const std::vector<std::string> ops = ir::shape_rule_ops();
  EXPECT_TRUE(std::is_sorted(ops.begin(), ops.end()));
  EXPECT_NE(std::find(ops.begin(), ops.end(), "Reshape"), ops.end());
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[N,3] x) => (float[N,3] r, float[N,3] c, float[N] u) {
      r = Relu (x)
      c = custom.Relu (x)
      u = Det (x)
    }
  )");
  ASSERT_TRUE(model);
  model->disable_shape_inference();
  EXPECT_EQ(fact(*model, "r"), "FLOAT[N,3]");
  EXPECT_EQ(fact(*model, "c"), "?[*]");
  EXPECT_FALSE(ir::fact_exact(*any_value(*model, "c")));
  EXPECT_EQ(fact(*model, "u"), "?[*]");
  EXPECT_FALSE(ir::fact_exact(*any_value(*model, "u")));
}

// The fused ops fuse_blocks makes, at opsets libonnx does not know: Gelu and
// RMSNormalization keep X's shape (RMSNormalization's Y takes Scale's type), facts from Graft's
// rules alone.
TEST(ShapeFacts, NormalizationAndGeluKeepTheShape) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 23]>
    g (float[N,3,4] x, float16[4] s16) => (float[N,3,4] y) <float[4] s = {1, 2, 3, 4}> {
      y = RMSNormalization <axis = -1> (x, s)
      h = RMSNormalization (x, s16)
      e = Gelu <approximate = "tanh"> (y)
      l = LayerNormalization (e, s)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "y"), "FLOAT[N,3,4]");
  EXPECT_EQ(fact(*model, "h"), "FLOAT16[N,3,4]");
  EXPECT_EQ(fact(*model, "e"), "FLOAT[N,3,4]");
  EXPECT_EQ(fact(*model, "l"), "FLOAT[N,3,4]");
}

// RotaryEmbedding (opset 23, libonnx does not know it) and ONNX Runtime's com.microsoft op (no
// schema in libonnx): Y is X, from Graft's rules, exact.
TEST(ShapeFacts, RotaryEmbeddingKeepsTheShape) {
  auto model = parse_text(R"(
    <ir_version: 10, opset_import: ["" : 23, "com.microsoft" : 1]>
    g (float[N,4,S,8] x, int64[N,S] ids, float[16,4] c) => (float[N,4,S,8] z) {
      y = RotaryEmbedding (x, c, c, ids)
      z = com.microsoft.RotaryEmbedding (y, ids, c, c)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "y"), "FLOAT[N,4,S,8]");
  EXPECT_EQ(fact(*model, "z"), "FLOAT[N,4,S,8]");
  EXPECT_TRUE(ir::fact_exact(*any_value(*model, "y")));
  EXPECT_TRUE(ir::fact_exact(*any_value(*model, "z")));
}

// com.microsoft MatMulNBits: the activation's dims with the last one N, its element type, exact;
// an N that is not positive leaves the shape unknown.
TEST(ShapeFacts, MatMulNBitsHasTheActivationsDimsButTheLast) {
  auto model = parse_text(R"(
    <ir_version: 10, opset_import: ["" : 21, "com.microsoft" : 1]>
    g (float[N,S,40] a, uint8[5,3,8] b, float[15] s) => (float[N,S,5] y, float[N,S,5] z) {
      y = com.microsoft.MatMulNBits <K = 40, N = 5, bits = 4, block_size = 16> (a, b, s)
      z = com.microsoft.MatMulNBits <K = 40, N = 0, bits = 4, block_size = 16> (a, b, s)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "y"), "FLOAT[N,S,5]");
  EXPECT_TRUE(ir::fact_exact(*any_value(*model, "y")));
  EXPECT_FALSE(ir::fact_exact(*any_value(*model, "z")));
}

// The ops that made real models need libonnx's inference: sliding windows, Resize, recurrent
// ops. With a symbolic batch no fact is complete; they are exact, so libonnx is not asked.
TEST(ShapeFacts, WindowsResizeAndRecurrentOpsAreExact) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,3,9,10] x, float[8,3,3,3] w, float[T,N,4] s, float[1,20,4] lw, float[1,20,5] lr,
       uint8[N,3,9,10] xq, uint8[8,3,3,3] wq)
        => (float[N,8,5,5] c) <float[4] scales = {1.0, 1.0, 1.5, 0.5}, float[0] roi = {},
                                int64[4] sizes = {1, 3, 4, 4}> {
      c = Conv <pads = [1, 1, 1, 1], strides = [2, 2]> (x, w)
      ci = ConvInteger <pads = [1, 1, 1, 1], strides = [2, 2]> (xq, wq)
      v = Conv <auto_pad = "VALID", dilations = [2, 2]> (x, w)
      p = MaxPool <kernel_shape = [2, 2], auto_pad = "SAME_UPPER", strides = [2, 3]> (x)
      a = AveragePool <kernel_shape = [3, 3]> (x)
      r = Resize (x, roi, scales)
      z = Resize (x, roi, , sizes)
      y, yh, yc = LSTM <hidden_size = 5, direction = "bidirectional"> (s, lw, lr)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "c"), "FLOAT[N,8,5,5]");
  EXPECT_EQ(fact(*model, "ci"), "INT32[N,8,5,5]");
  EXPECT_EQ(fact(*model, "v"), "FLOAT[N,8,5,6]");
  EXPECT_EQ(fact(*model, "p"), "FLOAT[N,3,5,4]");
  EXPECT_EQ(fact(*model, "a"), "FLOAT[N,3,7,8]");
  EXPECT_EQ(fact(*model, "r"), "FLOAT[N,3,13,5]");
  EXPECT_EQ(fact(*model, "z"), "FLOAT[1,3,4,4]");
  EXPECT_EQ(fact(*model, "y"), "FLOAT[T,2,N,5]");
  EXPECT_EQ(fact(*model, "yh"), "FLOAT[2,N,5]");
  EXPECT_EQ(fact(*model, "yc"), "FLOAT[2,N,5]");
  for (const char* name : {"c", "ci", "v", "p", "a", "r", "z", "y", "yh", "yc"})
    EXPECT_TRUE(ir::fact_exact(*any_value(*model, name))) << name;
}

// A parameter Graft's rules cannot read but libonnx might (a constant of the wrong type here):
// the fact is not exact, and libonnx's inference is asked.
TEST(ShapeFacts, AnUnreadableConstantParameterIsNotExact) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,3] x, int64[2] k) => (float[N,6] y) <float[2] repeats = {1.0, 2.0}> {
      y = Tile (x, repeats)
      t = Tile (x, k)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_FALSE(ir::fact_exact(*any_value(*model, "y")));
  // k is a graph input: libonnx cannot read it either.
  EXPECT_TRUE(ir::fact_exact(*any_value(*model, "t")));
}

TEST(ShapeFacts, BroadcastSymbolsAgainstKnownDims) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,1,7] a, float[3,1] b, float[M] c, float[7,2] k) => (float[N,3,7] y) {
      y = Add (a, b)
      z = Mul (a, c)
      w = MatMul (a, k)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "y"), "FLOAT[N,3,7]");
  // 7 against M: M must be 7 or 1, so the result is 7.
  EXPECT_EQ(fact(*model, "z"), "FLOAT[N,1,7]");
  EXPECT_EQ(fact(*model, "w"), "FLOAT[N,1,2]");
}

TEST(ShapeFacts, AContradictedDeclarationIsNotTrusted) {
  // The exporter's value_info says t is [5]; the operators say [2,3].
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y)
      <float[5] t> {
      t = Neg (x)
      y = Abs (t)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "t"), "FLOAT[2,3]");
  // The declaration is still what the model says when saved.
  auto proto = model->to_proto();
  ASSERT_EQ(proto.graph().value_info_size(), 1);
  EXPECT_EQ(proto.graph().value_info(0).type().tensor_type().shape().dim_size(), 1);
}

TEST(ShapeFacts, IfBranchValuesAreKnownFromOuterValues) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2,8] x) => (float[2,4] y)
      <int64[1] starts = {0}, int64[1] ends = {4}, int64[1] axes = {1}> {
      y = If (cond) <
        then_branch = then_g () => (float[2,4] a) {
          s = Slice (x, starts, ends, axes)
          a = Cast <to = 1> (s)
        },
        else_branch = else_g () => (float[2,4] b) {
          sh = Shape (x)
          k = Slice (x, starts, ends, axes)
          b = Neg (k)
        }
      >
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "s"), "FLOAT[2,4]");
  EXPECT_EQ(fact(*model, "sh"), "INT64[2]");
  EXPECT_EQ(fact(*model, "y"), "FLOAT[2,4]");
}

TEST(ShapeFacts, FunctionBodiesUseConstantsAndRules) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[2,3] x) => (float[6] y) {
      y = local.Flat (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    Flat (a) => (b) {
      shape = Constant <value = int64[1] {-1}> ()
      b = Reshape (a, shape)
      n = Shape (shape)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "shape"), "INT64[1]");
  EXPECT_EQ(fact(*model, "n"), "INT64[1]");
  // The function's input has no type: the reshape's rank is known, its size is not.
  EXPECT_EQ(fact(*model, "b"), "?[?]");
}

TEST(ShapeFacts, LoopBodiesKnowTheirCountersButNotCarriedShapes) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64 trips, bool cond, float[1] x0) => (float[?] x) {
      x = Loop (trips, cond, x0) <
        body = body_g (int64 i, bool c, float[?] acc) => (bool c_out, float[?] acc_out) {
          c_out = Identity (c)
          one = Constant <value = float[1] {1.0}> ()
          acc_out = Concat <axis = 0> (acc, one)
          ii = Add (i, i)
        }
      >
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "ii"), "INT64[]");
  EXPECT_EQ(fact(*model, "c_out"), "BOOL[]");
  EXPECT_EQ(fact(*model, "acc_out"), "FLOAT[?]");
  // x's declaration is not used (a graph output's type is the exporter's claim), and carried
  // shapes may change between iterations: the element type only.
  EXPECT_EQ(fact(*model, "x"), "FLOAT[*]");
}

TEST(ShapeFacts, FactsFollowInPlaceEditsAndNewNodes) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4,6] x) => (float[24] y)
      <int64[1] flat = {-1}, int64[2] square = {2, 12}> {
      r = Reshape (x, flat)
      y = Neg (r)
    }
  )");
  ASSERT_TRUE(model);
  ir::Graph& g = model->graph();
  ir::Value* r = g.find_local("r");
  EXPECT_EQ(r->fact().to_string(), "FLOAT[24]");
  // Editing the node in place changes what its output is.
  r->producer()->set_input(1, g.find_local("square"));
  EXPECT_EQ(r->fact().to_string(), "FLOAT[2,12]");
  // A node added by a rewrite gets its fact when first asked.
  ir::Node* t = g.add_node("Transpose", {r}, {"t"});
  EXPECT_EQ(t->output(0)->fact().to_string(), "FLOAT[12,2]");
  // A new initializer tensor changes its readers' facts too. (A rewrite that changes what a
  // value computes replaces that value's readers as well, so facts further down stay true; see
  // shapes.h.)
  g.find_local("square")->set_initializer(ir::make_int64_tensor({2}, {3, 8}));
  EXPECT_EQ(r->fact().to_string(), "FLOAT[3,8]");
}

// Sizes come from the model: products and sums that do not fit, extreme steps and absurd ranks
// give unknown dims, never a wrapped number or a huge allocation.
TEST(ShapeFacts, HostileSizesGiveUnknownDims) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4611686018427387904,3] x, int64[1000000000000] s) => (float[?,?] y)
      <int64[2] big = {4, 1}, int64[4] pads = {4611686018427387904, 0, 4611686018427387904, 0},
       int64[1] st = {-1}, int64[1] en = {0}, int64[1] ax = {0},
       int64[1] step = {-9223372036854775808}> {
      t = Tile (x, big)
      p = Pad (x, pads)
      r = Slice (x, st, en, ax, step)
      e = Expand (x, s)
      c = ConstantOfShape (s)
      y = Identity (t)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "t"), "FLOAT[?,3]");
  EXPECT_EQ(fact(*model, "p"), "FLOAT[?,3]");
  EXPECT_EQ(fact(*model, "r"), "FLOAT[?,3]");
  EXPECT_EQ(fact(*model, "e"), "FLOAT[*]");
  EXPECT_EQ(fact(*model, "c"), "FLOAT[*]");
}

TEST(ShapeFacts, LongChainsDoNotRecurse) {
  std::string body;
  std::string prev = "x";
  for (int i = 0; i < 50000; ++i) {
    std::string next = "v" + std::to_string(i);
    body += next + " = Neg (" + prev + ")\n";
    prev = next;
  }
  auto model = parse_text(
      "<ir_version: 8, opset_import: [\"\" : 13]>\n"
      "g (float[batch,2] x) => (float[batch,2] " +
      prev + ") {\n" + body + "}");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, prev), "FLOAT[batch,2]");
}

TEST(ShapeFacts, SileroIfBranchesHaveInferredShapes) {
  auto path = shared_models_dir() / "silero_vad_v5.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is absent";
  auto model = ir::Model::load_file(path.string());
  ASSERT_TRUE(model.ok()) << model.status();
  // Values inside If branches with no value_info whose facts are now complete.
  int inside = 0, known = 0;
  for (ir::Graph* g : (*model)->all_graphs()) {
    if (!g->parent() || !g->parent()->is("If")) continue;
    for (ir::Node* n : g->nodes())
      for (ir::Value* v : n->outputs()) {
        if (!v || v->value_info()) continue;
        ++inside;
        if (v->fact().rank()) ++known;
      }
  }
  EXPECT_GT(inside, 100);
  // 624 of 700: the rest are outputs of nested Ifs whose branches end in values only their
  // declarations describe (not used by facts), and what reads them.
  EXPECT_GT(known, inside * 85 / 100) << known << " of " << inside;
}

TEST(ShapeFacts, DeepOrCyclicFunctionCallsAreFound) {
  // A chain of `n` functions, F0 calling F1 ... calling F(n-1); `cycle` makes the last call F0.
  auto chain = [](int n, bool cycle) {
    std::string text = R"(<ir_version: 8, opset_import: ["" : 13, "local" : 1]>
      g (float[2] x) => (float[2] y) { y = local.F0 (x) })";
    for (int i = 0; i < n; ++i) {
      const bool last = i + 1 == n;
      text += R"(<domain: "local", opset_import: ["" : 13, "local" : 1]>
        F)" + std::to_string(i) +
              " (a) => (b) { b = " +
              (last && !cycle ? std::string("Neg") : "local.F" + std::to_string(last ? 0 : i + 1)) +
              " (a) }\n";
    }
    return parse_text(text);
  };
  for (auto [n, cycle, deep] :
       {std::tuple{3, false, false}, std::tuple{64, false, false}, std::tuple{65, false, true},
        std::tuple{1, true, true}, std::tuple{5, true, true}}) {
    auto model = chain(n, cycle);
    ASSERT_TRUE(model) << n;
    EXPECT_EQ(ir::has_deep_function_calls(*model), deep) << n << (cycle ? " cycle" : "");
  }
}

// Calls that expand exponentially: F(i) calls F(i+1) twice. libonnx infers a body once per call,
// so inference is skipped once the expansion passes 2^20 nodes; the facts of such a model come
// from Graft's own rules, at once (this hung for 2^30 body inferences when the pipeline's memory
// estimate first asked for the output's fact).
TEST(ShapeFacts, ExponentiallyExpandingCallsAreNotInferredByLibonnx) {
  auto doubling = [](int depth) {
    std::string text = R"(<ir_version: 8, opset_import: ["" : 13, "local" : 1]>
      g (float[2] x) => (float[2] y) { y = local.F0 (x) })";
    for (int i = 0; i < depth; ++i)
      text += "<domain: \"local\", opset_import: [\"\" : 13, \"local\" : 1]>\nF" +
              std::to_string(i) + " (a) => (b) {\n  t = local.F" + std::to_string(i + 1) +
              " (a)\n  b = local.F" + std::to_string(i + 1) + " (t)\n}\n";
    text += "<domain: \"local\", opset_import: [\"\" : 13]>\nF" + std::to_string(depth) +
            " (a) => (b) {\n  b = Neg (a)\n}\n";
    return parse_text(text);
  };
  for (auto [depth, skipped] : {std::pair{10, false}, std::pair{21, true}, std::pair{30, true}}) {
    auto model = doubling(depth);
    ASSERT_TRUE(model) << depth;
    EXPECT_EQ(ir::has_deep_function_calls(*model), skipped) << depth;
  }
  auto model = doubling(30);
  ASSERT_TRUE(model);
  // Returns at once (no inference of 2^30 bodies); Graft's own rules do not look into function
  // bodies, so the call's output is of unknown type.
  EXPECT_EQ(model->graph().outputs()[0].value->elem_type(), 0);
}

// The ops quantize_dynamic_int8 writes carry shapes on, so a pass after it (or its own next rule)
// still knows the ranks below them.
TEST(ShapeFacts, QuantizationOpsKeepTheShape) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,8,3] x, int8[3,5] w, int8[] wz, float[] s, uint8[] z, float16[] hs)
        => (float[N,8,5] y) {
      xq, xs, xz = DynamicQuantizeLinear (x)
      p = MatMulInteger (xq, w, xz, wz)
      q = QuantizeLinear (x, s)
      qz = QuantizeLinear (x, s, wz)
      d = DequantizeLinear (q, s, z)
      dh = DequantizeLinear (q, hs)
      y = Cast <to = 1> (p)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "xq"), "UINT8[N,8,3]");
  EXPECT_EQ(fact(*model, "xs"), "FLOAT[]");
  EXPECT_EQ(fact(*model, "xz"), "UINT8[]");
  EXPECT_EQ(fact(*model, "p"), "INT32[N,8,5]");
  EXPECT_EQ(fact(*model, "q"), "UINT8[N,8,3]");
  EXPECT_EQ(fact(*model, "qz"), "INT8[N,8,3]");
  EXPECT_EQ(fact(*model, "d"), "FLOAT[N,8,3]");
  EXPECT_EQ(fact(*model, "dh"), "FLOAT16[N,8,3]");
  for (const char* name : {"xq", "xs", "xz", "p", "q", "qz", "d", "dh"})
    EXPECT_TRUE(ir::fact_exact(*any_value(*model, name))) << name;
}

// NonMaxSuppression selects a data-dependent number of rows of 3; RoiAlign's output is one
// pooled map per ROI; GridSample's takes X's batch and channels and the grid's spatial dims (2-D
// at opset 16, any rank at 20, where libonnx 1.12 knows no schema: the rules alone).
TEST(ShapeFacts, DetectionAndSamplingOps) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 16]>
    g (float[B,S,4] boxes, float[B,C,S] scores, float[N,3,32,32] x, float[R,4] rois,
       int64[R] idx, int64[K] idx_k, float[N,7,9,2] grid, float[N,7,9] grid3)
        => (int64[M,3] sel) {
      sel = NonMaxSuppression (boxes, scores)
      pooled = RoiAlign <output_height = 5, output_width = 6> (x, rois, idx)
      pooled_k = RoiAlign (x, rois, idx_k)
      sampled = GridSample <mode = "bicubic"> (x, grid)
      bad = GridSample (x, grid3)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "sel"), "INT64[?,3]");
  EXPECT_EQ(fact(*model, "pooled"), "FLOAT[R,3,5,6]");
  EXPECT_EQ(fact(*model, "pooled_k"), "FLOAT[R,3,1,1]");
  EXPECT_EQ(fact(*model, "sampled"), "FLOAT[N,3,7,9]");
  for (const char* name : {"sel", "pooled", "pooled_k", "sampled"})
    EXPECT_TRUE(ir::fact_exact(*any_value(*model, name))) << name;
  EXPECT_FALSE(ir::fact_exact(*any_value(*model, "bad")));  // grid of the wrong rank

  auto v20 = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 20]>
    g (float[N,2,8,8,8] x, float[N,4,5,6,3] grid, float[N,2,8] line, float[N,3,1] at)
        => (float[N,2,4,5,6] y) {
      y = GridSample <mode = "cubic"> (x, grid)
      z = GridSample (line, at)
    }
  )");
  ASSERT_TRUE(v20);
  EXPECT_EQ(fact(*v20, "y"), "FLOAT[N,2,4,5,6]");
  EXPECT_EQ(fact(*v20, "z"), "FLOAT[N,2,3]");
  EXPECT_TRUE(ir::fact_exact(*any_value(*v20, "y")));
}

TEST(ShapeFacts, BlockedAndFourBitQuantization) {
  // Opset 21: int4 weights dequantized by blocks keep x's shape and take the scale's type;
  // QuantizeLinear's type is its zero point's, else output_dtype's, else uint8.
  auto model = parse_text(R"(
    <ir_version: 10, opset_import: ["" : 21]>
    g (float[N,64] x, int4[64,8] w, float[2,8] s, int4[2,8] z) => (float[N,8] y) {
      d = DequantizeLinear <axis = 0, block_size = 32> (w, s, z)
      y = MatMul (x, d)
      q4 = QuantizeLinear <axis = 1, block_size = 32, output_dtype = 21> (x, s)
      qz = QuantizeLinear <axis = 0, block_size = 32> (d, s, z)
      q8 = QuantizeLinear <axis = 1, block_size = 32> (x, s)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_EQ(fact(*model, "w"), "INT4[64,8]");
  EXPECT_EQ(fact(*model, "d"), "FLOAT[64,8]");
  EXPECT_EQ(fact(*model, "y"), "FLOAT[N,8]");
  EXPECT_EQ(fact(*model, "q4"), "UINT4[N,64]");
  EXPECT_EQ(fact(*model, "qz"), "INT4[64,8]");
  EXPECT_EQ(fact(*model, "q8"), "UINT8[N,64]");
}

}  // namespace
}  // namespace graft::testing
