// graft passes: every pass with its level, gate, options and description (this build's, or a
// server's with --server).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>

#include "client/cli/commands.h"
#include "client/cli/options.h"
#include "client/exit_codes.h"
#include "core/build_info.h"
#include "core/passes/registry.h"
#include "proto/convert.h"

namespace graft::cli {
namespace {

void print_passes(const std::vector<PassInfo>& passes) {
  std::printf("%-22s %-6s %s\n", "pass", "level", "description");
  for (const auto& p : passes) {
    const std::string level = p.by_name_only ? "name" : "O" + std::to_string(p.level);
    const std::string lossy =
        p.lossy ? absl::StrCat("[lossy; kept if every output has rel <= ", p.gate.max_rel,
                               " and cosine >= ", p.gate.min_cosine, "] ")
                : "";
    std::printf("%-22s %-6s %s%s\n", p.name.c_str(), level.c_str(), lossy.c_str(),
                p.description.c_str());
    for (const auto& o : p.options)
      std::printf("%-29s option %s (%s): %s\n", "", o.name.c_str(), option_summary(o).c_str(),
                  o.help.c_str());
  }
  std::printf(
      "\nlevels: O0 runs nothing; O1 safe cleanups; O2 (default) adds fusions; O3 adds the "
      "O3 passes, lossy ones included (float16); \"name\": only when named with --passes\n"
      "lossy passes run only at O3 or when named; their error is measured, reported and held to "
      "their gate (--max-error, --min-cosine replace it); one whose error cannot be measured is "
      "rolled back unless --accept-unmeasured-error\noptions: --option PASS.OPTION=VALUE "
      "(repeatable)\n");
}

int list_passes(const RemoteOptions& remote) {
  std::string server = resolve_server(remote.server);
  std::vector<PassInfo> passes;
  std::string version = graft_version(), fingerprint = build_fingerprint();
  if (server.empty()) {
    passes = all_passes();
  } else {
    auto client = connect(server, remote.tls);
    if (!client.ok()) return fail_connect(client.status());
    auto response = client->list_passes();
    if (!response.ok()) return fail_remote(response.status());
    for (const auto& p : response->passes()) passes.push_back(api::from_proto(p));
    version = response->graft_version();
    fingerprint = response->build_fingerprint();
  }
  print_passes(passes);
  // The cache serves a result only to the build that computed it (docs/shared-cache.md).
  const std::string who = server.empty() ? "this CLI" : "server " + server;
  std::printf("%s: graft %s, build %s\n", who.c_str(), version.c_str(), fingerprint.c_str());
  return kOk;
}

}  // namespace

Command add_passes(CLI::App& app) {
  auto remote = std::make_shared<RemoteOptions>();
  auto* cmd = app.add_subcommand("passes", "list every pass with its level and description");
  add_remote_options(cmd, remote.get());
  return {cmd, [remote] { return list_passes(*remote); }};
}

}  // namespace graft::cli
