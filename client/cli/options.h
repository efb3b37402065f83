// What graft's subcommands share: the flags of a command that calls a server (--server and the
// TLS options) and a few others, failures reported as exit codes (client/exit_codes.h), and
// reading and writing the files they take and make.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <CLI/CLI.hpp>

#include "client/graft_client.h"
#include "common/tls.h"

namespace graft::cli {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t);

// Prints "graft: <msg>" on standard error and returns `code`. Messages may quote the model's
// names or a server's text: no terminal escapes get through.
int fail(int code, const std::string& msg);

// The whole input: a file read with one allocation of its size, or standard input ("-") in
// doubling blocks (paths::read_all).
bool read_input(const std::string& path, std::string* bytes, std::string* error);
// Standard output ("-") in as few writes as it takes, or a file written beside its target and
// renamed over it, so a failed run never leaves a half-written model.
bool write_output(const std::string& path, const std::string& bytes, std::string* error);
// Exit code for an external-data read or write: a location that breaks the rules (outside the
// folder, not normalised, a symbolic link) is a bad model, anything else an I/O error.
int path_exit_code(const absl::Status& st);
// The folder of the model file at `path`: the current folder for standard input.
std::filesystem::path folder_of(const std::string& path);

// The flags of a command that calls a server.
struct RemoteOptions {
  std::string server;  // HOST:PORT; GRAFT_SERVER by default
  // TLS from the flags; GRAFT_TLS* fill in what they leave unset.
  tls::ClientOptions tls;
};

// --server, --tls, --ca, --cert, --key, --server-name.
void add_remote_options(CLI::App* cmd, RemoteOptions* remote);
// The names add_remote_options gives its flags.
inline constexpr const char* kRemoteFlags[] = {"--server", "--tls", "--ca",
                                               "--cert",   "--key", "--server-name"};

// The --server flag, else GRAFT_SERVER, else empty.
std::string resolve_server(const std::string& flag);
// A client for `server`, with TLS from the flags and GRAFT_TLS* for what they leave unset. A
// TLS file that cannot be read is exit 4, one that is not usable PEM (or a --cert without
// --key) is exit 2 (fail_connect).
absl::StatusOr<client::GraftClient> connect(const std::string& server, tls::ClientOptions tls);
int fail_connect(const absl::Status& st);
// Exit code for an error status from the server, and the failure reported with it.
int remote_exit_code(const absl::Status& st);
int fail_remote(const absl::Status& st);

// A one-line progress bar on stderr, only when stderr is a terminal and the model is large.
client::Progress progress_bar(uint64_t size);

// -q,--quiet.
void add_quiet_flag(CLI::App* cmd, bool* quiet);
// --rehash.
void add_rehash_flag(CLI::App* cmd, bool* rehash);

}  // namespace graft::cli
