// Checks on a model convert_fp16 produced, shared by its unit tests and the tests over real
// models: float32 appears only where the pass keeps it.
#pragma once

#include <set>
#include <string>

#include <absl/strings/str_cat.h>

#include "core/ir/model.h"
#include "core/passes/options.h"
#include "core/passes/passes.h"

namespace graft::testing {

// The nodes a convert_fp16 run kept float32 because of their constants (its "kept_float32"
// findings), by name (else first output's name).
inline std::set<std::string> kept_float32_nodes(const PassResult& result) {
  std::set<std::string> out;
  for (const auto& e : result.explanations)
    if (e.rule == "kept_float32") out.insert(e.node);
  return out;
}

// The problems, one per line ("" if none):
//  - a Cast(to=FLOAT) of a float16 value read by a node the pass converts (anything but a
//    kept node: an op of `block_ops`, a node named in `block_nodes`, an op outside the ONNX
//    domain, an op with a dtype attribute), i.e. a float32 Cast inside the float16 region. A
//    graph output reading it is fine (an interface kept float32);
//  - a Cast of a float32 or float16 value that changes nothing (its input already has the type
//    it casts to; such Casts of other types are the model's own, not the pass's business);
//  - a Cast pair that changes nothing: Cast(Cast(x, to=U), to=T) with x of type T (float16 or
//    float32) and U at least as wide (float16 -> float32 -> float16), read by nothing but the
//    second Cast.
// `options` are the pass's options (block_ops and block_nodes as the run had them); `kept_nodes`
// the nodes the run kept float32 because of their constants (kept_float32_nodes). Values of
// unknown element type are not judged.
inline std::string fp16_region_errors(const ir::Model& model, const PassOptions& options = {},
                                      const std::set<std::string>& kept_nodes = {}) {
  constexpr int32_t kF32 = onnx::TensorProto::FLOAT;
  constexpr int32_t kF16 = onnx::TensorProto::FLOAT16;
  constexpr int32_t kF64 = onnx::TensorProto::DOUBLE;
  const PassInfo info = convert_fp16_pass();
  auto parsed = parse_options(info.name, info.options, options);
  if (!parsed.ok()) return std::string(parsed.status().message());
  const auto& ops = parsed->list("block_ops");
  const auto& names = parsed->list("block_nodes");
  const std::set<std::string> block_ops(ops.begin(), ops.end());
  const std::set<std::string> block_nodes(names.begin(), names.end());
  auto kept = [&](const ir::Node& n) {
    if (!n.is_onnx_domain()) return true;
    if (block_ops.count(n.op_type()) || (!n.name().empty() && block_nodes.count(n.name())))
      return true;
    if (kept_nodes.count(n.name()) || (n.output(0) && kept_nodes.count(n.output(0)->name())))
      return true;
    // Schema wants float32 operands: kept whatever block_ops says.
    static const std::set<std::string> float_only = {"Resize",
                                                     "Upsample",
                                                     "Range",
                                                     "NonMaxSuppression",
                                                     "QuantizeLinear",
                                                     "DequantizeLinear",
                                                     "DynamicQuantizeLinear"};
    if (float_only.count(n.op_type()) || (n.op_type() == "CumSum" && n.opset() < 14)) return true;
    return n.attr("dtype") != nullptr || n.attr("output_datatype") != nullptr;
  };
  auto where = [](const ir::Node& n) {
    return absl::StrCat("Cast producing '", n.output(0)->name(), "'");
  };
  auto wider_or_same = [&](int32_t from, int32_t via) {
    return from == via || (from == kF16 && (via == kF32 || via == kF64)) ||
           (from == kF32 && via == kF64);
  };
  std::string errors;
  for (const ir::Graph* g : model.all_graphs()) {
    for (const ir::Node* n : g->nodes()) {
      if (!n->is("Cast") || !n->input(0) || !n->output(0)) continue;
      const int32_t from = n->input(0)->elem_type();
      const int32_t to = static_cast<int32_t>(n->attr_int("to", 0));
      if (from == 0) continue;
      if (from == to && (from == kF32 || from == kF16))
        absl::StrAppend(&errors, where(*n), ": changes nothing\n");
      if (from == kF16 && to == kF32) {
        for (const auto& u : n->output(0)->uses())
          if (!kept(*u.node))
            absl::StrAppend(&errors, where(*n), ": float32 read by converted ", u.node->op_type(),
                            " '", u.node->output(0) ? u.node->output(0)->name() : "", "'\n");
      }
      const ir::Node* p = n->input(0)->producer();
      if ((to == kF16 || to == kF32) && p && p->is("Cast") && p->input(0) &&
          p->input(0)->elem_type() == to && wider_or_same(to, from) &&
          n->input(0)->uses().size() == 1 && n->input(0)->output_refs().empty())
        absl::StrAppend(&errors, where(*n), ": with the Cast before it, changes nothing\n");
    }
  }
  return errors;
}

}  // namespace graft::testing
