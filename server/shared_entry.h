// How a cached result is laid out in the shared (Redis) tier, with no network: key names, the
// chunks, and the manifest that names them. Everything read back from Redis is untrusted: the
// manifest parser bounds every number, and an entry is accepted only when every chunk has the
// size the manifest states and both parts hash to the manifest's sha256.
//
// An entry of the result (model, report) under cache key K is
//   PREFIX "v1:" H                    the manifest (text, below), written last
//   PREFIX "v1:" H ":" W ":" I        chunk I of model bytes + report bytes, I = 0, 1, ...
// where H = sha256_hex(K.str()) (the key holds the Graft version, so a new release never reads
// an old release's entries) and W is a random id per write: two replicas writing the same key
// at once never mix their chunks, and a reader sees a complete entry or none.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include "core/cache/result_cache.h"

namespace graft::server::shared {

// The layout's version, part of every key name.
constexpr char kLayout[] = "v1";
// A manifest larger than this is not one of ours.
constexpr size_t kMaxManifestBytes = 1024;
// Chunk sizes the parser accepts (the writer's chunk_bytes must lie within them too).
constexpr uint64_t kMinChunkBytes = 1024;
constexpr uint64_t kMaxChunkBytes = 64ull << 20;

struct Manifest {
  std::string key_hash;  // H: sha256 hex of the cache key string
  std::string write_id;  // W: 32 lowercase hex characters
  uint64_t model_bytes = 0;
  std::string model_sha256;
  uint64_t report_bytes = 0;
  std::string report_sha256;
  uint64_t chunk_bytes = 0;
  uint64_t chunks = 0;

  uint64_t total_bytes() const { return model_bytes + report_bytes; }
  // Size chunk `index` must have: chunk_bytes, except the last one.
  uint64_t chunk_size(uint64_t index) const;
};

// H for a cache key.
std::string key_hash(const cache::CacheKey& key);
std::string manifest_key(std::string_view prefix, std::string_view key_hash);
std::string chunk_key(std::string_view prefix, std::string_view key_hash, std::string_view write_id,
                      uint64_t index);
// 32 random lowercase hex characters.
std::string new_write_id();

// The manifest of `result` written in chunks of `chunk_bytes`.
Manifest make_manifest(std::string key_hash, std::string write_id,
                       const cache::CachedResult& result, uint64_t chunk_bytes);
std::string encode_manifest(const Manifest& manifest);
// Strict: the exact line order encode_manifest writes, decimal numbers without sign or leading
// zeros, lowercase hex of the right lengths, chunk_bytes within [kMinChunkBytes,
// kMaxChunkBytes], total_bytes() <= max_entry_bytes, and chunks == ceil(total / chunk_bytes).
// Anything else is DATA_LOSS.
absl::StatusOr<Manifest> parse_manifest(std::string_view text, uint64_t max_entry_bytes);

// Bytes of chunk `index` of `result` (model bytes, then report bytes), per `manifest`.
std::string chunk_bytes(const cache::CachedResult& result, const Manifest& manifest,
                        uint64_t index);

// Rebuilds a result from its chunks, given in order. Memory follows the manifest's sizes,
// which parse_manifest bounded by max_entry_bytes.
class EntryAssembler {
 public:
  explicit EntryAssembler(const Manifest& manifest);
  // DATA_LOSS when the chunk is not the size the manifest gives chunk `next_chunk()`.
  absl::Status add(std::string_view chunk);
  uint64_t next_chunk() const { return next_; }
  // DATA_LOSS unless every chunk arrived and both parts match their sha256.
  absl::StatusOr<cache::CachedResult> finish() &&;

 private:
  const Manifest manifest_;
  std::string payload_;
  uint64_t next_ = 0;
};

}  // namespace graft::server::shared
