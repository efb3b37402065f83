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

namespace {

Family<Counter>* counters(Registry& registry, const std::string& name, const std::string& help) {
  return &BuildCounter().Name(name).Help(help).Register(registry);
}

Family<Histogram>* histograms(Registry& registry, const std::string& name,
                              const std::string& help) {
  return &BuildHistogram().Name(name).Help(help).Register(registry);
}

Family<Gauge>* gauges(Registry& registry, const std::string& name, const std::string& help) {
  return &BuildGauge().Name(name).Help(help).Register(registry);
}

// A metric without labels: the one member of its family.
Counter* counter(Registry& registry, const std::string& name, const std::string& help) {
  return &counters(registry, name, help)->Add({});
}

Gauge* gauge(Registry& registry, const std::string& name, const std::string& help) {
  return &gauges(registry, name, help)->Add({});
}

}  // namespace

Metrics::Metrics(const std::string& listen) : registry_(std::make_shared<Registry>()) {
  register_request_metrics();
  register_cache_metrics();
  register_load_metrics();
  gauges(*registry_, "graft_build_info",
         "Graft build information (always 1): version, and the fingerprint of the sources and "
         "toolchain that compute results (part of every cache key)")
      ->Add({{"version", graft_version()}, {"fingerprint", build_fingerprint()}})
      .Set(1);
  heap_ = std::make_shared<HeapCollector>();
  http_ = std::make_unique<HttpServer>(listen);
  http_->add("/metrics", std::make_unique<MetricsHandler>(
                             std::vector<std::shared_ptr<Collectable>>{registry_, heap_}));
}

void Metrics::register_request_metrics() {
  Registry& r = *registry_;
  requests_ = counters(r, "graft_requests_total", "RPCs handled, by method and gRPC status code");
  request_seconds_ = histograms(r, "graft_request_duration_seconds", "RPC duration, by method");
  pass_seconds_ = histograms(r, "graft_pass_duration_seconds",
                             "Time spent in each pass per pipeline run (all its rounds)");
  pass_nodes_removed_ = counters(r, "graft_pass_nodes_removed_total", "Nodes removed, by pass");
  verifications_ = counters(r, "graft_verifications_total",
                            "Verified pipeline runs, by result (verified, not_verifiable, "
                            "mismatch)");
  verify_rollbacks_ = counters(r, "graft_verify_rollbacks_total",
                               "Passes rolled back because they changed a model's outputs");
}

void Metrics::register_cache_metrics() {
  Registry& r = *registry_;
  cache_hits_ = counters(r, "graft_cache_hits_total",
                         "Results served from the cache (local or shared tier), by method: "
                         "Optimize, Lookup");
  cache_misses_ = counters(r, "graft_cache_misses_total",
                           "Cache misses, by method: Optimize (the result was computed), Lookup "
                           "(answered not cached; clients then usually call Optimize)");
  for (const char* method : {"Optimize", "Lookup"}) {
    cache_hits_->Add({{"method", method}});
    cache_misses_->Add({{"method", method}});
  }
  cache_evictions_ = counter(r, "graft_cache_evictions_total", "Cache entries evicted for space");
  cache_bytes_ = gauge(r, "graft_cache_bytes", "Bytes held by the cache");
  cache_entries_ = gauge(r, "graft_cache_entries", "Entries in the cache");
}

void Metrics::register_load_metrics() {
  Registry& r = *registry_;
  bytes_in_ = counter(r, "graft_model_bytes_in_total", "Model bytes received for optimization");
  bytes_out_ = counter(r, "graft_model_bytes_out_total", "Optimized model bytes sent");
  queue_depth_ = gauge(r, "graft_queue_depth", "Requests waiting for a pipeline worker");
  in_flight_ = gauge(r, "graft_inflight_requests", "Optimize requests being handled");
  busy_workers_ =
      gauge(r, "graft_busy_workers", "Pipeline workers running a request (of `workers`)");
  upload_bytes_ = gauge(r, "graft_upload_bytes",
                        "Bytes of uploads held in memory (bounded by max_inflight_bytes)");
  spool_bytes_ = gauge(r, "graft_spool_bytes",
                       "Disk reserved in the spool for external-data uploads in progress and "
                       "cached result files (bounded by spool.max_bytes)");
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
  Registry& r = *registry_;
  shared_lookups_ = counters(r, "graft_shared_cache_requests_total",
                             "Lookups in the shared (Redis) cache tier after a local miss, by "
                             "result: hit, miss, error (Redis failed, timed out or is down), "
                             "corrupt (malformed or failed its sha256: served as a miss), "
                             "incomplete (a chunk was evicted or expired: a miss), busy (too many "
                             "lookups at once: skipped)");
  for (const char* result : {"hit", "miss", "error", "corrupt", "incomplete", "busy"})
    shared_lookups_->Add({{"result", result}});
  shared_writes_ = counters(r, "graft_shared_cache_writes_total",
                            "Results written to the shared cache tier, by result: stored, error, "
                            "dropped (write queue full), oversized (above max_entry_bytes)");
  for (const char* result : {"stored", "error", "dropped", "oversized"})
    shared_writes_->Add({{"result", result}});
  shared_up_ = gauge(r, "graft_shared_cache_up",
                     "1 while the shared cache's Redis answers, 0 while it is down");
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
