// libFuzzer target: graftd's request assembly (server/upload.h) without a network. The input is
// a sequence of messages, each a 2-byte little-endian length and that many bytes of a
// serialized graft.v1.OptimizeRequest (a length past the end takes what is left; bytes that do
// not parse are skipped), fed to an UploadAssembler with small limits, then finish().
// Seeds: fuzz/corpus/upload_fuzzer, made by fuzz/make_upload_corpus.py.
//
// Besides the sanitizers, it checks what the assembler promises: errors carry the documented
// codes; a finished upload holds exactly the announced bytes, within max_model_bytes, with the
// sha256 of the model; the shared budget is never exceeded and is back to 0 afterwards.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/cache/digest.h"
#include "server/upload.h"

namespace {

using graft::server::InflightBudget;
using graft::server::UploadAssembler;
using graft::server::UploadLimits;

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "upload_fuzzer: %s\n", what);
  std::abort();
}

bool documented_error(const grpc::Status& st) {
  switch (st.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return !st.error_message().empty();
    default:
      return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint64_t kMaxModelBytes = 4000;
  InflightBudget budget(3000);  // less than max_model_bytes: both limits are reachable
  UploadLimits limits;
  limits.max_model_bytes = kMaxModelBytes;
  limits.max_external_files = 8;
  limits.first_buffer_bytes = 16;  // small, so short inputs exercise buffer growth
  {
    UploadAssembler up(limits, &budget);
    bool failed = false;
    size_t off = 0;
    while (!failed && off + 2 <= size) {
      size_t len = data[off] | (size_t{data[off + 1]} << 8);
      off += 2;
      if (len > size - off) len = size - off;
      graft::v1::OptimizeRequest msg;
      const bool parsed = msg.ParseFromArray(data + off, static_cast<int>(len));
      off += len;
      if (!parsed) continue;
      grpc::Status st = up.add(msg);
      if (!st.ok() && !documented_error(st)) broken("add: undocumented error code");
      failed = !st.ok();
      if (budget.used() > budget.limit()) broken("budget exceeded");
    }
    if (!failed) {
      grpc::Status st = up.finish();
      if (!st.ok() && !documented_error(st)) broken("finish: undocumented error code");
      if (st.ok()) {
        const std::string& model = *up.model();
        if (model.size() != up.start().model_size()) broken("model size differs from announced");
        if (model.empty()) broken("empty model accepted");
        if (up.sha256() != graft::cache::sha256_hex(model)) broken("wrong sha256");
        uint64_t total = model.size();
        for (const auto& f : up.files()) {
          if (f.data.bytes().size() != f.data.announced()) broken("file size differs");
          total += f.data.bytes().size();
        }
        if (total > kMaxModelBytes) broken("max_model_bytes exceeded");
        // The deadline of a request with this start message, as the server computes it.
        const auto now = std::chrono::system_clock::now();
        if (graft::server::request_deadline(std::chrono::system_clock::time_point::max(),
                                            up.start().deadline_hint_ms(), 300, now) < now)
          broken("deadline in the past");
      }
    }
  }
  if (budget.used() != 0) broken("budget not released");
  return 0;
}
