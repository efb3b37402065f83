#include "client/cli/options.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "client/exit_codes.h"
#include "common/report.h"
#include "core/paths/files.h"

namespace graft::cli {

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int fail(int code, const std::string& msg) {
  std::cerr << "graft: " << report::terminal_safe(msg, /*keep_newlines=*/true) << "\n";
  return code;
}

bool read_input(const std::string& path, std::string* bytes, std::string* error) {
  auto read =
      path == "-" ? paths::read_all(STDIN_FILENO, "standard input") : paths::read_file(path);
  if (!read.ok()) {
    *error = std::string(read.status().message());
    return false;
  }
  *bytes = std::move(*read);
  return true;
}

bool write_output(const std::string& path, const std::string& bytes, std::string* error) {
  if (path == "-") std::cout.flush();  // what was printed through std::cout goes first
  absl::Status st = path == "-" ? paths::write_all(STDOUT_FILENO, bytes, "standard output")
                                : paths::write_file_atomic(path, bytes);
  if (!st.ok()) *error = std::string(st.message());
  return st.ok();
}

int path_exit_code(const absl::Status& st) {
  return st.code() == absl::StatusCode::kInvalidArgument ? kBadModel : kIoError;
}

std::filesystem::path folder_of(const std::string& path) {
  if (path == "-" || path.empty()) return std::filesystem::current_path();
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::filesystem::current_path() : parent;
}

void add_remote_options(CLI::App* cmd, RemoteOptions* remote) {
  cmd->add_option("--server", remote->server, "graftd address HOST:PORT (default: $GRAFT_SERVER)");
  cmd->add_flag("--tls", remote->tls.enabled,
                "connect with TLS; implied by the four options below (default: $GRAFT_TLS)");
  cmd->add_option("--ca", remote->tls.ca_file,
                  "PEM CA bundle that signs the server's certificate (default: $GRAFT_TLS_CA, "
                  "else the system's trusted CAs)");
  cmd->add_option("--cert", remote->tls.cert_file,
                  "PEM client certificate, for servers that require one (mTLS) (default: "
                  "$GRAFT_TLS_CERT)");
  cmd->add_option("--key", remote->tls.key_file,
                  "PEM private key of --cert, unencrypted (default: $GRAFT_TLS_KEY)");
  cmd->add_option("--server-name", remote->tls.server_name,
                  "name the server's certificate must carry, when it differs from the host in "
                  "--server (default: $GRAFT_TLS_SERVER_NAME)");
}

std::string resolve_server(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = std::getenv("GRAFT_SERVER");
  return env ? env : "";
}

absl::StatusOr<client::GraftClient> connect(const std::string& server, tls::ClientOptions tls) {
  tls::apply_environment(&tls);
  return client::GraftClient::connect(server, tls);
}

int fail_connect(const absl::Status& st) {
  bool unreadable =
      st.code() == absl::StatusCode::kNotFound || st.code() == absl::StatusCode::kPermissionDenied;
  return fail(unreadable ? kIoError : kUsage, std::string(st.message()));
}

int remote_exit_code(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument: {
      // The server's model errors, and external-data locations (the model's, or names the
      // server returned) that break the path rules.
      const std::string msg(st.message());
      return msg.find("invalid model") != std::string::npos ||
                     msg.find("invalid external data location") != std::string::npos
                 ? kBadModel
                 : kUsage;
    }
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kCancelled:
      return kServer;
    default:
      return kInternal;
  }
}

int fail_remote(const absl::Status& st) {
  return fail(remote_exit_code(st),
              std::string(absl::StatusCodeToString(st.code())) + ": " + std::string(st.message()));
}

client::Progress progress_bar(uint64_t size) {
  if (!::isatty(2) || size < (4u << 20)) return nullptr;
  return [](bool upload, uint64_t done, uint64_t total) {
    if (upload && total > 0) {
      int pct = static_cast<int>(100 * done / total);
      std::fprintf(stderr, "\rupload   [%-40s] %3d%% %.1f MiB",
                   std::string(pct * 40 / 100, '#').c_str(), pct, done / 1048576.0);
      if (done == total) std::fprintf(stderr, "\n");
    } else if (!upload) {
      std::fprintf(stderr, "\rdownload %.1f MiB", done / 1048576.0);
    }
    std::fflush(stderr);
  };
}

void add_quiet_flag(CLI::App* cmd, bool* quiet) {
  cmd->add_flag("-q,--quiet", *quiet, "do not print the per-pass table");
}

void add_rehash_flag(CLI::App* cmd, bool* rehash) {
  cmd->add_flag("--rehash", *rehash,
                "hash the model and its files again instead of recalling the digests remembered "
                "for them in $GRAFT_DIGEST_CACHE (default ~/.cache/graft/digests; kept while a "
                "file's size, modification time and inode stay the same)");
}

}  // namespace graft::cli
