// Conversions between the graft.v1 API messages and core types (shared by server and client).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <absl/status/statusor.h>

#include "core/pipeline/pipeline.h"
#include "graft/v1/graft.pb.h"
#include "proto/config_key.h"

namespace graft::api {

// The longest explicit pass list a config may give.
constexpr size_t kMaxPassList = 256;
// PipelineConfig.output_gates at most.
constexpr int kMaxOutputGates = 64;

// The payload bytes all verify input sets of one config may hold together: they travel in the
// call's first message, which graftd accepts up to 8 MiB.
constexpr uint64_t kMaxInputSetBytes = 6ull << 20;

// Client-set numbers that the core's own validation does not bound: the pass list's length,
// verify values (finite, within int64). InvalidArgument naming the field. Called by from_proto
// and by the CLI for local runs.
absl::Status check_limits(const PipelineConfig& config);

// API config -> core config. Level strings are validated here ("O0".."O3", "" = O2). Verify
// input sets are parsed and checked for what needs no model (eval::parse_input_tensor, at most
// 16 sets, kMaxInputSetBytes) and imply verification; run_pipeline checks them against the
// model.
absl::StatusOr<PipelineConfig> from_proto(const v1::PipelineConfig& config);
v1::PipelineConfig to_proto(const PipelineConfig& config);

// The plain options (graft.proto's fields with a (graft.v1.field) spec): each field's
// descriptor and spec, in field order.
struct PlainField {
  const google::protobuf::FieldDescriptor* field;
  const v1::FieldSpec* spec;
};
const std::vector<PlainField>& plain_fields();

// The plain options' values within their specs' bounds (and finite): InvalidArgument naming
// the field otherwise. from_proto calls it; so do the CLIs before a local run.
absl::Status check_plain_fields(const v1::PipelineConfig& config);

// A bound as the errors and help show it: integral values as integers ("2147483647", not
// "2.14748e+09"), others with six significant digits.
std::string bound_text(double bound);

// The plain options copied as they are, message -> core and core -> message.
void copy_plain_fields(const v1::PipelineConfig& from, PipelineConfig* to);
void copy_plain_fields(const PipelineConfig& from, v1::PipelineConfig* to);

// The result cache's key of a config: canonical_config, in proto/config_key.h.

// Lowercase hex sha256 of input sets' contents: per set, per input name in order, the name,
// element type, dims and values (a tensor's encoding, raw_data or typed fields, does not
// matter); "" for none.
std::string input_sets_digest(const std::vector<std::map<std::string, eval::Tensor>>& sets);

// The payload bytes of input sets (element bytes, string lengths), as kMaxInputSetBytes counts.
uint64_t input_sets_bytes(const std::vector<std::map<std::string, eval::Tensor>>& sets);

// A pass's descriptor as ListPasses answers it, and back (without `create`).
void fill_pass_info(const PassInfo& info, v1::PassInfo* out);
PassInfo from_proto(const v1::PassInfo& info);

void fill_report(const PipelineReport& report, v1::OptimizeReport* out);
PipelineReport to_pipeline_report(const v1::OptimizeReport& report);

}  // namespace graft::api
