#include "server/worker_pool.h"

#include <boost/asio/post.hpp>

namespace graft::server {

WorkerPool::WorkerPool(size_t workers, size_t queue_length)
    : workers_(workers), queue_length_(queue_length), pool_(workers) {}

WorkerPool::~WorkerPool() { join(); }

bool WorkerPool::try_submit(std::function<void()> job) {
  // Reserve a queue slot first so concurrent submitters cannot overshoot the bound.
  size_t queued = queued_.load();
  do {
    if (queued >= queue_length_ + workers_ - std::min(workers_, running_.load())) return false;
  } while (!queued_.compare_exchange_weak(queued, queued + 1));
  boost::asio::post(pool_, [this, job = std::move(job)] {
    --queued_;
    ++running_;
    job();
    --running_;
  });
  return true;
}

void WorkerPool::join() { pool_.join(); }

}  // namespace graft::server
