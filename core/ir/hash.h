// Combining hashes, for passes that bucket nodes or tensors by content (cse,
// dedup_initializers).
#pragma once

#include <cstddef>

namespace graft::ir {

// Mixes `h` into `seed` (the boost::hash_combine recipe with a 64-bit constant).
inline void hash_mix(size_t& seed, size_t h) {
  seed ^= h + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
}

}  // namespace graft::ir
