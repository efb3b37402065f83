#include "core/ir/op_params.h"

#include <algorithm>
#include <set>
#include <string>

#include "core/ir/tensor.h"

namespace graft::ir {

namespace {

// The node's optional input `i` when present.
const Value* opt_input(const Node& n, size_t i) { return n.input(i); }

std::optional<double> scalar_double(const Value* v) {
  auto d = constant_doubles(v);
  if (!d || d->size() != 1) return std::nullopt;
  return (*d)[0];
}

}  // namespace

const onnx::TensorProto* constant_header(const Value* v) {
  if (!v) return nullptr;
  if (v->is_constant()) return v->initializer();
  if (const Node* p = v->producer();
      p && !p->dead() && p->is("Constant") && p->attributes().size() == 1) {
    const onnx::AttributeProto& a = p->attributes()[0];
    if (a.name() == "value" && a.type() == onnx::AttributeProto::TENSOR) return &a.t();
  }
  return nullptr;
}

const onnx::TensorProto* constant_in_memory(const Value* v) {
  const onnx::TensorProto* t = constant_header(v);
  return t && !is_external(*t) ? t : nullptr;
}

const ExternalData* external_data_of(const Value* v) {
  if (!v || !v->owner() || !v->owner()->model()) return nullptr;
  return v->owner()->model()->external_data().get();
}

LoadedTensor constant_proto(const Value* v, uint64_t max_external_bytes) {
  const onnx::TensorProto* t = constant_header(v);
  if (!t) return LoadedTensor();
  if (!is_external(*t)) return LoadedTensor(t);
  auto loaded = load_tensor(*t, external_data_of(v), max_external_bytes);
  return loaded.ok() ? std::move(*loaded) : LoadedTensor();
}

bool is_constant_value(const Value* v) {
  if (!v) return false;
  if (v->is_constant()) return true;
  const Node* p = v->producer();
  return p && !p->dead() && p->is("Constant");
}

// Parameters (axes, shapes, bounds) are small: a larger external tensor is not one.
constexpr uint64_t kMaxExternalParamBytes = 64 << 10;

std::optional<std::vector<int64_t>> constant_ints(const Value* v) {
  auto t = constant_proto(v, kMaxExternalParamBytes);
  if (!t) return std::nullopt;
  return read_int64s(*t);
}

bool moves_values(const Node& n) {
  static const std::set<std::string, std::less<>> ops = {
      "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Transpose", "Slice"};
  return n.is_onnx_domain() && ops.count(n.op_type()) > 0;
}

std::optional<std::vector<double>> constant_doubles(const Value* v) {
  auto t = constant_proto(v, kMaxExternalParamBytes);
  if (!t) return std::nullopt;
  return read_doubles(*t);
}

std::optional<int64_t> window_extent(int64_t in, int64_t kernel, int64_t stride, int64_t dilation,
                                     int64_t pad_begin, int64_t pad_end,
                                     const std::string& auto_pad, bool ceil_mode) {
  if (in < 0 || kernel < 1 || stride < 1 || dilation < 1 || pad_begin < 0 || pad_end < 0)
    return std::nullopt;
  int64_t eff = 0;  // (kernel - 1) * dilation + 1
  if (__builtin_mul_overflow(kernel - 1, dilation, &eff) || __builtin_add_overflow(eff, 1, &eff))
    return std::nullopt;
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") return in / stride + (in % stride != 0);
  int64_t num = in;
  if (auto_pad == "NOTSET") {
    if (__builtin_add_overflow(num, pad_begin, &num) || __builtin_add_overflow(num, pad_end, &num))
      return std::nullopt;
  } else if (auto_pad == "VALID") {
    ceil_mode = false;
  } else {
    return std::nullopt;
  }
  num -= eff;
  if (num < 0) return std::nullopt;
  return (ceil_mode ? num / stride + (num % stride != 0) : num / stride) + 1;
}

std::optional<int64_t> normalize_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

std::optional<std::vector<int64_t>> normalize_axes(const std::vector<int64_t>& axes, int64_t rank) {
  std::vector<int64_t> out;
  out.reserve(axes.size());
  for (int64_t a : axes) {
    auto n = normalize_axis(a, rank);
    if (!n || std::find(out.begin(), out.end(), *n) != out.end()) return std::nullopt;
    out.push_back(*n);
  }
  return out;
}

std::vector<int64_t> slice_indices(int64_t len, int64_t start, int64_t end, int64_t step) {
  std::vector<int64_t> out;
  if (step == 0 || len <= 0) return out;
  if (start < 0) start += len;
  if (end < 0) end += len;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, len);
    end = std::clamp<int64_t>(end, 0, len);
    // i + step may overflow; end - i may not (both are in [0, len]).
    for (int64_t i = start; i < end; i += step) {
      out.push_back(i);
      if (step >= end - i) break;
    }
  } else {
    start = std::clamp<int64_t>(start, 0, len - 1);
    end = std::clamp<int64_t>(end, -1, len - 1);
    for (int64_t i = start; i > end; i += step) {
      out.push_back(i);
      if (step <= end - i) break;
    }
  }
  return out;
}

std::optional<std::pair<int64_t, int64_t>> shape_range(const Node& n, int64_t rank) {
  for (const auto& a : n.attributes())
    if (!((a.name() == "start" || a.name() == "end") && a.has_i() && n.opset() >= 15))
      return std::nullopt;
  int64_t start = n.attr_int("start", 0);
  int64_t end = n.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  return std::make_pair(start, std::max(start, end));
}

std::optional<SliceParams> slice_params(const Node& n) {
  if (!n.is("Slice") || !n.input(0)) return std::nullopt;
  SliceParams p;
  std::optional<std::vector<int64_t>> starts, ends, axes, steps;
  if (n.opset() < 10) {
    starts = n.attr_ints("starts");
    ends = n.attr_ints("ends");
    axes = n.attr_ints("axes");
  } else {
    starts = constant_ints(n.input(1));
    ends = constant_ints(n.input(2));
    if (opt_input(n, 3) && !(axes = constant_ints(n.input(3)))) return std::nullopt;
    if (opt_input(n, 4) && !(steps = constant_ints(n.input(4)))) return std::nullopt;
  }
  if (!starts || !ends || starts->size() != ends->size()) return std::nullopt;
  const size_t count = starts->size();
  if ((axes && axes->size() != count) || (steps && steps->size() != count)) return std::nullopt;
  p.starts = std::move(*starts);
  p.ends = std::move(*ends);
  if (axes) {
    p.axes = std::move(*axes);
  } else {
    for (size_t i = 0; i < count; ++i) p.axes.push_back(static_cast<int64_t>(i));
  }
  p.steps = steps ? std::move(*steps) : std::vector<int64_t>(count, 1);
  for (int64_t s : p.steps)
    if (s == 0) return std::nullopt;
  return p;
}

std::optional<AxesParam> squeeze_axes(const Node& n) {
  if (!n.is("Squeeze") || !n.input(0)) return std::nullopt;
  AxesParam p;
  std::optional<std::vector<int64_t>> axes;
  if (n.opset() < 13) {
    axes = n.attr_ints("axes");
    if (!axes && n.attr("axes")) return std::nullopt;
  } else if (n.input(1)) {
    if (!(axes = constant_ints(n.input(1)))) return std::nullopt;
  }
  // An axes list given empty: ONNX Runtime squeezes every dim of size 1, as without axes; ONNX's
  // reference implementation (numpy's squeeze over no axis) and Graft's evaluator squeeze none.
  // The spec is silent, so what such a node computes is not known: nullopt, nothing is built on it.
  if (axes && axes->empty()) return std::nullopt;
  if (!axes)
    p.all = true;
  else
    p.axes = std::move(*axes);
  return p;
}

std::optional<std::vector<int64_t>> unsqueeze_axes(const Node& n) {
  if (!n.is("Unsqueeze") || !n.input(0)) return std::nullopt;
  if (n.opset() < 13) return n.attr_ints("axes");
  return constant_ints(n.input(1));
}

namespace {

bool is_reduce(const std::string& op) {
  static const char* const kOps[] = {
      "ReduceSum", "ReduceMean", "ReduceMax",    "ReduceMin",       "ReduceProd",
      "ReduceL1",  "ReduceL2",   "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"};
  for (const char* k : kOps)
    if (op == k) return true;
  return false;
}

}  // namespace

std::optional<ReduceParams> reduce_params(const Node& n) {
  if (!n.is_onnx_domain() || !is_reduce(n.op_type()) || !n.input(0)) return std::nullopt;
  ReduceParams p;
  p.keepdims = n.attr_int("keepdims", 1) != 0;
  const int64_t axes_as_input = n.op_type() == "ReduceSum" ? 13 : 18;
  if (n.opset() < axes_as_input) {
    p.axes = n.attr_ints("axes");
    if (!p.axes && n.attr("axes")) return std::nullopt;
  } else {
    p.noop_with_empty_axes = n.attr_int("noop_with_empty_axes", 0) != 0;
    if (n.input(1) && !(p.axes = constant_ints(n.input(1)))) return std::nullopt;
  }
  if (p.axes && p.axes->empty()) p.axes.reset();
  return p;
}

std::optional<PadParams> pad_params(const Node& n) {
  if (!n.is("Pad") || !n.input(0)) return std::nullopt;
  PadParams p;
  p.mode = n.attr_string("mode", "constant");
  const int64_t opset = n.opset();
  if (opset < 11) {
    auto pads = n.attr_ints(opset < 2 ? "paddings" : "pads");
    if (!pads) return std::nullopt;
    p.pads = std::move(*pads);
    p.value = n.attr_float("value", 0.0f);
    return p;
  }
  auto pads = constant_ints(n.input(1));
  if (!pads) return std::nullopt;
  p.pads = std::move(*pads);
  if (n.input(2))
    p.value = scalar_double(n.input(2));
  else
    p.value = 0.0;
  if (n.input(3) && !(p.axes = constant_ints(n.input(3)))) return std::nullopt;
  return p;
}

std::optional<SplitParams> split_params(const Node& n) {
  if (!n.is("Split") || !n.input(0)) return std::nullopt;
  SplitParams p;
  p.axis = n.attr_int("axis", 0);
  p.parts = static_cast<int64_t>(n.outputs().size());
  const int64_t opset = n.opset();
  if (opset < 13) {
    if (n.attr("split") && !(p.sizes = n.attr_ints("split"))) return std::nullopt;
    if (opset < 2 && n.input(1) && !(p.sizes = constant_ints(n.input(1)))) return std::nullopt;
  } else {
    if (n.input(1) && !(p.sizes = constant_ints(n.input(1)))) return std::nullopt;
    if (opset >= 18 && n.attr("num_outputs")) p.parts = n.attr_int("num_outputs", p.parts);
  }
  if (p.sizes && p.sizes->empty()) p.sizes.reset();
  return p;
}

std::optional<ClipParams> clip_params(const Node& n) {
  if (!n.is("Clip") || !n.input(0)) return std::nullopt;
  ClipParams p;
  if (n.opset() < 11) {
    if (n.attr("min")) p.min = n.attr_float("min", 0.0f);
    if (n.attr("max")) p.max = n.attr_float("max", 0.0f);
    return p;
  }
  if (n.input(1) && !(p.min = scalar_double(n.input(1)))) return std::nullopt;
  if (n.input(2) && !(p.max = scalar_double(n.input(2)))) return std::nullopt;
  return p;
}

bool is_permutation(const std::vector<int64_t>& perm) {
  std::vector<bool> seen(perm.size(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(perm.size()) || seen[static_cast<size_t>(p)])
      return false;
    seen[static_cast<size_t>(p)] = true;
  }
  return true;
}

std::optional<std::vector<int64_t>> transpose_perm(const Node& n, std::optional<int64_t> rank) {
  if (!n.is("Transpose") || n.inputs().size() != 1 || !n.input(0)) return std::nullopt;
  for (const auto& a : n.attributes())
    if (a.name() != "perm") return std::nullopt;
  const onnx::AttributeProto* attr = n.attr("perm");
  if (attr && attr->type() != onnx::AttributeProto::INTS) return std::nullopt;
  auto perm = n.attr_ints("perm");
  if (!perm || perm->empty()) {
    // Reversal; a rank beyond any real tensor's is refused before allocating.
    if (!rank || *rank < 0 || *rank > 1024) return std::nullopt;
    perm.emplace();
    for (int64_t i = *rank - 1; i >= 0; --i) perm->push_back(i);
  }
  if (!is_permutation(*perm)) return std::nullopt;
  return perm;
}

std::optional<int32_t> cast_to(const Node& n) {
  const onnx::AttributeProto* to = n.attr("to");
  if (!to || to->type() != onnx::AttributeProto::INT) return std::nullopt;
  return static_cast<int32_t>(to->i());
}

std::optional<ResizeParams> resize_params(const Node& n) {
  if (!n.is_onnx_domain() || !n.input(0)) return std::nullopt;
  ResizeParams p;
  const int64_t opset = n.opset();
  if (n.op_type() == "Upsample") {
    if (opset < 9) {
      const onnx::AttributeProto* s = n.attr("scales");
      if (!s || s->type() != onnx::AttributeProto::FLOATS) return std::nullopt;
      p.scales = std::vector<double>(s->floats().begin(), s->floats().end());
    } else if (!(p.scales = constant_doubles(n.input(1)))) {
      return std::nullopt;
    }
    return p;
  }
  if (n.op_type() != "Resize") return std::nullopt;
  if (opset < 11) {
    if (!(p.scales = constant_doubles(n.input(1)))) return std::nullopt;
    return p;
  }
  if (n.input(3)) {
    if (!(p.sizes = constant_ints(n.input(3)))) return std::nullopt;
  } else if (!n.input(2) || !(p.scales = constant_doubles(n.input(2)))) {
    return std::nullopt;
  }
  if (p.scales && p.scales->empty()) return std::nullopt;
  return p;
}

}  // namespace graft::ir
