#include "core/ir/operands.h"

#include <algorithm>
#include <climits>

#include <absl/strings/str_cat.h>
#include <onnx/defs/schema.h>

#include "core/base/status.h"

namespace graft::ir {

namespace {

// The newest opset of `domain` this libonnx knows (0 if it knows none).
int newest_known_opset(const std::string& domain) {
  const auto& ranges = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  auto it = ranges.find(domain);
  return it == ranges.end() ? 0 : it->second.second;
}

std::string describe(const Node& n) {
  return absl::StrCat("node '", n.name(), "' (", n.op_type(), ")");
}

}  // namespace

absl::Status check_operands(const Node& n, bool clamp_to_known_opset) {
  // The schema registry names the default domain "" (and "ai.onnx.ml" etc. by their names).
  const std::string domain = is_onnx_domain(n.domain()) ? "" : n.domain();
  const int64_t opset = n.opset();
  if (opset <= 0) return absl::OkStatus();
  const int newest = newest_known_opset(domain);
  if (newest == 0 || (opset > newest && !clamp_to_known_opset)) return absl::OkStatus();
  const int version = static_cast<int>(std::min<int64_t>(opset, newest));
  const onnx::OpSchema* schema = onnx::OpSchemaRegistry::Schema(n.op_type(), version, domain);
  if (schema == nullptr) return absl::OkStatus();

  const auto& formals = schema->inputs();
  const size_t count = n.inputs().size();
  // A newer opset may add inputs; only what the older schema requires is checked then.
  const bool clamped = opset > newest;
  if (!clamped && count > static_cast<size_t>(schema->max_input()))
    return absl::InvalidArgumentError(absl::StrCat(describe(n), " has ", count, " inputs; opset ",
                                                   opset, " allows at most ", schema->max_input()));
  for (size_t f = 0; f < formals.size(); ++f) {
    const auto& formal = formals[f];
    const auto option = formal.GetOption();
    if (option == onnx::OpSchema::Optional) continue;
    if (option == onnx::OpSchema::Single) {
      if (f >= count || n.input(f) == nullptr)
        return absl::InvalidArgumentError(absl::StrCat(describe(n), ": required input ", f, " ('",
                                                       formal.GetName(), "') is missing"));
      continue;
    }
    // Variadic: the last formal, taking every remaining slot; none of them may be empty.
    const size_t present = count > f ? count - f : 0;
    if (present < static_cast<size_t>(std::max(formal.GetMinArity(), 0)))
      return absl::InvalidArgumentError(absl::StrCat(describe(n), ": needs at least ",
                                                     formal.GetMinArity(), " '", formal.GetName(),
                                                     "' inputs, has ", present));
    for (size_t i = f; i < count; ++i)
      if (n.input(i) == nullptr)
        return absl::InvalidArgumentError(absl::StrCat(describe(n), ": input ", i, " ('",
                                                       formal.GetName(), "', variadic) is empty"));
  }
  // Required attributes: ONNX's shape inference and the kernels read them without checking.
  if (clamped) return absl::OkStatus();  // a newer opset may have changed them
  for (const auto& [name, formal] : schema->attributes()) {
    if (!formal.required) continue;
    const onnx::AttributeProto* a = n.attr(name);
    if (a == nullptr)
      return absl::InvalidArgumentError(
          absl::StrCat(describe(n), ": required attribute '", name, "' is missing"));
    // A reference to a function's attribute is resolved at the call; old models may leave the
    // type unset.
    if (!a->ref_attr_name().empty() || a->type() == onnx::AttributeProto::UNDEFINED) continue;
    if (a->type() != formal.type)
      return absl::InvalidArgumentError(
          absl::StrCat(describe(n), ": attribute '", name, "' must be ",
                       onnx::AttributeProto::AttributeType_Name(formal.type), ", not ",
                       onnx::AttributeProto::AttributeType_Name(a->type())));
  }
  return absl::OkStatus();
}

absl::Status check_model_operands(const Model& model) {
  for (const Graph* g : model.all_graphs())
    for (const Node* n : g->nodes()) RETURN_IF_ERROR(check_operands(*n));
  return absl::OkStatus();
}

}  // namespace graft::ir
