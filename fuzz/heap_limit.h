// Bounds the heap a fuzz input may grow: the evaluator and the pipeline promise that memory
// follows their configured budgets (per-tensor and live-byte caps, folding caps), so a run that
// holds far more than that at once has found memory that escapes the accounting (e.g. tensors the
// evaluator keeps but does not count). Tracked through the sanitizer allocator's hooks: the net
// bytes allocated since the guard was created; crossing the limit aborts with the allocation's
// stack, which libFuzzer saves as a crash. Single-threaded use (the pipeline runs on the calling
// thread).
#pragma once

#include <sanitizer/allocator_interface.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace graft::fuzz {

class HeapLimit {
 public:
  explicit HeapLimit(int64_t limit_bytes) {
    static const bool installed = [] {
      return __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free) != 0;
    }();
    (void)installed;
    limit_ = limit_bytes;
    net_ = 0;
    active_ = true;
  }
  ~HeapLimit() { active_ = false; }
  HeapLimit(const HeapLimit&) = delete;
  HeapLimit& operator=(const HeapLimit&) = delete;

 private:
  static void on_malloc(const volatile void*, size_t size) {
    if (!active_) return;
    net_ += static_cast<int64_t>(size);
    if (net_ > limit_) {
      active_ = false;  // the report below allocates
      std::fprintf(stderr,
                   "FUZZ PROPERTY FAILED: one input holds more than %lld bytes of heap at once "
                   "(memory outside the configured budgets)\n",
                   static_cast<long long>(limit_));
      std::abort();
    }
  }
  static void on_free(const volatile void* p) {
    // Memory allocated before the guard and freed during it only makes the count lower.
    if (active_ && p) net_ -= static_cast<int64_t>(__sanitizer_get_allocated_size(p));
  }

  static inline bool active_ = false;
  static inline int64_t net_ = 0;
  static inline int64_t limit_ = 0;
};

}  // namespace graft::fuzz
