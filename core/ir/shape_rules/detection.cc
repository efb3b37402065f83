// Shape rules of the detection and sampling ops: NonMaxSuppression, RoiAlign, GridSample.
#include "core/ir/shape_rules.h"

namespace graft::ir::shape_rules {

namespace {

using onnx::TensorProto;

// int64 [K, 3]: K, the number of selected boxes, depends on the data.
TensorFact non_max_suppression(const Node&, size_t, bool*) {
  return TensorFact::of_rank(TensorProto::INT64, {Dim{}, Dim::of(3)});
}

// `a` where it tells something, else `b` (known sizes before symbols); both known and
// different: nullopt (an invalid model).
std::optional<Dim> either(const Dim& a, const Dim& b) {
  if (a.known() && b.known() && a.value != b.value) return std::nullopt;
  if (a.known() || (a.is_symbol() && !b.known())) return a;
  return b;
}

// [num_rois, C, output_height, output_width] of X's type: num_rois from rois [num_rois, 4] or
// batch_indices [num_rois], C from X [N, C, H, W].
TensorFact roi_align(const Node& n, size_t, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  const TensorFact& rois = input_fact(n, 1);
  const TensorFact& indices = input_fact(n, 2);
  const int32_t type = x.elem_type ? x.elem_type : rois.elem_type;
  if ((x.has_rank && x.dims.size() != 4) || (rois.has_rank && rois.dims.size() != 2) ||
      (indices.has_rank && indices.dims.size() != 1))
    return with_type(unknown(partial), type);
  const std::optional<Dim> num_rois =
      either(rois.has_rank ? rois.dims[0] : Dim{}, indices.has_rank ? indices.dims[0] : Dim{});
  if (!num_rois) return with_type(unknown(partial), type);
  const int64_t height = n.attr_int("output_height", 1), width = n.attr_int("output_width", 1);
  if (height < 1 || width < 1) *partial = true;
  return TensorFact::of_rank(
      type, {*num_rois, x.has_rank ? x.dims[1] : Dim{}, height >= 1 ? Dim::of(height) : Dim{},
             width >= 1 ? Dim::of(width) : Dim{}});
}

// [N, C, O1, ..., Or] of X's type, for X [N, C, D1, ..., Dr] and grid [N, O1, ..., Or, r]
// (opset 16: r = 2).
TensorFact grid_sample(const Node& n, size_t, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  const TensorFact& grid = input_fact(n, 1);
  if (!x.has_rank && !grid.has_rank) return with_type(TensorFact{}, x.elem_type);
  const size_t rank = grid.has_rank ? grid.dims.size() : x.dims.size();
  if ((x.has_rank && grid.has_rank && x.dims.size() != grid.dims.size()) || rank < 3 ||
      (n.opset() < 20 && rank != 4))
    return with_type(unknown(partial), x.elem_type);
  TensorFact out = rank_only(x.elem_type, static_cast<int64_t>(rank));
  if (!out.has_rank) return out;
  const std::optional<Dim> batch =
      either(x.has_rank ? x.dims[0] : Dim{}, grid.has_rank ? grid.dims[0] : Dim{});
  if (!batch) return with_type(unknown(partial), x.elem_type);
  out.dims[0] = *batch;
  if (x.has_rank) out.dims[1] = x.dims[1];
  if (grid.has_rank)
    for (size_t i = 2; i < rank; ++i) out.dims[i] = grid.dims[i - 1];
  return out;
}

}  // namespace

void add_detection_rules(Table& t) {
  t.add({"NonMaxSuppression"}, non_max_suppression);
  t.add({"RoiAlign"}, roi_align);
  t.add({"GridSample"}, grid_sample);
}

}  // namespace graft::ir::shape_rules
