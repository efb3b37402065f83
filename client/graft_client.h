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

#include "common/tls.h"
#include "graft/v1/graft.grpc.pb.h"

namespace graft::client {

// ONNX external-data files: (relative name as in the tensors' "location", bytes).
using ExternalFiles = std::vector<std::pair<std::string, std::string>>;

// An external-data file to send: its location, and where its bytes are.
struct ExternalSource {
  std::string name;    // the location, as the tensors write it
  std::string folder;  // when not empty, the bytes are folder/name, read in pieces (never whole)
                       // under paths::open_beneath's rules...
  std::string bytes;   // ...otherwise these
  uint64_t size = 0;   // filled in by digest_sources()
  std::string sha256;  // lowercase hex; filled in by digest_sources() when empty
};
using ExternalSources = std::vector<ExternalSource>;
ExternalSources sources_of(const ExternalFiles& files);

// Fills in each source's size and sha256 (reading a file in pieces, once). Errors are
// open_beneath's and read errors (DataLoss) naming the file. `progress` (done, total) as it goes.
// `digest_cache`: a folder where each file's digest is remembered and recalled while the file
// is unchanged (client/file_digest.h; empty: none); `recall` false hashes every file again.
absl::Status digest_sources(ExternalSources& sources,
                            const std::function<void(uint64_t, uint64_t)>& progress = nullptr,
                            const std::string& digest_cache = {}, bool recall = true);
// The input digest (cache::input_digest) of a model and its digested sources.
std::string input_digest_of(const std::string& model_sha256, const ExternalSources& sources);

struct OptimizeResult {
  std::string model;
  // External-data files the server wrote for the result (new weights), received after the
  // model; report.external_files lists them with the input's files the result still references
  // unchanged (from_input), which are not sent: `kept_files` names those.
  ExternalFiles external_files;
  std::vector<std::string> kept_files;
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

// Where a result's model goes as it arrives, piece by piece, instead of OptimizeResult::model
// (which then stays empty): e.g. a paths::AtomicFileWriter, so a download is never held whole.
// `write` is called on a thread of the client's own while the next pieces are received; its
// error stops the download and is the call's result. A result that fails its checks may have
// been partly written: the caller commits it only when the call succeeded. `restart` drops what
// was written: optimize() calls it before sending the model when a Lookup that failed part-way
// had written some (without `restart`, that Lookup's error is the result).
struct ModelSink {
  std::function<absl::Status(std::string_view)> write;
  std::function<absl::Status()> restart;
  explicit operator bool() const { return static_cast<bool>(write); }
};

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
  // Ask Lookup(input digest, config) first: on a hit the result is downloaded and nothing is
  // uploaded; on a miss (or a Lookup error other than a deadline or a result that does not
  // match its report's sizes and digests, DataLoss) the model and its files are sent.
  bool lookup_first = false;
  // Lowercase hex sha256 of the model's bytes; computed when empty.
  std::string model_sha256;
  // When set, the result's model goes here instead of OptimizeResult::model.
  ModelSink model_sink;
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

  // Sends the model and its external-data files (read in pieces from disk when they name a
  // folder). The result's kept_files must be among `external_files` with the same digests
  // (DataLoss otherwise).
  absl::StatusOr<OptimizeResult> optimize(std::string_view model, const v1::PipelineConfig& config,
                                          const SendOptions& options,
                                          ExternalSources external_files);
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
                                      Deadline deadline = {}, const Progress& progress = nullptr,
                                      const ModelSink& model_sink = {});
  // The lookup-first step: the cached result if the server has one; nullopt when it has none or
  // the Lookup failed in a way that sending the model can get past (an older server, say); an
  // error when the deadline passed or the answer did not match its report (DataLoss), which
  // sending would not help. optimize() with lookup_first, and callers that ask before they
  // have read the model (the CLI), use it.
  absl::StatusOr<std::optional<OptimizeResult>> fetch_cached(const std::string& model_sha256,
                                                             const v1::PipelineConfig& config,
                                                             Deadline deadline,
                                                             const Progress& progress = nullptr,
                                                             const ModelSink& model_sink = {});
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
                                      const ExternalSources& external_files);

  std::optional<bool> tls_;  // unknown for a channel made elsewhere: then no hint
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Graft::Stub> stub_;
};

absl::Status from_grpc(const grpc::Status& status);

// A result's kept_files must be files that were sent (`sources`, digested), unchanged: the
// report's from_input entries match them by name, size and sha256. DataLoss otherwise.
absl::Status check_kept_files(const OptimizeResult& result, const ExternalSources& sources);

}  // namespace graft::client
