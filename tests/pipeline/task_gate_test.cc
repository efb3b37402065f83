// Task-level gates (core/eval/task_gate.h): detections matched as sets of boxes, classes ranked,
// masks compared by IoU; inferred from the model, set per output, and applied by the pipeline to
// lossy passes: a detector that keeps one box more is kept with its matched-box figures, one
// whose boxes are dropped or moved off their scores is rolled back.
#include <algorithm>
#include <cmath>
#include <regex>

#include "core/eval/task_gate.h"
#include "core/eval/verify.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

using eval::DetectionMatch;
using eval::OutputGateSpec;
using eval::TaskGate;
using eval::TaskJudge;
using eval::TaskKind;
using eval::TaskResult;
using eval::Tensor;

Tensor floats(std::vector<int64_t> dims, const std::vector<double>& values) {
  auto t = Tensor::zeros(onnx::TensorProto::FLOAT, std::move(dims), 1 << 20);
  EXPECT_TRUE(t.ok());
  for (size_t i = 0; i < values.size(); ++i) t->set_double(static_cast<int64_t>(i), values[i]);
  return std::move(*t);
}

Tensor ints(std::vector<int64_t> dims, const std::vector<int64_t>& values) {
  auto t = Tensor::zeros(onnx::TensorProto::INT64, std::move(dims), 1 << 20);
  EXPECT_TRUE(t.ok());
  for (size_t i = 0; i < values.size(); ++i) t->set_int64(static_cast<int64_t>(i), values[i]);
  return std::move(*t);
}

// n boxes on a grid (corners), scores descending, labels i % 3.
struct Detections {
  Tensor boxes, scores, labels;
};
Detections grid(int64_t n) {
  std::vector<double> b, s;
  std::vector<int64_t> l;
  for (int64_t i = 0; i < n; ++i) {
    const double x = 20.0 * (i % 10), y = 20.0 * (i / 10);
    b.insert(b.end(), {x, y, x + 10, y + 10});
    s.push_back(1.0 - 0.005 * static_cast<double>(i));
    l.push_back(i % 3);
  }
  return {floats({n, 4}, b), floats({n}, s), ints({n}, l)};
}

DetectionMatch match(const Detections& a, const Detections& b) {
  auto m =
      eval::match_detections({&a.boxes, &a.scores, &a.labels}, {&b.boxes, &b.scores, &b.labels});
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? *m : DetectionMatch{};
}

TaskResult judge_detection(const DetectionMatch& m) {
  TaskJudge judge(TaskGate{.kind = TaskKind::kDetection,
                           .threshold = 0.9,
                           .output = "boxes",
                           .group = {"boxes", "scores", "labels"},
                           .origin = "test"});
  judge.add(m);
  return judge.result();
}

TEST(MatchDetections, OneBoxMoreIsMatchedAndPasses) {
  const Detections a = grid(40);
  Detections b = grid(41);
  // Slightly moved boxes still match.
  for (int64_t i = 0; i < 40 * 4; ++i) b.boxes.set_double(i, b.boxes.get_double(i) + 0.5);
  const DetectionMatch m = match(a, b);
  EXPECT_EQ(m.original_rows, 40);
  EXPECT_EQ(m.candidate_rows, 41);
  ASSERT_EQ(m.pairs.size(), 40u);
  for (const auto& [x, y] : m.pairs) EXPECT_EQ(x, y);
  const TaskResult r = judge_detection(m);
  EXPECT_TRUE(r.passed) << r.detail;
  EXPECT_NEAR(r.figure, 40.0 / 41, 1e-12);
  EXPECT_NE(r.detail.find("40 of 40 original and 41 optimized"), std::string::npos) << r.detail;
  EXPECT_EQ(r.replaces_value_gate, std::vector<std::string>{"boxes"});
}

TEST(MatchDetections, ReorderedRowsMatchAsASet) {
  const Detections a = grid(30);
  Detections b = grid(30);
  // Reverse every output's rows together: the same detections in another order.
  std::vector<int64_t> rev(30);
  for (int64_t i = 0; i < 30; ++i) rev[i] = 29 - i;
  b.boxes = *eval::gather_rows(a.boxes, 0, rev, 1 << 20);
  b.scores = *eval::gather_rows(a.scores, 0, rev, 1 << 20);
  b.labels = *eval::gather_rows(a.labels, 0, rev, 1 << 20);
  const DetectionMatch m = match(a, b);
  ASSERT_EQ(m.pairs.size(), 30u);
  for (const auto& [x, y] : m.pairs) EXPECT_EQ(y, 29 - x);
  EXPECT_TRUE(judge_detection(m).passed);
}

TEST(MatchDetections, DroppedBoxesFail) {
  const Detections a = grid(40);
  const Detections b = grid(20);
  const TaskResult r = judge_detection(match(a, b));
  EXPECT_FALSE(r.passed);
  EXPECT_DOUBLE_EQ(r.figure, 0.5);
}

TEST(MatchDetections, BoxesOffTheirLabelsFail) {
  // The same boxes, each row's box taken from its neighbour: the labels no longer agree with the
  // boxes (rows i and i+1 have different labels), so almost nothing matches.
  const Detections a = grid(30);
  Detections b = grid(30);
  std::vector<int64_t> shifted(30);
  for (int64_t i = 0; i < 30; ++i) shifted[i] = (i + 1) % 30;
  b.boxes = *eval::gather_rows(a.boxes, 0, shifted, 1 << 20);
  const TaskResult r = judge_detection(match(a, b));
  EXPECT_FALSE(r.passed) << r.detail;
  EXPECT_LT(r.figure, 0.1);
}

TEST(MatchDetections, CenterSizeBoxesAndRawIndices) {
  // (cx, cy, w, h) with a box whose corners reading would be inverted: read as center-size.
  Tensor a = floats({2, 4}, {10, 10, 4, 4, 50, 50, 8, 2});
  Tensor b = floats({2, 4}, {10.1, 10, 4, 4, 50, 50.2, 8, 2});
  auto m = eval::match_detections({&a}, {&b});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->pairs.size(), 2u);
  // NonMaxSuppression's own output [K, 3]: rows matched when equal.
  Tensor i = ints({3, 3}, {0, 0, 5, 0, 1, 7, 0, 0, 2});
  Tensor j = ints({2, 3}, {0, 0, 2, 0, 0, 5});
  auto n = eval::match_detections({&i}, {&j});
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->pairs.size(), 2u);
  EXPECT_EQ(n->boxes, -1);
}

TEST(MatchDetections, BatchOfOneLeadingDim) {
  Tensor a = floats({1, 2, 4}, {0, 0, 10, 10, 20, 20, 30, 30});
  Tensor b = floats({1, 1, 4}, {20, 20, 30, 30});
  auto m = eval::match_detections({&a}, {&b});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->axis, 1);
  EXPECT_EQ(m->original_rows, 2);
  ASSERT_EQ(m->pairs.size(), 1u);
  EXPECT_EQ(m->pairs[0], std::make_pair(int64_t{1}, int64_t{0}));
}

TEST(MatchDetections, SeveralBoxesPerRowAreNotReadAsOneBoxPerRow) {
  // [rows, 2, 4]: two boxes per row; reading its flat values four at a time would pair rows with
  // the wrong boxes, so it is not taken as the group's boxes.
  Tensor a = floats({2, 2, 4}, std::vector<double>(16, 1.0));
  auto m = eval::match_detections({&a}, {&a});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->boxes, -1);
  EXPECT_TRUE(m->ious.empty());
}

TEST(TaskJudge, TopClassesOverRows) {
  TaskJudge top5(
      TaskGate{.kind = TaskKind::kTop5, .threshold = 0.99, .output = "y", .group = {"y"}});
  TaskJudge top1(
      TaskGate{.kind = TaskKind::kTop1, .threshold = 0.9, .output = "y", .group = {"y"}});
  // Two rows of 8 classes: row 0 keeps its top class; in row 1 the original's top (class 7)
  // falls to third place.
  Tensor a = floats({2, 8}, {0, 1, 2, 3, 4, 5, 6, 9, 0, 1, 2, 3, 4, 5, 6, 9});
  Tensor b = floats({2, 8}, {0, 1, 2, 3, 4, 5, 6, 9, 0, 1, 2, 3, 4, 9.5, 9.7, 9});
  for (TaskJudge* j : {&top5, &top1}) j->add(a, b);
  const TaskResult r5 = top5.result(), r1 = top1.result();
  EXPECT_DOUBLE_EQ(r5.figure, 1.0);
  EXPECT_TRUE(r5.passed);
  EXPECT_DOUBLE_EQ(r1.figure, 0.5);
  EXPECT_FALSE(r1.passed);
  // Far down the ranking: fails top5 too.
  TaskJudge again(
      TaskGate{.kind = TaskKind::kTop5, .threshold = 0.99, .output = "y", .group = {"y"}});
  Tensor c = floats({1, 8}, {0, 1, 2, 3, 4, 5, 6, 9});
  Tensor d = floats({1, 8}, {9, 9, 9, 9, 9, 9, 6, 1});
  again.add(c, d);
  EXPECT_FALSE(again.result().passed);
}

TEST(TaskJudge, MasksByIoU) {
  TaskJudge binary(
      TaskGate{.kind = TaskKind::kMask, .threshold = 0.9, .output = "m", .group = {"m"}});
  // 1x1x2x4 probability map: the original's mask has 4 pixels, the candidate's 5 (one more).
  Tensor a = floats({1, 1, 2, 4}, {0.9, 0.9, 0.9, 0.9, 0.1, 0.1, 0.1, 0.1});
  Tensor b = floats({1, 1, 2, 4}, {0.9, 0.9, 0.9, 0.9, 0.6, 0.1, 0.1, 0.1});
  binary.add(a, b);
  TaskResult r = binary.result();
  EXPECT_TRUE(r.judged);
  EXPECT_DOUBLE_EQ(r.figure, 0.8);
  EXPECT_FALSE(r.passed);
  // An empty original mask judges nothing: the value gate stands.
  TaskJudge empty(
      TaskGate{.kind = TaskKind::kMask, .threshold = 0.9, .output = "m", .group = {"m"}});
  Tensor z = floats({1, 1, 2, 4}, std::vector<double>(8, 0.1));
  empty.add(z, z);
  EXPECT_FALSE(empty.result().judged);
  EXPECT_TRUE(empty.result().replaces_value_gate.empty());
  // Two classes per pixel: each pixel's argmax.
  TaskJudge classes(
      TaskGate{.kind = TaskKind::kMask, .threshold = 0.5, .output = "m", .group = {"m"}});
  Tensor c = floats({1, 2, 1, 2}, {1, 0, 0, 1});  // pixel 0: class 0, pixel 1: class 1
  Tensor d = floats({1, 2, 1, 2}, {1, 1, 0, 0});  // both class 0
  classes.add(c, d);
  r = classes.result();
  // class 0: intersection 1, union 2; class 1: intersection 0, union 1.
  EXPECT_DOUBLE_EQ(r.figure, 0.25);
}

TEST(OutputGates, ParseAndCheck) {
  auto g = eval::parse_output_gate("a=b=detection:0.8");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->output, "a=b");
  EXPECT_EQ(g->kind, "detection");
  EXPECT_EQ(g->threshold, 0.8);
  EXPECT_TRUE(eval::check_output_gate(*g).ok());
  EXPECT_FALSE(eval::parse_output_gate("nokind").ok());
  EXPECT_FALSE(eval::parse_output_gate("y=top1:x").ok());
  for (const char* bad : {"y=top7", "y=top1:1.5", "y=top1:-0.1", "y=mask:nan"}) {
    auto spec = eval::parse_output_gate(bad);
    EXPECT_TRUE(!spec.ok() || !eval::check_output_gate(*spec).ok()) << bad;
  }
}

// A detector as torchvision exports one (NonMaxSuppression inside an If), a classifier and a
// segmenter's upsampled map.
const char* kDetector = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[1, 200, 4] bx, float[1, 2, 200] sc) => (float[K, 4] boxes, float[K] scores,
                                                   int64[K] labels) {
    max_out = Constant <value = int64[1] {50}> ()
    iou = Constant <value = float[1] {0.5}> ()
    thr = Constant <value = float[1] {0.0}> ()
    zero = Constant <value = int64[1] {0}> ()
    one = Constant <value = int64 {1}> ()
    two = Constant <value = int64 {2}> ()
    starts = Constant <value = int64[1] {1}> ()
    ends = Constant <value = int64[1] {3}> ()
    rest = Constant <value = int64[1] {200}> ()
    flag = Constant <value = bool {1}> ()
    sel = If (flag) <
      then_branch = t () => (int64[K, 3] s) { s = NonMaxSuppression (bx, sc, max_out, iou, thr) },
      else_branch = e () => (int64[K, 3] s) { s = NonMaxSuppression (bx, sc, max_out, iou, thr) }>
    bx2 = Squeeze (bx, zero)
    sc2 = Squeeze (sc, zero)
    idx = Gather <axis = 1> (sel, two)
    boxes = Gather <axis = 0> (bx2, idx)
    cls_box = Slice (sel, starts, ends, starts)
    scores = GatherND (sc2, cls_box)
    labels = Gather <axis = 1> (sel, one)
    head = Slice (bx2, starts, rest, zero)
    first = Slice (bx2, zero, starts, zero)
    rolled = Concat <axis = 0> (head, first)
  }
)";

TEST(OutputGates, InferredFromTheModel) {
  auto det = parse_text(kDetector);
  ASSERT_TRUE(det);
  auto gates = eval::task_gates(*det);
  ASSERT_TRUE(gates.ok()) << gates.status();
  ASSERT_EQ(gates->size(), 1u);
  EXPECT_EQ(gates->at(0).kind, TaskKind::kDetection);
  EXPECT_EQ(gates->at(0).output, "boxes");
  EXPECT_EQ(gates->at(0).group, (std::vector<std::string>{"boxes", "scores", "labels"}));

  auto cls = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N, 4] x, float[1, 3, 8, 8] img) => (float[N, 10] logits, float[N, 2] pair,
                                                 float[1, 3, 16, 16] seg, float[N, 4] feat) {
      w = Constant <value = float[4, 10] {1,2,3,4,5,6,7,8,9,10,1,2,3,4,5,6,7,8,9,10,
                                          1,2,3,4,5,6,7,8,9,10,1,2,3,4,5,6,7,8,9,10}> ()
      v = Constant <value = float[4, 2] {1, 2, 3, 4, 5, 6, 7, 8}> ()
      logits = MatMul (x, w)
      m = MatMul (x, v)
      pair = Softmax (m)
      roi = Constant <value = float[0] {}> ()
      scales = Constant <value = float[4] {1, 1, 2, 2}> ()
      seg = Resize <mode = "linear"> (img, roi, scales)
      feat = Relu (x)
    }
  )");
  ASSERT_TRUE(cls);
  gates = eval::task_gates(*cls);
  ASSERT_TRUE(gates.ok()) << gates.status();
  std::map<std::string, TaskKind> kinds;
  for (const TaskGate& g : *gates) kinds[g.output] = g.kind;
  EXPECT_EQ(kinds,
            (std::map<std::string, TaskKind>{
                {"logits", TaskKind::kTop5}, {"pair", TaskKind::kTop1}, {"seg", TaskKind::kMask}}));
  // Set by the user: a kind for an output graft does not judge, one turned off, a threshold.
  gates = eval::task_gates(*cls,
                           {{"feat", "top1", 0.5}, {"seg", "values", {}}, {"logits", "top5", 0.8}});
  ASSERT_TRUE(gates.ok()) << gates.status();
  kinds.clear();
  for (const TaskGate& g : *gates) kinds[g.output] = g.kind;
  EXPECT_EQ(kinds, (std::map<std::string, TaskKind>{{"logits", TaskKind::kTop5},
                                                    {"pair", TaskKind::kTop1},
                                                    {"feat", TaskKind::kTop1}}));
  for (const TaskGate& g : *gates)
    if (g.output == "logits") {
      EXPECT_EQ(g.threshold, 0.8);
    }
  // Refused: an unknown output, the same output twice, a detection member given another kind.
  EXPECT_FALSE(eval::task_gates(*cls, {{"nope", "top1", {}}}).ok());
  EXPECT_FALSE(eval::task_gates(*cls, {{"feat", "top1", {}}, {"feat", "mask", {}}}).ok());
  auto refused = eval::task_gates(*det, {{"scores", "top1", {}}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.status().message()).find("detection group"), std::string::npos);
}

TEST(OutputGates, UserDetectionGroupCollectsAcrossOtherSpecs) {
  // Specs for other outputs between two detection specs add gates in between: the group still
  // collects both (the list grows as it is built).
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[N, 4] x) => (float[N, 4] a, float[N, 4] b, float[N, 4] c, float[N, 4] d,
                          float[N, 4] e) {
      a = Relu (x)
      b = Neg (x)
      c = Abs (x)
      d = Sigmoid (x)
      e = Exp (x)
    }
  )");
  ASSERT_TRUE(model);
  auto gates = eval::task_gates(*model, {{"a", "detection", {}},
                                         {"b", "top1", {}},
                                         {"c", "top1", {}},
                                         {"e", "top5", {}},
                                         {"d", "detection", 0.7}});
  ASSERT_TRUE(gates.ok()) << gates.status();
  ASSERT_EQ(gates->size(), 4u);
  EXPECT_EQ(gates->at(0).kind, TaskKind::kDetection);
  EXPECT_EQ(gates->at(0).group, (std::vector<std::string>{"a", "d"}));
}

// ------------------------------------------------------------------ the pipeline, lossy passes

// A lossy pass that edits the detector: NonMaxSuppression's max_output_boxes_per_class, or the
// boxes read from the rows rotated by one (each box off its score and label).
class EditDetector : public Pass {
 public:
  EditDetector(int64_t max_out, bool roll) : max_out_(max_out), roll_(roll) {}
  std::string_view name() const override { return "edit_detector"; }
  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    PassResult result;
    for (ir::Node* n : model.graph().nodes()) {
      if (n->is("Constant") && n->output(0)->name() == "max_out" && max_out_ > 0) {
        n->mutable_proto().mutable_attribute(0)->mutable_t()->set_int64_data(0, max_out_);
        result.add();
      }
      if (roll_ && n->is("Gather") && n->output(0)->name() == "boxes") {
        n->set_input(0, model.graph().lookup("rolled"));
        result.add();
      }
    }
    return result;
  }

 private:
  int64_t max_out_;
  bool roll_;
};

PassSpec edit(int64_t max_out, bool roll) {
  PassSpec spec{"edit_detector", [=] { return std::make_unique<EditDetector>(max_out, roll); }, {}};
  spec.lossy = true;
  spec.gate = {.max_rel = 0.01, .min_cosine = 0.9995};
  return spec;
}

const LossyTrial& only_trial(const PipelineReport& report) {
  EXPECT_EQ(report.verification.lossy_trials.size(), 1u);
  return report.verification.lossy_trials.at(0);
}

TEST(DetectionGate, OneBoxMorePerClassIsKeptWithItsMatchedBoxFigures) {
  auto model = parse_text(kDetector);
  ASSERT_TRUE(model);
  auto report = run_specs(model, {edit(51, false)}, test_pipeline_config());
  ASSERT_TRUE(report.ok()) << report.status();
  const LossyTrial& t = only_trial(*report);
  EXPECT_TRUE(t.kept) << t.verdict;
  ASSERT_EQ(t.tasks.size(), 1u);
  const TaskResult& r = t.tasks[0];
  EXPECT_EQ(r.kind, TaskKind::kDetection);
  EXPECT_TRUE(r.passed) << r.detail;
  std::map<std::string, double> f(r.figures.begin(), r.figures.end());
  // Every original detection matched exactly; the candidate has one or two more per input set
  // (one per class when enough boxes pass the threshold). A run of this model is cheap, so the
  // lossy measure uses several sets (VerifyOptions::max_trials).
  std::smatch sets;
  const std::string& message = report->verification.result.message;
  ASSERT_TRUE(std::regex_search(message, sets, std::regex("measured on ([0-9]+) input sets")))
      << message;
  EXPECT_GT(std::stoi(sets[1]), 1);
  EXPECT_EQ(f["matched"], f["original_rows"]);
  EXPECT_GT(f["candidate_rows"], f["original_rows"]);
  EXPECT_LE(f["candidate_rows"], f["original_rows"] + 2 * std::stoi(sets[1]));
  EXPECT_EQ(f["min_iou"], 1);
  EXPECT_NE(t.verdict.find("detection of 'boxes'"), std::string::npos) << t.verdict;
  EXPECT_EQ(count_ops(*model, "NonMaxSuppression"), 2);  // in the If's branches
}

TEST(DetectionGate, DroppedBoxesAreRolledBack) {
  auto model = parse_text(kDetector);
  ASSERT_TRUE(model);
  auto original = model->clone();
  auto report = run_specs(model, {edit(25, false)}, test_pipeline_config());
  ASSERT_TRUE(report.ok()) << report.status();
  const LossyTrial& t = only_trial(*report);
  EXPECT_FALSE(t.kept);
  EXPECT_EQ(t.verdict.rfind("rolled back (detection of 'boxes' 0.5", 0), 0u) << t.verdict;
  EXPECT_EQ(same_outputs(*original, *model), "");
}

TEST(DetectionGate, BoxesMovedOffTheirScoresAreRolledBack) {
  auto model = parse_text(kDetector);
  ASSERT_TRUE(model);
  auto original = model->clone();
  auto report = run_specs(model, {edit(0, true)}, test_pipeline_config());
  ASSERT_TRUE(report.ok()) << report.status();
  const LossyTrial& t = only_trial(*report);
  EXPECT_FALSE(t.kept) << t.verdict;
  // Each box now sits on a neighbour's row: few match by IoU within their label.
  EXPECT_EQ(t.verdict.rfind("rolled back (detection of 'boxes' ", 0), 0u) << t.verdict;
  EXPECT_EQ(same_outputs(*original, *model), "");
}

TEST(DetectionGate, TurnedOffTheRowCountIsExactAgain) {
  // --gate boxes=values: the group is compared as written, and one box more changes a shape.
  auto model = parse_text(kDetector);
  ASSERT_TRUE(model);
  PipelineConfig config = test_pipeline_config();
  config.output_gates = {{"boxes", "values", {}}};
  auto report = run_specs(model, {edit(51, false)}, config);
  ASSERT_TRUE(report.ok()) << report.status();
  const LossyTrial& t = only_trial(*report);
  EXPECT_FALSE(t.kept);
  EXPECT_TRUE(t.tasks.empty());
  EXPECT_NE(t.verdict.find("it broke the model"), std::string::npos) << t.verdict;
  // A gate naming no output of the model is refused before any work.
  config.output_gates = {{"nope", "detection", {}}};
  auto refused = run_specs(model, {edit(51, false)}, config);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace graft::testing
