#include "server/shared_entry.h"

#include <random>
#include <vector>

#include <absl/strings/str_cat.h>

#include "core/cache/digest.h"

namespace graft::server::shared {
namespace {

constexpr char kMagic[] = "graft-shared-cache 1";

bool is_hex(std::string_view s, size_t length) {
  return s.size() == length && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

// A decimal without sign or leading zeros, at most 19 digits (so it fits in uint64_t).
bool parse_decimal(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 19 || (s.size() > 1 && s[0] == '0')) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

absl::Status corrupt(std::string_view what) {
  return absl::DataLossError(absl::StrCat("shared cache entry: ", std::string(what)));
}

}  // namespace

uint64_t Manifest::chunk_size(uint64_t index) const {
  if (index >= chunks) return 0;
  if (index + 1 < chunks) return chunk_bytes;
  return total_bytes() - chunk_bytes * (chunks - 1);
}

std::string key_hash(const cache::CacheKey& key) { return cache::sha256_hex(key.str()); }

std::string manifest_key(std::string_view prefix, std::string_view key_hash) {
  return absl::StrCat(std::string(prefix), kLayout, ":", std::string(key_hash));
}

std::string chunk_key(std::string_view prefix, std::string_view key_hash, std::string_view write_id,
                      uint64_t index) {
  return absl::StrCat(std::string(prefix), kLayout, ":", std::string(key_hash), ":",
                      std::string(write_id), ":", index);
}

std::string new_write_id() {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) {
    uint32_t bits = random();
    for (int j = 0; j < 8; ++j, bits >>= 4) id += kHex[bits & 15];
  }
  return id;
}

Manifest make_manifest(std::string key_hash, std::string write_id,
                       const cache::CachedResult& result, uint64_t chunk_bytes) {
  Manifest m;
  m.key_hash = std::move(key_hash);
  m.write_id = std::move(write_id);
  m.model_bytes = result.optimized_model.size();
  m.model_sha256 = cache::sha256_hex(result.optimized_model);
  m.report_bytes = result.report_json.size();
  m.report_sha256 = cache::sha256_hex(result.report_json);
  m.chunk_bytes = chunk_bytes;
  m.chunks = (m.total_bytes() + chunk_bytes - 1) / chunk_bytes;
  return m;
}

std::string encode_manifest(const Manifest& m) {
  return absl::StrCat(kMagic, "\nkey ", m.key_hash, "\nwrite ", m.write_id, "\nmodel_bytes ",
                      m.model_bytes, "\nmodel_sha256 ", m.model_sha256, "\nreport_bytes ",
                      m.report_bytes, "\nreport_sha256 ", m.report_sha256, "\nchunk_bytes ",
                      m.chunk_bytes, "\nchunks ", m.chunks, "\n");
}

absl::StatusOr<Manifest> parse_manifest(std::string_view text, uint64_t max_entry_bytes) {
  if (text.size() > kMaxManifestBytes) return corrupt("manifest too large");
  if (text.empty() || text.back() != '\n') return corrupt("manifest does not end a line");
  text.remove_suffix(1);
  std::vector<std::string_view> lines;
  for (size_t start = 0;;) {
    const size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos || lines.size() > 16) break;
    start = end + 1;
  }
  static const char* const kFields[] = {"key",          "write",        "model_bytes",
                                        "model_sha256", "report_bytes", "report_sha256",
                                        "chunk_bytes",  "chunks"};
  constexpr size_t kFieldCount = sizeof kFields / sizeof kFields[0];
  if (lines.size() != kFieldCount + 1 || lines[0] != kMagic)
    return corrupt("not a manifest of this layout");
  std::string_view values[kFieldCount];
  for (size_t i = 0; i < kFieldCount; ++i) {
    std::string_view line = lines[i + 1];
    std::string_view name = kFields[i];
    if (line.size() <= name.size() + 1 || line.substr(0, name.size()) != name ||
        line[name.size()] != ' ')
      return corrupt(
          absl::StrCat("manifest line ", i + 2, " is not '", std::string(name), " VALUE'"));
    values[i] = line.substr(name.size() + 1);
  }
  Manifest m;
  if (!is_hex(values[0], 64)) return corrupt("bad key hash");
  if (!is_hex(values[1], 32)) return corrupt("bad write id");
  if (!is_hex(values[3], 64) || !is_hex(values[5], 64)) return corrupt("bad sha256");
  if (!parse_decimal(values[2], &m.model_bytes) || !parse_decimal(values[4], &m.report_bytes) ||
      !parse_decimal(values[6], &m.chunk_bytes) || !parse_decimal(values[7], &m.chunks))
    return corrupt("bad number");
  m.key_hash = values[0];
  m.write_id = values[1];
  m.model_sha256 = values[3];
  m.report_sha256 = values[5];
  // Each size alone is below max_entry_bytes before they are added, so the sum cannot wrap.
  if (m.model_bytes > max_entry_bytes || m.report_bytes > max_entry_bytes ||
      m.total_bytes() > max_entry_bytes)
    return corrupt("entry larger than max_entry_bytes");
  if (m.chunk_bytes < kMinChunkBytes || m.chunk_bytes > kMaxChunkBytes)
    return corrupt("chunk size out of range");
  if (m.chunks != (m.total_bytes() + m.chunk_bytes - 1) / m.chunk_bytes)
    return corrupt("chunk count does not match the sizes");
  return m;
}

std::string chunk_bytes(const cache::CachedResult& result, const Manifest& manifest,
                        uint64_t index) {
  const uint64_t begin = index * manifest.chunk_bytes;
  const uint64_t end = begin + manifest.chunk_size(index);
  const std::string& model = result.optimized_model;
  const std::string& report = result.report_json;
  std::string out;
  out.reserve(end - begin);
  if (begin < model.size()) out.append(model, begin, std::min<uint64_t>(end, model.size()) - begin);
  if (end > model.size()) {
    const uint64_t from = begin > model.size() ? begin - model.size() : 0;
    out.append(report, from, end - model.size() - from);
  }
  return out;
}

EntryAssembler::EntryAssembler(const Manifest& manifest) : manifest_(manifest) {
  payload_.reserve(manifest_.total_bytes());
}

absl::Status EntryAssembler::add(std::string_view chunk) {
  if (next_ >= manifest_.chunks) return corrupt("more chunks than the manifest names");
  if (chunk.size() != manifest_.chunk_size(next_))
    return corrupt(absl::StrCat("chunk ", next_, " has ", chunk.size(),
                                " bytes, the manifest says ", manifest_.chunk_size(next_)));
  payload_.append(chunk);
  ++next_;
  return absl::OkStatus();
}

absl::StatusOr<cache::CachedResult> EntryAssembler::finish() && {
  if (next_ != manifest_.chunks || payload_.size() != manifest_.total_bytes())
    return corrupt("missing chunks");
  cache::CachedResult result;
  result.report_json = payload_.substr(manifest_.model_bytes);
  payload_.resize(manifest_.model_bytes);
  result.optimized_model = std::move(payload_);
  if (cache::sha256_hex(result.optimized_model) != manifest_.model_sha256)
    return corrupt("model bytes do not match their sha256");
  if (cache::sha256_hex(result.report_json) != manifest_.report_sha256)
    return corrupt("report bytes do not match their sha256");
  result.output_sha256 = manifest_.model_sha256;
  return result;
}

}  // namespace graft::server::shared
