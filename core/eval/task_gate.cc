#include "core/eval/task_gate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <absl/strings/str_join.h>

#include "core/base/status.h"
#include "core/ir/op_params.h"

namespace graft::eval {
namespace {

// Matching compares every original row with every candidate row: above this many pairs the group
// is not judged (NonMaxSuppression's outputs are bounded by max_output_boxes_per_class; a model
// that emits millions of rows is not a detector this can judge in bounded time).
constexpr int64_t kMaxPairs = 50'000'000;

bool holds_nms(const ir::Node& node, std::map<const ir::Node*, bool>& memo) {
  if (auto it = memo.find(&node); it != memo.end()) return it->second;
  memo[&node] = false;  // a cycle through bodies (impossible in a valid model) ends here
  bool found = node.is("NonMaxSuppression");
  for (const ir::Subgraph& s : node.subgraphs()) {
    if (found) break;
    for (const ir::Node* n : s.graph->nodes())
      if (holds_nms(*n, memo)) {
        found = true;
        break;
      }
  }
  return memo[&node] = found;
}

// The NonMaxSuppression nodes (or nodes whose bodies hold one) `v` is computed from.
std::set<const ir::Node*> nms_ancestors(const ir::Value* v, std::map<const ir::Node*, bool>& memo) {
  std::set<const ir::Node*> found, seen;
  std::vector<const ir::Node*> stack;
  if (v->producer()) stack.push_back(v->producer());
  while (!stack.empty()) {
    const ir::Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (holds_nms(*n, memo)) found.insert(n);
    for (const ir::Value* in : n->inputs())
      if (in != nullptr && in->producer() != nullptr) stack.push_back(in->producer());
  }
  return found;
}

// The first producer, following `v` back through ops that move or scale values without changing
// what they mean (reshapes, a bias Add, a Cast), that is not one of them.
const ir::Node* source_op(const ir::Value* v) {
  for (int depth = 0; v != nullptr && v->producer() != nullptr && depth < 8; ++depth) {
    const ir::Node* p = v->producer();
    if (!(ir::moves_values(*p) || p->is("Add") || p->is("Cast"))) return p;
    v = p->input(0);
  }
  return nullptr;
}

const onnx::TypeProto* declared_tensor_type(const ir::GraphOutput& o) {
  const onnx::TypeProto* type = o.info.has_type() ? &o.info.type() : o.value->type();
  return type != nullptr && type->has_tensor_type() ? type : nullptr;
}

std::optional<std::vector<int64_t>> declared_dims(const ir::GraphOutput& o) {
  const onnx::TypeProto* type = declared_tensor_type(o);
  if (type == nullptr || !type->tensor_type().has_shape()) return std::nullopt;
  std::vector<int64_t> dims;
  for (const auto& d : type->tensor_type().shape().dim())
    dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
  return dims;
}

int32_t declared_type(const ir::GraphOutput& o) {
  const onnx::TypeProto* type = declared_tensor_type(o);
  return type != nullptr ? type->tensor_type().elem_type() : 0;
}

// A classifier's or segmenter's gate inferred from how the output is computed and read.
std::optional<TaskGate> inferred_single(const ir::GraphOutput& o) {
  if (!is_float_type(declared_type(o))) return std::nullopt;
  const auto dims = declared_dims(o);
  if (!dims) return std::nullopt;
  const ir::Node* src = source_op(o.value);
  TaskGate g;
  g.output = o.value->name();
  if (dims->size() == 2 && (*dims)[1] != 1 && (*dims)[1] != 0) {
    bool read_by_ranker = false;
    for (const ir::Use& u : o.value->uses())
      if (u.node->is("ArgMax") || u.node->is("TopK")) read_by_ranker = true;
    const bool scores = src != nullptr && (src->is("Gemm") || src->is("MatMul") ||
                                           src->is("Softmax") || src->is("LogSoftmax"));
    if (!read_by_ranker && !scores) return std::nullopt;
    const int64_t classes = (*dims)[1];
    g.kind = classes >= 2 && classes <= 5 ? TaskKind::kTop1 : TaskKind::kTop5;
    g.origin = absl::StrCat("inferred (class scores [batch, ",
                            classes > 0 ? std::to_string(classes) : std::string("classes"),
                            "] from ", read_by_ranker ? "ArgMax/TopK" : src->op_type(), ")");
  } else if (dims->size() == 4 && src != nullptr) {
    const int64_t channels = (*dims)[1];
    if ((src->is("Resize") || src->is("Upsample")) && channels != 1 && channels != 0) {
      g.origin = "inferred (per-pixel class scores upsampled by " + src->op_type() + ")";
    } else if ((src->is("Sigmoid") || src->is("HardSigmoid")) && channels == 1) {
      g.origin = "inferred (one-channel probability map from " + src->op_type() + ")";
    } else {
      return std::nullopt;
    }
    g.kind = TaskKind::kMask;
  } else {
    return std::nullopt;
  }
  g.threshold = default_threshold(g.kind);
  g.group = {g.output};
  return g;
}

// Intersection over union of two boxes given as corners (x1, y1, x2, y2).
double iou(const double* a, const double* b) {
  const double iw = std::min(a[2], b[2]) - std::max(a[0], b[0]);
  const double ih = std::min(a[3], b[3]) - std::max(a[1], b[1]);
  if (!(iw > 0) || !(ih > 0)) return 0;
  const double inter = iw * ih;
  const double uni = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
  return uni > 0 ? inter / uni : 0;
}

// Rows of a [.., rows, 4] boxes tensor as corners. Boxes given as corners in either order of
// axes (x1 y1 x2 y2, y1 x1 y2 x2) have the same IoU; a set where some box has a negative extent
// as corners but none as (center, size) is read as (cx, cy, w, h).
std::vector<double> corners(const Tensor& t, int64_t rows, bool centered) {
  std::vector<double> out(static_cast<size_t>(rows) * 4);
  for (int64_t r = 0; r < rows; ++r) {
    double b[4];
    for (int k = 0; k < 4; ++k) b[k] = t.get_double(r * 4 + k);
    if (centered) {
      out[r * 4 + 0] = b[0] - b[2] / 2;
      out[r * 4 + 1] = b[1] - b[3] / 2;
      out[r * 4 + 2] = b[0] + b[2] / 2;
      out[r * 4 + 3] = b[1] + b[3] / 2;
    } else {
      for (int k = 0; k < 4; ++k) out[r * 4 + k] = b[k];
    }
  }
  return out;
}

bool valid_as_corners(const Tensor& t, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r)
    if (t.get_double(r * 4 + 2) < t.get_double(r * 4) ||
        t.get_double(r * 4 + 3) < t.get_double(r * 4 + 1))
      return false;
  return true;
}

bool valid_as_centered(const Tensor& t, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r)
    if (t.get_double(r * 4 + 2) < 0 || t.get_double(r * 4 + 3) < 0) return false;
  return true;
}

// Row `r` of `t` (rows along `axis`, every dim before it 1) equals row `s` of `u`.
bool rows_equal(const Tensor& t, int64_t r, const Tensor& u, int64_t s, int64_t width) {
  for (int64_t k = 0; k < width; ++k)
    if (t.get_int64(r * width + k) != u.get_int64(s * width + k)) return false;
  return true;
}

std::string fmt(double x) { return absl::StrFormat("%.4g", x); }

}  // namespace

const char* task_kind_name(TaskKind kind) {
  switch (kind) {
    case TaskKind::kValues:
      return "values";
    case TaskKind::kDetection:
      return "detection";
    case TaskKind::kTop1:
      return "top1";
    case TaskKind::kTop5:
      return "top5";
    case TaskKind::kMask:
      return "mask";
  }
  return "values";
}

double default_threshold(TaskKind kind) {
  switch (kind) {
    case TaskKind::kDetection:
      return 0.9;
    case TaskKind::kTop1:
      return 0.9;
    case TaskKind::kTop5:
      return 0.99;
    case TaskKind::kMask:
      return 0.9;
    case TaskKind::kValues:
      return 0;
  }
  return 0;
}

std::optional<TaskKind> task_kind_from_name(std::string_view name) {
  for (TaskKind k :
       {TaskKind::kValues, TaskKind::kDetection, TaskKind::kTop1, TaskKind::kTop5, TaskKind::kMask})
    if (name == task_kind_name(k)) return k;
  return std::nullopt;
}

absl::Status check_output_gate(const OutputGateSpec& spec) {
  if (spec.output.empty() || spec.output.size() > 4096)
    return absl::InvalidArgumentError("gate: the output name must be 1..4096 bytes");
  const std::string shown = spec.output.substr(0, 200);
  if (!task_kind_from_name(spec.kind))
    return absl::InvalidArgumentError(absl::StrCat("gate for '", shown, "': unknown kind '",
                                                   spec.kind.substr(0, 40),
                                                   "' (values, detection, top1, top5, mask)"));
  if (spec.threshold && !(*spec.threshold >= 0 && *spec.threshold <= 1))
    return absl::InvalidArgumentError(
        absl::StrCat("gate for '", shown, "': threshold ", *spec.threshold, " is not in [0, 1]"));
  return absl::OkStatus();
}

absl::StatusOr<OutputGateSpec> parse_output_gate(std::string_view view) {
  const std::string text(view);
  const size_t eq = text.rfind('=');
  if (eq == std::string::npos || eq == 0)
    return absl::InvalidArgumentError(
        absl::StrCat("gate '", text,
                     "': expected OUTPUT=KIND[:THRESHOLD], KIND one of values, "
                     "detection, top1, top5, mask"));
  OutputGateSpec spec;
  spec.output = text.substr(0, eq);
  const std::string rest = text.substr(eq + 1);
  const size_t colon = rest.find(':');
  spec.kind = rest.substr(0, colon);
  if (colon != std::string::npos) {
    const std::string number = rest.substr(colon + 1);
    double t = 0;
    if (!absl::SimpleAtod(number, &t))
      return absl::InvalidArgumentError(
          absl::StrCat("gate '", text, "': threshold '", number, "' is not a number"));
    spec.threshold = t;
  }
  return spec;
}

absl::StatusOr<std::vector<TaskGate>> task_gates(const ir::Model& model,
                                                 const std::vector<OutputGateSpec>& specs) {
  const ir::Graph& graph = model.graph();
  std::vector<TaskGate> gates;
  // Detection groups: outputs whose NonMaxSuppression ancestors overlap, in output order.
  std::map<const ir::Node*, bool> memo;
  std::vector<std::set<const ir::Node*>> group_nms;
  for (const ir::GraphOutput& o : graph.outputs()) {
    std::set<const ir::Node*> nms = nms_ancestors(o.value, memo);
    if (nms.empty()) continue;
    size_t g = 0;
    for (; g < group_nms.size(); ++g) {
      std::vector<const ir::Node*> common;
      std::set_intersection(nms.begin(), nms.end(), group_nms[g].begin(), group_nms[g].end(),
                            std::back_inserter(common));
      if (!common.empty()) break;
    }
    if (g == group_nms.size()) {
      group_nms.emplace_back();
      TaskGate gate;
      gate.kind = TaskKind::kDetection;
      gate.threshold = default_threshold(TaskKind::kDetection);
      gate.origin = "inferred (downstream of NonMaxSuppression)";
      gates.push_back(std::move(gate));
    }
    group_nms[g].insert(nms.begin(), nms.end());
    gates[g].group.push_back(o.value->name());  // only detection gates so far, in step
  }
  for (TaskGate& gate : gates) {
    // Named after the boxes when there are some.
    gate.output = gate.group.front();
    for (const ir::GraphOutput& o : graph.outputs()) {
      const auto dims = declared_dims(o);
      if (std::find(gate.group.begin(), gate.group.end(), o.value->name()) != gate.group.end() &&
          is_float_type(declared_type(o)) && dims && dims->size() >= 2 && dims->back() == 4) {
        gate.output = o.value->name();
        break;
      }
    }
  }
  auto gate_of = [&](const std::string& name) -> TaskGate* {
    for (TaskGate& g : gates)
      if (std::find(g.group.begin(), g.group.end(), name) != g.group.end()) return &g;
    return nullptr;
  };
  for (const ir::GraphOutput& o : graph.outputs())
    if (gate_of(o.value->name()) == nullptr)
      if (auto g = inferred_single(o)) gates.push_back(std::move(*g));

  // The user's choices.
  std::set<std::string> named;
  // The user's own detection group, by position (gates grows below: no pointer into it).
  std::optional<size_t> user_detection;
  for (const OutputGateSpec& spec : specs) {
    const bool exists = std::any_of(graph.outputs().begin(), graph.outputs().end(),
                                    [&](const auto& o) { return o.value->name() == spec.output; });
    if (!exists)
      return absl::InvalidArgumentError(absl::StrCat("gate for '", spec.output.substr(0, 200),
                                                     "': the model has no output of that name"));
    RETURN_IF_ERROR(check_output_gate(spec));
    if (!named.insert(spec.output).second)
      return absl::InvalidArgumentError(
          absl::StrCat("gate for '", spec.output.substr(0, 200), "': given twice"));
    const auto kind = task_kind_from_name(spec.kind);
    const double threshold = spec.threshold.value_or(default_threshold(*kind));
    TaskGate* existing = gate_of(spec.output);
    if (*kind == TaskKind::kValues) {
      if (existing != nullptr) existing->kind = TaskKind::kValues;  // removed below
      continue;
    }
    if (existing != nullptr && existing->kind == TaskKind::kDetection &&
        *kind != TaskKind::kDetection)
      return absl::InvalidArgumentError(absl::StrCat(
          "gate for '", spec.output.substr(0, 200), "': the output is part of a detection group (",
          absl::StrJoin(existing->group, ", "), "); give it 'detection' or 'values'"));
    if (existing != nullptr) {
      existing->kind = *kind;
      existing->threshold = threshold;
      existing->origin = "set by --gate";
      continue;
    }
    if (*kind == TaskKind::kDetection) {
      if (!user_detection) {
        user_detection = gates.size();
        gates.push_back(TaskGate{.kind = TaskKind::kDetection,
                                 .threshold = threshold,
                                 .output = spec.output,
                                 .group = {},
                                 .origin = "set by --gate"});
      }
      gates[*user_detection].group.push_back(spec.output);
      continue;
    }
    gates.push_back(TaskGate{.kind = *kind,
                             .threshold = threshold,
                             .output = spec.output,
                             .group = {spec.output},
                             .origin = "set by --gate"});
  }
  std::erase_if(gates, [](const TaskGate& g) { return g.kind == TaskKind::kValues; });
  return gates;
}

absl::StatusOr<Tensor> gather_rows(const Tensor& t, int64_t axis, const std::vector<int64_t>& rows,
                                   uint64_t max_bytes) {
  if (axis < 0 || axis >= t.rank())
    return absl::InvalidArgumentError("gather_rows: axis out of range");
  std::vector<int64_t> dims = t.dims();
  const int64_t n = dims[axis];
  dims[axis] = static_cast<int64_t>(rows.size());
  ASSIGN_OR_RETURN(Tensor out, Tensor::zeros(t.dtype(), dims, max_bytes));
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= t.dims()[i];
  for (int64_t i = axis + 1; i < t.rank(); ++i) inner *= t.dims()[i];
  const bool strings = t.dtype() == onnx::TensorProto::STRING;
  const size_t esize = strings ? 0 : storage_size(t.dtype());
  for (int64_t o = 0; o < outer; ++o)
    for (size_t k = 0; k < rows.size(); ++k) {
      const int64_t r = rows[k];
      if (r < 0 || r >= n) return absl::InvalidArgumentError("gather_rows: row out of range");
      const int64_t from = (o * n + r) * inner,
                    to = (o * static_cast<int64_t>(rows.size()) + static_cast<int64_t>(k)) * inner;
      if (strings) {
        for (int64_t e = 0; e < inner; ++e) out.strings()[to + e] = t.strings()[from + e];
      } else if (inner > 0) {
        std::memcpy(out.data<char>() + to * esize, t.data<char>() + from * esize, inner * esize);
      }
    }
  return out;
}

absl::StatusOr<DetectionMatch> match_detections(const std::vector<const Tensor*>& original,
                                                const std::vector<const Tensor*>& candidate) {
  if (original.empty() || original.size() != candidate.size())
    return absl::InvalidArgumentError("detection group: no outputs");
  DetectionMatch m;
  // The boxes: the first float output [rows, 4] (or [1, rows, 4]), one box per row.
  int boxes = -1;
  for (size_t k = 0; k < original.size(); ++k)
    if (const Tensor& t = *original[k]; is_float_type(t.dtype()) && t.dims().back() == 4 &&
                                        (t.rank() == 2 || (t.rank() == 3 && t.dims()[0] == 1))) {
      boxes = static_cast<int>(k);
      break;
    }
  m.boxes = boxes;
  const Tensor& key = *original[boxes >= 0 ? boxes : 0];
  m.axis = key.rank() >= 3 && key.dims()[0] == 1 ? 1 : 0;
  if (key.rank() <= m.axis) return absl::InvalidArgumentError("detection group: scalar output");
  m.original_rows = key.dims()[m.axis];
  const Tensor& ckey = *candidate[boxes >= 0 ? boxes : 0];
  if (ckey.rank() != key.rank())
    return absl::InvalidArgumentError("detection group: the candidate's rank differs");
  m.candidate_rows = ckey.dims()[m.axis];
  const int64_t n = m.original_rows, c = m.candidate_rows;
  if (n > 0 && c > kMaxPairs / std::max<int64_t>(n, 1))
    return absl::InvalidArgumentError(
        absl::StrCat("detection group: ", n, " x ", c, " rows are too many to match"));
  // The group's row-aligned outputs: leading dims 1, then the row count on each side.
  auto aligned = [&](const Tensor& t, int64_t rows) {
    if (t.rank() <= m.axis || t.dims()[m.axis] != rows) return false;
    for (int64_t i = 0; i < m.axis; ++i)
      if (t.dims()[i] != 1) return false;
    return true;
  };
  auto width = [&](const Tensor& t) {
    int64_t w = 1;
    for (int64_t i = m.axis + 1; i < t.rank(); ++i) w *= t.dims()[i];
    return w;
  };
  std::vector<size_t> ints;  // integer outputs: labels, indices; must agree on a matched row
  int scores = -1;
  for (size_t k = 0; k < original.size(); ++k) {
    const Tensor &a = *original[k], &b = *candidate[k];
    if (!aligned(a, n) || !aligned(b, c) || a.rank() != b.rank()) continue;
    bool same_width = true;
    for (int64_t i = m.axis + 1; i < a.rank(); ++i) same_width &= a.dims()[i] == b.dims()[i];
    if (!same_width) continue;
    m.row_outputs.push_back(k);
    if (!is_float_type(a.dtype()) && a.dtype() != onnx::TensorProto::STRING) ints.push_back(k);
    if (is_float_type(a.dtype()) && static_cast<int>(k) != boxes && a.rank() == m.axis + 1 &&
        scores < 0)
      scores = static_cast<int>(k);
  }
  m.has_scores = scores >= 0;
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  if (scores >= 0) {
    const Tensor& s = *original[scores];
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t x, int64_t y) { return s.get_double(x) > s.get_double(y); });
  }
  std::vector<double> oc, cc;
  if (boxes >= 0) {
    const Tensor &a = *original[boxes], &b = *candidate[boxes];
    const bool as_corners = valid_as_corners(a, n) && valid_as_corners(b, c);
    const bool centered = !as_corners && valid_as_centered(a, n) && valid_as_centered(b, c);
    oc = corners(a, n, centered);
    cc = corners(b, c, centered);
    if (!as_corners && !centered)  // neither reading holds: compare as corners, each sorted
      for (auto* v : {&oc, &cc})
        for (size_t r = 0; r + 3 < v->size(); r += 4) {
          if ((*v)[r] > (*v)[r + 2]) std::swap((*v)[r], (*v)[r + 2]);
          if ((*v)[r + 1] > (*v)[r + 3]) std::swap((*v)[r + 1], (*v)[r + 3]);
        }
  }
  std::vector<bool> used(c, false), matched(n, false);
  for (int64_t i : order) {
    int64_t best = -1;
    double best_iou = boxes >= 0 ? kMatchIou : 0;
    for (int64_t j = 0; j < c; ++j) {
      if (used[j]) continue;
      bool same = true;
      for (size_t k : ints)
        if (!rows_equal(*original[k], i, *candidate[k], j, width(*original[k]))) {
          same = false;
          break;
        }
      if (!same) continue;
      if (boxes < 0) {
        best = j;
        break;
      }
      const double v = iou(&oc[i * 4], &cc[j * 4]);
      if (v >= best_iou) {
        best_iou = v;
        best = j;
        if (v == 1) break;
      }
    }
    if (best < 0) continue;
    used[best] = true;
    matched[i] = true;
    m.pairs.emplace_back(i, best);
    if (boxes >= 0) m.ious.push_back(best_iou);
  }
  if (scores >= 0) {
    for (int64_t i = 0; i < n; ++i)
      if (!matched[i])
        m.max_unmatched_score = std::max(m.max_unmatched_score, original[scores]->get_double(i));
    for (int64_t j = 0; j < c; ++j)
      if (!used[j])
        m.max_unmatched_score = std::max(m.max_unmatched_score, candidate[scores]->get_double(j));
  }
  std::sort(m.pairs.begin(), m.pairs.end());
  return m;
}

void TaskJudge::add(const DetectionMatch& match) {
  original_rows_ += match.original_rows;
  candidate_rows_ += match.candidate_rows;
  matched_ += static_cast<int64_t>(match.pairs.size());
  for (double v : match.ious) {
    iou_sum_ += v;
    iou_min_ = std::min(iou_min_, v);
    ++ious_;
  }
  has_scores_ |= match.has_scores;
  if (match.boxes >= 0 && static_cast<size_t>(match.boxes) < gate_.group.size())
    boxes_ = gate_.group[match.boxes];
  max_unmatched_score_ = std::max(max_unmatched_score_, match.max_unmatched_score);
}

void TaskJudge::add(const Tensor& a, const Tensor& b) {
  if (a.dims() != b.dims() || a.rank() == 0) {
    unjudged_ = "the outputs' shapes differ";
    return;
  }
  auto value = [](const Tensor& t, int64_t i) {
    const double v = t.get_double(i);
    return std::isnan(v) ? -INFINITY : v;
  };
  if (gate_.kind == TaskKind::kTop1 || gate_.kind == TaskKind::kTop5) {
    const int64_t classes = a.dims().back();
    if (classes <= 0) return;
    const int64_t rows = a.size() / classes;
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t base = r * classes;
      int64_t top = 0;
      for (int64_t k = 1; k < classes; ++k)
        if (value(a, base + k) > value(a, base + top)) top = k;
      // The candidate's rank of the original's top class: how many classes score above it.
      const double mine = value(b, base + top);
      int64_t above = 0;
      for (int64_t k = 0; k < classes; ++k)
        if (value(b, base + k) > mine || (value(b, base + k) == mine && k < top)) ++above;
      ++rows_;
      if (above == 0) ++top1_;
      if (above < 5) ++top5_;
    }
    return;
  }
  if (gate_.kind == TaskKind::kMask) {
    if (a.rank() != 4) {
      unjudged_ = "not a [batch, classes, H, W] output";
      return;
    }
    const int64_t batch = a.dims()[0], classes = a.dims()[1], pixels = a.dims()[2] * a.dims()[3];
    for (int64_t n = 0; n < batch; ++n)
      for (int64_t p = 0; p < pixels; ++p) {
        const int64_t base = n * classes * pixels + p;
        if (classes == 1) {
          const bool x = value(a, base) >= 0.5, y = value(b, base) >= 0.5;
          auto& [inter, uni] = mask_[-1];
          inter += x && y;
          uni += x || y;
          continue;
        }
        int64_t ca = 0, cb = 0;
        for (int64_t k = 1; k < classes; ++k) {
          if (value(a, base + k * pixels) > value(a, base + ca * pixels)) ca = k;
          if (value(b, base + k * pixels) > value(b, base + cb * pixels)) cb = k;
        }
        ++mask_[ca].second;
        if (ca == cb)
          ++mask_[ca].first;
        else
          ++mask_[cb].second;
      }
  }
}

TaskResult TaskJudge::result() const {
  TaskResult r;
  r.output = gate_.output;
  r.kind = gate_.kind;
  r.threshold = gate_.threshold;
  r.origin = gate_.origin;
  if (!unjudged_.empty()) {
    r.judged = false;
    r.detail = "not judged: " + unjudged_;
    return r;
  }
  switch (gate_.kind) {
    case TaskKind::kDetection: {
      const double recall = original_rows_ == 0 ? 1 : double(matched_) / original_rows_;
      const double precision = candidate_rows_ == 0 ? 1 : double(matched_) / candidate_rows_;
      r.figure = std::min(recall, precision);
      r.figures = {{"original_rows", double(original_rows_)},
                   {"candidate_rows", double(candidate_rows_)},
                   {"matched", double(matched_)},
                   {"matched_of_original", recall},
                   {"matched_of_candidate", precision}};
      r.detail = absl::StrCat(matched_, " of ", original_rows_, " original and ", candidate_rows_,
                              " optimized detections matched");
      if (ious_ > 0) {
        r.figures.emplace_back("mean_iou", iou_sum_ / ious_);
        r.figures.emplace_back("min_iou", iou_min_);
        absl::StrAppend(&r.detail, " (IoU >= ", fmt(kMatchIou), ", mean ", fmt(iou_sum_ / ious_),
                        ", least ", fmt(iou_min_), ")");
      }
      if (!boxes_.empty()) r.replaces_value_gate.push_back(boxes_);
      if (has_scores_ && (matched_ < original_rows_ || matched_ < candidate_rows_)) {
        r.figures.emplace_back("max_unmatched_score", max_unmatched_score_);
        absl::StrAppend(&r.detail, "; unmatched scores <= ", fmt(max_unmatched_score_));
      }
      break;
    }
    case TaskKind::kTop1:
    case TaskKind::kTop5: {
      const double top1 = rows_ == 0 ? 1 : double(top1_) / rows_;
      const double top5 = rows_ == 0 ? 1 : double(top5_) / rows_;
      r.figure = gate_.kind == TaskKind::kTop1 ? top1 : top5;
      r.figures = {{"rows", double(rows_)}, {"top1_agreement", top1}, {"top5_overlap", top5}};
      r.detail = absl::StrCat("the original's top class is the top one in ", top1_, " of ", rows_,
                              " rows, within the top 5 in ", top5_);
      break;
    }
    case TaskKind::kMask: {
      double sum = 0;
      int64_t present = 0;
      for (const auto& [cls, iu] : mask_)
        if (iu.second > 0) {
          sum += double(iu.first) / iu.second;
          ++present;
        }
      if (present == 0) {
        r.judged = false;
        r.detail = "not judged: the original's mask is empty on these inputs";
        return r;
      }
      r.figure = sum / present;
      r.figures = {{"mean_iou", r.figure}, {"classes", double(present)}};
      r.replaces_value_gate.push_back(gate_.output);
      r.detail = mask_.count(-1) ? absl::StrCat("mask IoU ", fmt(r.figure))
                                 : absl::StrCat("mean IoU ", fmt(r.figure), " over ", present,
                                                " classes present");
      break;
    }
    case TaskKind::kValues:
      break;
  }
  r.passed = r.figure >= r.threshold;
  return r;
}

}  // namespace graft::eval
