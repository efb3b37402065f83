#include "client/graft_client.h"

#include <algorithm>
#include <set>

#include <absl/strings/str_cat.h>

#include "core/cache/digest.h"
#include "core/paths/beneath.h"
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

// The model received must be as long as the report says; when `sha256` is given (a cached
// result, possibly from a shared tier) its digest must match the report's too.
absl::Status check_received(const OptimizeResult& r, const std::string* sha256 = nullptr) {
  if (r.model.size() != r.report.output_bytes())
    return absl::DataLossError("received fewer model bytes than the report announces");
  if (sha256 && !r.report.output_sha256().empty() && r.report.output_sha256() != *sha256)
    return absl::DataLossError("the received model does not match the digest in its report");
  return absl::OkStatus();
}

}  // namespace

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
  auto channel = tls::make_channel(target, tls);
  if (!channel.ok()) return channel.status();
  GraftClient client(std::move(*channel));
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
  if (options.chunk_bytes == 0) return absl::InvalidArgumentError("chunk size 0");
  for (const auto& [name, bytes] : external_files)
    if (auto st = paths::check_location(name); !st.ok()) return st;
  const std::string digest =
      options.model_sha256.empty() ? cache::sha256_hex(model) : options.model_sha256;
  if (options.lookup_first && external_files.empty()) {
    auto cached = fetch_cached(digest, config, options.deadline, options.progress);
    if (!cached.ok()) return cached.status();
    if (*cached) return std::move(**cached);
  }
  return send(model, config, options, digest, external_files);
}

absl::StatusOr<std::optional<OptimizeResult>> GraftClient::fetch_cached(
    const std::string& model_sha256, const v1::PipelineConfig& config, Deadline deadline,
    const Progress& progress) {
  auto found = lookup(model_sha256, config, /*return_result=*/true, deadline, progress);
  if (found.ok() && found->cached && found->result) {
    found->result->from_lookup = true;
    return std::move(found->result);
  }
  if (!found.ok() && (found.status().code() == absl::StatusCode::kDeadlineExceeded ||
                      found.status().code() == absl::StatusCode::kDataLoss))
    return found.status();
  return std::nullopt;
}

absl::StatusOr<OptimizeResult> GraftClient::send(std::string_view model,
                                                 const v1::PipelineConfig& config,
                                                 const SendOptions& options,
                                                 const std::string& digest,
                                                 const ExternalFiles& external_files) {
  const auto& progress = options.progress;
  const size_t chunk_bytes = options.chunk_bytes;
  grpc::ClientContext context;
  if (options.deadline) context.set_deadline(*options.deadline);
  context.AddMetadata(kModelDigestHeader, digest);
  auto stream = stub_->Optimize(&context);
  v1::OptimizeRequest start;
  *start.mutable_start()->mutable_config() = config;
  start.mutable_start()->set_model_size(model.size());
  uint64_t total = model.size(), sent = 0;
  for (const auto& [name, bytes] : external_files) {
    auto* f = start.mutable_start()->add_external_files();
    f->set_name(name);
    f->set_size(bytes.size());
    total += bytes.size();
  }
  bool open = stream->Write(start);
  auto upload = [&](std::string_view bytes, const std::string& file) {
    for (size_t off = 0; open && off < bytes.size(); off += chunk_bytes) {
      v1::OptimizeRequest chunk;
      chunk.mutable_chunk()->set_data(std::string(bytes.substr(off, chunk_bytes)));
      if (!file.empty()) chunk.mutable_chunk()->set_file(file);
      open = stream->Write(chunk);
      sent += std::min(chunk_bytes, bytes.size() - off);
      if (progress) progress(true, sent, total);
    }
  };
  upload(model, "");
  for (const auto& [name, bytes] : external_files) upload(bytes, name);
  stream->WritesDone();
  OptimizeResult result;
  result.bytes_sent = sent;
  bool have_report = false;
  // Names the server sends back are checked by the rule the upload had to pass, before anyone
  // can use them as paths; each file comes in one run of chunks.
  absl::Status bad_file;
  std::set<std::string> names;
  v1::OptimizeResponse msg;
  while (stream->Read(&msg)) {
    if (msg.has_chunk()) {
      const std::string& file = msg.chunk().file();
      if (file.empty()) {
        reserve_for(result.model, msg.chunk());
        result.model += msg.chunk().data();
      } else if (result.external_files.empty() || result.external_files.back().first != file) {
        if (auto st = paths::check_location(file); !st.ok() && bad_file.ok()) {
          bad_file =
              absl::InvalidArgumentError(absl::StrCat("the server returned an ", st.message()));
          context.TryCancel();
        } else if (!names.insert(file).second && bad_file.ok()) {
          bad_file = absl::DataLossError(absl::StrCat("the server returned external file '",
                                                      paths::shown_location(file), "' twice"));
          context.TryCancel();
        }
        if (bad_file.ok()) {
          result.external_files.emplace_back(file, std::string());
          reserve_for(result.external_files.back().second, msg.chunk());
          result.external_files.back().second += msg.chunk().data();
        }
      } else {
        result.external_files.back().second += msg.chunk().data();
      }
      if (progress) progress(false, result.model.size(), 0);
    } else if (msg.has_report()) {
      result.report = std::move(*msg.mutable_report());
      have_report = true;
    }
  }
  grpc::Status finished = stream->Finish();
  if (!bad_file.ok()) return bad_file;
  if (auto st = status_of(finished); !st.ok()) return st;
  if (!have_report) return absl::DataLossError("the server sent no report");
  if (auto st = check_received(result); !st.ok()) return st;
  result.bytes_received = result.model.size();
  for (const auto& [name, bytes] : result.external_files) result.bytes_received += bytes.size();
  return result;
}

absl::StatusOr<LookupResult> GraftClient::lookup(const std::string& model_sha256,
                                                 const v1::PipelineConfig& config,
                                                 bool return_result, Deadline deadline,
                                                 const Progress& progress) {
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
  cache::Sha256 received;  // of the model's bytes, checked against the report
  bool have_report = false;
  v1::LookupResponse msg;
  while (reader->Read(&msg)) {
    if (msg.kind_case() == v1::LookupResponse::kCached) out.cached = msg.cached();
    if (msg.has_chunk()) {
      reserve_for(result.model, msg.chunk());
      result.model += msg.chunk().data();
      received.update(msg.chunk().data());  // while the next chunk is on its way
      if (progress) progress(false, result.model.size(), 0);
    }
    if (msg.has_report()) {
      result.report = std::move(*msg.mutable_report());
      have_report = true;
    }
  }
  if (auto st = status_of(reader->Finish()); !st.ok()) return st;
  if (have_report) {
    // A cached result may come from a shared tier: its digest is checked, not trusted.
    const std::string sha256 = received.hex_digest();
    if (auto st = check_received(result, &sha256); !st.ok()) return st;
    result.bytes_received = result.model.size();
    result.report.set_cache_hit(true);
    out.result = std::move(result);
  }
  return out;
}

absl::StatusOr<v1::ListPassesResponse> GraftClient::list_passes() {
  grpc::ClientContext context;
  v1::ListPassesResponse response;
  if (auto st = status_of(stub_->ListPasses(&context, {}, &response)); !st.ok()) return st;
  return response;
}

absl::StatusOr<bool> GraftClient::serving() {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  if (auto st = status_of(stub->Check(&context, request, &response)); !st.ok()) return st;
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
  if (auto st = status_of(stream->Finish()); !st.ok()) return st;
  return names;
}

}  // namespace graft::client
