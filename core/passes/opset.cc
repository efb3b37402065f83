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

// A list of ints (old models may leave an attribute's type unset).
bool is_ints(const onnx::AttributeProto& a) {
  return a.type() == onnx::AttributeProto::INTS ||
         (a.type() == onnx::AttributeProto::UNDEFINED && a.ints_size() > 0);
}

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
  if (n.input(1) || n.attr("num_outputs")) return false;
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
  if (main && main->version() < kMinRaisableOpset)
    return OpsetRefusal{
        "", "", "",
        absl::StrCat("the model imports the default domain at opset ", main->version(),
                     "; opsets are raised from ", kMinRaisableOpset, " on")};
  for (const ir::Function& fn : model.functions()) {
    const auto* own = default_import(fn.rest.opset_import());
    if (own && own->version() < kMinRaisableOpset)
      return OpsetRefusal{
          "", "", "",
          absl::StrCat("function '", fn.rest.name(), "' imports opset ", own->version(),
                       "; opsets are raised from ", kMinRaisableOpset, " on")};
  }
  for (ir::Graph* g : model.all_graphs())
    for (ir::Node* n : g->nodes()) {
      if (!n->is_onnx_domain()) continue;
      const int64_t opset = n->opset();
      if (opset < kMinRaisableOpset)
        return OpsetRefusal{
            node_label(*n), n->op_type(), graph_label(model, *g),
            opset == 0 ? std::string("the default domain is not imported")
                       : absl::StrCat("its opset ", opset, " is below ", kMinRaisableOpset)};
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
    if (c.changed_at > target) continue;
    auto convert = c.convert;
    rules.emplace_back(
        c.rule, c.ops, [plan, convert](ir::Node& n, Rewriter& rw) { return convert(n, rw, *plan); },
        "", kMinRaisableOpset, c.changed_at - 1);
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

}  // namespace graft
