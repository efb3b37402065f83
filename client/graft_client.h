// Client library for the graft.v1 service, used by the `graft` CLI and the load generator.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <absl/status/statusor.h>
#include <grpcpp/grpcpp.h>

#include "client/tls.h"
#include "graft/v1/graft.grpc.pb.h"

namespace graft::client {

// ONNX external-data files: (relative name as in the tensors' "location", bytes).
using ExternalFiles = std::vector<std::pair<std::string, std::string>>;

struct OptimizeResult {
  std::string model;
  ExternalFiles external_files;  // sent back after the model
  v1::OptimizeReport report;
  uint64_t bytes_sent = 0;      // model and external-data bytes uploaded (0 after a lookup hit)
  uint64_t bytes_received = 0;  // model and external-data bytes downloaded
  bool from_lookup = false;     // served by Lookup: the server had it cached, nothing uploaded
};

struct LookupResult {
  bool cached = false;
  std::optional<OptimizeResult> result;  // when asked for and cached
};

// Called with (bytes done, bytes total) while uploading (upload = true) and downloading.
using Progress = std::function<void(bool upload, uint64_t done, uint64_t total)>;

// gRPC metadata key every Optimize and Lookup call carries: the model's lowercase hex sha256,
// so a load balancer can route identical models to the same replica (whose cache has them).
inline constexpr char kModelDigestHeader[] = "graft-model-sha256";

// When a call (or a sequence of calls, e.g. a Lookup and then the upload) must have ended;
// none: no limit.
using Deadline = std::optional<std::chrono::system_clock::time_point>;
// The deadline `timeout` from now (none for none).
Deadline deadline_in(std::optional<std::chrono::milliseconds> timeout);

// How optimize() sends a model.
struct SendOptions {
  Deadline deadline;  // for the Lookup and the upload together
  Progress progress;
  size_t chunk_bytes = 1 << 20;
  // Ask Lookup(digest, config) first: on a hit the result is downloaded and nothing is
  // uploaded; on a miss (or a Lookup error other than a deadline or a result that does not
  // match its report's size and digest, DataLoss) the model is sent. Skipped
  // for models with external data, whose results the server does not cache.
  bool lookup_first = false;
  // Lowercase hex sha256 of the model's bytes; computed when empty.
  std::string model_sha256;
};

class GraftClient {
 public:
  // Plaintext.
  explicit GraftClient(const std::string& target);
  explicit GraftClient(std::shared_ptr<grpc::Channel> channel);
  // Plaintext, or TLS when `tls.on()`. Errors are tls::make_channel's: NotFound or
  // PermissionDenied for a file that cannot be read, InvalidArgument for one that is not PEM, a
  // key that does not match its certificate, or a certificate without its key.
  static absl::StatusOr<GraftClient> connect(const std::string& target,
                                             const tls::ClientOptions& tls);

  absl::StatusOr<OptimizeResult> optimize(std::string_view model, const v1::PipelineConfig& config,
                                          const SendOptions& options,
                                          const ExternalFiles& external_files = {});
  // optimize() without a lookup first.
  absl::StatusOr<OptimizeResult> optimize(std::string_view model, const v1::PipelineConfig& config,
                                          std::optional<std::chrono::milliseconds> timeout = {},
                                          const Progress& progress = nullptr,
                                          size_t chunk_bytes = 1 << 20,
                                          const ExternalFiles& external_files = {});
  absl::StatusOr<LookupResult> lookup(const std::string& model_sha256,
                                      const v1::PipelineConfig& config, bool return_result,
                                      Deadline deadline = {}, const Progress& progress = nullptr);
  // The lookup-first step: the cached result if the server has one; nullopt when it has none or
  // the Lookup failed in a way that sending the model can get past (an older server, say); an
  // error when the deadline passed or the answer did not match its report (DataLoss), which
  // sending would not help. optimize() with lookup_first, and callers that ask before they
  // have read the model (the CLI), use it.
  absl::StatusOr<std::optional<OptimizeResult>> fetch_cached(const std::string& model_sha256,
                                                             const v1::PipelineConfig& config,
                                                             Deadline deadline,
                                                             const Progress& progress = nullptr);
  absl::StatusOr<v1::ListPassesResponse> list_passes();
  // grpc.health.v1 status of the whole server ("" service): true when SERVING.
  absl::StatusOr<bool> serving();
  // Services the server lists through reflection (what `grpcurl list` shows).
  absl::StatusOr<std::vector<std::string>> reflected_services();

 private:
  // from_grpc, with a hint when the connection failed (e.g. a plaintext client and a TLS server).
  absl::Status status_of(const grpc::Status& status) const;
  // The upload: Optimize with the model (and its files) streamed in chunks.
  absl::StatusOr<OptimizeResult> send(std::string_view model, const v1::PipelineConfig& config,
                                      const SendOptions& options, const std::string& digest,
                                      const ExternalFiles& external_files);

  std::optional<bool> tls_;  // unknown for a channel made elsewhere: then no hint
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Graft::Stub> stub_;
};

absl::Status from_grpc(const grpc::Status& status);

}  // namespace graft::client
