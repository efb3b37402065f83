// The graft.v1.Graft service: adapts gRPC to core/ (pipeline) and core/cache.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <set>
#include <string>

#include "core/cache/result_cache.h"
#include "graft/v1/graft.grpc.pb.h"
#include "server/call_watchdog.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/shared_cache.h"
#include "server/spool.h"
#include "server/upload.h"
#include "server/worker_pool.h"

namespace graft::ir {
class Model;
}

namespace graft::server {

class RequestLog;

class GraftService final : public v1::Graft::Service {
 public:
  // `spool` holds external-data uploads and result files on disk; without one (null), uploads
  // with external-data files are refused.
  GraftService(const ServerConfig& config, Metrics* metrics,
               std::unique_ptr<Spool> spool = nullptr);
  ~GraftService() override;

  grpc::Status Optimize(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::OptimizeResponse, v1::OptimizeRequest>* stream) override;
  grpc::Status Lookup(grpc::ServerContext* context, const v1::LookupRequest* request,
                      grpc::ServerWriter<v1::LookupResponse>* writer) override;
  grpc::Status ListPasses(grpc::ServerContext* context, const v1::ListPassesRequest* request,
                          v1::ListPassesResponse* response) override;

  // New Optimize calls get UNAVAILABLE from now on (SIGTERM); in-flight ones finish.
  void start_draining() { draining_ = true; }
  // Optimize and Lookup calls whose handler has not returned yet.
  int active_calls() const { return active_calls_; }
  // Optimize and Lookup calls started so far.
  uint64_t calls_started() const { return next_request_id_ - 1; }
  // No call is being handled and no pipeline job is queued or running.
  bool idle() const { return active_calls_ == 0 && pool_.queued() == 0 && pool_.running() == 0; }
  // Waits for queued and running pipeline jobs.
  void join_workers() { pool_.join(); }
  const cache::ResultCache& cache() const { return cache_; }
  // The HTML report of a result this server holds, by the result's sha256 (serve_reports): its
  // report and the result model's profile (the input is not kept). nullopt if not held.
  std::optional<std::string> report_page(const std::string& output_sha256) const;
  // The shared (Redis) tier behind cache(), or null when shared_cache_url is empty.
  SharedCache* shared_cache() const { return shared_.get(); }
  const InflightBudget& upload_budget() const { return upload_budget_; }
  const Spool* spool() const { return spool_.get(); }

 private:
  // request_pipeline_config with this server's config.
  absl::StatusOr<PipelineConfig> server_config(const v1::PipelineConfig& config) const;
  struct Upload;
  struct Input;
  // Reads the upload into `upload`; sets `deadline`, the request's, from the call's start.
  grpc::Status receive(grpc::ServerContext* context,
                       grpc::ServerReaderWriter<v1::OptimizeResponse, v1::OptimizeRequest>* stream,
                       Upload* upload, std::chrono::system_clock::time_point call_start,
                       std::chrono::system_clock::time_point* deadline);
  grpc::Status read_upload(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::OptimizeResponse, v1::OptimizeRequest>* stream, Upload* upload,
      const std::function<void(uint64_t)>& set_deadline_hint);
  // How find_or_compute came by its result.
  struct Found {
    bool hit = false;          // nothing was computed: from either cache tier, or joined
    bool shared_hit = false;   // from the shared tier
    double queue_seconds = 0;  // waiting for a worker, when this call computed it
  };
  // The result for `key`: from the cache, else from the shared tier, else computed on a worker
  // (optimize_on_worker), or joined while another call computes it.
  absl::StatusOr<std::shared_ptr<const cache::CachedResult>> find_or_compute(
      grpc::ServerContext* context, std::shared_ptr<const Input> input,
      const PipelineConfig& config, const cache::CacheKey& key,
      std::chrono::system_clock::time_point deadline, Found* found);
  // Runs the pipeline on a worker; the calling (gRPC) thread only waits.
  absl::StatusOr<std::shared_ptr<const cache::CachedResult>> optimize_on_worker(
      grpc::ServerContext* context, std::shared_ptr<const Input> input,
      const PipelineConfig& config, std::chrono::system_clock::time_point deadline,
      double* queue_seconds);
  // A worker's job: parses the input, runs the pipeline (`stop` ends it early) and saves the
  // result with its report.
  absl::StatusOr<std::shared_ptr<const cache::CachedResult>> run_job(
      const Input& input, const PipelineConfig& config, const std::function<absl::Status()>& stop);
  // Sends an Optimize call's result: the model and its files, then the report with the call's
  // cache outcome and times (from `start`).
  grpc::Status send_result(
      grpc::ServerReaderWriter<v1::OptimizeResponse, v1::OptimizeRequest>* stream,
      const cache::CachedResult& result, const Found& found,
      std::chrono::steady_clock::time_point start, RequestLog* log);
  // Serializes the optimized model into `result` (its bytes; the weights it wrote, in a result
  // folder of the spool). Returns the locations of the input's files it still references.
  absl::StatusOr<std::set<std::string>> save_result(ir::Model& model, const Input& input,
                                                    cache::CachedResult* result);
  void update_cache_metrics();

  const ServerConfig config_;
  Metrics* metrics_;
  // Before the cache and the workers: cached results and running jobs hold folders of it.
  std::unique_ptr<Spool> spool_;
  WorkerPool pool_;
  cache::ResultCache cache_;
  // Consulted after a local miss, written after a computation (docs/shared-cache.md).
  std::unique_ptr<SharedCache> shared_;
  std::atomic<bool> draining_{false};
  // Optimize calls holding an upload in memory, bounded by workers + queue_length; the bytes
  // they hold together are bounded by the budget (max_inflight_bytes).
  std::atomic<int> admitted_{0};
  const UploadLimits upload_limits_;
  InflightBudget upload_budget_;
  std::atomic<uint64_t> next_request_id_{1};
  // Ends uploads still running at their request's deadline (see receive()).
  CallWatchdog upload_watchdog_;
  std::atomic<int> active_calls_{0};
};

// The pipeline a request's config asks for, with this server's limits applied (verification
// memory and work, fold_constants' cap); errors are INVALID_ARGUMENT for a bad config,
// FAILED_PRECONDITION for verification when it is off. Public so that a test can run the very
// pipeline graftd runs, in its own process.
absl::StatusOr<PipelineConfig> request_pipeline_config(const ServerConfig& server,
                                                       const v1::PipelineConfig& requested);

// The cache key of a request's result: the input digest, the canonical config
// (api::canonical_config) and this build's version and fingerprint (core/build_info.h), so
// results of other code (an older release sharing the Redis tier) are never served.
cache::CacheKey result_key(const std::string& input_digest, const std::string& canonical_config);

}  // namespace graft::server
