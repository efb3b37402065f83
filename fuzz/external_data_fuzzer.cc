// libFuzzer target: a TensorProto from client bytes -> ir::ExternalData (its external_data keys
// parsed and checked against a real file) -> read, streamed, hashed and loaded.
//
// Properties beyond "no crash, no sanitizer report": a read succeeds only for a range inside the
// file whose length matches the dims (and then returns exactly those bytes, the same that
// read_blocks streams); every refusal is one of the documented codes; nothing above the limit
// is allocated (the heap limit) and a read above it is ResourceExhausted.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/ir/external_data.h"
#include "core/ir/tensor.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/heap_limit.h"

namespace {

constexpr uint64_t kFileBytes = 4096;
constexpr uint64_t kMaxRead = 1024;

// One file, data.bin (bytes i % 251), in a folder made once per process.
const std::string& folder() {
  static const std::string path = [] {
    auto dir = std::filesystem::temp_directory_path() /
               ("graft-extdata-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream out(dir / "data.bin", std::ios::binary);
    for (uint64_t i = 0; i < kFileBytes; ++i) out.put(static_cast<char>(i % 251));
    return dir.string();
  }();
  return path;
}

bool expected_code(absl::StatusCode code) {
  return code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kNotFound ||
         code == absl::StatusCode::kResourceExhausted || code == absl::StatusCode::kDataLoss ||
         code == absl::StatusCode::kPermissionDenied;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using graft::fuzz::fail;
  graft::fuzz::HeapLimit heap_limit(64ll << 20);
  onnx::TensorProto t;
  if (!t.ParseFromArray(data, static_cast<int>(size))) return 0;
  t.set_data_location(onnx::TensorProto::EXTERNAL);
  auto external = graft::ir::ExternalData::beneath(folder());

  (void)graft::ir::payload_bytes(t);
  auto ref = external->locate(t);
  auto read = external->read(t, kMaxRead);
  if (!read.ok()) {
    if (!expected_code(read.status().code()))
      fail("unexpected error code", read.status().ToString());
    if (ref.ok() && ref->length <= kMaxRead) fail("locate accepted what read refused");
    if (ref.ok() && read.status().code() != absl::StatusCode::kResourceExhausted)
      fail("a located range over the limit is not ResourceExhausted");
    return 0;
  }
  if (!ref.ok()) fail("read accepted what locate refused", ref.status().ToString());
  if (ref->location != "data.bin" || ref->offset > kFileBytes ||
      ref->length > kFileBytes - ref->offset || read->size() != ref->length)
    fail("a read outside the file");
  for (uint64_t i = 0; i < read->size(); ++i)
    if (static_cast<uint8_t>(read->bytes()[i]) != (ref->offset + i) % 251)
      fail("read returned bytes of another range");
  std::string streamed;
  auto st = external->read_blocks(
      t, [&](std::string_view s) { streamed += s; }, 7);
  if (!st.ok() || streamed != read->bytes()) fail("read_blocks differs from read");
  auto loaded = graft::ir::load_tensor(t, external.get(), kMaxRead);
  if (!loaded.ok() || (*loaded)->raw_data() != read->bytes()) fail("load_tensor differs from read");
  if (!external->content_hash(t).ok()) fail("content_hash failed on a readable tensor");
  return 0;
}
