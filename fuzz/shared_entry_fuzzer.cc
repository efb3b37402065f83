// libFuzzer target: the shared cache tier's entries as read back from Redis (server/
// shared_entry.h), which graftd treats as untrusted. The input is a manifest, an empty line, then
// the payload: chunk after chunk of the sizes the manifest gives (the last one takes what is
// left, so wrong sizes are reached too). Seeds: fuzz/corpus/shared_entry (valid entries).
//
// Besides the sanitizers, it checks what the reader relies on: the parser accepts only what the
// encoder writes (a parsed manifest encodes back to the same text), its sizes are within
// max_entry_bytes and add up to its chunk count, and an assembled entry has exactly the
// manifest's sizes and sha256 for model and report; every refusal is DATA_LOSS.
#include <cstdint>
#include <string>
#include <string_view>

#include "core/cache/digest.h"
#include "fuzz/fuzz_check.h"
#include "server/shared_entry.h"

using namespace graft::server::shared;
using graft::fuzz::fail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint64_t kMaxEntryBytes = 1 << 20;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find("\n\n");
  const std::string_view text =
      input.substr(0, split == std::string_view::npos ? split : split + 1);
  std::string_view payload =
      split == std::string_view::npos ? std::string_view() : input.substr(split + 2);

  auto manifest = parse_manifest(text, kMaxEntryBytes);
  if (!manifest.ok()) {
    if (manifest.status().code() != absl::StatusCode::kDataLoss) fail("parser error not DATA_LOSS");
    return 0;
  }
  if (encode_manifest(*manifest) != text) fail("accepted a manifest the encoder would not write");
  if (manifest->total_bytes() > kMaxEntryBytes) fail("entry above max_entry_bytes accepted");
  if (manifest->chunk_bytes < kMinChunkBytes || manifest->chunk_bytes > kMaxChunkBytes)
    fail("chunk size out of range accepted");
  uint64_t sum = 0;
  for (uint64_t i = 0; i < manifest->chunks; ++i) sum += manifest->chunk_size(i);
  if (sum != manifest->total_bytes()) fail("chunk sizes do not add up to the entry");

  EntryAssembler assembler(*manifest);
  for (uint64_t i = 0; i < manifest->chunks && !payload.empty(); ++i) {
    const size_t want = manifest->chunk_size(i);
    const std::string_view chunk =
        payload.substr(0, payload.size() <= want ? payload.size() : want);
    payload.remove_prefix(chunk.size());
    auto st = assembler.add(chunk);
    if (st.ok() != (chunk.size() == want)) fail("chunk size check wrong");
    if (!st.ok()) {
      if (st.code() != absl::StatusCode::kDataLoss) fail("chunk error not DATA_LOSS");
      return 0;
    }
  }
  auto result = std::move(assembler).finish();
  if (!result.ok()) {
    if (result.status().code() != absl::StatusCode::kDataLoss) fail("finish error not DATA_LOSS");
    return 0;
  }
  if (result->optimized_model.size() != manifest->model_bytes ||
      result->report_json.size() != manifest->report_bytes)
    fail("assembled sizes differ from the manifest");
  if (graft::cache::sha256_hex(result->optimized_model) != manifest->model_sha256 ||
      graft::cache::sha256_hex(result->report_json) != manifest->report_sha256)
    fail("assembled bytes do not match the manifest's sha256");
  // Chunking the result again gives the same chunks.
  const Manifest again =
      make_manifest(manifest->key_hash, manifest->write_id, *result, manifest->chunk_bytes);
  if (encode_manifest(again) != text) fail("re-chunked manifest differs");
  return 0;
}
