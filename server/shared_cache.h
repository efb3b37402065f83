// The optional shared tier of the result cache: entries in a Redis that all replicas use, so a
// result computed by one replica is a hit on the others. Behind the local LRU (lookup order:
// local, shared, compute).
//
// Redis is an optimisation, never a dependency: every call has a connect and a command timeout,
// a failure marks Redis down and it is tried again only after a backoff (doubling from
// retry_min to retry_max; one probe at a time), and while it is down lookups and writes skip it
// at once. Writes run on one background thread behind a bounded queue: when it is full, the
// write is dropped. Replies are untrusted: their size is bounded before they are buffered, and
// an entry is served only when its chunks match its manifest's sizes and sha256 (a corrupt or
// incomplete entry is a miss).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <absl/status/statusor.h>

#include "core/cache/result_cache.h"

struct redisContext;

namespace graft::server {

struct RedisAddress {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string username;  // empty: AUTH password (Redis < 6 style)
  std::string password;  // empty: no AUTH
};

// redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]; HOST may be [IPv6].
absl::StatusOr<RedisAddress> parse_redis_url(const std::string& url);

struct SharedCacheOptions {
  std::string url;
  std::string key_prefix = "graft:";
  std::chrono::seconds ttl{86400};
  uint64_t max_entry_bytes = 256ull << 20;
  uint64_t chunk_bytes = 4ull << 20;
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds command_timeout{1000};
  std::chrono::milliseconds retry_min{1000};
  std::chrono::milliseconds retry_max{30000};
  size_t write_queue = 4;
  // Lookups running at once; more are skipped (kBusy). Each holds up to max_entry_bytes while
  // it assembles an entry, so this bounds their memory.
  int max_concurrent_reads = 16;
};

class SharedCache {
 public:
  // What a lookup found.
  enum class Lookup {
    kHit,
    kMiss,        // no manifest
    kError,       // Redis failed, timed out, or is marked down
    kCorrupt,     // manifest or chunks malformed, or bytes that do not match their sha256
    kIncomplete,  // a chunk the manifest names is gone (evicted or expired)
    kBusy,        // max_concurrent_reads lookups were already running: skipped
  };
  enum class Write {
    kStored,
    kError,      // Redis failed, timed out, or is marked down
    kDropped,    // the write queue was full
    kOversized,  // larger than max_entry_bytes: not stored
  };
  // Called from any thread; must not call back into the SharedCache.
  struct Observer {
    std::function<void(Lookup)> lookup;
    std::function<void(Write)> write;
    std::function<void(bool up)> state;
  };
  static const char* name(Lookup result);
  static const char* name(Write result);

  // Probes Redis once (bounded by connect_timeout + command_timeout) so the state is known at
  // start-up; a Redis that is down is not an error.
  static absl::StatusOr<std::unique_ptr<SharedCache>> create(SharedCacheOptions options,
                                                             Observer observer);
  ~SharedCache();  // pending writes are dropped
  SharedCache(const SharedCache&) = delete;
  SharedCache& operator=(const SharedCache&) = delete;

  // The entry, or null. Stops early at `deadline` (the request's), counting an error.
  std::shared_ptr<const cache::CachedResult> get(const cache::CacheKey& key,
                                                 std::chrono::system_clock::time_point deadline,
                                                 Lookup* outcome = nullptr);
  // Queues a write; returns at once.
  void put_async(const cache::CacheKey& key, std::shared_ptr<const cache::CachedResult> result);
  // Waits until the write queue is empty and no write is running (tests).
  void flush();

  bool up() const { return up_; }
  const SharedCacheOptions& options() const { return options_; }
  // The URL without its password, for logs.
  const std::string& display_url() const { return display_url_; }

 private:
  class Connection;
  SharedCache(SharedCacheOptions options, RedisAddress address, Observer observer);

  // A connection to use, or null when Redis is down and not due for a retry (or its connect
  // failed, which marks it down).
  std::unique_ptr<Connection> acquire();
  void release(std::unique_ptr<Connection> connection);
  void mark_up();
  void mark_down(const std::string& reason);
  void count(Lookup result);
  void count(Write result);
  std::shared_ptr<const cache::CachedResult> read(Connection& c, const cache::CacheKey& key,
                                                  std::chrono::steady_clock::time_point deadline,
                                                  Lookup* outcome, bool* drop, std::string* error);
  bool write(Connection& c, const cache::CacheKey& key, const cache::CachedResult& result,
             std::string* error);
  void writer_loop();

  const SharedCacheOptions options_;
  const RedisAddress address_;
  const Observer observer_;
  std::string display_url_;

  std::mutex state_mu_;
  std::atomic<bool> up_{false};
  bool probing_ = false;  // a connection attempt to a down Redis is under way
  std::chrono::steady_clock::time_point retry_at_{};
  std::chrono::milliseconds backoff_{0};
  std::vector<std::unique_ptr<Connection>> idle_;  // guarded by state_mu_
  std::atomic<int> reads_{0};

  struct PendingWrite {
    cache::CacheKey key;
    std::shared_ptr<const cache::CachedResult> result;
  };
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<PendingWrite> queue_;
  bool writing_ = false;
  std::atomic<bool> stopping_{false};  // written under queue_mu_; read by write() without it
  std::thread writer_;
};

}  // namespace graft::server
