// TLS for graft's gRPC channels, and the PEM checks graftd runs on its own files at start-up:
// both sides read certificates the same way, so a file one accepts the other accepts too.
#pragma once

#include <ctime>
#include <memory>
#include <string>

#include <absl/status/statusor.h>
#include <grpcpp/grpcpp.h>

namespace graft::tls {

// What a client needs to speak TLS to graftd. Any file set implies TLS.
struct ClientOptions {
  bool enabled = false;
  std::string ca_file;      // PEM roots that sign the server's certificate; empty = system roots
  std::string cert_file;    // client certificate chain, for servers that require one (mTLS)
  std::string key_file;     // its private key
  std::string server_name;  // name checked against the server's certificate instead of the host
  bool on() const {
    return enabled || !ca_file.empty() || !cert_file.empty() || !key_file.empty() ||
           !server_name.empty();
  }
};

// The first certificate of a file, for logs.
struct CertificateInfo {
  std::string subject;  // RFC 2253, e.g. "CN=graftd"
  std::time_t not_before = 0, not_after = 0;
  int count = 0;  // certificates in the file (a chain or a CA bundle)
};

// Reads a PEM file whole (at most 4 MiB). Errors name `what` and the path: NotFound or
// PermissionDenied when the file cannot be read, InvalidArgument when it is too large.
absl::StatusOr<std::string> read_pem_file(const std::string& path, const std::string& what);
// InvalidArgument unless `pem` holds at least one certificate.
absl::Status check_certificates(const std::string& pem, const std::string& path,
                                const std::string& what, CertificateInfo* info = nullptr);
// InvalidArgument unless `pem` holds an unencrypted private key: graftd and the CLI run
// unattended, and a passphrase prompt would hang them.
absl::Status check_private_key(const std::string& pem, const std::string& path,
                               const std::string& what);
// InvalidArgument unless the key belongs to the chain's first certificate.
absl::Status check_key_matches(const std::string& cert_pem, const std::string& key_pem,
                               const std::string& cert_path, const std::string& key_path);
// read_pem_file, then the check.
absl::StatusOr<std::string> read_certificates(const std::string& path, const std::string& what,
                                              CertificateInfo* info = nullptr);
absl::StatusOr<std::string> read_private_key(const std::string& path, const std::string& what);

// "2026-01-31T12:00:00Z"
std::string utc(std::time_t t);

// The channel arguments every graft client uses (message sizes for 1-4 MiB chunks).
grpc::ChannelArguments default_channel_args();

// A channel to `target`, plaintext unless `options.on()`. Reads and checks the files first, so
// a wrong path fails here with the read_* errors above rather than as a failed handshake.
absl::StatusOr<std::shared_ptr<grpc::Channel>> make_channel(
    const std::string& target, const ClientOptions& options,
    grpc::ChannelArguments args = default_channel_args());

// gRPC reports a failed TLS handshake as UNAVAILABLE with OpenSSL's words, or only "Socket
// closed" when the server hung up; this appends what the user can do about it (`tls`: whether
// the client spoke TLS). Other statuses come back unchanged.
absl::Status explain_connection_failure(const absl::Status& status, bool tls);

// Fills unset fields from GRAFT_TLS (1/true/yes), GRAFT_TLS_CA, GRAFT_TLS_CERT, GRAFT_TLS_KEY
// and GRAFT_TLS_SERVER_NAME, as GRAFT_SERVER backs --server.
void apply_environment(ClientOptions* options);

}  // namespace graft::tls
