// SHA-256 through OpenSSL EVP, one-shot and incremental: models arrive in chunks, and hashing
// them as they arrive avoids a second pass over bytes that may be hundreds of megabytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

// OpenSSL's EVP_MD_CTX, declared here so that users of this header do not include OpenSSL.
struct evp_md_ctx_st;

namespace graft::cache {

// Lowercase hex SHA-256 of `bytes` (64 characters).
std::string sha256_hex(std::string_view bytes);

// Incremental SHA-256. Move-only; not thread-safe (one stream per object).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&& other) noexcept;
  Sha256& operator=(Sha256&& other) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(std::string_view chunk);
  // Digest of everything passed to update() so far. Does not end the stream: update() may be
  // called again afterwards, and hex_digest() may be called any number of times.
  std::string hex_digest() const;
  // Starts a new stream, as if freshly constructed.
  void reset();
  // Bytes passed to update() since construction or reset().
  uint64_t bytes() const { return bytes_; }

 private:
  evp_md_ctx_st* ctx_ = nullptr;  // null only after being moved from
  uint64_t bytes_ = 0;
};

}  // namespace graft::cache
