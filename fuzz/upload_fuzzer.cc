// libFuzzer target: graftd's request assembly (server/upload.h) without a network. The input is
// a sequence of messages, each a 2-byte little-endian length and that many bytes of a
// serialized graft.v1.OptimizeRequest (a length past the end takes what is left; bytes that do
// not parse are skipped), fed to an UploadAssembler with small limits, then finish().
// Seeds: fuzz/corpus/upload_fuzzer, made by fuzz/make_upload_corpus.py.
//
// Besides the sanitizers, it checks what the assembler promises: errors carry the documented
// codes; a finished upload holds exactly the announced bytes, within max_model_bytes, with the
// sha256 of the model; external files are on disk in the spool with exactly their announced
// bytes and sha256, within the spool's budget; the memory budget and the spool are back to 0
// (and the request's folder gone) afterwards. The start message's config goes through
// api::from_proto as graftd's first step does (verify input sets: every tensor parsed and
// checked, at most 16 sets within kMaxInputSetBytes, errors INVALID_ARGUMENT), and a finished
// model that parses has the sets checked against it (eval::check_input_sets) as run_pipeline
// does; calibration sets (PipelineConfig.calibration_sets) the same way. Seeds with input
// sets: "verify_input_set*", "calibration_*".
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>

#include "core/cache/digest.h"
#include "core/eval/verify.h"
#include "core/ir/model.h"
#include "core/paths/files.h"
#include "proto/convert.h"
#include "server/spool.h"
#include "server/upload.h"

namespace {

using graft::server::InflightBudget;
using graft::server::Spool;
using graft::server::UploadAssembler;
using graft::server::UploadLimits;

constexpr uint64_t kSpoolBytes = 6000;

// One spool for the whole run, in a folder of this process's own, removed at exit.
struct RunSpool {
  RunSpool() {
    dir = std::filesystem::temp_directory_path() /
          ("graft_upload_fuzzer_" + std::to_string(::getpid()));
    auto opened = Spool::open(dir.string(), kSpoolBytes);
    if (!opened.ok()) {
      std::fprintf(stderr, "upload_fuzzer: %s\n", std::string(opened.status().message()).c_str());
      std::abort();
    }
    spool = std::move(*opened);
  }
  ~RunSpool() {
    spool.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::filesystem::path dir;
  std::unique_ptr<Spool> spool;
};

Spool& spool() {
  static RunSpool run;
  return *run.spool;
}

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "upload_fuzzer: %s\n", what);
  std::abort();
}

bool documented_error(const grpc::Status& st) {
  switch (st.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
    case grpc::StatusCode::FAILED_PRECONDITION:
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
  Spool& disk = spool();
  std::string folder;
  {
    UploadAssembler up(limits, &budget, &disk);
    bool failed = false;
    std::optional<graft::PipelineConfig> config;  // from the start message, as graftd reads it
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
      if (disk.used() > disk.limit()) broken("spool budget exceeded");
      if (up.spool_dir()) folder = up.spool_dir()->path();
      if (!failed && up.started() && !config) {
        auto c = graft::api::from_proto(up.start().config());
        if (c.ok()) {
          const auto& sets = c->verify_options.input_sets;
          if (sets.size() > static_cast<size_t>(graft::eval::kMaxInputSets))
            broken("more than 16 input sets accepted");
          if (graft::api::input_sets_bytes(sets) > graft::api::kMaxInputSetBytes)
            broken("input sets above kMaxInputSetBytes accepted");
          if (!sets.empty() &&
              (!c->verify || c->verify_options.trials != static_cast<int>(sets.size())))
            broken("input sets do not imply verification");
          const auto& calibration = c->calibration_sets;
          if (calibration.size() > static_cast<size_t>(graft::eval::kMaxInputSets))
            broken("more than 16 calibration sets accepted");
          if (graft::api::input_sets_bytes(sets) + graft::api::input_sets_bytes(calibration) >
              graft::api::kMaxInputSetBytes)
            broken("input and calibration sets above kMaxInputSetBytes accepted");
          for (const auto* list : {&sets, &calibration})
            for (const auto& set : *list)
              for (const auto& [name, t] : set)
                if (t.dtype() != onnx::TensorProto::STRING &&
                    t.bytes() != static_cast<uint64_t>(t.size()) * t.element_size())
                  broken("input tensor with inconsistent size");
          config = std::move(*c);
        } else if (c.status().code() != absl::StatusCode::kInvalidArgument ||
                   c.status().message().empty()) {
          broken("from_proto: undocumented error code");
        } else {
          failed = true;  // graftd ends the call here
        }
      }
    }
    if (!failed) {
      grpc::Status st = up.finish();
      if (!st.ok() && !documented_error(st)) broken("finish: undocumented error code");
      if (st.ok()) {
        const std::string& model = *up.model();
        if (model.size() != up.start().model_size()) broken("model size differs from announced");
        if (model.empty()) broken("empty model accepted");
        if (up.sha256() != graft::cache::sha256_hex(model)) broken("wrong sha256");
        if (model.size() > kMaxModelBytes) broken("max_model_bytes exceeded");
        uint64_t total = 0;
        for (const auto& f : up.files()) {
          auto bytes = graft::paths::read_file(f.path);
          if (!bytes.ok()) broken("spooled file missing");
          if (bytes->size() != f.size || f.received != f.size) broken("file size differs");
          if (graft::cache::sha256_hex(*bytes) != f.sha256) broken("wrong file sha256");
          total += f.size;
        }
        if (total > kSpoolBytes) broken("spool.max_bytes exceeded");
        if (config &&
            (!config->verify_options.input_sets.empty() || !config->calibration_sets.empty())) {
          auto parsed = graft::ir::Model::parse(model);
          if (parsed.ok()) {
            for (const auto& [sets, what] :
                 {std::pair{&config->verify_options.input_sets, "verify"},
                  std::pair{&config->calibration_sets, "calibration"}}) {
              absl::Status st = graft::eval::check_input_sets(**parsed, *sets, what);
              if (!st.ok() &&
                  (st.code() != absl::StatusCode::kInvalidArgument || st.message().empty()))
                broken("check_input_sets: undocumented error code");
            }
          }
        }
        // The deadline of a request with this start message, as the server computes it.
        const auto now = std::chrono::system_clock::now();
        if (graft::server::request_deadline(std::chrono::system_clock::time_point::max(),
                                            up.start().deadline_hint_ms(), 300, now) < now)
          broken("deadline in the past");
      }
    }
  }
  if (budget.used() != 0) broken("budget not released");
  if (disk.used() != 0) broken("spool not released");
  if (!folder.empty() && std::filesystem::exists(folder)) broken("spool folder left behind");
  return 0;
}
