// graft's subcommands. Each registers itself on the app (its flags, help and defaults) and
// returns how to run it once the command line is parsed.
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace graft::cli {

struct Command {
  CLI::App* app = nullptr;   // the CLI11 subcommand
  std::function<int()> run;  // runs it after parsing; returns the exit code (exit_codes.h)
};

Command add_optimize(CLI::App& app);  // optimize.cc
Command add_report(CLI::App& app);    // report.cc
Command add_passes(CLI::App& app);    // passes.cc
Command add_health(CLI::App& app);    // health.cc
Command add_lookup(CLI::App& app);    // lookup.cc

}  // namespace graft::cli
