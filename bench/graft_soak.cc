// Fault and soak test for graftd: one real graftd on loopback with small limits, many concurrent
// clients sending a mix of valid, invalid, bomb and cancelled requests for a bounded time and
// number of requests, some of them child processes SIGKILLed in the middle of an upload. Then it
// checks, and exits 1 if any check fails:
//   - graftd is alive, answers health SERVING, and exits 0 on SIGTERM at the end;
//   - every valid request that succeeded got the bytes (and verification status) the same
//     pipeline gives in this process (graftd's own request_pipeline_config, then run_pipeline);
//   - every answered request got a status its kind allows (e.g. INVALID_ARGUMENT naming the
//     problem for a bad model, RESOURCE_EXHAUSTED only for a size limit or overload);
//   - after an idle period graftd's resident memory is within a stated bound of its baseline;
//   - its metrics add up with what the clients saw (see check_metrics for the exact rule);
//   - nothing is still in flight or held (in-flight, queue and upload-bytes gauges are 0).
// It prints one table of requests per kind (codes, p50/p99 latency), the metrics reconciliation,
// RSS baseline / peak / final, and how long CPU-bomb requests kept graftd busy past their
// deadline (from graftd's request log).
//
//   graft_soak                              60 s, 16 clients
//   graft_soak --seconds 300 --clients 24   the long run of docs/performance.md
//   graft_soak --seconds 20 --clients 6     what the CTest soak_smoke runs
//
// Every request has a bound: a gRPC deadline, or (for requests that test graftd's own
// deadlines) a watchdog that cancels it and counts a failure if graftd did not end it in time.
// Only loopback addresses are used.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <absl/status/status.h>
#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>

#include "bench/bench_util.h"
#include "client/graft_client.h"
#include "core/cache/digest.h"
#include "core/ir/model.h"
#include "core/pipeline/pipeline.h"
#include "proto/convert.h"
#include "server/config.h"
#include "server/service.h"
#include "tests/chain_model.h"

namespace {

namespace fs = std::filesystem;
namespace v1 = graft::v1;
using graft::bench::Clock;
using graft::bench::fmt;
using graft::bench::percentile;
using graft::bench::since;
using namespace std::chrono_literals;

constexpr size_t kChunkBytes = 1 << 20;
// What a request the server should answer promptly may take at most (queueing behind bombs on
// two workers included); reaching it is a failure of that request, not a hang of the run.
constexpr auto kCallTimeout = 120s;
// How long past the deadline graftd should have enforced itself a watchdog waits before it
// cancels the call and counts a failure.
constexpr auto kWatchdogGrace = 30s;

std::string code_name(grpc::StatusCode code) {
  std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? "UNKNOWN" : name;
}

grpc::Status to_grpc(const absl::Status& st) {
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message()));
}

std::string describe(const grpc::Status& st) {
  return code_name(st.error_code()) + (st.error_message().empty() ? "" : ": " + st.error_message());
}

// ---------------------------------------------------------------------------------------------
// Models.

onnx::ModelProto parse_onnx_text(const std::string& text) {
  onnx::ModelProto proto;
  auto status = onnx::OnnxParser::Parse(proto, text.c_str());
  if (!status.IsOK()) {
    std::fprintf(stderr, "graft_soak: bad built-in model text: %s\n%s\n",
                 status.ErrorMessage().c_str(), text.c_str());
    std::exit(1);
  }
  return proto;
}

std::string model_bytes(const std::string& text) {
  return parse_onnx_text(text).SerializeAsString();
}

std::string float_list(std::mt19937_64& rng, int n) {
  std::uniform_real_distribution<float> d(-1, 1);
  std::string out;
  for (int i = 0; i < n; ++i) out += (i ? ", " : "") + fmt("%.4f", d(rng));
  return out;
}

// Constants to fold, an Identity to remove, a MatMul + Add to fuse.
std::string folding_model(std::mt19937_64& rng, int width) {
  const std::string w = std::to_string(width);
  return model_bytes(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N, 8] x) => (float[N, )" +
                     w + R"(] y) {
      w = Constant <value = float[8, )" +
                     w + "] {" + float_list(rng, 8 * width) + R"(}> ()
      b = Constant <value = float[)" +
                     w + "] {" + float_list(rng, width) + R"(}> ()
      c = Constant <value = float[)" +
                     w + "] {" + float_list(rng, width) + R"(}> ()
      bc = Add (b, c)
      s = Mul (bc, c)
      i = Identity (x)
      m = MatMul (i, w)
      a = Add (m, s)
      y = Relu (a)
    }
  )");
}

// Identity -> MatMul with its weight in the external-data file "weights/w.bin" (16 floats).
std::string external_data_model(uint64_t weight_bytes) {
  onnx::ModelProto proto = parse_onnx_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1, 4] x) => (float[1, 4] y) {
      t = Identity (x)
      y = Relu (t)
    }
  )");
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
  loc->set_value("weights/w.bin");
  auto* len = w->add_external_data();
  len->set_key("length");
  len->set_value(std::to_string(weight_bytes));
  return proto.SerializeAsString();
}

// Identity -> MatMul with a [rows, cols] float weight inside the model: a large upload.
std::string big_model(std::mt19937_64& rng, int rows, int cols) {
  onnx::ModelProto proto = parse_onnx_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1, )" + std::to_string(rows) + R"(] x) => (float[1, )" +
                                           std::to_string(cols) +
                                           R"(] y) {
      t = Identity (x)
      y = Relu (t)
    }
  )");
  proto.mutable_graph()->mutable_node(1)->set_op_type("MatMul");
  proto.mutable_graph()->mutable_node(1)->add_input("w");
  auto* w = proto.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(rows);
  w->add_dims(cols);
  std::string raw(size_t{4} * rows * cols, '\0');
  for (size_t i = 0; i < raw.size(); i += 509) raw[i] = static_cast<char>(rng());
  w->set_raw_data(std::move(raw));
  return proto.SerializeAsString();
}

// An If whose condition input is named '': the evaluator must never run it (issue 8, finding 1).
std::string if_without_condition() {
  onnx::ModelProto proto = parse_onnx_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[2] x) => (float[2] y) {
      y = If (c) <
        then_branch = t () => (float[2] a) { a = Neg (x) },
        else_branch = e () => (float[2] b) { b = Abs (x) }
      >
    }
  )");
  proto.mutable_graph()->mutable_node(0)->set_input(0, "");
  return proto.SerializeAsString();
}

// 200,000 iterations emitting a 16 KiB scan slice each: 3.3 GB unless the evaluator's memory
// budget stops it (finding 3).
std::string loop_scan_bomb() {
  return model_bytes(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[4096] x) => (float[N, 4096] all) {
      m = Constant <value = int64 {200000}> ()
      cond = Constant <value = bool {1}> ()
      last, all = Loop (m, cond, x) <
        body = b (int64 i, bool c, float[4096] v) => (bool co, float[4096] vo, float[4096] s) {
          co = Identity (c)
          vo = Identity (v)
          s = Identity (v)
        }
      >
    }
  )");
}

// Expand to 1024 x 1024, then kBombMatMuls MatMuls of 2^30 multiply-adds each (finding 4): on
// the evaluator's dgemm (about 2.5e10 multiply-adds a second per core) several seconds per run,
// well past the bombs' 1 s deadlines, and within verify_max_work so that the deadline, not the
// work budget, ends it.
constexpr int kBombMatMuls = 60;
std::string matmul_bomb() {
  std::string text = R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1, 1] x) => (float[1024, 1024] y) {
      shape = Constant <value = int64[2] {1024, 1024}> ()
      m0 = Expand (x, shape)
  )";
  for (int i = 1; i <= kBombMatMuls; ++i)
    text += "      m" + std::to_string(i) + " = MatMul (m" + std::to_string(i - 1) + ", m0)\n";
  text += "      y = Identity (m" + std::to_string(kBombMatMuls) + ")\n    }\n";
  return model_bytes(text);
}

v1::PipelineConfig o2() {
  v1::PipelineConfig c;
  c.set_level("O2");
  return c;
}

v1::PipelineConfig verified() {
  auto c = o2();
  c.mutable_verify()->set_enabled(true);
  return c;
}

// ---------------------------------------------------------------------------------------------
// graftd's configuration: one ServerConfig gives both graftd's flags and the limits the local
// pipeline applies, so the two cannot differ.

graft::server::ServerConfig soak_server_config() {
  graft::server::ServerConfig c;
  c.workers = 2;
  c.queue_length = 16;
  c.cache_bytes = 32ull << 20;
  c.max_model_bytes = 24ull << 20;
  c.max_inflight_bytes = 64ull << 20;
  c.verify_max_bytes = 64ull << 20;
  c.verify_max_work = 200'000'000'000;  // graftd's default (server/config.h)
  c.default_deadline_seconds = 10;
  return c;
}

std::vector<std::string> graftd_flags(const graft::server::ServerConfig& c) {
  return {"--workers",
          std::to_string(c.workers),
          "--queue-length",
          std::to_string(c.queue_length),
          "--cache-bytes",
          std::to_string(c.cache_bytes),
          "--max-model-bytes",
          std::to_string(c.max_model_bytes),
          "--max-inflight-bytes",
          std::to_string(c.max_inflight_bytes),
          "--verify-max-bytes",
          std::to_string(c.verify_max_bytes),
          "--verify-max-work",
          std::to_string(c.verify_max_work),
          "--default-deadline-seconds",
          fmt("%g", c.default_deadline_seconds)};
}

// ---------------------------------------------------------------------------------------------
// Requests whose result is checked against this process's own run of the same pipeline.

struct Expected {
  std::string model;
  v1::Verification::Status verification = v1::Verification::NOT_REQUESTED;
};

absl::StatusOr<Expected> local_result(const graft::server::ServerConfig& server,
                                      const std::string& bytes, const v1::PipelineConfig& proto) {
  auto config = graft::server::request_pipeline_config(server, proto);
  if (!config.ok()) return config.status();
  auto model = graft::ir::Model::parse(bytes);
  if (!model.ok()) return model.status();
  auto report = graft::run_pipeline(*model, *config);
  if (!report.ok()) return report.status();
  auto out = (*model)->serialize_and_release();
  if (!out.ok()) return out.status();
  v1::OptimizeReport converted;
  graft::api::fill_report(*report, &converted);
  return Expected{std::move(*out), converted.verification().status()};
}

std::vector<std::string> file_names(const graft::client::ExternalFiles& files) {
  std::vector<std::string> names;
  for (const auto& [name, bytes] : files) names.push_back(name);
  return names;
}

struct Template {
  std::string label;
  std::string model;
  v1::PipelineConfig config;
  graft::client::ExternalFiles files;
  Expected expected;
};

// ---------------------------------------------------------------------------------------------
// Kinds of request.

enum class Kind {
  kValidReal,
  kValidRealVerify,
  kValidGenerated,
  kValidVerify,
  kValidExternal,
  kValidBig,
  kBadTruncated,
  kBadGarbage,
  kBadPass,
  kBadConfig,
  kBadIfCondition,
  kBadExternalName,
  kBadSizeMismatch,
  kBadSha256,
  kBadEmpty,
  kBombLoopScan,
  kBombMatmulHint,
  kBombMatmulDeadline,
  kBombStall,
  kBombStallDeadline,
  kBombHugeSize,
  kBombWrapSizes,
  kCancelUpload,
  kCancelWork,
  kKilled,
  kCount
};

struct KindInfo {
  const char* name;
  int weight;  // relative frequency
  const char* what;
};

const KindInfo& info(Kind k) {
  static const KindInfo table[] = {
      {"valid_real", 110, "models/ (and ../shared/models) at O2"},
      {"valid_real_verify", 20, "ppocr_mobile_v2_cls at O2, verified"},
      {"valid_generated", 140, "Identity/Relu chains, folding models"},
      {"valid_verify", 60, "folding models, verified"},
      {"valid_external", 40, "a model with an external-data file"},
      {"valid_big", 15, "12 MiB weight in the model"},
      {"bad_truncated", 30, "a real model cut short"},
      {"bad_garbage", 30, "random bytes"},
      {"bad_pass", 20, "unknown pass name"},
      {"bad_config", 30, "out-of-range config numbers"},
      {"bad_if_condition", 20, "If without its condition, verified"},
      {"bad_external_name", 20, "external file named with '..' or absolute"},
      {"bad_size_mismatch", 20, "fewer bytes than model_size"},
      {"bad_sha256", 15, "expected_sha256 does not match"},
      {"bad_empty", 10, "zero-byte model"},
      {"bomb_loop_scan", 15, "Loop of 200k 16 KiB scan slices, verified"},
      {"bomb_matmul_hint", 8, "Expand + 60 MatMuls, verified, deadline hint 1 s"},
      {"bomb_matmul_deadline", 8, "Expand + 60 MatMuls, verified, gRPC deadline 1 s"},
      {"bomb_stall", 5, "max-size upload that stops, no deadline"},
      {"bomb_stall_deadline", 10, "max-size upload that stops, gRPC deadline 1.5 s"},
      {"bomb_huge_size", 10, "model_size 2^31-1 or 2^62"},
      {"bomb_wrap_sizes", 10, "external sizes summing past 2^64"},
      {"cancel_upload", 40, "TryCancel mid-upload"},
      {"cancel_work", 20, "TryCancel while graftd optimizes"},
      {"killed", 25, "child process SIGKILLed mid-upload"},
  };
  return table[static_cast<size_t>(k)];
}

// ---------------------------------------------------------------------------------------------
// What every client shares.

struct Shared {
  graft::server::ServerConfig server;
  std::string address;
  std::string self;     // this program, for the child processes that get killed
  std::string run_tag;  // makes digests unique to this run
  std::atomic<uint64_t> next_tag{0};
  std::map<Kind, std::vector<Template>> pools;
  std::vector<std::string> real_models;  // for truncation
  std::string if_without_condition, loop_scan_bomb, matmul_bomb, slow_model, external_model;
  Expected loop_scan_expected;

  std::string unique(const std::string& what) {
    return "graft_soak " + run_tag + " " + what + " " + std::to_string(next_tag++);
  }
};

// One call's end as seen by the client.
struct Outcome {
  Outcome(std::string code, bool answered = true, std::string failure = "")
      : code(std::move(code)), answered(answered), failure(std::move(failure)) {}
  std::string code;  // canonical gRPC code name, or "killed"
  // The status came from graftd's handler, so graftd counted this call under `code`. False when
  // the client ended the call itself (cancel, its own deadline, killed): graftd may or may not
  // have seen the call, and counts it under a code of its own.
  bool answered;
  std::string failure;  // a violated expectation; empty when fine
  // CPU bombs: the digest graftd logs and the deadline it was given, to find the request's log
  // line and measure how long graftd worked past the deadline.
  std::string digest;
  double deadline_ms = 0;
};

// A RESOURCE_EXHAUSTED that any request may get when graftd is busy: the admission limit
// (workers + queue_length), a full queue or the in-flight upload budget.
bool overload(const grpc::Status& st) {
  if (st.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) return false;
  const std::string& m = st.error_message();
  return m.find("already being handled") != std::string::npos ||
         m.find("workers are busy") != std::string::npos ||
         m.find("max_inflight_bytes") != std::string::npos;
}

// An answered call that must end with `want` and a message containing `words` (or overload).
Outcome expect(const grpc::Status& st, grpc::StatusCode want, const std::string& words) {
  Outcome o{code_name(st.error_code())};
  if (overload(st)) return o;
  if (st.error_code() != want || st.error_message().find(words) == std::string::npos)
    o.failure =
        "expected " + code_name(want) + " mentioning \"" + words + "\", got " + describe(st);
  return o;
}

// Cancels calls that outlive their time. Entries are removed before their context dies.
class Watchdog {
 public:
  Watchdog() : thread_([this] { loop(); }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  uint64_t arm(grpc::ClientContext* context, Clock::time_point when) {
    std::lock_guard<std::mutex> lock(mu_);
    entries_[next_] = {when, context, false};
    return next_++;
  }
  // True if the watchdog cancelled the call.
  bool disarm(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    bool fired = entries_[id].fired;
    entries_.erase(id);
    return fired;
  }

 private:
  struct Entry {
    Clock::time_point when;
    grpc::ClientContext* context;
    bool fired;
  };
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, 50ms);
      const auto now = Clock::now();
      for (auto& [id, e] : entries_)
        if (!e.fired && now >= e.when) {
          e.fired = true;
          e.context->TryCancel();
        }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  uint64_t next_ = 0;
  std::map<uint64_t, Entry> entries_;
  std::thread thread_;
};

Watchdog& watchdog() {
  static Watchdog w;
  return w;
}

// One Optimize call driven message by message, for what the client library never sends.
class RawCall {
 public:
  RawCall(v1::Graft::Stub* stub, std::optional<std::chrono::milliseconds> deadline) {
    if (deadline) context_.set_deadline(std::chrono::system_clock::now() + *deadline);
    stream_ = stub->Optimize(&context_);
  }
  ~RawCall() {
    if (watch_) watchdog().disarm(*watch_);
  }
  // Cancels the call at `when` unless it ended before (watchdog_fired() tells).
  void watch(Clock::time_point when) { watch_ = watchdog().arm(&context_, when); }
  bool watchdog_fired() {
    if (!watch_) return false;
    fired_ = fired_ || watchdog().disarm(*watch_);
    watch_.reset();
    return fired_;
  }
  bool start(const v1::OptimizeStart& start) {
    v1::OptimizeRequest msg;
    *msg.mutable_start() = start;
    return stream_->Write(msg);
  }
  bool chunk(std::string_view data, const std::string& file = "") {
    v1::OptimizeRequest msg;
    msg.mutable_chunk()->set_data(std::string(data));
    msg.mutable_chunk()->set_file(file);
    return stream_->Write(msg);
  }
  // Sends `bytes` in chunks; false once the stream is closed.
  bool send(std::string_view bytes, const std::string& file = "") {
    for (size_t off = 0; off < bytes.size(); off += kChunkBytes)
      if (!chunk(bytes.substr(off, kChunkBytes), file)) return false;
    return true;
  }
  void writes_done() { stream_->WritesDone(); }
  void cancel() { context_.TryCancel(); }
  // Reads the response to its end (without closing the upload) and returns the call's status.
  grpc::Status finish(std::string* model = nullptr) {
    v1::OptimizeResponse msg;
    while (stream_->Read(&msg))
      if (model && msg.has_chunk() && msg.chunk().file().empty()) *model += msg.chunk().data();
    return stream_->Finish();
  }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::OptimizeRequest, v1::OptimizeResponse>> stream_;
  std::optional<uint64_t> watch_;
  bool fired_ = false;
};

v1::OptimizeStart start_for(const std::string& model, const v1::PipelineConfig& config) {
  v1::OptimizeStart start;
  *start.mutable_config() = config;
  start.set_model_size(model.size());
  return start;
}

// ---------------------------------------------------------------------------------------------
// A child process that uploads part of a model and waits to be killed.

// Child side (graft_soak --upload-and-wait ADDRESS SIZE CHUNKS): announces SIZE bytes, sends
// CHUNKS chunks of 256 KiB (fewer than SIZE needs), writing one byte to fd 3 after each, then
// waits forever.
int upload_and_wait(const std::string& address, uint64_t size, int chunks) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = v1::Graft::NewStub(channel);
  grpc::ClientContext context;
  auto stream = stub->Optimize(&context);
  v1::OptimizeRequest start;
  *start.mutable_start()->mutable_config() = o2();
  start.mutable_start()->set_model_size(size);
  bool open = stream->Write(start);
  const std::string data(256 << 10, 'k');
  for (int i = 0; open && i < chunks; ++i) {
    v1::OptimizeRequest msg;
    msg.mutable_chunk()->set_data(data);
    open = stream->Write(msg);
    if (open && ::write(3, "c", 1) != 1) return 1;
  }
  if (!open) {
    (void)::write(3, "x", 1);  // graftd ended the call already
    return 0;
  }
  for (;;) ::pause();
}

// Parent side: starts the child, waits until it has sent `kill_after` chunks (or stopped), and
// SIGKILLs it. Returns a failure description, or "".
std::string run_killed_child(const Shared& shared, std::mt19937_64& rng) {
  constexpr int kChunks = 16;  // of 256 KiB: a 4 MiB announced model, never completed
  const int kill_after = std::uniform_int_distribution<int>(0, kChunks - 1)(rng);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "pipe2 failed";
  std::vector<std::string> args = {shared.self, "--upload-and-wait", shared.address,
                                   std::to_string(uint64_t{kChunks + 1} * (256 << 10)),
                                   std::to_string(kChunks)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (fds[1] == 3)
      ::fcntl(3, F_SETFD, 0);
    else
      ::dup2(fds[1], 3);
    ::execv(args[0].c_str(), argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return "fork failed";
  }
  int seen = 0;
  const auto until = Clock::now() + 30s;
  while (seen < kill_after && Clock::now() < until) {
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    char c;
    if (::read(fds[0], &c, 1) != 1 || c == 'x') break;
    ++seen;
  }
  // A little more time for the bytes to be on their way, sometimes.
  if (rng() % 2) std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 20));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(fds[0]);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return "could not exec " + shared.self;
  return "";
}

// ---------------------------------------------------------------------------------------------
// One simulated client.

class Client {
 public:
  Client(Shared* shared, uint64_t seed)
      : shared_(shared),
        rng_(seed),
        channel_(graft::bench::own_channel(shared->address, {})),
        client_(channel_),
        stub_(v1::Graft::NewStub(channel_)) {}

  Outcome run(Kind kind) {
    switch (kind) {
      case Kind::kValidReal:
      case Kind::kValidRealVerify:
      case Kind::kValidGenerated:
      case Kind::kValidVerify:
      case Kind::kValidExternal:
      case Kind::kValidBig:
        return valid(pick(shared_->pools.at(kind)));
      case Kind::kBadTruncated: {
        const std::string& m = pick(shared_->real_models);
        // Inside the graph (most of the bytes), so the protobuf cannot parse.
        size_t cut = m.size() / 10 + rng_() % (m.size() * 8 / 10);
        return plain(m.substr(0, cut), o2(), grpc::StatusCode::INVALID_ARGUMENT, "invalid model");
      }
      case Kind::kBadGarbage: {
        std::string g(1 + rng_() % 65536, '\0');
        for (auto& c : g) c = static_cast<char>(rng_());
        g[0] = 0;  // field number 0: never a valid protobuf
        return plain(g, o2(), grpc::StatusCode::INVALID_ARGUMENT, "invalid model");
      }
      case Kind::kBadPass: {
        auto c = o2();
        c.add_passes("no_such_pass_" + std::to_string(rng_() % 100));
        return plain(pick(shared_->real_models), c, grpc::StatusCode::INVALID_ARGUMENT,
                     "valid passes");
      }
      case Kind::kBadConfig:
        return bad_config();
      case Kind::kBadIfCondition:
        return plain(shared_->if_without_condition, verified(), grpc::StatusCode::INVALID_ARGUMENT,
                     "required input 0 ('cond') is missing");
      case Kind::kBadExternalName:
        return bad_external_name();
      case Kind::kBadSizeMismatch: {
        const std::string& m = pick(shared_->real_models);
        RawCall call(stub_.get(), kCallTimeout);
        auto start = start_for(m, o2());
        start.set_model_size(m.size() + 1 + rng_() % 1000);
        call.start(start);
        call.send(m);
        call.writes_done();
        return expect(call.finish(), grpc::StatusCode::INVALID_ARGUMENT, "announced bytes");
      }
      case Kind::kBadSha256: {
        const std::string m = graft::bench::append_doc_string(shared_->slow_model, "sha");
        RawCall call(stub_.get(), kCallTimeout);
        auto start = start_for(m, o2());
        start.set_expected_sha256(std::string(64, "0123456789abcdef"[rng_() % 16]));
        call.start(start);
        call.send(m);
        call.writes_done();
        return expect(call.finish(), grpc::StatusCode::INVALID_ARGUMENT, "sha256 mismatch");
      }
      case Kind::kBadEmpty:
        return plain("", o2(), grpc::StatusCode::INVALID_ARGUMENT, "empty");
      case Kind::kBombLoopScan:
        return loop_scan();
      case Kind::kBombMatmulHint:
        return matmul_hint(1000);
      case Kind::kBombMatmulDeadline:
        return matmul_deadline(1000ms);
      case Kind::kBombStall:
        return stall(false);
      case Kind::kBombStallDeadline:
        return stall(true);
      case Kind::kBombHugeSize:
        return huge_size();
      case Kind::kBombWrapSizes:
        return wrap_sizes();
      case Kind::kCancelUpload:
        return cancel_upload();
      case Kind::kCancelWork:
        return cancel_work();
      case Kind::kKilled: {
        Outcome o{"killed", false};
        o.failure = run_killed_child(*shared_, rng_);
        return o;
      }
      case Kind::kCount:
        break;
    }
    return {"?", true, "unknown kind"};
  }

  Outcome valid(const Template& t) {
    auto r = client_.optimize(t.model, t.config, kCallTimeout, nullptr, kChunkBytes, t.files);
    if (!r.ok()) {
      Outcome o{code_name(static_cast<grpc::StatusCode>(r.status().code()))};
      if (!overload(to_grpc(r.status())))
        o.failure = t.label + ": " + describe(to_grpc(r.status()));
      return o;
    }
    Outcome o{"OK"};
    if (r->model != t.expected.model)
      o.failure = t.label + ": result differs from the local run (" +
                  std::to_string(r->model.size()) + " vs " +
                  std::to_string(t.expected.model.size()) + " bytes)";
    else if (r->report.verification().status() != t.expected.verification)
      o.failure = t.label + ": verification " +
                  v1::Verification::Status_Name(r->report.verification().status()) + ", locally " +
                  v1::Verification::Status_Name(t.expected.verification);
    else if (!r->external_files.empty() || r->kept_files != file_names(t.files))
      o.failure = t.label + ": the result does not keep the input's external files as they are";
    return o;
  }

  Outcome plain(const std::string& model, const v1::PipelineConfig& config, grpc::StatusCode want,
                const std::string& words) {
    auto r = client_.optimize(model, config, kCallTimeout);
    if (r.ok()) return {"OK", true, "expected " + code_name(want) + ", got OK"};
    return expect(to_grpc(r.status()), want, words);
  }

  Outcome bad_config() {
    auto c = o2();
    std::string words;
    switch (rng_() % 7) {
      case 0:
        c.mutable_verify()->set_enabled(true);
        c.mutable_verify()->set_trials(100);
        words = "trials";
        break;
      case 1:
        c.set_max_rounds(-5);
        words = "rounds";
        break;
      case 2:
        c.mutable_verify()->set_enabled(true);
        (*c.mutable_verify()->mutable_values())["x"] = std::nan("");
        words = "'x'";
        break;
      case 3:
        c.mutable_verify()->set_enabled(true);
        (*c.mutable_verify()->mutable_dims())["n"] = -1;
        words = "'n'";
        break;
      case 4:
        c.mutable_verify()->set_enabled(true);
        c.mutable_verify()->set_default_dim(int64_t{1} << 40);
        words = "default dim";
        break;
      case 5:
        // Within the option's range, above the server's grant.
        (*(*c.mutable_pass_options())["fold_constants"].mutable_values())["max_bytes"] = "1GiB";
        words = "verify_max_bytes";
        break;
      default:
        (*(*c.mutable_pass_options())["fold_constants"].mutable_values())["max_bytes"] = "abc";
        words = "option fold_constants.max_bytes must be";
        break;
    }
    return plain(pick(shared_->real_models), c, grpc::StatusCode::INVALID_ARGUMENT, words);
  }

  // Sent raw: the client library refuses such names itself, and the point is graftd's check.
  Outcome bad_external_name() {
    static const char* names[] = {"../w.bin", "/etc/passwd", "a/../../b", "weights/./w.bin"};
    const std::string name = names[rng_() % 4];
    const std::string weights(64, 'w');
    RawCall call(stub_.get(), kCallTimeout);
    auto start = start_for(shared_->external_model, o2());
    auto* f = start.add_external_files();
    f->set_name(name);
    f->set_size(weights.size());
    call.start(start);
    call.send(shared_->external_model);
    call.send(weights, name);
    call.writes_done();
    grpc::Status st = call.finish();
    Outcome o{code_name(st.error_code())};
    if (!overload(st) && st.error_code() != grpc::StatusCode::INVALID_ARGUMENT)
      o.failure = "external file '" + name + "': expected INVALID_ARGUMENT, got " + describe(st);
    return o;
  }

  Outcome loop_scan() {
    auto r = client_.optimize(shared_->loop_scan_bomb, verified(), kCallTimeout);
    if (!r.ok()) {
      Outcome o{code_name(static_cast<grpc::StatusCode>(r.status().code()))};
      if (!overload(to_grpc(r.status()))) o.failure = describe(to_grpc(r.status()));
      return o;
    }
    Outcome o{"OK"};
    if (r->report.verification().status() != v1::Verification::NOT_VERIFIABLE ||
        r->report.verification().message().find("memory budget") == std::string::npos)
      o.failure = "expected NOT_VERIFIABLE (memory budget), got " +
                  v1::Verification::Status_Name(r->report.verification().status()) + ": " +
                  r->report.verification().message();
    else if (r->model != shared_->loop_scan_expected.model)
      o.failure = "result differs from the local run";
    return o;
  }

  // No call deadline, a deadline hint: graftd must end the request itself (DEADLINE_EXCEEDED).
  Outcome matmul_hint(uint64_t hint_ms) {
    const std::string m =
        graft::bench::append_doc_string(shared_->matmul_bomb, shared_->unique("matmul"));
    RawCall call(stub_.get(), std::nullopt);
    call.watch(Clock::now() + std::chrono::milliseconds(hint_ms) + kWatchdogGrace);
    auto start = start_for(m, verified());
    start.set_deadline_hint_ms(hint_ms);
    call.start(start);
    call.send(m);
    call.writes_done();
    grpc::Status st = call.finish();
    if (call.watchdog_fired())
      return {"CANCELLED", false,
              "graftd did not end a request with a deadline hint of " + std::to_string(hint_ms) +
                  " ms within " + std::to_string(kWatchdogGrace.count()) + " s more"};
    Outcome o = expect(st, grpc::StatusCode::DEADLINE_EXCEEDED, "deadline");
    o.digest = graft::cache::sha256_hex(m).substr(0, 12);
    o.deadline_ms = static_cast<double>(hint_ms);
    return o;
  }

  // The client's own deadline ends the call; graftd must stop working on it too.
  Outcome matmul_deadline(std::chrono::milliseconds deadline) {
    const std::string m =
        graft::bench::append_doc_string(shared_->matmul_bomb, shared_->unique("matmul"));
    auto r = client_.optimize(m, verified(), deadline);
    Outcome o{r.ok() ? "OK" : code_name(static_cast<grpc::StatusCode>(r.status().code()))};
    o.digest = graft::cache::sha256_hex(m).substr(0, 12);
    o.deadline_ms = static_cast<double>(deadline.count());
    if (r.ok()) {
      o.failure = "a 6.4e10 multiply-add bomb finished within its deadline";
    } else if (r.status().code() == absl::StatusCode::kDeadlineExceeded) {
      o.answered = false;  // the client's timer (graftd's own answer would look the same)
    } else if (!overload(to_grpc(r.status()))) {
      o.failure = describe(to_grpc(r.status()));
    }
    return o;
  }

  // Announces max_model_bytes and sends nothing or one chunk, then neither data nor the end of
  // the upload. With a deadline the client's timer ends it; without, graftd must end it
  // (default_deadline_seconds) or it would hold an admission slot and a thread forever.
  Outcome stall(bool with_deadline) {
    RawCall call(stub_.get(), with_deadline ? std::optional(1500ms) : std::nullopt);
    if (!with_deadline)
      call.watch(Clock::now() +
                 std::chrono::duration_cast<Clock::duration>(
                     std::chrono::duration<double>(shared_->server.default_deadline_seconds)) +
                 kWatchdogGrace);
    v1::OptimizeStart start;
    *start.mutable_config() = o2();
    start.set_model_size(shared_->server.max_model_bytes);
    call.start(start);
    if (rng_() % 2) call.chunk(std::string(256 << 10, 's'));
    grpc::Status st = call.finish();
    if (call.watchdog_fired())
      return {"CANCELLED", false,
              "graftd did not end a stalled upload without a deadline within "
              "default_deadline_seconds (" +
                  fmt("%g", shared_->server.default_deadline_seconds) + " s) + " +
                  std::to_string(kWatchdogGrace.count()) + " s"};
    Outcome o{code_name(st.error_code())};
    if (with_deadline && st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      o.answered = false;
    } else if (!overload(st) && st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      o.failure = "expected DEADLINE_EXCEEDED, got " + describe(st);
    }
    return o;
  }

  Outcome huge_size() {
    RawCall call(stub_.get(), kCallTimeout);
    v1::OptimizeStart start;
    *start.mutable_config() = o2();
    const bool past_protobuf = rng_() % 2;
    start.set_model_size(past_protobuf ? uint64_t{1} << 62 : 2147483647);
    call.start(start);
    call.chunk(std::string(4096, 'h'));
    call.writes_done();
    grpc::Status st = call.finish();
    return past_protobuf ? expect(st, grpc::StatusCode::INVALID_ARGUMENT, "2 GB limit")
                         : expect(st, grpc::StatusCode::RESOURCE_EXHAUSTED, "max_model_bytes");
  }

  Outcome wrap_sizes() {
    const std::string& m = shared_->external_model;
    const std::vector<std::vector<uint64_t>> cases = {{0 - static_cast<uint64_t>(m.size())},
                                                      {uint64_t{1} << 63, uint64_t{1} << 63},
                                                      {~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}}};
    const auto& sizes = cases[rng_() % cases.size()];
    RawCall call(stub_.get(), kCallTimeout);
    auto start = start_for(m, o2());
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto* f = start.add_external_files();
      f->set_name("w" + std::to_string(i) + ".bin");
      f->set_size(sizes[i]);
    }
    call.start(start);
    if (call.send(m)) call.send(std::string(2 << 20, 'x'), "w0.bin");
    call.writes_done();
    return expect(call.finish(), grpc::StatusCode::RESOURCE_EXHAUSTED, "spool.max_bytes");
  }

  Outcome cancel_upload() {
    const std::string& m = pick(shared_->real_models);
    RawCall call(stub_.get(), kCallTimeout);
    call.start(start_for(m, o2()));
    const size_t part = rng_() % m.size();
    for (size_t off = 0; off < part; off += 64 << 10)
      if (!call.chunk(std::string_view(m).substr(off, std::min<size_t>(64 << 10, part - off))))
        break;
    call.cancel();
    grpc::Status st = call.finish();
    Outcome o{code_name(st.error_code())};
    if (st.error_code() == grpc::StatusCode::CANCELLED)
      o.answered = false;
    else if (!overload(st))
      o.failure = "cancelled mid-upload, yet " + describe(st);
    return o;
  }

  // A model that takes a worker a while; cancelled once uploaded, while graftd works on it.
  Outcome cancel_work() {
    const std::string m =
        graft::bench::append_doc_string(shared_->slow_model, shared_->unique("slow"));
    RawCall call(stub_.get(), kCallTimeout);
    call.start(start_for(m, o2()));
    call.send(m);
    call.writes_done();
    std::this_thread::sleep_for(std::chrono::milliseconds(rng_() % 300));
    call.cancel();
    grpc::Status st = call.finish();
    Outcome o{code_name(st.error_code())};
    if (st.error_code() == grpc::StatusCode::CANCELLED)
      o.answered = false;
    else if (!st.ok() && !overload(st))
      o.failure = "cancelled while optimizing, yet " + describe(st);
    return o;
  }

  std::mt19937_64& rng() { return rng_; }

 private:
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[rng_() % v.size()];
  }

  Shared* shared_;
  std::mt19937_64 rng_;
  std::shared_ptr<grpc::Channel> channel_;
  graft::client::GraftClient client_;
  std::unique_ptr<v1::Graft::Stub> stub_;
};

// ---------------------------------------------------------------------------------------------
// Results.

struct Record {
  Kind kind;
  Outcome outcome;
  double seconds;
};

struct Results {
  std::mutex mu;
  std::vector<Record> records;
  std::vector<std::string> failures;  // "kind: what"

  void add(Kind kind, Outcome o, double seconds) {
    std::lock_guard<std::mutex> lock(mu);
    if (!o.failure.empty()) failures.push_back(std::string(info(kind).name) + ": " + o.failure);
    records.push_back({kind, std::move(o), seconds});
  }
};

uint64_t proc_status_kib(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  return 0;
}

double mib(uint64_t kib) { return static_cast<double>(kib) / 1024.0; }

// graft_requests_total{method="Optimize"} by code, and the gauges, from graftd's /metrics.
struct Scrape {
  bool ok = false;
  std::map<std::string, double> optimize_by_code;
  std::map<std::string, double> values;  // unlabelled samples by name, and NAME{Optimize}
};

Scrape scrape(int port) {
  Scrape s;
  std::string text = graft::bench::http_get(port, "/metrics");
  if (text.empty()) return s;
  s.ok = true;
  std::istringstream in(text);
  std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? ([-+0-9.eE]+|NaN|[+-]Inf)$)");
  std::regex code(R"re(code="([A-Z_]+)")re");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (line.empty() || line[0] == '#' || !std::regex_match(line, m, sample)) continue;
    const double v = std::strtod(m[4].str().c_str(), nullptr);
    const std::string labels = m[3];
    if (m[1] == "graft_requests_total" && labels.find("method=\"Optimize\"") != std::string::npos) {
      std::smatch c;
      if (std::regex_search(labels, c, code)) s.optimize_by_code[c[1]] += v;
    } else if (labels.empty()) {
      s.values[m[1]] = v;
    } else if (labels == "method=\"Optimize\"") {
      s.values[m[1].str() + "{Optimize}"] = v;  // the cache's answers to Optimize calls
    }
  }
  return s;
}

// From graftd's request log (text format): Optimize calls by status, and the duration of the
// calls of given digests.
struct LogSummary {
  std::map<std::string, double> optimize_by_code;
  std::map<std::string, double> duration_ms_by_digest;
};

LogSummary read_request_log(const std::string& log) {
  LogSummary out;
  std::istringstream in(log);
  std::regex status(R"( status=([A-Z_]+))"), digest(R"( digest=([0-9a-f]{12}))"),
      duration(R"( duration_ms=([0-9.]+))");
  for (std::string line; std::getline(in, line);) {
    if (line.find(" method=Optimize") == std::string::npos) continue;
    std::smatch m;
    if (std::regex_search(line, m, status)) out.optimize_by_code[m[1]] += 1;
    std::smatch d, t;
    if (std::regex_search(line, d, digest) && std::regex_search(line, t, duration))
      out.duration_ms_by_digest[d[1]] = std::strtod(t[1].str().c_str(), nullptr);
  }
  return out;
}

struct Options {
  std::string graftd = GRAFTD;
  double seconds = 60;
  int clients = 16;
  int64_t max_requests = 50000;
  double idle_seconds = 10;
  uint64_t rss_slack_mib = 256;
  uint64_t heap_slack_mib = 64;
  uint64_t seed = 1;
  fs::path shared_models = fs::path(GRAFT_SOURCE_DIR) / ".." / "shared" / "models";
};

int usage() {
  std::fprintf(stderr,
               "usage: graft_soak [--seconds S] [--clients N] [--max-requests N] "
               "[--idle-seconds S] [--rss-slack-mib M] [--heap-slack-mib M] [--seed N] "
               "[--graftd PATH] "
               "[--shared-models DIR]\n");
  return 2;
}

std::string codes_cell(const std::map<std::string, int>& codes) {
  std::string out;
  for (const auto& [c, n] : codes) out += (out.empty() ? "" : ", ") + c + " " + std::to_string(n);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--upload-and-wait")
    return upload_and_wait(argv[2], std::strtoull(argv[3], nullptr, 10), std::atoi(argv[4]));
  Options opt;
  if (const char* env = std::getenv("GRAFT_SHARED_MODELS")) opt.shared_models = env;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    std::string v = argv[++i];
    if (a == "--seconds")
      opt.seconds = std::atof(v.c_str());
    else if (a == "--clients")
      opt.clients = std::atoi(v.c_str());
    else if (a == "--max-requests")
      opt.max_requests = std::atoll(v.c_str());
    else if (a == "--idle-seconds")
      opt.idle_seconds = std::atof(v.c_str());
    else if (a == "--rss-slack-mib")
      opt.rss_slack_mib = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--heap-slack-mib")
      opt.heap_slack_mib = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--seed")
      opt.seed = std::strtoull(v.c_str(), nullptr, 10);
    else if (a == "--graftd")
      opt.graftd = v;
    else if (a == "--shared-models")
      opt.shared_models = v;
    else
      return usage();
  }
  if (!(opt.seconds > 0) || opt.clients < 1 || opt.clients > 256 || opt.max_requests < 1 ||
      !(opt.idle_seconds >= 0))
    return usage();
  const auto run_start = Clock::now();
  ::signal(SIGPIPE, SIG_IGN);

  Shared shared;
  shared.server = soak_server_config();
  shared.self = fs::read_symlink("/proc/self/exe").string();
  shared.run_tag = std::to_string(::getpid()) + "." +
                   std::to_string(std::chrono::system_clock::now().time_since_epoch().count());

  // Requests and their expected results, computed in this process before graftd starts.
  std::fprintf(stderr, "graft_soak: building models and their local results ...\n");
  std::mt19937_64 rng(opt.seed);
  int failures_before_run = 0;
  auto add_template = [&](Kind kind, const std::string& label, std::string model,
                          v1::PipelineConfig config, graft::client::ExternalFiles files = {}) {
    auto expected = local_result(shared.server, model, config);
    if (!expected.ok()) {
      std::fprintf(stderr, "graft_soak: local run of %s failed: %s\n", label.c_str(),
                   expected.status().ToString().c_str());
      ++failures_before_run;
      return;
    }
    shared.pools[kind].push_back(
        {label, std::move(model), std::move(config), std::move(files), std::move(*expected)});
  };
  std::vector<fs::path> real_paths = {fs::path(GRAFT_SOURCE_DIR) / "models" /
                                      "ppocr_mobile_v2_cls.onnx"};
  std::error_code ec;
  if (fs::is_directory(opt.shared_models, ec))
    for (const auto& e : fs::directory_iterator(opt.shared_models, ec))
      if (e.path().extension() == ".onnx" && e.path().filename() != real_paths[0].filename())
        real_paths.push_back(e.path());
  for (const auto& path : real_paths) {
    std::string bytes = graft::bench::read_file(path);
    if (bytes.empty()) {
      std::fprintf(stderr, "graft_soak: cannot read %s\n", path.c_str());
      return 1;
    }
    shared.real_models.push_back(bytes);
    // A few variants each, so that some requests hit graftd's cache and some miss.
    for (int v = 0; v < 3; ++v)
      add_template(Kind::kValidReal, path.filename().string() + " #" + std::to_string(v),
                   graft::bench::append_doc_string(bytes, shared.unique("real")), o2());
  }
  {
    auto config = verified();
    for (int64_t d : {1, 3, 48, 192}) (*config.mutable_verify()->mutable_shapes())["x"].add_dims(d);
    for (int v = 0; v < 2; ++v)
      add_template(Kind::kValidRealVerify, "ppocr_mobile_v2_cls verified #" + std::to_string(v),
                   graft::bench::append_doc_string(shared.real_models[0], shared.unique("realv")),
                   config);
  }
  for (int v = 0; v < 12; ++v) {
    int pairs = 10 + static_cast<int>(rng() % 3000);
    add_template(
        Kind::kValidGenerated, "chain of " + std::to_string(pairs) + " pairs",
        graft::bench::append_doc_string(graft::testing::chain_model(pairs), shared.unique("chain")),
        o2());
    int width = 1 + static_cast<int>(rng() % 32);
    add_template(Kind::kValidGenerated, "folding model, width " + std::to_string(width),
                 graft::bench::append_doc_string(folding_model(rng, width), shared.unique("fold")),
                 o2());
  }
  for (int v = 0; v < 8; ++v) {
    int width = 1 + static_cast<int>(rng() % 32);
    auto config = verified();
    (*config.mutable_verify()->mutable_dims())["N"] = 1 + static_cast<int64_t>(rng() % 8);
    config.mutable_verify()->set_seed(1 + static_cast<uint32_t>(rng() % 1000));
    add_template(Kind::kValidVerify, "verified folding model, width " + std::to_string(width),
                 graft::bench::append_doc_string(folding_model(rng, width), shared.unique("vfold")),
                 config);
  }
  shared.external_model = external_data_model(64);
  for (int v = 0; v < 4; ++v) {
    std::string weights(64, '\0');
    for (auto& c : weights) c = static_cast<char>(rng() % 64);  // small finite floats
    add_template(Kind::kValidExternal, "external data #" + std::to_string(v),
                 graft::bench::append_doc_string(shared.external_model, shared.unique("ext")), o2(),
                 {{"weights/w.bin", weights}});
  }
  for (int v = 0; v < 2; ++v)
    add_template(Kind::kValidBig, "12 MiB weight #" + std::to_string(v),
                 graft::bench::append_doc_string(big_model(rng, 1536, 2048), shared.unique("big")),
                 o2());
  shared.if_without_condition = if_without_condition();
  shared.loop_scan_bomb = loop_scan_bomb();
  shared.matmul_bomb = matmul_bomb();
  shared.slow_model = graft::testing::chain_model(30000);
  {
    auto expected = local_result(shared.server, shared.loop_scan_bomb, verified());
    if (!expected.ok() || expected->verification != v1::Verification::NOT_VERIFIABLE) {
      std::fprintf(stderr, "graft_soak: the local run of the Loop bomb is not NOT_VERIFIABLE: %s\n",
                   expected.ok() ? "verified" : expected.status().ToString().c_str());
      return 1;
    }
    shared.loop_scan_expected = std::move(*expected);
  }
  if (failures_before_run > 0) return 1;
  std::fprintf(stderr, "graft_soak: %.1f s of set-up\n", since(run_start));

  graft::bench::Graftd graftd(opt.graftd, graftd_flags(shared.server), {}, "info");
  if (graftd.address().empty()) {
    std::fprintf(stderr, "graft_soak: graftd (%s) did not start or does not answer: %s\n%s\n",
                 opt.graftd.c_str(), graftd.last_error().c_str(), graftd.log().c_str());
    return 1;
  }
  shared.address = graftd.address();
  std::fprintf(stderr, "graft_soak: graftd pid %d serving on %s, metrics on 127.0.0.1:%d\n",
               static_cast<int>(graftd.pid()), shared.address.c_str(), graftd.metrics_port());

  Results results;
  // Warm-up: every valid request once, so the baseline holds what a running graftd holds
  // (threads, allocator arenas, a filled cache) rather than a fresh process.
  {
    Client warm(&shared, opt.seed);
    for (int i = 0; i < static_cast<int>(Kind::kCount); ++i)
      for (const auto& t : shared.pools[static_cast<Kind>(i)]) {
        auto t0 = Clock::now();
        Outcome o = warm.valid(t);
        results.add(static_cast<Kind>(i), std::move(o), since(t0));
      }
  }
  if (!results.failures.empty()) {
    for (const auto& f : results.failures)
      std::fprintf(stderr, "graft_soak: warm-up: %s\n", f.c_str());
    std::fprintf(stderr, "%s\n", graftd.log().c_str());
    return 1;
  }
  const size_t warmup_requests = results.records.size();
  // Idle long enough for graftd to have trimmed its allocator (after a second of idleness).
  std::this_thread::sleep_for(3s);
  const uint64_t baseline_kib = proc_status_kib(graftd.pid(), "VmRSS");
  Scrape baseline_metrics = scrape(graftd.metrics_port());
  const double baseline_heap = baseline_metrics.values["graft_heap_in_use_bytes"];
  std::fprintf(stderr,
               "graft_soak: %zu warm-up requests; baseline RSS %.1f MiB, heap in use %.1f MiB\n",
               warmup_requests, mib(baseline_kib), baseline_heap / 1048576);

  // The soak.
  std::fprintf(stderr, "graft_soak: %d clients for %.0f s (at most %lld requests) ...\n",
               opt.clients, opt.seconds, static_cast<long long>(opt.max_requests));
  std::vector<double> weights;
  for (int i = 0; i < static_cast<int>(Kind::kCount); ++i)
    weights.push_back(info(static_cast<Kind>(i)).weight);
  std::atomic<int64_t> issued{0};
  std::atomic<uint64_t> peak_sampled_kib{0};
  std::atomic<bool> running{true};
  const auto soak_start = Clock::now();
  const auto soak_end = soak_start + std::chrono::duration_cast<Clock::duration>(
                                         std::chrono::duration<double>(opt.seconds));
  std::thread sampler([&] {
    while (running) {
      uint64_t rss = proc_status_kib(graftd.pid(), "VmRSS");
      if (rss > peak_sampled_kib) peak_sampled_kib = rss;
      std::this_thread::sleep_for(100ms);
    }
  });
  std::vector<std::thread> threads;
  for (int c = 0; c < opt.clients; ++c)
    threads.emplace_back([&, c] {
      Client client(&shared, opt.seed * 1000 + static_cast<uint64_t>(c) + 1);
      std::discrete_distribution<int> pick(weights.begin(), weights.end());
      while (Clock::now() < soak_end && issued.fetch_add(1) < opt.max_requests) {
        const Kind kind = static_cast<Kind>(pick(client.rng()));
        auto t0 = Clock::now();
        Outcome o = client.run(kind);
        results.add(kind, std::move(o), since(t0));
      }
    });
  int last_report = 0;
  while (Clock::now() < soak_end && issued < opt.max_requests) {
    std::this_thread::sleep_for(200ms);
    const int elapsed = static_cast<int>(since(soak_start));
    if (elapsed >= last_report + 30) {
      last_report = elapsed;
      std::lock_guard<std::mutex> lock(results.mu);
      std::fprintf(stderr, "graft_soak: %3d s: %zu requests, %zu failures, graftd RSS %.1f MiB\n",
                   elapsed, results.records.size() - warmup_requests, results.failures.size(),
                   mib(proc_status_kib(graftd.pid(), "VmRSS")));
    }
    if (!graftd.running()) break;
  }
  for (auto& t : threads) t.join();
  const double soak_seconds = since(soak_start);
  const size_t soak_requests = results.records.size() - warmup_requests;
  std::fprintf(stderr, "graft_soak: %zu requests in %.1f s\n", soak_requests, soak_seconds);

  // CPU bombs on an idle graftd: how long a worker stays busy past a deadline without queueing
  // in the way.
  std::vector<Record> probes;
  if (graftd.running()) {
    Client probe(&shared, opt.seed + 7);
    for (int i = 0; i < 3; ++i) {
      for (Kind kind : {Kind::kBombMatmulHint, Kind::kBombMatmulDeadline}) {
        auto t0 = Clock::now();
        Outcome o =
            kind == Kind::kBombMatmulHint ? probe.matmul_hint(1000) : probe.matmul_deadline(1000ms);
        // Wait until graftd logged the call, so that probes do not queue behind each other.
        for (auto until = Clock::now() + 60s; Clock::now() < until;) {
          if (o.digest.empty() ||
              read_request_log(graftd.log()).duration_ms_by_digest.count(o.digest))
            break;
          std::this_thread::sleep_for(20ms);
        }
        probes.push_back({kind, o, since(t0)});
        results.add(kind, std::move(o), since(t0));
      }
    }
  }

  // Idle, then the final state.
  running = false;
  sampler.join();
  std::this_thread::sleep_for(std::chrono::duration<double>(opt.idle_seconds));
  std::vector<std::pair<std::string, std::string>> checks;  // (check, failure or "")
  const bool alive = graftd.running();
  checks.push_back(
      {"graftd alive after the run",
       alive ? "" : "graftd exited (wait status " + std::to_string(graftd.wait_status()) + ")"});
  bool serving = false;
  if (alive) {
    auto s = graft::client::GraftClient(graft::bench::own_channel(shared.address, {})).serving();
    serving = s.ok() && *s;
  }
  checks.push_back({"health SERVING", serving ? "" : "health check did not answer SERVING"});

  const uint64_t final_kib = alive ? proc_status_kib(graftd.pid(), "VmRSS") : 0;
  const uint64_t peak_kib = alive ? proc_status_kib(graftd.pid(), "VmHWM") : 0;
  const uint64_t bound_kib =
      baseline_kib + shared.server.cache_bytes / 1024 + opt.rss_slack_mib * 1024;
  if (alive)
    checks.push_back(
        {"RSS after " + fmt("%g", opt.idle_seconds) + " s idle <= baseline + cache_bytes + " +
             std::to_string(opt.rss_slack_mib) + " MiB",
         final_kib <= bound_kib ? ""
                                : "final RSS " + fmt("%.1f", mib(final_kib)) + " MiB > bound " +
                                      fmt("%.1f", mib(bound_kib)) + " MiB"});

  // Metrics. Every Optimize call that reached graftd's handler is counted once, under the code
  // it returned (and logged once with it). Calls whose status the client received from graftd
  // ("answered") are counted under the code the client saw. Calls the client ended itself
  // (cancel, its own deadline, killed) may have reached the handler or not, and graftd counts
  // those under the code it ended them with: CANCELLED or DEADLINE_EXCEEDED, or
  // RESOURCE_EXHAUSTED if it refused them before the client gave up. So:
  //   (a) graftd's log and its metrics agree code by code;
  //   (b) for every other code, graftd's count equals the answered calls with that code;
  //   (c) for those three codes it is at least the answered count;
  //   (d) the surplus over all codes is between 0 and the number of client-ended calls.
  std::map<std::string, double> answered;
  double answered_total = 0, client_ended = 0;
  for (const auto& r : results.records) {
    if (r.outcome.answered) {
      answered[r.outcome.code] += 1;
      answered_total += 1;
    } else {
      client_ended += 1;
    }
  }
  Scrape metrics;
  if (alive) {
    // Calls the client ended may take graftd a moment to notice; wait for them to drain.
    for (auto until = Clock::now() + 30s; Clock::now() < until;) {
      metrics = scrape(graftd.metrics_port());
      if (metrics.ok && metrics.values["graft_inflight_requests"] == 0) break;
      std::this_thread::sleep_for(200ms);
    }
  }
  const std::set<std::string> client_ended_codes = {"CANCELLED", "DEADLINE_EXCEEDED",
                                                    "RESOURCE_EXHAUSTED"};
  std::vector<std::vector<std::string>> metric_rows;
  LogSummary log = read_request_log(graftd.log());
  // The heap graftd still uses: what a leak would grow with the number of requests. The cache
  // may hold up to cache_bytes more than at the baseline; gRPC keeps some buffers and threads
  // for a while after a burst of connections.
  const double final_heap = metrics.values["graft_heap_in_use_bytes"];
  const double heap_bound = baseline_heap + static_cast<double>(shared.server.cache_bytes) +
                            static_cast<double>(opt.heap_slack_mib << 20);
  if (metrics.ok)
    checks.push_back(
        {"heap in use after idle <= baseline + cache_bytes + " +
             std::to_string(opt.heap_slack_mib) + " MiB",
         baseline_heap <= 0 || final_heap <= 0 ? "graft_heap_in_use_bytes missing from /metrics"
         : final_heap <= heap_bound            ? ""
                                    : fmt("%.1f", final_heap / 1048576) + " MiB > bound " +
                                          fmt("%.1f", heap_bound / 1048576) + " MiB"});
  if (!metrics.ok) {
    checks.push_back({"metrics scraped", "no answer from /metrics"});
  } else {
    std::set<std::string> codes;
    for (const auto& [c, n] : metrics.optimize_by_code) codes.insert(c);
    for (const auto& [c, n] : answered) codes.insert(c);
    for (const auto& [c, n] : log.optimize_by_code) codes.insert(c);
    double server_total = 0;
    std::string mismatch_a, mismatch_bc;
    for (const auto& c : codes) {
      const double server = metrics.optimize_by_code[c], client = answered[c],
                   logged = log.optimize_by_code[c];
      server_total += server;
      if (server != logged)
        mismatch_a += " " + c + ": metrics " + fmt("%.0f", server) + ", log " + fmt("%.0f", logged);
      const bool may_exceed = client_ended_codes.count(c) > 0;
      if (may_exceed ? server < client : server != client)
        mismatch_bc +=
            " " + c + ": graftd " + fmt("%.0f", server) + ", answered " + fmt("%.0f", client);
      metric_rows.push_back({c, fmt("%.0f", server), fmt("%.0f", logged), fmt("%.0f", client),
                             may_exceed ? fmt("%+.0f", server - client) : "must be 0"});
    }
    const double surplus = server_total - answered_total;
    metric_rows.push_back(
        {"total", fmt("%.0f", server_total), "", fmt("%.0f", answered_total),
         fmt("%+.0f", surplus) + " of " + fmt("%.0f", client_ended) + " client-ended"});
    checks.push_back({"(a) requests_total{Optimize} equals graftd's request log, code by code",
                      mismatch_a.empty() ? "" : "differ:" + mismatch_a});
    checks.push_back({"(b, c) requests_total{Optimize} by code matches the answered calls",
                      mismatch_bc.empty() ? "" : "differ:" + mismatch_bc});
    checks.push_back({"(d) 0 <= calls counted beyond the answered ones <= client-ended calls",
                      surplus >= 0 && surplus <= client_ended
                          ? ""
                          : fmt("%.0f", surplus) + " with " + fmt("%.0f", client_ended) +
                                " client-ended calls"});
    const double hits = metrics.values["graft_cache_hits_total{Optimize}"],
                 misses = metrics.values["graft_cache_misses_total{Optimize}"];
    checks.push_back({"cache hits + misses{Optimize} = OK calls",
                      hits + misses == metrics.optimize_by_code["OK"]
                          ? ""
                          : fmt("%.0f", hits) + " + " + fmt("%.0f", misses) +
                                " != " + fmt("%.0f", metrics.optimize_by_code["OK"])});
    for (const char* gauge : {"graft_inflight_requests", "graft_queue_depth", "graft_upload_bytes"})
      checks.push_back(
          {std::string(gauge) + " is 0 when idle",
           metrics.values[gauge] == 0 ? "" : "is " + fmt("%.0f", metrics.values[gauge])});
  }

  // Every request kept to its kind's expectations.
  checks.push_back({"every request ended as its kind allows (valid ones with the local bytes)",
                    results.failures.empty() ? ""
                                             : std::to_string(results.failures.size()) +
                                                   " did not, first: " + results.failures.front()});

  const int exit_code = alive ? graftd.stop() : -1;
  if (alive)
    checks.push_back(
        {"graftd exits 0 on SIGTERM", exit_code == 0 ? "" : "exit " + std::to_string(exit_code)});

  // ---- Report.
  std::printf(
      "graft_soak: %d clients, %.0f s (%zu requests after %zu warm-up ones), graftd with "
      "workers %d, queue_length %d, cache_bytes %llu MiB, max_model_bytes %llu MiB, "
      "max_inflight_bytes %llu MiB, verify_max_bytes %llu MiB, verify_max_work %.1e, "
      "default_deadline_seconds %g\n\n",
      opt.clients, soak_seconds, soak_requests, warmup_requests, shared.server.workers,
      shared.server.queue_length, static_cast<unsigned long long>(shared.server.cache_bytes >> 20),
      static_cast<unsigned long long>(shared.server.max_model_bytes >> 20),
      static_cast<unsigned long long>(shared.server.max_inflight_bytes >> 20),
      static_cast<unsigned long long>(shared.server.verify_max_bytes >> 20),
      static_cast<double>(shared.server.verify_max_work), shared.server.default_deadline_seconds);
  std::vector<std::vector<std::string>> rows;
  for (int i = 0; i < static_cast<int>(Kind::kCount); ++i) {
    const Kind kind = static_cast<Kind>(i);
    std::map<std::string, int> codes;
    std::vector<double> latencies;
    int count = 0, failed = 0, ended = 0;
    for (const auto& r : results.records) {
      if (r.kind != kind) continue;
      ++count;
      codes[r.outcome.code]++;
      latencies.push_back(r.seconds);
      failed += !r.outcome.failure.empty();
      ended += !r.outcome.answered;
    }
    rows.push_back({info(kind).name, std::to_string(count), codes_cell(codes),
                    std::to_string(ended), fmt("%.1f", percentile(latencies, 0.5) * 1e3),
                    fmt("%.1f", percentile(latencies, 0.99) * 1e3), std::to_string(failed)});
  }
  std::printf(
      "Requests by kind (warm-up and the final probes included; codes as the client saw "
      "them; client-ended = cancelled, timed out or killed by the client):\n\n");
  graft::bench::print_table(
      {"kind", "requests", "codes", "client-ended", "p50 ms", "p99 ms", "failed"}, rows);

  std::printf("\ngraft_requests_total{method=\"Optimize\"} against the clients' view:\n\n");
  graft::bench::print_table(
      {"code", "graftd metrics", "graftd log", "answered (client)", "graftd - answered"},
      metric_rows);

  // How long past their deadline CPU bombs kept graftd working (the request's log duration
  // minus its deadline: the handler returns only once the worker has stopped).
  auto overrun = [&](const std::vector<Record>& records, Kind kind) {
    std::vector<double> v;
    for (const auto& r : records) {
      if (r.kind != kind || r.outcome.digest.empty()) continue;
      auto it = log.duration_ms_by_digest.find(r.outcome.digest);
      if (it != log.duration_ms_by_digest.end()) v.push_back(it->second - r.outcome.deadline_ms);
    }
    return v;
  };
  std::printf(
      "\nCPU bombs (6.4e10 multiply-adds under verification): graftd's time on the "
      "request past its deadline, from its request log:\n\n");
  rows.clear();
  for (Kind kind : {Kind::kBombMatmulHint, Kind::kBombMatmulDeadline}) {
    std::vector<Record> during(results.records.begin(),
                               results.records.end() - static_cast<long>(probes.size()));
    for (const auto& [label, set] :
         {std::pair{"during the soak (includes waiting for a worker)", during},
          std::pair{"idle graftd, one at a time", probes}}) {
      auto v = overrun(set, kind);
      rows.push_back({info(kind).name, label, std::to_string(v.size()),
                      fmt("%.0f", percentile(v, 0.5)), fmt("%.0f", percentile(v, 0.99)),
                      v.empty() ? "-" : fmt("%.0f", *std::max_element(v.begin(), v.end()))});
    }
  }
  graft::bench::print_table(
      {"kind", "when", "requests", "p50 ms past", "p99 ms past", "max ms past"}, rows);

  std::printf(
      "\ngraftd RSS: baseline %.1f MiB (after warm-up), peak %.1f MiB (VmHWM; sampled peak "
      "%.1f MiB), final %.1f MiB after %g s idle; bound baseline + cache_bytes + %llu MiB = "
      "%.1f MiB.\n",
      mib(baseline_kib), mib(peak_kib), mib(peak_sampled_kib), mib(final_kib), opt.idle_seconds,
      static_cast<unsigned long long>(opt.rss_slack_mib), mib(bound_kib));
  std::printf(
      "graftd heap in use (graft_heap_in_use_bytes): baseline %.1f MiB, final %.1f MiB (the "
      "cache %.1f MiB of it); free in the allocator's arenas (resident or trimmed): %.1f MiB; "
      "bound baseline + "
      "cache_bytes + %llu MiB = %.1f MiB.\n",
      baseline_heap / 1048576, final_heap / 1048576, metrics.values["graft_cache_bytes"] / 1048576,
      metrics.values["graft_heap_free_bytes"] / 1048576,
      static_cast<unsigned long long>(opt.heap_slack_mib), heap_bound / 1048576);

  std::printf("\nChecks:\n");
  int failed_checks = 0;
  for (const auto& [check, failure] : checks) {
    failed_checks += !failure.empty();
    std::printf("  %s  %s%s\n", failure.empty() ? "PASS" : "FAIL", check.c_str(),
                failure.empty() ? "" : (": " + failure).c_str());
  }
  if (!results.failures.empty()) {
    std::printf("\nFailed requests (first 20 of %zu):\n", results.failures.size());
    for (size_t i = 0; i < results.failures.size() && i < 20; ++i)
      std::printf("  %s\n", results.failures[i].c_str());
  }
  std::printf("\nTotal %.0f s. %s\n", since(run_start),
              failed_checks == 0 ? "All checks passed." : "SOME CHECKS FAILED.");
  return failed_checks == 0 ? 0 : 1;
}
