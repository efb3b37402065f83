// libFuzzer target: client bytes -> ir::Model -> the O2 pipeline with numeric verification (as
// graftd runs it when a client asks for --verify) -> serialized bytes.
//
// The evaluator runs every input model on random inputs, so this reaches every kernel, If, Loop,
// Scan and function calls with client-chosen graphs. Limits are small so each run is fast: a
// model that needs more memory is not verifiable, which is a correct answer.
//
// The input's size (mod 4) also chooses a layout change and --layout-sensitive-ops (see below).
//
// Properties beyond "no crash, no sanitizer report": the pipeline only stops for the deadline
// given here, no pass is rolled back (neither for breaking the graph nor for changing the
// outputs: either is a pass bug the pipeline only contained), no pass that reports "unchanged"
// changed the model (check_unchanged fails the run), and the result loads again.
#include <time.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/ir/model.h"
#include "core/pipeline/pipeline.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/heap_limit.h"

namespace {

// Per input, in CPU time of this thread rather than wall time, so whether an input reaches the
// deadline does not depend on the machine's load (and a saved reproducer replays the same way).
// Stop checks run between evaluated nodes, so a run ends soon after this.
constexpr double kDeadlineSeconds = 2.0;

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using graft::fuzz::fail;
  // The heap one input may hold: verification is budgeted at 2 MiB live (256 KiB per tensor) and
  // folding at 256 KiB per tensor; 64 MiB leaves room for the IR, snapshots and protobuf copies of
  // an 8 KiB model (check_unchanged's included).
  graft::fuzz::HeapLimit heap_limit(64ll << 20);
  auto model = graft::ir::Model::parse(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!model.ok()) return 0;

  graft::PipelineConfig config;
  config.level = 2;
  config.pass_options["fold_constants"]["max_bytes"] = std::to_string(256 << 10);
  config.verify = true;
  config.check_unchanged = true;
  config.check_transactions = true;
  auto& verify = config.verify_options;
  verify.default_dim = 2;  // no search over 1, 16, 64, 256
  verify.trials = 1;
  verify.max_tensor_bytes = 256 << 10;
  verify.max_live_bytes = 2 << 20;
  const double deadline = thread_cpu_seconds() + kDeadlineSeconds;
  config.should_continue = [deadline] {
    return thread_cpu_seconds() < deadline ? absl::OkStatus()
                                           : absl::DeadlineExceededError("fuzz input deadline");
  };

  // The input's size also picks a layout change (--io-layout) of the first input of rank 3 to 5
  // that is not an output, and --layout-sensitive-ops, so the boundary Transposes and the
  // transpose rules meet client graphs too.
  const size_t pick = size % 4;
  if (pick & 1) {
    static const char* const kLayouts[] = {"NWC", "NHWC", "NDHWC"};
    for (const auto& in : (*model)->graph().inputs()) {
      const auto& type = in.info.type();
      if (in.value->is_initializer() || in.value->is_graph_output() || !type.has_tensor_type() ||
          !type.tensor_type().has_shape())
        continue;
      const int rank = type.tensor_type().shape().dim_size();
      if (rank < 3 || rank > 5) continue;
      config.io_layout[in.value->name()] = kLayouts[rank - 3];
      break;
    }
  }
  config.layout_sensitive_ops = (pick & 2) != 0;

  auto report = graft::run_pipeline(*model, config);
  if (!report.ok()) {
    if (report.status().code() == absl::StatusCode::kDeadlineExceeded) return 0;
    fail("the pipeline failed on a model that loaded", report.status().ToString());
  }
  for (const auto& pass : report->passes)
    if (pass.rollbacks) fail("a pass was rolled back", pass.name + ": " + pass.rollback_reason);

  auto bytes = (*model)->serialize_and_release();
  if (!bytes.ok()) {
    if (bytes.status().code() == absl::StatusCode::kResourceExhausted) return 0;
    fail("serialization failed", bytes.status().ToString());
  }
  auto reloaded = graft::ir::Model::parse(*bytes);
  if (!reloaded.ok()) fail("the optimized model does not load", reloaded.status().ToString());
  return 0;
}
