// External-data locations in the `graft` CLI: every name is relative, normalised and stays
// inside the model's folder (reading) and the output folder (writing), no symlink is followed,
// and names a server returns obey the same rule. Violations are exit 3 naming the location.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "graft/v1/graft.grpc.pb.h"
#include "tests/external_model.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

namespace fs = std::filesystem;

struct CliRun {
  int code;
  std::string err;
};

CliRun graft(const fs::path& dir, const std::string& args) {
  std::string cmd =
      std::string(GRAFT_CLI) + " " + args + " >/dev/null 2>" + (dir / "stderr").string();
  int status = std::system(cmd.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_file(dir / "stderr")};
}

void write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

const std::string kWeights(64, 'w');
const std::string kSecret = "the user's secret";

// A scratch tree: <root>/in (the model's folder), <root>/out (the output folder) and
// <root>/secret.txt, a file outside both.
class ExternalPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("graft_paths_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(in());
    fs::create_directories(out());
    write(root_ / "secret.txt", kSecret);
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path in() const { return root_ / "in"; }
  fs::path out() const { return root_ / "out"; }
  std::string model_path() const { return (in() / "model.onnx").string(); }
  std::string output_path() const { return (out() / "m.onnx").string(); }

  CliRun optimize_local(const std::string& location) {
    write(model_path(), external_data_model(location));
    return graft(root_, "optimize -q --local " + model_path() + " -o " + output_path());
  }
  // Nothing but the model may appear in the output folder, and the secret stays unchanged.
  void expect_nothing_escaped() {
    EXPECT_EQ(read_file(root_ / "secret.txt"), kSecret);
    for (const auto& e : fs::recursive_directory_iterator(out()))
      EXPECT_EQ(e.path(), out() / "m.onnx");
    EXPECT_FALSE(fs::exists(root_ / "evil"));
  }

  fs::path root_;
};

TEST_F(ExternalPaths, LocalModeCopiesAPlainRelativeFile) {
  write(in() / "weights" / "w.bin", kWeights);
  CliRun r = optimize_local("weights/w.bin");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_file(out() / "weights" / "w.bin"), kWeights);
}

// The model's only external tensor is a Constant in a model-local function: the scan for
// locations covers function bodies (and sparse and attribute tensor lists), not only the graph.
std::string external_data_in_a_function(const std::string& location) {
  onnx::ModelProto proto;
  proto.ParseFromString(external_data_model(location));
  onnx::TensorProto w = proto.graph().initializer(0);
  proto.mutable_graph()->clear_initializer();
  auto* opset = proto.add_opset_import();
  opset->set_domain("local");
  opset->set_version(1);
  auto* call = proto.mutable_graph()->mutable_node(1);
  call->set_op_type("F");
  call->set_domain("local");
  call->mutable_input()->RemoveLast();
  auto* f = proto.add_functions();
  f->set_name("F");
  f->set_domain("local");
  f->add_input("a");
  f->add_output("b");
  *f->add_opset_import() = proto.opset_import(0);
  auto* c = f->add_node();
  c->set_op_type("Constant");
  c->add_output("w");
  auto* value = c->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  *value->mutable_t() = w;
  value->mutable_t()->clear_name();
  auto* m = f->add_node();
  m->set_op_type("MatMul");
  m->add_input("a");
  m->add_input("w");
  m->add_output("b");
  return proto.SerializeAsString();
}

TEST_F(ExternalPaths, LocalModeCopiesAFileOnlyAFunctionReads) {
  write(in() / "weights" / "w.bin", kWeights);
  write(model_path(), external_data_in_a_function("weights/w.bin"));
  CliRun r =
      graft(root_, "optimize -q --local --level O1 " + model_path() + " -o " + output_path());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_file(out() / "weights" / "w.bin"), kWeights);
  fs::remove_all(out());
  fs::create_directories(out());
  write(model_path(), external_data_in_a_function("../secret.txt"));
  r = graft(root_, "optimize -q --local --level O1 " + model_path() + " -o " + output_path());
  EXPECT_EQ(r.code, 3) << r.err;
  expect_nothing_escaped();
}

// y = Add(x, Transpose(w)), z = Mul(x, u) with w and u external: folding makes a new 2 KiB
// weight from w; u stays as it is.
std::unique_ptr<ir::Model> folding_model(const fs::path& folder, const std::string& w_location,
                                         const std::string& u_location) {
  std::string w, u;
  for (int i = 0; i < 512; ++i) w += (i ? ", " : "") + std::to_string(i % 17 - 8);
  for (int i = 0; i < 512; ++i) u += (i ? ", " : "") + std::to_string(i % 5);
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[32, 16] x) => (float[32, 16] y, float[32, 16] z) <float[16, 32] w = {)" +
                          w + R"(}, float[32, 16] u = {)" + u + R"(}> {
      t = Transpose <perm = [1, 0]> (w)
      y = Add (x, t)
      z = Mul (x, u)
    }
  )");
  externalize(*model, folder, w_location, {"w"});
  externalize(*model, folder, u_location, {"u"});
  return model;
}

TEST_F(ExternalPaths, LocalModeWritesNewWeightsToANewFileAndCopiesOnlyWhatIsStillRead) {
  auto model = folding_model(in(), "w.bin", "data/u.bin");
  write(model_path(), model->to_proto().SerializeAsString());
  CliRun r = graft(root_, "optimize -q --local " + model_path() + " -o " + output_path());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(fs::file_size(out() / "m.graft.weights"), 2048u);  // the transposed w
  EXPECT_EQ(read_file(out() / "data" / "u.bin"), read_file(in() / "data" / "u.bin"));
  EXPECT_FALSE(fs::exists(out() / "w.bin"));  // folded away: not copied
  EXPECT_LT(fs::file_size(output_path()), 1024u);
  auto input = ir::Model::load_file(model_path());
  auto output = ir::Model::load_file(output_path());
  ASSERT_TRUE(input.ok() && output.ok());
  EXPECT_EQ(count_ops(**output, "Transpose"), 0);
  EXPECT_EQ(same_outputs(**input, **output), "");
}

// w and u in one file: folding replaces w, so the file is used only in part. Written elsewhere,
// u goes to the new weights file instead of the whole file being copied; written beside the
// input, the file stays referenced.
TEST_F(ExternalPaths, LocalModeMovesWhatIsStillReadOfAPartlyUsedFile) {
  auto model = folding_model(in(), "all.bin", "all.bin");
  write(model_path(), model->to_proto().SerializeAsString());
  CliRun r = graft(root_, "optimize -q --local " + model_path() + " -o " + output_path());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(out() / "all.bin"));
  EXPECT_EQ(fs::file_size(out() / "m.graft.weights"), 4096u);  // the transposed w, then u
  auto input = ir::Model::load_file(model_path());
  auto output = ir::Model::load_file(output_path());
  ASSERT_TRUE(input.ok() && output.ok());
  EXPECT_EQ(same_outputs(**input, **output), "");

  const std::string beside = (in() / "m.onnx").string();
  r = graft(root_, "optimize -q --local " + model_path() + " -o " + beside);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(fs::file_size(in() / "m.graft.weights"), 2048u);  // u is read from all.bin
  auto optimized = ir::Model::load_file(beside);
  ASSERT_TRUE(optimized.ok());
  EXPECT_EQ(same_outputs(**input, **optimized), "");
}

TEST_F(ExternalPaths, LocalModeNumbersTheNewWeightsFileWhenTheInputUsesItsName) {
  auto model = folding_model(in(), "m.graft.weights", "u.bin");
  write(model_path(), model->to_proto().SerializeAsString());
  const std::string before = read_file(in() / "m.graft.weights");
  const std::string output = (in() / "m.onnx").string();  // beside the input
  CliRun r = graft(root_, "optimize -q --local " + model_path() + " -o " + output);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_file(in() / "m.graft.weights"), before);  // the input's file is left alone
  EXPECT_EQ(fs::file_size(in() / "m.graft-1.weights"), 2048u);
  auto input = ir::Model::load_file(model_path());
  auto optimized = ir::Model::load_file(output);
  ASSERT_TRUE(input.ok() && optimized.ok());
  EXPECT_EQ(same_outputs(**input, **optimized), "");
}

TEST_F(ExternalPaths, LocalModeRejectsDotDot) {
  CliRun r = optimize_local("../secret.txt");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("'../secret.txt'"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out() / "m.onnx"));
  expect_nothing_escaped();
}

TEST_F(ExternalPaths, LocalModeRejectsAnAbsoluteLocation) {
  const std::string secret = (root_ / "secret.txt").string();
  CliRun r = optimize_local(secret);
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("'" + secret + "'"), std::string::npos) << r.err;
  expect_nothing_escaped();
}

TEST_F(ExternalPaths, LocalModeRejectsNamesThatAreNotNormalised) {
  write(in() / "a" / "b", kWeights);
  for (const std::string name : {"a/./b", "./a/b", "a//b", "a/b/", "a/x/../b"}) {
    CliRun r = optimize_local(name);
    EXPECT_EQ(r.code, 3) << name << ": " << r.err;
    EXPECT_NE(r.err.find("'" + name + "'"), std::string::npos) << r.err;
  }
  expect_nothing_escaped();
}

TEST_F(ExternalPaths, LocalModeDoesNotFollowASymlinkToAFile) {
  fs::create_symlink(root_ / "secret.txt", in() / "w.bin");
  CliRun r = optimize_local("w.bin");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("'w.bin'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("symbolic link"), std::string::npos) << r.err;
  expect_nothing_escaped();
}

TEST_F(ExternalPaths, LocalModeDoesNotFollowASymlinkToADirectory) {
  write(root_ / "elsewhere" / "w.bin", kSecret);
  fs::create_directory_symlink(root_ / "elsewhere", in() / "weights");
  CliRun r = optimize_local("weights/w.bin");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("'weights/w.bin'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("symbolic link"), std::string::npos) << r.err;
  expect_nothing_escaped();
}

TEST_F(ExternalPaths, LocalModeDoesNotWriteThroughASymlinkedOutputDirectory) {
  write(in() / "weights" / "w.bin", kWeights);
  fs::create_directories(root_ / "elsewhere");
  fs::create_directory_symlink(root_ / "elsewhere", out() / "weights");
  CliRun r = optimize_local("weights/w.bin");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("'weights/w.bin'"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(root_ / "elsewhere" / "w.bin"));
}

TEST_F(ExternalPaths, LocalModeDoesNotReplaceASymlinkedOutputFile) {
  write(in() / "w.bin", kWeights);
  fs::create_symlink(root_ / "secret.txt", out() / "w.bin");
  CliRun r = optimize_local("w.bin");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_NE(r.err.find("'w.bin'"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_symlink(out() / "w.bin"));
  EXPECT_EQ(read_file(root_ / "secret.txt"), kSecret);
}

TEST_F(ExternalPaths, MissingFileIsAnIoError) {
  CliRun r = optimize_local("weights/none.bin");
  EXPECT_EQ(r.code, 4) << r.err;
  EXPECT_NE(r.err.find("weights/none.bin"), std::string::npos) << r.err;
}

// A Graft server that echoes the model and returns one external file under a name of its
// choosing, as a compromised or buggy server could.
class NamingServer final : public v1::Graft::Service {
 public:
  explicit NamingServer(std::string name) : name_(std::move(name)) {}
  grpc::Status Optimize(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::OptimizeResponse, v1::OptimizeRequest>* stream) override {
    std::string model;
    v1::OptimizeRequest msg;
    while (stream->Read(&msg))
      if (msg.has_chunk() && msg.chunk().file().empty()) model += msg.chunk().data();
    v1::OptimizeResponse chunk;
    chunk.mutable_chunk()->set_data(model);
    stream->Write(chunk);
    v1::OptimizeResponse file;
    file.mutable_chunk()->set_file(name_);
    file.mutable_chunk()->set_data("written by the server");
    stream->Write(file);
    v1::OptimizeResponse last;
    last.mutable_report()->set_output_bytes(model.size());
    auto* f = last.mutable_report()->add_external_files();
    f->set_name(name_);
    f->set_size(21);
    stream->Write(last);
    return grpc::Status::OK;
  }

 private:
  std::string name_;
};

TEST_F(ExternalPaths, NamesFromTheServerAreCheckedBeforeWriting) {
  write(in() / "weights" / "w.bin", kWeights);
  write(model_path(), external_data_model("weights/w.bin"));
  fs::create_directories(root_ / "elsewhere");
  fs::create_directory_symlink(root_ / "elsewhere", out() / "linked");
  for (const std::string& name : std::vector<std::string>{
           "../evil", (root_ / "evil").string(), "a/./evil", "linked/evil", "weights/../../evil"}) {
    NamingServer service(name);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    auto server = builder.BuildAndStart();
    ASSERT_TRUE(server && port > 0);
    CliRun r = graft(root_, "optimize -q " + model_path() + " -o " + output_path() +
                                " --server 127.0.0.1:" + std::to_string(port));
    server->Shutdown();
    EXPECT_EQ(r.code, 3) << name << ": " << r.err;
    EXPECT_NE(r.err.find("'" + name + "'"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(root_ / "evil")) << name;
    EXPECT_FALSE(fs::exists(root_ / "elsewhere" / "evil")) << name;
    EXPECT_FALSE(fs::exists(out() / "a")) << name;
  }
}

}  // namespace
}  // namespace graft::testing
