// --verify-data and --calibration-data: recorded input sets read into a PipelineConfig.
#pragma once

#include <functional>
#include <string>

#include <absl/status/statusor.h>

#include "client/cli/pipeline_options.h"
#include "core/pipeline/pipeline.h"

namespace graft::cli {

// --verify-data (verification on, one trial per set) and --calibration-data: reads their input
// sets into `config`. `model_bytes` gives the model (`input`) when a tensor is fed by position;
// it is called at most once, for both options. Returns an exit code: kOk, or the failure already
// reported.
int add_input_data(const PipelineArgs& a, const std::string& input, PipelineConfig* config,
                   const std::function<absl::StatusOr<std::string>()>& model_bytes);

// The model's bytes, read again to name --verify-data tensors by position (only a file will do:
// standard input is read once, for the upload).
absl::StatusOr<std::string> model_file(const std::string& path);

}  // namespace graft::cli
