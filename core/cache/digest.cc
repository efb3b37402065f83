#include "core/cache/digest.h"

#include <openssl/evp.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace graft::cache {
namespace {

// These only fail on allocation failure or a broken OpenSSL installation (e.g. a FIPS provider
// without SHA-256), neither of which a caller can handle, so they throw instead of returning
// a status through every hashing call.
[[noreturn]] void fail(const char* what) {
  throw std::runtime_error(std::string("sha256: ") + what + " failed");
}

std::string to_hex(const unsigned char* md, unsigned int len) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex(2 * len, '\0');
  for (unsigned int i = 0; i < len; ++i) {
    hex[2 * i] = kDigits[md[i] >> 4];
    hex[2 * i + 1] = kDigits[md[i] & 0xf];
  }
  return hex;
}

EVP_MD_CTX* new_sha256_ctx() {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr) fail("EVP_MD_CTX_new");
  if (EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx);
    fail("EVP_DigestInit_ex");
  }
  return ctx;
}

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr) != 1) {
    fail("EVP_Digest");
  }
  return to_hex(md, len);
}

Sha256::Sha256() : ctx_(new_sha256_ctx()) {}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

Sha256::Sha256(Sha256&& other) noexcept
    : ctx_(std::exchange(other.ctx_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

Sha256& Sha256::operator=(Sha256&& other) noexcept {
  if (this != &other) {
    EVP_MD_CTX_free(ctx_);
    ctx_ = std::exchange(other.ctx_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void Sha256::update(std::string_view chunk) {
  if (ctx_ == nullptr) ctx_ = new_sha256_ctx();  // a moved-from object is usable again
  if (chunk.empty()) return;
  if (EVP_DigestUpdate(ctx_, chunk.data(), chunk.size()) != 1) fail("EVP_DigestUpdate");
  bytes_ += chunk.size();
}

std::string Sha256::hex_digest() const {
  if (ctx_ == nullptr) return sha256_hex({});
  // Finalizing a copy keeps this stream open for more updates.
  EVP_MD_CTX* copy = EVP_MD_CTX_new();
  if (copy == nullptr) fail("EVP_MD_CTX_new");
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  bool ok = EVP_MD_CTX_copy_ex(copy, ctx_) == 1 && EVP_DigestFinal_ex(copy, md, &len) == 1;
  EVP_MD_CTX_free(copy);
  if (!ok) fail("EVP_DigestFinal_ex");
  return to_hex(md, len);
}

void Sha256::reset() {
  if (ctx_ == nullptr) {
    ctx_ = new_sha256_ctx();
  } else if (EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
    fail("EVP_DigestInit_ex");
  }
  bytes_ = 0;
}

}  // namespace graft::cache

namespace graft::cache {

std::string input_digest(std::string_view model_sha256, std::vector<ExternalFileDigest> files) {
  if (files.empty()) return std::string(model_sha256);
  std::sort(
      files.begin(), files.end(),
      [](const ExternalFileDigest& a, const ExternalFileDigest& b) { return a.name < b.name; });
  Sha256 sha;
  sha.update("graft-input-v1\n");
  sha.update(model_sha256);
  sha.update("\n");
  for (const auto& f : files) {
    std::string line = std::to_string(f.name.size()) + ":" + f.name + " " + std::to_string(f.size) +
                       " " + f.sha256 + "\n";
    sha.update(line);
  }
  return sha.hex_digest();
}

}  // namespace graft::cache
