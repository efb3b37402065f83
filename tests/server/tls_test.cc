// TLS and mTLS against a real graftd: certificates made with the openssl command for each run
// (a CA, a server certificate for localhost and 127.0.0.1, a client certificate, and a second,
// unrelated CA with certificates of its own), the real `graft` CLI and the client library.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <regex>
#include <thread>

#include "client/graft_client.h"
#include "core/pipeline/pipeline.h"
#include "proto/convert.h"
#include "tests/server/http_get.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const fs::path kExample = fs::path(GRAFT_SOURCE_DIR) / "models" / "ppocr_mobile_v2_cls.onnx";

struct Outcome {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Outcome run(const std::string& command) {
  Outcome r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) r.output.append(buf, n);
  int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A throwaway PKI in a temp folder, made once for the whole suite.
class Pki {
  static constexpr const char* kServerExtensions =
      "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth";

 public:
  Pki() {
    dir_ = fs::temp_directory_path() / ("graft_tls_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    ok_ = ca("ca") && ca("other") && leaf("server", "ca", kServerExtensions) &&
          leaf("client", "ca", "extendedKeyUsage=clientAuth") &&
          leaf("server2", "other", kServerExtensions) &&
          leaf("rogue", "other", "extendedKeyUsage=clientAuth") &&
          openssl("pkey -in " + key("client") + " -aes256 -passout pass:secret -out " +
                  path("encrypted.key"));
  }
  ~Pki() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  std::string path(const std::string& file) const { return (dir_ / file).string(); }
  std::string cert(const std::string& name) const { return path(name + ".pem"); }
  std::string key(const std::string& name) const { return path(name + ".key"); }
  const fs::path& dir() const { return dir_; }

 private:
  bool openssl(const std::string& args) {
    Outcome r = run("openssl " + args);
    if (r.exit_code != 0) error_ += "openssl " + args + ":\n" + r.output;
    return r.exit_code == 0;
  }
  bool ca(const std::string& name) {
    return openssl(
        "req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=" + name +
        "-ca -keyout " + key(name) + " -out " + cert(name));
  }
  bool leaf(const std::string& name, const std::string& ca, const std::string& extension) {
    std::ofstream(path(name + ".ext")) << extension << "\n";
    return openssl("req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=" + name +
                   " -keyout " + key(name) + " -out " + path(name + ".csr")) &&
           openssl("x509 -req -days 2 -in " + path(name + ".csr") + " -CA " + cert(ca) +
                   " -CAkey " + key(ca) + " -CAcreateserial -out " + cert(name) + " -extfile " +
                   path(name + ".ext"));
  }

  fs::path dir_;
  bool ok_ = false;
  std::string error_;
};

// graftd on kernel-chosen loopback ports, its stderr in a file.
class Graftd {
 public:
  explicit Graftd(std::vector<std::string> extra_args) {
    log_path_ = fs::temp_directory_path() / ("graft_tls_graftd_" + std::to_string(::getpid()) +
                                             "_" + std::to_string(counter_++));
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
    std::regex ready(
        R"(serving grpc=[0-9.]+:([0-9]+) metrics=[0-9.]+:([0-9]+)( health=[0-9.]+:([0-9]+))?)");
    for (auto until = std::chrono::steady_clock::now() + 20s;
         port_ == 0 && std::chrono::steady_clock::now() < until && !exited();) {
      std::this_thread::sleep_for(20ms);
      std::smatch m;
      std::string text = log();
      if (std::regex_search(text, m, ready)) {
        port_ = std::stoi(m[1]);
        metrics_port_ = std::stoi(m[2]);
        if (m[4].matched) health_port_ = std::stoi(m[4]);
      }
    }
  }
  ~Graftd() {
    if (pid_ > 0 && !exited()) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    fs::remove(log_path_);
  }
  bool started() const { return port_ != 0; }
  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  int health_port() const { return health_port_; }
  // 127.0.0.1:PORT, or HOST:PORT for another name of this machine.
  std::string address(const std::string& host = "127.0.0.1") const {
    return host + ":" + std::to_string(port_);
  }
  std::string log() const { return read_file(log_path_); }
  void signal(int sig) { ::kill(pid_, sig); }
  // Exit status once graftd has exited (within `limit`), else -1.
  int wait(std::chrono::seconds limit) {
    for (auto until = std::chrono::steady_clock::now() + limit;
         std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(20ms))
      if (exited()) return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
    return -1;
  }

 private:
  bool exited() {
    if (!exited_ && ::waitpid(pid_, &status_, WNOHANG) == pid_) exited_ = true;
    return exited_;
  }
  static inline int counter_ = 0;
  fs::path log_path_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
  int port_ = 0, metrics_port_ = 0, health_port_ = 0;
};

// Runs the CLI; `args` are appended to `graft`.
Outcome graft(const std::string& args, const std::string& env = "") {
  return run(env + " " + std::string(GRAFT_CLI) + " " + args);
}

// A client of the library, its own connection (no subchannel shared with another test's).
client::GraftClient library_client(const std::string& target, const tls::ClientOptions& tls) {
  grpc::ChannelArguments args = tls::default_channel_args();
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = tls::make_channel(target, tls, args);
  EXPECT_TRUE(channel.ok()) << channel.status();
  return client::GraftClient(*channel);
}

class Tls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { pki_ = new Pki(); }
  static void TearDownTestSuite() {
    delete pki_;
    pki_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(pki_->ok()) << "cannot make test certificates with the openssl command "
                               "(scripts/install-deps.sh --test installs it):\n"
                            << pki_->error();
  }
  const Pki& pki() const { return *pki_; }
  std::vector<std::string> tls_args(const std::string& name = "server") const {
    return {"--tls-cert-file", pki().cert(name), "--tls-key-file", pki().key(name)};
  }
  std::vector<std::string> mtls_args(const std::string& mode = "require") const {
    auto args = tls_args();
    for (const std::string& a : {std::string("--tls-client-ca-file"), pki().cert("ca"),
                                 std::string("--tls-client-auth"), mode})
      args.push_back(a);
    return args;
  }
  // CLI flags that trust `ca` and present `client`'s certificate (none if empty).
  std::string flags(const std::string& ca, const std::string& client = "") const {
    std::string out = "--ca " + pki().cert(ca);
    if (!client.empty()) out += " --cert " + pki().cert(client) + " --key " + pki().key(client);
    return out;
  }
  fs::path temp(const std::string& name) const { return pki().dir() / name; }
  // Library options that trust `ca` and present `client`'s certificate (none if empty).
  tls::ClientOptions options(const std::string& ca, const std::string& client = "") const {
    tls::ClientOptions o;
    o.ca_file = pki().cert(ca);
    if (!client.empty()) {
      o.cert_file = pki().cert(client);
      o.key_file = pki().key(client);
    }
    return o;
  }

  static inline Pki* pki_ = nullptr;
};

TEST_F(Tls, CliOverTlsGivesTheSameBytesAsLocal) {
  Graftd server(tls_args());
  ASSERT_TRUE(server.started()) << server.log();
  EXPECT_NE(server.log().find("tls=on"), std::string::npos) << server.log();
  EXPECT_NE(server.log().find("tls: certificate CN=server"), std::string::npos) << server.log();
  const std::string remote = temp("remote.onnx").string(), local = temp("local.onnx").string();
  Outcome r = graft("optimize -q " + kExample.string() + " -o " + remote + " --server " +
                    server.address() + " --tls " + flags("ca"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(graft("optimize -q --local " + kExample.string() + " -o " + local).exit_code, 0);
  EXPECT_EQ(read_file(remote), read_file(local));
  EXPECT_GT(read_file(remote).size(), 100000u);

  // The certificate names localhost too; the environment stands in for the flags.
  EXPECT_EQ(graft("health --server " + server.address("localhost") + " " + flags("ca")).output,
            "SERVING\n");
  r = graft("passes", "GRAFT_SERVER=" + server.address() + " GRAFT_TLS_CA=" + pki().cert("ca"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fuse_conv_batchnorm"), std::string::npos);
  r = graft("lookup -q " + kExample.string() + " --server " + server.address() + " " + flags("ca"));
  EXPECT_EQ(r.exit_code, 0) << r.output;  // cached by the optimize above

  // --server-name checks the certificate against another name than the address's host.
  r = graft("health --server " + server.address() + " " + flags("ca") + " --server-name localhost");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = graft("health --server " + server.address() + " " + flags("ca") +
            " --server-name graftd.example.com");
  EXPECT_EQ(r.exit_code, 6) << r.output;
  EXPECT_NE(r.output.find("--server-name"), std::string::npos) << r.output;

  // Metrics stay plain HTTP on their own port.
  EXPECT_NE(http_get(server.metrics_port(), "/metrics").find("graft_requests_total"),
            std::string::npos);
}

TEST_F(Tls, HealthAndReflectionUseTheSameCredentials) {
  Graftd server(tls_args());
  ASSERT_TRUE(server.started()) << server.log();
  auto secure = library_client(server.address(), options("ca"));
  auto serving = secure.serving();
  ASSERT_TRUE(serving.ok()) << serving.status();
  EXPECT_TRUE(*serving);
  auto services = secure.reflected_services();
  ASSERT_TRUE(services.ok()) << services.status();
  EXPECT_NE(std::find(services->begin(), services->end(), "graft.v1.Graft"), services->end());

  auto plain = library_client(server.address(), {});
  EXPECT_EQ(plain.serving().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(plain.reflected_services().status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(Tls, PlaintextClientIsRefusedWithAHint) {
  Graftd server(tls_args());
  ASSERT_TRUE(server.started()) << server.log();
  Outcome r = graft("health --server " + server.address());
  EXPECT_EQ(r.exit_code, 6) << r.output;
  EXPECT_NE(r.output.find("UNAVAILABLE"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("connect with --tls"), std::string::npos) << r.output;
  r = graft("optimize -q " + kExample.string() + " --server " + server.address());
  EXPECT_EQ(r.exit_code, 6) << r.output;
}

TEST_F(Tls, ClientTrustingAnotherCaRefusesTheServer) {
  Graftd server(tls_args());
  ASSERT_TRUE(server.started()) << server.log();
  Outcome r = graft("health --server " + server.address() + " " + flags("other"));
  EXPECT_EQ(r.exit_code, 6) << r.output;
  EXPECT_NE(r.output.find("certificate verify failed"), std::string::npos) << r.output;
  // Without --ca the system's CAs are trusted, and they did not sign a throwaway CA.
  r = graft("health --tls --server " + server.address());
  EXPECT_EQ(r.exit_code, 6) << r.output;
  // TLS to a plaintext server is refused too, with its own hint.
  Graftd plain({});
  ASSERT_TRUE(plain.started()) << plain.log();
  r = graft("health --server " + plain.address() + " " + flags("ca"));
  EXPECT_EQ(r.exit_code, 6) << r.output;
  EXPECT_NE(r.output.find("does not speak TLS"), std::string::npos) << r.output;
}

TEST_F(Tls, MtlsRefusesClientsWithoutACertificateOrWithOneFromAnotherCa) {
  Graftd server(mtls_args());
  ASSERT_TRUE(server.started()) << server.log();
  EXPECT_NE(server.log().find("tls=mtls"), std::string::npos) << server.log();
  Outcome r = graft("health --server " + server.address() + " " + flags("ca", "client"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "SERVING\n");

  r = graft("health --server " + server.address() + " " + flags("ca"));
  EXPECT_EQ(r.exit_code, 6) << r.output;
  EXPECT_NE(r.output.find("client certificate"), std::string::npos) << r.output;
  r = graft("health --server " + server.address() + " " + flags("ca", "rogue"));
  EXPECT_EQ(r.exit_code, 6) << r.output;
  r = graft("optimize -q " + kExample.string() + " --server " + server.address() + " " +
            flags("ca", "rogue"));
  EXPECT_EQ(r.exit_code, 6) << r.output;
  // A server certificate is no client certificate: its CA is trusted but its purpose is not.
  r = graft("health --server " + server.address() + " " + flags("ca", "server"));
  EXPECT_EQ(r.exit_code, 6) << r.output;

  // Reflection sits behind the same check.
  auto anonymous = library_client(server.address(), options("ca"));
  EXPECT_EQ(anonymous.reflected_services().status().code(), absl::StatusCode::kUnavailable);
  auto known = library_client(server.address(), options("ca", "client"));
  auto services = known.reflected_services();
  EXPECT_TRUE(services.ok()) << services.status();

  const std::string remote = temp("mtls.onnx").string(), local = temp("mtls_local.onnx").string();
  r = graft("optimize -q " + kExample.string() + " -o " + remote + " --server " + server.address() +
            " " + flags("ca", "client"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_EQ(graft("optimize -q --local " + kExample.string() + " -o " + local).exit_code, 0);
  EXPECT_EQ(read_file(remote), read_file(local));
}

TEST_F(Tls, RequestModeVerifiesACertificateOnlyWhenOneIsSent) {
  Graftd server(mtls_args("request"));
  ASSERT_TRUE(server.started()) << server.log();
  EXPECT_EQ(graft("health --server " + server.address() + " " + flags("ca")).exit_code, 0);
  EXPECT_EQ(graft("health --server " + server.address() + " " + flags("ca", "client")).exit_code,
            0);
  Outcome r = graft("health --server " + server.address() + " " + flags("ca", "rogue"));
  EXPECT_EQ(r.exit_code, 6) << r.output;
}

TEST_F(Tls, HealthPortServesOnlyHealthInPlaintextAndFollowsDraining) {
  Graftd server([&] {
    auto args = mtls_args();
    // The grace period is far longer than the in-flight request needs even under a sanitizer
    // on a loaded machine (25 s by default was not, once): what is tested is the drain.
    for (const char* a :
         {"--health-listen", "127.0.0.1:0", "--workers", "1", "--grace-period-seconds", "300"})
      args.push_back(a);
    return args;
  }());
  ASSERT_TRUE(server.started()) << server.log();
  ASSERT_NE(server.health_port(), 0) << server.log();
  const std::string health = "127.0.0.1:" + std::to_string(server.health_port());
  // What a Kubernetes gRPC probe does: plaintext Health/Check, no certificate.
  Outcome r = graft("health --server " + health);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "SERVING\n");
  auto probe = library_client(health, {});
  EXPECT_EQ(probe.list_passes().status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(probe.reflected_services().status().code(), absl::StatusCode::kUnimplemented);
  auto optimized = probe.optimize(read_file(kExample), api::to_proto(PipelineConfig{}));
  EXPECT_EQ(optimized.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(graft("health --server " + health + " " + flags("ca", "client")).exit_code, 0);

  // While graftd drains, the probe port says NOT_SERVING, as the main port does.
  auto in_flight = std::async(std::launch::async, [&] {
    auto c = library_client(server.address(), options("ca", "client"));
    return c.optimize(chain_model(100000), api::to_proto(PipelineConfig{}), 120s);
  });
  bool in_flight_seen = false;
  for (auto until = std::chrono::steady_clock::now() + 60s;
       !in_flight_seen && std::chrono::steady_clock::now() < until;) {
    in_flight_seen = std::regex_search(http_get(server.metrics_port(), "/metrics"),
                                       std::regex("\ngraft_inflight_requests [1-9]"));
    if (!in_flight_seen) std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(in_flight_seen) << "the request never reached graftd:\n" << server.log();
  server.signal(SIGTERM);
  bool not_serving = false;
  for (auto until = std::chrono::steady_clock::now() + 60s;
       !not_serving && std::chrono::steady_clock::now() < until;) {
    auto s = probe.serving();
    not_serving = s.ok() && !*s;
    if (!not_serving) std::this_thread::sleep_for(10ms);
  }
  EXPECT_TRUE(not_serving) << server.log();
  EXPECT_EQ(server.wait(300s), 0) << server.log();
  auto result = in_flight.get();
  EXPECT_TRUE(result.ok()) << result.status();
}

// Replaces the served files as a rotation would (new files, then renamed over the old ones).
void rotate(const fs::path& from_cert, const fs::path& from_key, const fs::path& live) {
  fs::copy_file(from_cert, live / "cert.new", fs::copy_options::overwrite_existing);
  fs::copy_file(from_key, live / "key.new", fs::copy_options::overwrite_existing);
  fs::rename(live / "cert.new", live / "cert.pem");
  fs::rename(live / "key.new", live / "key.pem");
}

// Polls until `graft health` with `flags` succeeds or `limit` passes.
bool connects_within(const std::string& address, const std::string& flags,
                     std::chrono::seconds limit) {
  for (auto until = std::chrono::steady_clock::now() + limit;
       std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(100ms))
    if (graft("health --server " + address + " " + flags).exit_code == 0) return true;
  return false;
}

TEST_F(Tls, SighupReloadsACertificateFromAnotherCa) {
  fs::path live = temp("live_sighup");
  fs::create_directories(live);
  rotate(pki().cert("server"), pki().key("server"), live);
  // An interval far beyond the test: only SIGHUP can explain a reload.
  Graftd server({"--tls-cert-file", (live / "cert.pem").string(), "--tls-key-file",
                 (live / "key.pem").string(), "--tls-reload-interval-seconds", "86400"});
  ASSERT_TRUE(server.started()) << server.log();
  ASSERT_EQ(graft("health --server " + server.address() + " " + flags("ca")).exit_code, 0);
  ASSERT_NE(graft("health --server " + server.address() + " " + flags("other")).exit_code, 0);

  // A broken rotation (the new certificate with the old key) is refused and logged; the
  // previous certificate stays in use.
  fs::copy_file(pki().cert("server2"), live / "cert.pem", fs::copy_options::overwrite_existing);
  server.signal(SIGHUP);
  bool refused = false;
  for (auto until = std::chrono::steady_clock::now() + 30s;
       !refused && std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(20ms))
    refused = server.log().find("does not belong to the certificate") != std::string::npos;
  ASSERT_TRUE(refused) << server.log();
  EXPECT_EQ(graft("health --server " + server.address() + " " + flags("ca")).exit_code, 0)
      << server.log();

  rotate(pki().cert("server2"), pki().key("server2"), live);
  server.signal(SIGHUP);
  EXPECT_TRUE(connects_within(server.address(), flags("other"), 30s)) << server.log();
  EXPECT_NE(graft("health --server " + server.address() + " " + flags("ca")).exit_code, 0);
  EXPECT_NE(server.log().find("reloaded"), std::string::npos) << server.log();
  EXPECT_NE(server.log().find("CN=server2"), std::string::npos) << server.log();
  // SIGHUP reloads; it does not stop graftd.
  EXPECT_EQ(graft("health --server " + server.address() + " " + flags("other")).output,
            "SERVING\n");
}

TEST_F(Tls, FilesAreReReadOnTheirIntervalIncludingTheClientCa) {
  fs::path live = temp("live_timer");
  fs::create_directories(live);
  rotate(pki().cert("server"), pki().key("server"), live);
  fs::copy_file(pki().cert("ca"), live / "clients.pem", fs::copy_options::overwrite_existing);
  Graftd server({"--tls-cert-file", (live / "cert.pem").string(), "--tls-key-file",
                 (live / "key.pem").string(), "--tls-client-ca-file",
                 (live / "clients.pem").string(), "--tls-client-auth", "require",
                 "--tls-reload-interval-seconds", "1"});
  ASSERT_TRUE(server.started()) << server.log();
  ASSERT_EQ(graft("health --server " + server.address() + " " + flags("ca", "client")).exit_code,
            0);
  ASSERT_NE(graft("health --server " + server.address() + " " + flags("ca", "rogue")).exit_code, 0);
  // Clients of the other CA are admitted from now on; the server certificate is unchanged.
  fs::copy_file(pki().cert("other"), live / "clients.new", fs::copy_options::overwrite_existing);
  fs::rename(live / "clients.new", live / "clients.pem");
  EXPECT_TRUE(connects_within(server.address(), flags("ca", "rogue"), 30s)) << server.log();
  EXPECT_NE(graft("health --server " + server.address() + " " + flags("ca", "client")).exit_code,
            0);
  // A missing file is logged and changes nothing.
  fs::remove(live / "cert.pem");
  bool logged = false;
  for (auto until = std::chrono::steady_clock::now() + 30s;
       !logged && std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(20ms))
    logged = server.log().find("still serving the previous certificate") != std::string::npos;
  EXPECT_TRUE(logged) << server.log();
  EXPECT_EQ(graft("health --server " + server.address() + " " + flags("ca", "rogue")).exit_code, 0);
}

TEST_F(Tls, BadServerFilesStopStartUpWithExit2) {
  auto start = [&](std::vector<std::string> args) {
    std::string command =
        std::string(GRAFTD) + " --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0";
    for (const auto& a : args) command += " " + a;
    return run(command);
  };
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--tls-cert-file", pki().path("missing.pem"), "--tls-key-file", pki().key("server")},
       "tls_cert_file '" + pki().path("missing.pem") + "': No such file or directory"},
      {{"--tls-cert-file", pki().key("server"), "--tls-key-file", pki().key("server")},
       "no PEM certificate"},
      {{"--tls-cert-file", pki().cert("server"), "--tls-key-file", pki().cert("server")},
       "no PEM private key"},
      {{"--tls-cert-file", pki().cert("server"), "--tls-key-file", pki().key("client")},
       "does not belong to the certificate"},
      {{"--tls-cert-file", pki().cert("client"), "--tls-key-file", pki().path("encrypted.key")},
       "encrypted"},
      {{"--tls-cert-file", pki().cert("server"), "--tls-key-file", pki().key("server"),
        "--tls-client-ca-file", pki().key("ca"), "--tls-client-auth", "require"},
       "tls_client_ca_file"},
      {{"--tls-cert-file", pki().cert("server")}, "tls_key_file go together"},
      {{"--tls-client-ca-file", pki().cert("ca"), "--tls-client-auth", "require"}, "need TLS"},
  };
  for (const auto& c : cases) {
    Outcome r = start(c.args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.message << "\n" << r.output;
  }
}

TEST_F(Tls, BadClientFilesAreExit4WhenUnreadableAndExit2WhenNotPem) {
  // No server is needed: the files are checked before any connection.
  const std::string server = "--server 127.0.0.1:9";
  Outcome r = graft("health " + server + " --ca " + pki().path("missing.pem"));
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("missing.pem"), std::string::npos) << r.output;
  r = graft("health " + server + " --ca " + pki().key("ca"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no PEM certificate"), std::string::npos) << r.output;
  r = graft("health " + server + " --ca " + pki().cert("ca") + " --cert " + pki().cert("client"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--key"), std::string::npos) << r.output;
  r = graft("health " + server + " --cert " + pki().cert("client") + " --key " +
            pki().key("rogue"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("does not belong"), std::string::npos) << r.output;
  r = graft("health " + server + " --cert " + pki().cert("client") + " --key " +
            pki().path("encrypted.key"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("encrypted"), std::string::npos) << r.output;
  r = graft("optimize -q " + kExample.string() + " " + server + " --key " +
            pki().path("missing.key") + " --cert " + pki().cert("client"));
  EXPECT_EQ(r.exit_code, 4) << r.output;
  r = graft("passes " + server, "GRAFT_TLS_CA=" + pki().path("missing.pem"));
  EXPECT_EQ(r.exit_code, 4) << r.output;
  // TLS flags make no sense without a server.
  r = graft("optimize -q --local --tls " + kExample.string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
}  // namespace graft::testing
