#include "client/cli/run_output.h"

#include <filesystem>
#include <iostream>
#include <optional>
#include <system_error>

#include <google/protobuf/util/json_util.h>

#include "client/cli/options.h"
#include "client/exit_codes.h"
#include "core/ir/model.h"
#include "core/paths/beneath.h"
#include "proto/convert.h"

namespace graft::cli {
namespace {

using report::RunSummary;

// The configuration for the report: graft.v1.PipelineConfig as JSON with proto field names, the
// tensors of input and calibration sets replaced by how many sets there are.
nlohmann::json config_json(const PipelineConfig& config) {
  v1::PipelineConfig proto = api::to_proto(config);
  const int input_sets = proto.verify().input_sets_size();
  const int calibration_sets = proto.calibration_sets_size();
  proto.mutable_verify()->clear_input_sets();
  proto.clear_calibration_sets();
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(proto, &text, options).ok()) return nullptr;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return nullptr;
  if (input_sets > 0) j["verify"]["input_sets"] = input_sets;
  if (calibration_sets > 0) j["calibration_sets"] = calibration_sets;
  return j;
}

// The profile of the model in `bytes` for the report, sized as the report's memory estimates;
// nullopt (the report goes without) when it does not parse.
std::optional<report::ModelProfile> profile_bytes(const std::string& bytes,
                                                  const PipelineConfig& config) {
  auto model = ir::Model::parse(bytes);
  if (!model.ok()) return std::nullopt;
  DimBindings dims;
  return report::profile_model(**model, memory_size_rule(config, &dims));
}

// The external-data files of a model written to a file (finish_run's `files` and `kept`).
// Every name is checked before anything is written, and the files go before the model, so a
// refused location leaves no model referring to files that are not there.
int write_external_files(const RunArgs& a, const client::ExternalFiles& files,
                         const std::vector<std::string>& kept, const std::string& input_folder) {
  if (a.output == "-")
    return fail(kUsage, "the model uses external-data files: write it to a file, not stdout");
  for (const auto& [name, bytes] : files)
    if (auto st = paths::check_location(name); !st.ok())
      return fail(kBadModel, std::string(st.message()));
  for (const auto& name : kept)
    if (auto st = paths::check_location(name); !st.ok())
      return fail(kBadModel, std::string(st.message()));
  for (const auto& [name, bytes] : files)
    if (auto st = paths::write_beneath(folder_of(a.output).string(), name, bytes); !st.ok())
      return fail(path_exit_code(st), std::string(st.message()));
  std::error_code same_error;
  const bool same_folder =
      !input_folder.empty() &&
      std::filesystem::equivalent(input_folder, folder_of(a.output), same_error);
  if (same_folder || kept.empty()) return kOk;
  if (input_folder.empty())
    return fail(kUsage,
                "the result references the input's external-data files: give the "
                "model file (not a digest) so they can be copied beside the output");
  for (const auto& name : kept)
    if (auto st = paths::copy_beneath(input_folder, folder_of(a.output).string(), name); !st.ok())
      return fail(path_exit_code(st), std::string(st.message()));
  return kOk;
}

// The report's configuration, and the profiles the run lacks (finish_run).
void complete_report(const RunArgs& a, const PipelineConfig& config, const std::string& model,
                     const paths::AtomicFileWriter* streamed, RunSummary* run) {
  run->config = config_json(config);
  // A lookup hit never read the input; a lookup by --sha256 has none.
  if (!run->profile_before && !a.input.empty() && a.input != "-")
    if (auto bytes = paths::read_file(a.input); bytes.ok())
      run->profile_before = profile_bytes(*bytes, config);
  if (!run->profile_after && !model.empty()) {
    run->profile_after = profile_bytes(model, config);
  } else if (!run->profile_after && streamed != nullptr) {
    if (auto bytes = paths::read_file(a.output); bytes.ok())
      run->profile_after = profile_bytes(*bytes, config);
  }
}

// --report, --report-html, and the per-pass table unless -q.
int write_reports(const RunArgs& a, const RunSummary& run) {
  std::string error;
  const nlohmann::json summary = wants_report(a) ? report::to_json(run) : nlohmann::json();
  if (!a.report_path.empty()) {
    // Names from the model need not be UTF-8: invalid bytes are written as U+FFFD.
    std::string json = summary.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (!write_output(a.report_path, json, &error)) return fail(kIoError, error);
  }
  if (!a.report_html.empty() && !write_output(a.report_html, report::render_html(summary), &error))
    return fail(kIoError, error);
  if (!a.quiet) std::cerr << report::format_table(run);
  return kOk;
}

}  // namespace

bool wants_report(const RunArgs& a) { return !a.report_path.empty() || !a.report_html.empty(); }

int finish_run(const RunArgs& a, RunSummary run, const std::string& model,
               const client::ExternalFiles& files, const std::vector<std::string>& kept,
               const std::string& input_folder, paths::AtomicFileWriter* streamed,
               const PipelineConfig* config) {
  if (!a.output.empty() && (!files.empty() || !kept.empty()))
    if (int rc = write_external_files(a, files, kept, input_folder); rc != kOk) return rc;
  std::string error;
  if (streamed != nullptr) {
    // The model was written to the output's temporary file as it arrived.
    if (auto st = streamed->commit(); !st.ok())
      return fail(path_exit_code(st), std::string(st.message()));
  } else if (!a.output.empty() && !write_output(a.output, model, &error)) {
    return fail(kIoError, error);
  }
  if (config != nullptr && wants_report(a)) complete_report(a, *config, model, streamed, &run);
  return write_reports(a, run);
}

report::RunSummary remote_summary(const v1::OptimizeReport& report, const std::string& server) {
  report::RunSummary run;
  run.pipeline = api::to_pipeline_report(report);
  run.graft_version = report.graft_version();
  run.build_fingerprint = report.build_fingerprint();
  run.server = server;
  run.output_sha256 = report.output_sha256();
  return run;
}

}  // namespace graft::cli
