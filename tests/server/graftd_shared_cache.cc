// Integration tests of the shared cache tier: real graftd processes sharing a real redis-server
// on a free loopback port (no config file, no persistence), driven by the client library, with
// /metrics scraped over HTTP and Redis poked with redis-cli. Part of graftd_test (so the TSan
// build, which builds graftd_test, runs them too). Skipped when redis-server is not installed.
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <functional>

#include <google/protobuf/util/json_util.h>

#include "client/graft_client.h"
#include "core/build_info.h"
#include "core/cache/digest.h"
#include "core/pipeline/pipeline.h"
#include "proto/convert.h"
#include "server/service.h"
#include "server/shared_cache.h"
#include "tests/server/graftd_process.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

const fs::path kModel = fs::path(GRAFT_SOURCE_DIR) / "models" / "ppocr_mobile_v2_cls.onnx";

// The executable's path on PATH (or in /usr/sbin, /usr/bin), or "".
std::string find_program(const std::string& name) {
  std::string path = getenv("PATH") ? getenv("PATH") : "";
  path += ":/usr/sbin:/usr/bin";
  std::istringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) continue;
    fs::path candidate = fs::path(dir) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

// Polls `done` every 20 ms; false if it has not become true within the safety limit.
bool eventually(const std::function<bool()>& done, std::chrono::seconds limit = 15s) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return done();
}

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A redis-server on loopback, killed (SIGKILL) by stop() or the destructor; start() again
// brings up an empty one on the same port.
class RedisServer {
 public:
  RedisServer(std::string server, std::string cli)
      : server_(std::move(server)), cli_(std::move(cli)), port_(free_port()) {
    start();
  }
  ~RedisServer() { stop(); }
  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_) + "/0"; }

  void start() {
    pid_ = ::fork();
    if (pid_ == 0) {
      int null = ::open("/dev/null", O_WRONLY);
      ::dup2(null, 1);
      ::dup2(null, 2);
      std::string port = std::to_string(port_);
      std::vector<std::string> args = {server_,  "--port", port,           "--bind", "127.0.0.1",
                                       "--save", "",       "--appendonly", "no"};
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(server_.c_str(), argv.data());
      ::_exit(127);
    }
    EXPECT_TRUE(eventually([&] { return cli({"PING"}) == "PONG\n"; }))
        << "redis-server did not answer on port " << port_;
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  // One command through redis-cli; its raw output.
  std::string cli(const std::vector<std::string>& args) const {
    std::string command = cli_ + " -h 127.0.0.1 -p " + std::to_string(port_) + " --raw";
    for (const auto& a : args) command += " '" + a + "'";
    command += " 2>/dev/null";
    std::string out;
    if (FILE* pipe = ::popen(command.c_str(), "r")) {
      char buf[4096];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
      ::pclose(pipe);
    }
    return out;
  }
  std::vector<std::string> keys(const std::string& pattern) const {
    std::vector<std::string> out;
    std::istringstream lines(cli({"KEYS", pattern}));
    for (std::string line; std::getline(lines, line);)
      if (!line.empty()) out.push_back(line);
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string server_, cli_;
  int port_;
  pid_t pid_ = -1;
};

class SharedCache : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string server = find_program("redis-server"), cli = find_program("redis-cli");
    if (server.empty() || cli.empty())
      GTEST_SKIP() << "redis-server or redis-cli is not installed (Debian package "
                      "redis-server; scripts/install-deps.sh installs it): shared cache "
                      "integration tests skipped";
    redis_ = std::make_unique<RedisServer>(server, cli);
    bytes_ = read_file(kModel);
    digest_ = cache::sha256_hex(bytes_);
  }

  // graftd with the shared cache on redis_, small chunks (so the model spans several) and
  // short timeouts and retries.
  std::unique_ptr<Graftd> start_graftd() {
    return std::make_unique<Graftd>(std::vector<std::string>{
        "--shared-cache-url", redis_->url(), "--shared-cache-chunk-bytes", "65536",
        "--shared-cache-timeout-ms", "500", "--shared-cache-retry-min-ms", "100",
        "--shared-cache-retry-max-ms", "200"});
  }
  static std::map<std::string, double> metrics(const Graftd& g) {
    return parse_metrics(http_get(g.metrics_port(), "/metrics"));
  }
  static double shared(const Graftd& g, const std::string& result) {
    return metric(metrics(g), "graft_shared_cache_requests_total{result=\"" + result + "\"}");
  }
  static double written(const Graftd& g) {
    return metric(metrics(g), "graft_shared_cache_writes_total{result=\"stored\"}");
  }
  static double up(const Graftd& g) { return metric(metrics(g), "graft_shared_cache_up"); }
  // Distinct keys: each level, and level 2 with fewer rounds.
  static v1::PipelineConfig level(int n, int max_rounds = 10) {
    PipelineConfig config;
    config.level = n;
    config.max_rounds = max_rounds;
    return api::to_proto(config);
  }
  std::string local_result(int n) {
    auto model = ir::Model::parse(bytes_);
    EXPECT_TRUE(model.ok());
    PipelineConfig config = test_pipeline_config();
    config.level = n;
    EXPECT_TRUE(run_pipeline(*model, config).ok());
    auto out = (*model)->serialize_and_release();
    EXPECT_TRUE(out.ok());
    return *out;
  }

  std::unique_ptr<RedisServer> redis_;
  std::string bytes_, digest_;
};

TEST_F(SharedCache, AResultComputedByOneReplicaIsAHitOnAnother) {
  auto a = start_graftd(), b = start_graftd();
  client::GraftClient ca(a->address()), cb(b->address());
  EXPECT_EQ(up(*a), 1);
  auto first = ca.optimize(bytes_, level(2));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->report.cache_hit());
  EXPECT_EQ(shared(*a, "miss"), 1);
  // The write is asynchronous: wait for it (a safety limit, not a timing assertion).
  ASSERT_TRUE(eventually([&] { return written(*a) == 1; })) << a->log();
  // Several chunks (65536 bytes each) under one write id, and one manifest, all under the
  // key prefix and layout version.
  auto chunk_keys = redis_->keys("graft:v1:*:*:*");
  auto all_keys = redis_->keys("graft:v1:*");
  EXPECT_GT(chunk_keys.size(), 2u);
  EXPECT_EQ(all_keys.size(), chunk_keys.size() + 1);

  auto second = cb.optimize(bytes_, level(2));
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->report.cache_hit());
  EXPECT_EQ(second->model, first->model);
  EXPECT_EQ(second->report.output_sha256(), cache::sha256_hex(first->model));
  EXPECT_EQ(shared(*b, "hit"), 1);
  EXPECT_EQ(metric(metrics(*b), "graft_cache_hits_total{method=\"Optimize\"}"), 1);
  EXPECT_NE(b->log().find("cache=shared"), std::string::npos) << b->log();

  // The shared hit went into b's local cache: the next request does not ask Redis.
  auto third = cb.optimize(bytes_, level(2));
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_TRUE(third->report.cache_hit());
  EXPECT_EQ(shared(*b, "hit"), 1);
  EXPECT_EQ(metric(metrics(*b), "graft_shared_cache_requests_total{result=\"miss\"}"), 0);

  // Lookup consults the shared tier too, on a replica that never saw the model.
  auto c = start_graftd();
  client::GraftClient cc(c->address());
  auto found = cc.lookup(digest_, level(2), true);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE(found->cached);
  ASSERT_TRUE(found->result.has_value());
  EXPECT_EQ(found->result->model, first->model);
  EXPECT_EQ(shared(*c, "hit"), 1);
  EXPECT_EQ(metric(metrics(*c), "graft_cache_hits_total{method=\"Lookup\"}"), 1);
  auto missing = cc.lookup(digest_, level(1), false);
  ASSERT_TRUE(missing.ok()) << missing.status();
  EXPECT_FALSE(missing->cached);
  EXPECT_EQ(shared(*c, "miss"), 1);
  EXPECT_EQ(metric(metrics(*c), "graft_cache_misses_total{method=\"Lookup\"}"), 1);
}

TEST_F(SharedCache, RequestsSucceedWhileRedisIsDownAndSharingResumesWhenItReturns) {
  auto a = start_graftd(), b = start_graftd();
  client::GraftClient ca(a->address()), cb(b->address());
  ASSERT_TRUE(ca.optimize(bytes_, level(2)).ok());
  ASSERT_TRUE(eventually([&] { return written(*a) == 1; })) << a->log();

  redis_->stop();
  // A local miss asks Redis, fails, and computes: the request succeeds.
  auto during = ca.optimize(bytes_, level(1));
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_FALSE(during->report.cache_hit());
  EXPECT_EQ(during->model, local_result(1));
  EXPECT_EQ(up(*a), 0);
  EXPECT_GE(shared(*a, "error"), 1);
  EXPECT_NE(a->log().find("is down"), std::string::npos) << a->log();
  // b's local cache is empty and Redis is gone: it computes too.
  auto on_b = cb.optimize(bytes_, level(2));
  ASSERT_TRUE(on_b.ok()) << on_b.status();
  EXPECT_FALSE(on_b->report.cache_hit());
  EXPECT_EQ(up(*b), 0);
  // Local hits need no Redis.
  auto local_hit = ca.optimize(bytes_, level(2));
  ASSERT_TRUE(local_hit.ok()) << local_hit.status();
  EXPECT_TRUE(local_hit->report.cache_hit());

  redis_->start();  // empty: no persistence
  // Each replica notices at its next retry, on a request that misses locally (Lookup of an
  // unknown config).
  for (Graftd* g : {a.get(), b.get()}) {
    client::GraftClient client(g->address());
    ASSERT_TRUE(eventually([&] {
      EXPECT_TRUE(client.lookup(digest_, level(0), false).ok());
      return up(*g) == 1;
    })) << g->log();
    EXPECT_NE(g->log().find("is up again"), std::string::npos) << g->log();
  }
  auto computed = ca.optimize(bytes_, level(2, 5));
  ASSERT_TRUE(computed.ok()) << computed.status();
  EXPECT_FALSE(computed->report.cache_hit());
  ASSERT_TRUE(eventually([&] { return written(*a) == 2; })) << a->log();
  auto shared_again = cb.optimize(bytes_, level(2, 5));
  ASSERT_TRUE(shared_again.ok()) << shared_again.status();
  EXPECT_TRUE(shared_again->report.cache_hit());
  EXPECT_EQ(shared_again->model, computed->model);
  EXPECT_EQ(shared(*b, "hit"), 1);
}

TEST_F(SharedCache, CorruptTruncatedOrMissingChunksAreMissesAndTheResultIsRecomputed) {
  auto a = start_graftd(), b = start_graftd();
  client::GraftClient ca(a->address()), cb(b->address());
  auto first = ca.optimize(bytes_, level(2));
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(eventually([&] { return written(*a) == 1; })) << a->log();
  auto chunks = redis_->keys("graft:v1:*:*:*");
  ASSERT_GT(chunks.size(), 1u);
  const std::string chunk = chunks.front();

  // Same length, different bytes: only the sha256 can tell.
  EXPECT_EQ(redis_->cli({"SETRANGE", chunk, "100", "XXXX"}), "65536\n");
  auto lookup = cb.lookup(digest_, level(2), true);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_FALSE(lookup->cached);
  EXPECT_EQ(shared(*b, "corrupt"), 1);
  // Truncated.
  EXPECT_EQ(redis_->cli({"SET", chunk, "short"}), "OK\n");
  lookup = cb.lookup(digest_, level(2), true);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_FALSE(lookup->cached);
  EXPECT_EQ(shared(*b, "corrupt"), 2);
  // Gone (evicted).
  EXPECT_EQ(redis_->cli({"DEL", chunk}), "1\n");
  lookup = cb.lookup(digest_, level(2), true);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_FALSE(lookup->cached);
  EXPECT_EQ(shared(*b, "incomplete"), 1);
  // Not a manifest at all.
  std::vector<std::string> manifests;
  for (const auto& key : redis_->keys("graft:v1:*"))
    if (std::count(key.begin(), key.end(), ':') == 2) manifests.push_back(key);
  ASSERT_EQ(manifests.size(), 1u);
  EXPECT_EQ(redis_->cli({"SET", manifests.front(), "graft-shared-cache 1\nchunks 99999999999\n"}),
            "OK\n");
  lookup = cb.lookup(digest_, level(2), true);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_FALSE(lookup->cached);
  EXPECT_EQ(shared(*b, "corrupt"), 3);
  EXPECT_EQ(up(*b), 1);  // bad data is not a dead Redis

  // Optimize computes the correct model, and replaces the broken entry.
  auto recomputed = cb.optimize(bytes_, level(2));
  ASSERT_TRUE(recomputed.ok()) << recomputed.status();
  EXPECT_FALSE(recomputed->report.cache_hit());
  EXPECT_EQ(recomputed->model, first->model);
  EXPECT_EQ(recomputed->model, local_result(2));
  ASSERT_TRUE(eventually([&] { return written(*b) == 1; })) << b->log();
  auto c = start_graftd();
  auto healed = client::GraftClient(c->address()).optimize(bytes_, level(2));
  ASSERT_TRUE(healed.ok()) << healed.status();
  EXPECT_TRUE(healed->report.cache_hit());
  EXPECT_EQ(healed->model, first->model);
}

// After an upgrade the new build's replicas share Redis with what the previous build wrote
// under the same version number. The previous build's entries are keyed by its fingerprint, so
// the new build never serves them (with only the version in the key it did: results of the old
// passes). The test plays the previous build, writing through the shared tier's own writer.
TEST_F(SharedCache, EntriesWrittenByAnotherBuildAreNeverServed) {
  server::SharedCacheOptions options;
  options.url = redis_->url();
  options.chunk_bytes = 65536;
  auto previous = server::SharedCache::create(options, {});
  ASSERT_TRUE(previous.ok()) << previous.status();
  // What the previous build "computed": the input unchanged, with a consistent report.
  auto stale = std::make_shared<cache::CachedResult>();
  stale->optimized_model = bytes_;
  v1::OptimizeReport report;
  report.set_input_sha256(digest_);
  report.set_output_sha256(digest_);
  report.set_input_bytes(bytes_.size());
  report.set_output_bytes(bytes_.size());
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(report, &stale->report_json).ok());
  auto key = [&](int level_n) {
    auto config = server::request_pipeline_config(server::ServerConfig{}, level(level_n));
    EXPECT_TRUE(config.ok()) << config.status();
    auto canonical = api::canonical_config(*config);
    EXPECT_TRUE(canonical.ok()) << canonical.status();
    return server::result_key(digest_, *canonical);
  };
  cache::CacheKey older = key(2);
  older.build = std::string(64, '0');  // same version, other code
  (*previous)->put_async(older, stale);
  // Control: the same entry under this build's key for level 1 is served, so the one above is
  // skipped for its fingerprint alone.
  (*previous)->put_async(key(1), stale);
  (*previous)->flush();
  ASSERT_EQ(redis_->keys("graft:v1:*").size(), 2 * (1 + (bytes_.size() + 65535) / 65536));

  auto g = start_graftd();
  client::GraftClient client(g->address());
  auto control = client.optimize(bytes_, level(1));
  ASSERT_TRUE(control.ok()) << control.status();
  EXPECT_TRUE(control->report.cache_hit());
  EXPECT_EQ(cache::sha256_hex(control->model), digest_);  // digests: no binary dump on failure

  auto fresh = client.optimize(bytes_, level(2));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_FALSE(fresh->report.cache_hit());
  EXPECT_EQ(cache::sha256_hex(fresh->model), cache::sha256_hex(local_result(2)));
  EXPECT_EQ(fresh->report.build_fingerprint(), build_fingerprint());
  EXPECT_EQ(shared(*g, "hit"), 1);
  EXPECT_EQ(shared(*g, "miss"), 1);
}

// A Redis that accepts connections and never answers: every call times out, Redis is marked
// down, and requests are answered from the local pipeline.
TEST_F(SharedCache, ARedisThatNeverAnswersIsTimedOutAndSkipped) {
  int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(listener, 64), 0);  // the kernel completes handshakes; nobody reads
  socklen_t len = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string url = "redis://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  {
    Graftd g({"--shared-cache-url", url, "--shared-cache-timeout-ms", "100",
              "--shared-cache-retry-min-ms", "100", "--shared-cache-retry-max-ms", "200"});
    client::GraftClient client(g.address());
    EXPECT_NE(g.log().find("is unavailable"), std::string::npos) << g.log();
    for (int l : {1, 2}) {
      auto r = client.optimize(bytes_, level(l));
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_FALSE(r->report.cache_hit());
      EXPECT_EQ(r->model, local_result(l));
    }
    EXPECT_EQ(up(g), 0);
    EXPECT_EQ(shared(g, "hit"), 0);
  }
  ::close(listener);
}

}  // namespace
}  // namespace graft::testing
