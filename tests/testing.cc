#include "tests/testing.h"

#include <algorithm>
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
#include "tests/onnx_text.h"

namespace graft::testing {

std::unique_ptr<ir::Model> parse_text(const std::string& text) {
  onnx::ModelProto proto;
  const std::string error = parse_onnx_text(text, &proto);
  EXPECT_EQ(error, "") << "\n" << text;
  auto model = ir::Model::from_proto(std::move(proto));
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

PassRef::PassRef(const char* name) : PassRef(std::string(name)) {}

PassRef::PassRef(const std::string& name) {
  spec.name = name;
  if (const PassInfo* info = find_pass(name)) {
    spec.create = info->create;
    // A pass for one runtime runs for that runtime's default version.
    if (info->target) target = Target{*info->target, kDefaultOrtVersion};
  }
}

PassRef PassRef::for_target(std::string_view text) const {
  PassRef ref = *this;
  auto parsed = parse_target(text);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (parsed.ok()) ref.target = *parsed;
  return ref;
}

PassRef::PassRef(PassSpec pass) : spec(std::move(pass)) {}

PassResult run_pass(ir::Model& model, const PassRef& pass, const PassOptions& options,
                    const CalibrationInputs* calibration) {
  const PassSpec& spec = pass.spec;
  EXPECT_TRUE(spec.create) << "no pass '" << spec.name << "'";
  if (!spec.create) return {};
  // A registered pass gets `options` checked against its schema (defaults for the rest); a pass
  // the test builds has no schema and takes its spec's values.
  OptionValues values = spec.options;
  if (const PassInfo* info = find_pass(spec.name)) {
    auto parsed = parse_options(spec.name, info->options, options);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    if (!parsed.ok()) return {};
    values = *parsed;
  } else {
    EXPECT_TRUE(options.empty()) << "options for a pass without a schema";
  }
  PassContext ctx(values);
  ctx.calibration = calibration;
  ctx.target = pass.target;
  // Every rule that gives up must leave the model as it found it (its edits undone).
  ctx.check_transactions = true;
  const auto before = model.clone();
  const ModelFingerprint before_fingerprint = fingerprint(model);
  auto result = spec.create()->run(model, ctx);
  EXPECT_TRUE(result.ok()) << spec.name << ": " << result.status();
  if (result.ok() && !result->changed) {
    // Before finalize(), as the pipeline checks: finalize only frees what the pass marked dead.
    auto st = verify_unchanged(spec.name, before_fingerprint, fingerprint(model));
    EXPECT_TRUE(st.ok()) << st.message() << "\nbefore:\n"
                         << print(*before) << "\nafter:\n"
                         << print(model);
  }
  auto st = model.finalize();
  EXPECT_TRUE(st.ok()) << st;
  st = model.verify();
  EXPECT_TRUE(st.ok()) << st;
  return result.ok() ? *result : PassResult{};
}

PassResult run_pass_checked(ir::Model& model, const PassRef& pass, const PassOptions& options) {
  auto before = model.clone();
  PassResult result = run_pass(model, pass, options);
  EXPECT_EQ(same_outputs(*before, model), "")
      << "pass " << pass.spec.name << " changed the outputs";
  return result;
}

const PassStats* stats_of(const PipelineReport& report, const std::string& pass) {
  for (const PassStats& p : report.passes)
    if (p.name == pass) return &p;
  return nullptr;
}

PipelineConfig test_pipeline_config() {
  PipelineConfig config;
  config.check_unchanged = true;
  return config;
}

namespace {

// Lines only in `a` marked "-", only in `b` "+", common ones " " (longest common subsequence).
std::string line_diff(const std::string& a, const std::string& b) {
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  };
  const auto x = lines(a), y = lines(b);
  std::vector<std::vector<int>> lcs(x.size() + 1, std::vector<int>(y.size() + 1, 0));
  for (size_t i = x.size(); i-- > 0;)
    for (size_t j = y.size(); j-- > 0;)
      lcs[i][j] = x[i] == y[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
  std::string out;
  size_t i = 0, j = 0;
  while (i < x.size() || j < y.size()) {
    if (i < x.size() && j < y.size() && x[i] == y[j]) {
      out += "  " + x[i++] + "\n";
      ++j;
    } else if (i < x.size() && (j == y.size() || lcs[i + 1][j] >= lcs[i][j + 1])) {
      out += "- " + x[i++] + "\n";
    } else {
      out += "+ " + y[j++] + "\n";
    }
  }
  return out;
}

void expect_outputs(Outputs outputs, const ir::Model& before, const ir::Model& after,
                    const std::string& pass, double rtol = 1e-4, double atol = 1e-5) {
  if (outputs == Outputs::kNotCompared) return;
  const std::string same = same_outputs(before, after, 1, rtol, atol);
  if (same.rfind("not verifiable: ", 0) == 0) {
    if (outputs == Outputs::kSame)
      ADD_FAILURE() << "outputs not compared for pass " << pass << ": " << same
                    << " (Outputs::kSameIfVerifiable or kNotCompared, with the reason, if this is "
                       "expected)";
    return;
  }
  EXPECT_EQ(same, "") << "pass " << pass << " changed the outputs";
}

}  // namespace

RewriteOptions rewrites(int64_t count, Outputs outputs) {
  RewriteOptions options;
  options.rewrites = count;
  options.outputs = outputs;
  return options;
}

RewriteOptions compare_outputs(Outputs outputs) { return rewrites(-1, outputs); }

std::unique_ptr<ir::Model> run_rewrite(const PassRef& pass, const std::string& text,
                                       const RewriteOptions& options) {
  return run_rewrite(pass, parse_text(text), options);
}

std::unique_ptr<ir::Model> run_rewrite(const PassRef& pass, std::unique_ptr<ir::Model> model,
                                       const RewriteOptions& options) {
  if (!model) return model;
  const auto before = model->clone();
  CalibrationInputs calibration{.sets = &options.calibration, .limits = {}};
  PassResult result = run_pass(*model, pass, options.pass_options,
                               options.calibration.empty() ? nullptr : &calibration);
  EXPECT_TRUE(result.changed) << "pass " << pass.spec.name << " did not rewrite\n"
                              << print(*before);
  if (options.rewrites >= 0) {
    EXPECT_EQ(result.rewrites, options.rewrites) << "pass " << pass.spec.name;
  }
  const std::string errors = onnx_errors(*model);
  if (errors.rfind("skipped: ", 0) != 0) {
    EXPECT_EQ(errors, "") << "pass " << pass.spec.name << " made a model ONNX rejects:\n"
                          << print(*model);
  }
  expect_outputs(options.outputs, *before, *model, pass.spec.name, options.rtol, options.atol);
  return model;
}

std::unique_ptr<ir::Model> expect_rewrite(const PassRef& pass, const std::string& before,
                                          const std::string& after, const RewriteOptions& options) {
  return expect_rewrite(pass, parse_text(before), after, options);
}

std::unique_ptr<ir::Model> expect_rewrite(const PassRef& pass, std::unique_ptr<ir::Model> before,
                                          const std::string& after, const RewriteOptions& options) {
  auto expected = parse_text(after);
  if (!before) return nullptr;
  const std::set<std::string> kept = initializer_names(*before);
  auto result = run_rewrite(pass, std::move(before), options);
  if (!expected || !result) return nullptr;
  const std::string got = canonical_text(*result, kept), want = canonical_text(*expected, kept);
  EXPECT_TRUE(got == want) << "pass " << pass.spec.name
                           << " did not rewrite as expected.\nresult (canonical text):\n"
                           << got << "\nexpected (canonical text of `after`):\n"
                           << want << "\ndiff (- result, + expected):\n"
                           << line_diff(got, want);
  return result;
}

void expect_no_rewrite(const PassRef& pass, const std::string& text,
                       const RewriteOptions& options) {
  auto model = parse_text(text);
  if (!model) return;
  const auto before = model->clone();
  // run_pass fails the test if the model changed while the pass reports no change.
  CalibrationInputs calibration{.sets = &options.calibration, .limits = {}};
  PassResult result = run_pass(*model, pass, options.pass_options,
                               options.calibration.empty() ? nullptr : &calibration);
  EXPECT_TRUE(!result.changed && result.rewrites == 0)
      << "pass " << pass.spec.name << " rewrote what it must leave alone (changed "
      << result.changed << ", " << result.rewrites << " rewrites)\ndiff (- before, + after):\n"
      << line_diff(print(*before), print(*model));
  expect_outputs(options.outputs, *before, *model, pass.spec.name, options.rtol, options.atol);
}

std::string same_outputs(const ir::Model& before, const ir::Model& after, uint32_t seed,
                         double rtol, double atol) {
  eval::VerifyOptions options;
  options.default_dim = 2;
  options.float_range = 2.0;
  options.int_max = 3;
  options.seed = seed;
  options.trials = 2;  // a second input set, e.g. so both sides of a data-dependent If are seen
  options.rtol = rtol;
  options.atol = atol;
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

std::multiset<std::string> defined_names(const ir::Model& model) {
  std::multiset<std::string> names;
  for (ir::Graph* g : model.all_graphs()) {
    for (const auto& in : g->inputs()) names.insert(in.value->name());
    for (ir::Value* v : g->initializers())
      if (!v->is_graph_input()) names.insert(v->name());
    for (ir::Node* n : g->nodes())
      for (ir::Value* out : n->outputs())
        if (out) names.insert(out->name());
  }
  return names;
}

bool names_unique(const ir::Model& model) {
  auto names = defined_names(model);
  return std::set<std::string>(names.begin(), names.end()).size() == names.size();
}

int count_ops(const ir::Model& model, const std::string& op) {
  int n = 0;
  for (ir::Graph* g : model.all_graphs())
    for (ir::Node* node : g->nodes()) n += node->op_type() == op;
  return n;
}

std::vector<std::string> op_types(const ir::Graph& graph) {
  std::vector<std::string> ops;
  for (const ir::Node* n : graph.nodes()) ops.push_back(n->op_type());
  return ops;
}

std::string onnx_errors(const ir::Model& model) {
  std::string skipped;
  auto st = onnx_check(model, /*shape_inference=*/true, &skipped);
  if (!skipped.empty()) return "skipped: " + skipped;
  return st.ok() ? "" : std::string(st.message());
}

ir::Node* producer(const ir::Graph& graph, const std::string& name) {
  const ir::Value* v = graph.lookup(name);
  return v ? v->producer() : nullptr;
}

ir::Node* producer(const ir::Model& model, const std::string& name) {
  return producer(model.graph(), name);
}

std::string producer_op(const ir::Graph& graph, const std::string& name) {
  const ir::Node* n = producer(graph, name);
  return n ? n->op_type() : "";
}

ir::Node* only_node(const ir::Graph& graph, const std::string& op) {
  std::vector<ir::Node*> found;
  for (ir::Node* n : graph.nodes())
    if (n->op_type() == op) found.push_back(n);
  EXPECT_EQ(found.size(), 1u) << "nodes of type " << op;
  return found.empty() ? nullptr : found[0];
}

std::vector<std::string> input_names(const ir::Node& node) {
  std::vector<std::string> names;
  for (const ir::Value* v : node.inputs()) names.push_back(v ? v->name() : "");
  return names;
}

std::vector<std::string> input_names(const ir::Node* node) {
  EXPECT_TRUE(node) << "no node";
  return node ? input_names(*node) : std::vector<std::string>{};
}

std::vector<std::string> input_names(const ir::Graph& graph) {
  std::vector<std::string> names;
  for (const auto& in : graph.inputs()) names.push_back(in.value->name());
  return names;
}

std::vector<std::string> output_names(const ir::Graph& graph) {
  std::vector<std::string> names;
  for (const auto& o : graph.outputs()) names.push_back(o.value->name());
  return names;
}

std::vector<std::string> initializer_names(const ir::Graph& graph) {
  std::vector<std::string> names;
  for (const ir::Value* v : graph.initializers()) names.push_back(v->name());
  return names;
}

std::vector<double> values_of(const ir::Value* value) {
  EXPECT_TRUE(value && value->initializer())
      << (value ? value->name() : std::string("a missing value")) << " is not an initializer";
  if (!value || !value->initializer()) return {};
  if (auto ints = ir::read_int64s(*value->initializer()))
    return std::vector<double>(ints->begin(), ints->end());
  auto values = ir::read_doubles(*value->initializer());
  EXPECT_TRUE(values.has_value()) << value->name() << " is not numeric";
  return values.value_or(std::vector<double>{});
}

std::vector<double> initializer_values(const ir::Model& model, const std::string& name) {
  const ir::Value* v = model.graph().find_local(name);
  EXPECT_TRUE(v) << "no value " << name;
  return values_of(v);
}

std::vector<int64_t> dims_of(const ir::Value* value) {
  EXPECT_TRUE(value && value->initializer())
      << (value ? value->name() : std::string("a missing value")) << " is not an initializer";
  if (!value || !value->initializer()) return {};
  const auto& dims = value->initializer()->dims();
  return {dims.begin(), dims.end()};
}

std::vector<int64_t> dims_of(const ir::Model& model, const std::string& name) {
  const ir::Value* v = model.graph().find_local(name);
  EXPECT_TRUE(v) << "no value " << name;
  return dims_of(v);
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                 double abs_tolerance, double rel_tolerance) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], std::max(abs_tolerance, rel_tolerance * std::abs(want[i])))
        << "at " << i;
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

std::string external_data_model(const std::string& location, int64_t length) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1, 4] x) => (float[1, 4] y) {
      t = Identity (x)
      y = Relu (t)
    }
  )");
  onnx::ModelProto proto = model->to_proto();
  proto.mutable_graph()->mutable_node(1)->set_op_type("MatMul");
  proto.mutable_graph()->mutable_node(1)->add_input("w");
  auto* w = proto.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(4);
  w->add_dims(4);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* loc = w->add_external_data();
  loc->set_key("location");
  loc->set_value(location);
  if (length >= 0) {
    auto* len = w->add_external_data();
    len->set_key("length");
    len->set_value(std::to_string(length));
  }
  return proto.SerializeAsString();
}

std::string near_miss_layer_norm() {
  return R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2,3,4] x, float eps) => (float[2,3,4] y) <float two = {2.0}> {
      m = ReduceMean <axes = [-1]> (x)
      d = Sub (x, m)
      p = Pow (d, two)
      v = ReduceMean <axes = [-1]> (p)
      a = Add (v, eps)
      s = Sqrt (a)
      y = Div (d, s)
    }
  )";
}

std::string loop_scan_bomb(int64_t trips) {
  return R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4096] x) => (float[N, 4096] all) {
      m = Constant <value = int64 {)" +
         std::to_string(trips) + R"(}> ()
      cond = Constant <value = bool {1}> ()
      last, all = Loop (m, cond, x) <
        body = b (int64 i, bool c, float[4096] v) => (bool co, float[4096] vo, float[4096] s) {
          co = Identity (c)
          vo = Identity (v)
          s = Identity (v)
        }
      >
    }
  )";
}

onnx::TypeProto float_type(const std::vector<int64_t>& dims) {
  onnx::TypeProto type;
  type.mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) type.mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  return type;
}

bool read_recorded_tensor(const std::filesystem::path& path, onnx::TensorProto* proto) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return in.good() || in.eof() ? proto->ParseFromString(bytes) : false;
}

void fix_bfloat16(const onnx::ValueInfoProto& info, onnx::TensorProto* proto) {
  if (info.type().tensor_type().elem_type() == onnx::TensorProto::BFLOAT16 &&
      proto->data_type() == onnx::TensorProto::UINT16) {
    proto->set_data_type(onnx::TensorProto::BFLOAT16);
  }
}

std::string compare_recorded(const eval::Tensor& got, const eval::Tensor& want) {
  if (got.dtype() != want.dtype())
    return absl::StrCat("dtype ", got.dtype(), " != expected ", want.dtype());
  if (got.dims() != want.dims())
    return absl::StrCat("shape [", absl::StrJoin(got.dims(), ","), "] != expected [",
                        absl::StrJoin(want.dims(), ","), "]");
  if (want.dtype() == onnx::TensorProto::STRING) {
    for (int64_t i = 0; i < want.size(); ++i)
      if (got.strings()[i] != want.strings()[i])
        return absl::StrCat("element ", i, ": \"", got.strings()[i], "\" != \"", want.strings()[i],
                            "\"");
    return "";
  }
  const bool exact = !eval::is_float_type(want.dtype());
  for (int64_t i = 0; i < want.size(); ++i) {
    if (exact) {
      if (want.dtype() == onnx::TensorProto::UINT64) {
        if (got.data<uint64_t>()[i] != want.data<uint64_t>()[i])
          return absl::StrCat("element ", i, ": ", got.data<uint64_t>()[i],
                              " != ", want.data<uint64_t>()[i]);
      } else if (got.get_int64(i) != want.get_int64(i)) {
        return absl::StrCat("element ", i, ": ", got.get_int64(i), " != ", want.get_int64(i));
      }
      continue;
    }
    const double g = got.get_double(i), w = want.get_double(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (g == w) continue;  // also equal infinities
    if (std::isfinite(w) && std::isfinite(g) &&
        std::abs(g - w) <= kRecordedAtol + kRecordedRtol * std::abs(w))
      continue;
    return absl::StrCat("element ", i, ": ", g, " != expected ", w);
  }
  return "";
}

std::string compare_recorded(const std::vector<eval::Tensor>& got,
                             const std::vector<eval::Tensor>& want) {
  if (got.size() != want.size())
    return absl::StrCat(got.size(), " outputs, ", want.size(), " recorded");
  for (size_t i = 0; i < want.size(); ++i)
    if (std::string diff = compare_recorded(got[i], want[i]); !diff.empty())
      return absl::StrCat("output ", i, ": ", diff);
  return "";
}

std::vector<RecordedSet> load_test_data_sets(const std::filesystem::path& dir,
                                             const ir::Model& model) {
  std::vector<std::filesystem::path> folders;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_directory() && e.path().filename().string().starts_with("test_data_set_"))
      folders.push_back(e.path());
  std::sort(folders.begin(), folders.end());
  constexpr uint64_t kMaxBytes = 256ull << 20;
  const ir::Graph& graph = model.graph();
  std::vector<RecordedSet> sets;
  for (const auto& folder : folders) {
    RecordedSet set;
    bool complete = true;
    for (size_t i = 0; i < graph.inputs().size() && complete; ++i) {
      const auto& in = graph.inputs()[i];
      onnx::TensorProto proto;
      const auto file = folder / absl::StrCat("input_", i, ".pb");
      if (!std::filesystem::exists(file)) {
        complete = in.value->is_initializer();
        continue;
      }
      complete = read_recorded_tensor(file, &proto);
      if (!complete) break;
      fix_bfloat16(in.info, &proto);
      auto t = eval::Tensor::from_proto(proto, kMaxBytes);
      const int32_t declared = in.info.type().tensor_type().elem_type();
      complete = t.ok() && (declared == 0 || t->dtype() == declared);
      if (complete) set.inputs.emplace(in.value->name(), std::move(*t));
    }
    for (size_t i = 0; i < graph.outputs().size() && complete; ++i) {
      onnx::TensorProto proto;
      complete = read_recorded_tensor(folder / absl::StrCat("output_", i, ".pb"), &proto);
      if (!complete) break;
      fix_bfloat16(graph.outputs()[i].info, &proto);
      auto t = eval::Tensor::from_proto(proto, kMaxBytes);
      complete = t.ok();
      if (complete) set.outputs.push_back(std::move(*t));
    }
    if (complete) sets.push_back(std::move(set));
  }
  return sets;
}

}  // namespace graft::testing
