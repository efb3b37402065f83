// Human (table) and machine (JSON) renderings of a pipeline report.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/analysis/memory.h"
#include "core/ir/model.h"
#include "core/pipeline/pipeline.h"

namespace graft::report {

// What a report shows of a model beyond the pipeline's counts: its op types, its interface and
// its estimated activation memory over the node schedule.
struct ModelProfile {
  std::map<std::string, int64_t> ops;  // op type ("domain:Op" outside ONNX) -> nodes, all graphs
  struct Port {
    std::string name, type, dims;  // type "float32", dims "[batch,3,224,224]"
  };
  std::vector<Port> inputs, outputs;  // the main graph's (initializer-backed inputs left out)
  size_t ports_dropped = 0;           // beyond kMaxProfilePorts
  uint64_t nodes = 0;                 // of the main graph: the schedule's length
  // Activation bytes in use over the schedule (activation_timeline), at most kProfilePoints
  // values: each the largest over its share of consecutive nodes.
  std::vector<uint64_t> memory;
};
inline constexpr size_t kProfilePoints = 400;
inline constexpr size_t kMaxProfilePorts = 1000;

// `model`'s profile, its memory sized by `rule` (the report's memory_size_rule).
ModelProfile profile_model(const ir::Model& model, const SizeRule& rule);
nlohmann::json profile_json(const ModelProfile& profile);

struct RunSummary {
  std::string input;  // path or "-"
  uint64_t input_bytes = 0;
  uint64_t output_bytes = 0;
  double load_seconds = 0, save_seconds = 0;
  PipelineReport pipeline;
  // The build that computed the result (the CLI's with --local, else the server's report's).
  std::string graft_version, build_fingerprint;
  // Remote runs only.
  std::string server;
  bool cache_hit = false;
  std::string input_sha256, output_sha256;
  std::string lookup;  // "hit" (fetched without uploading), "miss", or "" when not asked
  uint64_t bytes_sent = 0, bytes_received = 0;  // model and external-data bytes on the wire
  // For --report-json/--report-html: the models' profiles (either may be missing: a remote run
  // on standard input) and the configuration asked for (graft.v1.PipelineConfig as JSON, input
  // and calibration tensors left out).
  std::optional<ModelProfile> profile_before, profile_after;
  nlohmann::json config;
};

std::string format_table(const RunSummary& run);
// `b` bytes for a person: "512 B", "1.5 KiB", "3.20 MiB" ... "2.00 EiB"; a saturated count
// (UINT64_MAX: the estimate overflowed) is "at least 16 EiB".
std::string human_bytes(uint64_t b);
// `text` with control characters (terminal escapes) shown as \xNN: names, reasons and messages
// come from the model or a server and must not reach a terminal as they are. With
// keep_newlines, '\n' passes (a multi-line message).
std::string terminal_safe(std::string_view text, bool keep_newlines = false);
nlohmann::json to_json(const RunSummary& run);

// The self-contained HTML page (common/report_template.html: inline CSS and script, no network)
// showing `report`: a to_json() report, or {"format": "graft.v1.OptimizeReport", "report":
// <an OptimizeReport as JSON>, "profile": {...}} as graftd and the Python client make. The JSON
// is embedded with '<', '>', '&', U+2028 and U+2029 escaped, so no string from the model can end
// the script element; the page's script shows every string as text.
std::string render_html(const nlohmann::json& report);

// The largest saved report parse_saved_report reads (reports of large models with --explain are
// a few MiB), and the deepest nesting (reports nest a few levels).
inline constexpr uint64_t kMaxSavedReportBytes = uint64_t{256} << 20;
inline constexpr int kMaxSavedReportDepth = 32;

// A saved JSON report (the CLI's --report JSON, or a graft.v1.OptimizeReport as JSON: graftd's,
// the Python client's report_json()) ready for render_html; std::nullopt and why in *error
// (what the text is not: too large, too deep, not JSON, not a Graft report) otherwise. The text
// is hostile: its size and depth are checked before anything recurses over it.
std::optional<nlohmann::json> parse_saved_report(std::string_view text, std::string* error);

}  // namespace graft::report
