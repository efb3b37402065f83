#include "server/tls.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

#include <absl/strings/str_cat.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "common/tls.h"
#include "core/base/status.h"
#include "server/request_log.h"

namespace graft::server {

namespace {

// How often gRPC's watcher re-reads graftd's in-memory copies: a read of two small buffers, so
// a reload (timer or SIGHUP) reaches new handshakes within about a second.
constexpr unsigned kCopyRefreshSeconds = 1;

std::string fd_path(int fd) { return absl::StrCat("/proc/self/fd/", fd); }

// Puts `content` in a new in-memory file and makes `*fd` refer to it. dup3 swaps what the
// descriptor number refers to in one step, so a reader of /proc/self/fd/N opens either the
// old file or the new one, never a partly written one.
absl::Status replace_memfd(int* fd, const char* name, const std::string& content) {
  int tmp = ::memfd_create(name, MFD_CLOEXEC);
  if (tmp < 0) return absl::InternalError(absl::StrCat("memfd_create: ", std::strerror(errno)));
  for (size_t off = 0; off < content.size();) {
    ssize_t n = ::write(tmp, content.data() + off, content.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string error = std::strerror(errno);
      ::close(tmp);
      return absl::InternalError(absl::StrCat("writing the in-memory TLS copy: ", error));
    }
    off += static_cast<size_t>(n);
  }
  if (*fd < 0) {
    *fd = tmp;
    return absl::OkStatus();
  }
  int rc = ::dup3(tmp, *fd, O_CLOEXEC);
  std::string error = rc < 0 ? std::strerror(errno) : "";
  ::close(tmp);
  if (rc < 0) return absl::InternalError(absl::StrCat("dup3: ", error));
  return absl::OkStatus();
}

}  // namespace

TlsFiles::TlsFiles(const ServerConfig& config) : config_(config) {}

TlsFiles::~TlsFiles() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  // The server, whose watcher reads these, is gone by now (main destroys it first).
  if (identity_fd_ >= 0) ::close(identity_fd_);
  if (ca_fd_ >= 0) ::close(ca_fd_);
}

absl::StatusOr<TlsFiles::Contents> TlsFiles::read() const {
  Contents c;
  ASSIGN_OR_RETURN(c.cert, tls::read_pem_file(config_.tls_cert_file, "tls_cert_file"));
  ASSIGN_OR_RETURN(c.key, tls::read_pem_file(config_.tls_key_file, "tls_key_file"));
  if (!config_.tls_client_ca_file.empty()) {
    ASSIGN_OR_RETURN(c.ca, tls::read_pem_file(config_.tls_client_ca_file, "tls_client_ca_file"));
  }
  return c;
}

absl::Status TlsFiles::describe(const Contents& c, std::string* summary, std::string* served,
                                std::string* warning) const {
  const ServerConfig& k = config_;
  tls::CertificateInfo cert;
  RETURN_IF_ERROR(tls::check_certificates(c.cert, k.tls_cert_file, "tls_cert_file", &cert));
  RETURN_IF_ERROR(tls::check_private_key(c.key, k.tls_key_file, "tls_key_file"));
  RETURN_IF_ERROR(tls::check_key_matches(c.cert, c.key, k.tls_cert_file, k.tls_key_file));
  *served = absl::StrCat(cert.subject, ", valid until ", tls::utc(cert.not_after));
  *summary = absl::StrCat("certificate ", cert.subject, " (", cert.count,
                          cert.count == 1 ? " certificate" : " certificates in the chain",
                          ") valid until ", tls::utc(cert.not_after), "; client certificates ",
                          k.tls_client_auth);
  if (!k.tls_client_ca_file.empty()) {
    tls::CertificateInfo ca;
    RETURN_IF_ERROR(tls::check_certificates(c.ca, k.tls_client_ca_file, "tls_client_ca_file", &ca));
    absl::StrAppend(summary, " (", ca.count, ca.count == 1 ? " CA: " : " CAs: ", ca.subject,
                    ca.count > 1 ? ", ..." : "", ")");
  }
  absl::StrAppend(summary, "; files re-read every ", k.tls_reload_interval_seconds,
                  " s and on SIGHUP");
  // Served anyway: refusing it would not make it valid, and a renewed one is picked up.
  const std::time_t now = std::time(nullptr);
  warning->clear();
  if (cert.not_after != 0 && now > cert.not_after)
    *warning = absl::StrCat("the certificate ", k.tls_cert_file, " expired at ",
                            tls::utc(cert.not_after), ": clients will refuse it");
  else if (cert.not_before != 0 && now < cert.not_before)
    *warning = absl::StrCat("the certificate ", k.tls_cert_file, " is not valid before ",
                            tls::utc(cert.not_before), ": clients will refuse it");
  return absl::OkStatus();
}

absl::Status TlsFiles::install(const Contents& c) {
  // The chain, then the key, in one file: gRPC reads key and chain from the same path (each
  // parse skips the other's PEM blocks), so it can never pair a new key with an old chain.
  std::string identity = c.cert;
  if (!identity.empty() && identity.back() != '\n') identity += '\n';
  identity += c.key;
  RETURN_IF_ERROR(replace_memfd(&identity_fd_, "graftd-tls-identity", identity));
  if (!config_.tls_client_ca_file.empty())
    RETURN_IF_ERROR(replace_memfd(&ca_fd_, "graftd-tls-client-ca", c.ca));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<TlsFiles>> TlsFiles::load(const ServerConfig& config) {
  std::unique_ptr<TlsFiles> files(new TlsFiles(config));
  ASSIGN_OR_RETURN(Contents contents, files->read());
  RETURN_IF_ERROR(files->describe(contents, &files->summary_, &files->served_, &files->warning_));
  RETURN_IF_ERROR(files->install(contents));
  files->installed_ = files->last_seen_ = std::move(contents);
  return files;
}

std::shared_ptr<grpc::ServerCredentials> TlsFiles::credentials() const {
  namespace ex = grpc::experimental;
  const std::string identity = fd_path(identity_fd_);
  auto provider = std::make_shared<ex::FileWatcherCertificateProvider>(
      identity, identity, ca_fd_ >= 0 ? fd_path(ca_fd_) : "", kCopyRefreshSeconds);
  ex::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (config_.tls_client_auth == "none") {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  } else {
    options.watch_root_certs();
    options.set_cert_request_type(config_.tls_client_auth == "require"
                                      ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                      : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return ex::TlsServerCredentials(options);
}

std::string TlsFiles::summary() const {
  std::lock_guard lock(mu_);
  return "tls: " + summary_;
}

std::string TlsFiles::validity_warning() const {
  std::lock_guard lock(mu_);
  return warning_.empty() ? "" : "tls: " + warning_;
}

void TlsFiles::reload(bool always_log) {
  std::lock_guard lock(mu_);
  const char* why = always_log ? "tls: SIGHUP: " : "tls: ";
  auto refuse = [&](const absl::Status& st) {
    std::string error(st.message());
    if (always_log || error != last_error_)
      log_event(
          spdlog::level::err,
          absl::StrCat(why, error, "; still serving the previous certificate (", served_, ")"));
    last_error_ = error;
  };
  auto contents = read();
  if (!contents.ok()) {
    last_seen_ = {};  // so the same files are looked at again once they are readable
    return refuse(contents.status());
  }
  if (*contents == last_seen_ && !always_log) return;
  last_seen_ = *contents;
  std::string summary, served, warning;
  if (auto st = describe(*contents, &summary, &served, &warning); !st.ok()) return refuse(st);
  const bool recovered = !last_error_.empty();
  last_error_.clear();
  if (*contents == installed_) {
    if (always_log || recovered)
      log_event(spdlog::level::info, absl::StrCat(why, "files valid and unchanged: ", summary_));
    return;
  }
  if (auto st = install(*contents); !st.ok()) return refuse(st);
  installed_ = std::move(*contents);
  summary_ = std::move(summary);
  served_ = std::move(served);
  warning_ = std::move(warning);
  log_event(spdlog::level::info, absl::StrCat(why, "reloaded, new connections get it within ",
                                              kCopyRefreshSeconds, " s: ", summary_));
  if (!warning_.empty()) log_event(spdlog::level::warn, absl::StrCat(why, warning_));
}

void TlsFiles::start_watching() {
  watcher_ = std::thread([this] {
    const auto interval = std::chrono::seconds(config_.tls_reload_interval_seconds);
    std::unique_lock lock(mu_);
    while (!wake_.wait_for(lock, interval, [this] { return stop_; })) {
      lock.unlock();
      reload(false);
      lock.lock();
    }
  });
}

}  // namespace graft::server
