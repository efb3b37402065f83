#include "server/allocator.h"

#include <malloc.h>

#include <chrono>

namespace graft::server {

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
      ::malloc_trim(0);
      trimmed = now;
    }
    previous = now;
  }
}

}  // namespace graft::server
