// What one evaluator run may spend: bytes of memory held at once and units of work, with the
// request's deadline and cancellation polled while it works.
//
// Every byte the evaluator materialises for a run is charged to that run's Budget: tensors
// (made, read from initializers or copied: Loop and Scan outputs, loop state, environment
// copies) and the scratch vectors of kernels. Work is charged by the kernels' loops (one unit is
// a multiply-add or an element written). Crossing a limit, or a poll that says stop, unwinds the
// run with a `Stop` exception that never leaves the evaluator: the entry points (run_model,
// run_kernel) turn it into the status it carries. So a crafted model can neither allocate past
// the budget nor keep a worker busy long after its deadline: kernels poll every
// `kPollUnits` of work, a few milliseconds at most.
//
// The budget of the current run is found through a thread-local pointer set by `BudgetScope`,
// so tensor copies and allocators deep inside kernels are charged without plumbing.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <vector>

#include <absl/status/status.h>

#include "core/ir/saturating.h"

namespace graft::eval {

// Unwinds an evaluator run; carries the status the run ends with.
class Stop : public std::exception {
 public:
  explicit Stop(absl::Status status) : status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }
  const char* what() const noexcept override { return "evaluator run stopped"; }

 private:
  absl::Status status_;
};

class Budget : public std::enable_shared_from_this<Budget> {
 public:
  // Work between two polls of `should_continue`: a few milliseconds of the slowest kernel loop.
  static constexpr uint64_t kPollUnits = uint64_t{1} << 20;

  // 0 means no limit. `should_continue` (may be empty) is polled every kPollUnits of work; a
  // non-OK status stops the run with that status. Budgets are shared: tensors and scratch
  // vectors keep theirs alive until they release what they hold.
  static std::shared_ptr<Budget> make(uint64_t max_bytes, uint64_t max_work,
                                      std::function<absl::Status()> should_continue = {}) {
    return std::shared_ptr<Budget>(new Budget(max_bytes, max_work, std::move(should_continue)));
  }

  // Charges `bytes`; false (nothing charged) when that would pass the limit.
  bool try_charge(uint64_t bytes) {
    if (max_bytes_ && (bytes > max_bytes_ || live_bytes_ > max_bytes_ - bytes)) return false;
    live_bytes_ += bytes;
    if (live_bytes_ > peak_bytes_) peak_bytes_ = live_bytes_;
    return true;
  }
  // Charges `bytes` or throws Stop(ResourceExhausted).
  void charge(uint64_t bytes) {
    if (!try_charge(bytes)) throw Stop(memory_exhausted(bytes));
  }
  void release(uint64_t bytes) noexcept { live_bytes_ = sat_sub(live_bytes_, bytes); }

  // Adds `units` of work; throws Stop when the work limit is passed or a poll says stop.
  void spend(uint64_t units) {
    work_ = sat_add(work_, units);
    if (work_ >= next_poll_) poll();
  }
  // Fails (ResourceExhausted) at once if `units` more work would pass the limit: a kernel that
  // knows its cost up front refuses before it starts.
  absl::Status afford(double units) const;
  // The deadline/cancellation poll and the work limit, checked now.
  void poll();

  uint64_t live_bytes() const { return live_bytes_; }
  uint64_t peak_bytes() const { return peak_bytes_; }
  uint64_t work() const { return work_; }
  uint64_t max_bytes() const { return max_bytes_; }
  uint64_t max_work() const { return max_work_; }

  absl::Status memory_exhausted(uint64_t bytes) const;

 private:
  Budget(uint64_t max_bytes, uint64_t max_work, std::function<absl::Status()> should_continue)
      : max_bytes_(max_bytes), max_work_(max_work), should_continue_(std::move(should_continue)) {}

  uint64_t max_bytes_;
  uint64_t max_work_;
  std::function<absl::Status()> should_continue_;
  uint64_t live_bytes_ = 0;
  uint64_t peak_bytes_ = 0;
  uint64_t work_ = 0;
  uint64_t next_poll_ = kPollUnits;
};

// The budget charged by allocations on this thread (null: none, nothing is charged).
Budget* current_budget();

// Makes `budget` current on this thread for the scope's lifetime (restoring the previous one).
class BudgetScope {
 public:
  explicit BudgetScope(Budget* budget);
  ~BudgetScope();
  BudgetScope(const BudgetScope&) = delete;
  BudgetScope& operator=(const BudgetScope&) = delete;

 private:
  Budget* previous_;
};

// Work done in a kernel loop, charged to the current budget (if any).
inline void spend_work(uint64_t units) {
  if (Budget* b = current_budget()) b->spend(units);
}

// For a long loop whose work was charged up front (make_output charges the elements it
// writes): polls the current budget once every 2^16 iterations.
inline void poll_every(int64_t i) {
  if ((i & 0xFFFF) == 0xFFFF)
    if (Budget* b = current_budget()) b->poll();
}

// Bytes held on behalf of a budget: charged when made or copied, released when destroyed. A
// copy is charged to the current budget (or, outside any run, to the source's), and throws
// Stop before anything is copied when the budget is full. Tensors hold one of these.
class Charge {
 public:
  Charge() = default;
  // Charges `bytes` to the current budget; false when it is full.
  bool assign(uint64_t bytes);
  Charge(const Charge& other) { copy_from(other); }
  Charge& operator=(const Charge& other) {
    if (this != &other) {
      Charge fresh(other);
      swap(fresh);
    }
    return *this;
  }
  Charge(Charge&& other) noexcept { swap(other); }
  Charge& operator=(Charge&& other) noexcept {
    Charge old(std::move(*this));
    swap(other);
    return *this;
  }
  ~Charge() { reset(); }
  void reset() noexcept;
  void swap(Charge& other) noexcept {
    budget_.swap(other.budget_);
    std::swap(bytes_, other.bytes_);
  }

 private:
  void copy_from(const Charge& other);
  std::shared_ptr<Budget> budget_;
  uint64_t bytes_ = 0;
};

// An allocator charging the current budget, for kernel scratch vectors; throws Stop when full.
template <typename T>
struct ChargedAllocator {
  using value_type = T;
  // Charges the budget current when the container is made (none outside a run).
  ChargedAllocator() : budget(current_budget() ? current_budget()->shared_from_this() : nullptr) {}
  template <typename U>
  ChargedAllocator(const ChargedAllocator<U>& other) noexcept : budget(other.budget) {}

  T* allocate(size_t n) {
    if (n > std::numeric_limits<size_t>::max() / sizeof(T)) throw std::bad_alloc();
    if (budget) budget->charge(n * sizeof(T));
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) noexcept {
    std::allocator<T>().deallocate(p, n);
    if (budget) budget->release(n * sizeof(T));
  }
  template <typename U>
  bool operator==(const ChargedAllocator<U>& other) const noexcept {
    return budget == other.budget;
  }
  template <typename U>
  bool operator!=(const ChargedAllocator<U>& other) const noexcept {
    return !(*this == other);
  }
  // Containers that copy or move keep charging the budget that paid for the memory.
  using propagate_on_container_copy_assignment = std::true_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  std::shared_ptr<Budget> budget;
};

// Kernel scratch: a vector whose memory counts against the current run's budget.
template <typename T>
using Scratch = std::vector<T, ChargedAllocator<T>>;

}  // namespace graft::eval
