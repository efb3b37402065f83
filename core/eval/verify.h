// Numeric verification: runs an original and an optimized model on the same seeded random
// inputs with the reference evaluator and compares every output. The original's outputs are
// computed once, so checking several candidates (the pipeline's bisection) costs one run each.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <absl/status/statusor.h>

#include "core/eval/executor.h"
#include "core/eval/kernel.h"
#include "core/eval/task_gate.h"
#include "core/eval/tensor.h"
#include "core/ir/model.h"

namespace graft::eval {

// Evaluator memory a verification may hold at once unless told otherwise: graftd's
// verify_max_bytes and the CLI's --verify-max-bytes default to it.
inline constexpr uint64_t kDefaultVerifyMaxBytes = 1ull << 30;
// The largest single tensor a verification may make (below a smaller budget: the budget).
inline constexpr uint64_t kDefaultVerifyMaxTensorBytes = 256ull << 20;

struct VerifyOptions {
  // Values for symbolic dims by dim_param name; unnamed or unlisted unknown dims use default_dim.
  std::map<std::string, int64_t> dims;
  // 0: automatic, the first of 1, 16, 64, 256 for which the original model runs (shape errors
  // such as a window larger than the input mean the dims are too small), skipping sizes whose
  // inputs would exceed max_auto_input_bytes.
  int64_t default_dim = 0;
  uint64_t max_auto_input_bytes = 64ull << 20;
  // Symbolic dims that neither `dims` nor `shapes` give take sizes by role instead: a leading
  // (batch) dim 1, an image's height and width (rank-4 float input, 1, 3 or 4 channels) 224,
  // any other (sequence, time) 128, one size per dim_param. When the original does not run at
  // them (shape errors, the work budget: each such run may use 1/(3 * trials) of what is left,
  // leaving room for the candidates measured against it), a quarter and a sixteenth of them are
  // tried, then 1. The result's message names the dims. What the pipeline measures lossy passes
  // with, so that their error means something.
  bool representative_dims = false;
  // Full shapes by input name (override the declared dims).
  std::map<std::string, std::vector<int64_t>> shapes;
  // Inputs filled with one value (e.g. a sample rate) instead of random numbers.
  std::map<std::string, double> values;
  // Inputs drawn from [low, high] instead of what their role gives (floats uniform in
  // [low, high), integers uniform in [ceil(low), floor(high)]): the distribution the model is
  // served on (audio in [-0.5, 0.5], token ids within a vocabulary). `values` wins over it.
  std::map<std::string, std::pair<double, double>> ranges;
  // Random float inputs are uniform in [-float_range, float_range]; integers in [0, int_max].
  double float_range = 1.0;
  int64_t int_max = 3;
  uint32_t seed = 1;
  int trials = 2;  // input sets; each uses seed + trial
  // More random input sets when a run is cheap: after `trials` sets, sets are added (up to
  // max_trials) while the original's runs together cost at most 1/16 of max_work, and the
  // calibration sets grow to as many. A lossy candidate's error is the worst over the sets, so a
  // decoder step (one token a set) is judged on several tokens, not one. 0: exactly `trials`.
  int max_trials = 0;
  // Random input sets drawn like the trials' (same sizes and rules) with other seeds (seed +
  // 1000 + k) and not run: what a pass that learns value ranges calibrates on when no data is
  // given, so that its error is measured on inputs it did not learn from
  // (Verifier::calibration_feeds). Ignored with input_sets.
  int calibration_sets = 0;
  // Float outputs match when |a - b| <= atol + rtol * |a| (NaN == NaN, equal infinities).
  double rtol = 1e-3;
  double atol = 1e-4;
  // Given input sets (e.g. recorded samples) used instead of random ones when not empty; each
  // maps every non-initializer graph input to a tensor (check_input_sets). Each set is one
  // trial; dims, default_dim, shapes, values, seed and trials are then ignored.
  std::vector<std::map<std::string, Tensor>> input_sets;
  // What measure() judges beyond each float output's error (task_gate.h: detection groups,
  // classification, masks). A detection group's outputs are compared on their matched rows, so
  // a candidate whose row count differs is not a mismatch; check() ignores these.
  std::vector<TaskGate> task_gates;
  // Per-tensor allocation cap inside the evaluator, and cap on the tensors alive at once.
  uint64_t max_tensor_bytes = kDefaultVerifyMaxTensorBytes;
  uint64_t max_live_bytes = kDefaultVerifyMaxBytes;
  // Operations (multiply-adds, elements written) of all the evaluator runs of one verification
  // together: the original's, every candidate's, bisection's. 0 = no cap. When it runs out the
  // result is not verifiable. The default affords the exact check (2 input sets: the original
  // and the optimized model, 4 runs) of ViT-B/16 at 224x224 (1.8e10 a run) with room for
  // bisection, and of r3d_18 at 16x112x112 (4.1e10 a run); some 15 s of dgemm-evaluator time for
  // ViT-B/16 (docs/performance.md). A request's deadline bounds its time whatever the budget.
  uint64_t max_work = 200'000'000'000;
  // Polled before every evaluated node; a non-OK status stops verification (the result is then
  // not verifiable, with that status's message). Not part of what the options mean.
  std::function<absl::Status()> should_continue;
};

// Sets the memory a verification may hold at once (max_live_bytes), and lowers the largest
// single tensor to it when it is smaller.
void set_memory_budget(VerifyOptions* options, uint64_t max_live_bytes);

// Most input sets (random trials or given sets) one verification runs.
constexpr int kMaxInputSets = 16;

// InvalidArgument for options no verification can use (negative dims, trials outside 1..16,
// more than 16 input sets, negative tolerances...).
absl::Status validate(const VerifyOptions& options);

// An input tensor a client sent as a serialized onnx.TensorProto, checked for what needs no
// model: the bytes parse, the data is inline (neither external nor segmented), the element type
// is one the evaluator holds, and the data holds exactly as many elements as the dims say. The
// dims are compared with the number of values the message carries before anything is
// allocated, so dims claiming more data than arrived cost nothing. Errors are InvalidArgument
// (a tensor above `max_bytes` too). `name` (may be null) receives the tensor's own name.
absl::StatusOr<Tensor> parse_input_tensor(std::string_view bytes, uint64_t max_bytes,
                                          std::string* name = nullptr);

// The checks of given input sets that need the model, in every set: each non-initializer input
// of the main graph has a tensor and nothing else does; its element type is the declared one;
// its dims are the declared static dims, a symbolic dim taking any size but one size for one
// dim_param across the set's inputs; at most kMaxInputSets sets. InvalidArgument naming the
// set (from 1, as input_set_label(what) N) and the input; `what` is "verify" (the sets of
// VerifyOptions::input_sets) or "calibration" (PipelineConfig::calibration_sets).
absl::Status check_input_sets(const ir::Model& model,
                              const std::vector<std::map<std::string, Tensor>>& sets,
                              const std::string& what = "verify");
// How errors name a set of the kind `what`: "verify input set", "calibration set".
std::string input_set_label(const std::string& what);

enum class VerifyStatus { kVerified, kNotVerifiable, kMismatch };
const char* verify_status_name(VerifyStatus s);  // "verified", "not_verifiable", "mismatch"

// How far one float output of a candidate is from the original's, over every input set: what a
// lossy transform (float16, int8) reports. `rel` is the worst absolute difference over the
// original's largest magnitude in that output (per-element relative differences explode where
// the original is near 0); `cosine` is the cosine similarity of the two outputs as vectors (1
// when both are all zero).
struct OutputError {
  std::string name;
  double max_abs = 0;
  double rel = 0;
  double cosine = 1;
};

// How one input of the compared sets was made: its dims in the first set, and "how": the
// distribution and the reason ("uniform in [-1, 1)", "integers in [0, 49]: indices into
// 'table' (50 rows)", "positions 256..256: the last rows of a table cut at run time to 257
// rows (past + sequence)", "value 16000 (given)", "given" for recorded sets).
struct InputNote {
  std::string name;
  std::vector<int64_t> dims;
  std::string how;
};

struct VerifyResult {
  VerifyStatus status = VerifyStatus::kNotVerifiable;
  // Human-readable: why it is not verifiable, or where the worst difference is.
  std::string message;
  // Not verifiable because of an op the evaluator cannot run: "domain::Op" or "Op".
  std::string unsupported_op;
  // Largest float difference over all outputs and trials (also when verified), and where.
  double max_abs_diff = 0;
  double max_rel_diff = 0;
  std::string worst_output;
  // Per float output (Verifier::measure; check() fills it too).
  std::vector<OutputError> outputs;
  // Per VerifyOptions::task_gates entry (measure() only).
  std::vector<TaskResult> tasks;
  // The inputs compared on, in graph input order (Verifier::inputs()).
  std::vector<InputNote> inputs;
};

class Verifier {
 public:
  // Generates the inputs from `original`'s main graph and runs it. Never fails: a model that
  // cannot be run gives a verifier whose check() returns the not-verifiable result.
  Verifier(const ir::Model& original, const VerifyOptions& options);
  ~Verifier();
  Verifier(const Verifier&) = delete;
  Verifier& operator=(const Verifier&) = delete;

  // Whether the original ran; false means every check() is not verifiable.
  bool usable() const { return !failure_.has_value(); }
  // "name=[dims], ..." of the inputs when representative_dims sized them, else "".
  const std::string& dims_used() const { return dims_used_; }
  // How each input of the sets was made (empty when not usable).
  const std::vector<InputNote>& inputs() const { return input_notes_; }
  // The input sets every check runs (empty when not usable).
  const std::vector<std::map<std::string, Tensor>>& feeds() const { return feeds_; }
  // VerifyOptions::calibration_sets input sets (empty when not usable or with given sets).
  const std::vector<std::map<std::string, Tensor>>& calibration_feeds() const {
    return calibration_feeds_;
  }
  const VerifyOptions& options() const { return options_; }
  VerifyResult check(const ir::Model& candidate) const;
  // For a lossy candidate: the same runs, but differing numbers are not a mismatch (the result
  // is kVerified with each output's error in `outputs`), and a float output whose element type
  // changed (float32 -> float16) is compared by value. Still a mismatch: a candidate that fails
  // where the original runs, or an output whose shape, count or non-float values changed.
  VerifyResult measure(const ir::Model& candidate) const;

 private:
  // One evaluator run, charged to the verification's work budget, of which it may use
  // 1/`share` of what is left.
  absl::StatusOr<std::vector<Tensor>> run(const ir::Model& model,
                                          const std::map<std::string, Tensor>& feeds,
                                          uint64_t share = 1,
                                          const ValueObserver* observer = nullptr) const;
  VerifyResult compare_runs(const ir::Model& candidate, bool lossy) const;
  // Position of the output `name` in output_names_ (its size when there is none).
  size_t output_index(const std::string& name) const;

  VerifyOptions options_;
  mutable uint64_t work_spent_ = 0;
  std::vector<std::map<std::string, Tensor>> feeds_;  // per trial
  std::vector<std::map<std::string, Tensor>> calibration_feeds_;
  std::vector<InputNote> input_notes_;
  std::vector<std::vector<Tensor>> expected_;  // per trial
  std::vector<std::string> output_names_;
  int64_t default_dim_used_ = 0;  // 0 when no input has a defaulted dim
  std::string dims_used_;         // "name=[dims], ..." when dims were sized by role
  std::optional<VerifyResult> failure_;
};

// One-shot: Verifier(original).check(optimized).
VerifyResult verify(const ir::Model& original, const ir::Model& optimized,
                    const VerifyOptions& options = {});

// The op named by an evaluator Unimplemented message ("no kernel for Op..." and similar), or "".
std::string unsupported_op_of(const absl::Status& status);

}  // namespace graft::eval
