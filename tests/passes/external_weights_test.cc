// Passes on models whose weights are ONNX external data: each test writes its weights file in a
// temporary folder, runs a pass that reads weights (through ir::constant_proto / the queries /
// eval::Tensor::from_proto with the model's ExternalData), and checks that the rewrite happened,
// that the result passes the ONNX checker and computes what the input did on the reference
// evaluator (which reads the external weights too), that saving puts the new weights in a new
// external file and keeps the model small, and that the saved model, loaded from disk with its
// files, computes the same again.
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "core/eval/verify.h"
#include "core/ir/external_data.h"
#include "core/ir/model.h"
#include "core/paths/files.h"
#include "tests/external_model.h"
#include "tests/testing.h"

namespace graft {
namespace {

namespace fs = std::filesystem;
using testing::count_ops;
using testing::externalize;
using testing::parse_text;
using testing::run_pass_checked;
using testing::same_outputs;
using testing::TempFolder;

std::string numbers(int n, double scale = 1, int offset = 0) {
  std::string out;
  for (int i = 0; i < n; ++i)
    out += (i ? ", " : "") + std::to_string(((i * 7 + offset) % 13 - 6) * scale);
  return out;
}

int external_initializers(const ir::Model& model) {
  int n = 0;
  for (ir::Graph* g : model.all_graphs())
    for (ir::Value* v : g->initializers()) n += ir::is_external(*v->initializer());
  return n;
}

// Saves `model` (consumed) into `out` as out/model.onnx with new weights in out/new.weights,
// then loads it from disk and expects it to compute what `reference` does. Returns what the
// save reported.
ir::Model::SavedModel save_and_reload(std::unique_ptr<ir::Model> model, const ir::Model& reference,
                                      const fs::path& out) {
  ir::Model::ExternalWrite write;
  write.folder = out.string();
  write.location = "new.weights";
  write.even_without_external = true;  // the input had external data, even if a pass used it up
  auto saved = model->serialize_with_external(write);
  EXPECT_TRUE(saved.ok()) << saved.status();
  if (!saved.ok()) return {};
  EXPECT_TRUE(paths::write_file_atomic((out / "model.onnx").string(), saved->model).ok());
  auto reloaded = ir::Model::load_file((out / "model.onnx").string());
  EXPECT_TRUE(reloaded.ok()) << reloaded.status();
  if (reloaded.ok()) {
    EXPECT_EQ(same_outputs(reference, **reloaded), "");
    EXPECT_EQ(testing::onnx_errors_beside(**reloaded, out), "");
  }
  return *saved;
}

TEST(ExternalWeights, FoldConstantsReadsAnExternalWeightAndTheFoldedOneIsSavedExternally) {
  TempFolder dir;
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[32, 16] x) => (float[32, 16] y) <float[16, 32] w = {)" +
                          numbers(512, 0.5) + R"(}> {
      t = Transpose <perm = [1, 0]> (w)
      y = Add (x, t)
    }
  )");
  externalize(*model, dir.path(), "weights.bin", {"w"});
  const auto reference = model->clone();
  auto result = run_pass_checked(*model, "fold_constants");  // outputs compared on the evaluator
  EXPECT_TRUE(result.changed);
  EXPECT_EQ(count_ops(*model, "Transpose"), 0);
  EXPECT_EQ(testing::onnx_errors_beside(*model, dir.path()), "");
  EXPECT_GT(model->external_data()->bytes_read(), 0u);
  // The folded weight is in memory; saving moves it to the new file.
  auto saved = save_and_reload(std::move(model), *reference, dir.path());
  EXPECT_EQ(saved.new_file_tensors, 1);
  EXPECT_EQ(saved.new_file_bytes, 2048u);
  EXPECT_LT(saved.model.size(), 1024u);
  EXPECT_EQ(fs::file_size(dir.path() / "new.weights"), 2048u);
}

TEST(ExternalWeights, FoldConstantsKeepsItsLimitWithoutReading) {
  TempFolder dir;
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[32, 16] x) => (float[32, 16] y) <float[16, 32] w = {)" +
                          numbers(512) + R"(}> {
      t = Transpose <perm = [1, 0]> (w)
      y = Add (x, t)
    }
  )");
  externalize(*model, dir.path(), "weights.bin", {"w"});
  PassOptions options;
  options["max_bytes"] = "1024";  // the 2 KiB weight is above it
  testing::run_pass(*model, "fold_constants", options);
  EXPECT_EQ(count_ops(*model, "Transpose"), 1);
  EXPECT_EQ(model->external_data()->bytes_read(), 0u);
}

TEST(ExternalWeights, DedupMergesEqualExternalTensorsHashingOnlyCandidates) {
  TempFolder dir;
  // a and b hold the same numbers at different offsets, c the same range as a, d other numbers
  // of the same shape, e a different shape (never read).
  auto model =
      parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[64] x, float[32] u) => (float[64] ya, float[64] yb, float[64] yc, float[64] yd,
                                      float[32] ye)
        <float[64] a = {)" +
                 numbers(64) + R"(}, float[64] b = {)" + numbers(64) + R"(}, float[64] d = {)" +
                 numbers(64, 1, 3) + R"(}, float[32] e = {)" + numbers(32) + R"(}> {
      ya = Add (x, a)
      yb = Add (x, b)
      yd = Add (x, d)
      ye = Add (u, e)
      yc = Identity (ya)
    }
  )");
  externalize(*model, dir.path(), "weights.bin", {"a", "b", "d", "e"});
  // c: a second initializer referencing a's bytes exactly.
  const onnx::TensorProto a = *model->graph().find_local("a")->initializer();
  onnx::TensorProto c = a;
  c.set_name("c");
  ir::Value* cv = model->graph().add_initializer("c", c);
  ir::Node* yc = testing::producer(*model, "yc");
  ASSERT_NE(yc, nullptr);
  ir::Node* add = model->graph().add_node("Add", {model->graph().find_local("x"), cv}, {"c_sum"});
  yc->set_input(0, add->output(0));
  ASSERT_TRUE(model->finalize().ok());
  const auto reference = model->clone();

  // The pass alone (the evaluator, which compares outputs below, reads every weight).
  auto result = testing::run_pass(*model, "dedup_initializers");
  EXPECT_EQ(result.rewrites, 2);                // b and c merged into a
  EXPECT_EQ(external_initializers(*model), 3);  // a, d, e
  EXPECT_EQ(model->graph().find_local("b"), nullptr);
  // a, b and d were hashed (256 bytes each), a and b compared (2 x 256); c is a's range (its
  // hash remembered, the comparison immediate); e, alone of its shape, never read.
  EXPECT_EQ(model->external_data()->bytes_read(), 3 * 256u + 2 * 256u);
  EXPECT_EQ(same_outputs(*reference, *model), "");
  EXPECT_EQ(testing::onnx_errors_beside(*model, dir.path()), "");
  // A second run reads nothing: hashes are remembered, and nothing is left to compare.
  const uint64_t after_first = model->external_data()->bytes_read();
  auto again = testing::run_pass(*model, "dedup_initializers");
  EXPECT_FALSE(again.changed);
  EXPECT_EQ(model->external_data()->bytes_read(), after_first);
  auto saved = save_and_reload(std::move(model), *reference, dir.path());
  EXPECT_EQ(saved.new_file_bytes, 0u);  // nothing new to write
  EXPECT_EQ(saved.locations, (std::vector<std::string>{"weights.bin"}));
}

TEST(ExternalWeights, DedupReadsOnlyTheHeadsOfWeightsThatDifferThere) {
  // Four 128 KiB weights of one shape in one file: p and q differ in their first bytes, r and s
  // only in their last. Heads (64 KiB) of all four are hashed; only r and s are hashed whole.
  TempFolder dir;
  const uint64_t n = 32768, bytes = n * 4;
  std::string base(bytes, '\0');
  for (uint64_t i = 0; i < bytes; ++i) base[i] = static_cast<char>(i * 31 % 61);
  std::string p = base, q = base, r = base, t = base;
  p[0] = 1;
  q[0] = 2;
  r[bytes - 1] = 3;
  t[bytes - 1] = 4;
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[32768] x) => (float[32768] y1, float[32768] y2, float[32768] y3, float[32768] y4)
    {
      y1 = Identity (x)
      y2 = Identity (x)
      y3 = Identity (x)
      y4 = Identity (x)
    }
  )");
  int k = 0;
  for (const std::string* payload : {&p, &q, &r, &t}) {
    const uint64_t offset = testing::append_file(dir.path(), "weights.bin", *payload);
    const std::string name = "w" + std::to_string(++k);
    ir::Value* w = model->graph().add_initializer(
        name, testing::external_tensor(name, onnx::TensorProto::FLOAT, {static_cast<int64_t>(n)},
                                       "weights.bin", offset, bytes));
    ir::Node* id = testing::producer(*model, "y" + std::to_string(k));
    ASSERT_NE(id, nullptr);
    ir::Node* add = model->graph().add_node("Add", {model->graph().find_local("x"), w}, {"s"});
    id->set_input(0, add->output(0));
  }
  model->set_external_data(ir::ExternalData::beneath(dir.str()));
  ASSERT_TRUE(model->finalize().ok());
  auto result = testing::run_pass(*model, "dedup_initializers");
  EXPECT_FALSE(result.changed);  // all four differ
  EXPECT_EQ(model->external_data()->bytes_read(), 4 * (64u << 10) + 2 * bytes);
}

TEST(ExternalWeights, DedupLeavesExternalTensorsAloneWithoutTheirFiles) {
  TempFolder dir;
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[64] x) => (float[64] ya, float[64] yb) <float[64] a = {)" +
                          numbers(64) + R"(}, float[64] b = {)" + numbers(64) + R"(}> {
      ya = Add (x, a)
      yb = Add (x, b)
    }
  )");
  externalize(*model, dir.path(), "weights.bin", {"a", "b"});
  model->set_external_data(nullptr);
  auto result = testing::run_pass(*model, "dedup_initializers");
  EXPECT_FALSE(result.changed);
}

TEST(ExternalWeights, FuseConvBatchnormFoldsExternalWeights) {
  TempFolder dir;
  auto model =
      parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1,8,6,6] x) => (float[1,16,6,6] y)
      <float[16,8,3,3] w = {)" +
                 numbers(16 * 8 * 9, 0.125) + R"(}, float[16] b = {)" + numbers(16, 0.5) + R"(},
       float[16] s = {)" +
                 numbers(16, 0.25, 5) + R"(}, float[16] bb = {)" + numbers(16, 0.5, 2) + R"(},
       float[16] mean = {)" +
                 numbers(16, 0.1, 1) + R"(}, float[16] var = {)" + numbers(16, 0, 0) + R"(}> {
      c = Conv <pads = [1, 1, 1, 1]> (x, w, b)
      y = BatchNormalization <epsilon = 0.5> (c, s, bb, mean, var)
    }
  )");
  externalize(*model, dir.path(), "weights.bin", {"w", "b", "s", "bb", "mean", "var"});
  const auto reference = model->clone();
  auto result = run_pass_checked(*model, "fuse_conv_batchnorm");
  EXPECT_TRUE(result.changed);
  EXPECT_EQ(count_ops(*model, "BatchNormalization"), 0);
  EXPECT_EQ(count_ops(*model, "Conv"), 1);
  EXPECT_EQ(testing::onnx_errors_beside(*model, dir.path()), "");
  auto saved = save_and_reload(std::move(model), *reference, dir.path());
  EXPECT_EQ(saved.new_file_tensors, 1);  // the scaled weight (4.5 KiB); the bias is small
  EXPECT_EQ(saved.new_file_bytes, 16u * 8 * 9 * 4);
  EXPECT_LT(saved.model.size(), 2048u);
}

TEST(ExternalWeights, OptimizeTransposesRelayoutsAnExternalTiedEmbedding) {
  TempFolder dir;
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[2,3] ids, float[2,3,16] x) => (float[2,3,16] e, float[2,3,64] y)
        <float[64,16] w = {)" +
                          numbers(64 * 16, 0.25) +
                          R"(}> {
      e = Gather (w, ids)
      t = Transpose <perm = [1, 0]> (w)
      y = MatMul (x, t)
    }
  )");
  externalize(*model, dir.path(), "weights.bin", {"w"});
  const auto reference = model->clone();
  auto result = run_pass_checked(*model, "optimize_transposes");
  EXPECT_TRUE(result.changed);
  ir::Node* matmul = testing::producer(*model, "y");
  ASSERT_NE(matmul, nullptr);
  ASSERT_NE(matmul->input(1), nullptr);
  EXPECT_TRUE(matmul->input(1)->is_constant());  // the transposed weight, no Transpose left
  EXPECT_EQ(testing::dims_of(matmul->input(1)), (std::vector<int64_t>{16, 64}));
  EXPECT_EQ(testing::onnx_errors_beside(*model, dir.path()), "");
  auto saved = save_and_reload(std::move(model), *reference, dir.path());
  EXPECT_EQ(saved.new_file_tensors, 1);
  EXPECT_EQ(saved.new_file_bytes, 64u * 16 * 4);
  EXPECT_EQ(saved.locations, (std::vector<std::string>{"new.weights"}));  // w is gone
}

TEST(ExternalWeights, PipelineVerificationReadsExternalWeights) {
  TempFolder dir;
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[32, 16] x) => (float[32, 16] y) <float[16, 32] w = {)" +
                          numbers(512, 0.5) + R"(}> {
      t = Transpose <perm = [1, 0]> (w)
      i = Identity (t)
      y = Add (x, i)
    }
  )");
  externalize(*model, dir.path(), "weights.bin", {"w"});
  PipelineConfig config = testing::test_pipeline_config();
  config.verify = true;
  auto report = run_pipeline(model, config);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->verification.result.status, eval::VerifyStatus::kVerified)
      << report->verification.result.message;
  EXPECT_EQ(count_ops(*model, "Transpose"), 0);
}

TEST(ExternalWeights, TheEvaluatorHoldsOnlyTheExternalWeightsInUse) {
  // Six 64 KiB weights added one after the other: read all up front, they and the input fill the
  // 448 KiB live budget before the first Add has a result; read at first use (and freed after
  // last), a few tensors are alive at a time.
  TempFolder dir;
  std::string text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[16384] x) => (float[16384] y) <)";
  std::string body;
  std::vector<std::string> names;
  for (int i = 1; i <= 6; ++i) {
    const std::string w = "w" + std::to_string(i);
    names.push_back(w);
    text += (i > 1 ? ", " : "") + std::string("float[16384] ") + w + " = {" + numbers(16384) + "}";
    const std::string in = i == 1 ? "x" : "a" + std::to_string(i - 1);
    const std::string out = i == 6 ? "y" : "a" + std::to_string(i);
    body += "      " + out + " = Add (" + in + ", " + w + ")\n";
  }
  text += "> {\n" + body + "    }";
  auto model = parse_text(text);
  externalize(*model, dir.path(), "weights.bin", names);
  eval::VerifyOptions options;
  options.trials = 1;
  options.max_live_bytes = 448 << 10;
  auto result = eval::verify(*model, *model->clone(), options);
  EXPECT_EQ(result.status, eval::VerifyStatus::kVerified) << result.message;
  // Without its files the model cannot be evaluated.
  model->set_external_data(nullptr);
  EXPECT_EQ(eval::verify(*model, *model->clone(), options).status,
            eval::VerifyStatus::kNotVerifiable);
}

}  // namespace
}  // namespace graft
