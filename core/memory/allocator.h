// Gives the memory Graft frees back to the kernel, in graftd and in the CLI alike, so that
// neither stays at the size of its largest request or evaluator run.
//
// glibc serves every block below its mmap threshold from its arenas (one per thread that
// allocates: graftd's workers each have their own) and keeps what is freed there; it raises the
// threshold to the size of every mmapped block freed (up to 32 MiB), so upload, model, tensor and
// result blocks end up in the arenas and stay resident when freed. An arena gives memory back by
// itself only from the top of its heaps, so blocks freed below one still in use stay until
// malloc_trim. Two moments call it:
//  - after an evaluator run that held at least kGiveBackAfterRunBytes (verification of a large
//    model, an allocation bomb stopped by its budget): the run freed that much at once, and
//    without a trim it stayed resident for as long as graftd was busy (a loaded graftd is never
//    idle), or under the CLI's next large allocations;
//  - once graftd has been idle for a second (IdleTrimmer), for everything else requests freed.
// A fixed 2 MiB mmap threshold returned blocks as they were freed, but its mmap/munmap and page
// faults cost about a quarter of bench/graft_soak's throughput; trimming at these moments costs
// one pass over the arenas' free blocks.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace graft::memory {

// An evaluator run that held this much at its peak gives free memory back when it ends.
inline constexpr uint64_t kGiveBackAfterRunBytes = 64ull << 20;

// Returns the allocator's free memory to the kernel (malloc_trim on every arena). Takes each
// arena's lock in turn while it walks that arena's free blocks.
void give_back_free_memory();

// After a run whose peak was `peak_bytes`: gives free memory back when it was large.
void after_large_run(uint64_t peak_bytes);

// What the C heap holds: bytes handed out (arenas and mmapped blocks) and bytes free in the
// arenas (resident, or given back by a trim). Both 0 where the allocator cannot tell.
struct HeapUsage {
  uint64_t in_use = 0;
  uint64_t free = 0;
};
HeapUsage heap_usage();

// Returns the arenas' free memory to the kernel once the process has been idle for a second
// after serving calls: never on a request's path, and once per idle period.
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

}  // namespace graft::memory
