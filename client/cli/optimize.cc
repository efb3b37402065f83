// graft optimize: a model optimized in this process (--local) or by a server.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <system_error>

#include <absl/strings/str_cat.h>

#include "client/cli/commands.h"
#include "client/cli/input_data.h"
#include "client/cli/model_files.h"
#include "client/cli/options.h"
#include "client/cli/pipeline_options.h"
#include "client/cli/run_output.h"
#include "client/exit_codes.h"
#include "core/base/status.h"
#include "core/build_info.h"
#include "core/ir/model.h"
#include "core/paths/beneath.h"
#include "core/paths/files.h"
#include "proto/convert.h"

namespace graft::cli {
namespace {

using report::RunSummary;

struct OptimizeArgs {
  RunArgs run;
  RemoteOptions remote;
  PipelineArgs pipeline;
  bool local = false;
  double timeout_seconds = 0;
  bool no_lookup = false;  // remote: send the model without asking Lookup first
  bool rehash = false;     // hash every file again instead of recalling remembered digests
};

// A local result written beside the output file -o with its external-data files: weights the
// passes made (folded, fused, relayouted) go to a new file rather than into the model, "<output
// stem>.graft.weights", numbered if the input uses it. `out` gets the model, `locations` the
// files it references but the new one when nothing went to it. Returns an exit code.
int save_with_external_data(const std::string& output, ir::Model& model,
                            const std::set<std::string>& input_locations,
                            const std::filesystem::path& input_folder, std::string* out,
                            std::vector<std::string>* locations) {
  const std::string stem = std::filesystem::path(output).stem().string();
  std::string location = stem + ".graft.weights";
  for (int i = 1; input_locations.count(location); ++i)
    location = stem + ".graft-" + std::to_string(i) + ".weights";
  ir::Model::ExternalWrite write;
  write.folder = folder_of(output).string();
  write.location = location;
  write.even_without_external = true;  // the input had external data (passes may use it up)
  // Written elsewhere, an input file the result uses only in part (a pass replaced some of its
  // weights) would be copied whole beside the output: its tensors go to the new file.
  std::error_code same_error;
  write.compact = !std::filesystem::equivalent(input_folder, write.folder, same_error);
  auto saved = model.serialize_with_external(write);
  if (!saved.ok())
    return fail(saved.status().code() == absl::StatusCode::kResourceExhausted ||
                        saved.status().code() == absl::StatusCode::kInvalidArgument
                    ? kBadModel
                    : kIoError,
                std::string(saved.status().message()));
  *out = std::move(saved->model);
  for (auto& name : saved->locations)
    if (name != location || saved->new_file_bytes == 0) locations->push_back(std::move(name));
  return kOk;
}

// The optimized model's bytes (`out`) and the external-data files they reference (`locations`).
// Returns an exit code.
int save_local(const OptimizeArgs& a, ir::Model& model,
               const std::set<std::string>& input_locations,
               const std::filesystem::path& input_folder, std::string* out,
               std::vector<std::string>* locations) {
  const bool to_file = !a.run.output.empty() && a.run.output != "-";
  if (to_file && (!input_locations.empty() || model.has_external_tensors()))
    return save_with_external_data(a.run.output, model, input_locations, input_folder, out,
                                   locations);
  auto serialized = model.serialize_and_release();
  if (!serialized.ok()) return fail(kBadModel, std::string(serialized.status().message()));
  *out = std::move(*serialized);
  auto names = external_locations(*out);
  if (!names.ok()) return fail(kInternal, std::string(names.status().message()));
  locations->assign(names->begin(), names->end());
  return kOk;
}

int optimize_local(const OptimizeArgs& a, const PipelineConfig& config, std::string bytes) {
  RunSummary run;
  run.input = a.run.input;
  run.input_bytes = bytes.size();
  run.graft_version = graft_version();
  run.build_fingerprint = build_fingerprint();
  auto t = Clock::now();
  // The input's external-data files, so a new weights file gets a name none of them has.
  auto input_locations = external_locations(bytes);
  if (!input_locations.ok())
    return fail(kBadModel, a.run.input + ": " + std::string(input_locations.status().message()));
  auto model = ir::Model::parse(bytes);
  if (!model.ok())
    return fail(kBadModel, a.run.input + ": " + std::string(model.status().message()));
  std::string().swap(bytes);  // the IR now owns the weights; free the input copy
  // External tensors are read from the input's folder, one at a time, when a pass needs them.
  const std::filesystem::path input_folder = folder_of(a.run.input);
  (*model)->set_external_data(ir::ExternalData::beneath(input_folder.string()));
  run.load_seconds = since(t);
  DimBindings memory_dims;
  if (wants_report(a.run))
    run.profile_before = report::profile_model(**model, memory_size_rule(config, &memory_dims));

  auto report = run_pipeline(*model, config);
  // InvalidArgument: --verify-data that does not fit the model (the config was checked before).
  if (!report.ok())
    return fail(absl::IsInvalidArgument(report.status()) ? kUsage : kInternal,
                std::string(report.status().message()));
  run.pipeline = std::move(*report);
  if (wants_report(a.run))
    run.profile_after = report::profile_model(**model, memory_size_rule(config, &memory_dims));

  t = Clock::now();
  std::string out;
  std::vector<std::string> locations;
  if (int rc = save_local(a, **model, *input_locations, input_folder, &out, &locations); rc != kOk)
    return rc;
  run.save_seconds = since(t);
  run.output_bytes = out.size();
  // The input's files the output still references are copied next to it (in blocks) when it is
  // written elsewhere. Their names obey the same rule in every mode, so a model that refers
  // outside its folder fails the same way with or without -o.
  for (const auto& name : locations)
    if (auto st = paths::check_location(name); !st.ok())
      return fail(kBadModel, a.run.input + ": " + std::string(st.message()));
  // Copied beside the output by finish_run, as a remote run's.
  const bool to_file = !a.run.output.empty() && a.run.output != "-";
  return finish_run(a.run, std::move(run), out, {},
                    to_file ? locations : std::vector<std::string>{}, input_folder.string(),
                    nullptr, &config);
}

int report_remote(const OptimizeArgs& a, const std::string& server, client::OptimizeResult result,
                  uint64_t input_bytes, const std::string& lookup,
                  paths::AtomicFileWriter* streamed, const PipelineConfig& config) {
  RunSummary run = remote_summary(result.report, server);
  run.input = a.run.input;
  run.input_bytes = input_bytes;
  run.output_bytes = result.report.output_bytes();  // the Receiver checked what arrived
  run.load_seconds = result.report.load_seconds();
  run.save_seconds = result.report.save_seconds();
  run.cache_hit = result.report.cache_hit();
  run.input_sha256 = result.report.input_sha256();
  run.lookup = lookup;
  run.bytes_sent = result.bytes_sent;
  run.bytes_received = result.bytes_received;
  return finish_run(a.run, std::move(run), result.model, result.external_files, result.kept_files,
                    a.run.input == "-" ? std::string() : folder_of(a.run.input).string(), streamed,
                    &config);
}

// The output file a remote result is streamed to as it arrives (nullopt for standard output or
// no output: those get the model whole), and the sink that writes it.
struct StreamedOutput {
  std::optional<paths::AtomicFileWriter> writer;
  client::ModelSink sink;
  paths::AtomicFileWriter* get() { return writer ? &*writer : nullptr; }
};

absl::Status open_streamed_output(const OptimizeArgs& a, StreamedOutput* out) {
  if (a.run.output.empty() || a.run.output == "-") return absl::OkStatus();
  ASSIGN_OR_RETURN(paths::AtomicFileWriter writer, paths::AtomicFileWriter::open(a.run.output));
  out->writer.emplace(std::move(writer));
  paths::AtomicFileWriter* w = &*out->writer;
  out->sink.write = [w](std::string_view piece) { return w->append(piece); };
  out->sink.restart = [w] { return w->restart(); };
  return absl::OkStatus();
}

// A remote run's state: the server and its client, the call's deadline, where the result goes,
// and the model as far as it was read.
struct RemoteRun {
  RemoteRun(const OptimizeArgs& a, const std::string& server, const PipelineConfig& config,
            client::GraftClient& client, client::Deadline deadline)
      : a(a),
        server(server),
        config(config),
        client(client),
        deadline(deadline),
        proto_config(api::to_proto(config)) {}

  const OptimizeArgs& a;
  const std::string& server;
  const PipelineConfig& config;
  client::GraftClient& client;
  client::Deadline deadline;  // the Lookup and the upload
  v1::PipelineConfig proto_config;
  StreamedOutput output;  // the output file is written as the result arrives (never held whole)
  std::string digest;     // the model file's sha256, when it was hashed in blocks
  bool looked_up = false;
  std::string bytes;  // the model, once read
  bool have_bytes = false;
  client::ExternalSources sources;
};

// Reads the model (small: the weights of a model with external data are in its files), and
// lists and hashes its files. Returns an exit code.
int read_model(RemoteRun& r) {
  std::string error;
  if (!read_input(r.a.run.input, &r.bytes, &error)) return fail(kIoError, error);
  r.have_bytes = true;
  auto locations = external_locations(r.bytes);
  if (!locations.ok())
    return fail(kBadModel, r.a.run.input + ": " + std::string(locations.status().message()));
  return external_sources(r.a.run.input, r.a.rehash, *locations, &r.sources);
}

// Asks Lookup with the digest of the file read in blocks, so a hit never holds the input in
// memory. Returns an exit code; `done` is set when the result came (or the run failed), else
// the model is to be sent.
int fetch_if_cached(RemoteRun& r, bool* done) {
  *done = true;
  auto d = digest_model(r.a.run.input, r.a.rehash);
  if (!d.ok()) return fail(kIoError, std::string(d.status().message()));
  r.digest = d->sha256;
  // The key covers the files: each is hashed (in pieces), and the digests are sent along.
  if (d->mentions_location)
    if (int rc = read_model(r); rc != kOk) return rc;
  const std::string input_digest = client::input_digest_of(d->sha256, r.sources);
  client::Progress bar = progress_bar(d->size);
  auto cached = r.client.fetch_cached(input_digest, r.proto_config, r.deadline, bar, r.output.sink);
  if (bar) std::fprintf(stderr, "\n");
  if (!cached.ok()) return fail_remote(cached.status());
  if (*cached) {
    if (auto st = client::check_kept_files(**cached, r.sources); !st.ok()) return fail_remote(st);
    return report_remote(r.a, r.server, std::move(**cached), d->size, "hit", r.output.get(),
                         r.config);
  }
  r.looked_up = true;
  *done = false;
  return kOk;
}

// Sends the model (read whole if it was not yet) and reports the result.
int send_model(RemoteRun& r) {
  if (!r.have_bytes)
    if (int rc = read_model(r); rc != kOk) return rc;
  client::SendOptions send;
  send.deadline = r.deadline;
  send.progress = progress_bar(r.bytes.size() + total_size(r.sources));
  // Standard input, or --no-lookup.
  send.lookup_first = !r.a.no_lookup && !r.looked_up;
  // Already hashed in blocks when it was looked up (the digest only routes the call: graftd
  // hashes what it receives); otherwise the client hashes the bytes.
  send.model_sha256 = r.digest;
  send.model_sink = r.output.sink;
  const bool bar = static_cast<bool>(send.progress);
  auto result = r.client.optimize(r.bytes, r.proto_config, send, r.sources);
  if (bar) std::fprintf(stderr, "\n");  // ends the download line
  if (!result.ok()) return fail_remote(result.status());
  std::string lookup;
  if (r.looked_up) lookup = "miss";
  if (send.lookup_first) lookup = result->from_lookup ? "hit" : "miss";
  return report_remote(r.a, r.server, std::move(*result), r.bytes.size(), lookup, r.output.get(),
                       r.config);
}

// Remote: asks Lookup first (unless --no-lookup) with the digest of the file read in blocks, so
// a hit never holds the input in memory; otherwise (a miss, standard input, a model that may
// have external data) reads it whole and sends it.
int optimize_remote(const OptimizeArgs& a, const std::string& server,
                    const PipelineConfig& config) {
  if (!a.pipeline.dump_dir.empty()) return fail(kUsage, "--dump-dir needs --local");
  if (a.pipeline.verify_max_bytes_given)
    return fail(kUsage,
                "--verify-max-bytes needs --local (a server verifies within its own "
                "verify_max_bytes)");
  auto client = connect(server, a.remote.tls);
  if (!client.ok()) return fail_connect(client.status());
  std::optional<std::chrono::milliseconds> timeout;
  if (a.timeout_seconds > 0)
    timeout = std::chrono::milliseconds(static_cast<int64_t>(a.timeout_seconds * 1000));
  RemoteRun r(a, server, config, *client, client::deadline_in(timeout));
  if (auto st = open_streamed_output(a, &r.output); !st.ok())
    return fail(path_exit_code(st), std::string(st.message()));
  if (!a.no_lookup && a.run.input != "-") {
    bool done = false;
    if (int rc = fetch_if_cached(r, &done); done) return rc;
  }
  return send_model(r);
}

int optimize(OptimizeArgs& a) {
  if (int rc = check_parsed_options(&a.pipeline); rc != kOk) return rc;
  auto config = pipeline_config(a.pipeline);
  if (!config.ok()) return fail(kUsage, std::string(config.status().message()));
  std::string server = resolve_server(a.remote.server);
  if (!a.local && server.empty())
    return fail(kUsage,
                "say where to optimize: --local (in-process) or --server HOST:PORT "
                "(or set GRAFT_SERVER)");
  if (a.local) {
    if (auto names = resolve_passes(*config); !names.ok())
      return fail(kUsage, std::string(names.status().message()));
  }
  if (!a.local) {
    if (int rc = add_input_data(a.pipeline, a.run.input, &*config,
                                [&] { return model_file(a.run.input); });
        rc != kOk)
      return rc;
    if (api::input_sets_bytes(config->verify_options.input_sets) +
            api::input_sets_bytes(config->calibration_sets) >
        api::kMaxInputSetBytes)
      return fail(kUsage,
                  absl::StrCat("--verify-data, --calibration-data: a request carries at most ",
                               api::kMaxInputSetBytes,
                               " bytes of input data; use fewer or smaller sets, or "
                               "--local"));
    return optimize_remote(a, server, *config);
  }
  std::string bytes, error;
  if (!read_input(a.run.input, &bytes, &error)) return fail(kIoError, error);
  if (int rc = add_input_data(a.pipeline, a.run.input, &*config,
                              [&] { return absl::StatusOr<std::string>(bytes); });
      rc != kOk)
    return rc;
  return optimize_local(a, *config, std::move(bytes));
}

}  // namespace

Command add_optimize(CLI::App& app) {
  auto args = std::make_shared<OptimizeArgs>();
  auto* opt = app.add_subcommand("optimize", "optimize an ONNX model");
  opt->add_option("input", args->run.input, "input model (.onnx), - for standard input")
      ->required();
  opt->add_option("-o,--output", args->run.output,
                  "where to write the optimized model, - for standard output (omit for a "
                  "report-only dry run)");
  auto* local =
      opt->add_flag("--local", args->local, "run the pipeline in this process (no server)");
  add_remote_options(opt, &args->remote);
  for (const char* remote_only : kRemoteFlags) opt->get_option(remote_only)->excludes(local);
  opt->add_option("--timeout", args->timeout_seconds, "remote: deadline in seconds")
      ->check(CLI::Range(0.0, 1e9));
  add_pipeline_options(opt, &args->pipeline);
  opt->add_option("--report", args->run.report_path, "write the per-pass report as JSON here");
  opt->add_option("--report-html", args->run.report_html,
                  "write the report as a self-contained HTML page here (summary, passes, op "
                  "types, memory, verification; opens offline)");
  add_local_pipeline_options(opt, &args->pipeline);
  add_quiet_flag(opt, &args->run.quiet);
  opt->add_flag("--no-lookup", args->no_lookup,
                "remote: send the model without first asking the server whether it has the "
                "result cached (by the model's sha256)");
  add_rehash_flag(opt, &args->rehash);
  return {opt, [args] { return optimize(*args); }};
}

}  // namespace graft::cli
