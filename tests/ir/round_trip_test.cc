// Loading and saving with no passes must give back exactly the input ModelProto, for every
// model of libonnx-testdata and ../shared/models.
#include <google/protobuf/util/message_differencer.h>

#include "tests/testing.h"

namespace graft::testing {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> models_under(const fs::path& root) {
  std::vector<fs::path> out;
  if (root.empty()) return out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file() && e.path().extension() == ".onnx") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// Returns an empty string when `bytes` round-trips losslessly, else what differs.
std::string round_trip(const std::string& bytes, bool by_move) {
  onnx::ModelProto original;
  if (!original.ParseFromString(bytes)) return "input does not parse";
  auto model = ir::Model::parse(bytes);
  if (!model.ok()) return "load failed: " + std::string(model.status().message());
  onnx::ModelProto saved = by_move ? (*model)->release_proto() : (*model)->to_proto();
  google::protobuf::util::MessageDifferencer diff;
  std::string report;
  diff.ReportDifferencesToString(&report);
  if (!diff.Compare(original, saved)) return report.substr(0, 2000);
  return "";
}

void expect_all_round_trip(const std::vector<fs::path>& models) {
  int checked = 0;
  for (const auto& path : models) {
    std::string bytes = read_file(path);
    EXPECT_EQ(round_trip(bytes, /*by_move=*/false), "") << path;
    EXPECT_EQ(round_trip(bytes, /*by_move=*/true), "") << path;
    ++checked;
  }
  std::cout << "round-tripped " << checked << " models\n";
}

TEST(RoundTrip, EveryLibonnxTestdataModel) {
  fs::path root = onnx_testdata_dir();
  if (root.empty()) GTEST_SKIP() << "libonnx-testdata is not installed";
  auto models = models_under(root);
  EXPECT_GT(models.size(), 1000u);
  expect_all_round_trip(models);
}

TEST(RoundTrip, EverySharedModel) {
  fs::path root = shared_models_dir();
  if (root.empty()) GTEST_SKIP() << "../shared/models is absent (only in the team's checkout)";
  auto models = models_under(root);
  EXPECT_GE(models.size(), 4u);
  expect_all_round_trip(models);
}

TEST(RoundTrip, CloneSavesTheSameModel) {
  fs::path root = onnx_testdata_dir();
  if (root.empty()) GTEST_SKIP() << "libonnx-testdata is not installed";
  for (const char* name : {"node/test_if/model.onnx", "node/test_loop11/model.onnx",
                           "pytorch-converted/test_ConvTranspose2d/model.onnx"}) {
    std::string bytes = read_file(root / name);
    auto model = ir::Model::parse(bytes);
    ASSERT_TRUE(model.ok()) << model.status();
    auto copy = (*model)->clone();
    EXPECT_TRUE(copy->verify().ok());
    EXPECT_TRUE(
        google::protobuf::util::MessageDifferencer::Equals((*model)->to_proto(), copy->to_proto()))
        << name;
    // The clone shares initializer tensors instead of copying them.
    auto a = (*model)->graph().initializers();
    auto b = copy->graph().initializers();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i]->initializer(), b[i]->initializer());
  }
}

TEST(RoundTrip, UnsortedNodesAreSavedSorted) {
  onnx::ModelProto proto;
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] z) {
      y = Relu (x)
      z = Neg (y)
    }
  )");
  proto = model->to_proto();
  // Reverse the node order, as some exporters write it.
  proto.mutable_graph()->mutable_node()->SwapElements(0, 1);
  auto loaded = ir::Model::from_proto(onnx::ModelProto(proto));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  onnx::ModelProto saved = (*loaded)->to_proto();
  ASSERT_EQ(saved.graph().node_size(), 2);
  EXPECT_EQ(saved.graph().node(0).op_type(), "Relu");
  EXPECT_EQ(saved.graph().node(1).op_type(), "Neg");
}

TEST(RoundTrip, UnknownFieldsAndMetadataSurvive) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13], producer_name: "p", model_version: 7>
    g (float[2] x) => (float[2] y) {
      y = Relu (x)
    }
  )");
  onnx::ModelProto proto = model->to_proto();
  auto* meta = proto.add_metadata_props();
  meta->set_key("k");
  meta->set_value("v");
  proto.mutable_graph()->mutable_node(0)->set_doc_string("why");
  // Field 999 is unknown to every ONNX version: it must still be carried through.
  proto.mutable_graph()
      ->mutable_node(0)
      ->GetReflection()
      ->MutableUnknownFields(proto.mutable_graph()->mutable_node(0))
      ->AddVarint(999, 42);
  proto.GetReflection()->MutableUnknownFields(&proto)->AddLengthDelimited(998, "future");
  std::string bytes = proto.SerializeAsString();
  EXPECT_EQ(round_trip(bytes, false), "");
  EXPECT_EQ(round_trip(bytes, true), "");
}

}  // namespace
}  // namespace graft::testing

namespace graft::testing {
namespace {

TEST(RoundTrip, InitializerBytesAreMovedNotCopied) {
  onnx::ModelProto proto = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4] x) => (float[4] y) {
      y = Relu (x)
    }
  )")
                               ->to_proto();
  auto* add = proto.mutable_graph()->mutable_node(0);
  add->set_op_type("Add");
  add->add_input("w");
  auto* w = proto.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(4);
  w->set_raw_data(std::string(16, '\x01'));
  const char* bytes = proto.graph().initializer(0).raw_data().data();

  auto model = ir::Model::from_proto(std::move(proto));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->graph().initializers()[0]->initializer()->raw_data().data(), bytes);
  {
    // While a snapshot shares the tensor, saving must copy (the snapshot keeps its bytes).
    auto snapshot = (*model)->clone();
    onnx::ModelProto copied = (*model)->clone()->release_proto();
    EXPECT_NE(copied.graph().initializer(0).raw_data().data(), bytes);
  }
  onnx::ModelProto saved = (*model)->release_proto();
  EXPECT_EQ(saved.graph().initializer(0).raw_data().data(), bytes);
  EXPECT_EQ(saved.graph().initializer(0).raw_data(), std::string(16, '\x01'));
}

}  // namespace
}  // namespace graft::testing
