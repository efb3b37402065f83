// Human (table) and machine (JSON) renderings of a pipeline report.
#pragma once

#include <string>

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
nlohmann::json to_json(const RunSummary& run);

}  // namespace graft::cli
