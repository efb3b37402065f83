// Assembling an Optimize upload (OptimizeStart, then chunks) into the model and its external
// files, without a network: the gRPC handler feeds it the messages it reads, and so can a fuzzer.
// Every size the client states is checked without wrapping, and memory follows the bytes that
// arrived (never the announced size), charged to a budget shared by all uploads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <grpcpp/support/status.h>

#include "core/cache/digest.h"
#include "graft/v1/graft.pb.h"

namespace graft::server {

// The bytes of uploads held in memory by all requests together (max_inflight_bytes). Charged as
// buffers grow, released when they are freed; never more than the limit.
class InflightBudget {
 public:
  explicit InflightBudget(uint64_t limit) : limit_(limit) {}
  InflightBudget(const InflightBudget&) = delete;
  InflightBudget& operator=(const InflightBudget&) = delete;

  // Adds `bytes` if the total stays within the limit; false (nothing added) otherwise.
  bool try_acquire(uint64_t bytes);
  void release(uint64_t bytes);
  uint64_t limit() const { return limit_; }
  uint64_t used() const { return used_.load(); }
  // Called with the new total after every change (e.g. to set a gauge); set before use.
  void set_observer(std::function<void(uint64_t)> observer) { observer_ = std::move(observer); }

 private:
  void notify();

  const uint64_t limit_;
  std::atomic<uint64_t> used_{0};
  std::function<void(uint64_t)> observer_;
  std::mutex observer_mutex_;  // so the last value observed is the current one
};

struct UploadLimits {
  // The model itself (held in memory, parsed whole); external-data files are bounded by the
  // spool's budget instead.
  uint64_t max_model_bytes = 2147483647;
  // More external files than any real model has; each costs bookkeeping beyond its name.
  size_t max_external_files = 10000;
  // A buffer's first allocation (later ones double it, up to the announced size).
  uint64_t first_buffer_bytes = 64 << 10;
};

// An upload buffer whose capacity grows with the data (doubling, capped by the announced size)
// and is charged to an InflightBudget (if any) for as long as it exists. Move-only.
class ChargedBuffer {
 public:
  ChargedBuffer(InflightBudget* budget, uint64_t announced, uint64_t first_bytes)
      : budget_(budget), announced_(announced), first_bytes_(first_bytes) {}
  ChargedBuffer(ChargedBuffer&& other) noexcept;
  ChargedBuffer& operator=(ChargedBuffer&&) = delete;
  ChargedBuffer(const ChargedBuffer&) = delete;
  ~ChargedBuffer();
  // Appends `data`, which must fit in the announced size; false, with nothing appended, when
  // the budget cannot cover the growth.
  bool append(std::string_view data);
  const std::string& bytes() const { return bytes_; }
  uint64_t announced() const { return announced_; }
  uint64_t charged() const { return charged_; }

 private:
  InflightBudget* budget_;
  uint64_t announced_;
  uint64_t first_bytes_;
  uint64_t charged_ = 0;  // == bytes_.capacity() once anything was appended
  std::string bytes_;
};

// An external-data file of the upload, written to the spool as its chunks arrive.
struct UploadedFile {
  std::string name;   // its location, as the tensors name it
  std::string path;   // where its bytes are, in the upload's spool folder
  uint64_t size = 0;  // announced
  uint64_t received = 0;
  std::string expected_sha256;  // from OptimizeStart, may be empty
  std::string sha256;           // of what arrived, after a successful finish()
};

class SpoolDir;
class Spool;

class UploadAssembler {
 public:
  // `budget` may be null (no shared limit); it must outlive the assembler and every copy of
  // model(). External-data files go to a folder of `spool`; without one (null), an upload
  // declaring any is refused (FAILED_PRECONDITION).
  UploadAssembler(const UploadLimits& limits, InflightBudget* budget, Spool* spool = nullptr);
  ~UploadAssembler();
  UploadAssembler(const UploadAssembler&) = delete;
  UploadAssembler& operator=(const UploadAssembler&) = delete;

  // One message of the stream: the first must be OptimizeStart, the rest chunks. An error is
  // final (later calls return FAILED_PRECONDITION): INVALID_ARGUMENT for a malformed stream or a
  // bad name, RESOURCE_EXHAUSTED for sizes above max_model_bytes, a full in-flight budget or a
  // full spool (the message names the limit), or a failed spool write. `msg` may be moved from.
  grpc::Status add(v1::OptimizeRequest& msg);
  // The stream ended: every announced byte arrived, the model is not empty, and its sha256 (and
  // each file's) matches the expected one when given.
  grpc::Status finish();

  bool started() const { return started_; }
  const v1::OptimizeStart& start() const { return start_; }
  // The model's bytes. The budget stays charged for them until the last copy of the pointer
  // is gone (a worker may still hold one after the call ended).
  std::shared_ptr<const std::string> model() const { return model_; }
  // External-data files in the order of OptimizeStart.external_files.
  const std::vector<UploadedFile>& files() const { return files_; }
  // The spool folder holding the files (null without files); it is removed when the last
  // reference goes, so a worker still reading them keeps one.
  std::shared_ptr<SpoolDir> spool_dir() const { return dir_; }
  // Drops this assembler's reference to the spool folder (removed once no worker holds it).
  void release_files() { dir_.reset(); }
  // Lowercase hex sha256 of the model, after a successful finish().
  const std::string& sha256() const { return sha256_; }
  // The digest that keys the result (cache::input_digest of the model and its files), after a
  // successful finish(); the model's sha256 when it has no external-data files.
  const std::string& input_digest() const { return input_digest_; }

 private:
  grpc::Status add_start(v1::OptimizeStart& start);
  grpc::Status add_chunk(const v1::Chunk& chunk);
  grpc::Status budget_full() const;
  grpc::Status write_file(size_t index, std::string_view data);
  void close_file();

  UploadLimits limits_;
  InflightBudget* budget_;
  bool started_ = false;
  bool failed_ = false;
  v1::OptimizeStart start_;
  std::shared_ptr<const std::string> model_;  // the bytes of a ChargedBuffer it owns
  ChargedBuffer* model_buffer_ = nullptr;
  std::map<std::string, size_t, std::less<>> file_index_;
  std::vector<UploadedFile> files_;
  std::vector<std::unique_ptr<cache::Sha256>> file_digests_;  // made at a file's first chunk
  Spool* spool_;
  std::shared_ptr<SpoolDir> dir_;
  int fd_ = -1;  // the file being written, kept open while its chunks follow
  size_t fd_index_ = 0;
  cache::Sha256 digest_;
  std::string sha256_;
  std::string input_digest_;
};

// When a request must be done: the call's own deadline, else `hint_ms` after `now` when the
// client gave a hint, else `default_seconds` after `now`. A time too far away to represent is
// time_point::max() (no deadline), never an overflowed one.
std::chrono::system_clock::time_point request_deadline(
    std::chrono::system_clock::time_point call_deadline, uint64_t hint_ms, double default_seconds,
    std::chrono::system_clock::time_point now);

}  // namespace graft::server
