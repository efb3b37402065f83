// Shape-chain fusion for Reshape (part of fold_shapes). Exporters compute a Reshape's target from
// the shape of its own input: PyTorch writes x.view(x.size(0), x.size(1), heads, -1) as
//   Shape(x) -> Gather(0) -> Unsqueeze ┐
//   Shape(x) -> Gather(1) -> Unsqueeze ├-> Concat -> Reshape(x, .)
//   constants ──────────────────────── ┘
// Reshape has two special entries that make the whole chain a constant: 0 copies the input's dim
// at the same position (unless allowzero=1), and one -1 is inferred from the element count. So
// each entry of the target is traced back through Concat, Unsqueeze, Squeeze, Gather, Slice and
// integer Casts to a constant, a dim of some Shape, or an unknown single value:
//  - a constant stays as it is;
//  - dim i of a Shape whose value is certainly input dim j (j the entry's position: the Shape of
//    the Reshape's input itself with i == j, or of a value whose dim i is the same known size or
//    symbol as the input's dim j) becomes 0;
//  - an entry whose result dim the facts know (or a dim whose size is known) becomes that size;
//  - anything else (an unknown dim elsewhere, a product of dims...) becomes -1, if it is the only
//    one (and the target has no -1 of its own).
// The unused chain is then prune's.
//
// Exactness: 0 and a known size are exact. -1 is exact whenever the original Reshape was valid
// and its input is not empty: the inferred dim is the element count divided by the others', which
// is the value the chain computed. With an empty input (a zero dim) -1 cannot be inferred and
// the rewritten Reshape fails where the original succeeded; ONNX Runtime's ReshapeFusion accepts
// the same. A target with a -1 is therefore only written when the rule needs it.
#include <algorithm>
#include <optional>
#include <vector>

#include "core/ir/tensor.h"
#include "core/passes/passes.h"
#include "core/passes/rules.h"

namespace graft {

namespace {

// One entry of a traced shape tensor.
struct Entry {
  enum Kind { kConstant, kDim, kUnknown } kind = kUnknown;
  int64_t value = 0;              // kConstant: the value; kDim: the dim's index in `of`
  const ir::Value* of = nullptr;  // kDim: the value whose Shape this entry reads
};
using Entries = std::vector<Entry>;

// Chains longer than this are not traced (exporters write a handful of nodes).
constexpr int kMaxDepth = 16;
// Shape tensors longer than this are not traced (a Reshape target is a rank).
constexpr size_t kMaxEntries = 64;

// The integer type a traced value may have: exporters compute shapes in int64, some in int32.
bool is_shape_int(int32_t t) {
  return t == onnx::TensorProto::INT64 || t == onnx::TensorProto::INT32;
}

std::optional<Entries> trace(const ir::Value* v, int depth);

// Entries of a value of at most one dim: traced, or one unknown entry when it holds a single
// element computed some other way (e.g. Mul of two dims).
std::optional<Entries> trace_piece(const ir::Value* v, int depth) {
  if (auto traced = trace(v, depth)) return traced;
  const ir::TensorFact& f = v->fact();
  if (!is_shape_int(f.elem_type) || !f.has_rank || f.dims.size() > 1) return std::nullopt;
  if (f.dims.size() == 1 && f.dim(0) != 1) return std::nullopt;
  return Entries{Entry{}};
}

// Entries `indices` selects from `entries` (negative indices count from the end).
std::optional<Entries> pick(const Entries& entries, const std::vector<int64_t>& indices) {
  const int64_t len = static_cast<int64_t>(entries.size());
  Entries out;
  for (int64_t i : indices) {
    if (i < 0) i += len;
    if (i < 0 || i >= len) return std::nullopt;
    out.push_back(entries[static_cast<size_t>(i)]);
  }
  return out;
}

std::optional<Entries> trace_shape(const ir::Node& shape) {
  const ir::Value* x = shape.input(0);
  const auto rank = x ? x->rank() : std::nullopt;
  if (!rank || static_cast<size_t>(*rank) > kMaxEntries) return std::nullopt;
  auto range = ir::shape_range(shape, *rank);
  if (!range) return std::nullopt;
  Entries out;
  for (int64_t i = range->first; i < range->second; ++i) out.push_back(Entry{Entry::kDim, i, x});
  return out;
}

std::optional<Entries> trace_slice(const ir::Node& n, int depth) {
  auto p = ir::slice_params(n);
  if (!p || p->starts.size() != 1 || (p->axes[0] != 0 && p->axes[0] != -1)) return std::nullopt;
  auto in = trace(n.input(0), depth);
  if (!in || p->steps[0] == 0) return std::nullopt;
  return pick(*in, ir::slice_indices(static_cast<int64_t>(in->size()), p->starts[0], p->ends[0],
                                     p->steps[0]));
}

// The entries of an integer tensor of rank 0 or 1 that `v` holds, or nullopt if it is not
// computed from constants and Shapes by the ops below.
std::optional<Entries> trace(const ir::Value* v, int depth) {
  if (!v || v->dead() || depth > kMaxDepth) return std::nullopt;
  if (is_constant_value(v)) {
    const auto* t = constant_header(v);
    if (!t || t->dims_size() > 1 || !is_shape_int(t->data_type())) return std::nullopt;
    auto values = constant_ints(v);
    if (!values || values->size() > kMaxEntries) return std::nullopt;
    Entries out;
    for (int64_t c : *values) out.push_back(Entry{Entry::kConstant, c, nullptr});
    return out;
  }
  const ir::Node* p = v->producer();
  if (!p || p->dead() || !p->is_onnx_domain() || p->outputs().size() != 1) return std::nullopt;
  const std::string& op = p->op_type();
  ++depth;
  if (op == "Shape") return trace_shape(*p);
  if (op == "Cast") {
    // An int32 shape widened to int64 (or narrowed back): dims fit both.
    auto to = ir::cast_to(*p);
    if (!to || !is_shape_int(*to)) return std::nullopt;
    return trace(p->input(0), depth);
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    // Only between rank 0 and rank 1 of one element: the entries are the same.
    if (!p->input(0)) return std::nullopt;
    const ir::TensorFact& in = p->input(0)->fact();
    const ir::TensorFact& out = v->fact();
    if (!in.has_rank || !out.has_rank || in.dims.size() > 1 || out.dims.size() > 1)
      return std::nullopt;
    auto traced = trace(p->input(0), depth);
    if (!traced || traced->size() != 1) return std::nullopt;
    return traced;
  }
  if (op == "Gather") {
    if (!only_attributes(*p, {"axis"}) || p->inputs().size() != 2) return std::nullopt;
    const int64_t axis = p->attr_int("axis", 0);
    if (axis != 0 && axis != -1) return std::nullopt;
    const auto* idx = constant_header(p->input(1));
    auto indices = constant_ints(p->input(1));
    if (!idx || idx->dims_size() > 1 || !indices) return std::nullopt;
    auto in = trace(p->input(0), depth);
    return in ? pick(*in, *indices) : std::nullopt;
  }
  if (op == "Slice") {
    if (p->opset() >= 10 ? !p->attributes().empty() || p->inputs().size() < 3
                         : !only_attributes(*p, {"starts", "ends", "axes"}))
      return std::nullopt;
    return trace_slice(*p, depth);
  }
  if (op == "Concat") {
    if (!only_attributes(*p, {"axis"}) || !p->attr("axis")) return std::nullopt;
    const int64_t axis = p->attr_int("axis", 0);
    if (axis != 0 && axis != -1) return std::nullopt;
    Entries out;
    for (const ir::Value* in : p->inputs()) {
      if (!in) return std::nullopt;
      auto piece = trace_piece(in, depth);
      if (!piece || out.size() + piece->size() > kMaxEntries) return std::nullopt;
      out.insert(out.end(), piece->begin(), piece->end());
    }
    return out;
  }
  return std::nullopt;
}

// Reshape(x, shape) with `shape` traced: the constant target that computes the same.
bool reshape_of_shape_chain(ir::Node& n, Rewriter& rw) {
  if (n.opset() < 5 || n.inputs().size() != 2 || n.outputs().size() != 1 || !n.output(0))
    return false;
  if (!only_attributes(n, {"allowzero"}) || (n.attr("allowzero") && n.opset() < 14)) return false;
  const bool allowzero = n.attr_int("allowzero", 0) != 0;
  ir::Value* x = n.input(0);
  ir::Value* target = n.input(1);
  if (!x || !target || is_constant_value(target)) return false;
  const ir::TensorFact& target_fact = target->fact();
  if (target_fact.elem_type != onnx::TensorProto::INT64) return false;
  auto entries = trace(target, 0);
  if (!entries || entries->empty()) return false;
  const ir::TensorFact& xf = x->fact();
  const ir::TensorFact& yf = n.output(0)->fact();
  if (yf.has_rank && yf.dims.size() != entries->size()) return false;  // facts disagree

  std::vector<int64_t> shape;
  int inferred = 0;  // entries written as -1
  for (size_t j = 0; j < entries->size(); ++j) {
    const Entry& e = (*entries)[j];
    if (e.kind == Entry::kConstant) {
      // A constant 0 copies under allowzero=0 and is a zero otherwise: either way unchanged.
      if (e.value == -1) ++inferred;
      shape.push_back(e.value);
      continue;
    }
    // A known result dim is what the entry computes (a -1 of the model's own is left as it is).
    if (auto known = yf.dim(static_cast<int64_t>(j)); known && *known > 0) {
      shape.push_back(*known);
      continue;
    }
    if (e.kind == Entry::kDim) {
      const ir::TensorFact& of = e.of->fact();
      const ir::Dim& d = of.dims[static_cast<size_t>(e.value)];
      const bool same_position = (e.of == x && e.value == static_cast<int64_t>(j)) ||
                                 (xf.has_rank && j < xf.dims.size() && d.same_as(xf.dims[j]));
      if (same_position && !allowzero) {
        shape.push_back(0);
        continue;
      }
      if (d.known()) {
        shape.push_back(d.value);
        continue;
      }
    }
    ++inferred;
    shape.push_back(-1);
  }
  // 0 would be a zero dim under allowzero=1; there only known sizes and one -1 are written.
  if (inferred > 1) return false;
  onnx::TensorProto t = ir::make_int64_tensor({static_cast<int64_t>(shape.size())}, shape);
  ir::Value* c = rw.add_constant(*n.graph(), std::move(t), n.output(0)->name() + "_shape");
  rw.set_input(&n, 1, c);
  rw.erase_unread_producers(target);
  return true;
}

}  // namespace

std::vector<Rule> reshape_chain_rules() {
  return {{"reshape_of_shape_chain", {"Reshape"}, reshape_of_shape_chain}};
}

}  // namespace graft
