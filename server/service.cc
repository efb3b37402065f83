#include "server/service.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <optional>
#include <set>

#include <absl/strings/str_cat.h>
#include <google/protobuf/util/json_util.h>

#include <fcntl.h>
#include <unistd.h>

#include "common/report.h"
#include "core/analysis/memory.h"
#include "core/base/status.h"
#include "core/build_info.h"
#include "core/cache/digest.h"
#include "core/ir/external_data.h"
#include "core/ir/model.h"
#include "core/passes/registry.h"
#include "core/paths/beneath.h"
#include "core/paths/files.h"
#include "proto/convert.h"
#include "server/request_log.h"
#include "server/shared_cache.h"

namespace graft::server {

namespace {

using Clock = std::chrono::steady_clock;
using SysClock = std::chrono::system_clock;
constexpr size_t kChunkBytes = 1 << 20;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// absl and gRPC share the canonical status code numbering.
grpc::Status to_grpc(const absl::Status& st) {
  return grpc::Status(static_cast<grpc::StatusCode>(st.code()), std::string(st.message()));
}

// The canonical code name ("INVALID_ARGUMENT"), as metrics labels and logs use it.
std::string code_name(grpc::StatusCode code) {
  std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? "UNKNOWN" : name;
}

template <typename Response, typename Writer>
bool write_chunks(Writer* writer, const std::string& bytes, const std::string& file = "") {
  for (size_t off = 0; off < bytes.size(); off += kChunkBytes) {
    Response msg;
    msg.mutable_chunk()->set_data(bytes.substr(off, kChunkBytes));
    if (!file.empty()) msg.mutable_chunk()->set_file(file);
    if (off == 0) msg.mutable_chunk()->set_total_bytes(bytes.size());
    if (!writer->Write(msg)) return false;
  }
  return true;
}

// Streams a file the result wrote as chunks of its name, read in pieces of kChunkBytes
// (paths::read_range): a multi-GB file never needs to be in memory. False when the client stopped
// reading; an error status (through `error`) when the file cannot be read.
template <typename Response, typename Writer>
bool write_file_chunks(Writer* writer, const cache::CachedFile& file, grpc::Status* error) {
  const int fd = ::open(file.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat("cannot read the result's file '", file.name, "'"));
    return false;
  }
  bool first = true, written = true;
  auto st = paths::read_range(fd, 0, file.size, kChunkBytes,
                              absl::StrCat("the result's file '", file.name, "'"),
                              [&](std::string_view piece) {
                                Response msg;
                                msg.mutable_chunk()->set_data(piece.data(), piece.size());
                                msg.mutable_chunk()->set_file(file.name);
                                if (first) msg.mutable_chunk()->set_total_bytes(file.size);
                                first = false;
                                written = writer->Write(msg);
                                return written;
                              });
  ::close(fd);
  if (!st.ok()) *error = grpc::Status(grpc::StatusCode::INTERNAL, std::string(st.message()));
  return st.ok() && written;
}

// The optimized model, then the files the result wrote; false when the client stopped reading
// (then `error` is CANCELLED) or a file could not be read.
template <typename Response, typename Writer>
bool write_result(Writer* writer, const cache::CachedResult& r, grpc::Status* error) {
  *error = grpc::Status(grpc::StatusCode::CANCELLED, "client stopped reading");
  if (!write_chunks<Response>(writer, r.optimized_model)) return false;
  for (const auto& file : r.files)
    if (!write_file_chunks<Response>(writer, file, error)) return false;
  return true;
}

// A location for the weights a result writes that no input file has.
std::string new_weights_location(const std::vector<UploadedFile>& files) {
  auto taken = [&](const std::string& name) {
    for (const auto& f : files)
      if (f.name == name) return true;
    return false;
  };
  std::string name = "graft_weights.bin";
  for (int i = 1; taken(name); ++i) name = absl::StrCat("graft_weights.", i, ".bin");
  return name;
}

// A computed result's report, as the cache keeps it (report_json): the pipeline's report, the
// run's times, digests and sizes, and the external-data files the result references: the
// input's files it kept (`kept`) and the one it wrote. Also sets the result's output_sha256.
absl::Status set_report(const PipelineReport& report, const std::string& input_digest,
                        uint64_t input_bytes, const std::vector<UploadedFile>& input_files,
                        const std::set<std::string>& kept, double load_seconds, double save_seconds,
                        cache::CachedResult* result) {
  v1::OptimizeReport proto;
  api::fill_report(report, &proto);
  proto.set_load_seconds(load_seconds);
  proto.set_save_seconds(save_seconds);
  proto.set_input_sha256(input_digest);
  result->output_sha256 = cache::sha256_hex(result->optimized_model);
  proto.set_output_sha256(result->output_sha256);
  proto.set_input_bytes(input_bytes);
  proto.set_output_bytes(result->optimized_model.size());
  proto.set_graft_version(graft_version());
  proto.set_build_fingerprint(build_fingerprint());
  for (const auto& f : input_files) {
    if (!kept.count(f.name)) continue;
    auto* e = proto.add_external_files();
    e->set_name(f.name);
    e->set_size(f.size);
    e->set_sha256(f.sha256);
    e->set_from_input(true);
  }
  for (const auto& f : result->files) {
    auto* e = proto.add_external_files();
    e->set_name(f.name);
    e->set_size(f.size);
    e->set_sha256(f.sha256);
  }
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  if (!google::protobuf::util::MessageToJsonString(proto, &result->report_json, options).ok())
    return absl::InternalError("cannot encode the report");
  return absl::OkStatus();
}

}  // namespace

cache::CacheKey result_key(const std::string& input_digest, const std::string& canonical_config) {
  return {input_digest, canonical_config, graft_version(), build_fingerprint()};
}

struct GraftService::Upload {
  Upload(std::atomic<int>& admitted, const UploadLimits& limits, InflightBudget* budget,
         Spool* spool)
      : admitted_count(admitted), assembler(limits, budget, spool) {}
  ~Upload() {
    if (admitted) --admitted_count;
    if (input_budget) input_budget->release(input_bytes);
  }
  std::atomic<int>& admitted_count;
  bool admitted = false;
  // Verify input sets' payload, charged to the uploads' budget while the call lasts.
  InflightBudget* input_budget = nullptr;
  uint64_t input_bytes = 0;
  PipelineConfig config;
  UploadAssembler assembler;
};

// What a worker optimizes: the model's bytes and its external-data files in the spool.
struct GraftService::Input {
  std::shared_ptr<const std::string> model;
  std::string digest;  // the input digest, the result's key
  std::vector<UploadedFile> files;
  std::shared_ptr<SpoolDir> dir;  // keeps the files on disk while the job needs them
};

GraftService::GraftService(const ServerConfig& config, Metrics* metrics,
                           std::unique_ptr<Spool> spool)
    : config_(config),
      metrics_(metrics),
      spool_(std::move(spool)),
      pool_(static_cast<size_t>(config.workers), static_cast<size_t>(config.queue_length)),
      cache_(config.cache_bytes, std::chrono::milliseconds(50),
             spool_ ? std::min(config.spool_cache_bytes, config.spool_max_bytes) : 0),
      upload_limits_{config.max_model_bytes},
      upload_budget_(inflight_bytes(config)) {
  if (metrics_ && spool_)
    spool_->set_observer(
        [metrics](uint64_t bytes) { metrics->spool_bytes().Set(static_cast<double>(bytes)); });
  if (metrics_)
    upload_budget_.set_observer(
        [metrics](uint64_t bytes) { metrics->upload_bytes().Set(static_cast<double>(bytes)); });
  if (config.shared_cache()) {
    SharedCache::Observer observer;
    if (metrics_) {
      metrics_->enable_shared_cache();
      observer.lookup = [metrics](SharedCache::Lookup r) {
        metrics->shared_cache_lookup(SharedCache::name(r));
      };
      observer.write = [metrics](SharedCache::Write r) {
        metrics->shared_cache_write(SharedCache::name(r));
      };
      observer.state = [metrics](bool up) { metrics->shared_cache_up(up); };
    }
    SharedCacheOptions options;
    options.url = config.shared_cache_url;
    options.key_prefix = config.shared_cache_key_prefix;
    options.ttl = std::chrono::seconds(config.shared_cache_ttl_seconds);
    options.max_entry_bytes = config.shared_cache_max_entry_bytes;
    options.chunk_bytes = config.shared_cache_chunk_bytes;
    options.connect_timeout = std::chrono::milliseconds(config.shared_cache_connect_timeout_ms);
    options.command_timeout = std::chrono::milliseconds(config.shared_cache_timeout_ms);
    options.retry_min = std::chrono::milliseconds(config.shared_cache_retry_min_ms);
    options.retry_max = std::chrono::milliseconds(config.shared_cache_retry_max_ms);
    options.write_queue = static_cast<size_t>(config.shared_cache_write_queue);
    // As many as the Optimize calls admitted at once (workers + queue_length).
    options.max_concurrent_reads = std::max(1, config.workers + config.queue_length);
    auto shared = SharedCache::create(std::move(options), std::move(observer));
    // validate() checked the URL, so this does not fail for a configuration that loaded.
    if (shared.ok())
      shared_ = std::move(*shared);
    else
      log_event(spdlog::level::err,
                absl::StrCat("shared cache off: ", std::string(shared.status().message())));
  }
}

GraftService::~GraftService() { pool_.join(); }

absl::StatusOr<PipelineConfig> request_pipeline_config(const ServerConfig& server,
                                                       const v1::PipelineConfig& proto) {
  auto config = api::from_proto(proto);
  if (!config.ok()) return config.status();
  if (config->verify) {
    if (server.verify_max_bytes == 0)
      return absl::FailedPreconditionError(
          "verification is turned off on this server (verify_max_bytes: 0)");
    // Part of the canonical config, so Optimize and Lookup agree on the cache key.
    eval::set_memory_budget(&config->verify_options, server.verify_max_bytes);
    config->verify_options.max_work = server.verify_max_work;
  }
  // Passes that run the evaluator (folding) size what they hold by options: a client may lower
  // them, not raise them past the evaluator memory this server grants a request.
  if (auto st =
          check_evaluator_memory_options(*config, server.verify_max_bytes, "verify_max_bytes");
      !st.ok())
    return st;
  return config;
}

absl::StatusOr<PipelineConfig> GraftService::server_config(const v1::PipelineConfig& proto) const {
  return request_pipeline_config(config_, proto);
}

grpc::Status GraftService::receive(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::OptimizeResponse, v1::OptimizeRequest>* stream, Upload* up,
    SysClock::time_point call_start, SysClock::time_point* deadline) {
  // The request's deadline covers its upload too. A call's own deadline is enforced by gRPC;
  // without one, Read() would wait for a quiet client for as long as it keeps the connection,
  // holding this thread and an admission slot, so the watchdog ends the call at the deadline
  // from default_deadline_seconds (from deadline_hint_ms once OptimizeStart gives one).
  const bool call_deadline = context->deadline() != SysClock::time_point::max();
  struct Watch {
    CallWatchdog& watchdog;
    std::optional<uint64_t> id;
    bool fired = false;
    void release() {
      if (id) fired = watchdog.release(*id) || fired;
      id.reset();
    }
    ~Watch() { release(); }
  } watch{upload_watchdog_, std::nullopt};
  grpc::Status expired;
  auto arm = [&](uint64_t hint_ms) {
    watch.release();
    *deadline = request_deadline(context->deadline(), hint_ms, config_.default_deadline_seconds,
                                 call_start);
    if (call_deadline || *deadline == SysClock::time_point::max()) return;
    const double seconds = std::chrono::duration<double>(*deadline - call_start).count();
    expired =
        grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                     absl::StrCat("the upload was not complete at the request's deadline, ",
                                  seconds, " s after the call started (",
                                  hint_ms > 0 ? "deadline_hint_ms" : "default_deadline_seconds",
                                  "); set a longer deadline for a slow upload"));
    watch.id = upload_watchdog_.watch(context, *deadline, expired);
  };
  arm(0);
  grpc::Status st = read_upload(context, stream, up, arm);
  watch.release();
  // Once the watchdog ended the call, its status is what the client got, whatever Read() did.
  return watch.fired ? expired : st;
}

grpc::Status GraftService::read_upload(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::OptimizeResponse, v1::OptimizeRequest>* stream, Upload* up,
    const std::function<void(uint64_t)>& set_deadline_hint) {
  v1::OptimizeRequest msg;
  while (stream->Read(&msg)) {
    const bool first = !up->assembler.started();
    if (auto st = up->assembler.add(msg); !st.ok()) return st;
    if (!first) continue;
    if (up->assembler.start().deadline_hint_ms() > 0)
      set_deadline_hint(up->assembler.start().deadline_hint_ms());
    const int limit = config_.workers + config_.queue_length;
    if (admitted_.fetch_add(1) >= limit) {
      --admitted_;
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          absl::StrCat(limit,
                                       " requests are already being handled (workers + "
                                       "queue_length); retry later"));
    }
    up->admitted = true;
    auto config = server_config(up->assembler.start().config());
    if (!config.ok()) return to_grpc(config.status());
    // Given verify inputs are held (parsed) until the call ends, like the model's bytes.
    const uint64_t input_bytes = api::input_sets_bytes(config->verify_options.input_sets);
    if (input_bytes > 0) {
      if (!upload_budget_.try_acquire(input_bytes))
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            absl::StrCat("this server's memory for uploads in progress is full "
                                         "(max_inflight_bytes: ",
                                         upload_budget_.limit(), " bytes); retry later"));
      up->input_budget = &upload_budget_;
      up->input_bytes = input_bytes;
    }
    up->config = std::move(*config);
  }
  if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
  return up->assembler.finish();
}

absl::StatusOr<std::shared_ptr<const cache::CachedResult>> GraftService::optimize_on_worker(
    grpc::ServerContext* context, std::shared_ptr<const Input> input, const PipelineConfig& config,
    SysClock::time_point deadline, double* queue_seconds) {
  struct Job {
    std::promise<absl::StatusOr<std::shared_ptr<const cache::CachedResult>>> promise;
    std::atomic<bool> cancelled{false};
    // Set by whichever comes first: a worker starting the job, or the waiting call giving up on
    // it while it is still queued (then the worker skips it).
    std::atomic<bool> claimed{false};
    double queue_seconds = 0;
  };
  auto job = std::make_shared<Job>();
  auto future = job->promise.get_future();
  const auto submitted = Clock::now();
  bool accepted = pool_.try_submit([this, job, input, config, deadline, submitted] {
    if (job->claimed.exchange(true)) {
      job->promise.set_value(absl::CancelledError("given up while queued"));
      return;
    }
    job->queue_seconds = seconds_since(submitted);
    metrics_->queue_depth().Set(static_cast<double>(pool_.queued()));
    metrics_->busy_workers().Increment();
    struct Idle {
      Metrics* metrics;
      ~Idle() { metrics->busy_workers().Decrement(); }
    } idle{metrics_};
    auto stop = [job, deadline]() -> absl::Status {
      if (job->cancelled) return absl::CancelledError("the client cancelled the request");
      if (SysClock::now() > deadline)
        return absl::DeadlineExceededError("deadline exceeded while optimizing");
      return absl::OkStatus();
    };
    try {
      job->promise.set_value(run_job(*input, config, stop));
    } catch (const std::exception& e) {
      job->promise.set_value(absl::InternalError(absl::StrCat("pipeline failed: ", e.what())));
    }
  });
  metrics_->queue_depth().Set(static_cast<double>(pool_.queued()));
  if (!accepted)
    return absl::ResourceExhaustedError(absl::StrCat("all ", pool_.workers(),
                                                     " workers are busy and ", config_.queue_length,
                                                     " requests are queued; retry later"));
  // The gRPC thread only waits; it tells the job to stop if the client goes away. A running job
  // polls the deadline itself; one still queued when the deadline passes or the client goes
  // away is given up at once, rather than answered only when a worker frees up.
  while (future.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
    const bool cancelled = context->IsCancelled();
    if (cancelled) job->cancelled = true;
    const bool expired = SysClock::now() > deadline;
    if ((cancelled || expired) && !job->claimed.exchange(true)) {
      *queue_seconds = seconds_since(submitted);
      return cancelled
                 ? absl::CancelledError("the client cancelled the request")
                 : absl::DeadlineExceededError("deadline exceeded while waiting for a worker");
    }
  }
  *queue_seconds = job->queue_seconds;
  return future.get();
}

absl::StatusOr<std::shared_ptr<const cache::CachedResult>> GraftService::run_job(
    const Input& input, const PipelineConfig& config, const std::function<absl::Status()>& stop) {
  RETURN_IF_ERROR(stop());
  auto t = Clock::now();
  const std::string& model = *input.model;
  ASSIGN_OR_RETURN(std::unique_ptr<ir::Model> parsed, ir::Model::parse(model));
  if (!input.files.empty()) {
    // Passes and the evaluator read external weights from the spool, by reference.
    std::map<std::string, std::string, std::less<>> paths;
    for (const auto& f : input.files) paths.emplace(f.name, f.path);
    parsed->set_external_data(ir::ExternalData::files(std::move(paths)));
  }
  const double load_seconds = seconds_since(t);
  PipelineConfig c = config;
  c.should_continue = stop;
  ASSIGN_OR_RETURN(PipelineReport report, run_pipeline(parsed, c));
  t = Clock::now();
  auto result = std::make_shared<cache::CachedResult>();
  ASSIGN_OR_RETURN(std::set<std::string> kept, save_result(*parsed, input, result.get()));
  const double save_seconds = seconds_since(t);
  metrics_->pipeline_done(report);
  RETURN_IF_ERROR(set_report(report, input.digest, model.size(), input.files, kept, load_seconds,
                             save_seconds, result.get()));
  return std::shared_ptr<const cache::CachedResult>(std::move(result));
}

absl::StatusOr<std::set<std::string>> GraftService::save_result(ir::Model& model,
                                                                const Input& input,
                                                                cache::CachedResult* result) {
  if (input.files.empty()) {
    ASSIGN_OR_RETURN(result->optimized_model, model.serialize_and_release());
    return std::set<std::string>{};
  }
  if (!spool_) return absl::InternalError("external-data files without a spool");
  // New weights (folded, fused, relaid out) go to a file of the result's own folder, so the
  // model stays small; the input's files stay where they are and are referenced by name.
  ASSIGN_OR_RETURN(std::shared_ptr<SpoolDir> dir, spool_->make_dir("result"));
  ir::Model::ExternalWrite write;
  write.folder = dir->path();
  write.location = new_weights_location(input.files);
  write.even_without_external = true;
  ASSIGN_OR_RETURN(ir::Model::SavedModel saved, model.serialize_with_external(write));
  result->optimized_model = std::move(saved.model);
  std::set<std::string> uploaded;
  for (const auto& f : input.files) uploaded.insert(f.name);
  std::set<std::string> kept;
  for (const auto& location : saved.locations) {
    if (location == write.location) continue;
    if (!uploaded.count(location))
      return absl::InvalidArgumentError(absl::StrCat("the model references external-data file '",
                                                     paths::shown_location(location),
                                                     "', which the upload did not include"));
    kept.insert(location);
  }
  if (saved.new_file_bytes > 0) {
    if (!dir->reserve(saved.new_file_bytes))
      return absl::ResourceExhaustedError(absl::StrCat(
          "this server's disk for external data is full (spool.max_bytes: ", spool_->limit(),
          " bytes) and the result wrote ", saved.new_file_bytes,
          " bytes of new weights; retry later"));
    cache::CachedFile file;
    file.name = write.location;
    file.path = absl::StrCat(write.folder, "/", write.location);
    file.size = saved.new_file_bytes;
    cache::Sha256 sha;
    RETURN_IF_ERROR(paths::read_blocks(file.path, [&](std::string_view b) { sha.update(b); }));
    file.sha256 = sha.hex_digest();
    result->files.push_back(std::move(file));
    result->storage = dir;
  }
  return kept;
}

void GraftService::update_cache_metrics() {
  auto s = cache_.stats();
  metrics_->cache_state(s.evictions, s.bytes, s.entries);
}

absl::StatusOr<std::shared_ptr<const cache::CachedResult>> GraftService::find_or_compute(
    grpc::ServerContext* context, std::shared_ptr<const Input> input, const PipelineConfig& config,
    const cache::CacheKey& key, SysClock::time_point deadline, Found* found) {
  auto compute = [&]() -> absl::StatusOr<std::shared_ptr<const cache::CachedResult>> {
    if (shared_) {
      if (auto result = shared_->get(key, deadline)) {
        found->shared_hit = true;
        return result;
      }
    }
    auto computed = optimize_on_worker(context, input, config, deadline, &found->queue_seconds);
    // The shared tier holds models and reports only: results that wrote files stay local.
    if (shared_ && computed.ok() && (*computed)->files.empty()) shared_->put_async(key, *computed);
    return computed;
  };
  cache::ResultCache::Outcome outcome = cache::ResultCache::Outcome::kMiss;
  absl::StatusOr<std::shared_ptr<const cache::CachedResult>> result;
  // A joined computation that stopped because *its* client went away is retried by this one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    result =
        cache_.get_or_compute(key, compute, &outcome, [context] { return context->IsCancelled(); });
    bool joined_and_stopped = outcome == cache::ResultCache::Outcome::kShared && !result.ok() &&
                              (result.status().code() == absl::StatusCode::kCancelled ||
                               result.status().code() == absl::StatusCode::kDeadlineExceeded) &&
                              !context->IsCancelled() && SysClock::now() < deadline;
    if (!joined_and_stopped) break;
  }
  update_cache_metrics();
  // A result from the shared tier is a hit too: nothing was computed.
  found->hit = outcome != cache::ResultCache::Outcome::kMiss || found->shared_hit;
  return result;
}

grpc::Status GraftService::Optimize(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::OptimizeResponse, v1::OptimizeRequest>* stream) {
  const auto start = Clock::now();
  const auto call_start = SysClock::now();
  RequestLog log("Optimize", next_request_id_++);
  metrics_->in_flight().Increment();
  ++active_calls_;
  auto finish = [&](const grpc::Status& status) {
    metrics_->in_flight().Decrement();
    --active_calls_;
    double seconds = seconds_since(start);
    metrics_->request_done("Optimize", code_name(status.error_code()), seconds);
    log.finish(code_name(status.error_code()), status.error_message(), seconds);
    return status;
  };
  if (draining_)
    return finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "server is shutting down"));

  Upload up(admitted_, upload_limits_, &upload_budget_, spool_.get());
  SysClock::time_point deadline;
  if (auto st = receive(context, stream, &up, call_start, &deadline); !st.ok()) return finish(st);
  const UploadAssembler& upload = up.assembler;
  auto input = std::make_shared<Input>();
  input->model = upload.model();
  input->digest = upload.input_digest();
  input->files = upload.files();
  input->dir = upload.spool_dir();
  log.set("digest", input->digest.substr(0, 12));
  log.set("in_bytes", std::to_string(input->model->size()));
  if (!input->files.empty()) {
    uint64_t external = 0;
    for (const auto& f : input->files) external += f.size;
    log.set("external_bytes", std::to_string(external));
  }

  auto canonical = api::canonical_config(up.config);
  if (!canonical.ok()) return finish(to_grpc(canonical.status()));
  // The input digest covers the external-data files too, so their results are cached like any.
  const cache::CacheKey key = result_key(input->digest, *canonical);
  Found found;
  auto result = find_or_compute(context, input, up.config, key, deadline, &found);
  if (!result.ok()) {
    if (result.status().code() == absl::StatusCode::kInternal)
      log.set("error", std::string(result.status().message()));
    return finish(to_grpc(result.status()));
  }
  metrics_->cache_result("Optimize", found.hit);
  log.set("cache", found.shared_hit ? "shared" : found.hit ? "hit" : "miss");
  // The upload's files are not needed any more: the result references them by name, and the
  // files it wrote are its own.
  input.reset();
  up.assembler.release_files();
  return finish(send_result(stream, **result, found, start, &log));
}

grpc::Status GraftService::send_result(
    grpc::ServerReaderWriter<v1::OptimizeResponse, v1::OptimizeRequest>* stream,
    const cache::CachedResult& r, const Found& found, Clock::time_point start, RequestLog* log) {
  grpc::Status sent;
  if (!write_result<v1::OptimizeResponse>(stream, r, &sent)) return sent;
  v1::OptimizeResponse last;
  auto* report = last.mutable_report();
  if (!google::protobuf::util::JsonStringToMessage(r.report_json, report).ok())
    return grpc::Status(grpc::StatusCode::INTERNAL, "cannot decode the cached report");
  report->set_cache_hit(found.hit);
  report->set_queue_seconds(found.hit ? 0 : found.queue_seconds);
  report->set_total_seconds(seconds_since(start));
  stream->Write(last);
  metrics_->model_bytes(report->input_bytes(), r.optimized_model.size());
  log->set("out_bytes", std::to_string(r.optimized_model.size()));
  return grpc::Status::OK;
}

grpc::Status GraftService::Lookup(grpc::ServerContext* context, const v1::LookupRequest* request,
                                  grpc::ServerWriter<v1::LookupResponse>* writer) {
  const auto start = Clock::now();
  RequestLog log("Lookup", next_request_id_++);
  ++active_calls_;
  auto finish = [&](const grpc::Status& status) {
    --active_calls_;
    double seconds = seconds_since(start);
    metrics_->request_done("Lookup", code_name(status.error_code()), seconds);
    log.finish(code_name(status.error_code()), status.error_message(), seconds);
    return status;
  };
  const std::string& digest = request->model_sha256();
  bool hex =
      digest.size() == 64 && digest.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!hex)
    return finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "model_sha256 must be 64 lowercase hex characters"));
  log.set("digest", digest.substr(0, 12));
  auto config = server_config(request->config());
  if (!config.ok()) return finish(to_grpc(config.status()));
  auto canonical = api::canonical_config(*config);
  if (!canonical.ok()) return finish(to_grpc(canonical.status()));
  const cache::CacheKey key = result_key(digest, *canonical);
  auto result = cache_.lookup(key);
  bool shared_hit = false;
  if (result == nullptr && shared_) {
    result = shared_->get(key, context->deadline());
    if (result) {
      shared_hit = true;
      cache_.insert(key, result);
      update_cache_metrics();
    }
  }
  log.set("cache", shared_hit ? "shared" : result ? "hit" : "miss");
  metrics_->cache_result("Lookup", result != nullptr);
  v1::LookupResponse first;
  first.set_cached(result != nullptr);
  writer->Write(first);
  if (result && request->return_result()) {
    grpc::Status sent;
    if (!write_result<v1::LookupResponse>(writer, *result, &sent)) return finish(sent);
    v1::LookupResponse last;
    if (!google::protobuf::util::JsonStringToMessage(result->report_json, last.mutable_report())
             .ok())
      return finish(grpc::Status(grpc::StatusCode::INTERNAL, "cannot decode the cached report"));
    last.mutable_report()->set_cache_hit(true);
    writer->Write(last);
  }
  return finish(grpc::Status::OK);
}

grpc::Status GraftService::ListPasses(grpc::ServerContext*, const v1::ListPassesRequest*,
                                      v1::ListPassesResponse* response) {
  const auto start = Clock::now();
  for (const auto& p : all_passes()) api::fill_pass_info(p, response->add_passes());
  response->set_graft_version(graft_version());
  response->set_build_fingerprint(build_fingerprint());
  metrics_->request_done("ListPasses", "OK", seconds_since(start));
  return grpc::Status::OK;
}

std::optional<std::string> GraftService::report_page(const std::string& output_sha256) const {
  std::shared_ptr<const cache::CachedResult> result = cache_.find_output(output_sha256);
  if (!result) return std::nullopt;
  nlohmann::json report = nlohmann::json::parse(result->report_json, nullptr, false);
  if (report.is_discarded() || !report.is_object()) return std::nullopt;
  nlohmann::json page = {{"format", "graft.v1.OptimizeReport"}};
  // The result's op types, interface and memory over its schedule, sized as its report's
  // estimates were (the dims are in the report, read as every cached report is read).
  v1::OptimizeReport proto;
  if (!google::protobuf::util::JsonStringToMessage(result->report_json, &proto).ok())
    return std::nullopt;
  if (auto model = ir::Model::parse(result->optimized_model); model.ok()) {
    const DimBindings dims(proto.memory_dims().begin(), proto.memory_dims().end());
    page["profile"] = {{"after", report::profile_json(report::profile_model(
                                     **model, SizeRule{&dims, proto.memory_default_dim()}))}};
  }
  page["report"] = std::move(report);
  return report::render_html(page);
}

}  // namespace graft::server
