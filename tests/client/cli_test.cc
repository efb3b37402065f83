// Drives the real `graft` binary: exit codes, outputs, report, stdin/stdout, dumps.
#include <sys/resource.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/build_info.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code;
  std::string out;  // stdout
  std::string err;  // stderr
};

fs::path temp_dir() {
  fs::path d = fs::temp_directory_path() / ("graft_cli_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

CliRun graft(const std::string& args, const std::string& stdin_file = "") {
  fs::path dir = temp_dir();
  std::string cmd = std::string(GRAFT_CLI) + " " + args + " >" + (dir / "stdout").string() + " 2>" +
                    (dir / "stderr").string();
  if (!stdin_file.empty()) cmd += " <" + stdin_file;
  int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(dir / "stdout"),
          read_file(dir / "stderr")};
}

const fs::path kExample = fs::path(GRAFT_SOURCE_DIR) / "models" / "ppocr_mobile_v2_cls.onnx";

TEST(Cli, OptimizesWritesModelReportAndTable) {
  fs::path out = temp_dir() / "out.onnx", report = temp_dir() / "report.json";
  CliRun r = graft("optimize --local " + kExample.string() + " -o " + out.string() + " --report " +
                   report.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("fuse_conv_batchnorm"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("total"), std::string::npos);
  auto model = ir::Model::parse(read_file(out));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(onnx_errors(**model), "");
  auto json = nlohmann::json::parse(read_file(report));
  EXPECT_EQ(json["nodes_before"], 471);
  EXPECT_EQ(json["nodes_after"].get<size_t>(), (*model)->total_nodes());
  EXPECT_EQ(json["output_bytes"].get<size_t>(), fs::file_size(out));
  EXPECT_FALSE(json["passes"].empty());
  for (const auto& p : json["passes"]) EXPECT_EQ(p["rollbacks"], 0) << p["name"];
  // The build that computed it (this CLI's, with --local): version and fingerprint.
  EXPECT_EQ(json["graft_version"], graft_version());
  EXPECT_EQ(json["build_fingerprint"], build_fingerprint());
  EXPECT_NE(r.err.find(std::string("computed by graft ") + graft_version() + ", build " +
                       build_fingerprint()),
            std::string::npos)
      << r.err;
}

TEST(Cli, ReportHtmlAndGraftReportRenderTheSameReport) {
  const fs::path dir = temp_dir();
  const fs::path json = dir / "r.json", html = dir / "r.html", again = dir / "again.html";
  CliRun r = graft("optimize --local -q " + kExample.string() + " --report " + json.string() +
                   " --report-html " + html.string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto report = nlohmann::json::parse(read_file(json));
  // The models' profiles ride along when a report is asked for.
  EXPECT_EQ(report["profile"]["before"]["nodes"], 471);
  EXPECT_EQ(report["profile"]["after"]["nodes"], report["nodes_after"]);
  EXPECT_EQ(report["profile"]["before"]["inputs"][0]["name"], "x");
  EXPECT_EQ(report["config"]["level"], "O2");
  const std::string page = read_file(html);
  EXPECT_NE(page.find("<script id=\"graft-report\" type=\"application/json\">{"),
            std::string::npos);
  EXPECT_EQ(page.find("@GRAFT_REPORT_JSON@"), std::string::npos);
  ASSERT_EQ(graft("report " + json.string() + " -o " + again.string()).code, 0);
  EXPECT_EQ(read_file(again), page);  // the same JSON, the same page
  // Default output: the report's name with .html.
  ASSERT_EQ(graft("report " + json.string()).code, 0);
  EXPECT_EQ(read_file(dir / "r.html"), page);

  // An OptimizeReport as JSON (graftd's, the Python client's) is wrapped for the page.
  const fs::path proto = dir / "proto.json";
  std::ofstream(proto) << R"({"nodesBefore": "3", "nodesAfter": "2", "memoryBefore": {}})";
  ASSERT_EQ(graft("report " + proto.string() + " -o -").code, 0);
  EXPECT_NE(graft("report " + proto.string() + " -o -").out.find("graft.v1.OptimizeReport"),
            std::string::npos);

  // Anything else is a usage error with a reason, never a crash.
  const fs::path bad = dir / "bad.json";
  for (const std::string& text : {std::string("not json"), std::string("[1, 2]"),
                                  std::string(R"({"a": 1})"), std::string(100000, '[')}) {
    std::ofstream(bad, std::ios::trunc) << text;
    CliRun b = graft("report " + bad.string() + " -o " + (dir / "bad.html").string());
    EXPECT_EQ(b.code, 2) << text.substr(0, 20) << b.err;
    EXPECT_NE(b.err.find("bad.json"), std::string::npos) << b.err;
  }
  const fs::path deep = dir / "deep.json";
  std::ofstream(deep) << "{\"passes\": " + std::string(100, '[') + std::string(100, ']') + "}";
  CliRun d = graft("report " + deep.string() + " -o " + (dir / "deep.html").string());
  EXPECT_EQ(d.code, 2);
  EXPECT_NE(d.err.find("nested deeper"), std::string::npos) << d.err;
  // Larger than any report (a sparse file): refused before it is read.
  const fs::path huge = dir / "huge.json";
  std::ofstream(huge) << "{";
  fs::resize_file(huge, (uint64_t{256} << 20) + 1);
  CliRun h = graft("report " + huge.string() + " -o " + (dir / "huge.html").string());
  EXPECT_EQ(h.code, 2) << h.err;
  EXPECT_NE(h.err.find("larger than"), std::string::npos) << h.err;
  EXPECT_FALSE(fs::exists(dir / "huge.html"));
  EXPECT_EQ(graft("report " + (dir / "missing.json").string()).code, 4);
}

TEST(Cli, VerifyReportsTheComparisonAndRejectsBadFlags) {
  fs::path report = temp_dir() / "verify.json";
  CliRun r = graft("optimize --local --verify --verify-shape x=1,3,48,192 --verify-trials 1 " +
                   kExample.string() + " --report " + report.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("verification: verified"), std::string::npos) << r.err;
  auto json = nlohmann::json::parse(read_file(report));
  EXPECT_EQ(json["verification"]["status"], "verified");
  EXPECT_TRUE(json["verification"]["rolled_back"].empty());
  EXPECT_LT(json["verification"]["max_abs_diff"].get<double>(), 1e-3);

  // --verify-range draws the input from the given range; the result says it verified.
  CliRun ranged = graft("optimize --local --verify --verify-range x=0,1 " + kExample.string() +
                        " --report " + report.string());
  ASSERT_EQ(ranged.code, 0) << ranged.err;
  const auto ranged_json = nlohmann::json::parse(read_file(report))["verification"];
  EXPECT_EQ(ranged_json["status"], "verified");
  ASSERT_EQ(ranged_json["inputs"].size(), 1u);
  EXPECT_EQ(ranged_json["inputs"][0]["name"], "x");
  EXPECT_EQ(ranged_json["inputs"][0]["how"], "uniform in [0, 1) (given)");
  EXPECT_NE((ranged.out + ranged.err).find("  x ["), std::string::npos) << ranged.out;
  EXPECT_NE((ranged.out + ranged.err).find("]: uniform in [0, 1) (given)"), std::string::npos)
      << ranged.out;

  // Without --verify there is no verification entry.
  CliRun plain = graft("optimize --local " + kExample.string() + " --report " + report.string());
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_TRUE(nlohmann::json::parse(read_file(report))["verification"].is_null());

  for (const std::string bad :
       {"--verify-dim batch=2", "--verify --verify-shape x=1,three", "--verify --verify-dim x",
        "--verify --verify-trials 0", "--verify --verify-value sr=abc",
        "--verify --verify-range x=1", "--verify --verify-range x=1,-1",
        "--verify --verify-range x=a,b", "--verify-range x=0,1"}) {
    CliRun b = graft("optimize --local " + bad + " " + kExample.string());
    EXPECT_EQ(b.code, 2) << bad << ": " << b.err;
  }
}

// --target and --target-opset: checked before any work (exit 2 naming the flag), shown in the
// table and the JSON report.
TEST(Cli, TargetAndTargetOpset) {
  fs::path report = temp_dir() / "target.json";
  CliRun r = graft("optimize --local --target onnxruntime:1.17 " + kExample.string() +
                   " --report " + report.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("target: onnxruntime:1.17"), std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(read_file(report))["target"], "onnxruntime:1.17");
  CliRun plain = graft("optimize --local " + kExample.string() + " --report " + report.string());
  ASSERT_EQ(plain.code, 0) << plain.err;
  EXPECT_EQ(plain.err.find("target:"), std::string::npos) << plain.err;
  EXPECT_EQ(nlohmann::json::parse(read_file(report))["target"], "onnx");
  for (const std::string bad :
       {"--target tensorrt", "--target onnxruntime:1", "--passes fuse_onnxruntime",
        "--target-opset 9", "--target-opset 99"}) {
    CliRun b = graft("optimize --local " + bad + " " + kExample.string());
    EXPECT_EQ(b.code, 2) << bad << ": " << b.err;
  }
  // The example is opset 9: it is raised (from opset 7 on), verified, and the report says so.
  CliRun raise = graft("optimize --local --verify --target-opset 17 " + kExample.string() +
                       " --report " + report.string());
  EXPECT_EQ(raise.code, 0) << raise.err;
  EXPECT_NE(raise.err.find("raised from 9 to 17"), std::string::npos) << raise.err;
  EXPECT_NE(raise.err.find("verification: verified"), std::string::npos) << raise.err;
}

TEST(Cli, ReportsMemoryEstimatesWithTheDimsGiven) {
  fs::path report = temp_dir() / "memory.json";
  CliRun r = graft("optimize --local " + kExample.string() + " --report " + report.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("memory (estimated): weights"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("peak activations"), std::string::npos) << r.err;
  auto json = nlohmann::json::parse(read_file(report));
  const auto& memory = json["memory"];
  EXPECT_GE(memory["after"]["weight_bytes"].get<uint64_t>(),
            json["initializer_bytes_after"].get<uint64_t>());
  EXPECT_GT(memory["before"]["peak_activation_bytes"].get<uint64_t>(), 0u);
  EXPECT_GT(memory["after"]["peak_activation_bytes"].get<uint64_t>(), 0u);
  EXPECT_FALSE(memory["after"]["largest_tensor"].get<std::string>().empty());
  EXPECT_EQ(memory["default_dim"], 1);
  for (const auto& p : json["passes"])
    EXPECT_GT(p["peak_activation_bytes_before"].get<uint64_t>(), 0u) << p["name"];

  // The model's weights are Constant nodes: they count as weights, not activations.
  EXPECT_EQ(json["initializer_bytes_before"], 0);
  EXPECT_GT(memory["before"]["weight_bytes"].get<uint64_t>(), 400000u);

  // The input is [batch, 3, height, width], all three symbolic. At 48 x 192 the batch scales
  // nearly every activation (shape tensors do not): 4 gives close to 4 times the peak.
  auto at_batch = [&](int batch) -> uint64_t {
    CliRun r = graft("optimize --local --dim p2o.DynamicDimension.0=" + std::to_string(batch) +
                     " --dim p2o.DynamicDimension.1=48 --dim p2o.DynamicDimension.2=192 " +
                     kExample.string() + " --report " + report.string());
    EXPECT_EQ(r.code, 0) << r.err;
    auto j = nlohmann::json::parse(read_file(report));
    EXPECT_EQ(j["memory"]["dims"]["p2o.DynamicDimension.1"], 48);
    return j["memory"]["before"]["peak_activation_bytes"].get<uint64_t>();
  };
  const uint64_t one = at_batch(1), four = at_batch(4);
  EXPECT_GT(one, 100000u);  // at least the 3 x 48 x 192 float input
  EXPECT_GT(four, 3.9 * one);
  EXPECT_LE(four, 4 * one);

  for (const std::string bad : {"--dim N=-1", "--dim N", "--dim =3", "--dim N=x"}) {
    CliRun b = graft("optimize --local " + bad + " " + kExample.string());
    EXPECT_EQ(b.code, 2) << bad << ": " << b.err;
  }
}
// ------------------------------------------------------------------------- --verify-data

void write_bytes(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string float_tensor(const std::string& name, std::vector<int64_t> dims,
                         std::vector<float> values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  for (float v : values) t.add_float_data(v);
  return t.SerializeAsString();
}

// y = x * [1, 1]: float16 shows its rounding of x in y.
fs::path mul_model() {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) <float[2] w = {1.0, 1.0}> { y = Mul (x, w) }
  )");
  fs::path path = temp_dir() / "verify_data" / "mul.onnx";
  write_bytes(path, model->to_proto().SerializeAsString());
  return path;
}

TEST(Cli, VerifyDataRunsOnnxTestDataFoldersAsTheyAre) {
  const fs::path add = onnx_testdata_dir() / "node" / "test_add";
  if (!fs::exists(add)) GTEST_SKIP() << "libonnx-testdata is not installed";
  const fs::path report = temp_dir() / "verify_data.json";
  // The brief's own command: one test_data_set folder (input_0.pb, input_1.pb); --verify too.
  for (const std::string& data : {(add / "test_data_set_0").string(), add.string()}) {
    CliRun r = graft("optimize --local --verify --verify-data " + data + " " +
                     (add / "model.onnx").string() + " --report " + report.string());
    ASSERT_EQ(r.code, 0) << data << ": " << r.err;
    auto json = nlohmann::json::parse(read_file(report));
    EXPECT_EQ(json["verification"]["status"], "verified") << json["verification"];
    EXPECT_EQ(json["verification"]["message"].get<std::string>().rfind("1 input set, 1 output", 0),
              0u)
        << json["verification"];
  }
}

TEST(Cli, VerifyDataMeasuresALossyPassOnTheGivenTensors) {
  const fs::path model = mul_model(), dir = temp_dir() / "verify_data";
  const fs::path report = dir / "report.json";
  // float16 rounds 2049 to 2048: the worst difference is exactly 1 on these inputs, whatever
  // the random ones would have given. Three spellings of the same input.
  write_bytes(dir / "named.pb", float_tensor("x", {2}, {0.1f, 2049}));
  write_bytes(dir / "unnamed.pb", float_tensor("", {2}, {0.1f, 2049}));
  for (const std::string& data : {(dir / "named.pb").string(), (dir / "unnamed.pb").string(),
                                  "x=" + (dir / "unnamed.pb").string()}) {
    CliRun r = graft("optimize --local --passes convert_fp16 --verify-data " + data + " " +
                     model.string() + " --report " + report.string());
    ASSERT_EQ(r.code, 0) << data << ": " << r.err;
    auto v = nlohmann::json::parse(read_file(report))["verification"];
    ASSERT_EQ(v["errors"].size(), 1u) << v;
    EXPECT_EQ(v["errors"][0]["max_abs"].get<double>(), 1.0) << data << ": " << v;
    EXPECT_DOUBLE_EQ(v["errors"][0]["rel"].get<double>(), 1.0 / 2049) << v;
  }
  // A folder of test_data_set_<N> folders: one set each, in numeric order (2 before 10).
  for (int n : {2, 10})
    write_bytes(dir / "sets" / ("test_data_set_" + std::to_string(n)) / "input_0.pb",
                float_tensor("", {2}, {n == 2 ? 0.5f : 1.0f, 3.0f}));
  // --verify-data implies --verify, which the tolerances otherwise need.
  CliRun sets =
      graft("optimize --local --verify-rtol 0.01 --verify-data " + (dir / "sets").string() + " " +
            model.string() + " --report " + report.string());
  ASSERT_EQ(sets.code, 0) << sets.err;
  EXPECT_EQ(
      nlohmann::json::parse(read_file(report))["verification"]["message"].get<std::string>().rfind(
          "2 input sets", 0),
      0u);
}

TEST(Cli, VerifyDataThatDoesNotFitIsAUsageError) {
  const fs::path model = mul_model(), dir = temp_dir() / "verify_data";
  write_bytes(dir / "wide.pb", float_tensor("x", {3}, {1, 2, 3}));
  write_bytes(dir / "garbage.pb", "\xff\xff\xff not a tensor");
  write_bytes(dir / "second.pb", float_tensor("", {2}, {1, 2}));
  write_bytes(dir / "empty" / "readme.txt", "nothing here");
  struct Case {
    std::string args;
    int code;
    std::string message;
  };
  CliRun no_verify = graft("optimize --local --verify-rtol 0.01 " + model.string());
  EXPECT_EQ(no_verify.code, 2) << no_verify.err;
  EXPECT_NE(no_verify.err.find("--verify-rtol requires --verify or --verify-data"),
            std::string::npos)
      << no_verify.err;
  for (const Case& c : std::vector<Case>{
           {(dir / "wide.pb").string(), 2,
            "verify input set 1, input 'x': shape [3]: dim 0 is 3, the model declares 2"},
           {"y=" + (dir / "wide.pb").string(), 2, "'y' is not an input of the model"},
           {(dir / "garbage.pb").string(), 2, "garbage.pb': not a serialized onnx.TensorProto"},
           {(dir / "missing.pb").string(), 4, "missing.pb"},
           {(dir / "empty").string(), 2, "no input_<N>.pb files"},
           // Two unnamed files: the second is at position 1, past the model's one input.
           {(dir / "second.pb").string() + " --verify-data " + (dir / "second.pb").string(), 2,
            "position 1 is past the model's 1 inputs"},
       }) {
    CliRun r = graft("optimize --local --verify-data " + c.args + " " + model.string());
    EXPECT_EQ(r.code, c.code) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << ": " << r.err;
  }
  // --calibration-data takes the same forms and its errors name it and its sets.
  for (const Case& c : std::vector<Case>{
           {(dir / "wide.pb").string(), 2,
            "calibration set 1, input 'x': shape [3]: dim 0 is 3, the model declares 2"},
           {(dir / "garbage.pb").string(), 2,
            "--calibration-data '" + (dir / "garbage.pb").string() +
                "': not a serialized onnx.TensorProto"},
           {(dir / "empty").string(), 2, "--calibration-data '"},
           {(dir / "second.pb").string() + " --calibration-data " + (dir / "second.pb").string(), 2,
            "--calibration-data '"},
       }) {
    CliRun r = graft("optimize --local --passes quantize_static_int8 --calibration-data " + c.args +
                     " " + model.string());
    EXPECT_EQ(r.code, c.code) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << ": " << r.err;
  }
}

// --explain on a near-miss LayerNormalization (epsilon is a graph input): the table says why,
// the JSON report carries it, and a node name holding a terminal escape reaches neither the
// terminal raw nor the JSON as invalid UTF-8.
TEST(Cli, ExplainPrintsWhyARuleDidNotRewrite) {
  auto model = parse_text(near_miss_layer_norm());
  ASSERT_TRUE(model);
  model->graph().find_local("y")->producer()->mutable_proto().set_name("/ln/Div\x1b[31m\xff");
  const fs::path in = temp_dir() / "near_miss.onnx", report = temp_dir() / "explain.json";
  {
    std::ofstream f(in, std::ios::binary);
    f << model->to_proto().SerializeAsString();
  }
  CliRun r = graft("optimize --local --passes fuse_blocks --explain fuse_blocks " + in.string() +
                   " --report " + report.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("fuse_blocks/layer_norm at /ln/Div\\x1b[31m"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("epsilon is not a constant"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos);
  auto json = nlohmann::json::parse(read_file(report));
  const auto& explained = json["passes"][0]["explanations"];
  ASSERT_EQ(explained.size(), 1u) << json.dump(2);
  EXPECT_EQ(explained[0]["rule"], "layer_norm");
  EXPECT_NE(explained[0]["reason"].get<std::string>().find("epsilon is not a constant"),
            std::string::npos);
  // A rule the pass does not have: a usage error naming the valid ones.
  r = graft("optimize --local --passes fuse_blocks --explain fuse_blocks/nope " + in.string());
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("its rules: layer_norm"), std::string::npos) << r.err;
}

// ------------------------------------------------------------------------- --fix-dim, --fix-shape

// x: [N,3,H,W] through a 1x1 Conv, flattened by a Reshape whose target [N*4, H*W] is computed
// from Shape(r): it folds only when the dims are fixed. The batch dim's name carries a terminal
// escape, which the table must not pass on.
fs::path flatten_model() {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N,3,H,W] x) => (float[A,B] y) {
      w = Constant <value = float[4,3,1,1] {0.5, -1, 0.25, 1, 0.5, -0.5, -0.25, 2, 1, 0.75, -1, 0.5}> ()
      r = Conv (x, w)
      s = Shape (r)
      i0 = Constant <value = int64 {0}> ()
      i1 = Constant <value = int64 {1}> ()
      i2 = Constant <value = int64 {2}> ()
      i3 = Constant <value = int64 {3}> ()
      ax = Constant <value = int64[1] {0}> ()
      n = Gather (s, i0)
      c = Gather (s, i1)
      h = Gather (s, i2)
      v = Gather (s, i3)
      nc = Mul (n, c)
      hw = Mul (h, v)
      u0 = Unsqueeze (nc, ax)
      u1 = Unsqueeze (hw, ax)
      shape = Concat <axis = 0> (u0, u1)
      y = Reshape (r, shape)
    }
  )");
  onnx::ModelProto proto = model->to_proto();
  proto.mutable_graph()
      ->mutable_input(0)
      ->mutable_type()
      ->mutable_tensor_type()
      ->mutable_shape()
      ->mutable_dim(0)
      ->set_dim_param("N\x1b[31m");
  fs::path path = temp_dir() / "fix" / "flatten.onnx";
  write_bytes(path, proto.SerializeAsString());
  return path;
}

TEST(Cli, FixDimAndFixShapeMakeInputsStaticSoTheirArithmeticFolds) {
  const fs::path in = flatten_model();
  const fs::path out = temp_dir() / "fix" / "fixed.onnx", report = temp_dir() / "fix" / "r.json";
  CliRun r = graft("optimize --local --verify --fix-dim H=4 --fix-shape x=2,3,4,5 " + in.string() +
                   " -o " + out.string() + " --report " + report.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("fixed input 'x': [N\\x1b[31m,3,H,W] -> [2,3,4,5]"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find('\x1b'), std::string::npos);
  EXPECT_NE(r.err.find("verification: verified"), std::string::npos) << r.err;
  auto json = nlohmann::json::parse(read_file(report));
  ASSERT_EQ(json["fixed_inputs"].size(), 1u) << json.dump(2);
  EXPECT_EQ(json["fixed_inputs"][0], "'x': [N\x1b[31m,3,H,W] -> [2,3,4,5]");
  auto model = ir::Model::parse(read_file(out));
  ASSERT_TRUE(model.ok()) << model.status();
  const auto& dims = (*model)->graph().inputs()[0].info.type().tensor_type().shape();
  ASSERT_EQ(dims.dim_size(), 4);
  for (int k = 0; k < 4; ++k)
    EXPECT_EQ(dims.dim(k).dim_value(), (std::vector<int64_t>{2, 3, 4, 5}[k]));
  EXPECT_EQ(count_ops(**model, "Shape"), 0);
  EXPECT_EQ(count_ops(**model, "Gather"), 0);
  EXPECT_EQ(count_ops(**model, "Concat"), 0);

  // Without fixing, the chain stays and no input is reported fixed.
  r = graft("optimize --local " + in.string() + " -o " + out.string() + " --report " +
            report.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("fixed input"), std::string::npos) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(read_file(report))["fixed_inputs"].empty());
  model = ir::Model::parse(read_file(out));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_GT(count_ops(**model, "Shape"), 0);
}

TEST(Cli, FixDimsThatDoNotFitAreUsageErrors) {
  const fs::path in = flatten_model();
  struct Case {
    std::string args, message;
  };
  for (const Case& c : std::vector<Case>{
           {"--fix-dim batch=1", "no input dim is named 'batch'; the inputs' dim names: 'H', "},
           {"--fix-dim H=0", "--fix-dim: '0' must be 1..2147483648"},
           {"--fix-dim H=2147483649", "--fix-dim: '2147483649' must be 1..2147483648"},
           {"--fix-dim H", "--fix-dim must look like NAME=VALUE, got 'H'"},
           {"--fix-dim H=four", "--fix-dim: 'four' is not a number"},
           {"--fix-dim H=1 --fix-dim H=2", "--fix-dim: 'H' is given twice, as 1 and 2"},
           {"--fix-shape x=1,three", "--fix-shape: 'three' is not a number"},
           {"--fix-shape x=1,,3,4", "--fix-shape: '' is not a number"},
           {"--fix-shape x=2,4,4,5", "input 'x': dim 1 is 4, the model declares 3"},
           {"--fix-shape x=2,3,4", "input 'x' has rank 4"},
           {"--fix-shape y=1", "'y' is not an input of the model; its inputs: 'x'"},
           {"--fix-dim H=4 --fix-shape x=1,3,5,5", "fix_dims makes 'H' 4, but fix_shapes gives"},
       }) {
    CliRun r = graft("optimize --local " + c.args + " " + in.string());
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << ": " << r.err;
  }
  // A malformed size is a usage error before the input is read.
  EXPECT_EQ(graft("optimize --local --fix-dim H=0 /no/such/file.onnx").code, 2);
}

TEST(Cli, StdinToStdoutGivesTheSameBytesAsFiles) {
  fs::path out = temp_dir() / "file.onnx";
  ASSERT_EQ(graft("optimize --local -q " + kExample.string() + " -o " + out.string()).code, 0);
  CliRun r = graft("optimize --local -q - -o -", kExample.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, read_file(out));
}

TEST(Cli, LevelO0OutputEqualsInputModel) {
  fs::path out = temp_dir() / "o0.onnx";
  ASSERT_EQ(
      graft("optimize --local -q --level O0 " + kExample.string() + " -o " + out.string()).code, 0);
  onnx::ModelProto a, b;
  ASSERT_TRUE(a.ParseFromString(read_file(kExample)));
  ASSERT_TRUE(b.ParseFromString(read_file(out)));
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
}

TEST(Cli, ExplicitPassesAndDumpDir) {
  fs::path dump = temp_dir() / "dump";
  fs::remove_all(dump);
  CliRun r = graft("optimize --local --passes extract_constants,prune --dump-dir " + dump.string() +
                   " " + kExample.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("extract_constants"), std::string::npos);
  EXPECT_EQ(r.err.find("cse"), std::string::npos);
  ASSERT_TRUE(fs::exists(dump));
  EXPECT_FALSE(fs::is_empty(dump));
}

TEST(Cli, PassesListsEveryPassWithLevel) {
  CliRun r = graft("passes");
  ASSERT_EQ(r.code, 0);
  for (const char* p :
       {"extract_constants", "eliminate_identity", "eliminate_noop", "dedup_initializers", "cse",
        "fuse_blocks", "fuse_conv_batchnorm", "fuse_matmul_add", "prune"})
    EXPECT_NE(r.out.find(p), std::string::npos) << p;
  EXPECT_NE(r.out.find("O2"), std::string::npos);
  // Each option under its pass: name, type, range, default, help.
  const auto fold = r.out.find("fold_constants ");
  ASSERT_NE(fold, std::string::npos) << r.out;
  const auto max_bytes = r.out.find(
      "option max_bytes (bytes in [0, 2147483648], default 16777216): largest folded result");
  const auto max_growth = r.out.find("option max_growth (integer >= 0, default 4): never fold");
  EXPECT_GT(max_bytes, fold) << r.out;
  EXPECT_GT(max_growth, max_bytes) << r.out;
  EXPECT_LT(max_growth, r.out.find("inline_constant_if")) << r.out;
  EXPECT_NE(max_growth, std::string::npos) << r.out;
  EXPECT_NE(r.out.find(std::string("this CLI: graft ") + graft_version() + ", build " +
                       build_fingerprint()),
            std::string::npos)
      << r.out;
}

// The peak resident memory of the CLI run with `args`, from wait4 (ru_maxrss); -1 if it did not
// exit with 0.
int64_t peak_rss_of_cli(const std::string& args) {
  const std::string command = std::string(GRAFT_CLI) + " " + args + " >/dev/null 2>&1";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  if (::wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return -1;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

// --local --verify holds the evaluator within --verify-max-bytes, and the process within a
// quarter more: on a Loop whose scan output grows by 16 KiB per iteration (200,000 iterations,
// 3.3 GB if nothing stopped it), the budget stops the run and what it freed is given back. The
// CLI's verification budget was 2 GiB while graftd's verify_max_bytes defaults to 1 GiB: this
// model peaked at 2.14 GB.
TEST(Cli, LocalVerificationOfAnAllocationBombStaysWithinItsBudget) {
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
  GTEST_SKIP() << "ASan's shadow memory and quarantine are not the CLI's";
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's shadow memory and quarantine are not the CLI's";
#endif
  const fs::path bomb = temp_dir() / "loop_scan_bomb.onnx";
  {
    std::ofstream out(bomb, std::ios::binary);
    out << parse_text(loop_scan_bomb(200000))->to_proto().SerializeAsString();
  }
  const fs::path report = temp_dir() / "bomb.json";
  constexpr int64_t kBudget = 256 << 20;
  // The process itself, the same run without verification: libraries, the IR, the report.
  const int64_t baseline = peak_rss_of_cli("optimize --local -q " + bomb.string());
  ASSERT_GT(baseline, 0);
  const int64_t peak =
      peak_rss_of_cli("optimize --local -q --verify --verify-max-bytes " + std::to_string(kBudget) +
                      " " + bomb.string() + " --report " + report.string());
  ASSERT_GT(peak, 0);
  const auto json = nlohmann::json::parse(read_file(report));
  EXPECT_EQ(json["verification"]["status"], "not_verifiable");
  EXPECT_NE(json["verification"]["message"].get<std::string>().find(
                "memory budget of " + std::to_string(kBudget) + " bytes"),
            std::string::npos)
      << json["verification"]["message"];
  EXPECT_GT(peak, baseline + kBudget * 3 / 4) << "the bomb did not fill the budget";
  EXPECT_LE(peak, baseline + kBudget * 5 / 4)
      << "peak " << (peak >> 20) << " MiB, baseline " << (baseline >> 20) << " MiB, budget "
      << (kBudget >> 20) << " MiB";

  // The default is graftd's verify_max_bytes default, 1 GiB (it was 2 GiB: the bomb peaked at
  // 2.14 GB).
  const std::string help = graft("optimize --help").out;
  const auto flag = help.find("--verify-max-bytes");
  ASSERT_NE(flag, std::string::npos) << help;
  EXPECT_NE(help.substr(flag, help.find('\n', flag) - flag).find("=1073741824"), std::string::npos)
      << help;

  // Refused: remotely (the server's verify_max_bytes applies), without --verify, and 0.
  EXPECT_EQ(
      graft("optimize --server 127.0.0.1:1 --verify --verify-max-bytes 1000 " + bomb.string()).code,
      2);
  EXPECT_EQ(graft("optimize --local --verify-max-bytes 1000 " + bomb.string()).code, 2);
  EXPECT_EQ(graft("optimize --local --verify --verify-max-bytes 0 " + bomb.string()).code, 2);
}

// A bad option value is a configuration error (exit 2) found before the input is read: with a
// missing input file the run still ends with 2, not with the I/O error's 4.
TEST(Cli, BadOptionValueIsAConfigurationError) {
  for (const char* input : {kExample.c_str(), "/no/such/file.onnx"}) {
    CliRun r =
        graft(std::string("optimize --local --option fold_constants.max_bytes=abc ") + input);
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("option fold_constants.max_bytes must be a byte count in [0, 2147483648]"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("got 'abc'"), std::string::npos) << r.err;
  }
  CliRun range =
      graft("optimize --local --option fold_constants.max_growth=-1 " + kExample.string());
  EXPECT_EQ(range.code, 2) << range.err;
  EXPECT_NE(range.err.find("fold_constants.max_growth"), std::string::npos) << range.err;
  CliRun unknown = graft("optimize --local --option prune.depth=1 " + kExample.string());
  EXPECT_EQ(unknown.code, 2) << unknown.err;
  EXPECT_NE(unknown.err.find("pass 'prune' has no option 'depth'"), std::string::npos)
      << unknown.err;
  // A good value in another spelling runs; list options before the input take one value each,
  // so the input stays the input.
  CliRun listed =
      graft("optimize -q --local --passes extract_constants,prune " + kExample.string());
  EXPECT_EQ(listed.code, 0) << listed.err;
  fs::path out = temp_dir() / "suffix.onnx";
  CliRun good = graft("optimize -q --local --option fold_constants.max_bytes=8MiB " +
                      kExample.string() + " -o " + out.string());
  EXPECT_EQ(good.code, 0) << good.err;
}

TEST(Cli, ExitCodes) {
  EXPECT_EQ(graft("optimize --local /no/such/file.onnx").code, 4);
  fs::path junk = temp_dir() / "junk.onnx";
  std::ofstream(junk) << "definitely not protobuf \xff\xff";
  CliRun bad = graft("optimize --local " + junk.string());
  EXPECT_EQ(bad.code, 3);
  EXPECT_NE(bad.err.find("invalid model"), std::string::npos) << bad.err;
  // An empty file is an invalid model too (and remotely the same: graftd_test).
  fs::path empty = temp_dir() / "empty.onnx";
  std::ofstream(empty).close();
  CliRun none = graft("optimize --local " + empty.string());
  EXPECT_EQ(none.code, 3);
  EXPECT_NE(none.err.find("invalid model: empty input"), std::string::npos) << none.err;
  // Out-of-range numbers are usage errors, not wrapped or overflowed values.
  EXPECT_EQ(graft("optimize --timeout 1e300 --server 127.0.0.1:1 " + kExample.string()).code, 2);
  EXPECT_EQ(graft("optimize --local --verify --verify-value x=1e300 " + kExample.string()).code, 2);
  CliRun unknown = graft("optimize --local --passes nope " + kExample.string());
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("valid passes"), std::string::npos) << unknown.err;
  EXPECT_EQ(graft("optimize --local --level O9 " + kExample.string()).code, 2);
  EXPECT_EQ(graft("optimize --local --option badformat " + kExample.string()).code, 2);
  EXPECT_EQ(graft("frobnicate").code, 2);
  EXPECT_EQ(graft("optimize --local " + kExample.string() + " -o /no/such/dir/out.onnx").code, 4);
}

}  // namespace
}  // namespace graft::testing
