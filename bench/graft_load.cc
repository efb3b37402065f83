// Load generator for graftd: starts its own graftd on loopback and measures, with 1..16
// concurrent clients (one thread and one connection each), requests/s and p50/p99 latency of
//   miss  requests that each send a distinct model (the example CNN with a distinct doc_string),
//         so every one runs the O2 pipeline on a worker;
//   hit   requests that send the same model again after one warm-up, served from the cache;
//   echo  a plain gRPC transfer of the same bytes (hit upload size up, hit download size down)
//         against an echo service inside this process: the floor under a hit, which moves the
//         same bytes and adds only hashing, a cache lookup and the report.
// Prints one table of all cells and the ratio hit latency / echo latency per concurrency to
// stdout, progress to stderr; exits 1 if any request failed or returned a wrong result.
//
//   graft_load            full run (about a minute on 2 cores)
//   graft_load --quick    a few requests per cell, for the CTest smoke test (seconds)
//
// Over TLS (both graftd and the echo floor serve it, so the ratio compares like with like):
//   graft_load --tls-cert-file S.pem --tls-key-file S.key --ca CA.pem
// and mTLS: add --tls-client-ca-file CA.pem --cert C.pem --key C.key. The client flags are the
// CLI's (--tls, --ca, --cert, --key, --server-name); the server flags are graftd's. A TLS file
// that cannot be read is exit 4, one that is not usable PEM exit 2 (as the CLI).
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <absl/status/status.h>
#include <grpcpp/grpcpp.h>
#include <onnx/onnx_pb.h>

#include "bench/bench_util.h"
#include "client/graft_client.h"
#include "common/tls.h"
#include "core/cache/digest.h"
#include "core/ir/model.h"
#include "core/paths/files.h"
#include "core/pipeline/pipeline.h"
#include "echo.grpc.pb.h"  // generated from bench/echo.proto

namespace {

using graft::bench::Clock;
using graft::bench::fmt;
using graft::bench::Graftd;
using graft::bench::mean;
using graft::bench::own_channel;
using graft::bench::percentile;
using graft::bench::print_table;
using graft::bench::read_file;
using graft::bench::since;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

constexpr size_t kChunkBytes = 1 << 20;  // what graftd and GraftClient use
constexpr auto kRequestTimeout = 60s;    // per request, so a stuck call cannot hang the run

// ---------------------------------------------------------------------------------------------
// The echo floor, served in this process.

class EchoService final : public graft::bench::Echo::Service {
 public:
  grpc::Status Echo(grpc::ServerContext*,
                    grpc::ServerReaderWriter<graft::bench::EchoResponse, graft::bench::EchoRequest>*
                        stream) override {
    graft::bench::EchoRequest msg;
    if (!stream->Read(&msg) || !msg.has_start())
      return {grpc::StatusCode::INVALID_ARGUMENT, "the first message must be EchoStart"};
    const uint64_t payload_bytes = msg.start().payload_bytes();
    const uint64_t reply_bytes = msg.start().reply_bytes();
    // Received like graftd receives a model: reserved once, appended chunk by chunk.
    std::string received;
    received.reserve(payload_bytes);
    while (stream->Read(&msg)) {
      if (msg.kind_case() != graft::bench::EchoRequest::kChunk)
        return {grpc::StatusCode::INVALID_ARGUMENT, "only chunks may follow EchoStart"};
      received += msg.chunk();
    }
    if (received.size() != payload_bytes)
      return {grpc::StatusCode::INVALID_ARGUMENT, "payload size mismatch"};
    if (received.empty() && reply_bytes > 0)
      return {grpc::StatusCode::INVALID_ARGUMENT, "nothing to echo"};
    for (uint64_t off = 0; off < reply_bytes; off += kChunkBytes) {
      graft::bench::EchoResponse reply;
      std::string* data = reply.mutable_chunk();
      const uint64_t n = std::min<uint64_t>(kChunkBytes, reply_bytes - off);
      data->reserve(n);
      for (uint64_t pos = off; data->size() < n;) {
        uint64_t from = pos % received.size();
        uint64_t take = std::min<uint64_t>(n - data->size(), received.size() - from);
        data->append(received, from, take);
        pos += take;
      }
      if (!stream->Write(reply)) return {grpc::StatusCode::CANCELLED, "client stopped reading"};
    }
    return grpc::Status::OK;
  }
};

// What the reply of an echo of `payload` is expected to be.
std::string echo_reply(const std::string& payload, uint64_t reply_bytes) {
  std::string out;
  while (out.size() < reply_bytes)
    out.append(payload, 0, std::min<uint64_t>(payload.size(), reply_bytes - out.size()));
  return out;
}

// Client side, written like GraftClient::optimize so both sides copy the same way.
absl::Status echo_call(graft::bench::Echo::Stub* stub, const std::string& payload,
                       uint64_t reply_bytes, std::string* reply) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRequestTimeout);
  auto stream = stub->Echo(&context);
  graft::bench::EchoRequest start;
  start.mutable_start()->set_payload_bytes(payload.size());
  start.mutable_start()->set_reply_bytes(reply_bytes);
  bool open = stream->Write(start);
  std::string_view bytes(payload);
  for (size_t off = 0; open && off < bytes.size(); off += kChunkBytes) {
    graft::bench::EchoRequest chunk;
    chunk.set_chunk(std::string(bytes.substr(off, kChunkBytes)));
    open = stream->Write(chunk);
  }
  stream->WritesDone();
  reply->clear();
  graft::bench::EchoResponse msg;
  while (stream->Read(&msg)) *reply += msg.chunk();
  return graft::client::from_grpc(stream->Finish());
}

// ---------------------------------------------------------------------------------------------
// Models.

// The example model serialized without a doc_string; distinct models are made by appending a
// doc_string field (ModelProto field 6) to these bytes: protobuf takes the last occurrence of a
// singular field, so this equals setting doc_string, without re-serializing 0.6 MB per request.
struct ModelSource {
  std::string base;

  static std::optional<ModelSource> load(const fs::path& path, std::string* error) {
    std::string bytes = read_file(path);
    onnx::ModelProto proto;
    if (bytes.empty() || !proto.ParseFromString(bytes)) {
      *error = "cannot read the ONNX model " + path.string();
      return std::nullopt;
    }
    proto.clear_doc_string();
    ModelSource source{proto.SerializeAsString()};
    // Check the trick once with a real parser.
    onnx::ModelProto check;
    if (!check.ParseFromString(source.with_doc("graft_load check")) ||
        check.doc_string() != "graft_load check") {
      *error = "appending a doc_string field did not produce the expected model";
      return std::nullopt;
    }
    return source;
  }

  std::string with_doc(const std::string& doc) const {
    return graft::bench::append_doc_string(base, doc);
  }
};

// ---------------------------------------------------------------------------------------------
// Cells: one kind of request at one concurrency.

// kLookup: a hit found by Lookup before any upload (GraftClient's lookup_first); kEchoDown: its
// floor, the result's bytes downloaded over plain gRPC with nothing but a digest sent up.
enum class Kind { kMiss, kHit, kEcho, kLookup, kEchoDown };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kMiss:
      return "miss";
    case Kind::kHit:
      return "hit";
    case Kind::kEcho:
      return "echo";
    case Kind::kLookup:
      return "lookup";
    case Kind::kEchoDown:
      return "echo down";
  }
  return "?";
}

struct Shared {
  std::string graftd_address;
  std::string echo_address;
  graft::tls::ClientOptions tls;  // for both
  graft::v1::PipelineConfig config;
  const ModelSource* models = nullptr;
  std::string run_tag;                 // makes miss digests unique to this run
  std::atomic<uint64_t> next_miss{0};  // over the whole run, so miss digests never repeat
  // The hit cell's model and its expected result (set by its warm-up).
  std::string hit_model;
  std::string hit_result;
};

struct CellResult {
  Kind kind;
  int clients = 0;
  std::vector<double> latencies;  // seconds, successful requests only
  std::vector<double> queue;      // server-side queue seconds (misses)
  std::vector<double> work;       // worker load + pipeline + save seconds (misses)
  int errors = 0;
  std::string first_error;
  double wall = 0;
  bool capped = false;  // the time cap ended the cell before every request was sent
};

// One simulated client's requests: the request is built before the clock starts and checked
// after it stops, so only the call itself is timed.
class Requester {
 public:
  Requester(Kind kind, Shared* shared) : kind_(kind), shared_(shared) {
    if (kind == Kind::kEcho || kind == Kind::kEchoDown) {
      channel_ = own_channel(shared->echo_address, shared->tls);
      echo_ = graft::bench::Echo::NewStub(channel_);
      echo_payload_ =
          kind == Kind::kEcho ? shared->hit_model : graft::cache::sha256_hex(shared->hit_model);
      expected_echo_ = echo_reply(echo_payload_, shared->hit_result.size());
    } else {
      channel_ = own_channel(shared->graftd_address, shared->tls);
      graft_ = std::make_unique<graft::client::GraftClient>(channel_);
    }
  }
  bool connect() { return channel_->WaitForConnected(std::chrono::system_clock::now() + 10s); }

  void prepare() {
    if (kind_ == Kind::kMiss)
      model_ = shared_->models->with_doc("graft_load " + shared_->run_tag + " miss " +
                                         std::to_string(shared_->next_miss++));
  }

  absl::Status call() {
    if (kind_ == Kind::kEcho || kind_ == Kind::kEchoDown)
      return echo_call(echo_.get(), echo_payload_, shared_->hit_result.size(), &reply_);
    const std::string& model = kind_ == Kind::kMiss ? model_ : shared_->hit_model;
    graft::client::SendOptions send;
    send.deadline = graft::client::deadline_in(kRequestTimeout);
    send.lookup_first = kind_ == Kind::kLookup;
    auto result = graft_->optimize(model, shared_->config, send);
    if (!result.ok()) return result.status();
    result_ = std::move(*result);
    return absl::OkStatus();
  }

  // Checks the answer; on success adds the server-side timings of a miss to `cell`.
  absl::Status check(CellResult* cell) {
    switch (kind_) {
      case Kind::kEcho:
      case Kind::kEchoDown:
        if (reply_ != expected_echo_) return absl::DataLossError("echo reply differs");
        return absl::OkStatus();
      case Kind::kLookup:
        if (!result_.from_lookup || result_.bytes_sent != 0)
          return absl::InternalError("expected a lookup hit without an upload");
        [[fallthrough]];
      case Kind::kHit:
        if (!result_.report.cache_hit()) return absl::InternalError("expected a cache hit");
        if (result_.model != shared_->hit_result)
          return absl::DataLossError("cache hit returned different bytes");
        return absl::OkStatus();
      case Kind::kMiss: {
        const auto& r = result_.report;
        if (r.cache_hit()) return absl::InternalError("expected a cache miss");
        if (r.input_bytes() != model_.size() || result_.model.empty())
          return absl::DataLossError("miss: wrong sizes in the report");
        cell->queue.push_back(r.queue_seconds());
        cell->work.push_back(r.load_seconds() + r.pipeline_seconds() + r.save_seconds());
        return absl::OkStatus();
      }
    }
    return absl::OkStatus();
  }

 private:
  Kind kind_;
  Shared* shared_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<graft::client::GraftClient> graft_;
  std::unique_ptr<graft::bench::Echo::Stub> echo_;
  std::string model_;
  std::string echo_payload_;
  std::string expected_echo_;
  std::string reply_;
  graft::client::OptimizeResult result_;
};

CellResult run_cell(Kind kind, int clients, int total_requests, double cap_seconds,
                    Shared* shared) {
  CellResult cell;
  cell.kind = kind;
  cell.clients = clients;
  const int per_client = std::max(1, (total_requests + clients - 1) / clients);
  std::mutex mu;  // guards cell
  std::atomic<bool> stop{false};
  std::atomic<int> finished{0};
  std::vector<Clock::time_point> done_at(clients);
  std::latch ready(clients + 1);
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      Requester requester(kind, shared);
      bool connected = requester.connect();
      ready.arrive_and_wait();
      if (!connected) {
        std::lock_guard lock(mu);
        ++cell.errors;
        if (cell.first_error.empty()) cell.first_error = "could not connect";
      }
      CellResult mine;  // merged into `cell` at the end, so clients do not contend on `mu`
      for (int i = 0; connected && i < per_client && !stop; ++i) {
        requester.prepare();
        auto t = Clock::now();
        absl::Status st = requester.call();
        double seconds = since(t);
        if (st.ok()) st = requester.check(&mine);
        if (st.ok()) {
          mine.latencies.push_back(seconds);
        } else {
          ++mine.errors;
          if (mine.first_error.empty()) mine.first_error = st.ToString();
        }
      }
      done_at[c] = Clock::now();
      std::lock_guard lock(mu);
      for (auto [from, to] :
           {std::pair{&mine.latencies, &cell.latencies}, std::pair{&mine.queue, &cell.queue},
            std::pair{&mine.work, &cell.work}})
        to->insert(to->end(), from->begin(), from->end());
      cell.errors += mine.errors;
      if (cell.first_error.empty()) cell.first_error = mine.first_error;
      ++finished;
    });
  }
  ready.arrive_and_wait();
  const auto start = Clock::now();
  while (finished < clients) {
    if (!stop && since(start) > cap_seconds) {
      stop = true;
      cell.capped = true;
    }
    std::this_thread::sleep_for(5ms);
  }
  for (auto& t : threads) t.join();
  cell.wall =
      std::chrono::duration<double>(*std::max_element(done_at.begin(), done_at.end()) - start)
          .count();
  return cell;
}

// ---------------------------------------------------------------------------------------------
// Output.

struct Options {
  bool quick = false;
  std::string graftd = GRAFTD;
  fs::path model = fs::path(GRAFT_SOURCE_DIR) / "models" / "ppocr_mobile_v2_cls.onnx";
  std::vector<int> clients = {1, 2, 4, 16};
  std::string workers;      // passed to graftd when set
  double cap_seconds = 12;  // per cell, all rounds together
  int rounds = 3;
  int miss_requests = 900;
  int hit_requests = 3000;
  int echo_requests = 3000;
  graft::tls::ClientOptions tls;                                // the clients' side
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;  // graftd's and the echo's side
  fs::path cli_model;  // --cli: end-to-end rows of the real CLI on this model
  int cli_reps = 5;
};

// ---------------------------------------------------------------------------------------------
// End to end: the real `graft` CLI process against floors measured in the same run, the rows
// taking turns within each repetition so drift hits all alike. Outputs go to a scratch folder
// in memory (/dev/shm when there is one) so the disk's speed is in neither side:
//   local         graft optimize --local   vs. read + load + O2 + save + write in this process
//   remote miss   a model new to graftd    vs. that floor + echo (model up, result down)
//   remote hit    found by Lookup          vs. echo down (digest up, result down)
//   hit, no lookup  --no-lookup            vs. echo (model up, result down)

// Runs the CLI with `args`; its wall time in seconds, or a negative number if it failed.
double run_cli(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string cli = GRAFT_CLI;
  argv.push_back(cli.data());
  std::vector<std::string> copy = args;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  auto t = Clock::now();
  pid_t pid = 0;
  if (posix_spawn(&pid, cli.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  double seconds = since(t);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? seconds : -1;
}

bool cli_rows(const Options& opt, const Shared& shared, std::string* error) {
  if (opt.tls.on()) {
    std::printf("\nEnd to end: skipped (plaintext only).\n");
    return true;
  }
  const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
  const fs::path dir = base / ("graft_load_cli_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{dir};
  auto model = graft::paths::read_file(opt.cli_model.string());
  if (!model.ok()) {
    *error = std::string(model.status().message());
    return false;
  }
  auto echo_channel = own_channel(shared.echo_address, shared.tls);
  auto echo = graft::bench::Echo::NewStub(echo_channel);
  const std::string path = opt.cli_model.string(), server = shared.graftd_address;
  const std::string digest = graft::cache::sha256_hex(*model);
  auto out = [&](const std::string& name) { return (dir / name).string(); };

  // The floor of a local run, on the same file.
  auto floor_local = [&]() -> double {
    auto t = Clock::now();
    auto bytes = graft::paths::read_file(path);
    if (!bytes.ok()) return -1;
    auto m = graft::ir::Model::parse(*bytes);
    if (!m.ok()) return -1;
    std::string().swap(*bytes);
    if (!graft::run_pipeline(*m, graft::PipelineConfig{}).ok()) return -1;
    auto saved = (*m)->serialize_and_release();
    if (!saved.ok() || !graft::paths::write_file_atomic(out("floor.onnx"), *saved).ok()) return -1;
    return since(t);
  };
  // Caches the model in graftd (and gives the result's size for the echo floors).
  if (run_cli({"optimize", "-q", "--server", server, path, "-o", out("warm.onnx")}) < 0) {
    *error = "the CLI failed on " + path;
    return false;
  }
  const uint64_t result_bytes = fs::file_size(out("warm.onnx"));
  std::string reply;
  auto echo_time = [&](const std::string& up) -> double {
    auto t = Clock::now();
    if (!echo_call(echo.get(), up, result_bytes, &reply).ok()) return -1;
    return since(t);
  };
  // What a download that is checked and kept must add: the reply's sha256 and its file.
  auto keep_time = [&]() -> double {
    auto t = Clock::now();
    if (graft::cache::sha256_hex(reply).empty()) return -1;
    if (!graft::paths::write_file_atomic(out("kept.onnx"), reply).ok()) return -1;
    return since(t);
  };
  std::fprintf(stderr, "graft_load: end to end on %s, %d repetitions ...\n",
               opt.cli_model.filename().c_str(), opt.cli_reps);
  enum { kLocal, kMiss, kHit, kHitKept, kHitUpload, kRows };
  std::vector<double> cli[kRows], floor[kRows];
  for (int rep = 0; rep < opt.cli_reps; ++rep) {
    // A model graftd has not seen: the same bytes with a doc_string of this repetition.
    const std::string fresh = out("miss.onnx");
    if (!graft::paths::write_file_atomic(
             fresh, graft::bench::append_doc_string(
                        *model, "graft_load cli " + shared.run_tag + " " + std::to_string(rep)))
             .ok()) {
      *error = "cannot write " + fresh;
      return false;
    }
    const double f_local = floor_local();
    const double f_up_down = echo_time(*model);
    const double f_down = echo_time(digest);
    const double f_keep = keep_time();
    const double c_local = run_cli({"optimize", "-q", "--local", path, "-o", out("local.onnx")});
    const double c_miss =
        run_cli({"optimize", "-q", "--server", server, fresh, "-o", out("m.onnx")});
    const double c_hit =
        run_cli({"optimize", "-q", "--server", server, path, "-o", out("hit.onnx")});
    const double c_up =
        run_cli({"optimize", "-q", "--no-lookup", "--server", server, path, "-o", out("up.onnx")});
    for (double x : {f_local, f_up_down, f_down, f_keep, c_local, c_miss, c_hit, c_up})
      if (x < 0) {
        *error = "a run failed (CLI or floor)";
        return false;
      }
    cli[kLocal].push_back(c_local);
    floor[kLocal].push_back(f_local);
    cli[kMiss].push_back(c_miss);
    floor[kMiss].push_back(f_local + f_up_down);
    cli[kHit].push_back(c_hit);
    floor[kHit].push_back(f_down);
    cli[kHitKept].push_back(c_hit);
    floor[kHitKept].push_back(f_down + f_keep);
    cli[kHitUpload].push_back(c_up);
    floor[kHitUpload].push_back(f_up_down);
  }
  const std::string local = read_file(out("local.onnx"));
  if (local != read_file(out("hit.onnx")) || local != read_file(out("up.onnx"))) {
    *error = "the remote results differ from the local one";
    return false;
  }
  std::printf(
      "\nEnd to end: the real CLI process on %s (%.1f MiB in, %.1f MiB out), outputs in %s, "
      "medians of %d\ninterleaved repetitions; ratio = median of CLI / floor per repetition.\n\n",
      opt.cli_model.filename().c_str(), model->size() / 1048576.0, result_bytes / 1048576.0,
      base.c_str(), opt.cli_reps);
  const char* names[kRows] = {"local", "remote miss", "remote hit (lookup)", "remote hit (lookup)",
                              "remote hit (--no-lookup)"};
  const char* floors[kRows] = {"read + load + O2 + save + write", "that + echo up and down",
                               "echo down (digest up)", "that + sha256 + write",
                               "echo up and down"};
  std::vector<std::vector<std::string>> rows;
  for (int r = 0; r < kRows; ++r) {
    std::vector<double> ratios;
    for (size_t i = 0; i < cli[r].size(); ++i) ratios.push_back(cli[r][i] / floor[r][i]);
    rows.push_back({names[r], fmt("%.1f", percentile(cli[r], 0.5) * 1e3), floors[r],
                    fmt("%.1f", percentile(floor[r], 0.5) * 1e3),
                    fmt("%.2f", percentile(ratios, 0.5))});
  }
  print_table({"CLI run", "CLI ms", "floor", "floor ms", "ratio"}, rows);
  return true;
}

int usage() {
  std::fprintf(stderr,
               "usage: graft_load [--quick] [--graftd PATH] [--model FILE.onnx] "
               "[--clients 1,2,4,16] [--workers N] [--seconds CAP_PER_CELL]\n"
               "                  [--cli MODEL.onnx [--cli-reps N]]\n"
               "                  [--tls-cert-file PEM --tls-key-file PEM "
               "[--tls-client-ca-file PEM]]\n"
               "                  [--tls] [--ca PEM] [--cert PEM --key PEM] "
               "[--server-name NAME]\n");
  return 2;
}

// Exit code for a TLS file problem, as the CLI's: 4 unreadable, 2 not usable.
int tls_file_error(const absl::Status& st) {
  std::fprintf(stderr, "graft_load: %s\n", std::string(st.message()).c_str());
  return st.code() == absl::StatusCode::kNotFound ||
                 st.code() == absl::StatusCode::kPermissionDenied
             ? 4
             : 2;
}

// The echo floor's credentials: graftd's files, so both ends of the ratio pay for the same TLS.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> echo_credentials(const Options& opt) {
  if (opt.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  auto chain = graft::tls::read_certificates(opt.tls_cert_file, "--tls-cert-file");
  if (!chain.ok()) return chain.status();
  auto key = graft::tls::read_private_key(opt.tls_key_file, "--tls-key-file");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *chain});
  if (!opt.tls_client_ca_file.empty()) {
    auto roots = graft::tls::read_certificates(opt.tls_client_ca_file, "--tls-client-ca-file");
    if (!roots.ok()) return roots.status();
    ssl.pem_root_certs = *roots;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool has_value = i + 1 < argc;
    if (a == "--quick") {
      opt.quick = true;
    } else if (a == "--graftd" && has_value) {
      opt.graftd = argv[++i];
    } else if (a == "--cli" && has_value) {
      opt.cli_model = argv[++i];
    } else if (a == "--cli-reps" && has_value) {
      opt.cli_reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--model" && has_value) {
      opt.model = argv[++i];
    } else if (a == "--workers" && has_value) {
      opt.workers = argv[++i];
    } else if (a == "--tls") {
      opt.tls.enabled = true;
    } else if (a == "--ca" && has_value) {
      opt.tls.ca_file = argv[++i];
    } else if (a == "--cert" && has_value) {
      opt.tls.cert_file = argv[++i];
    } else if (a == "--key" && has_value) {
      opt.tls.key_file = argv[++i];
    } else if (a == "--server-name" && has_value) {
      opt.tls.server_name = argv[++i];
    } else if (a == "--tls-cert-file" && has_value) {
      opt.tls_cert_file = argv[++i];
    } else if (a == "--tls-key-file" && has_value) {
      opt.tls_key_file = argv[++i];
    } else if (a == "--tls-client-ca-file" && has_value) {
      opt.tls_client_ca_file = argv[++i];
    } else if (a == "--seconds" && has_value) {
      opt.cap_seconds = std::atof(argv[++i]);
    } else if (a == "--clients" && has_value) {
      opt.clients.clear();
      std::stringstream list(argv[++i]);
      for (std::string n; std::getline(list, n, ',');) {
        int c = std::atoi(n.c_str());
        if (c < 1 || c > 256) return usage();
        opt.clients.push_back(c);
      }
    } else {
      return usage();
    }
  }
  if (opt.quick) {
    opt.cap_seconds = std::min(opt.cap_seconds, 2.0);
    opt.rounds = 1;
    opt.miss_requests = 16;
    opt.hit_requests = 32;
    opt.echo_requests = 32;
  }
  // graft_load starts the server, so client TLS needs the server's files and the other way round.
  const bool server_tls = !opt.tls_cert_file.empty() || !opt.tls_key_file.empty();
  if (server_tls != opt.tls.on() ||
      (server_tls && (opt.tls_cert_file.empty() || opt.tls_key_file.empty())) ||
      (!opt.tls_client_ca_file.empty() && opt.tls.cert_file.empty())) {
    std::fprintf(stderr,
                 "graft_load: TLS needs both sides: --tls-cert-file and --tls-key-file for the "
                 "servers it starts, --tls or --ca for its clients; --tls-client-ca-file also "
                 "needs --cert and --key\n");
    return usage();
  }
  if (auto probe = graft::tls::make_channel("127.0.0.1:9", opt.tls); !probe.ok())
    return tls_file_error(probe.status());
  auto echo_creds = echo_credentials(opt);
  if (!echo_creds.ok()) return tls_file_error(echo_creds.status());
  const auto run_start = Clock::now();

  std::string error;
  auto models = ModelSource::load(opt.model, &error);
  if (!models) {
    std::fprintf(stderr, "graft_load: %s\n", error.c_str());
    return 1;
  }

  std::vector<std::string> graftd_args;
  if (!opt.workers.empty()) graftd_args = {"--workers", opt.workers};
  if (server_tls) {
    for (const std::string& a : {std::string("--tls-cert-file"), opt.tls_cert_file,
                                 std::string("--tls-key-file"), opt.tls_key_file})
      graftd_args.push_back(a);
  }
  if (!opt.tls_client_ca_file.empty()) {
    for (const std::string& a : {std::string("--tls-client-ca-file"), opt.tls_client_ca_file,
                                 std::string("--tls-client-auth"), std::string("require")})
      graftd_args.push_back(a);
  }
  Graftd graftd(opt.graftd, graftd_args, opt.tls);
  if (graftd.address().empty()) {
    std::fprintf(stderr, "graft_load: graftd (%s) did not start or does not answer: %s\n%s\n",
                 opt.graftd.c_str(), graftd.last_error().c_str(), graftd.log().c_str());
    return 1;
  }

  std::fprintf(stderr, "graft_load: graftd serving on %s after %.1f s\n", graftd.address().c_str(),
               since(run_start));
  EchoService echo_service;
  grpc::ServerBuilder builder;
  int echo_port = 0;
  builder.AddListeningPort("127.0.0.1:0", *echo_creds, &echo_port);
  builder.RegisterService(&echo_service);
  builder.SetMaxReceiveMessageSize(8 << 20);  // as graftd
  builder.SetMaxSendMessageSize(8 << 20);
  std::unique_ptr<grpc::Server> echo_server = builder.BuildAndStart();
  if (!echo_server || echo_port == 0) {
    std::fprintf(stderr, "graft_load: cannot start the echo server\n");
    return 1;
  }

  Shared shared;
  shared.tls = opt.tls;
  shared.graftd_address = graftd.address();
  shared.echo_address = "127.0.0.1:" + std::to_string(echo_port);
  shared.config.set_level("O2");
  shared.models = &*models;
  shared.run_tag = std::to_string(::getpid()) + "." +
                   std::to_string(std::chrono::system_clock::now().time_since_epoch().count());

  // Warm-up: the first pipeline run and the first calls pay one-time costs (lazy
  // initialization, allocator growth) that belong to no cell.
  graft::client::GraftClient warm(own_channel(shared.graftd_address, shared.tls));
  int failures = 0;
  std::string first_failure;
  auto fail = [&](const std::string& what) {
    ++failures;
    if (first_failure.empty()) first_failure = what;
    std::fprintf(stderr, "graft_load: %s\n", what.c_str());
  };
  uint64_t out_bytes = 0;
  for (int i = 0; i < 3; ++i) {
    auto r = warm.optimize(
        models->with_doc("graft_load " + shared.run_tag + " warm-up " + std::to_string(i)),
        shared.config, kRequestTimeout);
    if (!r.ok()) {
      fail("warm-up request failed: " + r.status().ToString());
      break;
    }
    out_bytes = r->model.size();
  }
  if (failures > 0) {
    std::fprintf(stderr, "%s\n", graftd.log().c_str());
    return 1;
  }
  int server_workers = 0;
  if (opt.workers.empty() || opt.workers == "0")
    server_workers = static_cast<int>(std::thread::hardware_concurrency());
  else
    server_workers = std::atoi(opt.workers.c_str());

  std::vector<CellResult> cells;
  for (int clients : opt.clients) {
    // A model of its own per concurrency, cached by one warm-up request, so misses of other
    // cells cannot have evicted it.
    shared.hit_model =
        models->with_doc("graft_load " + shared.run_tag + " hit " + std::to_string(clients));
    shared.hit_result.clear();
    auto r = warm.optimize(shared.hit_model, shared.config, kRequestTimeout);
    if (!r.ok()) {
      fail("hit warm-up failed: " + r.status().ToString());
    } else {
      if (r->report.input_sha256() != graft::cache::sha256_hex(shared.hit_model) ||
          r->report.output_sha256() != graft::cache::sha256_hex(r->model))
        fail("hit warm-up: the report's digests do not match the bytes");
      shared.hit_result = std::move(r->model);
    }
    std::vector<Kind> kinds = {Kind::kMiss};
    if (!shared.hit_result.empty())
      kinds = {Kind::kMiss, Kind::kHit, Kind::kEcho, Kind::kLookup, Kind::kEchoDown};
    // Each cell runs in `rounds` parts, the kinds taking turns, so that drift in the machine's
    // load (it is shared) hits hits and echoes alike.
    std::vector<CellResult> merged(kinds.size());
    for (int round = 0; round < opt.rounds; ++round) {
      for (size_t k = 0; k < kinds.size(); ++k) {
        const Kind kind = kinds[k];
        const int total = kind == Kind::kMiss                           ? opt.miss_requests
                          : kind == Kind::kHit || kind == Kind::kLookup ? opt.hit_requests
                                                                        : opt.echo_requests;
        std::fprintf(stderr, "graft_load: round %d/%d %-4s x %2d clients ...", round + 1,
                     opt.rounds, kind_name(kind), clients);
        std::fflush(stderr);
        CellResult part = run_cell(kind, clients, (total + opt.rounds - 1) / opt.rounds,
                                   opt.cap_seconds / opt.rounds, &shared);
        std::fprintf(stderr, " %zu ok, %d failed, %.1f s%s\n", part.latencies.size(), part.errors,
                     part.wall, part.capped ? " (time cap)" : "");
        CellResult& cell = merged[k];
        cell.kind = kind;
        cell.clients = clients;
        for (auto [from, to] :
             {std::pair{&part.latencies, &cell.latencies}, std::pair{&part.queue, &cell.queue},
              std::pair{&part.work, &cell.work}})
          to->insert(to->end(), from->begin(), from->end());
        cell.errors += part.errors;
        if (cell.first_error.empty()) cell.first_error = part.first_error;
        cell.wall += part.wall;
        cell.capped = cell.capped || part.capped;
      }
    }
    for (auto& cell : merged) {
      if (cell.errors > 0)
        fail(std::string(kind_name(cell.kind)) + " x " + std::to_string(clients) + ": " +
             std::to_string(cell.errors) + " failed, first: " + cell.first_error);
      cells.push_back(std::move(cell));
    }
    if (!graftd.running()) {
      fail("graftd exited during the run:\n" + graftd.log());
      break;
    }
  }

  std::printf(
      "graft_load%s: graftd %s%s with %d workers on %u hardware threads; model %s "
      "(%.2f MiB in, %.2f MiB out at O2)\n",
      opt.quick ? " --quick (numbers not meaningful)" : "", graftd.address().c_str(),
      !opt.tls.on()                    ? ""
      : opt.tls_client_ca_file.empty() ? " over TLS (the echo floor too)"
                                       : " over mTLS (the echo floor too)",
      server_workers, std::thread::hardware_concurrency(), opt.model.filename().c_str(),
      models->base.size() / 1048576.0, out_bytes / 1048576.0);
  // What a hit costs graftd beyond moving bytes, for reading the hit / echo ratio.
  std::vector<double> sha;
  for (int i = 0; i < 21; ++i) {
    auto t = Clock::now();
    graft::cache::sha256_hex(models->base);
    sha.push_back(since(t));
  }
  std::printf("sha256 of the model in this process: %.2f ms (graftd hashes each upload).\n",
              percentile(sha, 0.5) * 1e3);
  std::printf(
      "Latency is per request as the client sees it; requests = successful ones, * = the %.0f s "
      "cap per cell ended it early;\nqueue / worker = graftd's wait for a worker and its load + "
      "pipeline + save time (misses only, from the reports).\n\n",
      opt.cap_seconds);
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : cells) {
    bool miss = c.kind == Kind::kMiss;
    rows.push_back({kind_name(c.kind), std::to_string(c.clients),
                    std::to_string(c.latencies.size()) + (c.capped ? "*" : ""),
                    std::to_string(c.errors),
                    fmt("%.1f", static_cast<double>(c.latencies.size()) / c.wall),
                    fmt("%.2f", percentile(c.latencies, 0.5) * 1e3),
                    fmt("%.2f", percentile(c.latencies, 0.99) * 1e3),
                    miss ? fmt("%.2f", mean(c.queue) * 1e3) : "-",
                    miss ? fmt("%.2f", mean(c.work) * 1e3) : "-"});
  }
  print_table({"kind", "clients", "requests", "failed", "req/s", "p50 ms", "p99 ms",
               "queue ms (mean)", "worker ms (mean)"},
              rows);

  std::printf("\nCache hit vs. echo floor (same bytes up and down over plain gRPC%s):\n\n",
              opt.tls.on() ? " with the same TLS" : "");
  rows.clear();
  for (int clients : opt.clients) {
    const CellResult* hit = nullptr;
    const CellResult* echo = nullptr;
    for (const auto& c : cells) {
      if (c.clients != clients) continue;
      if (c.kind == Kind::kHit) hit = &c;
      if (c.kind == Kind::kEcho) echo = &c;
    }
    if (!hit || !echo || hit->latencies.empty() || echo->latencies.empty()) continue;
    double h50 = percentile(hit->latencies, 0.5), e50 = percentile(echo->latencies, 0.5);
    double h99 = percentile(hit->latencies, 0.99), e99 = percentile(echo->latencies, 0.99);
    rows.push_back({std::to_string(clients), fmt("%.2f", h50 * 1e3), fmt("%.2f", e50 * 1e3),
                    fmt("%.2f", h50 / e50), fmt("%.2f", h99 * 1e3), fmt("%.2f", e99 * 1e3),
                    fmt("%.2f", h99 / e99)});
  }
  print_table({"clients", "hit p50 ms", "echo p50 ms", "hit / echo p50", "hit p99 ms",
               "echo p99 ms", "hit / echo p99"},
              rows);

  std::printf(
      "\nLookup before upload (the client sends the model's digest, a hit downloads the result "
      "and nothing is uploaded)\nvs. echo down (the digest up, the result's bytes down over "
      "plain gRPC):\n\n");
  rows.clear();
  for (int clients : opt.clients) {
    const CellResult* look = nullptr;
    const CellResult* down = nullptr;
    for (const auto& c : cells) {
      if (c.clients != clients) continue;
      if (c.kind == Kind::kLookup) look = &c;
      if (c.kind == Kind::kEchoDown) down = &c;
    }
    if (!look || !down || look->latencies.empty() || down->latencies.empty()) continue;
    double l50 = percentile(look->latencies, 0.5), d50 = percentile(down->latencies, 0.5);
    double l99 = percentile(look->latencies, 0.99), d99 = percentile(down->latencies, 0.99);
    rows.push_back({std::to_string(clients), fmt("%.2f", l50 * 1e3), fmt("%.2f", d50 * 1e3),
                    fmt("%.2f", l50 / d50), fmt("%.2f", l99 * 1e3), fmt("%.2f", d99 * 1e3),
                    fmt("%.2f", l99 / d99)});
  }
  print_table({"clients", "lookup p50 ms", "echo down p50 ms", "lookup / echo p50", "lookup p99 ms",
               "echo down p99 ms", "lookup / echo p99"},
              rows);
  if (!opt.cli_model.empty() && failures == 0) {
    std::string error;
    if (!cli_rows(opt, shared, &error)) fail("end to end: " + error);
  }
  std::printf("\nTotal %.0f s. %s\n", since(run_start),
              failures == 0 ? "All requests succeeded." : "SOME REQUESTS FAILED.");
  echo_server->Shutdown(std::chrono::system_clock::now() + 5s);
  if (failures > 0) {
    std::fprintf(stderr, "graft_load: %d failure(s); first: %s\n", failures, first_failure.c_str());
    return 1;
  }
  return 0;
}
