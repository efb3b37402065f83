// What a run of optimize or lookup writes: the optimized model and its external-data files (-o),
// the report (--report, --report-html) and the per-pass table.
#pragma once

#include <string>
#include <vector>

#include "client/graft_client.h"
#include "common/report.h"
#include "core/paths/files.h"
#include "core/pipeline/pipeline.h"

namespace graft::cli {

// The model a run reads and what it writes: the flags optimize and lookup share.
struct RunArgs {
  std::string input;        // the model file, - for standard input (lookup: may be empty)
  std::string output;       // -o: the optimized model, - for standard output
  std::string report_path;  // --report: the report as JSON
  std::string report_html;  // --report-html: the report as a self-contained page
  bool quiet = false;       // -q: no per-pass table
};

bool wants_report(const RunArgs& a);

// What a server's report says of a remote result (optimize or lookup): the pipeline's report,
// the build that computed it, the output's sha256, and `server`.
report::RunSummary remote_summary(const v1::OptimizeReport& report, const std::string& server);

// Writes the model (and report); external-data files first: `files` (bytes in hand), then
// `kept` (files of the input the result still references), copied from `input_folder` when the
// output goes to another folder. `streamed`: the output file the model was written to as it
// arrived (then `model` may be empty), committed here.
// With `config` and a report asked for, the report gets the configuration and the profiles the
// run lacks: the input's read from its file, the result's from `model` (read back from the
// output file when it was streamed there). Returns an exit code: kOk, or the failure already
// reported.
int finish_run(const RunArgs& a, report::RunSummary run, const std::string& model,
               const client::ExternalFiles& files, const std::vector<std::string>& kept,
               const std::string& input_folder, paths::AtomicFileWriter* streamed,
               const PipelineConfig* config);

}  // namespace graft::cli
