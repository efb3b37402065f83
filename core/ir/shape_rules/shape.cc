// Shape rules of the ops that make or move shapes and data: Constant, Shape, Size, Reshape,
// Flatten, Transpose, Squeeze/Unsqueeze, Concat, Gather, Slice, Expand, ConstantOfShape, Range,
// NonZero, Tile, Pad, Split.
#include <algorithm>

#include "core/ir/op_params.h"
#include "core/ir/shape_rules.h"

namespace graft::ir::shape_rules {

namespace {

using onnx::TensorProto;

TensorFact constant(const Node& n, size_t, bool* partial) {
  const onnx::AttributeProto* a = n.attributes().empty() ? nullptr : &n.attributes()[0];
  if (!a || n.attributes().size() != 1) return unknown(partial);
  if (a->name() == "value" && a->has_t()) {
    std::vector<Dim> dims;
    for (int64_t d : a->t().dims()) dims.push_back(Dim::of(d));
    return TensorFact::of_rank(a->t().data_type(), std::move(dims));
  }
  if (a->name() == "value_float") return TensorFact::of_rank(TensorProto::FLOAT, {});
  if (a->name() == "value_int") return TensorFact::of_rank(TensorProto::INT64, {});
  if (a->name() == "value_floats")
    return TensorFact::of_rank(TensorProto::FLOAT, {Dim::of(a->floats_size())});
  if (a->name() == "value_ints")
    return TensorFact::of_rank(TensorProto::INT64, {Dim::of(a->ints_size())});
  return unknown(partial);
}

TensorFact shape_op(const Node& n, size_t, bool*) {
  const TensorFact& x = input_fact(n, 0);
  if (!x.has_rank) return TensorFact::of_rank(TensorProto::INT64, {Dim{}});
  int64_t rank = static_cast<int64_t>(x.dims.size());
  int64_t start = n.attr_int("start", 0), end = n.attr_int("end", rank);
  if (start < 0) start = std::max<int64_t>(0, start + rank);
  if (end < 0) end = std::max<int64_t>(0, end + rank);
  start = std::min(start, rank);
  end = std::min(end, rank);
  return TensorFact::of_rank(TensorProto::INT64, {Dim::of(std::max<int64_t>(0, end - start))});
}

TensorFact size_op(const Node&, size_t, bool*) {
  return TensorFact::of_rank(TensorProto::INT64, {});
}

// The -1 entry of a Reshape from `in` to `out` whose unknown sizes cancel: every output dim that
// is not known is a copy of an input axis (a 0 entry) or the same symbol as an input dim, and the
// input dims left over are known. [batch, 3, 4, 5] to [0, -1] gives 60.
Dim cancelled_dim(const std::vector<Dim>& in, const std::vector<Dim>& out,
                  const std::vector<int>& copied_from, int minus_one) {
  std::vector<bool> used(in.size(), false);
  int64_t out_known = 1, in_known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (static_cast<int>(i) == minus_one) continue;
    if (copied_from[i] >= 0 && !used[static_cast<size_t>(copied_from[i])]) {
      used[static_cast<size_t>(copied_from[i])] = true;
      continue;
    }
    if (out[i].known()) {
      Dim m = checked_mul(out_known, out[i].value);
      if (!m.known()) return Dim{};
      out_known = m.value;
      continue;
    }
    bool found = false;
    for (size_t j = 0; j < in.size() && !found; ++j)
      if (!used[j] && !in[j].known() && in[j].same_as(out[i])) used[j] = found = true;
    if (!found) return Dim{};
  }
  for (size_t j = 0; j < in.size(); ++j) {
    if (used[j]) continue;
    if (!in[j].known()) return Dim{};
    Dim m = checked_mul(in_known, in[j].value);
    if (!m.known()) return Dim{};
    in_known = m.value;
  }
  if (out_known <= 0 || in_known % out_known != 0) return Dim{};
  return Dim::of(in_known / out_known);
}

TensorFact reshape(const Node& n, size_t, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  auto shape = constant_ints(n.input(1));
  if (n.opset() < 5) shape = n.attr_ints("shape");
  if (!shape) {
    // The output's rank is the shape tensor's length.
    const TensorFact& s = input_fact(n, 1);
    if (n.opset() >= 5 && s.has_rank && s.dims.size() == 1 && s.dims[0].known())
      return rank_only(x.elem_type, s.dims[0].value);
    return TensorFact{x.elem_type, false, {}};
  }
  const bool allowzero = n.attr_int("allowzero", 0) != 0;
  std::vector<Dim> dims;
  std::vector<int> copied_from(shape->size(), -1);  // the input axis a 0 entry copies
  int minus_one = -1;
  for (size_t i = 0; i < shape->size(); ++i) {
    int64_t s = (*shape)[i];
    if (s == 0 && !allowzero) {
      if (!x.has_rank || i >= x.dims.size()) return rank_only(x.elem_type, shape->size());
      dims.push_back(x.dims[i]);
      copied_from[i] = static_cast<int>(i);
    } else if (s == -1) {
      if (minus_one >= 0) return with_type(unknown(partial), x.elem_type);
      minus_one = static_cast<int>(i);
      dims.push_back(Dim{});
    } else if (s < 0) {
      return with_type(unknown(partial), x.elem_type);
    } else {
      dims.push_back(Dim::of(s));
    }
  }
  if (minus_one >= 0) {
    auto total = x.element_count();
    std::optional<int64_t> rest = product(dims, 0, static_cast<size_t>(minus_one));
    std::optional<int64_t> tail = product(dims, static_cast<size_t>(minus_one) + 1, dims.size());
    const Dim known = rest && tail ? checked_mul(*rest, *tail) : Dim{};
    if (total && known.known() && known.value > 0 && *total % known.value == 0)
      dims[static_cast<size_t>(minus_one)] = Dim::of(*total / known.value);
    else if (x.has_rank)
      dims[static_cast<size_t>(minus_one)] = cancelled_dim(x.dims, dims, copied_from, minus_one);
  }
  return TensorFact::of_rank(x.elem_type, std::move(dims));
}

TensorFact flatten(const Node& n, size_t, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  if (!x.has_rank) return TensorFact::of_rank(x.elem_type, {Dim{}, Dim{}});
  auto axis = n.attr_int("axis", 1);
  auto a = axis == static_cast<int64_t>(x.dims.size())
               ? std::optional<int64_t>(axis)
               : normalize_axis(axis, static_cast<int64_t>(x.dims.size()));
  if (!a) return unknown(partial);
  auto outer = product(x.dims, 0, static_cast<size_t>(*a));
  auto inner = product(x.dims, static_cast<size_t>(*a), x.dims.size());
  return TensorFact::of_rank(x.elem_type,
                             {outer ? Dim::of(*outer) : Dim{}, inner ? Dim::of(*inner) : Dim{}});
}

TensorFact transpose(const Node& n, size_t, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  if (!x.has_rank) return with_type(TensorFact{}, x.elem_type);
  const size_t rank = x.dims.size();
  std::vector<int64_t> perm;
  if (auto p = n.attr_ints("perm")) {
    perm = *p;
  } else {
    for (size_t i = 0; i < rank; ++i) perm.push_back(static_cast<int64_t>(rank - 1 - i));
  }
  if (perm.size() != rank) return unknown(partial);
  std::vector<Dim> dims;
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(rank)) return unknown(partial);
    dims.push_back(x.dims[static_cast<size_t>(p)]);
  }
  return TensorFact::of_rank(x.elem_type, std::move(dims));
}

TensorFact squeeze(const Node& n, size_t, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  auto p = squeeze_axes(n);
  if (!p) may_know_more(n, partial);
  if (!x.has_rank || !p) return with_type(TensorFact{}, x.elem_type);
  std::vector<Dim> dims;
  if (p->all) {
    for (const Dim& d : x.dims) {
      if (!d.known()) return with_type(unknown(partial), x.elem_type);
      if (d.value != 1) dims.push_back(d);
    }
  } else {
    auto axes = normalize_axes(p->axes, static_cast<int64_t>(x.dims.size()));
    if (!axes) return unknown(partial);
    for (size_t i = 0; i < x.dims.size(); ++i)
      if (std::find(axes->begin(), axes->end(), static_cast<int64_t>(i)) == axes->end())
        dims.push_back(x.dims[i]);
  }
  return TensorFact::of_rank(x.elem_type, std::move(dims));
}

TensorFact unsqueeze(const Node& n, size_t, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  auto axes = unsqueeze_axes(n);
  if (!axes) may_know_more(n, partial);
  if (!x.has_rank || !axes) return with_type(TensorFact{}, x.elem_type);
  const int64_t rank = static_cast<int64_t>(x.dims.size() + axes->size());
  auto norm = normalize_axes(*axes, rank);
  if (!norm) return unknown(partial);
  std::vector<Dim> dims;
  size_t next = 0;
  for (int64_t i = 0; i < rank; ++i) {
    if (std::find(norm->begin(), norm->end(), i) != norm->end())
      dims.push_back(Dim::of(1));
    else
      dims.push_back(x.dims[next++]);
  }
  return TensorFact::of_rank(x.elem_type, std::move(dims));
}

TensorFact concat(const Node& n, size_t, bool* partial) {
  TensorFact out{input_fact(n, 0).elem_type, false, {}};
  int64_t axis = n.attr_int("axis", 0);
  int64_t total = 0;
  bool total_known = true;
  for (size_t i = 0; i < n.inputs().size(); ++i) {
    const TensorFact& f = input_fact(n, i);
    if (!out.elem_type) out.elem_type = f.elem_type;
    if (!f.has_rank) {
      total_known = false;
      continue;
    }
    auto a = normalize_axis(axis, static_cast<int64_t>(f.dims.size()));
    if (!a) return unknown(partial);
    const Dim along = f.dims[static_cast<size_t>(*a)];
    if (!along.known() || __builtin_add_overflow(total, along.value, &total)) total_known = false;
    TensorFact others = TensorFact::of_rank(out.elem_type, f.dims);
    others.dims[static_cast<size_t>(*a)] = Dim{};
    bool conflict = false;
    out = merge_facts(out, others, &conflict);
    if (conflict) return unknown(partial);
  }
  if (out.has_rank) {
    auto a = normalize_axis(axis, static_cast<int64_t>(out.dims.size()));
    if (a && total_known) out.dims[static_cast<size_t>(*a)] = Dim::of(total);
  }
  return out;
}

TensorFact gather(const Node& n, size_t, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  const TensorFact& idx = input_fact(n, 1);
  if (!x.has_rank || !idx.has_rank) return with_type(TensorFact{}, x.elem_type);
  auto a = normalize_axis(n.attr_int("axis", 0), static_cast<int64_t>(x.dims.size()));
  if (!a) return unknown(partial);
  std::vector<Dim> dims(x.dims.begin(), x.dims.begin() + *a);
  dims.insert(dims.end(), idx.dims.begin(), idx.dims.end());
  dims.insert(dims.end(), x.dims.begin() + *a + 1, x.dims.end());
  return TensorFact::of_rank(x.elem_type, std::move(dims));
}

TensorFact slice(const Node& n, size_t, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  TensorFact out{x.elem_type, x.has_rank, {}};
  if (!x.has_rank) return out;
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  auto p = slice_params(n);
  if (!p) {
    may_know_more(n, partial);
    out.dims.assign(x.dims.size(), Dim{});
    // Bounds read at run time (a causal mask cut to the sequence's length): the axes a constant
    // `axes` input does not name keep their dims.
    if (n.opset() >= 10 && n.inputs().size() >= 4 && n.input(3) != nullptr) {
      if (auto axes = constant_ints(n.input(3))) {
        out.dims = x.dims;
        for (int64_t a : *axes) {
          auto axis = normalize_axis(a, rank);
          if (!axis) {
            out.dims.assign(x.dims.size(), Dim{});
            break;
          }
          out.dims[static_cast<size_t>(*axis)] = Dim{};
        }
      }
    }
    return out;
  }
  out.dims = x.dims;
  for (size_t i = 0; i < p->starts.size(); ++i) {
    auto axis = normalize_axis(p->axes[i], rank);
    if (!axis) return with_type(unknown(partial), x.elem_type);
    Dim& d = out.dims[static_cast<size_t>(*axis)];
    if (!d.known()) {
      d = Dim{};
      continue;
    }
    const int64_t size = d.value, step = p->steps[i];
    if (step == INT64_MIN) {
      d = Dim{};
      continue;
    }
    auto clampv = [](int64_t v, int64_t lo, int64_t hi) { return std::min(std::max(v, lo), hi); };
    int64_t start = p->starts[i], end = p->ends[i];
    if (start < 0) start = start < -size ? 0 : start + size;  // careful with INT64_MIN
    if (end < 0) end = end < -size ? -1 : end + size;
    int64_t len;
    if (step > 0) {
      start = clampv(start, 0, size);
      end = clampv(end, 0, size);
      len = end > start ? (end - start + step - 1) / step : 0;
    } else {
      start = clampv(start, 0, size - 1);
      end = clampv(end, -1, size - 1);
      len = start > end ? (start - end + (-step) - 1) / (-step) : 0;
    }
    d = Dim::of(len);
  }
  return out;
}

TensorFact expand(const Node& n, size_t, bool*) {
  const TensorFact& x = input_fact(n, 0);
  auto shape = constant_ints(n.input(1));
  const TensorFact& s = input_fact(n, 1);
  if (!shape) {
    // A target of known length: x's dims other than 1 survive the broadcast.
    if (x.has_rank && s.has_rank && s.dims.size() == 1 && s.dims[0].known()) {
      const TensorFact target = rank_only(x.elem_type, s.dims[0].value);
      return target.has_rank ? broadcast({&x, &target}, x.elem_type) : target;
    }
    return with_type(TensorFact{}, x.elem_type);
  }
  std::vector<Dim> dims;
  for (int64_t d : *shape) dims.push_back(Dim::of(d));
  TensorFact target = TensorFact::of_rank(x.elem_type, std::move(dims));
  return broadcast({&x, &target}, x.elem_type);
}

TensorFact constant_of_shape(const Node& n, size_t, bool*) {
  const TensorFact& x = input_fact(n, 0);
  int32_t t = TensorProto::FLOAT;
  if (const onnx::AttributeProto* v = n.attr("value"); v && v->has_t()) t = v->t().data_type();
  auto shape = constant_ints(n.input(0));
  if (!shape) {
    if (x.has_rank && x.dims.size() == 1 && x.dims[0].known()) return rank_only(t, x.dims[0].value);
    return with_type(TensorFact{}, t);
  }
  std::vector<Dim> dims;
  for (int64_t d : *shape) dims.push_back(Dim::of(d));
  return TensorFact::of_rank(t, std::move(dims));
}

TensorFact range(const Node& n, size_t, bool* partial) {
  if (constant_in_memory(n.input(0))) may_know_more(n, partial);  // libonnx computes its length
  return TensorFact::of_rank(input_fact(n, 0).elem_type, {Dim{}});
}

TensorFact non_zero(const Node& n, size_t, bool*) {
  const TensorFact& x = input_fact(n, 0);
  return TensorFact::of_rank(
      TensorProto::INT64,
      {x.has_rank ? Dim::of(static_cast<int64_t>(x.dims.size())) : Dim{}, Dim{}});
}

TensorFact tile(const Node& n, size_t, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  auto repeats = constant_ints(n.input(1));
  if (!repeats) may_know_more(n, partial);
  if (!x.has_rank) return with_type(TensorFact{}, x.elem_type);
  if (!repeats || repeats->size() != x.dims.size())
    return rank_only(x.elem_type, static_cast<int64_t>(x.dims.size()));
  std::vector<Dim> dims;
  for (size_t i = 0; i < x.dims.size(); ++i) {
    int64_t r = (*repeats)[i];
    if ((*repeats)[i] == 1)
      dims.push_back(x.dims[i]);
    else
      dims.push_back(x.dims[i].known() ? checked_mul(x.dims[i].value, r) : Dim{});
  }
  return TensorFact::of_rank(x.elem_type, std::move(dims));
}

TensorFact pad(const Node& n, size_t, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  if (!x.has_rank) return with_type(TensorFact{}, x.elem_type);
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  auto p = pad_params(n);
  if (!p) may_know_more(n, partial);
  if (p && p->axes) *partial = true;  // Graft's rule does not place pads by axes
  if (!p || p->axes || static_cast<int64_t>(p->pads.size()) != 2 * rank)
    return rank_only(x.elem_type, rank);
  std::vector<Dim> dims;
  for (int64_t i = 0; i < rank; ++i) {
    const int64_t before = p->pads[static_cast<size_t>(i)];
    const int64_t after = p->pads[static_cast<size_t>(i + rank)];
    const Dim& d = x.dims[static_cast<size_t>(i)];
    int64_t add = 0;
    if (__builtin_add_overflow(before, after, &add)) {
      dims.push_back(Dim{});
      continue;
    }
    dims.push_back(add == 0 ? d : (d.known() ? checked_add(d.value, add) : Dim{}));
  }
  return TensorFact::of_rank(x.elem_type, std::move(dims));
}

TensorFact split(const Node& n, size_t output, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  auto p = split_params(n);
  if (!p) may_know_more(n, partial);
  if (!x.has_rank) return with_type(TensorFact{}, x.elem_type);
  TensorFact out = x;
  auto a = normalize_axis(p ? p->axis : 0, static_cast<int64_t>(x.dims.size()));
  if (!a) return unknown(partial);
  Dim& d = out.dims[static_cast<size_t>(*a)];
  if (p && p->sizes && output < p->sizes->size())
    d = Dim::of((*p->sizes)[output]);
  else if (p && !p->sizes && d.known() && p->parts > 0 && d.value % p->parts == 0)
    d = Dim::of(d.value / p->parts);
  else
    d = Dim{};
  return out;
}

}  // namespace

void add_shape_op_rules(Table& t) {
  t.add({"Constant"}, constant);
  t.add({"Shape"}, shape_op);
  t.add({"Size"}, size_op);
  t.add({"Reshape"}, reshape);
  t.add({"Flatten"}, flatten);
  t.add({"Transpose"}, transpose);
  t.add({"Squeeze"}, squeeze);
  t.add({"Unsqueeze"}, unsqueeze);
  t.add({"Concat"}, concat);
  t.add({"Gather"}, gather);
  t.add({"Slice"}, slice);
  t.add({"Expand"}, expand);
  t.add({"ConstantOfShape"}, constant_of_shape);
  t.add({"Range"}, range);
  t.add({"NonZero"}, non_zero);
  t.add({"Tile"}, tile);
  t.add({"Pad"}, pad);
  t.add({"Split"}, split);
}

}  // namespace graft::ir::shape_rules
