#include "server/metrics.h"

#include <mutex>
#include <regex>

#include <CivetServer.h>
#include <prometheus/text_serializer.h>

#include "core/build_info.h"
#include "core/memory/allocator.h"

namespace graft::server {

using namespace prometheus;

namespace {

const Histogram::BucketBoundaries& duration_buckets() {
  static const Histogram::BucketBoundaries b = {
      0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
  return b;
}

std::mutex& eviction_mutex() {
  static std::mutex m;
  return m;
}

// What the allocator holds: bytes handed out (arenas and mmapped blocks), and bytes free in its
// arenas. Resident memory far above the first is free memory the allocator kept (until the next
// trim, core/memory/allocator.h) or fragmentation, not a leak.
class HeapCollector final : public Collectable {
 public:
  std::vector<MetricFamily> Collect() const override {
    const memory::HeapUsage heap = memory::heap_usage();
    const double in_use = static_cast<double>(heap.in_use);
    const double free_kept = static_cast<double>(heap.free);
    auto gauge = [](const char* name, const char* help, double value) {
      MetricFamily family{name, help, MetricType::Gauge, {}};
      family.metric.emplace_back();
      family.metric.back().gauge.value = value;
      return family;
    };
    return {
        gauge("graft_heap_in_use_bytes", "C heap bytes allocated (malloc arenas and mmap)", in_use),
        gauge("graft_heap_free_bytes",
              "C heap bytes free in the allocator's arenas (resident or given back by malloc_trim)",
              free_kept)};
  }
};

void respond(mg_connection* conn, int status, const char* reason, const std::string& type,
             const std::string& body, const char* extra_headers = "") {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "X-Content-Type-Options: nosniff\r\nCache-Control: no-store\r\n%sConnection: close"
            "\r\n\r\n",
            status, reason, type.c_str(), body.size(), extra_headers);
  mg_write(conn, body.data(), body.size());
}

// GET /metrics: the collectables' families in Prometheus' text format.
class MetricsHandler final : public CivetHandler {
 public:
  explicit MetricsHandler(std::vector<std::shared_ptr<Collectable>> collectables)
      : collectables_(std::move(collectables)) {}
  bool handleGet(CivetServer*, mg_connection* conn) override {
    std::vector<MetricFamily> families;
    for (const auto& c : collectables_) {
      auto more = c->Collect();
      families.insert(families.end(), std::make_move_iterator(more.begin()),
                      std::make_move_iterator(more.end()));
    }
    respond(conn, 200, "OK", "text/plain; version=0.0.4; charset=utf-8",
            TextSerializer().Serialize(families));
    return true;
  }

 private:
  std::vector<std::shared_ptr<Collectable>> collectables_;
};

}  // namespace

// The page function of serve_reports, guarded so that stop_reports can take it away.
struct ReportSource {
  std::mutex mu;
  Metrics::ReportPage page;  // empty once stopped
};

namespace {

// GET /reports/<sha256>.html. The page's own Content-Security-Policy is repeated as a header.
class ReportsHandler final : public CivetHandler {
 public:
  explicit ReportsHandler(std::shared_ptr<ReportSource> reports) : reports_(std::move(reports)) {}
  bool handleGet(CivetServer*, mg_connection* conn) override {
    static const std::regex kName("/reports/([0-9a-f]{64})\\.html");
    const mg_request_info* info = mg_get_request_info(conn);
    std::cmatch m;
    std::optional<std::string> page;
    if (info && info->local_uri && std::regex_match(info->local_uri, m, kName)) {
      std::lock_guard lock(reports_->mu);
      if (reports_->page) page = reports_->page(m[1].str());
    }
    if (!page) {
      respond(conn, 404, "Not Found", "text/plain; charset=utf-8",
              "no such report: reports are served for results this server holds in its cache, "
              "as /reports/<result sha256>.html\n");
      return true;
    }
    respond(conn, 200, "OK", "text/html; charset=utf-8", *page,
            "Content-Security-Policy: default-src 'none'; style-src 'unsafe-inline'; img-src "
            "data:; script-src 'unsafe-inline'; frame-ancestors 'none'\r\n");
    return true;
  }

 private:
  std::shared_ptr<ReportSource> reports_;
};

}  // namespace

// The listener: civetweb with a handler per path.
class HttpServer {
 public:
  explicit HttpServer(const std::string& listen)
      : server_(std::vector<std::string>{"listening_ports", listen, "num_threads", "2"}) {}
  ~HttpServer() { server_.close(); }
  void add(const std::string& uri, std::unique_ptr<CivetHandler> handler) {
    server_.addHandler(uri, handler.get());
    handlers_.push_back(std::move(handler));
  }
  int port() {
    auto ports = server_.getListeningPorts();
    return ports.empty() ? 0 : ports.front();
  }

 private:
  std::vector<std::unique_ptr<CivetHandler>> handlers_;  // outlive server_ (declared first)
  CivetServer server_;
};

Metrics::~Metrics() = default;

void Metrics::serve_reports(ReportPage page) {
  reports_ = std::make_shared<ReportSource>();
  reports_->page = std::move(page);
  http_->add("/reports", std::make_unique<ReportsHandler>(reports_));
}

void Metrics::stop_reports() {
  if (!reports_) return;
  std::lock_guard lock(reports_->mu);
  reports_->page = nullptr;
}

Metrics::Metrics(const std::string& listen) : registry_(std::make_shared<Registry>()) {
  requests_ = &BuildCounter()
                   .Name("graft_requests_total")
                   .Help("RPCs handled, by method and gRPC status code")
                   .Register(*registry_);
  request_seconds_ = &BuildHistogram()
                          .Name("graft_request_duration_seconds")
                          .Help("RPC duration, by method")
                          .Register(*registry_);
  pass_seconds_ = &BuildHistogram()
                       .Name("graft_pass_duration_seconds")
                       .Help("Time spent in each pass per pipeline run (all its rounds)")
                       .Register(*registry_);
  pass_nodes_removed_ = &BuildCounter()
                             .Name("graft_pass_nodes_removed_total")
                             .Help("Nodes removed, by pass")
                             .Register(*registry_);
  verifications_ = &BuildCounter()
                        .Name("graft_verifications_total")
                        .Help(
                            "Verified pipeline runs, by result (verified, not_verifiable, "
                            "mismatch)")
                        .Register(*registry_);
  verify_rollbacks_ = &BuildCounter()
                           .Name("graft_verify_rollbacks_total")
                           .Help("Passes rolled back because they changed a model's outputs")
                           .Register(*registry_);
  cache_hits_ = &BuildCounter()
                     .Name("graft_cache_hits_total")
                     .Help(
                         "Results served from the cache (local or shared tier), by method: "
                         "Optimize, Lookup")
                     .Register(*registry_);
  cache_misses_ = &BuildCounter()
                       .Name("graft_cache_misses_total")
                       .Help(
                           "Cache misses, by method: Optimize (the result was computed), Lookup "
                           "(answered not cached; clients then usually call Optimize)")
                       .Register(*registry_);
  for (const char* method : {"Optimize", "Lookup"}) {
    cache_hits_->Add({{"method", method}});
    cache_misses_->Add({{"method", method}});
  }
  auto& evictions = BuildCounter()
                        .Name("graft_cache_evictions_total")
                        .Help("Cache entries evicted for space")
                        .Register(*registry_);
  cache_evictions_ = &evictions.Add({});
  auto& cbytes =
      BuildGauge().Name("graft_cache_bytes").Help("Bytes held by the cache").Register(*registry_);
  cache_bytes_ = &cbytes.Add({});
  auto& centries =
      BuildGauge().Name("graft_cache_entries").Help("Entries in the cache").Register(*registry_);
  cache_entries_ = &centries.Add({});
  auto& in = BuildCounter()
                 .Name("graft_model_bytes_in_total")
                 .Help("Model bytes received for optimization")
                 .Register(*registry_);
  bytes_in_ = &in.Add({});
  auto& out = BuildCounter()
                  .Name("graft_model_bytes_out_total")
                  .Help("Optimized model bytes sent")
                  .Register(*registry_);
  bytes_out_ = &out.Add({});
  auto& queue = BuildGauge()
                    .Name("graft_queue_depth")
                    .Help("Requests waiting for a pipeline worker")
                    .Register(*registry_);
  queue_depth_ = &queue.Add({});
  auto& flight = BuildGauge()
                     .Name("graft_inflight_requests")
                     .Help("Optimize requests being handled")
                     .Register(*registry_);
  in_flight_ = &flight.Add({});
  auto& busy = BuildGauge()
                   .Name("graft_busy_workers")
                   .Help("Pipeline workers running a request (of `workers`)")
                   .Register(*registry_);
  busy_workers_ = &busy.Add({});
  auto& uploads = BuildGauge()
                      .Name("graft_upload_bytes")
                      .Help("Bytes of uploads held in memory (bounded by max_inflight_bytes)")
                      .Register(*registry_);
  upload_bytes_ = &uploads.Add({});
  auto& spool = BuildGauge()
                    .Name("graft_spool_bytes")
                    .Help(
                        "Disk reserved in the spool for external-data uploads in progress and "
                        "cached result files (bounded by spool.max_bytes)")
                    .Register(*registry_);
  spool_bytes_ = &spool.Add({});
  BuildGauge()
      .Name("graft_build_info")
      .Help(
          "Graft build information (always 1): version, and the fingerprint of the sources and "
          "toolchain that compute results (part of every cache key)")
      .Register(*registry_)
      .Add({{"version", graft_version()}, {"fingerprint", build_fingerprint()}})
      .Set(1);
  heap_ = std::make_shared<HeapCollector>();
  http_ = std::make_unique<HttpServer>(listen);
  http_->add("/metrics", std::make_unique<MetricsHandler>(
                             std::vector<std::shared_ptr<Collectable>>{registry_, heap_}));
}

int Metrics::port() const { return http_->port(); }

void Metrics::request_done(const std::string& method, const std::string& code, double seconds) {
  requests_->Add({{"method", method}, {"code", code}}).Increment();
  request_seconds_->Add({{"method", method}}, duration_buckets()).Observe(seconds);
}

void Metrics::pipeline_done(const PipelineReport& report) {
  for (const auto& p : report.passes) {
    pass_seconds_->Add({{"pass", p.name}}, duration_buckets()).Observe(p.seconds);
    if (p.nodes_before > p.nodes_after)
      pass_nodes_removed_->Add({{"pass", p.name}})
          .Increment(static_cast<double>(p.nodes_before - p.nodes_after));
  }
  if (report.verification.requested) {
    verifications_->Add({{"result", eval::verify_status_name(report.verification.result.status)}})
        .Increment();
    for (const auto& pass : report.verification.rolled_back)
      verify_rollbacks_->Add({{"pass", pass}}).Increment();
  }
}

void Metrics::cache_result(const std::string& method, bool hit) {
  (hit ? cache_hits_ : cache_misses_)->Add({{"method", method}}).Increment();
}

void Metrics::cache_state(uint64_t evictions_total, uint64_t bytes, uint64_t entries) {
  {
    std::lock_guard<std::mutex> lock(eviction_mutex());
    if (evictions_total > evictions_seen_) {
      cache_evictions_->Increment(static_cast<double>(evictions_total - evictions_seen_));
      evictions_seen_ = evictions_total;
    }
  }
  cache_bytes_->Set(static_cast<double>(bytes));
  cache_entries_->Set(static_cast<double>(entries));
}

void Metrics::enable_shared_cache() {
  shared_lookups_ = &BuildCounter()
                         .Name("graft_shared_cache_requests_total")
                         .Help(
                             "Lookups in the shared (Redis) cache tier after a local miss, by "
                             "result: hit, miss, error (Redis failed, timed out or is down), "
                             "corrupt (malformed or failed its sha256: served as a miss), "
                             "incomplete (a chunk was evicted or expired: a miss), busy (too many "
                             "lookups at once: skipped)")
                         .Register(*registry_);
  for (const char* result : {"hit", "miss", "error", "corrupt", "incomplete", "busy"})
    shared_lookups_->Add({{"result", result}});
  shared_writes_ = &BuildCounter()
                        .Name("graft_shared_cache_writes_total")
                        .Help(
                            "Results written to the shared cache tier, by result: stored, error, "
                            "dropped (write queue full), oversized (above max_entry_bytes)")
                        .Register(*registry_);
  for (const char* result : {"stored", "error", "dropped", "oversized"})
    shared_writes_->Add({{"result", result}});
  shared_up_ = &BuildGauge()
                    .Name("graft_shared_cache_up")
                    .Help("1 while the shared cache's Redis answers, 0 while it is down")
                    .Register(*registry_)
                    .Add({});
}

void Metrics::shared_cache_lookup(const std::string& result) {
  if (shared_lookups_) shared_lookups_->Add({{"result", result}}).Increment();
}

void Metrics::shared_cache_write(const std::string& result) {
  if (shared_writes_) shared_writes_->Add({{"result", result}}).Increment();
}

void Metrics::shared_cache_up(bool up) {
  if (shared_up_) shared_up_->Set(up ? 1 : 0);
}

void Metrics::model_bytes(uint64_t in, uint64_t out) {
  bytes_in_->Increment(static_cast<double>(in));
  bytes_out_->Increment(static_cast<double>(out));
}

}  // namespace graft::server
