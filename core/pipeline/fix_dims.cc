#include "core/pipeline/fix_dims.h"

#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "core/base/status.h"

namespace graft {

namespace {

std::string cut(const std::string& name) {
  return name.size() > kMaxNameBytes ? name.substr(0, kMaxNameBytes) + "..." : name;
}

}  // namespace

std::string quoted_name(const std::string& name) { return "'" + cut(name) + "'"; }

std::string name_listing(const std::set<std::string>& names) {
  std::vector<std::string> shown;
  for (const auto& n : names) {
    if (shown.size() == kMaxListedNames) break;
    shown.push_back(quoted_name(n));
  }
  std::string out = absl::StrJoin(shown, ", ");
  if (names.size() > kMaxListedNames)
    absl::StrAppend(&out, " and ", names.size() - kMaxListedNames, " more");
  return out;
}

namespace {

bool is_static(const onnx::TensorShapeProto::Dimension& d) {
  return d.has_dim_value() && d.dim_value() >= 0;
}

bool is_symbol(const onnx::TensorShapeProto::Dimension& d) {
  return !is_static(d) && d.has_dim_param() && !d.dim_param().empty();
}

// Dims a text shows at most (a model may declare any rank).
constexpr int kMaxShownDims = 64;

// A dim_param bound to a size, and by what: fix_dims (input null), or fix_shapes' dim `dim` of
// `input`.
struct Binding {
  int64_t size = 0;
  const std::string* input = nullptr;
  size_t dim = 0;
};

// "fix_dims makes 'N' 2" / "fix_shapes gives input 'x' dim 0 ('N') 3".
std::string binding_text(const std::string& name, const Binding& b) {
  if (!b.input) return absl::StrCat("fix_dims makes ", quoted_name(name), " ", b.size);
  return absl::StrCat("fix_shapes gives input ", quoted_name(*b.input), " dim ", b.dim, " (",
                      quoted_name(name), ") ", b.size);
}

// Verification settings that contradict the fixed sizes: a verify shape of input `name` giving
// a dim fixed here another size, a verify dim giving a dim_param fixed here another size.
absl::Status check_verify(const std::string& name, const onnx::TypeProto& before,
                          const onnx::TypeProto& after, const eval::VerifyOptions& verify) {
  const auto& dims = after.tensor_type().shape();
  const bool had_shape = before.tensor_type().has_shape();
  auto given = verify.shapes.find(name);
  if (given != verify.shapes.end() && given->second.size() != static_cast<size_t>(dims.dim_size()))
    given = verify.shapes.end();  // verification reports the rank itself
  for (int k = 0; k < dims.dim_size(); ++k) {
    const onnx::TensorShapeProto::Dimension* was =
        had_shape ? &before.tensor_type().shape().dim(k) : nullptr;
    if (was && is_static(*was)) continue;  // not fixed here
    const int64_t size = dims.dim(k).dim_value();
    if (given != verify.shapes.end() && given->second[static_cast<size_t>(k)] != size)
      return absl::InvalidArgumentError(absl::StrCat(
          "verify: the shape of ", quoted_name(name), " gives dim ", k, " size ",
          given->second[static_cast<size_t>(k)], ", but fix_dims/fix_shapes fix it to ", size));
    if (!was || !is_symbol(*was)) continue;
    if (auto d = verify.dims.find(was->dim_param()); d != verify.dims.end() && d->second != size)
      return absl::InvalidArgumentError(absl::StrCat("verify: dim ", quoted_name(was->dim_param()),
                                                     " is ", d->second,
                                                     ", but fix_dims/fix_shapes fix it to ", size));
  }
  return absl::OkStatus();
}

}  // namespace

std::string dims_text(const onnx::TypeProto& type) {
  if (!type.has_tensor_type() || !type.tensor_type().has_shape()) return "(no shape)";
  const auto& shape = type.tensor_type().shape();
  std::vector<std::string> parts;
  for (int k = 0; k < shape.dim_size() && k < kMaxShownDims; ++k) {
    const auto& d = shape.dim(k);
    parts.push_back(is_static(d)   ? std::to_string(d.dim_value())
                    : is_symbol(d) ? cut(d.dim_param())
                                   : "?");
  }
  if (shape.dim_size() > kMaxShownDims)
    parts.push_back(absl::StrCat("... ", shape.dim_size(), " dims"));
  return "[" + absl::StrJoin(parts, ",") + "]";
}

absl::Status check_fix_config(const std::map<std::string, int64_t>& dims,
                              const std::map<std::string, std::vector<int64_t>>& shapes) {
  const std::string range = absl::StrCat(kMinFixedDim, "..", kMaxFixedDim);
  if (dims.size() > kMaxFixEntries)
    return absl::InvalidArgumentError(
        absl::StrCat("fix_dims: at most ", kMaxFixEntries, " names, got ", dims.size()));
  if (shapes.size() > kMaxFixEntries)
    return absl::InvalidArgumentError(
        absl::StrCat("fix_shapes: at most ", kMaxFixEntries, " inputs, got ", shapes.size()));
  for (const auto& [name, size] : dims) {
    if (name.empty()) return absl::InvalidArgumentError("fix_dims: a dim name is empty");
    if (size < kMinFixedDim || size > kMaxFixedDim)
      return absl::InvalidArgumentError(absl::StrCat("fix_dims: the size of ", quoted_name(name),
                                                     " must be ", range, ", got ", size));
  }
  for (const auto& [name, shape] : shapes) {
    if (name.empty()) return absl::InvalidArgumentError("fix_shapes: an input name is empty");
    if (shape.size() > kMaxFixRank)
      return absl::InvalidArgumentError(absl::StrCat("fix_shapes: the shape of ", quoted_name(name),
                                                     " has ", shape.size(), " dims, at most ",
                                                     kMaxFixRank));
    for (size_t k = 0; k < shape.size(); ++k)
      if (shape[k] < kMinFixedDim || shape[k] > kMaxFixedDim)
        return absl::InvalidArgumentError(absl::StrCat("fix_shapes: dim ", k, " of ",
                                                       quoted_name(name), " must be ", range,
                                                       ", got ", shape[k]));
  }
  return absl::OkStatus();
}

absl::Status fix_input_dims(ir::Model& model, const std::map<std::string, int64_t>& dims,
                            const std::map<std::string, std::vector<int64_t>>& shapes,
                            std::vector<std::string>* changed, const eval::VerifyOptions* verify) {
  RETURN_IF_ERROR(check_fix_config(dims, shapes));
  if (dims.empty() && shapes.empty()) return absl::OkStatus();
  ir::Graph& g = model.graph();
  const std::vector<ir::GraphInput>& inputs = g.inputs();

  std::map<std::string_view, size_t> position;  // of each input, by name
  for (size_t i = 0; i < inputs.size(); ++i) position.emplace(inputs[i].value->name(), i);
  // fix_dims's names first, then the symbolic dims fix_shapes gives sizes.
  std::map<std::string, Binding> bound;
  for (const auto& [name, size] : dims) bound[name] = {size};
  std::map<size_t, const std::vector<int64_t>*> shaped;  // fix_shapes by input position
  for (const auto& [name, shape] : shapes) {
    auto at = position.find(name);
    if (at == position.end()) {
      std::set<std::string> valid;
      for (const auto& in : inputs)
        if (!in.value->is_initializer()) valid.insert(in.value->name());
      return absl::InvalidArgumentError(absl::StrCat("fix_shapes: ", quoted_name(name),
                                                     " is not an input of the model; its inputs: ",
                                                     valid.empty() ? "none" : name_listing(valid)));
    }
    const ir::GraphInput& in = inputs[at->second];
    const std::string where = absl::StrCat("fix_shapes: input ", quoted_name(name));
    if (in.value->is_initializer())
      return absl::InvalidArgumentError(absl::StrCat(
          where, " has an initializer, a default the caller may override: it cannot be fixed"));
    if (!in.info.type().has_tensor_type())
      return absl::InvalidArgumentError(absl::StrCat(where, " is not a tensor"));
    const auto& tt = in.info.type().tensor_type();
    if (tt.has_shape() && tt.shape().dim_size() != static_cast<int>(shape.size()))
      return absl::InvalidArgumentError(absl::StrCat(where, " has rank ", tt.shape().dim_size(),
                                                     " ", dims_text(in.info.type()), ", ",
                                                     shape.size(), " dims given"));
    for (size_t k = 0; tt.has_shape() && k < shape.size(); ++k) {
      const auto& d = tt.shape().dim(static_cast<int>(k));
      if (is_static(d) && d.dim_value() != shape[k])
        return absl::InvalidArgumentError(absl::StrCat(where, ": dim ", k, " is ", shape[k],
                                                       ", the model declares ", d.dim_value(), " ",
                                                       dims_text(in.info.type())));
      if (!is_symbol(d)) continue;
      const Binding by{shape[k], &name, k};
      auto [it, added] = bound.emplace(d.dim_param(), by);
      if (!added && it->second.size != shape[k])
        return absl::InvalidArgumentError(absl::StrCat(binding_text(d.dim_param(), it->second),
                                                       ", but ", binding_text(d.dim_param(), by)));
    }
    shaped.emplace(at->second, &shape);
  }

  // Every name fix_dims gives must be carried by an input dim it can fix.
  std::set<std::string> carried, carried_by_defaults;
  for (const auto& in : inputs) {
    if (!in.info.type().has_tensor_type() || !in.info.type().tensor_type().has_shape()) continue;
    for (const auto& d : in.info.type().tensor_type().shape().dim())
      if (is_symbol(d))
        (in.value->is_initializer() ? carried_by_defaults : carried).insert(d.dim_param());
  }
  for (const auto& [name, size] : dims) {
    if (carried.count(name) || carried_by_defaults.count(name)) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "fix_dims: no input dim is named ", quoted_name(name), "; ",
        carried.empty() ? "the inputs have no named dims"
                        : absl::StrCat("the inputs' dim names: ", name_listing(carried))));
  }

  // The new declarations, all checked before any is written: an error leaves the model as it was.
  std::vector<std::pair<size_t, onnx::TypeProto>> updates;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::GraphInput& in = inputs[i];
    if (!in.info.type().has_tensor_type()) continue;
    onnx::TypeProto type = in.info.type();
    auto* tt = type.mutable_tensor_type();
    auto given = shaped.find(i);
    const std::vector<int64_t>* shape = given != shaped.end() ? given->second : nullptr;
    if (shape && !tt->has_shape()) {
      for (size_t k = 0; k < shape->size(); ++k) tt->mutable_shape()->add_dim();
    }
    if (!tt->has_shape()) continue;
    bool edited = false;
    for (int k = 0; k < tt->shape().dim_size(); ++k) {
      auto* d = tt->mutable_shape()->mutable_dim(k);
      if (is_static(*d)) continue;
      std::optional<int64_t> size;
      if (shape) {
        size = (*shape)[static_cast<size_t>(k)];
      } else if (is_symbol(*d)) {
        if (auto b = bound.find(d->dim_param()); b != bound.end()) size = b->second.size;
      }
      if (!size) continue;
      if (in.value->is_initializer())
        return absl::InvalidArgumentError(
            absl::StrCat("input ", quoted_name(in.value->name()),
                         " has an initializer, a default the caller may "
                         "override, and its dim ",
                         k, " is ", quoted_name(d->dim_param()),
                         ", which this request "
                         "fixes to ",
                         *size, ": an input with an initializer cannot be fixed"));
      d->set_dim_value(*size);  // clears dim_param (a oneof); a denotation stays
      edited = true;
    }
    if (!edited && !(shape && !in.info.type().tensor_type().has_shape())) continue;
    // Given input sets are checked against the fixed declarations by the pipeline itself.
    if (verify && verify->input_sets.empty())
      RETURN_IF_ERROR(check_verify(in.value->name(), in.info.type(), type, *verify));
    updates.emplace_back(i, std::move(type));
  }

  for (auto& [i, type] : updates) {
    if (changed)
      changed->push_back(absl::StrCat(quoted_name(inputs[i].value->name()), ": ",
                                      dims_text(inputs[i].info.type()), " -> ", dims_text(type)));
    g.set_input_type(i, type);
  }
  // Facts rest on the inputs' declarations: what was inferred from the old ones is forgotten.
  if (!updates.empty()) model.refresh_shape_inference();
  return absl::OkStatus();
}

}  // namespace graft
