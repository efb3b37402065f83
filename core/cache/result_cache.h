// Content-addressed cache of optimization results: (model digest, canonical pipeline config,
// optimizer version and build fingerprint) -> optimized model + report. LRU within a byte budget,
// and single-flight so that identical requests arriving together run the pipeline once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <absl/status/statusor.h>

namespace graft::cache {

struct CacheKey {
  std::string model_sha256;  // sha256_hex of the input model bytes
  std::string config;        // canonical string of the pipeline config, made by the caller
  std::string version;       // optimizer version, for humans (changes with releases only)
  // Digest of the code and toolchain that compute results (graft::build_fingerprint()): a build
  // whose passes, evaluator or request handling differ never serves another's results, even
  // under the same version.
  std::string build = {};

  // Unambiguous encoding of the four fields (each length-prefixed), used as the map key.
  std::string str() const;
};

// An external-data file a result wrote (weights the passes made), kept on disk.
struct CachedFile {
  std::string name;  // its location in the optimized model
  std::string path;  // where its bytes are on this machine
  uint64_t size = 0;
  std::string sha256;
};

struct CachedResult {
  std::string optimized_model;
  std::string report_json;
  // Files the result wrote; those it shares with the input are listed in the report only.
  std::vector<CachedFile> files;
  // Keeps `files` on disk for as long as the result lives (their folder is removed with it).
  std::shared_ptr<const void> storage;
  // sha256_hex(optimized_model), when the maker knew it (graftd's results): find_output's key.
  std::string output_sha256 = {};
  // Bytes of `files` together: what the entry counts against the disk budget.
  uint64_t disk_bytes() const;
};

class ResultCache {
 public:
  enum class Outcome {
    kHit,     // served from the cache
    kMiss,    // this call ran the computation
    kShared,  // joined another call's computation of the same key
  };

  struct Stats {
    uint64_t hits = 0;       // lookup() and get_or_compute() served from the cache
    uint64_t misses = 0;     // lookup() found nothing; get_or_compute() computed
    uint64_t shared = 0;     // get_or_compute() joined an in-flight computation
    uint64_t evictions = 0;  // entries dropped to make room
    uint64_t inserts = 0;    // entries stored (including replacements)
    uint64_t oversized = 0;  // results not stored because they exceed the whole budget
    uint64_t bytes = 0;      // charged size of the entries held (see charge())
    uint64_t entries = 0;
    uint64_t in_flight = 0;  // computations running in get_or_compute()
    uint64_t capacity_bytes = 0;
    uint64_t disk_bytes = 0;  // disk_bytes() of the entries held
    uint64_t disk_capacity_bytes = 0;
  };

  using Compute = std::function<absl::StatusOr<std::shared_ptr<const CachedResult>>()>;

  // Fixed bookkeeping charged per entry on top of its strings (list and map nodes, control
  // block): an estimate, so that many tiny entries cannot exceed the budget by far.
  static constexpr size_t kEntryOverhead = 256;

  // capacity_bytes == 0 disables storage; single-flight still applies.
  // cancel_poll: how often waiters in get_or_compute() poll their `cancelled` callback.
  // disk_capacity_bytes: a second budget, for the files of results (CachedResult::disk_bytes);
  // a result with files is stored only while both budgets hold.
  explicit ResultCache(size_t capacity_bytes,
                       std::chrono::milliseconds cancel_poll = std::chrono::milliseconds(50),
                       uint64_t disk_capacity_bytes = 0);
  ResultCache(const ResultCache&) = delete;
  ResultCache& operator=(const ResultCache&) = delete;

  // Bytes an entry counts against the budget: both strings, the key string and kEntryOverhead.
  static size_t charge(const CacheKey& key, const CachedResult& result);

  // Null on a miss. A hit becomes the most recently used entry.
  std::shared_ptr<const CachedResult> lookup(const CacheKey& key);

  // Stores (or replaces) the entry as most recently used, evicting least recently used entries
  // until it fits both budgets. A result whose charge (or disk_bytes) exceeds a whole budget is
  // not stored, and nothing is evicted for it. A null result is ignored.
  void insert(const CacheKey& key, std::shared_ptr<const CachedResult> result);

  // A held result whose output_sha256 is `sha256` (the first found when inputs share a result),
  // null if none. Not a use: the entry's recency and the hit/miss counts stay as they are.
  // Scans the entries (for reports a person asks for, not for requests).
  std::shared_ptr<const CachedResult> find_output(std::string_view sha256) const;

  // Returns the cached result if present (kHit). Otherwise, if another call is already computing
  // the same key, waits for it and returns its result or its error (kShared). Otherwise runs
  // `compute` without holding any lock, stores a successful result, and hands the result or
  // error to the calls that joined (kMiss). Errors are never stored: the next call recomputes.
  //
  // A waiter whose `cancelled` returns true (polled every cancel_poll, outside the lock) returns
  // CANCELLED; the computation goes on for the others. The computing call itself never polls
  // `cancelled`: `compute` must watch its own cancellation, and whatever error it returns reaches
  // every waiter too.
  //
  // A null result from `compute` is turned into an INTERNAL error. If `compute` throws, waiters
  // get INTERNAL and the exception propagates to this call.
  // `outcome` may be null.
  absl::StatusOr<std::shared_ptr<const CachedResult>> get_or_compute(
      const CacheKey& key, const Compute& compute, Outcome* outcome = nullptr,
      const std::function<bool()>& cancelled = nullptr);

  Stats stats() const;
  size_t capacity_bytes() const { return capacity_; }

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const CachedResult> result;
    size_t charge = 0;
    uint64_t disk = 0;
  };
  using Lru = std::list<Entry>;  // front = most recently used

  struct Flight {
    bool done = false;
    absl::StatusOr<std::shared_ptr<const CachedResult>> result;
    std::condition_variable cv;  // used with mu_
  };

  std::shared_ptr<const CachedResult> find_locked(const std::string& key);
  // Appends whatever it evicts or replaces to `released`, so that the last references to large
  // results are dropped after mu_ is unlocked.
  void insert_locked(std::string key, std::shared_ptr<const CachedResult> result,
                     std::vector<std::shared_ptr<const CachedResult>>& released);
  void finish_flight(const std::string& key, const std::shared_ptr<Flight>& flight,
                     absl::StatusOr<std::shared_ptr<const CachedResult>> result);

  const size_t capacity_;
  const uint64_t disk_capacity_;
  const std::chrono::milliseconds cancel_poll_;

  mutable std::mutex mu_;
  Lru lru_;
  // Keys view the strings inside lru_ nodes, which never move.
  std::unordered_map<std::string_view, Lru::iterator> index_;
  std::unordered_map<std::string, std::shared_ptr<Flight>> flights_;
  Stats stats_;  // entries, in_flight and capacity_bytes are filled in by stats()
};

}  // namespace graft::cache
