#include "core/eval/budget.h"

#include <absl/strings/str_cat.h>

namespace graft::eval {

namespace {
thread_local Budget* current = nullptr;
}  // namespace

Budget* current_budget() { return current; }

BudgetScope::BudgetScope(Budget* budget) : previous_(current) { current = budget; }
BudgetScope::~BudgetScope() { current = previous_; }

absl::Status Budget::memory_exhausted(uint64_t bytes) const {
  return absl::ResourceExhaustedError(absl::StrCat("the evaluator's memory budget of ", max_bytes_,
                                                   " bytes is exhausted (", live_bytes_,
                                                   " bytes held, ", bytes, " more asked)"));
}

absl::Status Budget::afford(double units) const {
  if (max_work_ && units > static_cast<double>(max_work_ - std::min(work_, max_work_)))
    return absl::ResourceExhaustedError(absl::StrCat("the evaluator's work budget of ", max_work_,
                                                     " operations is exhausted (", work_,
                                                     " spent, ", units, " more needed)"));
  return absl::OkStatus();
}

void Budget::poll() {
  next_poll_ = sat_add(work_, kPollUnits);
  if (max_work_ && work_ > max_work_)
    throw Stop(absl::ResourceExhaustedError(
        absl::StrCat("the evaluator's work budget of ", max_work_, " operations is exhausted")));
  if (should_continue_) {
    absl::Status st = should_continue_();
    if (!st.ok()) throw Stop(std::move(st));
  }
}

bool Charge::assign(uint64_t bytes) {
  reset();
  Budget* b = current_budget();
  if (b && !b->try_charge(bytes)) return false;
  if (b) budget_ = b->shared_from_this();
  bytes_ = bytes;  // also outside a run: a copy made inside one is charged for it
  return true;
}

void Charge::copy_from(const Charge& other) {
  if (other.bytes_ == 0) return;
  Budget* b = current_budget();
  std::shared_ptr<Budget> target = b ? b->shared_from_this() : other.budget_;
  if (target) target->charge(other.bytes_);  // throws Stop before the owner copies its bytes
  budget_ = std::move(target);
  bytes_ = other.bytes_;
}

void Charge::reset() noexcept {
  if (budget_) budget_->release(bytes_);
  budget_.reset();
  bytes_ = 0;
}

}  // namespace graft::eval
