// graftd's TLS: PEM files from the config, checked before they are used and re-read while
// graftd runs, so a renewed certificate is served without a restart.
//
// gRPC's own watcher (grpc::experimental::FileWatcherCertificateProvider) installs whatever the
// files hold: a half-written rotation or a key that does not match its certificate makes every
// later handshake fail. So graftd reads the configured files itself, every
// tls_reload_interval_seconds and on SIGHUP, checks them (PEM, key unencrypted and matching the
// certificate), and hands gRPC only checked copies, through private in-memory files that are
// swapped whole. A bad rotation is logged and the previous certificate stays in use.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <absl/status/statusor.h>
#include <grpcpp/security/server_credentials.h>

#include "server/config.h"

namespace graft::server {

class TlsFiles {
 public:
  // Reads and checks the configured files; the error names the file and what is wrong with it.
  // Call only when config.tls().
  static absl::StatusOr<std::unique_ptr<TlsFiles>> load(const ServerConfig& config);
  ~TlsFiles();

  // Credentials for `listen` that follow reloads (new connections get the new certificate).
  std::shared_ptr<grpc::ServerCredentials> credentials() const;

  // One line for the start-up log: the certificate's subject and expiry, client auth, the CAs.
  std::string summary() const;
  // Non-empty when the certificate served is expired or not yet valid.
  std::string validity_warning() const;

  // Reads the files again and installs them if they changed and are valid. Logs the outcome
  // when they changed, or always when `always_log` (SIGHUP).
  void reload(bool always_log);
  // Calls reload every tls_reload_interval_seconds on a thread of its own until destroyed.
  void start_watching();

 private:
  struct Contents {
    std::string cert, key, ca;
    bool operator==(const Contents&) const = default;
  };
  explicit TlsFiles(const ServerConfig& config);
  absl::StatusOr<Contents> read() const;
  // Checks `c` and describes it: `summary` for the log, `served` (subject and expiry, to name
  // what stays in use when a reload is refused), `warning` when it is expired.
  absl::Status describe(const Contents& c, std::string* summary, std::string* served,
                        std::string* warning) const;
  absl::Status install(const Contents& c);

  ServerConfig config_;
  int identity_fd_ = -1;  // memfd: certificate chain then key, read by gRPC's watcher
  int ca_fd_ = -1;        // memfd: client CA bundle (mTLS only)
  mutable std::mutex mu_;
  Contents installed_;  // what gRPC serves
  Contents last_seen_;  // what the files held at the last read, valid or not
  std::string last_error_;
  std::string summary_, served_, warning_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread watcher_;
};

}  // namespace graft::server
