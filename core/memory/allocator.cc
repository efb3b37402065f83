#include "core/memory/allocator.h"

#include <malloc.h>

#include <chrono>

namespace graft::memory {

void give_back_free_memory() { ::malloc_trim(0); }

void after_large_run(uint64_t peak_bytes) {
  if (peak_bytes >= kGiveBackAfterRunBytes) give_back_free_memory();
}

HeapUsage heap_usage() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 info = ::mallinfo2();
  return {info.uordblks + info.hblkhd, info.fordblks};
#else
  return {};
#endif
}

IdleTrimmer::IdleTrimmer(std::function<std::optional<uint64_t>()> activity)
    : activity_(std::move(activity)), thread_([this] { loop(); }) {}

IdleTrimmer::~IdleTrimmer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void IdleTrimmer::loop() {
  std::optional<uint64_t> trimmed = activity_();  // nothing to give back before any call
  std::optional<uint64_t> previous = trimmed;
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; })) {
    const std::optional<uint64_t> now = activity_();
    // Idle at two ticks in a row with no call in between, and calls since the last trim.
    if (now && previous == now && trimmed != now) {
      give_back_free_memory();
      trimmed = now;
    }
    previous = now;
  }
}

}  // namespace graft::memory
