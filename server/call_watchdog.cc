#include "server/call_watchdog.h"

#include <grpc/grpc.h>

namespace graft::server {

CallWatchdog::CallWatchdog() : thread_([this] { loop(); }) {}

CallWatchdog::~CallWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

uint64_t CallWatchdog::watch(grpc::ServerContext* context, TimePoint deadline,
                             grpc::Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  entries_.emplace(id, Entry{context, deadline, std::move(status)});
  const bool soonest = pending_.empty() || deadline < pending_.begin()->first;
  pending_.emplace(deadline, id);
  if (soonest) wake_.notify_all();
  return id;
}

bool CallWatchdog::release(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  const bool fired = it->second.fired;
  pending_.erase({it->second.deadline, id});
  entries_.erase(it);
  return fired;
}

void CallWatchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (pending_.empty()) {
      wake_.wait(lock);
      continue;
    }
    const auto [deadline, id] = *pending_.begin();
    if (std::chrono::system_clock::now() < deadline) {
      wake_.wait_until(lock, deadline);
      continue;
    }
    pending_.erase(pending_.begin());
    Entry& e = entries_.at(id);
    e.fired = true;
    // With a status (unlike ServerContext::TryCancel), so the client learns why: gRPC sends it
    // as the call's trailers. Thread-safe; the entry's context is alive until release().
    grpc_call_cancel_with_status(e.context->c_call(),
                                 static_cast<grpc_status_code>(e.status.error_code()),
                                 e.status.error_message().c_str(), nullptr);
  }
}

}  // namespace graft::server
