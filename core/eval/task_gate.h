// Task-level judgments of a lossy candidate's outputs, beside the value error (OutputError):
// what a detector, a classifier or a segmenter computes is a set of boxes, a ranking of classes
// or a mask, and that is what a user compares, not each number.
//
//  - Detection: the outputs downstream of a NonMaxSuppression (in the graph, or in an If/Loop
//    body) are one group of rows: boxes (a float output whose last dim is 4), scores, labels,
//    masks, ... sharing their row count. The original's rows and the candidate's are matched one
//    to one, most confident first: the same value in every integer output (labels) and boxes
//    overlapping with IoU >= kMatchIou (an exact row match when the group has no boxes, as raw
//    NonMaxSuppression indices). The figure is the smaller of the fractions of the original's
//    rows matched and of the candidate's rows matched; the group's outputs are then compared on
//    the matched rows, so their value errors say how far matched detections moved. The boxes
//    are judged by the match (IoU), not by their value gate; the scores keep theirs.
//  - Classification (top5, top1): a float output [batch, classes] computed by Gemm, MatMul or
//    Softmax, or read by an ArgMax or TopK: per row, whether the original's top class is among the
//    candidate's top five (top5), or is the candidate's top class (top1). The figure is the
//    fraction of rows, over every input set.
//  - Segmentation (mask): a float output [batch, classes, H, W] upsampled by Resize (classes >= 2:
//    each pixel's class is its argmax) or computed by Sigmoid with one channel (a pixel is in the
//    mask at >= 0.5). The figure is the intersection over union, averaged over the classes present
//    (mean IoU). A mask judgment replaces the output's value gate; when the original's mask is
//    empty on the inputs there is nothing to judge, and the value gate stands.
//
// Kinds are inferred from the original model (task_gates) and can be set per output
// (OutputGateSpec: "values" turns an output's task judgment off).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <absl/status/statusor.h>

#include "core/eval/tensor.h"
#include "core/ir/model.h"

namespace graft::eval {

enum class TaskKind { kValues, kDetection, kTop1, kTop5, kMask };
const char* task_kind_name(TaskKind kind);  // "values", "detection", "top1", "top5", "mask"

// Boxes whose IoU is at least this are the same detection.
inline constexpr double kMatchIou = 0.5;

// A user's choice for one output (the CLI's --gate OUTPUT=KIND[:THRESHOLD]).
struct OutputGateSpec {
  std::string output;
  std::string kind;                 // a task_kind_name
  std::optional<double> threshold;  // in [0, 1]; default: the kind's (default_threshold)
};

double default_threshold(TaskKind kind);  // detection 0.9, top1 0.9, top5 0.99, mask 0.9
std::optional<TaskKind> task_kind_from_name(std::string_view name);
// What can be checked without the model: a known kind, a threshold in [0, 1] (not NaN), a
// non-empty output name of at most 4096 bytes. InvalidArgument naming the output.
absl::Status check_output_gate(const OutputGateSpec& spec);

// How one output (for detection: one group of outputs) is judged.
struct TaskGate {
  TaskKind kind = TaskKind::kValues;
  double threshold = 0;
  // The output the gate is named after: detection's boxes (or its first output), else the output.
  std::string output{};
  std::vector<std::string> group{};  // detection: every output of the group, in model order
  std::string origin{};              // "inferred (...)" or "set by --gate"
};

// The gates of `model`'s main graph outputs: inferred, then `specs` applied (a spec naming an
// output of an inferred detection group sets the whole group; "values" removes the gate).
// InvalidArgument for a spec naming no main graph output, an unknown kind, a threshold outside
// [0, 1] or NaN, or two specs for one output.
absl::StatusOr<std::vector<TaskGate>> task_gates(const ir::Model& model,
                                                 const std::vector<OutputGateSpec>& specs = {});

// Parses "OUTPUT=KIND[:THRESHOLD]" (the CLI's --gate); the output name is everything before the
// last '='. InvalidArgument naming what is wrong.
absl::StatusOr<OutputGateSpec> parse_output_gate(std::string_view text);

// What one gate found over every input set.
struct TaskResult {
  std::string output;
  TaskKind kind = TaskKind::kValues;
  double threshold = 0;
  double figure = 1;   // compared with threshold: kept when figure >= threshold
  bool judged = true;  // false: nothing to judge on these inputs (empty mask); not gated
  bool passed = true;  // judged && figure >= threshold, or !judged
  std::string detail;  // "167 of 168 boxes matched (IoU >= 0.5, mean 0.98) ..."
  std::string origin;  // TaskGate::origin
  // Named figures for reports: "original_rows", "candidate_rows", "matched", "mean_iou", ...
  std::vector<std::pair<std::string, double>> figures;
  // Outputs this judgment stands for instead of their value gate (their error is still
  // reported): a detection's boxes (matched by IoU), a judged mask.
  std::vector<std::string> replaces_value_gate;
};

// The rows of a detection group matched between the original and the candidate of one input
// set. `original` and `candidate` hold the group's outputs in TaskGate::group order. Pairs are
// (original row, candidate row) along `axis` (0, or 1 under a leading batch dim of 1).
struct DetectionMatch {
  int64_t axis = 0;
  int boxes = -1;  // position of the boxes in the group, -1 when there are none
  // Positions in the group of the outputs holding the rows (leading dims 1, the row count along
  // `axis` on each side, the same dims after it): those compared on the matched rows.
  std::vector<size_t> row_outputs;
  int64_t original_rows = 0, candidate_rows = 0;
  std::vector<std::pair<int64_t, int64_t>> pairs;
  std::vector<double> ious;        // per pair; empty when the group has no boxes
  double max_unmatched_score = 0;  // highest score of a row left unmatched, either side
  bool has_scores = false;
};
// InvalidArgument when the group's tensors do not have a common row count per side.
absl::StatusOr<DetectionMatch> match_detections(const std::vector<const Tensor*>& original,
                                                const std::vector<const Tensor*>& candidate);

// `t`'s slices at `rows` along `axis`, in that order (for comparing matched detections).
absl::StatusOr<Tensor> gather_rows(const Tensor& t, int64_t axis, const std::vector<int64_t>& rows,
                                   uint64_t max_bytes);

// Accumulates one gate's judgment over input sets.
class TaskJudge {
 public:
  explicit TaskJudge(TaskGate gate) : gate_(std::move(gate)) {}
  const TaskGate& gate() const { return gate_; }
  // Classification and mask: one output's tensors of one input set (same dims).
  void add(const Tensor& original, const Tensor& candidate);
  // Detection: one input set's match.
  void add(const DetectionMatch& match);
  TaskResult result() const;

 private:
  TaskGate gate_;
  // detection
  int64_t original_rows_ = 0, candidate_rows_ = 0, matched_ = 0;
  double iou_sum_ = 0, iou_min_ = 1, max_unmatched_score_ = 0;
  int64_t ious_ = 0;
  bool has_scores_ = false;
  std::string boxes_;  // the group's boxes output, once seen
  // classification
  int64_t rows_ = 0, top1_ = 0, top5_ = 0;
  // mask: intersection and union per class (-1: the binary mask)
  std::map<int64_t, std::pair<int64_t, int64_t>> mask_;
  std::string unjudged_;  // why a classification/mask tensor could not be read
};

}  // namespace graft::eval
