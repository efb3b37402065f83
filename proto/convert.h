// Conversions between the graft.v1 API messages and core types (shared by server and client).
#pragma once

#include <string>

#include <absl/status/statusor.h>

#include "core/pipeline/pipeline.h"
#include "graft/v1/graft.pb.h"

namespace graft::api {

// The longest explicit pass list a config may give.
constexpr size_t kMaxPassList = 256;

// Client-set numbers that the core's own validation does not bound: the pass list's length,
// verify values (finite, within int64). InvalidArgument naming the field. Called by from_proto
// and by the CLI for local runs.
absl::Status check_limits(const PipelineConfig& config);

// API config -> core config. Level strings are validated here ("O0".."O3", "" = O2).
absl::StatusOr<PipelineConfig> from_proto(const v1::PipelineConfig& config);
v1::PipelineConfig to_proto(const PipelineConfig& config);

// A canonical text of what the config means: the resolved pass list with every option's parsed
// value (defaults included), rounds and checks. Equal for configs that run the same pipeline
// (e.g. "O2" and O2's explicit list, or an option left out and given as its default).
absl::StatusOr<std::string> canonical_config(const PipelineConfig& config);

// A pass's descriptor as ListPasses answers it, and back (without `create`).
void fill_pass_info(const PassInfo& info, v1::PassInfo* out);
PassInfo from_proto(const v1::PassInfo& info);

void fill_report(const PipelineReport& report, v1::OptimizeReport* out);
PipelineReport to_pipeline_report(const v1::OptimizeReport& report);

}  // namespace graft::api
