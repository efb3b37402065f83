#include <cstring>
#include <set>
#include <string>

#include <onnx/defs/parser.h>

#include "tests/testing.h"

namespace graft::testing {
namespace {

// Parses `text` and stores the initializers named in `raw` as raw_data (the parser writes typed
// fields), as exporters do for real weights.
std::unique_ptr<ir::Model> parse_with_raw(const std::string& text,
                                          const std::set<std::string>& raw) {
  onnx::ModelProto proto;
  auto status = onnx::OnnxParser::Parse(proto, text.c_str());
  EXPECT_TRUE(status.IsOK()) << status.ErrorMessage();
  for (auto& t : *proto.mutable_graph()->mutable_initializer()) {
    if (!raw.count(t.name())) continue;
    std::string bytes;
    if (t.float_data_size()) {
      bytes.resize(t.float_data_size() * sizeof(float));
      std::memcpy(bytes.data(), t.float_data().data(), bytes.size());
      t.clear_float_data();
    } else if (t.data_type() == onnx::TensorProto::INT32) {
      bytes.resize(t.int32_data_size() * sizeof(int32_t));
      std::memcpy(bytes.data(), t.int32_data().data(), bytes.size());
      t.clear_int32_data();
    } else {
      ADD_FAILURE() << "no raw conversion for " << t.name();
    }
    t.set_raw_data(bytes);
  }
  auto model = ir::Model::from_proto(std::move(proto));
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

TEST(DedupInitializers, MergesEqualFloatTensorsKeepingTheFirst) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y)
      <float[2] w1 = {1.0, 2.0}, float[2] w2 = {1.0, 2.0}, float[2] w3 = {1.0, 2.5}> {
      a = Mul (x, w2)
      b = Add (a, w1)
      y = Sub (b, w3)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "dedup_initializers");
  EXPECT_TRUE(result.changed);
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(initializer_names(model->graph()), (std::vector<std::string>{"w1", "w3"}));
  EXPECT_EQ(input_names(producer(*model, "a")), (std::vector<std::string>{"x", "w1"}));
  EXPECT_EQ(input_names(producer(*model, "b")), (std::vector<std::string>{"a", "w1"}));
  EXPECT_EQ(initializer_values(*model, "w1"), (std::vector<double>{1.0, 2.0}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(DedupInitializers, MergesRawDataTensorsAndWholeGroups) {
  auto model = parse_with_raw(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[3] x) => (float[3] y)
      <float[3] a1 = {1.0, 2.0, 3.0}, float[3] b1 = {4.0, 5.0, 6.0},
       float[3] a2 = {1.0, 2.0, 3.0}, float[3] b2 = {4.0, 5.0, 6.0},
       float[3] a3 = {1.0, 2.0, 3.0}> {
      p = Mul (x, a1)
      q = Mul (p, b1)
      r = Add (q, a2)
      s = Add (r, b2)
      y = Sub (s, a3)
    }
  )",
                              {"a1", "b1", "a2", "b2", "a3"});
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "dedup_initializers");
  EXPECT_EQ(result.rewrites, 3);
  EXPECT_EQ(initializer_names(model->graph()), (std::vector<std::string>{"a1", "b1"}));
  EXPECT_EQ(input_names(producer(*model, "r")), (std::vector<std::string>{"q", "a1"}));
  EXPECT_EQ(input_names(producer(*model, "s")), (std::vector<std::string>{"r", "b1"}));
  EXPECT_EQ(input_names(producer(*model, "y")), (std::vector<std::string>{"s", "a1"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(DedupInitializers, SameBytesDifferentDimsAreNotMerged) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2,2] x) => (float[2,2] y)
      <float[4] flat = {1.0, 2.0, 3.0, 4.0}, float[2,2] square = {1.0, 2.0, 3.0, 4.0},
       float[1,4] row = {1.0, 2.0, 3.0, 4.0}, int64[2] shape = {2, 2}> {
      f = Reshape (flat, shape)
      r = Reshape (row, shape)
      a = Add (x, square)
      b = Add (a, f)
      y = Add (b, r)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass_checked(*model, "dedup_initializers").changed);
  EXPECT_EQ(model->graph().initializers().size(), 4u);
}

TEST(DedupInitializers, SameBytesDifferentTypeAreNotMerged) {
  // 1065353216 is the bit pattern of 1.0f: both raw payloads are the same four bytes.
  auto model = parse_with_raw(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1] x, int32[1] n) => (float[1] y, int32[1] m)
      <float[1] f = {1.0}, int32[1] i = {1065353216}> {
      y = Add (x, f)
      m = Add (n, i)
    }
  )",
                              {"f", "i"});
  ASSERT_TRUE(model);
  ASSERT_EQ(model->graph().find_local("f")->initializer()->raw_data(),
            model->graph().find_local("i")->initializer()->raw_data());
  EXPECT_FALSE(run_pass_checked(*model, "dedup_initializers").changed);
  EXPECT_EQ(initializer_names(model->graph()), (std::vector<std::string>{"f", "i"}));
}

TEST(DedupInitializers, DifferentValuesAndSignedZerosAreNotMerged) {
  auto model = parse_with_raw(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y)
      <float[2] a = {0.0, 1.0}, float[2] b = {-0.0, 1.0}, float[2] c = {0.0, 1.5}> {
      p = Div (x, a)
      q = Div (p, b)
      y = Add (q, c)
    }
  )",
                              {"a", "b", "c"});
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass_checked(*model, "dedup_initializers").changed);
  EXPECT_EQ(model->graph().initializers().size(), 3u);
}

TEST(DedupInitializers, GraphInputInitializersAreInterface) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x, float[2] w0 = {1.0, 2.0}) => (float[2] y) <float[2] w1 = {1.0, 2.0}> {
      a = Mul (x, w0)
      y = Add (a, w1)
    }
  )");
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass_checked(*model, "dedup_initializers").changed);
  EXPECT_EQ(initializer_names(model->graph()), (std::vector<std::string>{"w0", "w1"}));
  EXPECT_EQ(input_names(producer(*model, "y")), (std::vector<std::string>{"a", "w1"}));
}

TEST(DedupInitializers, RawAndTypedStorageAreNotCompared) {
  auto model = parse_with_raw(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) <float[2] r = {1.0, 2.0}, float[2] t = {1.0, 2.0}> {
      a = Mul (x, r)
      y = Add (a, t)
    }
  )",
                              {"r"});
  ASSERT_TRUE(model);
  EXPECT_FALSE(run_pass_checked(*model, "dedup_initializers").changed);
}

TEST(DedupInitializers, ExternalDataIsLeftAlone) {
  onnx::ModelProto proto;
  ASSERT_TRUE(onnx::OnnxParser::Parse(proto, R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) <float[2] e1 = {0.0, 0.0}, float[2] e2 = {0.0, 0.0}> {
      a = Mul (x, e1)
      y = Add (a, e2)
    }
  )")
                  .IsOK());
  for (auto& t : *proto.mutable_graph()->mutable_initializer()) {
    t.clear_float_data();
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    auto* location = t.add_external_data();
    location->set_key("location");
    location->set_value("weights.bin");
  }
  auto model = ir::Model::from_proto(std::move(proto));
  ASSERT_TRUE(model.ok()) << model.status();
  // Not run_pass_checked: the evaluator cannot read external tensor data.
  EXPECT_FALSE(run_pass(**model, "dedup_initializers").changed);
  EXPECT_EQ((*model)->graph().initializers().size(), 2u);
}

TEST(DedupInitializers, KeepsAGraphOutputName) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y, float[2] k, float[2] c1, float[2] c2)
      <float[2] w = {3.0, 4.0}, float[2] k = {3.0, 4.0},
       float[2] c1 = {5.0, 6.0}, float[2] c2 = {5.0, 6.0}> {
      y = Mul (x, w)
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "dedup_initializers");
  // w merges into k (a graph output keeps its name); c1 and c2 are both outputs and stay.
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(initializer_names(model->graph()), (std::vector<std::string>{"k", "c1", "c2"}));
  EXPECT_EQ(input_names(producer(*model, "y")), (std::vector<std::string>{"x", "k"}));
  std::vector<std::string> outputs;
  for (const auto& o : model->graph().outputs()) outputs.push_back(o.value->name());
  EXPECT_EQ(outputs, (std::vector<std::string>{"y", "k", "c1", "c2"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(DedupInitializers, RedirectsUsesCapturedBySubgraphs) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2] x) => (float[2] y) <float[2] w1 = {1.0, 2.0}, float[2] w2 = {1.0, 2.0}> {
      a = Mul (x, w1)
      y = If (cond) <
        then_branch = then_g () => (float[2] p) { p = Add (a, w2) },
        else_branch = else_g () => (float[2] q) { q = Sub (a, w2) }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "dedup_initializers");
  EXPECT_EQ(result.rewrites, 1);
  EXPECT_EQ(initializer_names(model->graph()), (std::vector<std::string>{"w1"}));
  const ir::Value* w1 = model->graph().find_local("w1");
  ASSERT_TRUE(w1);
  EXPECT_EQ(w1->uses().size(), 3u);  // the Mul and one capture per branch
  EXPECT_EQ(onnx_errors(*model), "");
}

TEST(DedupInitializers, DeduplicatesEachSubgraphOnItsOwn) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (bool cond, float[2] x) => (float[2] y) <float[2] outer = {7.0, 8.0}> {
      o = Mul (x, outer)
      y = If (cond) <
        then_branch = then_g () => (float[2] a) <float[2] t1 = {7.0, 8.0}, float[2] t2 = {7.0, 8.0}> {
          p = Mul (o, t1)
          a = Add (p, t2)
        },
        else_branch = else_g () => (float[2] b) <float[2] e1 = {7.0, 8.0}> {
          b = Mul (o, e1)
        }>
    }
  )");
  ASSERT_TRUE(model);
  auto result = run_pass_checked(*model, "dedup_initializers");
  // Only t2 into t1: outer, t1 and e1 live in different graphs.
  EXPECT_EQ(result.rewrites, 1);
  const ir::Node* if_node = model->graph().find_local("y")->producer();
  ASSERT_TRUE(if_node);
  for (const auto& sub : if_node->subgraphs()) {
    if (sub.attr_name == "then_branch") {
      EXPECT_EQ(initializer_names(*sub.graph), (std::vector<std::string>{"t1"}));
      for (const ir::Node* n : sub.graph->nodes())
        if (n->op_type() == "Add") {
          EXPECT_EQ(n->input(1)->name(), "t1");
        }
    } else {
      EXPECT_EQ(initializer_names(*sub.graph), (std::vector<std::string>{"e1"}));
    }
  }
  EXPECT_EQ(initializer_names(model->graph()), (std::vector<std::string>{"outer"}));
  EXPECT_EQ(onnx_errors(*model), "");
}

}  // namespace
}  // namespace graft::testing
