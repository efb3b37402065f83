#include "core/pipeline/io_layout.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include <absl/strings/str_cat.h>

#include "core/base/status.h"
#include "core/passes/queries.h"
#include "core/pipeline/fix_dims.h"

namespace graft {

namespace {

// Each layout and the one the model is taken to compute in.
const std::map<std::string, std::string>& counterparts() {
  static const std::map<std::string, std::string> kPairs = {{"NCHW", "NHWC"},   {"NHWC", "NCHW"},
                                                            {"NCW", "NWC"},     {"NWC", "NCW"},
                                                            {"NCDHW", "NDHWC"}, {"NDHWC", "NCDHW"}};
  return kPairs;
}

// One value to convert: input or output `index` of the main graph.
struct Conversion {
  bool input = false;
  size_t index = 0;
  std::string from, to;  // layouts
  onnx::TypeProto type;  // the new declaration
};

// The note for a value that may already be in the requested layout: moving the channel dim of
// `from` to where `to` puts it would bring a dim of at most 4 (colour planes, audio channels)
// out of the spatial dims while a larger one becomes the channels.
std::string layout_note(const onnx::TypeProto& before, const std::string& from,
                        const std::string& to) {
  const auto& shape = before.tensor_type().shape();
  const int c_from = static_cast<int>(from.find('C'));
  const int c_to = static_cast<int>(to.find('C'));
  const auto& channels = shape.dim(c_from);  // what the model reads as channels
  const auto& moved = shape.dim(c_to);       // what the new layout reads as channels
  if (!channels.has_dim_value() || !moved.has_dim_value()) return "";
  if (moved.dim_value() > 4 || channels.dim_value() <= moved.dim_value()) return "";
  return absl::StrCat(" (note: its dim ", c_to, " is ", moved.dim_value(), " and its dim ", c_from,
                      " is ", channels.dim_value(), ": it may be in ", to,
                      " already; the model is taken to compute in ", from, ")");
}

// Checks value `name` (input or output) and makes its conversion.
absl::StatusOr<Conversion> plan(const ir::Graph& g, const std::string& name,
                                const std::string& to) {
  Conversion c;
  c.to = to;
  c.from = counterparts().at(to);
  const onnx::ValueInfoProto* info = nullptr;
  std::optional<size_t> in, out;
  for (size_t i = 0; i < g.inputs().size(); ++i)
    if (g.inputs()[i].value->name() == name) in = i;
  for (size_t i = 0; i < g.outputs().size(); ++i)
    if (g.outputs()[i].value->name() == name) out = i;
  const std::string where = absl::StrCat("io_layout: ", quoted_name(name));
  if (in && out)
    return absl::InvalidArgumentError(absl::StrCat(
        where, " is both an input and an output of the model: its layout cannot change"));
  if (!in && !out) {
    std::set<std::string> valid;
    for (const auto& i : g.inputs())
      if (!i.value->is_initializer()) valid.insert(i.value->name());
    for (const auto& o : g.outputs()) valid.insert(o.value->name());
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is neither an input nor an output of the model; they are: ",
                     valid.empty() ? "none" : name_listing(valid)));
  }
  if (in) {
    const ir::GraphInput& gi = g.inputs()[*in];
    if (gi.value->is_initializer())
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       " has an initializer, a default the caller may override: its layout cannot "
                       "change"));
    info = &gi.info;
    c.input = true;
    c.index = *in;
  } else {
    const ir::GraphOutput& go = g.outputs()[*out];
    const ir::Value* v = go.value;
    if (v->is_graph_input() || v->is_initializer() || v->producer() == nullptr)
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       " is an output no node computes (an input or an initializer): "
                       "its layout cannot change"));
    if (v->output_refs().size() != 1)
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is given as an output more than once: its layout cannot change"));
    info = &go.info;
    c.index = *out;
  }
  const onnx::TypeProto& type = info->type();
  if (!type.has_tensor_type())
    return absl::InvalidArgumentError(absl::StrCat(where, " is not a tensor"));
  if (!type.tensor_type().has_shape())
    return absl::InvalidArgumentError(
        absl::StrCat(where,
                     " declares no shape, so its rank is unknown; give it with --fix-shape "
                     "(inputs) or declare it in the model"));
  const int rank = type.tensor_type().shape().dim_size();
  if (rank != static_cast<int>(to.size()))
    return absl::InvalidArgumentError(absl::StrCat(where, " has rank ", rank, " ", dims_text(type),
                                                   "; ", to, " needs rank ", to.size()));
  c.type = type;
  auto* dims = c.type.mutable_tensor_type()->mutable_shape();
  const std::vector<int64_t> perm = layout_perm(c.from, c.to);
  for (int i = 0; i < rank; ++i)
    *dims->mutable_dim(i) = type.tensor_type().shape().dim(static_cast<int>(perm[i]));
  return c;
}

}  // namespace

const std::vector<std::string>& io_layout_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const auto& [name, other] : counterparts()) names.push_back(name);
    return names;
  }();
  return kNames;
}

absl::Status check_io_layout_config(const std::map<std::string, std::string>& layouts) {
  if (layouts.size() > kMaxIoLayouts)
    return absl::InvalidArgumentError(
        absl::StrCat("io_layout: ", layouts.size(), " entries, at most ", kMaxIoLayouts));
  for (const auto& [name, layout] : layouts) {
    if (name.empty()) return absl::InvalidArgumentError("io_layout: an empty name");
    if (!counterparts().count(layout)) {
      std::set<std::string> valid(io_layout_names().begin(), io_layout_names().end());
      return absl::InvalidArgumentError(absl::StrCat("io_layout: ", quoted_name(name), " given ",
                                                     quoted_name(layout),
                                                     "; layouts: ", name_listing(valid)));
    }
  }
  return absl::OkStatus();
}

std::vector<int64_t> layout_perm(const std::string& from, const std::string& to) {
  std::vector<int64_t> perm;
  for (char letter : to) perm.push_back(static_cast<int64_t>(from.find(letter)));
  return perm;
}

absl::Status convert_io_layout(ir::Model& model, const std::map<std::string, std::string>& layouts,
                               std::vector<std::string>* changed) {
  RETURN_IF_ERROR(check_io_layout_config(layouts));
  if (layouts.empty()) return absl::OkStatus();
  ir::Graph& g = model.graph();
  // Every entry is checked before anything is written: an error leaves the model as it was.
  std::vector<Conversion> plans;
  for (const auto& [name, layout] : layouts) {
    ASSIGN_OR_RETURN(Conversion c, plan(g, name, layout));
    plans.push_back(std::move(c));
  }
  std::sort(plans.begin(), plans.end(), [](const Conversion& a, const Conversion& b) {
    return std::make_pair(!a.input, a.index) < std::make_pair(!b.input, b.index);
  });
  for (const Conversion& c : plans) {
    if (c.input) {
      ir::Value* x = g.inputs()[c.index].value;
      const std::vector<ir::Use> uses = x->uses();
      // The model reads x in `from`: Transpose(x) takes the new layout back to it.
      ir::Node* t = g.add_node("Transpose", {x}, {x->name() + "_" + c.from});
      t->set_attr(ints_attr("perm", layout_perm(c.to, c.from)));
      for (const ir::Use& u : uses) u.node->set_input(static_cast<size_t>(u.index), t->output(0));
      if (changed)
        changed->push_back(absl::StrCat(
            "input ", quoted_name(x->name()), ": ", c.from, " ",
            dims_text(g.inputs()[c.index].info.type()), " -> ", c.to, " ", dims_text(c.type),
            layout_note(g.inputs()[c.index].info.type(), c.from, c.to)));
      g.set_input_type(c.index, c.type);
    } else {
      ir::Value* y = g.outputs()[c.index].value;
      ir::Node* producer = y->producer();
      const int slot = y->producer_index();
      const std::vector<ir::Use> uses = y->uses();
      // y keeps its name and becomes Transpose(v), where v is what the model computed.
      ir::Node* t = g.add_node("Transpose", {y}, {y->name() + "_" + c.to});
      t->set_attr(ints_attr("perm", layout_perm(c.from, c.to)));
      g.move_output_name(t, 0, y);  // the producer's slot gets a fresh value
      ir::Value* v = producer->output(static_cast<size_t>(slot));
      t->set_input(0, v);
      for (const ir::Use& u : uses) u.node->set_input(static_cast<size_t>(u.index), v);
      if (changed)
        changed->push_back(absl::StrCat(
            "output ", quoted_name(y->name()), ": ", c.from, " ",
            dims_text(g.outputs()[c.index].info.type()), " -> ", c.to, " ", dims_text(c.type),
            layout_note(g.outputs()[c.index].info.type(), c.from, c.to)));
      g.set_output_type(c.index, c.type);
    }
  }
  RETURN_IF_ERROR(g.finalize());
  model.refresh_shape_inference();
  return absl::OkStatus();
}

int64_t count_transposes(const ir::Model& model) {
  int64_t n = 0;
  for (const ir::Graph* g : model.all_graphs())
    for (const ir::Node* node : g->nodes()) n += node->is("Transpose");
  return n;
}

}  // namespace graft
