// graft report: a saved JSON report as an HTML page. Takes the CLI's --report JSON, and a
// graft.v1.OptimizeReport as JSON (graftd's, the Python client's report_json()).
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <optional>

#include "client/cli/commands.h"
#include "client/cli/options.h"
#include "client/exit_codes.h"
#include "common/report.h"
#include "core/paths/files.h"

namespace graft::cli {
namespace {

struct ReportArgs {
  std::string input;   // the JSON report, - for standard input
  std::string output;  // the HTML page; default: the report's name with .html
};

int render_report(const ReportArgs& a) {
  // Never more than the largest report is read: a bigger input is a usage error, as it is not a
  // report.
  auto text = a.input == "-"
                  ? paths::read_all(STDIN_FILENO, "standard input", 0, report::kMaxSavedReportBytes)
                  : paths::read_file(a.input, report::kMaxSavedReportBytes);
  if (!text.ok() && text.status().code() == absl::StatusCode::kResourceExhausted)
    return fail(kUsage, std::string(text.status().message()) + ": not a report");
  if (!text.ok()) return fail(path_exit_code(text.status()), std::string(text.status().message()));
  std::string error;
  std::optional<nlohmann::json> saved = report::parse_saved_report(*text, &error);
  if (!saved) return fail(kUsage, a.input + ": " + error);
  std::string out = a.output;
  if (out.empty()) {
    if (a.input == "-") return fail(kUsage, "give -o FILE (or -) for a report on standard input");
    out = std::filesystem::path(a.input).replace_extension(".html").string();
  }
  if (!write_output(out, report::render_html(*saved), &error)) return fail(kIoError, error);
  return kOk;
}

}  // namespace

Command add_report(CLI::App& app) {
  auto args = std::make_shared<ReportArgs>();
  auto* cmd = app.add_subcommand(
      "report", "render a saved JSON report (graft optimize --report, or graftd's) as HTML");
  cmd->add_option("report", args->input, "the JSON report, - for standard input")->required();
  cmd->add_option("-o,--output", args->output,
                  "the HTML page to write, - for standard output (default: the report's "
                  "name with .html)");
  return {cmd, [args] { return render_report(*args); }};
}

}  // namespace graft::cli
