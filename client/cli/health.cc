// graft health: whether a server is serving (exit 0) or not (exit 6).
#include <iostream>
#include <memory>

#include "client/cli/commands.h"
#include "client/cli/options.h"
#include "client/exit_codes.h"

namespace graft::cli {
namespace {

int health(const RemoteOptions& remote) {
  std::string server = resolve_server(remote.server);
  if (server.empty()) return fail(kUsage, "health needs --server HOST:PORT (or GRAFT_SERVER)");
  auto client = connect(server, remote.tls);
  if (!client.ok()) return fail_connect(client.status());
  auto serving = client->serving();
  if (!serving.ok()) return fail_remote(serving.status());
  std::cout << (*serving ? "SERVING" : "NOT_SERVING") << "\n";
  return *serving ? kOk : kServer;
}

}  // namespace

Command add_health(CLI::App& app) {
  auto remote = std::make_shared<RemoteOptions>();
  auto* cmd = app.add_subcommand("health", "ask a server whether it is serving");
  add_remote_options(cmd, remote.get());
  return {cmd, [remote] { return health(*remote); }};
}

}  // namespace graft::cli
