// Gives the memory freed after requests back to the kernel, so an idle graftd does not stay at
// the size of its last burst.
//
// glibc serves every block below its mmap threshold from per-thread arenas and keeps what they
// free; it raises the threshold to the size of every mmapped block freed (up to 32 MiB), so
// upload, model, tensor and result blocks end up in the arenas and stay resident when freed. After
// a burst of requests an idle graftd held three times its live memory (bench/graft_soak). A fixed 2
// MiB threshold returned blocks as they were freed, but its mmap/munmap and page faults cost about
// a quarter of the soak's throughput; trimming once idle costs nothing while requests run.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace graft::server {

// Returns the arenas' free memory to the kernel with malloc_trim once graftd has been idle for a
// second after serving calls: never on a request's path, and once per idle period.
class IdleTrimmer {
 public:
  // `activity` returns a counter that changes whenever a call starts, or nullopt while calls or
  // pipeline jobs are running.
  explicit IdleTrimmer(std::function<std::optional<uint64_t>()> activity);
  ~IdleTrimmer();
  IdleTrimmer(const IdleTrimmer&) = delete;
  IdleTrimmer& operator=(const IdleTrimmer&) = delete;

 private:
  void loop();

  std::function<std::optional<uint64_t>()> activity_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace graft::server
