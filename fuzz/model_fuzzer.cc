// libFuzzer target: client bytes -> ir::Model -> the O2 pipeline -> serialized bytes.
//
// Properties beyond "no crash, no sanitizer report": a model that loads optimizes without error
// (the pipeline fails only for a bad configuration or a stop request, neither of which happens
// here), no pass is rolled back (a rollback means a pass threw or broke the graph: a bug the
// pipeline only contained), no pass that reports "unchanged" changed the model (check_unchanged
// fails the run), and the optimized bytes load again.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/ir/model.h"
#include "core/pipeline/pipeline.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/heap_limit.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using graft::fuzz::fail;
  // The heap one input may hold: folding is capped at 1 MiB per tensor (and by max_growth); 256 MiB
  // leaves room for the IR, snapshots and protobuf copies (check_unchanged's included) of an 8 KiB
  // model.
  graft::fuzz::HeapLimit heap_limit(256ll << 20);
  auto model = graft::ir::Model::parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!model.ok()) return 0;  // rejected with a reason, as it should be

  graft::PipelineConfig config;
  config.level = 2;
  // Folding is capped at 16 MiB per tensor by default; 1 MiB keeps each run fast and reaches the
  // same code.
  config.pass_options["fold_constants"]["max_bytes"] = std::to_string(1 << 20);
  config.check_unchanged = true;
  config.check_transactions = true;
  auto report = graft::run_pipeline(*model, config);
  if (!report.ok()) fail("the pipeline failed on a model that loaded", report.status().ToString());
  for (const auto& pass : report->passes)
    if (pass.rollbacks) fail("a pass was rolled back", pass.name + ": " + pass.rollback_reason);

  auto bytes = (*model)->serialize_and_release();
  if (!bytes.ok()) {
    if (bytes.status().code() == absl::StatusCode::kResourceExhausted) return 0;  // above 2 GB
    fail("serialization failed", bytes.status().ToString());
  }
  auto reloaded = graft::ir::Model::parse(*bytes);
  if (!reloaded.ok()) fail("the optimized model does not load", reloaded.status().ToString());
  return 0;
}
