#include "tests/testing.h"

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <onnx/defs/parser.h>
#include <onnx/defs/printer.h>

#include "core/eval/tensor.h"
#include "core/eval/verify.h"
#include "core/ir/tensor.h"
#include "core/passes/registry.h"
#include "core/pipeline/pipeline.h"

namespace graft::testing {

std::unique_ptr<ir::Model> parse_text(const std::string& text) {
  onnx::ModelProto proto;
  auto status = onnx::OnnxParser::Parse(proto, text.c_str());
  EXPECT_TRUE(status.IsOK()) << status.ErrorMessage() << "\n" << text;
  auto model = ir::Model::from_proto(std::move(proto));
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

PassResult run_pass(ir::Model& model, const std::string& pass, const PassOptions& options) {
  const PassInfo* info = find_pass(pass);
  EXPECT_NE(info, nullptr) << pass;
  if (!info) return {};
  PassContext ctx(options);
  auto result = info->create()->run(model, ctx);
  EXPECT_TRUE(result.ok()) << result.status();
  auto st = model.finalize();
  EXPECT_TRUE(st.ok()) << st;
  st = model.verify();
  EXPECT_TRUE(st.ok()) << st;
  return result.ok() ? *result : PassResult{};
}

PassResult run_pass_checked(ir::Model& model, const std::string& pass, const PassOptions& options) {
  auto before = model.clone();
  PassResult result = run_pass(model, pass, options);
  EXPECT_EQ(same_outputs(*before, model), "") << "pass " << pass << " changed the outputs";
  return result;
}

std::string same_outputs(const ir::Model& before, const ir::Model& after, uint32_t seed) {
  eval::VerifyOptions options;
  options.default_dim = 2;
  options.float_range = 2.0;
  options.int_max = 3;
  options.seed = seed;
  options.trials = 2;  // a second input set, e.g. so both sides of a data-dependent If are seen
  options.rtol = 1e-4;
  options.atol = 1e-5;
  options.max_tensor_bytes = eval::Limits{}.max_tensor_bytes;
  eval::VerifyResult r = eval::verify(before, after, options);
  switch (r.status) {
    case eval::VerifyStatus::kVerified:
      return "";
    case eval::VerifyStatus::kNotVerifiable:
      return "not verifiable: " + r.message;
    case eval::VerifyStatus::kMismatch:
      return r.message;
  }
  return r.message;
}

int count_ops(const ir::Model& model, const std::string& op) {
  int n = 0;
  for (ir::Graph* g : model.all_graphs())
    for (ir::Node* node : g->nodes()) n += node->op_type() == op;
  return n;
}

std::string print(const ir::Model& model) {
  std::ostringstream os;
  os << model.to_proto().graph();
  return os.str();
}

std::string onnx_errors(const ir::Model& model) {
  std::string skipped;
  auto st = onnx_check(model, /*shape_inference=*/true, &skipped);
  if (!skipped.empty()) return "skipped: " + skipped;
  return st.ok() ? "" : std::string(st.message());
}

std::vector<double> initializer_values(const ir::Model& model, const std::string& name) {
  ir::Value* v = model.graph().find_local(name);
  EXPECT_TRUE(v && v->initializer()) << "no initializer " << name;
  if (!v || !v->initializer()) return {};
  auto values = ir::read_doubles(*v->initializer());
  EXPECT_TRUE(values.has_value()) << name;
  return values.value_or(std::vector<double>{});
}

std::vector<std::string> input_names(const ir::Node& node) {
  std::vector<std::string> names;
  for (const ir::Value* v : node.inputs()) names.push_back(v ? v->name() : "");
  return names;
}

std::vector<std::string> output_names(const ir::Graph& graph) {
  std::vector<std::string> names;
  for (const auto& o : graph.outputs()) names.push_back(o.value->name());
  return names;
}

std::filesystem::path onnx_testdata_dir() {
  std::filesystem::path p = "/usr/share/libonnx-testdata/data";
  return std::filesystem::exists(p) ? p : std::filesystem::path();
}

std::filesystem::path shared_models_dir() {
  if (const char* env = std::getenv("GRAFT_SHARED_MODELS"))
    return std::filesystem::exists(env) ? std::filesystem::path(env) : std::filesystem::path();
  std::filesystem::path p = std::filesystem::path(GRAFT_SOURCE_DIR) / ".." / "shared" / "models";
  return std::filesystem::exists(p) ? std::filesystem::canonical(p) : std::filesystem::path();
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace graft::testing
