// A fixed pool of pipeline workers (Boost.Asio) with a bounded queue: work is rejected at once
// when the queue is full instead of piling up behind busy workers.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>

#include <boost/asio/thread_pool.hpp>

namespace graft::server {

class WorkerPool {
 public:
  WorkerPool(size_t workers, size_t queue_length);
  ~WorkerPool();

  // Queues `job`; false when `queue_length` jobs are already waiting for a worker.
  bool try_submit(std::function<void()> job);
  size_t workers() const { return workers_; }
  size_t queued() const { return queued_.load(); }
  size_t running() const { return running_.load(); }
  // Stops taking work and waits for queued and running jobs.
  void join();

 private:
  size_t workers_;
  size_t queue_length_;
  std::atomic<size_t> queued_{0};
  std::atomic<size_t> running_{0};
  boost::asio::thread_pool pool_;
};

}  // namespace graft::server
