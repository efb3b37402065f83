// The flags that make a PipelineConfig (optimize's, and lookup's, which name the cached result
// by its configuration) and the config they make: every such flag, its default and its checks
// are in pipeline_options.cc.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include <absl/status/statusor.h>
#include <CLI/CLI.hpp>

#include "core/eval/verify.h"
#include "core/pipeline/pipeline.h"
#include "graft/v1/graft.pb.h"

namespace graft::cli {

struct PipelineArgs {
  std::string level = "O2";
  std::string target = "onnx";
  std::vector<std::string> passes;
  std::vector<std::string> options;  // pass.key=value
  int max_rounds = 10;
  std::string dump_dir;
  bool check = false;
  bool verify = false;
  std::vector<std::string> verify_dims, verify_shapes, verify_values, verify_ranges;  // NAME=...
  uint32_t verify_seed = 1;
  int verify_trials = 2;
  double verify_rtol = 1e-3, verify_atol = 1e-4;
  // --local: evaluator memory of the verification (graftd: its verify_max_bytes setting).
  uint64_t verify_max_bytes = eval::kDefaultVerifyMaxBytes;
  bool verify_max_bytes_given = false;
  std::vector<std::string> verify_data;       // --verify-data: files and folders of input tensors
  std::vector<std::string> calibration_data;  // --calibration-data: the same form
  std::vector<std::string> dims;              // NAME=N for the memory estimates
  std::vector<std::string> fix_dims, fix_shapes;  // NAME=N, INPUT=D,D,...: made static first
  std::vector<std::string> io_layouts;            // NAME=LAYOUT: served in another layout
  std::vector<std::string> explain;               // PASS or PASS/RULE
  std::vector<std::string> gates;                 // OUTPUT=KIND[:THRESHOLD]
  // The plain options' flags (graft.proto's fields with a (graft.v1.field) spec): each flag's
  // field and parsed value, stable in place for CLI11 to write.
  struct PlainFlag {
    const google::protobuf::FieldDescriptor* field = nullptr;
    CLI::Option* option = nullptr;
    bool flag = false;
    int64_t integer = 0;
    uint64_t unsigned_integer = 0;
    double number = 0;
    std::string text;
  };
  std::deque<PlainFlag> plain;

  // Options that mean nothing without --verify or --verify-data (checked after parsing).
  std::vector<const CLI::Option*> needs_verification;
  const CLI::Option* verify_max_bytes_option = nullptr;
};

// The flags optimize and lookup share: --level, --target, --passes, --option, --verify...,
// --fix-dim, --dim and the rest.
void add_pipeline_options(CLI::App* cmd, PipelineArgs* args);
// optimize's --dump-dir and --verify-max-bytes, which only a --local run takes.
void add_local_pipeline_options(CLI::App* cmd, PipelineArgs* args);

// After parsing: notes whether --verify-max-bytes was given, and refuses a verification option
// without --verify or --verify-data. Returns an exit code: kOk, or the failure already reported.
int check_parsed_options(PipelineArgs* args);

// Builds the pipeline config from the flags; the error is a usage message.
absl::StatusOr<PipelineConfig> pipeline_config(const PipelineArgs& a);

}  // namespace graft::cli
