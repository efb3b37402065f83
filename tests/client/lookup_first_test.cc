// GraftClient's lookup-first optimize and the digest metadata, against a fake Graft server that
// records what it is asked: a cached result is fetched by Lookup without any upload, a miss or a
// server without Lookup falls back to the upload, a short download is DataLoss, and every
// Optimize and Lookup call carries graft-model-sha256.
#include <sys/resource.h>

#include <atomic>
#include <mutex>

#include <grpcpp/grpcpp.h>

#include "client/graft_client.h"
#include "core/cache/digest.h"
#include "core/paths/beneath.h"
#include "graft/v1/graft.grpc.pb.h"
#include "tests/temp_folder.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

const std::string kModel(3 << 20, 'm');  // three chunks of the default size
const std::string kResult = "optimized";

enum class LookupMode {
  kCached,
  kNotCached,
  kUnimplemented,
  kShortResult,
  kWrongDigest,
  kHugeHint,
  kFailsAfterAChunk,  // answers "cached", sends a piece of a result, then fails (INTERNAL)
};

class FakeServer final : public v1::Graft::Service {
 public:
  explicit FakeServer(LookupMode mode) : mode_(mode) {}

  grpc::Status Optimize(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::OptimizeResponse, v1::OptimizeRequest>* stream) override {
    record(context);
    ++optimize_calls;
    v1::OptimizeRequest msg;
    while (stream->Read(&msg))
      if (msg.has_chunk()) uploaded += msg.chunk().data().size();
    v1::OptimizeResponse chunk;
    chunk.mutable_chunk()->set_data(kResult);
    stream->Write(chunk);
    v1::OptimizeResponse last;
    last.mutable_report()->set_output_bytes(kResult.size());
    stream->Write(last);
    return grpc::Status::OK;
  }

  grpc::Status Lookup(grpc::ServerContext* context, const v1::LookupRequest* request,
                      grpc::ServerWriter<v1::LookupResponse>* writer) override {
    record(context);
    ++lookup_calls;
    {
      std::lock_guard<std::mutex> lock(mu);
      looked_up = request->model_sha256();
    }
    if (mode_ == LookupMode::kUnimplemented)
      return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no Lookup here");
    v1::LookupResponse cached;
    cached.set_cached(mode_ != LookupMode::kNotCached);
    writer->Write(cached);
    if (mode_ == LookupMode::kNotCached || !request->return_result()) return grpc::Status::OK;
    if (mode_ == LookupMode::kFailsAfterAChunk) {
      v1::LookupResponse piece;
      piece.mutable_chunk()->set_data("partial ");
      writer->Write(piece);
      return grpc::Status(grpc::StatusCode::INTERNAL, "the cache entry went away");
    }
    v1::LookupResponse chunk;
    chunk.mutable_chunk()->set_data(kResult);
    // A size hint the client must not believe beyond what arrives.
    chunk.mutable_chunk()->set_total_bytes(mode_ == LookupMode::kHugeHint ? uint64_t{1} << 62
                                                                          : kResult.size());
    writer->Write(chunk);
    v1::LookupResponse report;
    report.mutable_report()->set_output_bytes(kResult.size() +
                                              (mode_ == LookupMode::kShortResult ? 1 : 0));
    report.mutable_report()->set_output_sha256(
        cache::sha256_hex(mode_ == LookupMode::kWrongDigest ? "other" : kResult));
    writer->Write(report);
    return grpc::Status::OK;
  }

  std::vector<std::string> digests() {
    std::lock_guard<std::mutex> lock(mu);
    return headers;
  }

  std::atomic<int> optimize_calls{0}, lookup_calls{0};
  std::atomic<uint64_t> uploaded{0};
  std::mutex mu;
  std::string looked_up;

 private:
  void record(grpc::ServerContext* context) {
    std::lock_guard<std::mutex> lock(mu);
    auto range = context->client_metadata().equal_range(client::kModelDigestHeader);
    if (range.first == range.second) headers.push_back("<none>");
    for (auto it = range.first; it != range.second; ++it)
      headers.emplace_back(it->second.data(), it->second.size());
  }

  LookupMode mode_;
  std::vector<std::string> headers;  // one per call
};

struct Running {
  explicit Running(FakeServer* service) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service);
    server = builder.BuildAndStart();
  }
  ~Running() {
    if (server) server->Shutdown();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

client::SendOptions lookup_first() {
  client::SendOptions o;
  o.lookup_first = true;
  return o;
}

TEST(LookupFirst, ACachedResultIsFetchedWithoutUploading) {
  FakeServer service(LookupMode::kCached);
  Running running(&service);
  ASSERT_TRUE(running.server);
  client::GraftClient client(running.address());
  auto r = client.optimize(kModel, v1::PipelineConfig(), lookup_first());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->from_lookup);
  EXPECT_TRUE(r->report.cache_hit());
  EXPECT_EQ(r->model, kResult);
  EXPECT_EQ(r->bytes_sent, 0u);
  EXPECT_EQ(r->bytes_received, kResult.size());
  EXPECT_EQ(service.lookup_calls, 1);
  EXPECT_EQ(service.optimize_calls, 0);
  EXPECT_EQ(service.uploaded, 0u);
  std::lock_guard<std::mutex> lock(service.mu);
  EXPECT_EQ(service.looked_up, cache::sha256_hex(kModel));
}

TEST(LookupFirst, AnAbsurdSizeHintAllocatesNoMoreThanItsCap) {
  FakeServer service(LookupMode::kHugeHint);
  Running running(&service);
  client::GraftClient client(running.address());
  auto r = client.optimize(kModel, v1::PipelineConfig(), lookup_first());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, kResult);
  EXPECT_LE(r->model.capacity(), size_t{1} << 30);
}

TEST(LookupFirst, AMissUploadsOnce) {
  FakeServer service(LookupMode::kNotCached);
  Running running(&service);
  client::GraftClient client(running.address());
  auto r = client.optimize(kModel, v1::PipelineConfig(), lookup_first());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->from_lookup);
  EXPECT_EQ(r->model, kResult);
  EXPECT_EQ(r->bytes_sent, kModel.size());
  EXPECT_EQ(service.lookup_calls, 1);
  EXPECT_EQ(service.optimize_calls, 1);
  EXPECT_EQ(service.uploaded, kModel.size());
}

TEST(LookupFirst, AServerWithoutLookupStillGetsTheModel) {
  FakeServer service(LookupMode::kUnimplemented);
  Running running(&service);
  client::GraftClient client(running.address());
  auto r = client.optimize(kModel, v1::PipelineConfig(), lookup_first());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, kResult);
  EXPECT_EQ(service.optimize_calls, 1);
}

TEST(LookupFirst, AShortOrAlteredDownloadIsDataLoss) {
  for (LookupMode mode : {LookupMode::kShortResult, LookupMode::kWrongDigest}) {
    FakeServer service(mode);
    Running running(&service);
    client::GraftClient client(running.address());
    auto found = client.lookup(cache::sha256_hex(kModel), v1::PipelineConfig(), true);
    EXPECT_EQ(found.status().code(), absl::StatusCode::kDataLoss) << found.status();
    // optimize() does not fall back to an upload: the server answered, wrongly.
    auto r = client.optimize(kModel, v1::PipelineConfig(), lookup_first());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
    EXPECT_EQ(service.optimize_calls, 0);
  }
}

// A sink collecting what it is given, on the client's own thread.
struct Collected {
  std::mutex mu;
  std::string bytes;
  int restarts = 0;
  absl::Status fail_with;  // the sink's answer to every piece when set
  client::ModelSink sink(bool restartable = true) {
    client::ModelSink s;
    s.write = [this](std::string_view piece) {
      std::lock_guard<std::mutex> lock(mu);
      if (!fail_with.ok()) return fail_with;
      bytes.append(piece);
      return absl::OkStatus();
    };
    if (restartable)
      s.restart = [this] {
        std::lock_guard<std::mutex> lock(mu);
        bytes.clear();
        ++restarts;
        return absl::OkStatus();
      };
    return s;
  }
};

TEST(LookupFirst, AResultGoesToTheSinkInsteadOfMemory) {
  for (LookupMode mode : {LookupMode::kCached, LookupMode::kNotCached}) {
    FakeServer service(mode);
    Running running(&service);
    client::GraftClient client(running.address());
    Collected got;
    client::SendOptions options = lookup_first();
    options.model_sink = got.sink();
    auto r = client.optimize(kModel, v1::PipelineConfig(), options);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->from_lookup, mode == LookupMode::kCached);
    EXPECT_EQ(r->model, "");  // never held
    EXPECT_EQ(got.bytes, kResult);
    EXPECT_EQ(r->bytes_received, kResult.size());
    EXPECT_EQ(got.restarts, 0);
  }
  // The download's checks still hold: a result that does not match its report is DataLoss.
  for (LookupMode mode : {LookupMode::kShortResult, LookupMode::kWrongDigest}) {
    FakeServer service(mode);
    Running running(&service);
    client::GraftClient client(running.address());
    Collected got;
    auto found = client.lookup(cache::sha256_hex(kModel), v1::PipelineConfig(), true, {}, nullptr,
                               got.sink());
    EXPECT_EQ(found.status().code(), absl::StatusCode::kDataLoss) << found.status();
  }
}

TEST(LookupFirst, ASinkErrorEndsTheDownloadWithIt) {
  FakeServer service(LookupMode::kCached);
  Running running(&service);
  client::GraftClient client(running.address());
  Collected got;
  got.fail_with = absl::ResourceExhaustedError("disk full");
  client::SendOptions options = lookup_first();
  options.model_sink = got.sink();
  auto r = client.optimize(kModel, v1::PipelineConfig(), options);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted) << r.status();
  EXPECT_EQ(r.status().message(), "disk full");
}

TEST(LookupFirst, ALookupThatFailsPartWayRestartsTheSinkBeforeTheUpload) {
  FakeServer service(LookupMode::kFailsAfterAChunk);
  Running running(&service);
  client::GraftClient client(running.address());
  Collected got;
  client::SendOptions options = lookup_first();
  options.model_sink = got.sink();
  auto r = client.optimize(kModel, v1::PipelineConfig(), options);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(service.optimize_calls, 1);
  EXPECT_EQ(got.restarts, 1);
  EXPECT_EQ(got.bytes, kResult);  // not "partial optimized"
  // Without a way to restart, the Lookup's error is the answer and nothing is uploaded.
  Collected once;
  options.model_sink = once.sink(/*restartable=*/false);
  r = client.optimize(kModel, v1::PipelineConfig(), options);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
  EXPECT_EQ(service.optimize_calls, 1);
}

TEST(LookupFirst, OffMeansNoLookup) {
  FakeServer service(LookupMode::kCached);
  Running running(&service);
  client::GraftClient client(running.address());
  ASSERT_TRUE(client.optimize(kModel, v1::PipelineConfig()).ok());
  EXPECT_EQ(service.lookup_calls, 0);
  EXPECT_EQ(service.optimize_calls, 1);
}

// A model with external data is looked up by the digest of the model and its files, and the
// call's routing header carries the same digest.
TEST(LookupFirst, ModelsWithExternalDataAreLookedUpByTheirInputDigest) {
  FakeServer service(LookupMode::kCached);
  Running running(&service);
  client::GraftClient client(running.address());
  const std::string weights(100, 'w');
  client::ExternalFiles files = {{"w.bin", weights}};
  auto r = client.optimize(kModel, v1::PipelineConfig(), lookup_first(), files);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->from_lookup);
  EXPECT_EQ(r->bytes_sent, 0u);
  EXPECT_EQ(service.lookup_calls, 1);
  EXPECT_EQ(service.optimize_calls, 0);
  const std::string digest = cache::input_digest(
      cache::sha256_hex(kModel), {{"w.bin", weights.size(), cache::sha256_hex(weights)}});
  {
    std::lock_guard<std::mutex> lock(service.mu);
    EXPECT_EQ(service.looked_up, digest);
  }
  EXPECT_EQ(service.digests(), std::vector<std::string>{digest});
}

TEST(LookupFirst, EveryCallCarriesTheModelDigest) {
  FakeServer service(LookupMode::kNotCached);
  Running running(&service);
  client::GraftClient client(running.address());
  ASSERT_TRUE(client.optimize(kModel, v1::PipelineConfig(), lookup_first()).ok());
  ASSERT_TRUE(client.optimize(kModel, v1::PipelineConfig()).ok());
  client::SendOptions given = lookup_first();
  given.model_sha256 = std::string(64, 'a');  // a digest the caller already has is sent as is
  ASSERT_TRUE(client.optimize(kModel, v1::PipelineConfig(), given).ok());
  const std::string digest = cache::sha256_hex(kModel);
  EXPECT_EQ(service.digests(), (std::vector<std::string>{digest, digest, digest, given.model_sha256,
                                                         given.model_sha256}));
}

// A model may have thousands of external files (one per tensor): they are hashed one open file
// at a time, so a process with a small descriptor limit hashes them all.
TEST(ExternalSources, ManyFilesAreHashedOneDescriptorAtATime) {
  TempFolder folder;
  client::ExternalSources sources;
  for (int i = 0; i < 300; ++i) {
    const std::string name = "w/" + std::to_string(i) + ".bin";
    ASSERT_TRUE(paths::write_beneath(folder.str(), name, std::string(i + 1, 'a' + i % 26)).ok());
    client::ExternalSource s;
    s.name = name;
    s.folder = folder.str();
    sources.push_back(std::move(s));
  }
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = 128;  // fewer than the files
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  auto st = client::digest_sources(sources);
  ::setrlimit(RLIMIT_NOFILE, &old);
  ASSERT_TRUE(st.ok()) << st;
  for (int i = 0; i < 300; ++i) {
    EXPECT_EQ(sources[i].size, static_cast<uint64_t>(i + 1));
    EXPECT_EQ(sources[i].sha256, cache::sha256_hex(std::string(i + 1, 'a' + i % 26)));
  }
}

}  // namespace
}  // namespace graft::testing
