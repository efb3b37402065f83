// optimize_loops: golden rewrites of Loop and Scan bodies (outputs compared with the original's
// by the evaluator, which runs both), the bodies it must leave alone and why, nesting, and the
// backend test models with loops.
#include <filesystem>
#include <string>

#include "core/eval/executor.h"
#include "core/ir/model.h"
#include "core/ir/op_params.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

constexpr char kPass[] = "optimize_loops";

// t and w depend only on outer values and a body constant: they move before the Loop, the
// constant with them; the body keeps what reads the carried value.
TEST(OptimizeLoops, InvariantNodesMoveBeforeTheLoop) {
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, float[2] a, float[2] b) => (float[2] y)
      <int64 trips = {3}, bool go = {1}> {
      y = Loop (trips, go, x) <body = body (int64 i, bool c, float[2] v) => (bool co, float[2] vo)
        <float[2] k = {0.5, -1.0}> {
        co = Identity (c)
        t = Mul (a, b)
        w = Add (t, k)
        vo = Add (v, w)
      }>
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, float[2] a, float[2] b) => (float[2] y)
      <int64 trips = {3}, bool go = {1}, float[2] moved_k = {0.5, -1.0}> {
      t = Mul (a, b)
      w = Add (t, moved_k)
      y = Loop (trips, go, x) <body = body (int64 i, bool c, float[2] v) => (bool co, float[2] vo) {
        co = Identity (c)
        vo = Add (v, w)
      }>
    }
  )",
                 rewrites(1));
}

// A Scan over a known length: the invariant product moves; a value the body returns is returned
// through an Identity.
TEST(OptimizeLoops, ScanOverAKnownLengthAndAnInvariantOutput) {
  auto m = expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] s0, float[4,2] xs, float[2] a) => (float[2] s, float[4,2] ys, float[4,2] zs) {
      s, ys, zs = Scan (s0, xs) <num_scan_inputs = 1, body = body (float[2] si, float[2] x)
          => (float[2] so, float[2] y, float[2] z) {
        z = Neg (a)
        y = Mul (x, z)
        so = Add (si, y)
      }>
    }
  )",
                          R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] s0, float[4,2] xs, float[2] a) => (float[2] s, float[4,2] ys, float[4,2] zs) {
      minus_a = Neg (a)
      s, ys, zs = Scan (s0, xs) <num_scan_inputs = 1, body = body (float[2] si, float[2] x)
          => (float[2] so, float[2] y, float[2] z) {
        z = Identity (minus_a)
        y = Mul (x, z)
        so = Add (si, y)
      }>
    }
  )",
                          rewrites(1));
  ASSERT_NE(m, nullptr);
}

// A body that may run zero times keeps the invariants that can fail (here a Gather: a moved one
// would run, and could fail, where the loop does not), and says why; so does a body without
// invariants. Random generators and nodes with subgraphs never move.
TEST(OptimizeLoops, BodiesThatMayNotRunOrHaveNoInvariantsAreLeftAlone) {
  const std::string body = R"(<body = body (int64 i, bool c, float[2] v) => (bool co, float[2] vo)
          <int64[2] idx = {1, 0}> {
        co = Identity (c)
        t = Gather (a, idx)
        vo = Add (v, t)
      }>)";
  // (A constant trip count of 0 or a constant false condition: fold_zero_trip removes the
  // Loop, ALoopOfNoTripIsItsInitialValues.)
  for (const std::string& header :
       {std::string("g (float[2] x, float[2] a, int64 trips) => (float[2] y) <bool go = {1}>"),
        std::string("g (float[2] x, float[2] a, bool go) => (float[2] y) <int64 trips = {3}>")}) {
    expect_no_rewrite(kPass, R"(<ir_version: 8, opset_import: ["" : 17]>
      )" + header + R"( {
        y = Loop (trips, go, x) )" +
                                 body + R"(
      })");
  }
  // No invariant: everything reads the carried value; a random draw per iteration.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y) <int64 trips = {3}, bool go = {1}> {
      y = Loop (trips, go, x) <body = body (int64 i, bool c, float[2] v) => (bool co, float[2] vo) {
        co = Identity (c)
        r = RandomUniform <shape = [2]> ()
        vo = Add (v, r)
      }>
    }
  )",
                    compare_outputs(Outputs::kNotCompared));  // the evaluator has no RandomUniform
  // A Cast from strings can fail (a string that is not a number): it stays too.
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, string[2] words, int64 trips) => (float[2] y) <bool go = {1}> {
      y = Loop (trips, go, x) <body = body (int64 i, bool c, float[2] v) => (bool co, float[2] vo) {
        co = Identity (c)
        n = Cast <to = 1> (words)
        vo = Add (v, n)
      }>
    }
  )",
                    compare_outputs(Outputs::kNotCompared));  // random strings do not parse
  // A Scan whose length is unknown (may be 0), its invariant a Gather (which can fail).
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] s0, float[N,2] xs, float[2] a) => (float[2] s) {
      s = Scan (s0, xs) <num_scan_inputs = 1, body = body (float[2] si, float[2] x) => (float[2] so)
          <int64[2] idx = {1, 0}> {
        z = Gather (a, idx)
        y = Mul (x, z)
        so = Add (si, y)
      }>
    }
  )");
}

// A decoder's loop whose trip count is an input (its maximum length): the invariant projection
// of the outer memory (a product with the same inner dims, a bias that broadcasts whatever the
// batch and length) cannot fail, so it moves even though the loop may run zero times; the
// invariant Reshape, which could fail, stays in the body.
TEST(OptimizeLoops, WithATripCountFromAnInputOnlyWhatCannotFailMoves) {
  auto m = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[B,T,4] memory, float[B,3] x, int64 trips) => (float[B,3] y)
      <bool go = {1}, float[4,3] w = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
       float[3] bias = {1, 0, -1}, int64[2] flat = {-1, 3}> {
      y = Loop (trips, go, x) <body = body (int64 i, bool c, float[B,3] v) => (bool co, float[B,3] vo) {
        co = Identity (c)
        p = MatMul (memory, w)
        k = Add (p, bias)
        r = Reshape (k, flat)
        s = ReduceSum <keepdims = 0> (r)
        vo = Add (v, s)
      }>
    }
  )",
                       rewrites(1));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(op_types(m->graph()), (std::vector<std::string>{"MatMul", "Add", "Loop"}));
  const ir::Node* loop = only_node(m->graph(), "Loop");
  ASSERT_NE(loop, nullptr);
  EXPECT_EQ(op_types(*loop->subgraphs().at(0).graph),
            (std::vector<std::string>{"Identity", "Reshape", "ReduceSum", "Add"}));
}

// Nested loops: the inner body's invariant moves to the outer body, and from there before the
// outer loop when it is invariant there too (here it reads only a main-graph input); the inner
// node that reads the outer loop's carried value moves only as far as the outer body.
TEST(OptimizeLoops, NestedLoopsMoveInvariantsAsFarAsTheyCan) {
  auto m = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, float[2] a) => (float[2] y) <int64 trips = {2}, bool go = {1}> {
      y = Loop (trips, go, x) <body = outer (int64 i, bool c, float[2] v) => (bool co, float[2] vo) {
        co = Identity (c)
        vo = Loop (trips, go, v) <body = inner (int64 j, bool d, float[2] u) => (bool do, float[2] uo) {
          do = Identity (d)
          p = Mul (a, a)
          q = Mul (v, p)
          uo = Add (u, q)
        }>
      }>
    }
  )",
                       rewrites(1));
  ASSERT_NE(m, nullptr);
  // p = Mul (a, a) is now in the main graph, q = Mul (v, p) in the outer body, the inner body
  // keeps only do and uo.
  EXPECT_EQ(op_types(m->graph()), (std::vector<std::string>{"Mul", "Loop"}));
  const ir::Node* outer = only_node(m->graph(), "Loop");
  ASSERT_NE(outer, nullptr);
  const ir::Graph& outer_body = *outer->subgraphs().at(0).graph;
  EXPECT_EQ(op_types(outer_body), (std::vector<std::string>{"Identity", "Mul", "Loop"}));
  const ir::Node* inner = only_node(outer_body, "Loop");
  ASSERT_NE(inner, nullptr);
  EXPECT_EQ(op_types(*inner->subgraphs().at(0).graph),
            (std::vector<std::string>{"Identity", "Add"}));
}

// A decoding loop as TorchScript exports it (tests/data/make_greedy_decoder_loop.py: bench/models/
// make.py's GreedyDecoder, one Loop whose trip count is the max_length input): the projections of
// the encoder's memory to keys and values, recomputed every iteration, cannot fail and move
// before the Loop; the outputs stay the same on the evaluator.
TEST(OptimizeLoops, ATorchScriptDecodingLoopComputesItsCrossAttentionKeysOnce) {
  auto loaded = ir::Model::load_file(
      (std::filesystem::path(GRAFT_SOURCE_DIR) / "tests" / "data" / "greedy_decoder_loop.onnx")
          .string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ir::Model& model = **loaded;
  auto body_matmuls = [&] {
    const ir::Node* loop = only_node(model.graph(), "Loop");
    if (loop == nullptr) return -1;
    int count = 0;
    for (const ir::Node* n : loop->subgraphs().at(0).graph->nodes()) count += n->is("MatMul");
    return count;
  };
  auto main_matmuls = [&] {
    int count = 0;
    for (const ir::Node* n : model.graph().nodes()) count += n->is("MatMul");
    return count;
  };
  const int body_before = body_matmuls(), main_before = main_matmuls();
  ASSERT_GT(body_before, 0);
  PassResult r = run_pass_checked(model, kPass);
  EXPECT_EQ(r.rewrites, 1);
  EXPECT_EQ(body_matmuls(), body_before - 2);  // memory @ Wk and memory @ Wv
  EXPECT_EQ(main_matmuls(), main_before + 2);
  EXPECT_EQ(onnx_errors(model), "");
}

// A Loop of one trip becomes its body: the iteration number 0, the initial carried value, and
// the scan output stacked along a new axis of 1. Two trips stay a Loop.
TEST(OptimizeLoops, ALoopOfOneTripBecomesItsBody) {
  const std::string loop = R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y, float[1,2] ys) <int64 trips = {TRIPS}, bool go = {1}> {
      y, ys = Loop (trips, go, x) <body = body (int64 i, bool c, float[2] v) => (bool co, float[2] vo, float[2] so) {
        co = Identity (c)
        f = Cast <to = 1> (i)
        vo = Add (v, f)
        so = Mul (vo, vo)
      }>
    }
  )";
  auto with = [&](const std::string& trips) {
    std::string t = loop;
    t.replace(t.find("TRIPS"), 5, trips);
    return t;
  };
  auto m = run_rewrite(kPass, with("1"), rewrites(1));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(count_ops(*m, "Loop"), 0);
  EXPECT_EQ(count_ops(*m, "Unsqueeze"), 1);
  const std::string two = with("2");
  auto parsed = parse_text(two);
  ASSERT_NE(parsed, nullptr);
  PassResult r = run_pass(*parsed, kPass);
  EXPECT_EQ(r.rules["fold_single_trip"], 0);
  EXPECT_EQ(count_ops(*parsed, "Loop"), 1);
}

// A Loop that never runs (a trip count of 0, or a false initial condition) is its initial
// values; a scan output read becomes an empty [0, 2] tensor. An unknown per-iteration shape
// keeps the Loop.
TEST(OptimizeLoops, ALoopOfNoTripIsItsInitialValues) {
  const std::string loop = R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x) => (float[2] y, float[0,2] ys) <int64 trips = {TRIPS}, bool go = {GO}> {
      y, ys = Loop (trips, go, x) <body = body (int64 i, bool c, float[2] v) => (bool co, float[2] vo, SCAN so) {
        co = Identity (c)
        f = Cast <to = 1> (i)
        vo = Add (v, f)
        so = Mul (vo, vo)
      }>
    }
  )";
  auto with = [&](const std::string& trips, const std::string& go, const std::string& scan) {
    std::string t = loop;
    t.replace(t.find("TRIPS"), 5, trips);
    t.replace(t.find("GO"), 2, go);
    t.replace(t.find("SCAN"), 4, scan);
    return t;
  };
  for (const auto& [trips, go] : {std::pair{"0", "1"}, std::pair{"3", "0"}, std::pair{"-2", "1"}}) {
    // (The evaluator cannot run the original: a scan output of no iteration has no shape.)
    auto m =
        run_rewrite(kPass, with(trips, go, "float[2]"), rewrites(1, Outputs::kSameIfVerifiable));
    ASSERT_NE(m, nullptr) << trips << " " << go;
    EXPECT_EQ(count_ops(*m, "Loop"), 0);
    EXPECT_EQ(m->graph().outputs()[1].value->static_shape(), (std::vector<int64_t>{0, 2}));
    EXPECT_EQ(m->graph().outputs()[0].value->name(), "y");
    auto out =
        eval::run_model(*m, {{"x", *eval::Tensor::zeros(onnx::TensorProto::FLOAT, {2}, 64)}});
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)[1].dims(), (std::vector<int64_t>{0, 2}));
  }
  // The per-iteration value's size follows a symbolic input dim: no empty value can be written.
  auto kept = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[N] x) => (float[N] y, float[0,N] ys) <int64 trips = {0}, bool go = {1}> {
      y, ys = Loop (trips, go, x) <body = body (int64 i, bool c, float[N] v) => (bool co, float[N] vo, float[N] so) {
        co = Identity (c)
        vo = Neg (v)
        so = Mul (vo, vo)
      }>
    }
  )");
  ASSERT_NE(kept, nullptr);
  PassResult r = run_pass(*kept, kPass);
  EXPECT_EQ(r.rules["fold_zero_trip"], 0);
  EXPECT_EQ(count_ops(*kept, "Loop"), 1);
}

// A carried value nothing reads after the loop, and that the body reads only to compute its own
// next value (a running score), goes: from the Loop's inputs and outputs, the body's, and the
// body nodes that computed it; its initial value goes with its last reader.
TEST(OptimizeLoops, ACarriedValueNoOneReadsIsRemoved) {
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, int64 trips) => (float[2] y) <bool go = {1}, float[1] zero = {0}> {
      y, score = Loop (trips, go, x, zero) <body = body (int64 i, bool c, float[2] v, float[1] s)
          => (bool co, float[2] vo, float[1] so) {
        co = Identity (c)
        vo = Neg (v)
        m = ReduceMax (v)
        so = Add (s, m)
      }>
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, int64 trips) => (float[2] y) <bool go = {1}> {
      y = Loop (trips, go, x) <body = body (int64 i, bool c, float[2] v) => (bool co, float[2] vo) {
        co = Identity (c)
        vo = Neg (v)
      }>
    }
  )",
                 rewrites(1));
}

// A Scan's state variable read by nothing outside the chain that updates it goes, and so does a
// scan output no one reads (with its entry in scan_output_axes); the state the read scan output
// is computed from stays, though its final value is not read either.
TEST(OptimizeLoops, AScanKeepsOnlyTheStatesAndScanOutputsThatAreRead) {
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] s0, float[1] t0, float[4,2] xs) => (float[4,2] ys) {
      s, t, ys, zs = Scan (s0, t0, xs) <num_scan_inputs = 1, scan_output_axes = [0, 1],
          body = body (float[2] si, float[1] ti, float[2] x)
          => (float[2] so, float[1] to, float[2] y, float[2] z) {
        so = Add (si, x)
        m = ReduceSum (x)
        to = Add (ti, m)
        y = Mul (x, so)
        z = Neg (x)
      }>
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] s0, float[1] t0, float[4,2] xs) => (float[4,2] ys) {
      s, ys = Scan (s0, xs) <num_scan_inputs = 1, scan_output_axes = [0],
          body = body (float[2] si, float[2] x) => (float[2] so, float[2] y) {
        so = Add (si, x)
        y = Mul (x, so)
      }>
    }
  )",
                 rewrites(1));
}

// A carried value the body returns unchanged is its initial value on every iteration and after
// the loop: the body reads the initial value, the reader after the loop too, and the carried
// value goes.
TEST(OptimizeLoops, ACarriedValueTheBodyNeverChangesIsItsInitialValue) {
  expect_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, float[2] a, int64 trips) => (float[2] y, float[2] b) <bool go = {1}> {
      y, k = Loop (trips, go, x, a) <body = body (int64 i, bool c, float[2] v, float[2] w)
          => (bool co, float[2] vo, float[2] wo) {
        co = Identity (c)
        vo = Add (v, w)
        wo = Identity (w)
      }>
      b = Abs (k)
    }
  )",
                 R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, float[2] a, int64 trips) => (float[2] y, float[2] b) <bool go = {1}> {
      y = Loop (trips, go, x) <body = body (int64 i, bool c, float[2] v) => (bool co, float[2] vo) {
        co = Identity (c)
        vo = Add (v, a)
      }>
      b = Abs (a)
    }
  )",
                 rewrites(1));
}

// Carried values that are read stay: after the loop (y), or by the body for what it must
// compute (the token a decoder feeds back, read by the tokens it returns); a Loop whose outputs
// nobody reads is prune's.
TEST(OptimizeLoops, CarriedValuesThatAreReadStay) {
  expect_no_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, int64 trips) => (float[2] y) <bool go = {1}> {
      y, last = Loop (trips, go, x, x) <body = body (int64 i, bool c, float[2] v, float[2] u)
          => (bool co, float[2] vo, float[2] uo) {
        co = Identity (c)
        uo = Neg (u)
        vo = Add (v, uo)
      }>
    }
  )");
  auto m = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, int64 trips) => (float[2] y) <bool go = {1}> {
      unread = Loop (trips, go, x) <body = body (int64 i, bool c, float[2] v) => (bool co, float[2] vo) {
        co = Identity (c)
        vo = Neg (v)
      }>
      y = Abs (x)
    }
  )");
  ASSERT_NE(m, nullptr);
  PassResult r = run_pass(*m, kPass);
  EXPECT_EQ(r.rules["drop_unread_values"], 0);
}

// A body whose condition is a constant false runs once: with a constant trip count of at least
// one the Loop becomes its body (its trip count 1, then fold_single_trip). With a trip count
// read from an input it may run once or not at all, and stays.
TEST(OptimizeLoops, ABodyThatStopsAfterOneIterationBecomesTheGraphsNodes) {
  const std::string loop = R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, int64 n) => (float[2] y) <int64 trips = {5}, bool go = {1}> {
      y = Loop (TRIPS, go, x) <body = body (int64 i, bool c, float[2] v) => (bool co, float[2] vo)
          <bool stop = {0}> {
        co = Identity (stop)
        vo = Neg (v)
      }>
    }
  )";
  auto with = [&](const std::string& trips) {
    std::string t = loop;
    t.replace(t.find("TRIPS"), 5, trips);
    return t;
  };
  auto m = run_rewrite(kPass, with("trips"));
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(op_types(m->graph()), (std::vector<std::string>{"Neg"}));
  auto kept = parse_text(with("n"));
  ASSERT_NE(kept, nullptr);
  PassResult r = run_pass(*kept, kPass);
  EXPECT_EQ(r.rules["constant_condition"], 0);
  EXPECT_EQ(count_ops(*kept, "Loop"), 1);
}

// A body that passes its condition on unchanged, from a constant true, loops until its trip
// count: what it computes from the condition reads a constant true, and the condition input
// goes. Without a trip count such a loop never ends, and is left as it is.
TEST(OptimizeLoops, AConditionThatStaysTrueIsAConstant) {
  auto m = run_rewrite(kPass, R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, int64 trips) => (float[2] y) <bool go = {1}> {
      y = Loop (trips, go, x) <body = body (int64 i, bool c, float[2] v) => (bool co, float[2] vo) {
        co = Identity (c)
        f = Cast <to = 1> (c)
        vo = Add (v, f)
      }>
    }
  )");
  ASSERT_NE(m, nullptr);
  const ir::Node* loop = only_node(m->graph(), "Loop");
  ASSERT_NE(loop, nullptr);
  EXPECT_EQ(loop->input(1), nullptr);
  const ir::Graph& body = *loop->subgraphs().at(0).graph;
  EXPECT_TRUE(body.inputs()[1].value->uses().empty());
  // Computed from a constant, the Cast is now loop invariant: hoist_invariants moves it out.
  const ir::Node* cast = only_node(m->graph(), "Cast");
  ASSERT_NE(cast, nullptr);
  EXPECT_EQ(ir::constant_ints(cast->input(0)), (std::vector<int64_t>{1}));
  // (ONNX's text syntax cannot leave out the trip count: it is removed below.)
  auto endless = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2] x, int64 trips) => (float[2] y) <bool go = {1}> {
      y = Loop (trips, go, x) <body = body (int64 i, bool c, float[2] v) => (bool co, float[2] vo) {
        co = Identity (c)
        f = Cast <to = 1> (c)
        vo = Add (v, f)
      }>
    }
  )");
  ASSERT_NE(endless, nullptr);
  only_node(endless->graph(), "Loop")->set_input(0, nullptr);
  PassResult r = run_pass(*endless, kPass);
  EXPECT_EQ(r.rules["constant_condition"], 0);
}

// TorchScript's export of a generation loop that keeps a running score and a step count it does
// not return (tests/data/make_scored_decoder_loop.py): both carried values go, with the
// LogSoftmax, ReduceMax and Adds computing them every step; the tokens stay the same.
TEST(OptimizeLoops, ATorchScriptLoopDropsTheScoreItDoesNotReturn) {
  auto loaded = ir::Model::load_file(
      (std::filesystem::path(GRAFT_SOURCE_DIR) / "tests" / "data" / "scored_decoder_loop.onnx")
          .string());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ir::Model& model = **loaded;
  const ir::Node* loop = only_node(model.graph(), "Loop");
  ASSERT_NE(loop, nullptr);
  ASSERT_EQ(loop->outputs().size(), 4u);  // tokens, score, steps, token
  PassResult r = run_pass_checked(model, kPass);
  EXPECT_EQ(r.rules["drop_unread_values"], 1);
  loop = only_node(model.graph(), "Loop");
  ASSERT_NE(loop, nullptr);
  EXPECT_EQ(loop->outputs().size(), 2u);  // tokens, and the token fed back
  EXPECT_EQ(loop->inputs().size(), 4u);
  const ir::Graph& body = *loop->subgraphs().at(0).graph;
  for (const ir::Node* n : body.nodes()) EXPECT_FALSE(n->is("LogSoftmax") || n->is("ReduceMax"));
  EXPECT_EQ(onnx_errors(model), "");
}

// The ONNX backend test models with Loop or Scan: whatever moves, the outputs stay the same
// (run_pass_checked compares them on the evaluator) and the ONNX checker accepts the result.
TEST(OptimizeLoops, BackendModelsWithLoopsStayEqual) {
  const std::filesystem::path dir = onnx_testdata_dir();
  if (dir.empty()) GTEST_SKIP() << "no ONNX backend test data";
  int seen = 0;
  for (const char* name : {"test_loop11", "test_loop13_seq", "test_scan9_sum", "test_scan_sum",
                           "test_range_float_type_positive_delta_expanded",
                           "test_range_int32_type_negative_delta_expanded"}) {
    const std::filesystem::path file = dir / "node" / name / "model.onnx";
    if (!std::filesystem::exists(file)) continue;
    auto loaded = ir::Model::load_file(file.string());
    ASSERT_TRUE(loaded.ok()) << name << ": " << loaded.status();
    ir::Model& model = **loaded;
    const auto sets = load_test_data_sets(file.parent_path(), model);
    run_pass(model, kPass);
    EXPECT_EQ(onnx_errors(model), "") << name;
    for (const RecordedSet& set : sets) {
      auto outs = eval::run_model(model, set.inputs, {});
      if (absl::IsUnimplemented(outs.status())) continue;  // sequences the evaluator lacks
      ASSERT_TRUE(outs.ok()) << name << ": " << outs.status();
      EXPECT_EQ(compare_recorded(*outs, set.outputs), "") << name;
    }
    ++seen;
  }
  EXPECT_GT(seen, 0);
}

}  // namespace
}  // namespace graft::testing
