#include <numeric>

#include "core/ir/tensor.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

// Integer contents of an initializer of the main graph (empty and a test failure if absent).
std::vector<int64_t> ints_of(const ir::Model& model, const std::string& name) {
  ir::Value* v = model.graph().find_local(name);
  EXPECT_TRUE(v && v->initializer()) << "no initializer " << name;
  if (!v || !v->initializer()) return {};
  EXPECT_EQ(v->initializer()->data_type(), onnx::TensorProto::INT64) << name;
  return ir::read_int64s(*v->initializer()).value_or(std::vector<int64_t>{});
}

// Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as torch.onnx exports x.view(B, -1)-like
// code that multiplies the trailing dims.
constexpr char kTorchChain[] = R"(
    g (float[%s,3,4] x) => (float[%s,12] y) {
      s = Shape (x)
      i0 = Constant <value = int64 {0}> ()
      i1 = Constant <value = int64 {1}> ()
      i2 = Constant <value = int64 {2}> ()
      ax = Constant <value = int64[1] {0}> ()
      d0 = Gather <axis = 0> (s, i0)
      d1 = Gather <axis = 0> (s, i1)
      d2 = Gather (s, i2)
      m = Mul (d1, d2)
      u0 = Unsqueeze (d0, ax)
      u1 = Unsqueeze (m, ax)
      shape = Concat <axis = 0> (u0, u1)
      y = Reshape (x, shape)
    }
  )";

std::string torch_chain(const std::string& batch) {
  std::string text = "<ir_version: 8, opset_import: [\"\" : 13]>\n";
  char buf[2048];
  std::snprintf(buf, sizeof(buf), kTorchChain, batch.c_str(), batch.c_str());
  return text + buf;
}

TEST(FoldShapes, TorchChainWithSymbolicBatchFoldsKnownDims) {
  auto model = parse_text(torch_chain("N"));
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass_checked(*model, "fold_shapes");
  EXPECT_TRUE(result.changed);
  // The Reshape's target becomes [0, -1] (0 copies the batch dim, -1 is the product d1 * d2;
  // y's declared [N, 12] is the exporter's claim, which facts do not use), and the chain that
  // computed it, read by nothing else, goes with the rewrite (Rewriter::erase_unread_producers)
  // instead of waiting for prune.
  ir::Node* reshape = model->graph().find_local("y")->producer();
  ASSERT_TRUE(reshape && reshape->input(1)->is_constant());
  EXPECT_EQ(ir::read_int64s(*reshape->input(1)->initializer()), (std::vector<int64_t>{0, -1}));
  for (const char* op : {"Shape", "Gather", "Mul", "Unsqueeze", "Concat"})
    EXPECT_EQ(count_ops(*model, op), 0) << op;
  EXPECT_EQ(model->graph().num_nodes(), 1u);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldShapes, StaticChainGivesReshapeAConstantShape) {
  auto model = parse_text(torch_chain("5"));
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass_checked(*model, "fold_shapes");
  // The Shape itself (its Gathers are now constant), and the Reshape's target: 5 from x's
  // declaration, -1 for the product d1 * d2; the chain that computed the target, read by
  // nothing else then, goes with it (Rewriter::erase_unread_producers).
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "Shape"), 0);
  EXPECT_EQ(count_ops(*model, "Concat"), 0);
  run_pass_checked(*model, "fold_constants");
  run_pass(*model, "prune");
  ir::Node* reshape = model->graph().find_local("y")->producer();
  ASSERT_TRUE(reshape);
  ASSERT_TRUE(reshape->input(1)->is_constant());
  EXPECT_EQ(ir::read_int64s(*reshape->input(1)->initializer()), (std::vector<int64_t>{5, -1}));
  EXPECT_EQ(model->graph().num_nodes(), 1u);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldShapes, ShapeStartEndAreHonoured) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 15]>
    g (float[N,3,4,5] x) => (int64[3] a, int64[1] b, int64[2] c, int64[0] d, int64[4] e) {
      a = Shape <start = 1> (x)
      b = Shape <start = -2, end = -1> (x)
      c = Shape <end = 2> (x)
      d = Shape <start = 9> (x)
      e = Shape (x)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_shapes");
  EXPECT_EQ(result.rewrites, 3);
  const std::vector<int64_t> dims = {-1, 3, 4, 5};  // -1: the symbolic N
  EXPECT_EQ(ints_of(*model, "a"), std::vector<int64_t>(dims.begin() + 1, dims.end()));
  EXPECT_EQ(ints_of(*model, "b"), std::vector<int64_t>(dims.end() - 2, dims.end() - 1));
  EXPECT_EQ(ints_of(*model, "d"), std::vector<int64_t>{});
  EXPECT_EQ(dims_of(*model, "d"), (std::vector<int64_t>{0}));
  // c and e include N.
  EXPECT_EQ(count_ops(*model, "Shape"), 2);
  EXPECT_EQ(output_names(model->graph()), (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldShapes, SizeFoldsOnlyWhenEveryDimIsKnown) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3,4] x, float[N,3] z) => (int64 n, int64 m) {
      n = Size (x)
      m = Size (z)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_shapes");
  EXPECT_EQ(result.rewrites, 1);
  const std::vector<int64_t> dims = {2, 3, 4};
  EXPECT_EQ(ints_of(*model, "n"),
            std::vector<int64_t>{
                std::accumulate(dims.begin(), dims.end(), int64_t{1}, std::multiplies<int64_t>())});
  EXPECT_EQ(dims_of(*model, "n"), std::vector<int64_t>{});
  EXPECT_EQ(count_ops(*model, "Size"), 1);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldShapes, RankOfAValueOfKnownRank) {
  // Size(Shape(x)) and Shape(Shape(x)) give the rank, known even though N is symbolic.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,3,M] x) => (int64 r, int64[1] rs) {
      s = Shape (x)
      r = Size (s)
      rs = Shape (s)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_shapes");
  EXPECT_EQ(result.rewrites, 2);
  const int64_t rank = 3;
  EXPECT_EQ(ints_of(*model, "r"), (std::vector<int64_t>{rank}));
  EXPECT_EQ(ints_of(*model, "rs"), (std::vector<int64_t>{rank}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldShapes, ShapesKnownOnlyFromInference) {
  // No value_info: the shape of t comes from ONNX shape inference on the main graph.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x, float[3,5] w) => (int64[2] s, int64 n) {
      t = Transpose <perm = [1, 0]> (x)
      p = MatMul (t, x)
      q = MatMul (x, w)
      s = Shape (p)
      n = Size (q)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_shapes");
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(ints_of(*model, "s"), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(ints_of(*model, "n"), (std::vector<int64_t>{2 * 5}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldShapes, SliceOfShapeOverKnownDims) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,3,4] x) => (int64[2] a, int64[2] b, int64[2] c, int64[3] d) {
      s = Shape (x)
      one = Constant <value = int64[1] {1}> ()
      three = Constant <value = int64[1] {3}> ()
      zero = Constant <value = int64[1] {0}> ()
      two = Constant <value = int64[1] {2}> ()
      last = Constant <value = int64[1] {-1}> ()
      big_neg = Constant <value = int64[1] {-100}> ()
      a = Slice (s, one, three)
      b = Slice (s, last, zero, zero, last)
      c = Slice (s, zero, two)
      d = Slice (s, last, big_neg, zero, last)
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass_checked(*model, "fold_shapes");
  EXPECT_EQ(result.rewrites, 2);  // c and d reach the symbolic N
  EXPECT_EQ(ints_of(*model, "a"), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(ints_of(*model, "b"), (std::vector<int64_t>{4, 3}));  // reversed, stops before 0
  EXPECT_EQ(count_ops(*model, "Slice"), 2);
  EXPECT_EQ(count_ops(*model, "Shape"), 1);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldShapes, GatherWithNegativeAndVectorIndices) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,3,4] x) => (int64[2] a, int64 b, int64[2] c) {
      s = Shape (x)
      idx = Constant <value = int64[2] {-1, 1}> ()
      neg = Constant <value = int32 {-3}> ()
      mixed = Constant <value = int64[2] {1, 0}> ()
      a = Gather (s, idx)
      b = Gather (s, neg)
      c = Gather (s, mixed)
    }
  )");
  ASSERT_TRUE(model);
  run_pass(*model, "extract_constants");
  auto result = run_pass_checked(*model, "fold_shapes");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(ints_of(*model, "a"), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(count_ops(*model, "Gather"), 2);  // b is N (index -3), c includes N
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldShapes, SymbolicAndUnknownDimsStay) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,M] x, float[N,M] z) => (int64[2] s, int64 n, int64[2] t) {
      s = Shape (x)
      n = Size (x)
      sum = Add (x, z)
      t = Shape (sum)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_shapes");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(count_ops(*model, "Shape"), 2);
  EXPECT_EQ(count_ops(*model, "Size"), 1);
}

TEST(FoldShapes, TheShapeOfATransposeOnlyAShapeReadsComesFromItsInput) {
  // A query's heads read only for their length (GPT-2's causal slice, once attention is fused
  // from the 3-D queries): the Transpose goes, the dims are the input's, permuted.
  expect_rewrite("fold_shapes", R"(
    <ir_version: 8, opset_import: ["" : 15]>
    g (float[B,S,2,3] x) => (int64[2] s) {
      t = Transpose <perm = [0, 2, 1, 3]> (x)
      s = Shape <start = 1, end = 3> (t)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 15]>
    g (float[B,S,2,3] x) => (int64[2] s) <int64[2] picked = {2, 1}> {
      xs = Shape (x)
      s = Gather <axis = 0> (xs, picked)
    }
  )");
  // A Transpose that something else reads too stays, and so does its Shape.
  expect_no_rewrite("fold_shapes", R"(
    <ir_version: 8, opset_import: ["" : 15]>
    g (float[B,S,2,3] x) => (int64[2] s, float[B,2,S,3] t) {
      t = Transpose <perm = [0, 2, 1, 3]> (x)
      s = Shape <start = 1, end = 3> (t)
    }
  )");
}

TEST(FoldShapes, CustomOpOutputHasNoShape) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[2,3] x) => (int64[2] s) {
      c = custom.Foo (x)
      s = Shape (c)
    }
  )");
  ASSERT_TRUE(model);
  // Not run_pass_checked: the evaluator cannot run custom ops.
  auto result = run_pass(*model, "fold_shapes");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(count_ops(*model, "Shape"), 1);
}

// The declaration says [7,7]; the operators say [3,2]: the Shape folds to what they compute.
TEST(FoldShapes, DeclaredShapeContradictingInferenceIsNotTrusted) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (int64[2] s) {
      t = Transpose <perm = [1, 0]> (x)
      s = Shape (t)
    }
  )");
  ASSERT_TRUE(model);
  model->graph().find_local("t")->set_type(float_type({7, 7}));
  auto result = run_pass_checked(*model, "fold_shapes");
  EXPECT_TRUE(result.changed);
  EXPECT_EQ(count_ops(*model, "Shape"), 0);
  ir::Value* s = model->graph().find_local("s");
  ASSERT_TRUE(s && s->is_constant());
  EXPECT_EQ(ir::read_int64s(*s->initializer()), (std::vector<int64_t>{3, 2}));
}

// libonnx 1.12 knows opsets up to 17. Graft's own rules give the shape of x's transpose from
// the graph input's declaration alone, so no unchecked declaration is involved.
TEST(FoldShapes, NewerOpsetFoldsWhatGraftsRulesCover) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[2,3] x) => (int64[2] s) {
      t = Transpose <perm = [1, 0]> (x)
      s = Shape (t)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass(*model, "fold_shapes");
  EXPECT_TRUE(result.changed);
  ir::Value* s = model->graph().find_local("s");
  ASSERT_TRUE(s && s->is_constant());
  EXPECT_EQ(ir::read_int64s(*s->initializer()), (std::vector<int64_t>{3, 2}));
}

// TopK's output dims depend on k, which Graft's rules cannot read here; only the declaration
// [2,1] gives them, and libonnx cannot check it at opset 18: the Shape stays.
TEST(FoldShapes, NewerOpsetLeavesUncheckedDeclarationsAlone) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[2,3] x, int64[1] k) => (int64[2] s) {
      t, i = TopK (x, k)
      s = Shape (t)
    }
  )");
  ASSERT_TRUE(model);
  model->graph().find_local("t")->set_type(float_type({2, 1}));
  auto result = run_pass(*model, "fold_shapes");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(count_ops(*model, "Shape"), 1);
}

TEST(FoldShapes, InitializerDefaultOfAGraphInputIsNotItsShape) {
  // IR 3: the initializer is only a default for input w, callers may feed another shape.
  auto model = parse_text(R"(
    <ir_version: 3, opset_import: ["" : 8]>
    g (float[N] w) => (int64[1] s) {
      s = Shape (w)
    }
  )");
  ASSERT_TRUE(model);
  model->graph().make_initializer(model->graph().find_local("w"),
                                  ir::make_float_tensor(onnx::TensorProto::FLOAT, {3}, {1, 2, 3}));
  auto result = run_pass(*model, "fold_shapes");
  EXPECT_FALSE(result.changed);
}

TEST(FoldShapes, OldIrVersionsGetConstantNodes) {
  auto model = parse_text(R"(
    <ir_version: 3, opset_import: ["" : 9]>
    g (float[2,3] x) => (int64[2] s, int64 n) {
      s = Shape (x)
      n = Size (x)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_shapes");
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "Constant"), 2);
  EXPECT_TRUE(model->graph().initializers().empty());
  ir::Node* c = model->graph().find_local("s")->producer();
  ASSERT_TRUE(c && c->is("Constant"));
  EXPECT_EQ(ir::read_int64s(c->attr("value")->t()), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(output_names(model->graph()), (std::vector<std::string>{"s", "n"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldShapes, NoInt64ConstantNodesBeforeOpset9) {
  // Constant-1 holds only floating-point tensors, and IR 3 allows no new initializers.
  auto model = parse_text(R"(
    <ir_version: 3, opset_import: ["" : 8]>
    g (float[2,3] x) => (int64[2] s) {
      s = Shape (x)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass(*model, "fold_shapes");
  EXPECT_FALSE(result.changed);
  EXPECT_EQ(count_ops(*model, "Shape"), 1);
}

TEST(FoldShapes, SubgraphsUseOuterAndLocalShapes) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2,3] x) => (int64[2] y) {
      t = Transpose <perm = [1, 0]> (x)
      y = If (cond) <
        then_branch = then_g () => (int64[2] a) {
          a = Shape (t)
        },
        else_branch = else_g () => (int64[2] b) {
          local = Transpose <perm = [1, 0]> (t)
          b = Shape (local)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_shapes");
  // t belongs to the main graph (inferred [3,2]); `local` is inferred inside the branch.
  EXPECT_EQ(result.rewrites, 2);
  ir::Node* if_node = model->graph().find_local("y")->producer();
  ASSERT_TRUE(if_node);
  const ir::Graph* then_g = if_node->subgraphs()[0].graph.get();
  const ir::Graph* else_g = if_node->subgraphs()[1].graph.get();
  if (if_node->subgraphs()[0].attr_name != "then_branch") std::swap(then_g, else_g);
  ir::Value* a = then_g->find_local("a");
  ASSERT_TRUE(a && a->is_constant());
  EXPECT_EQ(ir::read_int64s(*a->initializer()), (std::vector<int64_t>{3, 2}));
  ir::Value* b = else_g->find_local("b");
  ASSERT_TRUE(b && b->is_constant());
  EXPECT_EQ(ir::read_int64s(*b->initializer()), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldShapes, DeclaredSubgraphShapesAreUsed) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2,3] x) => (int64[2] y) {
      y = If (cond) <
        then_branch = then_g () => (int64[2] a) {
          local = Transpose <perm = [1, 0]> (x)
          a = Shape (local)
        },
        else_branch = else_g () => (int64[2] b) {
          b = Shape (x)
        }>
    }
  )");
  ASSERT_TRUE(model);
  ir::Node* if_node = model->graph().find_local("y")->producer();
  ir::Graph* then_g = nullptr;
  for (const auto& sub : if_node->subgraphs())
    if (sub.attr_name == "then_branch") then_g = sub.graph.get();
  ASSERT_TRUE(then_g);
  then_g->find_local("local")->set_type(float_type({3, 2}));
  auto result = run_pass_checked(*model, "fold_shapes");
  EXPECT_EQ(result.rewrites, 2);
  EXPECT_EQ(count_ops(*model, "Shape"), 0);
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(FoldShapes, UnusedShapesAreLeftForPrune) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,3] x) => (float[2,3] y) {
      s = Shape (x)
      y = Identity (x)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "fold_shapes");
  EXPECT_FALSE(result.changed);
}

}  // namespace
}  // namespace graft::testing
