// The shape-rule registry and the helpers the rule families share.
#include "core/ir/shape_rules.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <absl/strings/str_cat.h>

#include "core/ir/op_params.h"
#include "core/ir/tensor.h"

namespace graft::ir {

namespace shape_rules {

void Table::add(std::initializer_list<const char*> ops, ShapeRule rule) {
  for (const char* op : ops) {
    if (!rules_.emplace(op, rule).second) {
      // Which of two rules an op got would depend on the order the families are added in.
      std::fprintf(stderr, "graft: two shape rules for %s\n", op);
      std::abort();
    }
  }
}

ShapeRule Table::find(std::string_view op) const {
  auto it = rules_.find(op);
  return it == rules_.end() ? nullptr : it->second;
}

std::vector<std::string> Table::ops() const {
  std::vector<std::string> out;
  for (const auto& [op, rule] : rules_) out.push_back(op);
  return out;
}

namespace {

const Table& table() {
  static const Table* t = [] {
    auto* r = new Table();
    add_elementwise_rules(*r);
    add_shape_op_rules(*r);
    add_reduce_rules(*r);
    add_nn_rules(*r);
    add_quantize_rules(*r);
    add_control_flow_rules(*r);
    add_detection_rules(*r);
    add_contrib_rules(*r);
    return r;
  }();
  return *t;
}

}  // namespace

TensorFact unknown(bool* partial) {
  *partial = true;
  return {};
}

void may_know_more(const Node& n, bool* partial) {
  for (size_t i = 1; i < n.inputs().size(); ++i)
    if (n.input(i) && !constant_in_memory(n.input(i))) return;
  *partial = true;
}

TensorFact with_type(TensorFact f, int32_t elem_type) {
  f.elem_type = elem_type;
  return f;
}

TensorFact rank_only(int32_t elem_type, int64_t rank) {
  constexpr int64_t kMaxRank = 1024;
  if (rank < 0 || rank > kMaxRank) return TensorFact{elem_type, false, {}};
  return TensorFact::of_rank(elem_type, std::vector<Dim>(static_cast<size_t>(rank)));
}

TensorFact broadcast(const std::vector<const TensorFact*>& ins, int32_t elem_type) {
  TensorFact out;
  out.elem_type = elem_type;
  size_t rank = 0;
  for (const TensorFact* f : ins) {
    if (!f->has_rank) return out;
    rank = std::max(rank, f->dims.size());
  }
  out.has_rank = true;
  out.dims.assign(rank, Dim{});
  for (size_t k = 0; k < rank; ++k) {
    // Dims aligned from the right; a missing dim is 1.
    std::optional<Dim> result;
    bool unknown = false;
    for (const TensorFact* f : ins) {
      if (f->dims.size() + k < rank) continue;
      const Dim& d = f->dims[f->dims.size() - rank + k];
      if (d.known() && d.value == 1) continue;
      if (!d.known() && !d.is_symbol()) {
        unknown = true;
        continue;
      }
      if (!result) {
        result = d;
      } else if (result->known() && d.known()) {
        if (result->value != d.value) return TensorFact{elem_type, false, {}};  // invalid
      } else if (d.known()) {
        result = d;  // a symbol broadcast against N > 1 must be N (or 1)
      } else if (!result->known() && result->symbol != d.symbol) {
        unknown = true;
      }
    }
    if (!result)
      out.dims[k] = unknown ? Dim{} : Dim::of(1);
    else if (unknown && !result->known())
      out.dims[k] = Dim{};  // the unknown one may be the larger
    else
      out.dims[k] = *result;
  }
  return out;
}

TensorFact matmul_fact(const TensorFact& a, const TensorFact& b) {
  int32_t t = a.elem_type ? a.elem_type : b.elem_type;
  if (!a.has_rank || !b.has_rank || a.dims.empty() || b.dims.empty())
    return TensorFact{t, false, {}};
  std::vector<Dim> ad = a.dims, bd = b.dims;
  const bool a1 = ad.size() == 1, b1 = bd.size() == 1;
  if (a1) ad.insert(ad.begin(), Dim::of(1));
  if (b1) bd.push_back(Dim::of(1));
  TensorFact ab = TensorFact::of_rank(t, std::vector<Dim>(ad.begin(), ad.end() - 2));
  TensorFact bb = TensorFact::of_rank(t, std::vector<Dim>(bd.begin(), bd.end() - 2));
  TensorFact out = broadcast({&ab, &bb}, t);
  if (!out.has_rank) return out;
  if (!a1) out.dims.push_back(ad[ad.size() - 2]);
  if (!b1) out.dims.push_back(bd.back());
  return out;
}

Dim checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  return a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, &r) ? Dim::of(r) : Dim{};
}

Dim checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  return !__builtin_add_overflow(a, b, &r) && r >= 0 ? Dim::of(r) : Dim{};
}

std::optional<int64_t> product(const std::vector<Dim>& dims, size_t begin, size_t end) {
  std::vector<int64_t> v;
  for (size_t i = begin; i < end; ++i) {
    if (!dims[i].known()) return std::nullopt;
    v.push_back(dims[i].value);
  }
  return element_count(v);
}

}  // namespace shape_rules

ShapeRule find_shape_rule(std::string_view op) { return shape_rules::table().find(op); }

ShapeRule find_shape_rule(std::string_view domain, std::string_view op) {
  if (is_onnx_domain(domain)) return find_shape_rule(op);
  return shape_rules::table().find(absl::StrCat(std::string(domain), ":", std::string(op)));
}

std::vector<std::string> shape_rule_ops() { return shape_rules::table().ops(); }

}  // namespace graft::ir
