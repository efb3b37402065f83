#include "core/passes/opset.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <unordered_map>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "core/base/status.h"
#include "core/ir/tensor.h"
#include "core/passes/queries.h"

namespace graft {

namespace {

using onnx::TensorProto;

// What raise_opset learned about the model before converting anything: the channel count of
// each GroupNormalization it will convert (read from shape facts while they still describe the
// unconverted model).
struct Plan {
  std::unordered_map<const ir::Node*, int64_t> group_norm_channels;
  // The input rank of each Softmax, LogSoftmax and Hardmax below opset 13 (their axis meant
  // "flatten from here" before 13).
  std::unordered_map<const ir::Node*, int64_t> softmax_ranks;
};

// One schema change: the nodes of `ops` below opset `changed_at` are checked (a reason makes the
// raise refused), then converted by a rule.
struct Conversion {
  std::string rule;
  std::vector<std::string> ops;
  int64_t changed_at;
  std::function<std::optional<std::string>(const ir::Node&, Plan&)> check;
  std::function<bool(ir::Node&, Rewriter&, const Plan&)> convert;
};

std::string node_label(const ir::Node& n) {
  if (!n.name().empty()) return n.name();
  return n.output(0) ? n.output(0)->name() : std::string();
}

// An int64 constant holding `values` (a 1-D tensor, or a scalar with `scalar`), readable by `n`.
ir::Value* int64_constant(Rewriter& rw, ir::Node& n, const std::vector<int64_t>& values,
                          bool scalar, const std::string& what) {
  std::vector<int64_t> dims;
  if (!scalar) dims.push_back(static_cast<int64_t>(values.size()));
  return rw.add_constant(*n.graph(), ir::make_int64_tensor(dims, values),
                         absl::StrCat(node_label(n), "_", what));
}

// A float constant of `dtype` (a scalar with `scalar`), readable by `n`.
ir::Value* float_constant_of(Rewriter& rw, ir::Node& n, int32_t dtype,
                             const std::vector<double>& values, bool scalar,
                             const std::string& what) {
  std::vector<int64_t> dims;
  if (!scalar) dims.push_back(static_cast<int64_t>(values.size()));
  return rw.add_constant(*n.graph(), ir::make_float_tensor(dtype, dims, values),
                         absl::StrCat(node_label(n), "_", what));
}

// A list of ints (old models may leave an attribute's type unset).
bool is_ints(const onnx::AttributeProto& a) {
  return a.type() == onnx::AttributeProto::INTS ||
         (a.type() == onnx::AttributeProto::UNDEFINED && a.ints_size() > 0);
}

bool is_floats(const onnx::AttributeProto& a) {
  return a.type() == onnx::AttributeProto::FLOATS ||
         (a.type() == onnx::AttributeProto::UNDEFINED && a.floats_size() > 0);
}

bool is_int(const onnx::AttributeProto& a) {
  return a.type() == onnx::AttributeProto::INT ||
         (a.type() == onnx::AttributeProto::UNDEFINED && a.has_i());
}

bool is_float(const onnx::AttributeProto& a) {
  return a.type() == onnx::AttributeProto::FLOAT ||
         (a.type() == onnx::AttributeProto::UNDEFINED && a.has_f());
}

// `n` with `op` in its place: the same inputs (or `inputs`) and attributes, with `extra` set
// over them and `drop` left out; its outputs replace n's.
bool replace_op(ir::Node& n, Rewriter& rw, std::string_view op,
                const std::vector<ir::Value*>& inputs,
                const std::vector<onnx::AttributeProto>& extra,
                const std::vector<std::string_view>& drop = {}) {
  ir::Node* node = rw.add_node(*n.graph(), op, inputs, n.outputs().size(), &n);
  for (const auto& a : n.attributes())
    if (std::find(drop.begin(), drop.end(), a.name()) == drop.end()) rw.set_attr(node, a);
  for (const auto& a : extra) rw.set_attr(node, a);
  std::vector<ir::Value*> outputs;
  for (size_t i = 0; i < node->outputs().size(); ++i) outputs.push_back(node->output(i));
  return rw.replace_node(&n, outputs);
}

// Checks that attribute `name`, when present (or always, with `required`), is a list of ints.
std::optional<std::string> check_ints_attr(const ir::Node& n, std::string_view name,
                                           bool required) {
  const auto* a = n.attr(name);
  if (!a) {
    if (required) return absl::StrCat("its ", std::string(name), " attribute is missing");
    return std::nullopt;
  }
  if (!is_ints(*a))
    return absl::StrCat("its ", std::string(name), " attribute is not a list of ints");
  return std::nullopt;
}

// The inputs of `n` before opset `changed_at`'s form: at most `count` of them.
std::optional<std::string> check_input_count(const ir::Node& n, size_t count) {
  if (n.inputs().size() > count)
    return absl::StrCat("has ", n.inputs().size(), " inputs, which its opset does not define");
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// 9: BatchNormalization's spatial attribute is gone (spatial = 1 was the default)

std::optional<std::string> check_batch_norm_spatial(const ir::Node& n, Plan&) {
  if (n.attr_int("spatial", 1) != 1)
    return "spatial = 0 (statistics per activation, not per channel) has no opset-9 form";
  return std::nullopt;
}

bool convert_batch_norm_spatial(ir::Node& n, Rewriter& rw, const Plan&) {
  if (!n.attr("spatial")) return false;
  rw.remove_attr(&n, "spatial");
  return true;
}

// ---------------------------------------------------------------------------------------------
// 10: Slice's starts/ends/axes and TopK's k from attributes to inputs

std::optional<std::string> check_slice(const ir::Node& n, Plan&) {
  if (auto why = check_input_count(n, 1)) return why;
  for (auto [name, required] : {std::pair{"starts", true}, {"ends", true}, {"axes", false}})
    if (auto why = check_ints_attr(n, name, required)) return why;
  return std::nullopt;
}

bool convert_slice(ir::Node& n, Rewriter& rw, const Plan&) {
  const auto starts = n.attr_ints("starts"), ends = n.attr_ints("ends");
  if (!starts || !ends || n.inputs().size() != 1) return false;
  std::vector<ir::Value*> inputs{n.input(0), int64_constant(rw, n, *starts, false, "starts"),
                                 int64_constant(rw, n, *ends, false, "ends")};
  if (const auto axes = n.attr_ints("axes"))
    inputs.push_back(int64_constant(rw, n, *axes, false, "axes"));
  rw.set_inputs(&n, inputs);
  for (const char* name : {"starts", "ends", "axes"})
    if (n.attr(name)) rw.remove_attr(&n, name);
  return true;
}

std::optional<std::string> check_top_k(const ir::Node& n, Plan&) {
  if (auto why = check_input_count(n, 1)) return why;
  const auto* k = n.attr("k");
  if (!k || !is_int(*k)) return "its k attribute is missing or not an int";
  return std::nullopt;
}

bool convert_top_k(ir::Node& n, Rewriter& rw, const Plan&) {
  if (!n.attr("k") || n.inputs().size() != 1) return false;
  rw.set_inputs(&n, {n.input(0), int64_constant(rw, n, {n.attr_int("k", 0)}, false, "k")});
  rw.remove_attr(&n, "k");
  return true;
}

// ---------------------------------------------------------------------------------------------
// Upsample (deprecated at 10) and Resize-10 become opset 11's Resize with the old coordinate
// mapping, as ONNX's version converter writes it: x_in = x_out / scale ("asymmetric"), nearest
// neighbours rounded down ("floor").

std::optional<std::string> check_resize_modes(const ir::Node& n) {
  const std::string mode = n.attr_string("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "bilinear")
    return absl::StrCat("mode '", mode, "' has no Resize form");
  return std::nullopt;
}

std::vector<onnx::AttributeProto> resize_attrs(const ir::Node& n) {
  const std::string mode = n.attr_string("mode", "nearest");
  std::vector<onnx::AttributeProto> attrs{
      string_attr("mode", mode == "nearest" ? "nearest" : "linear"),
      string_attr("coordinate_transformation_mode", "asymmetric")};
  if (mode == "nearest") attrs.push_back(string_attr("nearest_mode", "floor"));
  return attrs;
}

std::optional<std::string> check_upsample(const ir::Node& n, Plan&) {
  if (auto why = check_resize_modes(n)) return why;
  if (n.input(1)) return check_input_count(n, 2);
  const auto* scales = n.attr("scales");
  if (!scales || !is_floats(*scales)) return "it has neither a scales input nor attribute";
  return check_input_count(n, 1);
}

bool convert_upsample(ir::Node& n, Rewriter& rw, const Plan&) {
  ir::Value* scales = n.input(1);
  if (!scales) {
    const auto* a = n.attr("scales");
    if (!a || !is_floats(*a)) return false;
    scales = float_constant_of(rw, n, TensorProto::FLOAT,
                               std::vector<double>(a->floats().begin(), a->floats().end()), false,
                               "scales");
  }
  return replace_op(n, rw, "Resize", {n.input(0), nullptr, scales}, resize_attrs(n),
                    {"scales", "mode"});
}

std::optional<std::string> check_resize_10(const ir::Node& n, Plan&) {
  if (auto why = check_resize_modes(n)) return why;
  return check_input_count(n, 2);
}

bool convert_resize_10(ir::Node& n, Rewriter& rw, const Plan&) {
  if (n.inputs().size() != 2 || n.attr("coordinate_transformation_mode")) return false;
  for (auto& a : resize_attrs(n)) rw.set_attr(&n, std::move(a));
  rw.set_inputs(&n, {n.input(0), nullptr, n.input(1)});
  return true;
}

// 13 drops Resize's tf_half_pixel_for_nn.
std::optional<std::string> check_resize_13(const ir::Node& n, Plan&) {
  if (n.attr_string("coordinate_transformation_mode", "") == "tf_half_pixel_for_nn")
    return "coordinate_transformation_mode tf_half_pixel_for_nn has no opset-13 form";
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// 11: Clip's min/max and Pad's pads/value from attributes to inputs; Scatter is ScatterElements

std::optional<std::string> check_clip(const ir::Node& n, Plan&) {
  if (auto why = check_input_count(n, 1)) return why;
  for (const char* name : {"min", "max"})
    if (const auto* a = n.attr(name); a && !is_float(*a))
      return absl::StrCat("its ", name, " attribute is not a float");
  if ((n.attr("min") || n.attr("max")) && !(n.input(0) && is_ieee_float(n.input(0)->elem_type())))
    return "its input's element type is not known to be a float type";
  return std::nullopt;
}

bool convert_clip(ir::Node& n, Rewriter& rw, const Plan&) {
  if ((!n.attr("min") && !n.attr("max")) || n.inputs().size() != 1) return false;
  const int32_t type = n.input(0)->elem_type();
  std::vector<ir::Value*> inputs{n.input(0), nullptr, nullptr};
  if (n.attr("min"))
    inputs[1] = float_constant_of(rw, n, type, {n.attr_float("min", 0)}, true, "min");
  if (n.attr("max"))
    inputs[2] = float_constant_of(rw, n, type, {n.attr_float("max", 0)}, true, "max");
  if (!inputs[2]) inputs.pop_back();
  rw.set_inputs(&n, inputs);
  for (const char* name : {"min", "max"})
    if (n.attr(name)) rw.remove_attr(&n, name);
  return true;
}

std::optional<std::string> check_pad(const ir::Node& n, Plan&) {
  if (auto why = check_input_count(n, 1)) return why;
  if (auto why = check_ints_attr(n, "pads", true)) return why;
  if (const auto* v = n.attr("value"); v && !is_float(*v))
    return "its value attribute is not a float";
  if (n.attr_float("value", 0) != 0 && !(n.input(0) && is_ieee_float(n.input(0)->elem_type())))
    return "its input's element type is not known to be a float type";
  return std::nullopt;
}

bool convert_pad(ir::Node& n, Rewriter& rw, const Plan&) {
  const auto pads = n.attr_ints("pads");
  if (!pads || n.inputs().size() != 1) return false;
  std::vector<ir::Value*> inputs{n.input(0), int64_constant(rw, n, *pads, false, "pads")};
  if (const double value = n.attr_float("value", 0); value != 0)
    inputs.push_back(float_constant_of(rw, n, n.input(0)->elem_type(), {value}, true, "value"));
  rw.set_inputs(&n, inputs);
  for (const char* name : {"pads", "value"})
    if (n.attr(name)) rw.remove_attr(&n, name);
  return true;
}

bool convert_scatter(ir::Node& n, Rewriter& rw, const Plan&) {
  std::vector<ir::Value*> inputs(n.inputs().begin(), n.inputs().end());
  return replace_op(n, rw, "ScatterElements", inputs, {});
}

// ---------------------------------------------------------------------------------------------
// 12: Dropout's ratio from attribute to input (inference: the output is the input either way);
// its mask, a float before 10 and a bool from 10, must be unread.

std::optional<std::string> check_dropout(const ir::Node& n, Plan&) {
  if (auto why = check_input_count(n, 1)) return why;
  if (n.outputs().size() > 1 && n.output(1) && n.output(1)->use_count() > 0)
    return "its mask output is read";
  return std::nullopt;
}

bool convert_dropout(ir::Node& n, Rewriter& rw, const Plan&) {
  if (n.inputs().size() != 1 || (!n.attr("ratio") && n.outputs().size() == 1)) return false;
  std::vector<ir::Value*> inputs{n.input(0)};
  if (n.attr("ratio"))
    inputs.push_back(
        float_constant_of(rw, n, TensorProto::FLOAT, {n.attr_float("ratio", 0.5f)}, true, "ratio"));
  ir::Node* dropout = rw.add_node(*n.graph(), "Dropout", inputs, 1, &n);
  std::vector<ir::Value*> outputs(n.outputs().size(), nullptr);
  outputs[0] = dropout->output(0);
  return rw.replace_node(&n, outputs);
}

// ---------------------------------------------------------------------------------------------
// 13: Squeeze/Unsqueeze axes, Split's split and ReduceSum's axes from attributes to inputs;
// Softmax, LogSoftmax and Hardmax normalize over one axis instead of every axis from `axis` on
// (default 1 before, -1 from 13).

std::optional<std::string> check_axes_attr(const ir::Node& n, Plan&) {
  if (auto why = check_input_count(n, 1)) return why;
  return check_ints_attr(n, "axes", n.op_type() == "Unsqueeze");
}

bool convert_axes_attr(ir::Node& n, Rewriter& rw, const Plan&) {
  const auto axes = n.attr_ints("axes");
  if (!axes || n.inputs().size() != 1) return false;
  // An empty ReduceSum axes list reduced every axis, as no axes input does.
  if (!axes->empty() || n.op_type() != "ReduceSum")
    rw.set_inputs(&n, {n.input(0), int64_constant(rw, n, *axes, false, "axes")});
  rw.remove_attr(&n, "axes");
  return true;
}

std::optional<std::string> check_split_13(const ir::Node& n, Plan&) {
  if (auto why = check_input_count(n, 1)) return why;
  return check_ints_attr(n, "split", false);
}

bool convert_split_13(ir::Node& n, Rewriter& rw, const Plan&) {
  const auto split = n.attr_ints("split");
  if (!split || n.inputs().size() != 1) return false;
  rw.set_inputs(&n, {n.input(0), int64_constant(rw, n, *split, false, "split")});
  rw.remove_attr(&n, "split");
  return true;
}

std::optional<std::string> check_softmax(const ir::Node& n, Plan& plan) {
  const auto rank = n.input(0) ? n.input(0)->rank() : std::nullopt;
  if (!rank)
    return "its input's rank is not known, and before opset 13 its axis meant every axis from "
           "it on";
  int64_t axis = n.attr_int("axis", 1);
  if (axis < -*rank || axis >= std::max<int64_t>(*rank, 1))
    return absl::StrCat("axis ", axis, " is out of range for rank ", *rank);
  plan.softmax_ranks[&n] = *rank;
  return std::nullopt;
}

bool convert_softmax(ir::Node& n, Rewriter& rw, const Plan& plan) {
  auto it = plan.softmax_ranks.find(&n);
  if (it == plan.softmax_ranks.end()) return false;
  const int64_t rank = it->second;
  int64_t axis = n.attr_int("axis", 1);
  if (axis < 0) axis += rank;
  if (axis >= rank - 1 || rank <= 1) {
    // One axis or none after it: the same computation, but the default changes at 13.
    if (n.attr("axis") && n.attr_int("axis", 1) == axis) return false;
    rw.set_attr(&n, int_attr("axis", std::max<int64_t>(axis, 0)));
    return true;
  }
  // Over the axes from `axis` on: flatten them into one, normalize, and restore the shape.
  ir::Graph& g = *n.graph();
  ir::Node* flat = rw.add_node(g, "Flatten", {n.input(0)}, 1, &n);
  rw.set_attr(flat, int_attr("axis", axis));
  ir::Node* norm = rw.add_node(g, n.op_type(), {flat->output(0)}, 1, &n);
  rw.set_attr(norm, int_attr("axis", 1));
  ir::Node* shape = rw.add_node(g, "Shape", {n.input(0)}, 1, &n);
  ir::Node* back = rw.add_node(g, "Reshape", {norm->output(0), shape->output(0)}, 1, &n);
  return rw.replace_node(&n, {back->output(0)});
}

// 9 changes Scan (no batch axis): the opset-8 form is refused.
std::optional<std::string> refuse_scan_8(const ir::Node&, Plan&) {
  return "the opset-8 Scan (with a batch axis) has no later form Graft writes";
}

// ---------------------------------------------------------------------------------------------
// 14: BatchNormalization outputs

std::optional<std::string> check_batch_norm(const ir::Node& n, Plan&) {
  for (size_t i = 1; i < n.outputs().size(); ++i)
    if (n.output(i) && n.output(i)->use_count() > 0)
      return absl::StrCat("output ", i,
                          " (a training statistic) is read; opset 14 defines it only in "
                          "training mode");
  return std::nullopt;
}

// The extra outputs are declared but nobody reads them: a node with Y alone replaces it.
bool convert_batch_norm(ir::Node& n, Rewriter& rw, const Plan&) {
  if (n.outputs().size() <= 1) return false;
  std::vector<ir::Value*> inputs(n.inputs().begin(), n.inputs().end());
  ir::Node* bn = rw.add_node(*n.graph(), "BatchNormalization", inputs, 1, &n);
  for (const auto& a : n.attributes()) rw.set_attr(bn, a);
  std::vector<ir::Value*> replacements(n.outputs().size(), nullptr);
  replacements[0] = bn->output(0);
  return rw.replace_node(&n, replacements);
}

// ---------------------------------------------------------------------------------------------
// 16: RoiAlign's coordinate_transformation_mode (half_pixel by default from 16; before, the
// behaviour was output_half_pixel)

bool convert_roi_align(ir::Node& n, Rewriter& rw, const Plan&) {
  if (n.attr("coordinate_transformation_mode")) return false;
  rw.set_attr(&n, string_attr("coordinate_transformation_mode", "output_half_pixel"));
  return true;
}

// ---------------------------------------------------------------------------------------------
// 18: Reduce* axes from attribute to input; Split's num_outputs

std::optional<std::string> check_reduce(const ir::Node& n, Plan&) {
  if (n.inputs().size() > 1) return "has more than one input, which its opset does not define";
  if (const auto* a = n.attr("axes"); a && !is_ints(*a))
    return "its axes attribute is not a list of ints";
  return std::nullopt;
}

bool convert_reduce(ir::Node& n, Rewriter& rw, const Plan&) {
  const auto* a = n.attr("axes");
  if (!a || !is_ints(*a) || n.inputs().size() != 1) return false;
  const std::vector<int64_t> axes(a->ints().begin(), a->ints().end());
  // An empty list reduced every axis, as no axes input does (noop_with_empty_axes is 0).
  if (!axes.empty()) rw.set_inputs(&n, {n.input(0), int64_constant(rw, n, axes, false, "axes")});
  rw.remove_attr(&n, "axes");
  return true;
}

bool convert_split(ir::Node& n, Rewriter& rw, const Plan&) {
  // A `split` attribute (before 13) becomes the input first (split_input).
  if (n.input(1) || n.attr("num_outputs") || n.attr("split")) return false;
  rw.set_attr(&n, int_attr("num_outputs", static_cast<int64_t>(n.outputs().size())));
  return true;
}

// ---------------------------------------------------------------------------------------------
// 20: GridSample's modes renamed; DFT's axis from attribute (default 1) to input 2 (default -2)

bool convert_grid_sample(ir::Node& n, Rewriter& rw, const Plan&) {
  const std::string mode = n.attr_string("mode", "");
  const char* renamed = mode == "bilinear" ? "linear" : mode == "bicubic" ? "cubic" : nullptr;
  if (!renamed) return false;
  rw.set_attr(&n, string_attr("mode", renamed));
  return true;
}

std::optional<std::string> check_dft(const ir::Node& n, Plan&) {
  if (n.inputs().size() > 2) return "has more than two inputs, which its opset does not define";
  if (const auto* a = n.attr("axis"); a && a->type() != onnx::AttributeProto::INT &&
                                      !(a->type() == onnx::AttributeProto::UNDEFINED && a->has_i()))
    return "its axis attribute is not an int";
  return std::nullopt;
}

bool convert_dft(ir::Node& n, Rewriter& rw, const Plan&) {
  if (n.inputs().size() > 2 || !n.input(0)) return false;  // converted (axis is input 2)
  const int64_t axis = n.attr_int("axis", 1);
  rw.set_inputs(&n, {n.input(0), n.input(1), int64_constant(rw, n, {axis}, true, "axis")});
  if (n.attr("axis")) rw.remove_attr(&n, "axis");
  return true;
}

// ---------------------------------------------------------------------------------------------
// 21: GroupNormalization's scale and bias per channel instead of per group

std::optional<std::string> check_group_norm(const ir::Node& n, Plan& plan) {
  const int64_t groups = n.attr_int("num_groups", 0);
  if (groups <= 0) return "num_groups is missing or not positive";
  const ir::Value* x = n.input(0);
  const auto channels = x ? known_dim(x, 1) : std::nullopt;
  if (!channels)
    return "x's channel count is not known, so its per-group scale and bias cannot be "
           "repeated per channel (opset 21's meaning)";
  if (*channels % groups != 0)
    return absl::StrCat("x has ", *channels, " channels, not a multiple of num_groups ", groups);
  if (x->elem_type() == 0) return "x's element type is not known";
  for (size_t i : {size_t{1}, size_t{2}}) {
    auto t = float_constant_type(n.input(i));
    if (!t)
      return absl::StrCat(i == 1 ? "scale" : "bias",
                          " is not a constant, so it cannot be repeated per channel (opset 21 "
                          "reads it per channel, not per group)");
    if (t->dims != std::vector<int64_t>{groups})
      return absl::StrCat(i == 1 ? "scale" : "bias", " is not of shape [num_groups]");
  }
  plan.group_norm_channels[&n] = *channels;
  return std::nullopt;
}

bool convert_group_norm(ir::Node& n, Rewriter& rw, const Plan& plan) {
  auto it = plan.group_norm_channels.find(&n);
  if (it == plan.group_norm_channels.end()) return false;
  const int64_t channels = it->second, groups = n.attr_int("num_groups", 0);
  // Converted already (or nothing to do: one channel per group reads the same either way).
  if (groups <= 0 || channels == groups) return false;
  std::vector<ir::Value*> repeated;
  for (size_t i : {size_t{1}, size_t{2}}) {
    auto c = float_constant(n.input(i));
    if (!c || c->dims != std::vector<int64_t>{groups}) return false;
    std::vector<double> values;
    values.reserve(static_cast<size_t>(channels));
    for (int64_t ch = 0; ch < channels; ++ch)
      values.push_back(c->values[static_cast<size_t>(ch / (channels / groups))]);
    repeated.push_back(rw.add_constant(*n.graph(),
                                       ir::make_float_tensor(c->dtype, {channels}, values),
                                       absl::StrCat(n.input(i)->name(), "_per_channel")));
  }
  const int32_t x_type = n.input(0)->elem_type();
  rw.set_inputs(&n, {n.input(0), repeated[0], repeated[1]});
  if (x_type != TensorProto::FLOAT && !n.attr("stash_type"))
    rw.set_attr(&n, int_attr("stash_type", x_type));
  return true;
}

const std::vector<Conversion>& conversions() {
  static const auto* all = new std::vector<Conversion>{
      {"scan_batch_axis", {"Scan"}, 9, refuse_scan_8, nullptr},
      {"batch_norm_spatial",
       {"BatchNormalization"},
       9,
       check_batch_norm_spatial,
       convert_batch_norm_spatial},
      {"slice_inputs", {"Slice"}, 10, check_slice, convert_slice},
      {"top_k_input", {"TopK"}, 10, check_top_k, convert_top_k},
      {"resize_11", {"Resize"}, 11, check_resize_10, convert_resize_10},
      {"clip_inputs", {"Clip"}, 11, check_clip, convert_clip},
      {"pad_inputs", {"Pad"}, 11, check_pad, convert_pad},
      {"dropout_ratio_input", {"Dropout"}, 12, check_dropout, convert_dropout},
      // Deprecated at 10 and 11, so converted wherever they stand below 13.
      {"upsample_to_resize", {"Upsample"}, 13, check_upsample, convert_upsample},
      {"scatter_to_scatter_elements", {"Scatter"}, 13, nullptr, convert_scatter},
      {"axes_input", {"Squeeze", "Unsqueeze", "ReduceSum"}, 13, check_axes_attr, convert_axes_attr},
      {"split_input", {"Split"}, 13, check_split_13, convert_split_13},
      {"softmax_axis", {"Softmax", "LogSoftmax", "Hardmax"}, 13, check_softmax, convert_softmax},
      {"resize_13", {"Resize"}, 13, check_resize_13, nullptr},
      {"batch_norm_outputs", {"BatchNormalization"}, 14, check_batch_norm, convert_batch_norm},
      {"roi_align_mode", {"RoiAlign"}, 16, nullptr, convert_roi_align},
      {"reduce_axes_input",
       {"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean",
        "ReduceMin", "ReduceProd", "ReduceSumSquare"},
       18,
       check_reduce,
       convert_reduce},
      {"split_num_outputs", {"Split"}, 18, nullptr, convert_split},
      {"grid_sample_mode", {"GridSample"}, 20, nullptr, convert_grid_sample},
      {"dft_axis_input", {"DFT"}, 20, check_dft, convert_dft},
      {"group_norm_per_channel", {"GroupNormalization"}, 21, check_group_norm, convert_group_norm},
  };
  return *all;
}

// The minimum IR version of an opset (onnx/helper.py's VERSION_TABLE).
int64_t ir_version_for(int64_t opset) {
  if (opset >= 23) return 11;
  if (opset >= 21) return 10;
  if (opset >= 19) return 9;
  if (opset >= 15) return 8;
  return 7;
}

using Imports = google::protobuf::RepeatedPtrField<onnx::OperatorSetIdProto>;

// The default-domain entry of `imports`, or nullptr.
const onnx::OperatorSetIdProto* default_import(const Imports& imports) {
  for (const auto& op : imports)
    if (ir::is_onnx_domain(op.domain())) return &op;
  return nullptr;
}

// Raises every default-domain entry of `imports` below `target` to it.
void raise_imports(Imports* imports, int64_t target) {
  for (auto& op : *imports)
    if (ir::is_onnx_domain(op.domain()) && op.version() < target) op.set_version(target);
}

std::string graph_label(const ir::Model& model, const ir::Graph& g) {
  return &g == &model.graph() ? std::string() : g.name();
}

std::optional<OpsetRefusal> check(const ir::Model& model, int64_t target, Plan& plan) {
  const auto* main = default_import(model.rest().opset_import());
  if (main && main->version() < kMinSourceOpset)
    return OpsetRefusal{
        "", "", "",
        absl::StrCat("the model imports the default domain at opset ", main->version(),
                     "; opsets are raised from ", kMinSourceOpset, " on")};
  for (const ir::Function& fn : model.functions()) {
    const auto* own = default_import(fn.rest.opset_import());
    if (own && own->version() < kMinSourceOpset)
      return OpsetRefusal{
          "", "", "",
          absl::StrCat("function '", fn.rest.name(), "' imports opset ", own->version(),
                       "; opsets are raised from ", kMinSourceOpset, " on")};
  }
  for (ir::Graph* g : model.all_graphs())
    for (ir::Node* n : g->nodes()) {
      if (!n->is_onnx_domain()) continue;
      const int64_t opset = n->opset();
      if (opset < kMinSourceOpset)
        return OpsetRefusal{node_label(*n), n->op_type(), graph_label(model, *g),
                            opset == 0
                                ? std::string("the default domain is not imported")
                                : absl::StrCat("its opset ", opset, " is below ", kMinSourceOpset)};
      for (const Conversion& c : conversions()) {
        if (c.changed_at > target || opset >= c.changed_at || !c.check ||
            std::find(c.ops.begin(), c.ops.end(), n->op_type()) == c.ops.end())
          continue;
        if (auto why = c.check(*n, plan))
          return OpsetRefusal{node_label(*n), n->op_type(), graph_label(model, *g),
                              std::move(*why)};
      }
    }
  return std::nullopt;
}

}  // namespace

std::string OpsetRefusal::message() const {
  if (op.empty()) return reason;
  return absl::StrCat(op, " '", node, "'", graph.empty() ? "" : absl::StrCat(" (in ", graph, ")"),
                      ": ", reason);
}

std::vector<std::string> opset_conversion_rules() {
  std::vector<std::string> names;
  for (const Conversion& c : conversions()) names.push_back(c.rule);
  return names;
}

std::string OpsetRaise::summary(std::string_view why) const {
  std::vector<std::string> converted;
  for (const auto& [rule, count] : conversions) converted.push_back(absl::StrCat(rule, " ", count));
  return absl::StrCat(
      "the default-domain opset was raised from ", from, " to ", to, why.empty() ? "" : " for ",
      std::string(why),
      converted.empty() ? "" : "; nodes converted: ", absl::StrJoin(converted, ", "));
}

std::optional<OpsetRefusal> check_raise_opset(const ir::Model& model, int64_t target) {
  Plan plan;
  return check(model, target, plan);
}

absl::StatusOr<OpsetRaise> raise_opset(ir::Model& model, int64_t target,
                                       const RuleRunOptions& options) {
  if (target < kMinRaisableOpset || target > kMaxRaisableOpset)
    return absl::InvalidArgumentError(absl::StrCat("opsets are raised to ", kMinRaisableOpset, "..",
                                                   kMaxRaisableOpset, ", not ", target));
  OpsetRaise result;
  const auto* main = default_import(model.rest().opset_import());
  result.from = main ? main->version() : 0;
  result.to = result.from;
  bool below = !main || main->version() < target;
  for (const ir::Function& fn : model.functions())
    if (const auto* own = default_import(fn.rest.opset_import()); own && own->version() < target)
      below = true;
  if (!below) return result;

  auto plan = std::make_shared<Plan>();
  if (auto refusal = check(model, target, *plan)) {
    result.refused = std::move(refusal);
    return result;
  }
  std::vector<Rule> rules;
  for (const Conversion& c : conversions()) {
    if (c.changed_at > target || !c.convert) continue;
    auto convert = c.convert;
    rules.emplace_back(
        c.rule, c.ops, [plan, convert](ir::Node& n, Rewriter& rw) { return convert(n, rw, *plan); },
        "", kMinSourceOpset, c.changed_at - 1);
  }
  const ir::Model::Checkpoint cp = model.checkpoint();
  RuleCounts counts = run_rules(model, rules, options);
  if (!counts.error.ok() || counts.capped) {
    model.rollback(cp);
    RETURN_IF_ERROR(counts.error);
    return absl::InternalError("raising the opset: the conversion rules did not finish");
  }
  model.release(cp);

  // The imports last: until here every node was read at its old opset.
  model.edit_opset_imports(nullptr, [&](ir::Model::OpsetImports& imports) {
    if (main) {
      raise_imports(&imports, target);
    } else {
      auto* op = imports.Add();
      op->set_domain("");
      op->set_version(target);
    }
  });
  for (ir::Function& fn : model.functions())
    model.edit_opset_imports(
        fn.body.get(), [&](ir::Model::OpsetImports& imports) { raise_imports(&imports, target); });
  if (model.rest().ir_version() < ir_version_for(target))
    model.set_ir_version(ir_version_for(target));
  // Facts computed so far hold (every conversion keeps the meaning); incomplete ones may now be
  // completed by the rules of the new opset.
  model.touch();
  result.to = target;
  result.changed = true;
  result.conversions = std::move(counts.rewrites);
  return result;
}

absl::StatusOr<PassResult> run_at_opset(ir::Model& model, int64_t target, std::string_view why,
                                        bool check_transactions,
                                        const std::function<absl::StatusOr<PassResult>()>& body) {
  const ir::Model::Checkpoint cp = model.checkpoint();
  RuleRunOptions options;
  options.check_transactions = check_transactions;
  auto raised = raise_opset(model, target, options);
  if (!raised.ok() || raised->refused) {
    model.rollback(cp);
    RETURN_IF_ERROR(raised.status());
    const OpsetRefusal& r = *raised->refused;
    PassResult result;
    result.explanations.push_back(
        {.rule = "raise_opset",
         .node = r.node.empty() ? "model" : r.node,
         .op = r.op.empty() ? "opset_import" : r.op,
         .graph = r.graph,
         .reason = absl::StrCat("nothing quantized: the opset cannot be raised to ", target, " (",
                                std::string(why), "): ", r.reason)});
    result.always_explained = true;
    return result;
  }
  auto result = body();
  if (!result.ok() || result->rewrites == 0) {
    model.rollback(cp);  // the raised imports and IR version too
    RETURN_IF_ERROR(result.status());
    result->changed = false;
    return result;
  }
  model.release(cp);
  if (raised->changed) {
    result->add_model_finding("raise_opset", raised->summary(why), "opset_import");
  }
  return result;
}

absl::StatusOr<PassResult> run_with_import(
    ir::Model& model, std::string_view domain, int64_t version,
    const std::function<absl::StatusOr<PassResult>()>& body) {
  const int64_t imported = model.graph().opset(domain);
  if (imported != 0 && imported != version) return PassResult{};
  // The import is journaled: taking the checkpoint back removes it again.
  const ir::Model::Checkpoint cp = model.checkpoint();
  if (imported == 0)
    model.edit_opset_imports(nullptr, [&](ir::Model::OpsetImports& imports) {
      auto* op = imports.Add();
      op->set_domain(std::string(domain));
      op->set_version(version);
    });
  absl::StatusOr<PassResult> result = body();
  if (imported == 0 && (!result.ok() || !result->changed))
    model.rollback(cp);
  else
    model.release(cp);
  return result;
}

}  // namespace graft
