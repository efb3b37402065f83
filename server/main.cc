// graftd: the Graft gRPC service.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <thread>

#include <absl/strings/str_cat.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include "server/config.h"
#include "server/metrics.h"
#include "server/request_log.h"
#include "server/service.h"

using namespace graft::server;

int main(int argc, char** argv) {
  int exit_code = -1;
  auto config = load_config(argc, argv, &exit_code);
  if (exit_code >= 0) return exit_code;
  if (!config.ok()) {
    std::cerr << "graftd: " << config.status().message() << "\n";
    return 2;
  }
  setup_logging(config->log_level,
                config->log_format == "json" ? LogFormat::kJson : LogFormat::kText);

  // SIGTERM/SIGINT are handled by one thread with sigwait; block them everywhere else, before
  // gRPC and the worker pool start their threads.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::unique_ptr<Metrics> metrics;
  try {
    metrics = std::make_unique<Metrics>(config->metrics_listen, graft_version());
  } catch (const std::exception& e) {
    log_event(spdlog::level::critical,
              absl::StrCat("cannot serve metrics on ", config->metrics_listen, ": ", e.what()));
    return 1;
  }
  GraftService service(*config, metrics.get());

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config->listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  // Chunks are 1-4 MiB; leave room for framing.
  builder.SetMaxReceiveMessageSize(8 << 20);
  builder.SetMaxSendMessageSize(8 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) {
    log_event(spdlog::level::critical, absl::StrCat("cannot listen on ", config->listen));
    return 1;
  }
  auto* health = server->GetHealthCheckService();
  health->SetServingStatus(true);
  // The bound addresses, with real ports when 0 was asked for (tests read this line).
  std::string host = config->listen.substr(0, config->listen.rfind(':'));
  std::string metrics_host = config->metrics_listen.substr(0, config->metrics_listen.rfind(':'));
  // Logged at the configured level or above so it is never filtered out: tools read the ports.
  log_event(
      std::max(spdlog::level::info, spdlog::default_logger()->level()),
      absl::StrCat("graftd ", graft_version(), " serving grpc=", host, ":", port,
                   " metrics=", metrics_host, ":", metrics->port(), " workers=", config->workers,
                   " queue_length=", config->queue_length, " cache_bytes=", config->cache_bytes));

  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    log_event(spdlog::level::info, absl::StrCat("received signal ", sig, ": draining for up to ",
                                                config->grace_period_seconds, " s"));
    health->SetServingStatus(false);
    service.start_draining();
    const auto until = std::chrono::system_clock::now() +
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(
                           std::chrono::duration<double>(config->grace_period_seconds));
    // In-flight calls finish first, while the transport is still up: Shutdown closes
    // connections as soon as the handlers return, and a socket closed with the client's
    // flow-control frames still unread is reset, which can destroy the end of a response the
    // client has not read yet. A short linger lets the last responses reach their clients.
    while (service.active_calls() > 0 && std::chrono::system_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const auto linger_end =
        std::min(until, std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    std::this_thread::sleep_until(linger_end);
    // Stops accepting calls and cancels what is left when the grace period ends (their
    // pipelines stop at the next pass boundary).
    server->Shutdown(until);
  });
  server->Wait();
  signal_thread.join();
  service.join_workers();
  log_event(spdlog::level::info, "graftd stopped");
  return 0;
}
