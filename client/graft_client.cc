#include "client/graft_client.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <absl/strings/str_cat.h>

#include "client/file_digest.h"
#include "core/base/status.h"
#include "core/cache/digest.h"
#include "core/paths/beneath.h"
#include "core/paths/files.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"

namespace graft::client {

namespace {

// Most a receiver allocates ahead on a server's word (Chunk.total_bytes); beyond, the string
// grows as bytes arrive, so a wrong hint costs memory only for bytes actually sent.
constexpr uint64_t kMaxReserve = uint64_t{1} << 30;

void reserve_for(std::string& s, const v1::Chunk& chunk) {
  if (chunk.total_bytes() > s.size() && s.capacity() < chunk.total_bytes())
    s.reserve(static_cast<size_t>(std::min<uint64_t>(chunk.total_bytes(), kMaxReserve)));
}

// A closing file descriptor.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string source_path(const ExternalSource& s) { return s.folder + "/" + s.name; }

// Opens a source read from disk (paths::open_beneath) and checks that it still has `size` bytes
// when `size` is given.
absl::Status open_source(const ExternalSource& s, Fd* fd, uint64_t* size,
                         std::optional<uint64_t> expected = std::nullopt) {
  ASSIGN_OR_RETURN(fd->fd, paths::open_beneath(s.folder, s.name, size));
  if (expected && *size != *expected)
    return absl::FailedPreconditionError(
        absl::StrCat("'", source_path(s), "' changed size since it was hashed"));
  return absl::OkStatus();
}

// The pieces of a streamed model (SendOptions::model_sink), handed from the receiving thread to
// a thread of their own that hashes each and passes it to the sink: the digest and the write of
// one piece overlap the receipt of the next. At most kQueueBytes wait at a time (one piece
// always may), so a slow disk slows the download instead of filling memory.
class SinkThread {
 public:
  static constexpr uint64_t kQueueBytes = uint64_t{8} << 20;

  SinkThread(std::function<absl::Status(std::string_view)> sink, cache::Sha256* sha)
      : sink_(std::move(sink)), sha_(sha), worker_([this] { run(); }) {}
  ~SinkThread() { close().IgnoreError(); }

  // Queues a piece; the sink's error once it failed (the piece is dropped).
  absl::Status push(std::string piece) {
    std::unique_lock lock(mu_);
    space_.wait(lock, [&] {
      return !status_.ok() || queued_ == 0 || queued_ + piece.size() <= kQueueBytes;
    });
    RETURN_IF_ERROR(status_);
    queued_ += piece.size();
    queue_.push_back(std::move(piece));
    ready_.notify_one();
    return absl::OkStatus();
  }

  // Waits until every queued piece went to the sink; its first error, if any.
  absl::Status close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
      ready_.notify_one();
    }
    if (worker_.joinable()) worker_.join();
    return status_;
  }

 private:
  void run() {
    while (true) {
      std::string piece;
      absl::Status st;  // after a failure, what is still queued is dropped
      {
        std::unique_lock lock(mu_);
        ready_.wait(lock, [&] { return !queue_.empty() || closed_; });
        if (queue_.empty()) return;
        piece = std::move(queue_.front());
        queue_.pop_front();
        st = status_;
      }
      if (st.ok()) {
        if (sha_ != nullptr) sha_->update(piece);
        st = sink_(piece);
      }
      std::lock_guard lock(mu_);
      queued_ -= piece.size();
      if (!st.ok() && status_.ok()) status_ = st;
      space_.notify_one();
    }
  }

  std::function<absl::Status(std::string_view)> sink_;
  cache::Sha256* sha_;
  std::mutex mu_;
  std::condition_variable ready_, space_;
  std::deque<std::string> queue_;
  uint64_t queued_ = 0;
  bool closed_ = false;
  absl::Status status_;
  std::thread worker_;  // last: started once the rest is in place
};

// The result's model and files as they arrive (Optimize and Lookup answer alike), checked
// against the report at the end. The model is kept, or streamed to a sink.
class Receiver {
 public:
  Receiver(bool hash_model, const ModelSink& sink) : hash_model_(hash_model) {
    if (sink) sink_ = std::make_unique<SinkThread>(sink.write, hash_model ? &model_sha_ : nullptr);
  }

  // A chunk of the model (no file) or of a file the server wrote. Names are checked by the rule
  // the upload had to pass, before anyone can use them as paths; each file comes in one run.
  // The chunk's data is moved out.
  absl::Status add(v1::Chunk& chunk) {
    const std::string& file = chunk.file();
    if (file.empty()) {
      model_bytes_ += chunk.data().size();
      if (sink_) return sink_->push(std::move(*chunk.mutable_data()));
      reserve_for(model_, chunk);
      model_ += chunk.data();
      if (hash_model_) model_sha_.update(chunk.data());  // while the next chunk is on its way
      return absl::OkStatus();
    }
    if (files_.empty() || files_.back().first != file) {
      if (auto st = paths::check_location(file); !st.ok())
        return absl::InvalidArgumentError(absl::StrCat("the server returned an ", st.message()));
      if (!names_.insert(file).second)
        return absl::DataLossError(absl::StrCat("the server returned external file '",
                                                paths::shown_location(file), "' twice"));
      files_.emplace_back(file, std::string());
      file_sha_.emplace_back();
      reserve_for(files_.back().second, chunk);
    }
    files_.back().second += chunk.data();
    file_sha_.back().update(chunk.data());
    return absl::OkStatus();
  }

  uint64_t model_bytes() const { return model_bytes_; }

  // Moves what arrived into `result` (whose report is set), checking it: the model's size (and
  // digest when hashed), every file the report lists as written by the server arrived with its
  // size and digest, and nothing else did.
  absl::Status finish(OptimizeResult& result) {
    if (sink_) RETURN_IF_ERROR(sink_->close());
    const v1::OptimizeReport& report = result.report;
    if (model_bytes_ != report.output_bytes())
      return absl::DataLossError("received fewer model bytes than the report announces");
    if (hash_model_ && !report.output_sha256().empty() &&
        report.output_sha256() != model_sha_.hex_digest())
      return absl::DataLossError("the received model does not match the digest in its report");
    std::map<std::string, size_t> received;
    for (size_t i = 0; i < files_.size(); ++i) received[files_[i].first] = i;
    std::set<std::string> listed;
    for (const auto& f : report.external_files()) {
      listed.insert(f.name());
      if (f.from_input()) {
        if (auto st = paths::check_location(f.name()); !st.ok())
          return absl::InvalidArgumentError(absl::StrCat("the server returned an ", st.message()));
        result.kept_files.push_back(f.name());
        continue;
      }
      auto it = received.find(f.name());
      if (it == received.end())
        return absl::DataLossError(absl::StrCat("the server did not send external file '",
                                                paths::shown_location(f.name()),
                                                "' that its report lists"));
      if (files_[it->second].second.size() != f.size() ||
          (!f.sha256().empty() && file_sha_[it->second].hex_digest() != f.sha256()))
        return absl::DataLossError(absl::StrCat("external file '", paths::shown_location(f.name()),
                                                "' does not match its size and digest in the "
                                                "report"));
    }
    for (const auto& [name, bytes] : files_)
      if (!listed.count(name))
        return absl::DataLossError(absl::StrCat("the server sent external file '",
                                                paths::shown_location(name),
                                                "' that its report does not list"));
    result.model = std::move(model_);
    result.external_files = std::move(files_);
    result.bytes_received = model_bytes_;
    for (const auto& [name, bytes] : result.external_files) result.bytes_received += bytes.size();
    return absl::OkStatus();
  }

 private:
  bool hash_model_;
  std::string model_;
  uint64_t model_bytes_ = 0;
  cache::Sha256 model_sha_;  // written by sink_'s thread while it runs
  ExternalFiles files_;
  std::vector<cache::Sha256> file_sha_;
  std::set<std::string> names_;
  std::unique_ptr<SinkThread> sink_;  // last: its thread stops before the rest goes
};

using OptimizeStream = grpc::ClientReaderWriter<v1::OptimizeRequest, v1::OptimizeResponse>;

// Writes an Optimize call's request: its start (config, sizes and digests), then the model and
// each external-data file in chunks of options.chunk_bytes, until the stream closes. `sent`
// counts the bytes. A file that cannot be read cancels the call; its error is returned.
absl::Status write_request(grpc::ClientContext& context, OptimizeStream* stream,
                           std::string_view model, const v1::PipelineConfig& config,
                           const SendOptions& options, const ExternalSources& external_files,
                           uint64_t* sent) {
  const auto& progress = options.progress;
  const size_t chunk_bytes = options.chunk_bytes;
  v1::OptimizeRequest start;
  *start.mutable_start()->mutable_config() = config;
  start.mutable_start()->set_model_size(model.size());
  uint64_t total = model.size();
  for (const auto& f : external_files) {
    auto* e = start.mutable_start()->add_external_files();
    e->set_name(f.name);
    e->set_size(f.size);
    e->set_sha256(f.sha256);
    total += f.size;
  }
  bool open = stream->Write(start);
  auto send_piece = [&](std::string_view bytes, const std::string& file) {
    v1::OptimizeRequest chunk;
    chunk.mutable_chunk()->set_data(std::string(bytes));
    if (!file.empty()) chunk.mutable_chunk()->set_file(file);
    open = stream->Write(chunk);
    *sent += bytes.size();
    if (progress) progress(true, *sent, total);
    return open;
  };
  auto upload = [&](std::string_view bytes, const std::string& file) {
    for (size_t off = 0; open && off < bytes.size(); off += chunk_bytes)
      send_piece(bytes.substr(off, chunk_bytes), file);
  };
  upload(model, "");
  // digest_sources opened every file just before, so a missing one failed before the call. Each
  // is opened again when its turn comes (one descriptor at a time) and sent a piece at a time:
  // a multi-GB file is never held in memory.
  for (size_t i = 0; i < external_files.size() && open; ++i) {
    const ExternalSource& f = external_files[i];
    if (f.folder.empty()) {
      upload(f.bytes, f.name);
      continue;
    }
    Fd fd;
    uint64_t size = 0;
    absl::Status read_error = open_source(f, &fd, &size, f.size);
    if (read_error.ok())
      read_error =
          paths::read_range(fd.fd, 0, f.size, chunk_bytes, "'" + source_path(f) + "'",
                            [&](std::string_view piece) { return send_piece(piece, f.name); });
    if (!read_error.ok()) {
      context.TryCancel();
      return read_error;
    }
  }
  return absl::OkStatus();
}

// Reads an Optimize call's answer: the result's chunks into `receiver` (the first it refuses
// cancels the call and is returned) and its report into `result`.
absl::Status read_response(grpc::ClientContext& context, OptimizeStream* stream,
                           const Progress& progress, Receiver* receiver, OptimizeResult* result,
                           bool* have_report) {
  absl::Status bad;
  v1::OptimizeResponse msg;
  while (stream->Read(&msg)) {
    if (msg.has_chunk()) {
      if (bad.ok()) {
        bad = receiver->add(*msg.mutable_chunk());
        if (!bad.ok()) context.TryCancel();
      }
      if (progress) progress(false, receiver->model_bytes(), 0);
    } else if (msg.has_report()) {
      result->report = std::move(*msg.mutable_report());
      *have_report = true;
    }
  }
  return bad;
}

}  // namespace

ExternalSources sources_of(const ExternalFiles& files) {
  ExternalSources out;
  for (const auto& [name, bytes] : files) {
    ExternalSource s;
    s.name = name;
    s.bytes = bytes;
    out.push_back(std::move(s));
  }
  return out;
}

absl::Status digest_sources(ExternalSources& sources,
                            const std::function<void(uint64_t, uint64_t)>& progress,
                            const std::string& digest_cache, bool recall) {
  // Sizes first (each file opened and closed: a model may have thousands of files), so the
  // progress has a total; then each file is hashed in turn.
  uint64_t total = 0, done = 0;
  for (ExternalSource& s : sources) {
    if (s.folder.empty()) {
      s.size = s.bytes.size();
    } else {
      Fd fd;
      RETURN_IF_ERROR(open_source(s, &fd, &s.size));
    }
    total += s.size;
  }
  for (ExternalSource& s : sources) {
    if (!s.sha256.empty()) {
      done += s.size;
      continue;
    }
    if (s.folder.empty()) {
      s.sha256 = cache::sha256_hex(s.bytes);
      done += s.size;
      if (progress) progress(done, total);
      continue;
    }
    Fd fd;
    uint64_t size = 0;
    RETURN_IF_ERROR(open_source(s, &fd, &size, s.size));
    DigestOptions options;
    options.cache_folder = digest_cache;
    options.recall = recall;
    if (progress)
      options.progress = [&, base = done](uint64_t d, uint64_t) { progress(base + d, total); };
    ASSIGN_OR_RETURN(FileDigest d, digest_file(fd.fd, "'" + source_path(s) + "'", options));
    if (d.size != s.size)
      return absl::FailedPreconditionError(
          absl::StrCat("'", source_path(s), "' changed size since it was opened"));
    s.sha256 = d.sha256;
    done += s.size;
    if (progress && d.recalled) progress(done, total);
  }
  return absl::OkStatus();
}

std::string input_digest_of(const std::string& model_sha256, const ExternalSources& sources) {
  std::vector<cache::ExternalFileDigest> files;
  for (const auto& s : sources) files.push_back({s.name, s.size, s.sha256});
  return cache::input_digest(model_sha256, std::move(files));
}

absl::Status check_kept_files(const OptimizeResult& result, const ExternalSources& sources) {
  for (const auto& f : result.report.external_files()) {
    if (!f.from_input()) continue;
    auto it = std::find_if(sources.begin(), sources.end(),
                           [&](const ExternalSource& s) { return s.name == f.name(); });
    if (it == sources.end() || it->size != f.size() ||
        (!f.sha256().empty() && !it->sha256.empty() && it->sha256 != f.sha256()))
      return absl::DataLossError(absl::StrCat(
          "the server's result refers to input file '", paths::shown_location(f.name()),
          "', which differs from the one sent (or was not sent)"));
  }
  return absl::OkStatus();
}

Deadline deadline_in(std::optional<std::chrono::milliseconds> timeout) {
  if (!timeout) return std::nullopt;
  return std::chrono::system_clock::now() + *timeout;
}

absl::Status from_grpc(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

GraftClient::GraftClient(const std::string& target)
    : GraftClient(grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(),
                                            tls::default_channel_args())) {}

GraftClient::GraftClient(std::shared_ptr<grpc::Channel> channel)
    : channel_(std::move(channel)), stub_(v1::Graft::NewStub(channel_)) {}

absl::StatusOr<GraftClient> GraftClient::connect(const std::string& target,
                                                 const tls::ClientOptions& tls) {
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, tls::make_channel(target, tls));
  GraftClient client(std::move(channel));
  client.tls_ = tls.on();
  return client;
}

absl::Status GraftClient::status_of(const grpc::Status& status) const {
  absl::Status st = from_grpc(status);
  if (st.code() != absl::StatusCode::kUnavailable || !tls_) return st;
  return tls::explain_connection_failure(st, *tls_);
}

absl::StatusOr<OptimizeResult> GraftClient::optimize(
    std::string_view model, const v1::PipelineConfig& config,
    std::optional<std::chrono::milliseconds> timeout, const Progress& progress, size_t chunk_bytes,
    const ExternalFiles& external_files) {
  SendOptions options;
  options.deadline = deadline_in(timeout);
  options.progress = progress;
  options.chunk_bytes = chunk_bytes;
  return optimize(model, config, options, external_files);
}

absl::StatusOr<OptimizeResult> GraftClient::optimize(std::string_view model,
                                                     const v1::PipelineConfig& config,
                                                     const SendOptions& options,
                                                     const ExternalFiles& external_files) {
  return optimize(model, config, options, sources_of(external_files));
}

absl::StatusOr<OptimizeResult> GraftClient::optimize(std::string_view model,
                                                     const v1::PipelineConfig& config,
                                                     const SendOptions& options,
                                                     ExternalSources external_files) {
  if (options.chunk_bytes == 0) return absl::InvalidArgumentError("chunk size 0");
  for (const auto& f : external_files) RETURN_IF_ERROR(paths::check_location(f.name));
  RETURN_IF_ERROR(digest_sources(external_files));
  const std::string model_sha256 =
      options.model_sha256.empty() ? cache::sha256_hex(model) : options.model_sha256;
  const std::string digest = input_digest_of(model_sha256, external_files);
  if (options.lookup_first) {
    ASSIGN_OR_RETURN(
        std::optional<OptimizeResult> cached,
        fetch_cached(digest, config, options.deadline, options.progress, options.model_sink));
    if (cached) {
      RETURN_IF_ERROR(check_kept_files(*cached, external_files));
      return std::move(*cached);
    }
  }
  auto result = send(model, config, options, digest, external_files);
  if (result.ok()) RETURN_IF_ERROR(check_kept_files(*result, external_files));
  return result;
}

absl::StatusOr<std::optional<OptimizeResult>> GraftClient::fetch_cached(
    const std::string& model_sha256, const v1::PipelineConfig& config, Deadline deadline,
    const Progress& progress, const ModelSink& model_sink) {
  // Counts what reached the sink (on its thread; read once lookup() has joined it).
  uint64_t written = 0;
  ModelSink counted = model_sink;
  if (model_sink)
    counted.write = [&](std::string_view piece) {
      written += piece.size();
      return model_sink.write(piece);
    };
  auto found = lookup(model_sha256, config, /*return_result=*/true, deadline, progress, counted);
  if (found.ok() && found->cached && found->result) {
    found->result->from_lookup = true;
    return std::move(found->result);
  }
  if (!found.ok() && (found.status().code() == absl::StatusCode::kDeadlineExceeded ||
                      found.status().code() == absl::StatusCode::kDataLoss))
    return found.status();
  // Sending the model instead: what a Lookup that failed part-way wrote must go first.
  if (written > 0) {
    if (!model_sink.restart)
      return found.ok() ? absl::DataLossError("a Lookup answer ended part-way") : found.status();
    RETURN_IF_ERROR(model_sink.restart());
  }
  return std::nullopt;
}

absl::StatusOr<OptimizeResult> GraftClient::send(std::string_view model,
                                                 const v1::PipelineConfig& config,
                                                 const SendOptions& options,
                                                 const std::string& digest,
                                                 const ExternalSources& external_files) {
  grpc::ClientContext context;
  if (options.deadline) context.set_deadline(*options.deadline);
  context.AddMetadata(kModelDigestHeader, digest);
  auto stream = stub_->Optimize(&context);
  OptimizeResult result;
  const absl::Status read_error = write_request(context, stream.get(), model, config, options,
                                                external_files, &result.bytes_sent);
  stream->WritesDone();
  bool have_report = false;
  Receiver receiver(/*hash_model=*/false, options.model_sink);
  const absl::Status bad =
      read_response(context, stream.get(), options.progress, &receiver, &result, &have_report);
  grpc::Status finished = stream->Finish();
  RETURN_IF_ERROR(read_error);
  RETURN_IF_ERROR(bad);
  RETURN_IF_ERROR(status_of(finished));
  if (!have_report) return absl::DataLossError("the server sent no report");
  RETURN_IF_ERROR(receiver.finish(result));
  return result;
}

absl::StatusOr<LookupResult> GraftClient::lookup(const std::string& model_sha256,
                                                 const v1::PipelineConfig& config,
                                                 bool return_result, Deadline deadline,
                                                 const Progress& progress,
                                                 const ModelSink& model_sink) {
  grpc::ClientContext context;
  if (deadline) context.set_deadline(*deadline);
  context.AddMetadata(kModelDigestHeader, model_sha256);
  v1::LookupRequest request;
  request.set_model_sha256(model_sha256);
  *request.mutable_config() = config;
  request.set_return_result(return_result);
  auto reader = stub_->Lookup(&context, request);
  LookupResult out;
  OptimizeResult result;
  // A cached result may come from a shared tier: its digests are checked, not trusted.
  Receiver receiver(/*hash_model=*/true, model_sink);
  absl::Status bad;
  bool have_report = false;
  v1::LookupResponse msg;
  while (reader->Read(&msg)) {
    if (msg.kind_case() == v1::LookupResponse::kCached) out.cached = msg.cached();
    if (msg.has_chunk()) {
      if (bad.ok()) {
        bad = receiver.add(*msg.mutable_chunk());
        if (!bad.ok()) context.TryCancel();
      }
      if (progress) progress(false, receiver.model_bytes(), 0);
    }
    if (msg.has_report()) {
      result.report = std::move(*msg.mutable_report());
      have_report = true;
    }
  }
  grpc::Status finished = reader->Finish();
  RETURN_IF_ERROR(bad);
  RETURN_IF_ERROR(status_of(finished));
  if (have_report) {
    RETURN_IF_ERROR(receiver.finish(result));
    result.report.set_cache_hit(true);
    out.result = std::move(result);
  }
  return out;
}

absl::StatusOr<v1::ListPassesResponse> GraftClient::list_passes() {
  grpc::ClientContext context;
  v1::ListPassesResponse response;
  RETURN_IF_ERROR(status_of(stub_->ListPasses(&context, {}, &response)));
  return response;
}

absl::StatusOr<bool> GraftClient::serving() {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  RETURN_IF_ERROR(status_of(stub->Check(&context, request, &response)));
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING;
}

absl::StatusOr<std::vector<std::string>> GraftClient::reflected_services() {
  auto stub = grpc::reflection::v1alpha::ServerReflection::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  auto stream = stub->ServerReflectionInfo(&context);
  grpc::reflection::v1alpha::ServerReflectionRequest request;
  request.set_list_services("*");
  stream->Write(request);
  stream->WritesDone();
  std::vector<std::string> names;
  grpc::reflection::v1alpha::ServerReflectionResponse response;
  while (stream->Read(&response))
    for (const auto& s : response.list_services_response().service()) names.push_back(s.name());
  RETURN_IF_ERROR(status_of(stream->Finish()));
  return names;
}

}  // namespace graft::client
