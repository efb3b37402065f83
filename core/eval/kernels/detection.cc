// Detection and sampling kernels: NonMaxSuppression (opset 10 and 11), RoiAlign (10 and 16) and
// GridSample (16 and 20). Where the ONNX specification leaves a detail open, they follow the
// ONNX reference implementation (onnx/reference/ops), which is onnxruntime's algorithm.
//
// NonMaxSuppression: boxes [B, S, 4] and scores [B, C, S] (float32); max_output_boxes_per_class
// (int64), iou_threshold and score_threshold (float32) are optional one-element tensors (an
// empty one counts as absent). For each batch b and class c the candidates are the S boxes, or
// with a score_threshold only those whose score is strictly greater than it, taken in order of
// decreasing score (equal scores: lower box index first; NaN scores after every number, and
// never above a threshold). A candidate is selected unless its IoU with a box already selected
// for (b, c) is strictly greater than iou_threshold (default 0; outside [0, 1] is
// InvalidArgument), until max_output_boxes_per_class boxes are selected (default 0: none;
// negative counts as 0). center_point_box 0: a box is [y1, x1, y2, x2], any two diagonal
// corners; 1: [x_center, y_center, width, height]. Boxes that do not overlap, or with an area or
// union that is not positive, never suppress each other; neither does a box with a NaN
// coordinate (its IoU is NaN). The IoU is computed in float32, as the reference does, so boxes
// at the threshold are decided alike. selected_indices is int64 [K, 3] of rows [b, c, box], in
// order of b, then c, then selection. The work is the sort plus, per candidate, one IoU per box
// already selected: at most S * min(S, max) per class, refused before it starts when the run's
// budget cannot pay for it (so a huge max_output_boxes_per_class costs nothing: the output is
// bounded by the boxes there are).
//
// RoiAlign: X [N, C, H, W] (float), rois [R, 4] as [x1, y1, x2, y2] (X's type), batch_indices
// [R] (integer, each in [0, N): else InvalidArgument). Y is [R, C, output_height,
// output_width]. A ROI's corners are scaled by spatial_scale and, with
// coordinate_transformation_mode "half_pixel" (the default from opset 16), shifted by -0.5;
// with "output_half_pixel" (the only behaviour of opset 10) they are not shifted and the ROI is
// at least 1 x 1. Each output bin is the ROI divided into output_height x output_width bins,
// sampled at the centres of a sampling_ratio x sampling_ratio grid of sub-cells
// (sampling_ratio 0: ceil(roi_height / output_height) x ceil(roi_width / output_width), none
// when the ROI is empty or reversed). A sample bilinearly interpolates X, with coordinates
// below 0 clamped to 0, at or past the last row or column reading that row or column, and
// samples more than one pixel outside the map (y < -1, y > H, x < -1 or x > W) contributing 0.
// mode "avg": the mean of the samples (0 without samples); "max": as the reference, the largest
// over the samples of the largest of the four weighted corner terms w_i * X[corner_i] (not the
// maximum of the interpolated values). A ROI whose scaled corners are not finite is
// InvalidArgument (the sample count would be undefined); one whose sample count no run could
// afford is ResourceExhausted.
//
// GridSample: X [N, C, D1, ..., Dr] (float types; opset 16: r = 2 only), grid [N, O1, ..., Or,
// r] (float types), Y [N, C, O1, ..., Or] of X's type. grid[n, o, :] lists a location's
// normalized coordinates innermost dimension first (x, then y, ...). A normalized v maps to
// (v + 1) / 2 * (D - 1) with align_corners = 1 (-1 and 1 are the centres of the corner pixels),
// else ((v + 1) * D - 1) / 2 (they are the outer edges), computed in the grid's type (float32 for
// float16) as the reference does. Modes: "nearest" rounds the location half to even (the
// specification's rule, for every rank), "linear" (opset 16: "bilinear") is N-linear
// interpolation of the 2^r neighbours, "cubic" (opset 16: "bicubic") N-cubic convolution of the
// 4^r neighbours with a = -0.75 (Keys). Before interpolating, a location outside [-0.5, D - 0.5]
// ([0, D - 1] with align_corners) is clamped to [0, D - 1] with padding_mode "border", or
// reflected at those bounds until it is inside with "reflection"; then every neighbour index
// outside [0, D) reads 0 ("zeros"), the nearest edge pixel ("border") or the reflected index
// ("reflection"). A NaN coordinate gives a NaN output; an infinite one is outside the input
// (0 with "zeros", the edge with "border", NaN with "reflection": no location reflects from
// infinity). Integer X (allowed by opset 20) is Unimplemented: the specification does not say
// how the interpolated value is rounded.
//
// RoiAlign and GridSample compute in double and round to the output type once.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <absl/status/status.h>
#include <absl/status/statusor.h>
#include <absl/strings/str_cat.h>

#include "core/eval/budget.h"
#include "core/eval/kernel.h"
#include "core/eval/kernels.h"
#include "core/eval/kernels/common.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

// Attribute sizes beyond this are refused, so that products of dims stay far inside int64.
constexpr int64_t kMaxDim = int64_t{1} << 30;
// A count of samples (or taps) beyond this could never be paid for; refusing it up front also
// keeps every count exactly representable as a double and as an int64.
constexpr double kMaxCount = 9007199254740992.0;  // 2^53

double log2_ceil(double n) { return n > 1 ? std::ceil(std::log2(n)) : 1.0; }

// ---------------------------------------------------------------------------------------------
// NonMaxSuppression

// The one value of an optional scalar operand: nullopt when absent or empty.
template <typename T>
absl::StatusOr<std::optional<T>> optional_scalar(const KernelContext& ctx, size_t i, int32_t dtype,
                                                 const char* name) {
  const Tensor* t = ctx.input(i);
  if (t == nullptr || t->size() == 0) return std::optional<T>();
  if (t->dtype() != dtype)
    return invalid(
        ctx, absl::StrCat(name, " must be ", dtype == TensorProto::INT64 ? "int64" : "float32"));
  if (t->size() != 1 || t->rank() > 1)
    return invalid(ctx, absl::StrCat(name, " must be a scalar, has ", t->size(), " elements"));
  return std::optional<T>(t->data<T>()[0]);
}

// (lo, hi) of two coordinates, as the reference orders them (lo = b when a >= b).
std::pair<float, float> min_max(float a, float b) {
  return a >= b ? std::pair<float, float>(b, a) : std::pair<float, float>(a, b);
}

// True if box `a` suppresses box `b` (each four floats), as the reference decides it.
bool suppresses(const float* a, const float* b, bool center, float iou_threshold) {
  float ax0, ax1, ay0, ay1, bx0, bx1, by0, by1;
  if (!center) {
    std::tie(ay0, ay1) = min_max(a[0], a[2]);
    std::tie(ax0, ax1) = min_max(a[1], a[3]);
    std::tie(by0, by1) = min_max(b[0], b[2]);
    std::tie(bx0, bx1) = min_max(b[1], b[3]);
  } else {
    ax0 = a[0] - a[2] / 2;
    ax1 = a[0] + a[2] / 2;
    ay0 = a[1] - a[3] / 2;
    ay1 = a[1] + a[3] / 2;
    bx0 = b[0] - b[2] / 2;
    bx1 = b[0] + b[2] / 2;
    by0 = b[1] - b[3] / 2;
    by1 = b[1] + b[3] / 2;
  }
  const float ix0 = std::max(ax0, bx0), ix1 = std::min(ax1, bx1);
  if (ix1 <= ix0) return false;
  const float iy0 = std::max(ay0, by0), iy1 = std::min(ay1, by1);
  if (iy1 <= iy0) return false;
  const float inter = (ix1 - ix0) * (iy1 - iy0);
  if (inter <= 0) return false;
  const float area_a = (ax1 - ax0) * (ay1 - ay0);
  const float area_b = (bx1 - bx0) * (by1 - by0);
  const float uni = area_a + area_b - inter;
  if (area_a <= 0 || area_b <= 0 || uni <= 0) return false;
  return inter / uni > iou_threshold;  // false for a NaN IoU
}

struct Candidate {
  float score;
  int64_t box;
};

// Decreasing score, NaN last, then increasing box index: a strict weak order whatever the
// scores (a comparison with NaN alone would not be one, and std::sort needs one).
bool before(const Candidate& a, const Candidate& b) {
  const bool an = std::isnan(a.score), bn = std::isnan(b.score);
  if (an != bn) return bn;
  if (!an && a.score != b.score) return a.score > b.score;
  return a.box < b.box;
}

absl::Status non_max_suppression(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* boxes_in, required(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* scores_in, required(ctx, 1));
  const Tensor& boxes = *boxes_in;
  const Tensor& scores = *scores_in;
  if (boxes.dtype() != TensorProto::FLOAT || scores.dtype() != TensorProto::FLOAT)
    return unimplemented(ctx, "boxes and scores must be float32");
  if (boxes.rank() != 3 || boxes.dims()[2] != 4)
    return invalid(ctx, "boxes must be [num_batches, spatial_dimension, 4]");
  if (scores.rank() != 3)
    return invalid(ctx, "scores must be [num_batches, num_classes, spatial_dimension]");
  const int64_t batches = boxes.dims()[0], count = boxes.dims()[1];
  const int64_t classes = scores.dims()[1];
  if (scores.dims()[0] != batches)
    return invalid(ctx,
                   absl::StrCat("boxes have ", batches, " batches, scores ", scores.dims()[0]));
  if (scores.dims()[2] != count)
    return invalid(
        ctx, absl::StrCat("boxes have ", count, " boxes per batch, scores ", scores.dims()[2]));
  const int64_t center_point_box = ctx.node.attr_int("center_point_box", 0);
  if (center_point_box != 0 && center_point_box != 1)
    return invalid(ctx, "center_point_box must be 0 or 1");
  ASSIGN_OR_RETURN(
      const std::optional<int64_t> max_boxes,
      optional_scalar<int64_t>(ctx, 2, TensorProto::INT64, "max_output_boxes_per_class"));
  ASSIGN_OR_RETURN(const std::optional<float> iou,
                   optional_scalar<float>(ctx, 3, TensorProto::FLOAT, "iou_threshold"));
  ASSIGN_OR_RETURN(const std::optional<float> score_threshold,
                   optional_scalar<float>(ctx, 4, TensorProto::FLOAT, "score_threshold"));
  const int64_t max_per_class = std::max<int64_t>(max_boxes.value_or(0), 0);
  const float iou_threshold = iou.value_or(0.0f);
  if (!(iou_threshold >= 0 && iou_threshold <= 1))
    return invalid(ctx, absl::StrCat("iou_threshold ", iou_threshold, " is outside [0, 1]"));
  // At most this many boxes are selected per class: the output is bounded by the boxes there
  // are, whatever max_output_boxes_per_class says.
  const int64_t keep = std::min(max_per_class, count);

  const float* bp = boxes.data<float>();
  const float* sp = scores.data<float>();
  Scratch<Candidate> candidates;
  Scratch<int64_t> kept;      // box indices selected for the current class
  Scratch<int64_t> selected;  // rows of the output, 3 values each
  if (keep > 0) {
    RETURN_IF_ERROR(ctx.afford(static_cast<double>(batches) * static_cast<double>(classes) *
                               static_cast<double>(count)));
    candidates.reserve(static_cast<size_t>(count));
    kept.reserve(static_cast<size_t>(keep));
  }
  for (int64_t b = 0; keep > 0 && b < batches; ++b) {
    const float* batch_boxes = bp + b * count * 4;
    for (int64_t c = 0; c < classes; ++c) {
      const float* class_scores = sp + (b * classes + c) * count;
      spend_work(static_cast<uint64_t>(count));
      candidates.clear();
      for (int64_t i = 0; i < count; ++i) {
        const float s = class_scores[i];
        if (score_threshold && !(s > *score_threshold)) continue;
        candidates.push_back({s, i});
      }
      const double n = static_cast<double>(candidates.size());
      // The quadratic part, paid for before it starts: each candidate is compared with at most
      // `keep` selected boxes.
      RETURN_IF_ERROR(ctx.afford(n * log2_ceil(n) + n * static_cast<double>(std::min<int64_t>(
                                                            keep, static_cast<int64_t>(n)))));
      spend_work(static_cast<uint64_t>(n * log2_ceil(n)));
      std::sort(candidates.begin(), candidates.end(), before);
      kept.clear();
      for (const Candidate& cand : candidates) {
        if (static_cast<int64_t>(kept.size()) >= keep) break;
        spend_work(kept.size() + 1);
        const float* box = batch_boxes + cand.box * 4;
        bool suppressed = false;
        for (int64_t k : kept) {
          if (suppresses(box, batch_boxes + k * 4, center_point_box == 1, iou_threshold)) {
            suppressed = true;
            break;
          }
        }
        if (suppressed) continue;
        kept.push_back(cand.box);
        selected.insert(selected.end(), {b, c, cand.box});
      }
    }
  }
  const int64_t rows = static_cast<int64_t>(selected.size() / 3);
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, TensorProto::INT64, {rows, 3}));
  std::copy(selected.begin(), selected.end(), y->data<int64_t>());
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// RoiAlign

// One ROI's geometry, in input pixels.
struct Roi {
  int64_t batch = 0;
  double start_h = 0, start_w = 0, bin_h = 0, bin_w = 0;
  int64_t grid_h = 0, grid_w = 0;  // samples per bin along each axis (0: none)
};

// A bilinear sample: four offsets into one H x W plane and their weights (all 0 outside).
struct Sample {
  int64_t pos[4];
  double w[4];
};

Sample bilinear_sample(double y, double x, int64_t height, int64_t width) {
  Sample s{};
  if (y < -1.0 || y > static_cast<double>(height) || x < -1.0 || x > static_cast<double>(width))
    return s;
  y = std::max(y, 0.0);
  x = std::max(x, 0.0);
  int64_t y_low = static_cast<int64_t>(y), x_low = static_cast<int64_t>(x), y_high, x_high;
  if (y_low >= height - 1) {
    y_high = y_low = height - 1;
    y = static_cast<double>(y_low);
  } else {
    y_high = y_low + 1;
  }
  if (x_low >= width - 1) {
    x_high = x_low = width - 1;
    x = static_cast<double>(x_low);
  } else {
    x_high = x_low + 1;
  }
  const double ly = y - static_cast<double>(y_low), lx = x - static_cast<double>(x_low);
  const double hy = 1.0 - ly, hx = 1.0 - lx;
  s.pos[0] = y_low * width + x_low;
  s.pos[1] = y_low * width + x_high;
  s.pos[2] = y_high * width + x_low;
  s.pos[3] = y_high * width + x_high;
  s.w[0] = hy * hx;
  s.w[1] = hy * lx;
  s.w[2] = ly * hx;
  s.w[3] = ly * lx;
  return s;
}

absl::Status roi_align(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* x_in, required(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* rois_in, required(ctx, 1));
  ASSIGN_OR_RETURN(const Tensor* idx_in, required(ctx, 2));
  const Tensor& x = *x_in;
  const Tensor& rois = *rois_in;
  const Tensor& indices = *idx_in;
  RETURN_IF_ERROR(require_float(ctx, x));
  if (rois.dtype() != x.dtype()) return invalid(ctx, "rois must have X's element type");
  if (!is_integer_type(indices.dtype())) return invalid(ctx, "batch_indices must be integers");
  if (x.rank() != 4) return invalid(ctx, "X must be 4-D [N, C, H, W]");
  if (rois.rank() != 2 || rois.dims()[1] != 4) return invalid(ctx, "rois must be [num_rois, 4]");
  const int64_t num_rois = rois.dims()[0];
  if (indices.rank() != 1 || indices.dims()[0] != num_rois)
    return invalid(ctx, absl::StrCat("batch_indices must be [", num_rois, "] (one per ROI)"));
  const std::string mode = ctx.node.attr_string("mode", "avg");
  if (mode != "avg" && mode != "max") return invalid(ctx, "mode must be 'avg' or 'max'");
  bool half_pixel = false;
  if (ctx.opset >= 16) {
    const std::string ctm = ctx.node.attr_string("coordinate_transformation_mode", "half_pixel");
    if (ctm != "half_pixel" && ctm != "output_half_pixel")
      return invalid(ctx,
                     "coordinate_transformation_mode must be 'half_pixel' or 'output_half_pixel'");
    half_pixel = ctm == "half_pixel";
  }
  const int64_t out_h = ctx.node.attr_int("output_height", 1);
  const int64_t out_w = ctx.node.attr_int("output_width", 1);
  const int64_t sampling_ratio = ctx.node.attr_int("sampling_ratio", 0);
  const double spatial_scale = ctx.node.attr_float("spatial_scale", 1.0f);
  if (out_h < 1 || out_h > kMaxDim || out_w < 1 || out_w > kMaxDim)
    return invalid(ctx, "output_height and output_width must be in [1, 2^30]");
  if (sampling_ratio < 0 || sampling_ratio > kMaxDim)
    return invalid(ctx, "sampling_ratio must be in [0, 2^30]");
  const int64_t batch = x.dims()[0], channels = x.dims()[1];
  const int64_t height = x.dims()[2], width = x.dims()[3];

  // Every ROI's geometry first, with its checks, and the total work.
  Scratch<Roi> geometry(static_cast<size_t>(num_rois));
  const Scratch<double> rv = to_doubles(rois);
  const double bins = static_cast<double>(out_h) * static_cast<double>(out_w);
  double work = 0;
  for (int64_t r = 0; r < num_rois; ++r) {
    Roi& g = geometry[r];
    g.batch = indices.get_int64(r);
    if (g.batch < 0 || g.batch >= batch)
      return invalid(
          ctx, absl::StrCat("batch_indices[", r, "] = ", g.batch, " is outside [0, ", batch, ")"));
    const double offset = half_pixel ? 0.5 : 0.0;
    const double* c = rv.data() + r * 4;
    g.start_w = c[0] * spatial_scale - offset;
    g.start_h = c[1] * spatial_scale - offset;
    double roi_w = c[2] * spatial_scale - offset - g.start_w;
    double roi_h = c[3] * spatial_scale - offset - g.start_h;
    if (!std::isfinite(g.start_w) || !std::isfinite(g.start_h) || !std::isfinite(roi_w) ||
        !std::isfinite(roi_h))
      return invalid(ctx, absl::StrCat("ROI ", r, " is not finite after scaling"));
    if (!half_pixel) {  // malformed ROIs are forced to 1 x 1
      roi_w = std::max(roi_w, 1.0);
      roi_h = std::max(roi_h, 1.0);
    }
    g.bin_h = roi_h / static_cast<double>(out_h);
    g.bin_w = roi_w / static_cast<double>(out_w);
    double gh = sampling_ratio > 0 ? static_cast<double>(sampling_ratio) : std::ceil(g.bin_h);
    double gw = sampling_ratio > 0 ? static_cast<double>(sampling_ratio) : std::ceil(g.bin_w);
    if (!(gh > 0) || !(gw > 0)) gh = gw = 0;  // an empty or reversed ROI: no samples
    const double samples = gh * gw * bins;
    if (samples > kMaxCount)
      return absl::ResourceExhaustedError(
          absl::StrCat(ctx.node.op_type(), ": ROI ", r, " needs ", samples, " samples"));
    g.grid_h = static_cast<int64_t>(gh);
    g.grid_w = static_cast<int64_t>(gw);
    work += samples * (1.0 + 4.0 * static_cast<double>(channels));
  }
  RETURN_IF_ERROR(ctx.afford(work));
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), {num_rois, channels, out_h, out_w}));
  if (y->size() == 0) return absl::OkStatus();
  if (work > 0 && (height == 0 || width == 0)) return invalid(ctx, "X has no pixels to sample");
  const Scratch<double> xv = to_doubles(x);
  const bool avg = mode == "avg";
  const int64_t plane = height * width;
  Scratch<Sample> samples;
  for (int64_t r = 0; r < num_rois; ++r) {
    const Roi& g = geometry[r];
    const int64_t per_bin = g.grid_h * g.grid_w;
    const double count = static_cast<double>(std::max<int64_t>(per_bin, 1));
    samples.resize(static_cast<size_t>(per_bin));
    for (int64_t ph = 0; ph < out_h; ++ph) {
      for (int64_t pw = 0; pw < out_w; ++pw) {
        spend_work(static_cast<uint64_t>(per_bin) * (1 + 4 * static_cast<uint64_t>(channels)));
        for (int64_t iy = 0; iy < g.grid_h; ++iy) {
          const double yy =
              g.start_h + static_cast<double>(ph) * g.bin_h +
              (static_cast<double>(iy) + 0.5) * g.bin_h / static_cast<double>(g.grid_h);
          for (int64_t ix = 0; ix < g.grid_w; ++ix) {
            const double xx =
                g.start_w + static_cast<double>(pw) * g.bin_w +
                (static_cast<double>(ix) + 0.5) * g.bin_w / static_cast<double>(g.grid_w);
            samples[iy * g.grid_w + ix] = bilinear_sample(yy, xx, height, width);
          }
        }
        for (int64_t c = 0; c < channels; ++c) {
          const double* p = xv.data() + (g.batch * channels + c) * plane;
          double out = 0;
          bool first = true;
          for (const Sample& s : samples) {
            if (avg) {
              out += s.w[0] * p[s.pos[0]] + s.w[1] * p[s.pos[1]] + s.w[2] * p[s.pos[2]] +
                     s.w[3] * p[s.pos[3]];
            } else {
              const double v = std::max({s.w[0] * p[s.pos[0]], s.w[1] * p[s.pos[1]],
                                         s.w[2] * p[s.pos[2]], s.w[3] * p[s.pos[3]]});
              out = first ? v : std::max(out, v);
              first = false;
            }
          }
          if (avg) out /= count;
          store(y, ((r * channels + c) * out_h + ph) * out_w + pw, out);
        }
      }
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// GridSample

enum class Interp { kNearest, kLinear, kCubic };
enum class Padding { kZeros, kBorder, kReflection };

// A normalized coordinate in input pixels, computed in T (the grid's type, float for float16).
template <typename T>
double denormalize(double v, int64_t len, bool align_corners) {
  const T n = static_cast<T>(v), d = static_cast<T>(len);
  if (align_corners) return static_cast<double>(static_cast<T>((n + T(1)) / T(2)) * (d - T(1)));
  return static_cast<double>((static_cast<T>((n + T(1)) * d) - T(1)) / T(2));
}

// `x` reflected at lo and hi until it lies in [lo, hi]; NaN for an infinite x.
double reflect(double x, double lo, double hi) {
  if (!std::isfinite(x)) return std::numeric_limits<double>::quiet_NaN();
  const double range = hi - lo;
  if (!(range > 0)) return lo;
  if (x >= lo && x <= hi) return x;
  const double dx = x < lo ? lo - x : x - hi;
  const double flips = std::floor(dx / range);
  const double rest = std::clamp(std::fmod(dx, range), 0.0, range);
  const bool even = std::fmod(flips, 2.0) == 0;
  if (x < lo) return even ? lo + rest : hi - rest;
  return even ? hi - rest : lo + rest;
}

void cubic_coeffs(double t, double c[4]) {
  constexpr double a = -0.75;
  const double t1 = t + 1, t2 = 1 - t, t3 = 2 - t;
  c[0] = ((a * t1 - 5 * a) * t1 + 8 * a) * t1 - 4 * a;
  c[1] = ((a + 2) * t - (a + 3)) * t * t + 1;
  c[2] = ((a + 2) * t2 - (a + 3)) * t2 * t2 + 1;
  c[3] = ((a * t3 - 5 * a) * t3 + 8 * a) * t3 - 4 * a;
}

// The taps of one output location along one input dimension: up to 4 (index, weight), index
// -1 for a neighbour that reads 0.
struct AxisTaps {
  int count = 0;
  int64_t index[4];
  double weight[4];
};

// Index `i` of a neighbour, after padding: -1 for "zeros" outside [0, len).
int64_t pad_index(int64_t i, int64_t len, Padding padding, bool align_corners) {
  if (i >= 0 && i < len) return i;
  if (padding == Padding::kZeros) return -1;
  if (padding == Padding::kBorder) return std::clamp<int64_t>(i, 0, len - 1);
  const double lo = align_corners ? 0.0 : -0.5;
  const double hi = align_corners ? static_cast<double>(len - 1) : static_cast<double>(len) - 0.5;
  const double r = reflect(static_cast<double>(i), lo, hi);
  return std::clamp<int64_t>(static_cast<int64_t>(r), 0, len - 1);
}

// The taps of location `x` (input pixels) along a dimension of length `len`. False when the
// location has no defined value (NaN); *outside set (never cleared) when every tap reads 0
// ("zeros"), *taps then left unset.
bool axis_taps(double x, int64_t len, Interp interp, Padding padding, bool align_corners,
               AxisTaps* taps, bool* outside) {
  if (std::isnan(x)) return false;
  if (interp == Interp::kNearest) x = std::nearbyint(x);
  const double lo = align_corners ? 0.0 : -0.5;
  const double hi = align_corners ? static_cast<double>(len - 1) : static_cast<double>(len) - 0.5;
  if (x < lo || x > hi) {
    if (padding == Padding::kBorder) {
      x = std::clamp(x, 0.0, static_cast<double>(len - 1));
    } else if (padding == Padding::kReflection) {
      x = reflect(x, lo, hi);
      if (std::isnan(x)) return false;
    } else if (!(x >= -3.0 && x <= static_cast<double>(len) + 2.0)) {
      // Every neighbour (at most 2 on either side) is outside: the value is 0. Also keeps
      // the conversions below within int64.
      *outside = true;
      return true;
    }
  }
  if (interp == Interp::kNearest) {
    taps->count = 1;
    taps->index[0] = pad_index(static_cast<int64_t>(x), len, padding, align_corners);
    taps->weight[0] = 1.0;
    return true;
  }
  const double fl = std::floor(x);
  const double t = x - fl;
  const int64_t base = static_cast<int64_t>(fl);
  if (interp == Interp::kLinear) {
    taps->count = 2;
    taps->index[0] = pad_index(base, len, padding, align_corners);
    taps->index[1] = pad_index(base + 1, len, padding, align_corners);
    taps->weight[0] = 1.0 - t;
    taps->weight[1] = t;
    return true;
  }
  taps->count = 4;
  cubic_coeffs(t, taps->weight);
  for (int k = 0; k < 4; ++k) taps->index[k] = pad_index(base - 1 + k, len, padding, align_corners);
  return true;
}

absl::Status grid_sample(KernelContext& ctx) {
  ASSIGN_OR_RETURN(const Tensor* x_in, required(ctx, 0));
  ASSIGN_OR_RETURN(const Tensor* grid_in, required(ctx, 1));
  const Tensor& x = *x_in;
  const Tensor& grid = *grid_in;
  if (!is_float_type(x.dtype())) return unimplemented(ctx, "non-float X");
  if (!is_float_type(grid.dtype())) return invalid(ctx, "grid must be a float tensor");
  const bool v16 = ctx.opset < 20;
  const std::string mode = ctx.node.attr_string("mode", v16 ? "bilinear" : "linear");
  Interp interp;
  if (mode == "nearest") {
    interp = Interp::kNearest;
  } else if (mode == (v16 ? "bilinear" : "linear")) {
    interp = Interp::kLinear;
  } else if (mode == (v16 ? "bicubic" : "cubic")) {
    interp = Interp::kCubic;
  } else {
    return invalid(ctx, absl::StrCat("unknown mode '", mode, "' at opset ", ctx.opset));
  }
  const std::string padding_mode = ctx.node.attr_string("padding_mode", "zeros");
  Padding padding;
  if (padding_mode == "zeros") {
    padding = Padding::kZeros;
  } else if (padding_mode == "border") {
    padding = Padding::kBorder;
  } else if (padding_mode == "reflection") {
    padding = Padding::kReflection;
  } else {
    return invalid(ctx, absl::StrCat("unknown padding_mode '", padding_mode, "'"));
  }
  const bool align_corners = ctx.node.attr_int("align_corners", 0) != 0;
  if (v16 ? x.rank() != 4 : x.rank() < 3)
    return invalid(ctx, v16 ? "X must be 4-D at opset 16" : "X must have spatial dims");
  const int64_t r = x.rank() - 2;
  if (grid.rank() != x.rank() || grid.dims().back() != r)
    return invalid(ctx,
                   absl::StrCat("grid must be [N, spatial..., ", r, "] for a ", x.rank(), "-D X"));
  if (grid.dims()[0] != x.dims()[0])
    return invalid(ctx, absl::StrCat("X has batch ", x.dims()[0], ", grid ", grid.dims()[0]));
  const int64_t batch = x.dims()[0], channels = x.dims()[1];
  std::vector<int64_t> in(x.dims().begin() + 2, x.dims().end());
  std::vector<int64_t> out_dims = {batch, channels};
  out_dims.insert(out_dims.end(), grid.dims().begin() + 1, grid.dims().end() - 1);
  if (std::find(out_dims.begin(), out_dims.end(), 0) != out_dims.end()) {
    auto y = ctx.make_output(0, x.dtype(), out_dims);
    return y.ok() ? absl::OkStatus() : y.status();
  }
  for (int64_t d : in)
    if (d == 0) return invalid(ctx, "X has no pixels to sample");

  // Locations per image (the grid holds batch * points * r values, so this cannot overflow),
  // and the work: per location its taps' tensor product, listed once and read per channel.
  int64_t points = 1;
  for (size_t i = 1; i + 1 < grid.dims().size(); ++i) points *= grid.dims()[i];
  const double per_axis = interp == Interp::kNearest ? 1 : interp == Interp::kLinear ? 2 : 4;
  const double taps_per_point = std::pow(per_axis, static_cast<double>(r));
  if (taps_per_point > kMaxCount)
    return absl::ResourceExhaustedError(absl::StrCat(ctx.node.op_type(), ": ", taps_per_point,
                                                     " neighbours per location at rank ", r));
  const double work =
      static_cast<double>(batch) * static_cast<double>(points) *
      (static_cast<double>(r) + taps_per_point * (1.0 + static_cast<double>(channels)));
  // Refused before the output is made (which is charged as work too).
  RETURN_IF_ERROR(ctx.afford(work));
  ASSIGN_OR_RETURN(Tensor * y, ctx.make_output(0, x.dtype(), out_dims));

  const Scratch<double> xv = to_doubles(x);
  const Scratch<double> gv = to_doubles(grid);
  std::vector<int64_t> strides(static_cast<size_t>(r), 1);
  for (int64_t d = r - 1; d-- > 0;) strides[d] = strides[d + 1] * in[d + 1];
  const int64_t plane = strides[0] * in[0];
  const bool wide = grid.dtype() == TensorProto::DOUBLE;
  std::vector<AxisTaps> taps(static_cast<size_t>(r));
  std::vector<int> pick(static_cast<size_t>(r));
  Scratch<int64_t> offsets;
  Scratch<double> weights;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const uint64_t point_work =
      static_cast<uint64_t>(taps_per_point) * (1 + static_cast<uint64_t>(channels)) +
      static_cast<uint64_t>(r);
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t p = 0; p < points; ++p) {
      spend_work(point_work);
      const double* loc = gv.data() + (n * points + p) * r;
      // Every coordinate is read: a NaN one makes the value NaN even where another is outside.
      bool defined = true, outside = false;
      for (int64_t d = 0; d < r && defined; ++d) {
        const double v = loc[r - 1 - d];  // the grid lists the innermost dimension first
        const double px = wide ? denormalize<double>(v, in[d], align_corners)
                               : denormalize<float>(v, in[d], align_corners);
        defined = axis_taps(px, in[d], interp, padding, align_corners, &taps[d], &outside);
      }
      // The tensor product of the axes' taps, as (offset, weight) pairs; neighbours that read
      // 0 are left out.
      offsets.clear();
      weights.clear();
      if (defined && !outside) {
        std::fill(pick.begin(), pick.end(), 0);
        while (true) {
          int64_t off = 0;
          double w = 1;
          bool zero = false;
          for (int64_t d = 0; d < r; ++d) {
            const int64_t idx = taps[d].index[pick[d]];
            zero = zero || idx < 0;
            off += idx * strides[d];
            w *= taps[d].weight[pick[d]];
          }
          if (!zero) {
            offsets.push_back(off);
            weights.push_back(w);
          }
          int64_t d = r;
          while (d-- > 0) {
            if (++pick[d] < taps[d].count) break;
            pick[d] = 0;
          }
          if (d < 0) break;
        }
      }
      for (int64_t c = 0; c < channels; ++c) {
        const double* plane_c = xv.data() + (n * channels + c) * plane;
        double acc = defined ? 0.0 : nan;
        for (size_t k = 0; k < offsets.size(); ++k) acc += weights[k] * plane_c[offsets[k]];
        store(y, (n * channels + c) * points + p, acc);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

void register_detection_kernels() {
  register_kernel("NonMaxSuppression", 10, 0, non_max_suppression);
  register_kernel("RoiAlign", 10, 0, roi_align);
  register_kernel("GridSample", 16, 0, grid_sample);
}

}  // namespace graft::eval
