#include "core/passes/patterns/rotary.h"

#include <algorithm>
#include <cstring>
#include <string>

#include <absl/strings/str_cat.h>

#include "core/eval/tensor.h"
#include "core/ir/tensor.h"
#include "core/passes/queries.h"
#include "core/passes/rules.h"

namespace graft {

namespace {

using onnx::TensorProto;

// Largest head size matched: slice_indices lists the indices a Slice takes.
constexpr int64_t kMaxHead = int64_t{1} << 16;

// absorbed_producer(v, op, root) with no attribute but `attrs`.
ir::Node* inner(ir::Value* v, std::string_view op, const ir::Node& root,
                std::initializer_list<std::string_view> attrs = {}) {
  ir::Node* p = absorbed_producer(v, op, root);
  return p && only_attributes(*p, attrs) ? p : nullptr;
}

// The other operand of the binary node `n` when one of its inputs is `v`, else nullptr.
ir::Value* other_operand(const ir::Node& n, const ir::Value* v) {
  if (n.inputs().size() != 2) return nullptr;
  if (n.input(0) == v) return n.input(1);
  if (n.input(1) == v) return n.input(0);
  return nullptr;
}

// `slice` takes exactly x's last-axis elements [from, from + len) of `d`, nothing on other axes.
bool slices_last_axis(const ir::Node& slice, int64_t rank, int64_t d, int64_t from, int64_t len) {
  std::optional<ir::SliceParams> p = ir::slice_params(slice);
  if (!p || p->axes.size() != 1) return false;
  std::optional<int64_t> axis = ir::normalize_axis(p->axes[0], rank);
  if (!axis || *axis != rank - 1 || p->steps[0] != 1) return false;
  std::vector<int64_t> taken = ir::slice_indices(d, p->starts[0], p->ends[0], 1);
  return static_cast<int64_t>(taken.size()) == len && taken.front() == from;
}

// rotate_half(x) computed by `concat`: Concat(Neg(x2), x1) over the last axis, x1 and x2 the
// halves of one value x by two Slices or one Split. Sets x and appends the nodes to `block`.
bool rotate_half(ir::Node& concat, const ir::Node& root, ir::Value** x,
                 std::vector<ir::Node*>& block) {
  if (concat.inputs().size() != 2 || !only_attributes(concat, {"axis"}))
    return no_match(concat, "rotate_half is not a Concat of two halves");
  ir::Node* neg = inner(concat.input(0), "Neg", root);
  if (!neg) return no_match(concat, "rotate_half's first operand is not a Neg only it reads");
  ir::Value* x1 = concat.input(1);
  ir::Value* x2 = neg->input(0);
  if (!single_use(x1) || !single_use(x2))
    return no_match(concat, "x's halves have readers outside rotate_half");
  ir::Node* first = producer(x1, "Slice");
  ir::Node* second = producer(x2, "Slice");
  if (!first && !second) first = second = producer(x1, "Split");
  if (!first || !second || !first->input(0) || first->input(0) != second->input(0) ||
      first->graph() != root.graph() || first->opset() != root.opset() ||
      second->graph() != root.graph() || second->opset() != root.opset() ||
      !only_attributes(*first, {"starts", "ends", "axes", "axis", "split", "num_outputs"}) ||
      !only_attributes(*second, {"starts", "ends", "axes", "axis", "split", "num_outputs"}))
    return no_match(concat,
                    "x's halves are not two Slices (or a Split) of one value in "
                    "rotate_half's graph");
  *x = first->input(0);
  const ir::TensorFact& xf = (*x)->fact();
  if (!xf.has_rank || xf.dims.size() != 4) return no_match(concat, "x's rank is not known to be 4");
  const int64_t rank = 4;
  std::optional<int64_t> d = known_dim(*x, -1);
  if (!d || *d < 2 || *d % 2 != 0 || *d > kMaxHead)
    return no_match(concat, "x's last dim is not known to be even (at most 2^16)");
  const int64_t half = *d / 2;
  if (ir::normalize_axis(concat.attr_int("axis", 0), rank) != rank - 1)
    return no_match(concat, "rotate_half does not concatenate along the last axis");
  if (first->is("Split")) {
    std::optional<ir::SplitParams> p = ir::split_params(*first);
    if (!p || first->outputs().size() != 2 || x1 != first->output(0) || x2 != first->output(1) ||
        ir::normalize_axis(p->axis, rank) != rank - 1 ||
        (p->sizes ? *p->sizes != std::vector<int64_t>{half, half} : p->parts != 2))
      return no_match(*first, "the Split does not cut x's last axis into two equal halves");
    block.insert(block.end(), {&concat, neg, first});
    return true;
  }
  if (!slices_last_axis(*first, rank, *d, 0, half) ||
      !slices_last_axis(*second, rank, *d, half, half))
    return no_match(concat, "the Slices do not take the two halves of x's last axis");
  block.insert(block.end(), {&concat, neg, first, second});
  return true;
}

// A table gathered by position ids and broadcast over the heads: Unsqueeze(Gather(table,
// position_ids), axes = [1]) with a constant 2-D table.
struct GatheredTable {
  ir::Value* table = nullptr;
  ir::Value* ids = nullptr;
  ir::Node* unsqueeze = nullptr;
  ir::Node* gather = nullptr;
  ir::Node* slice = nullptr;  // the table's leading rows, when it is sliced first
};

// `slice` takes a 2-D table's leading rows, [0, end) on axis 0 with step 1, whatever `end` is
// (transformers' cos_cached[:seq_len], seq_len the total length read at run time): a Gather
// by position ids reads the same rows from it as from the whole table.
bool leading_rows(const ir::Node& slice) {
  const size_t n = slice.inputs().size();
  if (n < 3 || n > 5 || !only_attributes(slice, {})) return false;
  auto is = [&](size_t i, int64_t value, std::initializer_list<int64_t> also = {}) {
    std::optional<eval::Tensor> t = constant_tensor(slice.input(i), 64);
    if (!t || t->rank() != 1 || t->size() != 1 || !is_integer_type(t->dtype())) return false;
    const int64_t v = t->get_int64(0);
    return v == value || std::find(also.begin(), also.end(), v) != also.end();
  };
  const bool no_axes = n < 4 || !slice.input(3);
  const bool no_steps = n < 5 || !slice.input(4);
  return is(1, 0) && (no_axes || is(3, 0, {-2})) && (no_steps || is(4, 1));
}
std::optional<GatheredTable> gathered_table(ir::Value* v, const ir::Node& root, const char* what) {
  GatheredTable t;
  t.unsqueeze = producer(v, "Unsqueeze");
  std::optional<std::vector<int64_t>> axes =
      t.unsqueeze ? ir::unsqueeze_axes(*t.unsqueeze) : std::nullopt;
  if (!axes || axes->size() != 1 || ir::normalize_axis((*axes)[0], 4) != 1)
    return no_match_with(root, [&] {
      return absl::StrCat(what, " is not an Unsqueeze over axis 1 (the heads' axis)");
    });
  t.gather = producer(t.unsqueeze->input(0), "Gather");
  if (!t.gather || t.gather->inputs().size() != 2 || t.gather->attr_int("axis", 0) != 0 ||
      !only_attributes(*t.gather, {"axis"}))
    return no_match_with(root, [&] {
      return absl::StrCat(what, " is not gathered by position (Gather on axis 0)");
    });
  t.table = t.gather->input(0);
  t.ids = t.gather->input(1);
  if (ir::Node* slice = producer(t.table, "Slice"); slice && leading_rows(*slice)) {
    t.slice = slice;
    t.table = slice->input(0);
  }
  const TensorProto* c = constant_header(t.table);
  if (!c || c->dims_size() != 2)
    return no_match_with(root,
                         [&] { return absl::StrCat(what, "'s table is not a 2-D constant"); });
  return t;
}

}  // namespace

std::optional<RotaryMatch> match_rotary(ir::Node& add) {
  if (add.inputs().size() != 2 || add.outputs().size() != 1 || !only_attributes(add, {}))
    return std::nullopt;
  // The product with rotate_half(x), then the other one.
  ir::Node* rotated = nullptr;
  ir::Node* concat = nullptr;
  ir::Node* direct = nullptr;
  for (int side = 0; side < 2 && !rotated; ++side) {
    ir::Node* mul = inner(add.input(side), "Mul", add);
    if (!mul || mul->inputs().size() != 2) continue;
    for (int k = 0; k < 2; ++k) {
      if (ir::Node* c = inner(mul->input(k), "Concat", add, {"axis"}); c && c->attr("axis")) {
        rotated = mul;
        concat = c;
        direct = inner(add.input(1 - side), "Mul", add);
        break;
      }
    }
  }
  if (!rotated) return std::nullopt;  // most Adds: not worth a reason
  // From here the Add looks like a rotary embedding: reasons are worth giving.
  if (!direct || direct->inputs().size() != 2)
    return no_match(add, "the other operand is not x * cos (a Mul only the Add reads)");
  RotaryMatch m;
  m.block = {&add, direct, rotated};
  if (!rotate_half(*concat, add, &m.x, m.block)) return std::nullopt;
  ir::Value* cos = other_operand(*direct, m.x);
  ir::Value* sin = other_operand(*rotated, concat->output(0));
  if (!cos || cos == m.x)
    return no_match(add, "the other product is not of x (rotate_half's input)");
  std::optional<GatheredTable> c = gathered_table(cos, add, "cos");
  if (!c) return std::nullopt;
  std::optional<GatheredTable> s = gathered_table(sin, add, "sin");
  if (!s) return std::nullopt;
  if (c->ids != s->ids) return no_match(add, "cos and sin are gathered by different position ids");
  m.position_ids = c->ids;
  m.cos_table = c->table;
  m.sin_table = s->table;
  m.shared = {c->unsqueeze, c->gather};
  if (s->unsqueeze != c->unsqueeze) m.shared.insert(m.shared.end(), {s->unsqueeze, s->gather});
  for (ir::Node* slice : {c->slice, s->slice})
    if (slice && std::find(m.shared.begin(), m.shared.end(), slice) == m.shared.end())
      m.shared.push_back(slice);
  // Types and shapes: x (B, N, S, D) of float or float16, the tables (P, D) of its type, the
  // position ids int64 (B, S).
  m.elem_type = m.x->elem_type();
  if (m.elem_type != TensorProto::FLOAT && m.elem_type != TensorProto::FLOAT16)
    return no_match(add, "x is not known to be float or float16");
  m.head = *known_dim(m.x, -1);
  for (const ir::Value* table : {m.cos_table, m.sin_table}) {
    const TensorProto* h = constant_header(table);
    if (h->data_type() != m.elem_type || h->dims(1) != m.head || h->dims(0) < 1)
      return no_match(add, "a table is not (positions, D) of x's element type");
  }
  const ir::TensorFact& ids = m.position_ids->fact();
  const ir::TensorFact& xf = m.x->fact();
  if (ids.elem_type != TensorProto::INT64)
    return no_match(add, "the position ids are not known to be int64");
  if (!ids.has_rank || ids.dims.size() != 2)
    return no_match(add, "the position ids are not known to be 2-D");
  m.ids_fit = ids.dims[0].same_as(xf.dims[0]) && ids.dims[1].same_as(xf.dims[2]);
  return m;
}

namespace {

// The first half (P, D/2) of `table` (P, D) when its halves are equal bit for bit.
std::optional<eval::Tensor> first_half(const ir::Value* table, int64_t head) {
  std::optional<eval::Tensor> t = constant_tensor(table, kMaxExternalWeightBytes);
  if (!t || t->rank() != 2 || t->dims()[1] != head) return std::nullopt;
  const int64_t rows = t->dims()[0], half = head / 2;
  const size_t size = t->element_size();
  absl::StatusOr<eval::Tensor> out =
      eval::Tensor::zeros(t->dtype(), {rows, half}, kMaxExternalWeightBytes);
  if (!out.ok()) return std::nullopt;
  const char* in = t->data<char>();
  char* to = out->data<char>();
  const size_t bytes = static_cast<size_t>(half) * size;
  for (int64_t r = 0; r < rows; ++r) {
    const char* row = in + static_cast<size_t>(r * head) * size;
    if (std::memcmp(row, row + bytes, bytes) != 0) return std::nullopt;
    std::memcpy(to + static_cast<size_t>(r) * bytes, row, bytes);
  }
  return std::move(*out);
}

// A constant holding `half`, named after `table`: the one an earlier rewrite made from the same
// table (in scope, equal), else a new one.
ir::Value* cache_constant(Rewriter& rw, ir::Graph& g, const ir::Value* table,
                          const eval::Tensor& half) {
  const std::string name = table->name() + "_half";
  if (ir::Value* earlier = g.lookup(name); earlier && constant_header(earlier)) {
    std::optional<eval::Tensor> held = constant_tensor(earlier, kMaxExternalWeightBytes);
    if (held && *held == half) return earlier;
  }
  return rw.add_constant(g, half.to_proto(), name);
}

}  // namespace

std::optional<RotaryCaches> rotary_caches(Rewriter& rw, ir::Node& add, const RotaryMatch& m) {
  std::optional<eval::Tensor> cos = first_half(m.cos_table, m.head);
  std::optional<eval::Tensor> sin =
      m.sin_table == m.cos_table ? cos : first_half(m.sin_table, m.head);
  if (!cos || !sin)
    return no_match(add,
                    "a table's two halves differ (or it cannot be read): the rotation does "
                    "not repeat its angles");
  ir::Graph& g = *add.graph();
  RotaryCaches caches;
  caches.cos = cache_constant(rw, g, m.cos_table, *cos);
  caches.sin = m.sin_table == m.cos_table ? caches.cos : cache_constant(rw, g, m.sin_table, *sin);
  return caches;
}

ir::Value* rotary_position_ids(Rewriter& rw, ir::Node& add, const RotaryMatch& m) {
  if (m.ids_fit) return m.position_ids;
  // Expand(ids, Gather(Shape(x), [0, 2])): Gather picks the dims at any opset.
  ir::Graph& g = *add.graph();
  ir::Node* shape = rw.add_node(g, "Shape", {m.x}, 1, &add);
  ir::Value* axes = rw.add_constant(g, ir::make_int64_tensor({2}, {0, 2}), "rotary_batch_sequence");
  ir::Node* dims = rw.add_node(g, "Gather", {shape->output(0), axes}, 1, &add);
  rw.set_attr(dims, int_attr("axis", 0));
  return rw.add_node(g, "Expand", {m.position_ids, dims->output(0)}, 1, &add)->output(0);
}

bool replace_rotary(Rewriter& rw, const RotaryMatch& m, ir::Value* y) {
  if (!rw.replace_node(m.block.front(), {y})) return false;
  for (size_t i = 1; i < m.block.size(); ++i) rw.erase(m.block[i]);
  // Kept while another rotary reads them (a Gather may appear twice: cos and sin of one table).
  // With them goes what only they read: a Slice's end computed at run time.
  for (ir::Node* n : m.shared)
    if (!n->dead()) rw.erase_unread_producers(n->output(0));
  return true;
}

}  // namespace graft
