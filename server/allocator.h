// How graftd uses glibc's allocator, so that memory freed after requests goes back to the
// kernel instead of staying resident in an idle process.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace graft::server {

// Fixes glibc's mmap threshold (call first in main, before any thread starts): otherwise it
// rises to the size of every mmapped block freed (up to 32 MiB), and after the first large
// request, blocks of upload, tensor and result size are carved from the per-thread arenas and
// kept there when freed. Above the fixed threshold (2 MiB: a gRPC chunk and its framing stay
// below) blocks are mmapped and unmapped when freed.
void configure_allocator();

// Returns the arenas' free memory (fragments between live blocks, below the mmap threshold) to
// the kernel with malloc_trim once graftd has been idle for a second after serving calls: never
// on a request's path, and once per idle period.
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
