// SHA-256 through OpenSSL EVP, one-shot and incremental: models arrive in chunks, and hashing
// them as they arrive avoids a second pass over bytes that may be hundreds of megabytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

// OpenSSL's EVP_MD_CTX, declared here so that users of this header do not include OpenSSL.
struct evp_md_ctx_st;

namespace graft::cache {

// Lowercase hex SHA-256 of `bytes` (64 characters).
std::string sha256_hex(std::string_view bytes);

// One external-data file of a model, as the input digest covers it.
struct ExternalFileDigest {
  std::string name;  // location, as in the tensors
  uint64_t size = 0;
  std::string sha256;  // lowercase hex
};

// The digest that keys a model's result: the model's own sha256 when it has no external-data
// files; otherwise the sha256 of the text
//   "graft-input-v1\n" <model_sha256> "\n"
// followed, for each file in byte order of names, by
//   <decimal length of name> ":" <name> " " <decimal size> " " <sha256> "\n"
// (length-prefixed, so no name can forge another entry). Clients compute it to look a result up
// before uploading; graftd from the digests of what it received.
std::string input_digest(std::string_view model_sha256, std::vector<ExternalFileDigest> files);

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
