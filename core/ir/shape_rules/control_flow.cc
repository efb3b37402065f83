// Shape rules of the control-flow ops: If, Loop, Scan (from their bodies' outputs).
#include "core/ir/shape_rules.h"

namespace graft::ir::shape_rules {

namespace {

// Both branches' outputs describe it; where they differ, less is known.
TensorFact if_op(const Node& n, size_t output, bool* partial) {
  TensorFact out;
  bool first = true;
  for (const auto& sub : n.subgraphs()) {
    const auto& outs = sub.graph->outputs();
    if (output >= outs.size()) return unknown(partial);
    const TensorFact& f = computed_fact(outs[output].value);
    if (first) {
      out = f;
      first = false;
      continue;
    }
    TensorFact meet;
    meet.elem_type = out.elem_type == f.elem_type ? f.elem_type : 0;
    if (out.has_rank && f.has_rank && out.dims.size() == f.dims.size()) {
      meet.has_rank = true;
      for (size_t i = 0; i < f.dims.size(); ++i)
        meet.dims.push_back(out.dims[i] == f.dims[i] ? f.dims[i] : Dim{});
    }
    out = meet;
  }
  return out;
}

// Only element types: carried values may change shape between iterations.
TensorFact loop_or_scan(const Node& n, size_t output, bool* partial) {
  *partial = true;
  for (const auto& sub : n.subgraphs()) {
    const auto& outs = sub.graph->outputs();
    const size_t skip = n.op_type() == "Loop" ? 1 : 0;  // Loop's body also outputs its condition
    if (output + skip < outs.size())
      return with_type(TensorFact{}, computed_fact(outs[output + skip].value).elem_type);
  }
  return unknown(partial);
}

}  // namespace

void add_control_flow_rules(Table& t) {
  t.add({"If"}, if_op);
  t.add({"Loop", "Scan"}, loop_or_scan);
}

}  // namespace graft::ir::shape_rules
