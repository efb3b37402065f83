// Human (table) and machine (JSON) renderings of a pipeline report.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/pipeline/pipeline.h"

namespace graft::cli {

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
};

std::string format_table(const RunSummary& run);
// `text` with control characters (terminal escapes) shown as \xNN: names, reasons and messages
// come from the model or a server and must not reach a terminal as they are. With
// keep_newlines, '\n' passes (a multi-line message).
std::string terminal_safe(std::string_view text, bool keep_newlines = false);
nlohmann::json to_json(const RunSummary& run);

}  // namespace graft::cli
