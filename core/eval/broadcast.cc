#include "core/eval/broadcast.h"

#include "core/eval/budget.h"

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

namespace graft::eval {

absl::StatusOr<std::vector<int64_t>> broadcast_shape(
    const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> out(rank, 1);
  for (const auto& s : shapes) {
    size_t shift = rank - s.size();
    for (size_t d = 0; d < s.size(); ++d) {
      int64_t v = s[d];
      int64_t& o = out[shift + d];
      if (v < 0) return absl::InvalidArgumentError("negative dimension");
      if (v == o || v == 1) continue;
      if (o == 1) {
        o = v;
        continue;
      }
      std::string all;
      for (const auto& x : shapes) absl::StrAppend(&all, "[", absl::StrJoin(x, ","), "]");
      return absl::InvalidArgumentError(absl::StrCat("shapes do not broadcast: ", all));
    }
  }
  return out;
}

bool broadcastable_to(const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  if (from.size() > to.size()) return false;
  size_t shift = to.size() - from.size();
  for (size_t d = 0; d < from.size(); ++d) {
    if (from[d] != to[shift + d] && from[d] != 1) return false;
  }
  return true;
}

std::vector<int64_t> broadcast_strides(const std::vector<int64_t>& in,
                                       const std::vector<int64_t>& out) {
  std::vector<int64_t> strides(out.size(), 0);
  size_t shift = out.size() - std::min(in.size(), out.size());
  int64_t stride = 1;
  for (size_t d = in.size(); d-- > 0;) {
    if (d + shift >= out.size()) continue;
    if (in[d] != 1) strides[d + shift] = stride;
    stride *= in[d];
  }
  return strides;
}

int64_t element_count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

BroadcastIterator::BroadcastIterator(const std::vector<int64_t>& out,
                                     const std::vector<std::vector<int64_t>>& inputs)
    : out_(out), index_(out.size(), 0), n_(inputs.size()), offsets_(inputs.size(), 0) {
  strides_.assign(out.size() * n_, 0);
  for (size_t k = 0; k < n_; ++k) {
    std::vector<int64_t> s = broadcast_strides(inputs[k], out);
    for (size_t d = 0; d < out.size(); ++d) strides_[d * n_ + k] = s[d];
  }
}

void BroadcastIterator::next() {
  poll_every(steps_++);
  for (size_t d = out_.size(); d-- > 0;) {
    const int64_t* s = &strides_[d * n_];
    if (++index_[d] < out_[d]) {
      for (size_t k = 0; k < n_; ++k) offsets_[k] += s[k];
      return;
    }
    index_[d] = 0;
    for (size_t k = 0; k < n_; ++k) offsets_[k] -= s[k] * (out_[d] - 1);
  }
}

}  // namespace graft::eval
