// O2 over real models: every libonnx-testdata model and ../shared/models. The result must load,
// keep the interface, have no more nodes, and pass the ONNX checker whenever the input does.
#include <google/protobuf/util/message_differencer.h>

#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  size_t nodes_before = 0, nodes_after = 0;
  int rollbacks = 0;
};

Outcome optimize_and_check(const fs::path& path) {
  Outcome o;
  std::string bytes = read_file(path);
  auto model = ir::Model::parse(bytes);
  EXPECT_TRUE(model.ok()) << path << ": " << model.status();
  if (!model.ok()) return o;
  std::string skipped;
  bool input_valid = onnx_check(**model, false, &skipped).ok() && skipped.empty();
  onnx::ModelProto before = (*model)->to_proto();

  PipelineConfig config;  // O2, structural checks only: the checker is applied below
  auto report = run_pipeline(*model, config);
  EXPECT_TRUE(report.ok()) << path << ": " << report.status();
  if (!report.ok()) return o;
  o.nodes_before = report->nodes_before;
  o.nodes_after = report->nodes_after;
  for (const auto& p : report->passes) {
    o.rollbacks += p.rollbacks;
    EXPECT_EQ(p.rollbacks, 0) << path << ": " << p.name << " rolled back: " << p.rollback_reason;
  }
  EXPECT_LE(o.nodes_after, o.nodes_before) << path;

  auto saved = (*model)->serialize_and_release();
  EXPECT_TRUE(saved.ok()) << path;
  if (!saved.ok()) return o;
  auto reloaded = ir::Model::parse(*saved);
  EXPECT_TRUE(reloaded.ok()) << path << ": " << reloaded.status();
  if (!reloaded.ok()) return o;
  onnx::ModelProto after = (*reloaded)->to_proto();
  // Interface: same inputs and outputs, same names, same declared types.
  EXPECT_EQ(after.graph().input_size(), before.graph().input_size()) << path;
  EXPECT_EQ(after.graph().output_size(), before.graph().output_size()) << path;
  for (int i = 0; i < std::min(after.graph().output_size(), before.graph().output_size()); ++i)
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(before.graph().output(i),
                                                                   after.graph().output(i)))
        << path << " output " << i;
  if (input_valid) {
    auto st = onnx_check(**reloaded, false, nullptr);
    EXPECT_TRUE(st.ok()) << path << ": " << st;
  }
  return o;
}

TEST(ModelsAtO2, EveryLibonnxTestdataModel) {
  fs::path root = onnx_testdata_dir();
  if (root.empty()) GTEST_SKIP() << "libonnx-testdata is not installed";
  size_t count = 0, before = 0, after = 0;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file() || e.path().extension() != ".onnx") continue;
    Outcome o = optimize_and_check(e.path());
    before += o.nodes_before;
    after += o.nodes_after;
    ++count;
  }
  std::cout << count << " models, " << before << " -> " << after << " nodes\n";
  EXPECT_GT(count, 1000u);
}

TEST(ModelsAtO2, EverySharedModel) {
  fs::path root = shared_models_dir();
  if (root.empty()) GTEST_SKIP() << "../shared/models is absent (only in the team's checkout)";
  for (const auto& e : fs::directory_iterator(root)) {
    if (e.path().extension() != ".onnx") continue;
    Outcome o = optimize_and_check(e.path());
    std::cout << e.path().filename().string() << ": " << o.nodes_before << " -> " << o.nodes_after
              << " nodes\n";
  }
}

TEST(ModelsAtO2, RepoExampleModel) {
  fs::path p = fs::path(GRAFT_SOURCE_DIR) / "models" / "ppocr_mobile_v2_cls.onnx";
  Outcome o = optimize_and_check(p);
  EXPECT_LT(o.nodes_after, o.nodes_before);
}

}  // namespace
}  // namespace graft::testing
