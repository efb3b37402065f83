// Shape rules of the reductions: Reduce* and ArgMax/ArgMin.
#include "core/ir/op_params.h"
#include "core/ir/shape_rules.h"

namespace graft::ir::shape_rules {

namespace {

using onnx::TensorProto;

// `x` (of known rank) with `axes` reduced (every axis when nullopt): kept as 1s or dropped.
TensorFact reduced(const TensorFact& x, const std::optional<std::vector<int64_t>>& axes,
                   bool keepdims, int32_t elem_type, bool* partial) {
  std::vector<bool> reduced(x.dims.size(), !axes.has_value());
  if (axes) {
    auto norm = normalize_axes(*axes, static_cast<int64_t>(x.dims.size()));
    if (!norm) return with_type(unknown(partial), elem_type);
    for (int64_t a : *norm) reduced[static_cast<size_t>(a)] = true;
  }
  TensorFact out{elem_type, true, {}};
  for (size_t i = 0; i < x.dims.size(); ++i) {
    if (!reduced[i])
      out.dims.push_back(x.dims[i]);
    else if (keepdims)
      out.dims.push_back(Dim::of(1));
  }
  return out;
}

TensorFact reduce(const Node& n, size_t, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  if (!x.has_rank) return TensorFact{x.elem_type, false, {}};
  auto p = reduce_params(n);
  if (!p) {
    may_know_more(n, partial);
    return TensorFact{x.elem_type, false, {}};
  }
  if (!p->axes && p->noop_with_empty_axes) return x;
  return reduced(x, p->axes, p->keepdims, x.elem_type, partial);
}

TensorFact arg_reduce(const Node& n, size_t, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  if (!x.has_rank) return TensorFact{TensorProto::INT64, false, {}};
  return reduced(x, std::vector<int64_t>{n.attr_int("axis", 0)}, n.attr_int("keepdims", 1) != 0,
                 TensorProto::INT64, partial);
}

}  // namespace

void add_reduce_rules(Table& t) {
  t.add({"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
         "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"},
        reduce);
  t.add({"ArgMax", "ArgMin"}, arg_reduce);
}

}  // namespace graft::ir::shape_rules
