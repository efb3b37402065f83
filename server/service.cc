#include "server/service.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <future>
#include <map>

#include <absl/strings/str_cat.h>
#include <google/protobuf/util/json_util.h>

#include "core/cache/digest.h"
#include "core/ir/model.h"
#include "core/passes/registry.h"
#include "proto/convert.h"
#include "server/request_log.h"

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
    if (!writer->Write(msg)) return false;
  }
  return true;
}

// External-data names are paths relative to the model: never absolute, never escaping upwards.
bool safe_relative_path(const std::string& name) {
  if (name.empty() || name[0] == '/' || name.find('\\') != std::string::npos) return false;
  size_t start = 0;
  while (start <= name.size()) {
    size_t end = name.find('/', start);
    if (end == std::string::npos) end = name.size();
    std::string part = name.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

const std::string& graft_version() {
  static const std::string v = GRAFT_VERSION;
  return v;
}

struct GraftService::Upload {
  explicit Upload(std::atomic<int>& admitted) : admitted_count(admitted) {}
  ~Upload() {
    if (admitted) --admitted_count;
  }
  std::atomic<int>& admitted_count;
  bool admitted = false;
  v1::OptimizeStart start;
  PipelineConfig config;
  std::shared_ptr<std::string> model = std::make_shared<std::string>();
  std::string sha256;
  // External-data files, in the order of OptimizeStart.external_files.
  std::vector<std::pair<std::string, std::string>> files;
};

GraftService::GraftService(const ServerConfig& config, Metrics* metrics)
    : config_(config),
      metrics_(metrics),
      pool_(static_cast<size_t>(config.workers), static_cast<size_t>(config.queue_length)),
      cache_(config.cache_bytes) {}

GraftService::~GraftService() { pool_.join(); }

absl::StatusOr<PipelineConfig> GraftService::server_config(const v1::PipelineConfig& proto) const {
  auto config = api::from_proto(proto);
  if (!config.ok()) return config.status();
  if (config->verify) {
    if (config_.verify_max_bytes == 0)
      return absl::FailedPreconditionError(
          "verification is turned off on this server (verify_max_bytes: 0)");
    // Part of the canonical config, so Optimize and Lookup agree on the cache key.
    config->verify_options.max_live_bytes = config_.verify_max_bytes;
    config->verify_options.max_work = config_.verify_max_work;
    config->verify_options.max_tensor_bytes =
        std::min(config->verify_options.max_tensor_bytes, config_.verify_max_bytes);
  }
  return config;
}

grpc::Status GraftService::receive(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::OptimizeResponse, v1::OptimizeRequest>* stream, Upload* up) {
  v1::OptimizeRequest msg;
  if (!stream->Read(&msg))
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no OptimizeStart message received");
  if (!msg.has_start())
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message must be OptimizeStart");
  up->start = std::move(*msg.mutable_start());
  const int limit = config_.workers + config_.queue_length;
  if (admitted_.fetch_add(1) >= limit) {
    --admitted_;
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat(limit,
                                     " requests are already being handled (workers + "
                                     "queue_length); retry later"));
  }
  up->admitted = true;
  auto config = server_config(up->start.config());
  if (!config.ok()) return to_grpc(config.status());
  up->config = std::move(*config);
  const uint64_t size = up->start.model_size();
  if (size == 0)
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "model_size must be set (> 0)");
  if (size > static_cast<uint64_t>(INT_MAX))
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "model_size exceeds protobuf's 2 GB limit: send large weights as "
                        "external-data files");
  uint64_t total = size;
  std::map<std::string, size_t> file_index;
  std::vector<uint64_t> file_sizes;
  for (const auto& f : up->start.external_files()) {
    if (!safe_relative_path(f.name()))
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("external file name '", f.name(), "' must be a relative path without '..'"));
    if (!file_index.emplace(f.name(), up->files.size()).second)
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("external file '", f.name(), "' is listed twice"));
    up->files.emplace_back(f.name(), std::string());
    file_sizes.push_back(f.size());
    total += f.size();
  }
  if (total > config_.max_model_bytes)
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("model of ", total, " bytes exceeds this server's limit of ",
                                     config_.max_model_bytes, " bytes (max_model_bytes)"));
  up->model->reserve(size);
  cache::Sha256 digest;
  while (stream->Read(&msg)) {
    if (!msg.has_chunk())
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "only chunks may follow OptimizeStart");
    const std::string& data = msg.chunk().data();
    const std::string& file = msg.chunk().file();
    if (!file.empty()) {
      auto it = file_index.find(file);
      if (it == file_index.end())
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            absl::StrCat("chunk for undeclared external file '", file, "'"));
      std::string& bytes = up->files[it->second].second;
      if (bytes.size() + data.size() > file_sizes[it->second])
        return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            absl::StrCat("external file '", file, "' exceeds its announced size"));
      bytes.append(data);
      continue;
    }
    if (up->model->size() + data.size() > size)
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("upload exceeds the announced model_size of ", size, " bytes"));
    digest.update(data);
    up->model->append(data);
  }
  if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "client cancelled");
  if (up->model->size() != size)
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("upload ended after ", up->model->size(), " of ", size, " announced bytes"));
  for (size_t i = 0; i < up->files.size(); ++i)
    if (up->files[i].second.size() != file_sizes[i])
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("external file '", up->files[i].first, "' ended after ",
                       up->files[i].second.size(), " of ", file_sizes[i], " announced bytes"));
  up->sha256 = digest.hex_digest();
  if (!up->start.expected_sha256().empty() && up->start.expected_sha256() != up->sha256)
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("sha256 mismatch: expected ", up->start.expected_sha256(),
                                     ", received bytes hash to ", up->sha256));
  return grpc::Status::OK;
}

absl::StatusOr<std::shared_ptr<const cache::CachedResult>> GraftService::optimize_on_worker(
    grpc::ServerContext* context, std::shared_ptr<std::string> model, std::string model_sha256,
    const PipelineConfig& config, SysClock::time_point deadline, double* queue_seconds) {
  struct Job {
    std::promise<absl::StatusOr<std::shared_ptr<const cache::CachedResult>>> promise;
    std::atomic<bool> cancelled{false};
    double queue_seconds = 0;
  };
  auto job = std::make_shared<Job>();
  auto future = job->promise.get_future();
  const auto submitted = Clock::now();
  bool accepted = pool_.try_submit([this, job, model, model_sha256, config, deadline, submitted] {
    job->queue_seconds = seconds_since(submitted);
    metrics_->queue_depth().Set(static_cast<double>(pool_.queued()));
    auto stop = [job, deadline]() -> absl::Status {
      if (job->cancelled) return absl::CancelledError("the client cancelled the request");
      if (SysClock::now() > deadline)
        return absl::DeadlineExceededError("deadline exceeded while optimizing");
      return absl::OkStatus();
    };
    auto run = [&]() -> absl::StatusOr<std::shared_ptr<const cache::CachedResult>> {
      if (auto st = stop(); !st.ok()) return st;
      auto t = Clock::now();
      auto parsed = ir::Model::parse(*model);
      if (!parsed.ok()) return parsed.status();
      double load_seconds = seconds_since(t);
      PipelineConfig c = config;
      c.should_continue = stop;
      auto report = run_pipeline(*parsed, c);
      if (!report.ok()) return report.status();
      t = Clock::now();
      auto bytes = (*parsed)->serialize_and_release();
      if (!bytes.ok()) return bytes.status();
      double save_seconds = seconds_since(t);
      metrics_->pipeline_done(*report);

      v1::OptimizeReport proto;
      api::fill_report(*report, &proto);
      proto.set_load_seconds(load_seconds);
      proto.set_save_seconds(save_seconds);
      proto.set_input_sha256(model_sha256);
      proto.set_output_sha256(cache::sha256_hex(*bytes));
      proto.set_input_bytes(model->size());
      proto.set_output_bytes(bytes->size());
      proto.set_graft_version(graft_version());
      auto result = std::make_shared<cache::CachedResult>();
      result->optimized_model = std::move(*bytes);
      google::protobuf::util::JsonPrintOptions options;
      options.always_print_primitive_fields = true;
      if (!google::protobuf::util::MessageToJsonString(proto, &result->report_json, options).ok())
        return absl::InternalError("cannot encode the report");
      return std::shared_ptr<const cache::CachedResult>(std::move(result));
    };
    try {
      job->promise.set_value(run());
    } catch (const std::exception& e) {
      job->promise.set_value(absl::InternalError(absl::StrCat("pipeline failed: ", e.what())));
    }
  });
  metrics_->queue_depth().Set(static_cast<double>(pool_.queued()));
  if (!accepted)
    return absl::ResourceExhaustedError(absl::StrCat("all ", pool_.workers(),
                                                     " workers are busy and ", config_.queue_length,
                                                     " requests are queued; retry later"));
  // The gRPC thread only waits; it tells the job to stop if the client goes away.
  while (future.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready)
    if (context->IsCancelled()) job->cancelled = true;
  *queue_seconds = job->queue_seconds;
  return future.get();
}

void GraftService::update_cache_metrics() {
  auto s = cache_.stats();
  metrics_->cache_state(s.evictions, s.bytes, s.entries);
}

grpc::Status GraftService::Optimize(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::OptimizeResponse, v1::OptimizeRequest>* stream) {
  const auto start = Clock::now();
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

  Upload up(admitted_);
  if (auto st = receive(context, stream, &up); !st.ok()) return finish(st);
  log.set("digest", up.sha256.substr(0, 12));
  log.set("in_bytes", std::to_string(up.model->size()));

  auto canonical = api::canonical_config(up.config);
  if (!canonical.ok()) return finish(to_grpc(canonical.status()));
  cache::CacheKey key{up.sha256, *canonical, graft_version()};

  SysClock::time_point deadline = context->deadline();
  if (deadline == SysClock::time_point::max()) {
    double limit = up.start.deadline_hint_ms() > 0 ? up.start.deadline_hint_ms() / 1000.0
                                                   : config_.default_deadline_seconds;
    deadline = SysClock::now() +
               std::chrono::duration_cast<SysClock::duration>(std::chrono::duration<double>(limit));
  }
  double queue_seconds = 0;
  cache::ResultCache::Outcome outcome = cache::ResultCache::Outcome::kMiss;
  absl::StatusOr<std::shared_ptr<const cache::CachedResult>> result;
  // Results of models with external data are not cached: their key would have to cover the
  // files, and they are usually too large to keep.
  const bool cacheable = up.files.empty();
  if (!cacheable)
    result = optimize_on_worker(context, up.model, up.sha256, up.config, deadline, &queue_seconds);
  // A joined computation that stopped because *its* client went away is retried by this one.
  for (int attempt = 0; cacheable && attempt < 2; ++attempt) {
    result = cache_.get_or_compute(
        key,
        [&] {
          return optimize_on_worker(context, up.model, up.sha256, up.config, deadline,
                                    &queue_seconds);
        },
        &outcome, [context] { return context->IsCancelled(); });
    bool joined_and_stopped = outcome == cache::ResultCache::Outcome::kShared && !result.ok() &&
                              (result.status().code() == absl::StatusCode::kCancelled ||
                               result.status().code() == absl::StatusCode::kDeadlineExceeded) &&
                              !context->IsCancelled() && SysClock::now() < deadline;
    if (!joined_and_stopped) break;
  }
  update_cache_metrics();
  if (!result.ok()) {
    if (result.status().code() == absl::StatusCode::kInternal)
      log.set("error", std::string(result.status().message()));
    return finish(to_grpc(result.status()));
  }
  const bool hit = outcome != cache::ResultCache::Outcome::kMiss;
  metrics_->cache_result(hit);
  log.set("cache", hit ? "hit" : "miss");

  const cache::CachedResult& r = **result;
  if (!write_chunks<v1::OptimizeResponse>(stream, r.optimized_model))
    return finish(grpc::Status(grpc::StatusCode::CANCELLED, "client stopped reading"));
  // Passes leave external tensors alone, so the files go back unchanged.
  for (const auto& [name, bytes] : up.files)
    if (!write_chunks<v1::OptimizeResponse>(stream, bytes, name))
      return finish(grpc::Status(grpc::StatusCode::CANCELLED, "client stopped reading"));
  v1::OptimizeResponse last;
  auto* report = last.mutable_report();
  if (!google::protobuf::util::JsonStringToMessage(r.report_json, report).ok())
    return finish(grpc::Status(grpc::StatusCode::INTERNAL, "cannot decode the cached report"));
  for (const auto& [name, bytes] : up.files) {
    auto* f = report->add_external_files();
    f->set_name(name);
    f->set_size(bytes.size());
  }
  report->set_cache_hit(hit);
  report->set_queue_seconds(hit ? 0 : queue_seconds);
  report->set_total_seconds(seconds_since(start));
  stream->Write(last);
  metrics_->model_bytes(up.model->size(), r.optimized_model.size());
  log.set("out_bytes", std::to_string(r.optimized_model.size()));
  return finish(grpc::Status::OK);
}

grpc::Status GraftService::Lookup(grpc::ServerContext*, const v1::LookupRequest* request,
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
  auto result = cache_.lookup({digest, *canonical, graft_version()});
  log.set("cache", result ? "hit" : "miss");
  v1::LookupResponse first;
  first.set_cached(result != nullptr);
  writer->Write(first);
  if (result && request->return_result()) {
    if (!write_chunks<v1::LookupResponse>(writer, result->optimized_model))
      return finish(grpc::Status(grpc::StatusCode::CANCELLED, "client stopped reading"));
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
  for (const auto& p : all_passes()) {
    auto* info = response->add_passes();
    info->set_name(p.name);
    info->set_description(p.description);
    info->set_level(p.level);
    for (const auto& o : p.options) {
      auto* opt = info->add_options();
      opt->set_name(o.name);
      opt->set_default_value(o.default_value);
      opt->set_description(o.description);
    }
  }
  metrics_->request_done("ListPasses", "OK", seconds_since(start));
  return grpc::Status::OK;
}

}  // namespace graft::server
