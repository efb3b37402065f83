#include "tests/testing.h"

#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include <onnx/defs/parser.h>
#include <onnx/defs/printer.h>

#include "core/eval/executor.h"
#include "core/eval/tensor.h"
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

namespace {

std::string dims_string(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

// A random tensor for a main graph input, from its declared type.
absl::StatusOr<eval::Tensor> random_input(const std::string& name, const onnx::TypeProto* type,
                                          std::mt19937& rng) {
  if (!type || !type->has_tensor_type() || !type->tensor_type().has_elem_type())
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is not a typed tensor"));
  const auto& tt = type->tensor_type();
  if (!tt.has_shape())
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "' has unknown rank"));
  std::vector<int64_t> dims;
  for (const auto& d : tt.shape().dim())
    dims.push_back(d.has_dim_value() && d.dim_value() >= 0 ? d.dim_value() : 2);
  const int32_t dtype = tt.elem_type();
  if (!eval::is_float_type(dtype) && !eval::is_integer_type(dtype) &&
      dtype != onnx::TensorProto::BOOL)
    return absl::InvalidArgumentError(
        absl::StrCat("input '", name, "' has element type ", dtype, " (not numeric)"));
  auto t = eval::Tensor::zeros(dtype, dims, eval::Limits{}.max_tensor_bytes);
  if (!t.ok()) return t.status();
  std::uniform_real_distribution<double> real(-2.0, 2.0);
  // Non-negative and small, so integer inputs also work as indices, counts and trip counts.
  std::uniform_int_distribution<int64_t> integer(0, 3);
  std::uniform_int_distribution<int64_t> boolean(0, 1);
  for (int64_t i = 0; i < t->size(); ++i) {
    if (eval::is_float_type(dtype))
      t->set_double(i, real(rng));
    else if (dtype == onnx::TensorProto::BOOL)
      t->set_int64(i, boolean(rng));
    else
      t->set_int64(i, integer(rng));
  }
  return t;
}

// "" if the tensors match (see same_outputs), else the first difference.
std::string compare(const std::string& name, const eval::Tensor& a, const eval::Tensor& b) {
  if (a.dtype() != b.dtype())
    return absl::StrCat("output '", name, "': element type ", a.dtype(), " became ", b.dtype());
  if (a.dims() != b.dims())
    return absl::StrCat("output '", name, "': shape ", dims_string(a.dims()), " became ",
                        dims_string(b.dims()));
  if (a.dtype() == onnx::TensorProto::STRING) {
    for (size_t i = 0; i < a.strings().size() && i < b.strings().size(); ++i)
      if (a.strings()[i] != b.strings()[i])
        return absl::StrCat("output '", name, "' [", i, "]: \"", a.strings()[i], "\" vs \"",
                            b.strings()[i], "\"");
    return "";
  }
  for (int64_t i = 0; i < a.size(); ++i) {
    if (eval::is_float_type(a.dtype())) {
      const double x = a.get_double(i), y = b.get_double(i);
      if (std::isnan(x) && std::isnan(y)) continue;
      if (x == y) continue;  // also equal infinities
      if (std::isfinite(x) && std::isfinite(y) && std::abs(x - y) <= 1e-5 + 1e-4 * std::abs(x))
        continue;
      return absl::StrCat("output '", name, "' [", i, "]: ", x, " before, ", y, " after");
    }
    if (a.get_int64(i) != b.get_int64(i))
      return absl::StrCat("output '", name, "' [", i, "]: ", a.get_int64(i), " before, ",
                          b.get_int64(i), " after");
  }
  return "";
}

}  // namespace

std::string same_outputs(const ir::Model& before, const ir::Model& after, uint32_t seed) {
  std::mt19937 rng(seed);
  std::map<std::string, eval::Tensor> feeds;
  for (const auto& in : before.graph().inputs()) {
    // An initializer listed as an input keeps its default: a pass may rely on it only if it is
    // a real input, and then both models see the same default.
    if (in.value->is_initializer()) continue;
    const onnx::TypeProto* type = in.info.has_type() ? &in.info.type() : in.value->type();
    auto t = random_input(in.value->name(), type, rng);
    if (!t.ok()) return absl::StrCat("not verifiable: ", std::string(t.status().message()));
    feeds.emplace(in.value->name(), std::move(*t));
  }
  auto expected = eval::run_model(before, feeds);
  if (!expected.ok()) {
    if (absl::IsUnimplemented(expected.status()))
      return absl::StrCat("not verifiable: ", std::string(expected.status().message()));
    return absl::StrCat("the original model fails on the evaluator: ",
                        expected.status().ToString());
  }
  auto actual = eval::run_model(after, feeds);
  if (!actual.ok()) {
    if (absl::IsUnimplemented(actual.status()))
      return absl::StrCat("not verifiable: optimized model: ",
                          std::string(actual.status().message()));
    return absl::StrCat("the optimized model fails on the evaluator: ", actual.status().ToString());
  }
  if (expected->size() != actual->size())
    return absl::StrCat(expected->size(), " outputs became ", actual->size());
  for (size_t i = 0; i < expected->size(); ++i) {
    std::string diff =
        compare(before.graph().outputs()[i].value->name(), (*expected)[i], (*actual)[i]);
    if (!diff.empty()) return diff;
  }
  return "";
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
