// Graft's shape rules against libonnx's shape inference, on every model of the ONNX backend test
// data (libonnx-testdata) and ../shared/models.
//
// Both sides start from the operators alone: value_info and the graph outputs' types are
// removed, so only the graph inputs and initializers are declared. For every node output of the
// main graph:
//  - where both know an element type, a rank or a dim, they agree (a wrong rule would make
//    fold_shapes fold a wrong constant);
//  - where Graft calls its fact exact (libonnx's inference is then skipped), libonnx knows
//    nothing more: no element type, rank or known dim the fact lacks.
#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <onnx/defs/schema.h>
#include <onnx/shape_inference/implementation.h>

#include "core/ir/model.h"
#include "core/ir/onnx_guard.h"
#include "core/ir/shapes.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

namespace fs = std::filesystem;

struct Tally {
  int models = 0, skipped = 0, values = 0, exact = 0, disagreements = 0, missed = 0;
  std::vector<std::string> failures;  // the first few, for the message
  void fail(const std::string& what) {
    if (failures.size() < 30) failures.push_back(what);
  }
};

// libonnx's fact of each named value, from the inferred proto's value_info and outputs.
std::map<std::string, ir::TensorFact> libonnx_facts(const onnx::GraphProto& g) {
  std::map<std::string, ir::TensorFact> out;
  auto take = [&](const onnx::ValueInfoProto& info) {
    if (!info.has_type() || !info.type().has_tensor_type()) return;
    out[info.name()] = ir::inferred_fact(info.type());
  };
  for (const auto& info : g.value_info()) take(info);
  for (const auto& info : g.output()) take(info);
  return out;
}

void compare_model(const fs::path& path, const std::string& label, Tally* t) {
  onnx::ModelProto proto;
  {
    std::string bytes = read_file(path);
    if (!proto.ParseFromString(bytes)) {
      ++t->skipped;
      return;
    }
  }
  ir::strip_declarations(proto.mutable_graph());
  auto model = ir::Model::parse(proto.SerializeAsString());
  if (!model.ok() || !ir::libonnx_knows(**model) || ir::has_huge_shape_tensor(**model)) {
    ++t->skipped;
    return;
  }
  onnx::ModelProto inferred = proto;
  try {
    onnx::ShapeInferenceOptions options{/*check_type=*/false, /*error_mode=*/0,
                                        /*enable_data_propagation=*/false};
    onnx::shape_inference::InferShapes(inferred, ir::guarded_schemas(), options);
  } catch (const std::exception&) {
    ++t->skipped;
    return;
  }
  ++t->models;
  const auto theirs = libonnx_facts(inferred.graph());
  (*model)->disable_shape_inference();
  for (const ir::Node* n : (*model)->graph().nodes()) {
    for (const ir::Value* v : n->outputs()) {
      if (!v) continue;
      auto it = theirs.find(v->name());
      const ir::TensorFact& ours = v->fact();
      const bool exact = ir::fact_exact(*v);
      ++t->values;
      t->exact += exact;
      if (it == theirs.end()) continue;
      const ir::TensorFact& lib = it->second;
      const std::string where = label + ": " + n->op_type() + " output " + v->name() + ": Graft " +
                                ours.to_string() + (exact ? " (exact)" : "") + ", libonnx " +
                                lib.to_string();
      bool disagree = ours.elem_type && lib.elem_type && ours.elem_type != lib.elem_type;
      disagree |= ours.has_rank && lib.has_rank && ours.dims.size() != lib.dims.size();
      if (!disagree && ours.has_rank && lib.has_rank)
        for (size_t i = 0; i < ours.dims.size(); ++i)
          disagree |= ours.dims[i].known() && lib.dims[i].known() &&
                      ours.dims[i].value != lib.dims[i].value;
      if (disagree) {
        ++t->disagreements;
        t->fail("disagree: " + where);
        continue;
      }
      if (!exact) continue;
      bool more = lib.elem_type && !ours.elem_type;
      more |= lib.has_rank && !ours.has_rank;
      if (!more && lib.has_rank && ours.has_rank)
        for (size_t i = 0; i < lib.dims.size(); ++i)
          more |= lib.dims[i].known() && !ours.dims[i].known();
      if (more) {
        ++t->missed;
        t->fail("libonnx knows more than an exact fact: " + where);
      }
    }
  }
}

TEST(RulesVsInference, AgreeOnEveryTestDataModel) {
  std::vector<std::pair<fs::path, std::string>> models;
  if (fs::path root = onnx_testdata_dir(); !root.empty()) {
    for (const char* suite : {"node", "simple", "pytorch-converted", "pytorch-operator", "real"}) {
      if (!fs::exists(root / suite)) continue;
      for (const auto& e : fs::directory_iterator(root / suite))
        if (fs::exists(e.path() / "model.onnx"))
          models.emplace_back(e.path() / "model.onnx",
                              std::string(suite) + "/" + e.path().filename().string());
    }
  }
  if (fs::path shared = shared_models_dir(); !shared.empty())
    for (const auto& e : fs::directory_iterator(shared))
      if (e.path().extension() == ".onnx")
        models.emplace_back(e.path(), e.path().filename().string());
  if (models.empty()) GTEST_SKIP() << "neither libonnx-testdata nor ../shared/models is present";
  std::sort(models.begin(), models.end());
  Tally t;
  for (const auto& [path, label] : models) compare_model(path, label, &t);
  std::string failures;
  for (const auto& f : t.failures) failures += "\n  " + f;
  std::printf(
      "rules vs inference: %d models (%d skipped), %d values, %d exact, %d disagree, "
      "%d exact but libonnx knows more\n",
      t.models, t.skipped, t.values, t.exact, t.disagreements, t.missed);
  EXPECT_GT(t.models, 0);
  EXPECT_EQ(t.disagreements + t.missed, 0) << failures;
}

}  // namespace
}  // namespace graft::testing
