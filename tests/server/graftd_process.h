// A real graftd process on loopback for integration tests (ports chosen by the kernel, read from
// its start-up line), and its /metrics scraped over HTTP. GRAFTD is the binary's path, defined by
// the test target.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/server/http_get.h"
#include "tests/testing.h"

namespace graft::testing {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

class Graftd {
 public:
  explicit Graftd(std::vector<std::string> extra_args = {}) {
    log_path_ = fs::temp_directory_path() /
                ("graftd_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    // A spool of its own (unless the test names one), removed with it.
    if (std::find(extra_args.begin(), extra_args.end(), "--spool-dir") == extra_args.end()) {
      spool_ = log_path_.string() + ".spool";
      extra_args.insert(extra_args.end(), {"--spool-dir", spool_.string()});
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 2);
      std::vector<std::string> args = {GRAFTD, "--listen", "127.0.0.1:0", "--metrics-listen",
                                       "127.0.0.1:0"};
      args.insert(args.end(), extra_args.begin(), extra_args.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(GRAFTD, argv.data());
      ::_exit(127);
    }
    // Wait for the start-up line that names the bound ports.
    std::regex ready(R"(serving grpc=([0-9.]+:[0-9]+) metrics=[0-9.]+:([0-9]+))");
    for (int i = 0; i < 200 && address_.empty(); ++i) {
      std::this_thread::sleep_for(50ms);
      std::smatch m;
      std::string log = read_file(log_path_);
      if (std::regex_search(log, m, ready)) {
        address_ = m[1];
        metrics_port_ = std::stoi(m[2]);
      }
    }
    EXPECT_FALSE(address_.empty()) << "graftd did not start:\n" << read_file(log_path_);
  }
  ~Graftd() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    fs::remove(log_path_);
    if (!spool_.empty()) fs::remove_all(spool_);
  }
  // The spool folder the test helper gave it (empty when the test named its own).
  const fs::path& spool() const { return spool_; }
  const std::string& address() const { return address_; }
  int metrics_port() const { return metrics_port_; }
  std::string log() const { return read_file(log_path_); }
  pid_t pid() const { return pid_; }
  // Sends SIGTERM and returns the exit status (-1 if it did not exit in time).
  int terminate_and_wait(std::chrono::seconds limit) {
    ::kill(pid_, SIGTERM);
    auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }

 private:
  static inline int counter_ = 0;
  fs::path log_path_;
  fs::path spool_;
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string address_;
  int metrics_port_ = 0;
};

// Parses the Prometheus text format strictly enough to catch malformed lines; returns
// "name{labels}" -> value.
inline std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})?) ([-+0-9.eE]+|NaN|Nan|[+-]Inf)$)");
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::smatch m;
    EXPECT_TRUE(std::regex_match(line, m, sample)) << "malformed metrics line: " << line;
    if (!m.empty()) out[m[1]] = std::strtod(m[3].str().c_str(), nullptr);
  }
  return out;
}

inline double metric(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? -1 : it->second;
}

}  // namespace graft::testing
