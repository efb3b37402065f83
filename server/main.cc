// graftd: the Graft gRPC service.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <thread>

#include <absl/strings/str_cat.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <spdlog/spdlog.h>

#include "core/build_info.h"
#include "core/memory/allocator.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/request_log.h"
#include "server/service.h"
#include "server/tls.h"

using namespace graft;
using namespace graft::server;

namespace {

// gRPC adds reflection to every server of the process (its plugin registers itself when the
// library loads); the probe port must answer grpc.health.v1 and nothing else.
class WithoutPlugins final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    plugins->clear();
  }
};

// Answers every call the health service does not take. It also gives the probe server the
// callback method gRPC needs before it starts a server (the default health service is added
// only once the server starts).
class HealthOnly final : public grpc::CallbackGenericService {
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext*) override {
    class Refuse : public grpc::ServerGenericBidiReactor {
     public:
      Refuse() {
        Finish({grpc::StatusCode::UNIMPLEMENTED,
                "this is graftd's plaintext health port (health_listen): it serves only "
                "grpc.health.v1.Health"});
      }
      void OnDone() override { delete this; }
    };
    return new Refuse;
  }
};

std::string host_of(const std::string& address) { return address.substr(0, address.rfind(':')); }

// Exit codes: a configuration graftd refuses, and one it cannot serve (a port taken, a spool
// that cannot be opened).
constexpr int kBadConfig = 2;
constexpr int kCannotServe = 1;

// The TLS files of `config`, when it serves TLS (else `tls` stays null); false when they do not
// load (logged).
bool load_tls(const ServerConfig& config, std::unique_ptr<TlsFiles>* tls) {
  if (!config.tls()) return true;
  auto loaded = TlsFiles::load(config);
  if (!loaded.ok()) {
    log_event(spdlog::level::critical, std::string(loaded.status().message()));
    return false;
  }
  *tls = std::move(*loaded);
  return true;
}

// SIGTERM/SIGINT (drain and exit) and SIGHUP (re-check the TLS files) are handled by one thread
// with sigwait (wait_for_signals); blocks them in this thread, and so in every thread it starts
// from now on. Without this SIGHUP's default action would kill graftd. Returns them.
sigset_t block_handled_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

// Metrics served on metrics_listen; null when its port cannot be bound (logged).
std::unique_ptr<Metrics> start_metrics(const ServerConfig& config) {
  try {
    return std::make_unique<Metrics>(config.metrics_listen);
  } catch (const std::exception& e) {
    log_event(spdlog::level::critical,
              absl::StrCat("cannot serve metrics on ", config.metrics_listen, ": ", e.what()));
    return nullptr;
  }
}

// The spool for external data (`spool` stays null when spool.max_bytes is 0); false when it
// cannot be opened (logged).
bool open_spool(const ServerConfig& config, std::unique_ptr<Spool>* spool) {
  if (config.spool_max_bytes == 0) return true;
  uint64_t removed = 0;
  auto opened = Spool::open(config.spool_path(), config.spool_max_bytes, &removed);
  if (!opened.ok()) {
    log_event(spdlog::level::critical,
              absl::StrCat(std::string(opened.status().message()),
                           " (set spool.dir to a writable folder, or spool.max_bytes to 0 to "
                           "refuse external data)"));
    return false;
  }
  *spool = std::move(*opened);
  if (removed > 0)
    log_event(spdlog::level::info, absl::StrCat("spool: removed ", removed,
                                                " bytes left by graftd processes that are gone"));
  return true;
}

// Probes that cannot speak TLS (Kubernetes' native gRPC probes) ask this plaintext server on
// health_listen, which holds nothing but a health service mirroring the main one's status.
// False when it cannot listen (logged); `server` stays null when health_listen is empty.
bool start_health_server(const ServerConfig& config, HealthOnly* health_only,
                         std::unique_ptr<grpc::Server>* server, int* port) {
  if (config.health_listen.empty()) return true;
  grpc::ServerBuilder builder;
  builder.RegisterCallbackGenericService(health_only);
  builder.AddListeningPort(config.health_listen, grpc::InsecureServerCredentials(), port);
  builder.SetOption(std::make_unique<WithoutPlugins>());
  *server = builder.BuildAndStart();
  if (!*server || *port == 0) {
    log_event(spdlog::level::critical,
              absl::StrCat("cannot listen on ", config.health_listen, " (health_listen)"));
    return false;
  }
  return true;
}

// The Graft service on listen; null when it cannot listen (logged).
std::unique_ptr<grpc::Server> start_server(const ServerConfig& config, TlsFiles* tls,
                                           GraftService* service, int* port) {
  grpc::ServerBuilder builder;
  // Health and reflection are services of this server, so they take the same credentials.
  builder.AddListeningPort(config.listen,
                           tls ? tls->credentials() : grpc::InsecureServerCredentials(), port);
  builder.RegisterService(service);
  // Chunks are 1-4 MiB; leave room for framing.
  builder.SetMaxReceiveMessageSize(8 << 20);
  builder.SetMaxSendMessageSize(8 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || *port == 0) {
    log_event(spdlog::level::critical, absl::StrCat("cannot listen on ", config.listen));
    return nullptr;
  }
  return server;
}

void set_serving(grpc::Server& server, grpc::Server* health_server, bool serving) {
  server.GetHealthCheckService()->SetServingStatus(serving);
  if (health_server) health_server->GetHealthCheckService()->SetServingStatus(serving);
}

// The bound addresses, with real ports when 0 was asked for (tests read this line), and the TLS
// files' summary. Logged at the configured level or above so it is never filtered out: tools
// read the ports.
void log_started(const ServerConfig& config, int port, int health_port, int metrics_port,
                 const TlsFiles* tls) {
  std::string health_address;
  if (health_port != 0)
    health_address = absl::StrCat(" health=", host_of(config.health_listen), ":", health_port);
  const auto startup_level = std::max(spdlog::level::info, spdlog::default_logger()->level());
  log_event(
      startup_level,
      absl::StrCat(
          "graftd ", graft_version(), " (build ", std::string(build_fingerprint()).substr(0, 12),
          ") serving grpc=", host_of(config.listen), ":", port,
          " metrics=", host_of(config.metrics_listen), ":", metrics_port, health_address,
          " tls=", config.tls() ? config.tls_client_auth == "require" ? "mtls" : "on" : "off",
          " workers=", config.workers, " queue_length=", config.queue_length,
          " cache_bytes=", config.cache_bytes));
  if (tls) {
    log_event(startup_level, tls->summary());
    if (auto warning = tls->validity_warning(); !warning.empty())
      log_event(spdlog::level::warn, warning);
  }
}

// The signal thread: SIGHUP re-reads the TLS files; SIGTERM or SIGINT drains the service and
// shuts the servers down, within the grace period.
void wait_for_signals(const sigset_t& signals, const ServerConfig& config, TlsFiles* tls,
                      GraftService& service, grpc::Server& server, grpc::Server* health_server) {
  int sig = 0;
  // SIGHUP: re-read the TLS files now rather than at the next interval.
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    if (tls)
      tls->reload(true);
    else
      log_event(spdlog::level::info, "received SIGHUP: TLS is off, nothing to reload");
  }
  log_event(spdlog::level::info, absl::StrCat("received signal ", sig, ": draining for up to ",
                                              config.grace_period_seconds, " s"));
  set_serving(server, health_server, false);
  service.start_draining();
  const auto until = std::chrono::system_clock::now() +
                     std::chrono::duration_cast<std::chrono::system_clock::duration>(
                         std::chrono::duration<double>(config.grace_period_seconds));
  // In-flight calls finish first, while the transport is still up: Shutdown closes connections
  // as soon as the handlers return, and a socket closed with the client's flow-control frames
  // still unread is reset, which can destroy the end of a response the client has not read yet.
  // A short linger lets the last responses reach their clients.
  while (service.active_calls() > 0 && std::chrono::system_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto linger_end =
      std::min(until, std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  std::this_thread::sleep_until(linger_end);
  // Stops accepting calls and cancels what is left when the grace period ends (their pipelines
  // stop at the next pass boundary).
  server.Shutdown(until);
  if (health_server) health_server->Shutdown(std::chrono::system_clock::now());
}

}  // namespace

int main(int argc, char** argv) {
  int exit_code = -1;
  auto config = load_config(argc, argv, &exit_code);
  if (exit_code >= 0) return exit_code;
  if (!config.ok()) {
    std::cerr << "graftd: " << config.status().message() << "\n";
    return kBadConfig;
  }
  setup_logging(config->log_level,
                config->log_format == "json" ? LogFormat::kJson : LogFormat::kText);

  // Declared before the servers, so it outlives them: their TLS watcher reads its copies.
  std::unique_ptr<TlsFiles> tls;
  if (!load_tls(*config, &tls)) return kBadConfig;

  // A peer that closed its socket (a restarted Redis: hiredis writes with write(), not
  // send(MSG_NOSIGNAL)) must give EPIPE, not kill graftd.
  signal(SIGPIPE, SIG_IGN);
  // Before gRPC and the worker pool start their threads.
  const sigset_t signals = block_handled_signals();

  std::unique_ptr<Metrics> metrics = start_metrics(*config);
  if (!metrics) return kCannotServe;
  std::unique_ptr<Spool> spool;
  if (!open_spool(*config, &spool)) return kCannotServe;
  GraftService service(*config, metrics.get(), std::move(spool));
  if (config->serve_reports)
    metrics->serve_reports([&service](const std::string& sha) { return service.report_page(sha); });
  // Destroyed before `service`: no page is being made from it once it goes.
  struct StopReports {
    Metrics* metrics;
    ~StopReports() { metrics->stop_reports(); }
  } stop_reports{metrics.get()};

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::unique_ptr<grpc::Server> health_server;
  HealthOnly health_only;
  int health_port = 0;
  if (!start_health_server(*config, &health_only, &health_server, &health_port))
    return kCannotServe;
  int port = 0;
  std::unique_ptr<grpc::Server> server = start_server(*config, tls.get(), &service, &port);
  if (!server) return kCannotServe;
  set_serving(*server, health_server.get(), true);
  log_started(*config, port, health_port, metrics->port(), tls.get());
  if (tls) tls->start_watching();

  std::thread signal_thread([&] {
    wait_for_signals(signals, *config, tls.get(), service, *server, health_server.get());
  });
  memory::IdleTrimmer trimmer([&service]() -> std::optional<uint64_t> {
    if (!service.idle()) return std::nullopt;
    return service.calls_started();
  });
  server->Wait();
  signal_thread.join();
  service.join_workers();
  log_event(spdlog::level::info, "graftd stopped");
  return 0;
}
