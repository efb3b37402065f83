// Ends gRPC server calls that are still running at a deadline of the server's choosing.
//
// A synchronous handler blocked in Read() waits for as long as the client keeps the stream open:
// an Optimize call without a deadline whose client announced a model and then went quiet would
// hold a handler thread and an admission slot forever. The watchdog ends such a call from its own
// thread with a status (which the client receives); the blocked Read() then returns false.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include <grpcpp/grpcpp.h>

namespace graft::server {

class CallWatchdog {
 public:
  using TimePoint = std::chrono::system_clock::time_point;

  CallWatchdog();
  ~CallWatchdog();
  CallWatchdog(const CallWatchdog&) = delete;
  CallWatchdog& operator=(const CallWatchdog&) = delete;

  // Ends `context`'s call with `status` at `deadline` unless release() comes first. The context
  // must stay alive until release() returns.
  uint64_t watch(grpc::ServerContext* context, TimePoint deadline, grpc::Status status);
  // Stops watching; true if the watchdog ended the call (then its status is what the client
  // received, and what the handler should report).
  bool release(uint64_t id);

 private:
  struct Entry {
    grpc::ServerContext* context;
    TimePoint deadline;
    grpc::Status status;
    bool fired = false;
  };
  void loop();

  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  uint64_t next_id_ = 1;
  std::map<uint64_t, Entry> entries_;
  std::set<std::pair<TimePoint, uint64_t>> pending_;  // entries not fired yet, soonest first
  std::thread thread_;
};

}  // namespace graft::server
