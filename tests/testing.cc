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
  auto values = parse_options(pass, info->options, options);
  EXPECT_TRUE(values.ok()) << values.status();
  if (!values.ok()) return {};
  PassContext ctx(*values);
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

std::string chain_model(int pairs, const std::string& tag) {
  onnx::ModelProto proto;
  proto.set_ir_version(8);
  proto.add_opset_import()->set_version(13);
  proto.set_doc_string(tag);
  auto* g = proto.mutable_graph();
  g->set_name("chain");
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  std::string prev = "x";
  for (int i = 0; i < pairs; ++i) {
    for (const char* op : {"Identity", "Relu"}) {
      auto* n = g->add_node();
      n->set_op_type(op);
      n->add_input(prev);
      prev = std::string(op) + std::to_string(i);
      n->add_output(prev);
    }
  }
  auto* out = g->add_output();
  out->set_name(prev);
  out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  return proto.SerializeAsString();
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

}  // namespace graft::testing
