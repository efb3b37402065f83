// graft: the command-line client. `graft optimize --local` runs the core pipeline in-process;
// each subcommand is a file of client/cli/.
#include <cstdlib>
#include <exception>
#include <iostream>
#include <vector>

#include <grpc/support/log.h>
#include <CLI/CLI.hpp>

#include "client/cli/commands.h"
#include "client/exit_codes.h"

int main(int argc, char** argv) {
  using namespace graft::cli;
  CLI::App app{"graft: ONNX graph optimizer"};
  app.require_subcommand(1);
  app.footer(
      "exit codes: 0 ok, 1 lookup: not cached, 2 bad arguments or configuration, 3 invalid "
      "input model, 4 I/O error, 5 internal error, 6 server unreachable, busy, out of time or "
      "cancelled");
  const std::vector<Command> commands = {add_optimize(app), add_report(app), add_passes(app),
                                         add_health(app), add_lookup(app)};
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kOk : kUsage;
  }
  // gRPC logs failed TLS handshakes on stderr itself; the CLI reports them once, in its own
  // message (GRPC_VERBOSITY set: gRPC's logs are wanted).
  if (!std::getenv("GRPC_VERBOSITY")) gpr_set_log_function([](gpr_log_func_args*) {});
  try {
    for (const Command& command : commands)
      if (app.got_subcommand(command.app)) return command.run();
    return kInternal;  // require_subcommand(1): parsing got one of them
  } catch (const std::exception& e) {
    std::cerr << "graft: internal error: " << e.what() << "\n";
    return kInternal;
  }
}
