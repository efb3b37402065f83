// graft lookup: whether a server has a model's result cached (exit 0) or not (exit 1), and the
// cached result itself with -o or --report.
#include <iostream>
#include <memory>

#include "client/cli/commands.h"
#include "client/cli/input_data.h"
#include "client/cli/model_files.h"
#include "client/cli/options.h"
#include "client/cli/pipeline_options.h"
#include "client/cli/run_output.h"
#include "client/exit_codes.h"
#include "core/cache/digest.h"
#include "proto/convert.h"

namespace graft::cli {
namespace {

struct LookupArgs {
  RunArgs run;
  RemoteOptions remote;
  PipelineArgs pipeline;
  std::string sha256;  // the model's sha256 instead of the file
  bool rehash = false;
};

// The input digest of the model file (with its external-data files' digests), or `--sha256`.
// Returns an exit code: kOk, or the failure already reported.
int input_digest(const LookupArgs& a, std::string* digest, client::ExternalSources* sources) {
  *digest = a.sha256;
  if (!digest->empty()) return kOk;
  const std::string& input = a.run.input;
  if (input.empty()) return fail(kUsage, "give a model file or --sha256");
  std::string model_sha256;
  bool read_model = input == "-";
  if (!read_model) {
    auto d = digest_model(input, a.rehash);
    if (!d.ok()) return fail(path_exit_code(d.status()), std::string(d.status().message()));
    model_sha256 = d->sha256;
    read_model = d->mentions_location;
  }
  if (read_model) {
    std::string bytes, error;
    if (!read_input(input, &bytes, &error)) return fail(kIoError, error);
    if (model_sha256.empty()) model_sha256 = cache::sha256_hex(bytes);
    // A model with external data is keyed by its files' digests too.
    auto locations = external_locations(bytes);
    if (!locations.ok())
      return fail(kBadModel, input + ": " + std::string(locations.status().message()));
    if (!locations->empty() && input == "-")
      return fail(kUsage, "a model with external-data files must be given as a file");
    if (int rc = external_sources(input, a.rehash, *locations, sources); rc != kOk) return rc;
  }
  *digest = client::input_digest_of(model_sha256, *sources);
  return kOk;
}

// Writes the cached result the server sent (-o, --report, --report-html).
int finish_cached(const LookupArgs& a, const std::string& server, const std::string& digest,
                  const client::OptimizeResult& result, const client::ExternalSources& sources,
                  const PipelineConfig& config) {
  report::RunSummary run = remote_summary(result.report, server);
  run.input = a.run.input.empty() ? digest : a.run.input;
  run.input_bytes = result.report.input_bytes();
  run.output_bytes = result.model.size();
  run.cache_hit = true;
  run.lookup = "hit";
  run.bytes_received = result.bytes_received;
  run.input_sha256 = digest;
  if (auto st = client::check_kept_files(result, sources); !st.ok()) return fail_remote(st);
  const std::string& input = a.run.input;
  return finish_run(a.run, std::move(run), result.model, result.external_files, result.kept_files,
                    input.empty() || input == "-" ? std::string() : folder_of(input).string(),
                    nullptr, &config);
}

int lookup(LookupArgs& a) {
  if (int rc = check_parsed_options(&a.pipeline); rc != kOk) return rc;
  auto config = pipeline_config(a.pipeline);
  if (!config.ok()) return fail(kUsage, std::string(config.status().message()));
  std::string server = resolve_server(a.remote.server);
  if (server.empty()) return fail(kUsage, "lookup needs --server HOST:PORT (or GRAFT_SERVER)");
  if (int rc = add_input_data(a.pipeline, a.run.input, &*config,
                              [&] { return model_file(a.run.input); });
      rc != kOk)
    return rc;
  std::string digest;
  client::ExternalSources sources;
  if (int rc = input_digest(a, &digest, &sources); rc != kOk) return rc;
  auto client = connect(server, a.remote.tls);
  if (!client.ok()) return fail_connect(client.status());
  auto result = client->lookup(digest, api::to_proto(*config), !a.run.output.empty());
  if (!result.ok()) return fail_remote(result.status());
  std::cout << digest << (result->cached ? " cached" : " not cached") << "\n";
  if (!result->cached) return kNotCached;
  if (result->result) return finish_cached(a, server, digest, *result->result, sources, *config);
  return kOk;
}

}  // namespace

Command add_lookup(CLI::App& app) {
  auto args = std::make_shared<LookupArgs>();
  auto* cmd = app.add_subcommand(
      "lookup", "ask a server whether a model's result is cached (exit 0) or not (exit 1)");
  cmd->add_option("input", args->run.input, "model file whose digest to look up");
  cmd->add_option("--sha256", args->sha256, "the model's sha256 instead of the file");
  cmd->add_option("-o,--output", args->run.output, "fetch the cached optimized model here");
  cmd->add_option("--report", args->run.report_path, "write the cached report as JSON here");
  cmd->add_option("--report-html", args->run.report_html,
                  "write the cached report as an HTML page here");
  add_rehash_flag(cmd, &args->rehash);
  add_quiet_flag(cmd, &args->run.quiet);
  add_remote_options(cmd, &args->remote);
  add_pipeline_options(cmd, &args->pipeline);
  return {cmd, [args] { return lookup(*args); }};
}

}  // namespace graft::cli
