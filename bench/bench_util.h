// What the programs under bench/ that drive a real graftd share: graftd as a child process on
// kernel-chosen loopback ports, one connection per simulated client, a /metrics scrape, and
// the percentile and Markdown-table helpers of their reports.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "client/graft_client.h"
#include "common/tls.h"
#include "tests/server/http_get.h"

namespace graft::bench {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A serialized ModelProto with a doc_string field (field 6) appended: protobuf takes the last
// occurrence of a singular field, so this equals setting doc_string, without re-serializing
// the model. Distinct strings make distinct models (digests) cheaply.
inline std::string append_doc_string(const std::string& model, const std::string& doc) {
  std::string out;
  out.reserve(model.size() + doc.size() + 12);
  out = model;
  out.push_back(static_cast<char>((6 << 3) | 2));  // field 6, length-delimited
  for (uint64_t n = doc.size();; n >>= 7) {
    if (n < 0x80) {
      out.push_back(static_cast<char>(n));
      break;
    }
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  out += doc;
  return out;
}

// Channels with equal arguments share one connection by default (gRPC's global subchannel
// pool); a local pool gives every simulated client its own TCP connection, as separate client
// processes would have.
// The TLS files were checked when the run started (main), so a failure here means they changed
// under it.
inline std::shared_ptr<grpc::Channel> own_channel(const std::string& target,
                                                  const graft::tls::ClientOptions& tls) {
  grpc::ChannelArguments args = graft::tls::default_channel_args();
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = graft::tls::make_channel(target, tls, args);
  if (!channel.ok()) {
    std::fprintf(stderr, "%s\n", std::string(channel.status().message()).c_str());
    std::exit(1);
  }
  return *channel;
}

// Two distinct ports that were free a moment ago (the kernel's choice for 127.0.0.1:0). graftd
// logs the ports it bound for --listen 127.0.0.1:0 at info level, which --log-level warn hides, so
// the ports are chosen here; if another process takes one in between, graftd exits and is started
// again with new ones.
inline std::pair<int, int> free_ports() {
  int ports[2] = {0, 0};
  int fds[2];
  for (int i = 0; i < 2; ++i) {  // both held open until both are chosen, so they differ
    fds[i] = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(fds[i], reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::getsockname(fds[i], reinterpret_cast<sockaddr*>(&addr), &len) == 0)
      ports[i] = ntohs(addr.sin_port);
  }
  for (int fd : fds) ::close(fd);
  return {ports[0], ports[1]};
}

// graftd as a child process on loopback, its stderr (the log) in a temporary file.
class Graftd {
 public:
  Graftd(const std::string& binary, const std::vector<std::string>& extra_args,
         const graft::tls::ClientOptions& tls, const std::string& log_level = "warn") {
    using namespace std::chrono_literals;
    log_path_ = std::filesystem::temp_directory_path() /
                ("graft_bench_graftd_" + std::to_string(::getpid()));
    for (int attempt = 0; attempt < 5 && address_.empty(); ++attempt) {
      if (attempt > 0) stop();
      auto [grpc_port, metrics_port] = free_ports();
      std::string target = "127.0.0.1:" + std::to_string(grpc_port);
      start(binary, target, "127.0.0.1:" + std::to_string(metrics_port), extra_args, log_level);
      // Ready when the health service answers SERVING on our port and graftd is still alive
      // (so it is graftd that answered, not whoever took the port). A new channel per probe: a
      // channel that failed to connect waits out a reconnect backoff of a second or more.
      std::optional<Clock::time_point> listening_since;
      for (auto until = Clock::now() + 30s; running() && Clock::now() < until;) {
        auto serving = graft::client::GraftClient(own_channel(target, tls)).serving();
        if (serving.ok() && *serving && running()) {
          address_ = target;
          metrics_port_ = metrics_port;
          break;
        }
        if (!serving.ok()) last_error_ = serving.status().ToString();
        // graftd has bound our port yet does not answer: no port race, but something another
        // attempt cannot fix (such as TLS settings that do not match).
        if (!listening_since && log().find("serving grpc=" + target) != std::string::npos)
          listening_since = Clock::now();
        if (listening_since && Clock::now() - *listening_since > 5s) return;
        std::this_thread::sleep_for(50ms);
      }
    }
  }
  ~Graftd() {
    stop();
    std::error_code ec;
    std::filesystem::remove(log_path_, ec);
  }
  Graftd(const Graftd&) = delete;
  Graftd& operator=(const Graftd&) = delete;

  const std::string& address() const { return address_; }
  int metrics_port() const { return metrics_port_; }
  pid_t pid() const { return pid_; }
  // Why the last readiness probe failed, when address() is empty.
  const std::string& last_error() const { return last_error_; }
  std::string log() const { return read_file(log_path_); }
  bool running() {
    if (pid_ <= 0 || exited_) return false;
    if (::waitpid(pid_, &wait_status_, WNOHANG) == pid_) exited_ = true;
    return !exited_;
  }
  // The wait status once it exited (WIFSIGNALED for a crash).
  int wait_status() const { return wait_status_; }
  // SIGTERM (graftd drains what is in flight), SIGKILL if it takes too long. Returns the exit
  // code, or -1 if graftd had to be killed or died of a signal.
  int stop() {
    using namespace std::chrono_literals;
    if (!running()) return exit_code();
    ::kill(pid_, SIGTERM);
    for (auto until = Clock::now() + 30s; running() && Clock::now() < until;)
      std::this_thread::sleep_for(20ms);
    if (running()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &wait_status_, 0);
      exited_ = true;
      return -1;
    }
    return exit_code();
  }

 private:
  int exit_code() const { return WIFEXITED(wait_status_) ? WEXITSTATUS(wait_status_) : -1; }
  void start(const std::string& binary, const std::string& listen, const std::string& metrics,
             const std::vector<std::string>& extra_args, const std::string& log_level) {
    exited_ = false;
    wait_status_ = 0;
    // Built before fork(): the child of a threaded process may only exec.
    std::vector<std::string> args = {binary,  "--listen",    listen,   "--metrics-listen",
                                     metrics, "--log-level", log_level};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log = log_path_.string();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the program that started it
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 2);
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
  }

  std::filesystem::path log_path_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int wait_status_ = 0;
  std::string address_;
  int metrics_port_ = 0;
  std::string last_error_;
};

// GET http://127.0.0.1:port/path: the one the server tests use.
using graft::testing::http_get;

// q-quantile by the nearest-rank method; NaN for no samples.
inline double percentile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

inline double mean(const std::vector<double>& v) {
  if (v.empty()) return NAN;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

// printf of one number; "-" for NaN (no samples).
inline std::string fmt(const char* f, double v) {
  if (std::isnan(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A Markdown table with padded columns (first column left-aligned, the others right-aligned).
inline void print_table(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size() && i < width.size(); ++i)
      width[i] = std::max(width[i], r[i].size());
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = "|";
    for (size_t i = 0; i < cells.size() && i < width.size(); ++i) {
      const size_t pad = width[i] - cells[i].size();
      out.push_back(' ');
      if (i > 0) out.append(pad, ' ');
      out.append(cells[i]);
      if (i == 0) out.append(pad, ' ');
      out.append(" |");
    }
    std::printf("%s\n", out.c_str());
  };
  line(header);
  std::string rule = "|";
  for (size_t i = 0; i < header.size(); ++i) {
    rule.append(i == 0 ? width[i] + 2 : width[i] + 1, '-');
    rule.append(i == 0 ? "|" : ":|");
  }
  std::printf("%s\n", rule.c_str());
  for (const auto& r : rows) line(r);
}

}  // namespace graft::bench
