#pragma once
// Saturating arithmetic on unsigned counts (bytes, nodes, work units). Sizes come from
// untrusted models: a product of hostile dims, summed over a graph, reaches UINT64_MAX, and
// every count derived from it must stay a count (no wrap, no signed overflow).

#include <cstdint>
#include <limits>

namespace graft {

inline constexpr uint64_t kSaturated = std::numeric_limits<uint64_t>::max();

constexpr uint64_t sat_add(uint64_t a, uint64_t b) {
  return a > kSaturated - b ? kSaturated : a + b;
}
constexpr uint64_t sat_mul(uint64_t a, uint64_t b) {
  return (b != 0 && a > kSaturated / b) ? kSaturated : a * b;
}
// a - b, or 0 when b > a.
constexpr uint64_t sat_sub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

// total + (now - then) in exact arithmetic, clamped to [0, UINT64_MAX]: a running count moved
// by one step's change, where the step may remove more than the count holds (then 0).
constexpr uint64_t sat_add_change(uint64_t total, uint64_t now, uint64_t then) {
  return now >= then ? sat_add(total, now - then) : sat_sub(total, then - now);
}

// `v` as int64, UINT64 values past INT64_MAX clamped to INT64_MAX (for signed fields).
constexpr int64_t clamp_to_i64(uint64_t v) {
  return v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
             ? std::numeric_limits<int64_t>::max()
             : static_cast<int64_t>(v);
}

}  // namespace graft
