// graft: the command-line client. `graft optimize --local` runs the core pipeline in-process.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include <CLI/CLI.hpp>

#include "client/exit_codes.h"
#include "client/report.h"
#include "core/ir/model.h"
#include "core/passes/registry.h"
#include "core/pipeline/pipeline.h"

namespace graft::cli {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int fail(int code, const std::string& msg) {
  std::cerr << "graft: " << msg << "\n";
  return code;
}

bool read_input(const std::string& path, std::string* bytes, std::string* error) {
  if (path == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    *bytes = ss.str();
    if (std::cin.bad()) {
      *error = "cannot read standard input";
      return false;
    }
    return true;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = "cannot open '" + path + "'";
    return false;
  }
  bytes->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) {
    *error = "cannot read '" + path + "'";
    return false;
  }
  return true;
}

bool write_output(const std::string& path, const std::string& bytes, std::string* error) {
  if (path == "-") {
    std::cout.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    std::cout.flush();
    if (!std::cout) *error = "cannot write standard output";
    return static_cast<bool>(std::cout);
  }
  // Write next to the target, then rename: a failed run never leaves a half-written model.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      *error = "cannot write '" + path + "'";
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    *error = "cannot write '" + path + "'";
    return false;
  }
  return true;
}

int level_from_string(const std::string& s) {
  if (s.size() == 2 && (s[0] == 'O' || s[0] == 'o') && s[1] >= '0' && s[1] <= '9')
    return s[1] - '0';
  if (s.size() == 1 && s[0] >= '0' && s[0] <= '9') return s[0] - '0';
  return -1;
}

struct OptimizeArgs {
  std::string input;
  std::string output;
  bool local = false;
  std::string level = "O2";
  std::vector<std::string> passes;
  std::vector<std::string> options;  // pass.key=value
  int max_rounds = 10;
  std::string report_path;
  std::string dump_dir;
  bool check = false;
  bool quiet = false;
};

int optimize(const OptimizeArgs& a) {
  if (!a.local)
    return fail(kUsage,
                "remote mode is not available in this build yet; run with --local to optimize "
                "in-process");
  PipelineConfig config;
  config.level = level_from_string(a.level);
  if (config.level < 0)
    return fail(kUsage, "level must be O0, O1, O2 or O3, got '" + a.level + "'");
  config.passes = a.passes;
  config.max_rounds = a.max_rounds;
  config.onnx_checker = config.shape_inference = a.check;
  config.dump_dir = a.dump_dir;
  for (const auto& opt : a.options) {
    auto dot = opt.find('.'), eq = opt.find('=');
    if (dot == std::string::npos || eq == std::string::npos || dot > eq)
      return fail(kUsage, "--option must look like pass.key=value, got '" + opt + "'");
    config.pass_options[opt.substr(0, dot)][opt.substr(dot + 1, eq - dot - 1)] = opt.substr(eq + 1);
  }
  if (auto names = resolve_passes(config); !names.ok())
    return fail(kUsage, std::string(names.status().message()));

  std::string bytes, error;
  if (!read_input(a.input, &bytes, &error)) return fail(kIoError, error);
  RunSummary run;
  run.input = a.input;
  run.input_bytes = bytes.size();

  auto t = Clock::now();
  auto model = ir::Model::parse(bytes);
  if (!model.ok()) return fail(kBadModel, a.input + ": " + std::string(model.status().message()));
  std::string().swap(bytes);  // the IR now owns the weights; free the input copy
  run.load_seconds = since(t);

  auto report = run_pipeline(*model, config);
  if (!report.ok()) return fail(kInternal, std::string(report.status().message()));
  run.pipeline = std::move(*report);

  t = Clock::now();
  auto out = (*model)->serialize_and_release();
  if (!out.ok()) return fail(kBadModel, std::string(out.status().message()));
  run.save_seconds = since(t);
  run.output_bytes = out->size();

  if (!a.output.empty() && !write_output(a.output, *out, &error)) return fail(kIoError, error);
  if (!a.report_path.empty()) {
    std::string json = to_json(run).dump(2) + "\n";
    if (!write_output(a.report_path, json, &error)) return fail(kIoError, error);
  }
  if (!a.quiet) std::cerr << format_table(run);
  return kOk;
}

int list_passes() {
  std::printf("%-22s %-6s %s\n", "pass", "level", "description");
  for (const auto& p : all_passes()) {
    std::printf("%-22s O%-5d %s\n", p.name.c_str(), p.level, p.description.c_str());
    for (const auto& o : p.options)
      std::printf("%-22s %-6s   option %s (default %s): %s\n", "", "", o.name.c_str(),
                  o.default_value.c_str(), o.description.c_str());
  }
  std::printf(
      "\nlevels: O0 runs nothing; O1 safe cleanups; O2 (default) adds fusions; O3 adds "
      "aggressive passes (currently the same as O2)\n");
  return kOk;
}

}  // namespace
}  // namespace graft::cli

int main(int argc, char** argv) {
  using namespace graft::cli;
  CLI::App app{"graft: ONNX graph optimizer"};
  app.require_subcommand(1);
  app.footer(
      "exit codes: 0 ok, 2 bad arguments or configuration, 3 invalid input model, "
      "4 I/O error, 5 internal error");

  OptimizeArgs args;
  auto* opt = app.add_subcommand("optimize", "optimize an ONNX model");
  opt->add_option("input", args.input, "input model (.onnx), - for standard input")->required();
  opt->add_option("-o,--output", args.output,
                  "where to write the optimized model, - for standard output (omit for a "
                  "report-only dry run)");
  opt->add_flag("--local", args.local, "run the pipeline in this process (no server)");
  auto* level =
      opt->add_option("--level", args.level, "optimization level O0..O3")->capture_default_str();
  opt->add_option("--passes", args.passes, "explicit ordered pass list (comma separated)")
      ->delimiter(',')
      ->excludes(level);
  opt->add_option("--option", args.options, "pass option as pass.key=value (repeatable)");
  opt->add_option("--max-rounds", args.max_rounds, "fixed-point rounds at most")
      ->capture_default_str();
  opt->add_option("--report", args.report_path, "write the per-pass report as JSON here");
  opt->add_option("--dump-dir", args.dump_dir,
                  "write the graph as ONNX text after each pass that changed it");
  opt->add_flag("--check", args.check,
                "run the ONNX checker and shape inference after each changing pass (slower)");
  opt->add_flag("-q,--quiet", args.quiet, "do not print the per-pass table");

  app.add_subcommand("passes", "list every pass with its level and description");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kOk : kUsage;
  }
  try {
    if (app.got_subcommand("passes")) return list_passes();
    return optimize(args);
  } catch (const std::exception& e) {
    std::cerr << "graft: internal error: " << e.what() << "\n";
    return kInternal;
  }
}
