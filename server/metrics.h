// graftd's Prometheus metrics (prometheus-cpp), served on their own HTTP port (civetweb) with,
// optionally, the HTML reports of cached results. Labels are low cardinality only: method, gRPC
// code, pass name; never a digest.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "core/pipeline/pipeline.h"

namespace graft::server {

class HttpServer;
struct ReportSource;

class Metrics {
 public:
  // Starts the HTTP listener on `listen` (HOST:PORT) serving GET /metrics; throws if the port
  // cannot be bound.
  explicit Metrics(const std::string& listen);
  ~Metrics();

  // The page of a result by its sha256 (64 lowercase hex digits), nullopt if not held.
  using ReportPage = std::function<std::optional<std::string>(const std::string& sha256)>;
  // Serves GET /reports/<sha256>.html from `page` on the same listener (graftd's serve_reports):
  // 404 for any other name or a result not held. Call once, before requests arrive.
  void serve_reports(ReportPage page);
  // From now on /reports/ answers 404 without calling the page function; returns after a page
  // being made has been sent (so what the function uses may go).
  void stop_reports();

  void request_done(const std::string& method, const std::string& code, double seconds);
  void pipeline_done(const PipelineReport& report);
  // One cache answer of a call: `method` is "Optimize" (a miss computed the result) or "Lookup"
  // (a miss answered "not cached"); a hit from either tier counts as a hit.
  void cache_result(const std::string& method, bool hit);
  void cache_state(uint64_t evictions_total, uint64_t bytes, uint64_t entries);
  void model_bytes(uint64_t in, uint64_t out);
  // The shared cache tier's metrics exist only when it is configured (so that an alert on
  // graft_shared_cache_up never fires where there is no shared cache). Call once, before use.
  void enable_shared_cache();
  // result: hit, miss, error, corrupt, incomplete, busy (SharedCache::name).
  void shared_cache_lookup(const std::string& result);
  // result: stored, error, dropped, oversized.
  void shared_cache_write(const std::string& result);
  void shared_cache_up(bool up);
  prometheus::Gauge& queue_depth() { return *queue_depth_; }
  prometheus::Gauge& in_flight() { return *in_flight_; }
  prometheus::Gauge& busy_workers() { return *busy_workers_; }
  prometheus::Gauge& upload_bytes() { return *upload_bytes_; }
  // Disk reserved in the spool: external-data uploads in progress and cached result files.
  prometheus::Gauge& spool_bytes() { return *spool_bytes_; }
  // The port actually bound (useful with port 0).
  int port() const;

 private:
  // The metrics of calls and pipeline runs; of the result cache; of the load (queue, workers,
  // uploads, spool, model bytes).
  void register_request_metrics();
  void register_cache_metrics();
  void register_load_metrics();

  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<HttpServer> http_;
  std::shared_ptr<struct ReportSource> reports_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* request_seconds_;
  prometheus::Family<prometheus::Histogram>* pass_seconds_;
  prometheus::Family<prometheus::Counter>* pass_nodes_removed_;
  prometheus::Family<prometheus::Counter>* verifications_;
  prometheus::Family<prometheus::Counter>* verify_rollbacks_;
  prometheus::Family<prometheus::Counter>* cache_hits_;
  prometheus::Family<prometheus::Counter>* cache_misses_;
  prometheus::Counter* cache_evictions_;
  prometheus::Gauge* cache_bytes_;
  prometheus::Gauge* cache_entries_;
  prometheus::Counter* bytes_in_;
  prometheus::Counter* bytes_out_;
  prometheus::Gauge* queue_depth_;
  prometheus::Gauge* in_flight_;
  prometheus::Gauge* busy_workers_;
  prometheus::Gauge* upload_bytes_;
  prometheus::Gauge* spool_bytes_;
  prometheus::Family<prometheus::Counter>* shared_lookups_ = nullptr;
  prometheus::Family<prometheus::Counter>* shared_writes_ = nullptr;
  prometheus::Gauge* shared_up_ = nullptr;
  // The C heap's bytes in use and free-but-kept, read from the allocator at every scrape.
  std::shared_ptr<prometheus::Collectable> heap_;
  uint64_t evictions_seen_ = 0;
};

}  // namespace graft::server
