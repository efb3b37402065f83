// The result cache: key encoding, LRU order within a byte budget, stats, and single-flight
// (one computation per key for concurrent callers, errors shared but not stored, waiters that
// give up). Timeouts below are hang guards only, never performance assertions.
#include "core/cache/result_cache.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <absl/status/status.h>
#include <gtest/gtest.h>

#include "core/cache/digest.h"

namespace graft::cache {
namespace {

using namespace std::chrono_literals;
using Result = std::shared_ptr<const CachedResult>;
using Outcome = ResultCache::Outcome;

constexpr auto kHangGuard = 30s;

CacheKey key_for(const std::string& name) {
  return CacheKey{sha256_hex(name), "level=2;passes=", "0.1.0"};
}

Result make_result(size_t model_bytes, const std::string& report = "{}", char fill = 'm') {
  return std::make_shared<const CachedResult>(
      CachedResult{std::string(model_bytes, fill), report, {}, {}});
}

// Polls `pred` until it holds or the hang guard expires.
bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout = kHangGuard) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

// A one-shot gate with a timed wait (std::latch has none).
class Gate {
 public:
  void open() {
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  bool wait_for(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Turns a deadlock in the code under test into a prompt failure instead of a hung test binary:
// threads blocked forever cannot be joined, so the only way out is to end the process.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::milliseconds timeout = 2 * kHangGuard)
      : thread_([this, timeout] {
          std::unique_lock lock(mu_);
          if (!cv_.wait_for(lock, timeout, [&] { return done_; })) {
            std::fprintf(stderr, "Watchdog: %s hung (deadlock in the cache?)\n",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

// Charge of an entry for key_for(...) and a result with `model_bytes`, from the documented formula.
size_t expected_charge(size_t model_bytes, const std::string& report = "{}") {
  return model_bytes + report.size() + key_for("x").str().size() + ResultCache::kEntryOverhead;
}

TEST(CacheKeyTest, FieldBoundariesCannotBeConfused) {
  // Each group concatenates to the same bytes, with or without a one-character separator.
  std::vector<CacheKey> keys = {
      {"ab", "c", "d"},     {"a", "bc", "d"},     {"a", "b", "cd"},     {"abcd", "", ""},
      {"a;b", "c", "d"},    {"a", "b;c", "d"},    {"a", ";b;c", "d"},   {"a", "b;c", ";d"},
      {"a|b", "c", "d"},    {"a", "b|c", "d"},    {"a\nb", "c", "d"},   {"a", "b\nc", "d"},
      {"a;:b", "c", "d"},   {"a", "b;:c", "d"},   {"1:a;", "", ""},     {"", "1:a;", ""},
      {"a", "", ""},        {"", "a", ""},        {"", "", "a"},        {"", "", "", "a"},
      {"a", "b", "c", "d"}, {"ab", "", "c", "d"}, {"a", "b", "", "cd"},
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t j = i + 1; j < keys.size(); ++j) {
      EXPECT_NE(keys[i].str(), keys[j].str()) << i << " vs " << j;
    }
  }
  // And the cache keeps them apart.
  ResultCache cache(1 << 20);
  for (size_t i = 0; i < keys.size(); ++i) {
    cache.insert(keys[i], make_result(1, std::to_string(i)));
  }
  EXPECT_EQ(cache.stats().entries, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    Result r = cache.lookup(keys[i]);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->report_json, std::to_string(i));
  }
}

TEST(CacheKeyTest, EveryFieldMatters) {
  CacheKey base{"digest", "config", "version", "fingerprint"};
  CacheKey other_model = base, other_config = base, other_version = base, other_build = base;
  other_model.model_sha256 = "digest2";
  other_config.config = "config2";
  other_version.version = "version2";
  // Same version, other code (a pass changed): its results are not this build's.
  other_build.build = "fingerprint2";
  ResultCache cache(1 << 20);
  cache.insert(base, make_result(10));
  EXPECT_NE(cache.lookup(base), nullptr);
  EXPECT_EQ(cache.lookup(other_model), nullptr);
  EXPECT_EQ(cache.lookup(other_config), nullptr);
  EXPECT_EQ(cache.lookup(other_version), nullptr);
  EXPECT_EQ(cache.lookup(other_build), nullptr);
  EXPECT_NE(base.str(), other_build.str());
}

TEST(ResultCacheTest, ChargeCountsBothStringsTheKeyAndTheOverhead) {
  CacheKey key{"abc", "level=1", "v"};
  CachedResult result{std::string(1000, 'x'), std::string(200, 'r'), {}, {}};
  EXPECT_EQ(ResultCache::charge(key, result), 1000 + 200 + key.str().size() + 256u);
  EXPECT_GT(key.str().size(), key.model_sha256.size() + key.config.size() + key.version.size());

  ResultCache cache(1 << 20);
  cache.insert(key, std::make_shared<const CachedResult>(result));
  EXPECT_EQ(cache.stats().bytes, ResultCache::charge(key, result));
}

TEST(ResultCacheTest, FindsAHeldResultByItsOutputDigestWithoutUsingIt) {
  const size_t c = expected_charge(1000);
  ResultCache cache(2 * c);
  auto with_sha = [](const std::string& sha) {
    auto r = std::make_shared<CachedResult>(*make_result(1000));
    r->output_sha256 = sha;
    return std::shared_ptr<const CachedResult>(std::move(r));
  };
  Result a = with_sha("aaaa"), b = with_sha("bbbb");
  cache.insert(key_for("A"), a);
  cache.insert(key_for("B"), b);
  EXPECT_EQ(cache.find_output("aaaa").get(), a.get());
  EXPECT_EQ(cache.find_output("bbbb").get(), b.get());
  EXPECT_EQ(cache.find_output("cccc"), nullptr);
  EXPECT_EQ(cache.find_output(""), nullptr);  // results made without a digest are never found
  EXPECT_EQ(cache.stats().hits, 0u);
  EXPECT_EQ(cache.stats().misses, 0u);
  // Not a use: A stays the least recently used and goes first.
  cache.insert(key_for("C"), with_sha("cccc"));
  EXPECT_EQ(cache.find_output("aaaa"), nullptr);
  EXPECT_NE(cache.find_output("bbbb"), nullptr);
}

TEST(ResultCacheTest, HitReturnsTheStoredObjectNotACopy) {
  ResultCache cache(1 << 20);
  Result stored = make_result(4096);
  cache.insert(key_for("a"), stored);
  Result hit = cache.lookup(key_for("a"));
  EXPECT_EQ(hit.get(), stored.get());
  EXPECT_EQ(cache.lookup(key_for("a")).get(), stored.get());
}

TEST(ResultCacheTest, EvictsLeastRecentlyUsed) {
  const size_t c = expected_charge(1000);
  ResultCache cache(3 * c);
  cache.insert(key_for("A"), make_result(1000));
  cache.insert(key_for("B"), make_result(1000));
  cache.insert(key_for("C"), make_result(1000));
  EXPECT_EQ(cache.stats().entries, 3u);
  EXPECT_EQ(cache.stats().bytes, 3 * c);
  EXPECT_EQ(cache.stats().evictions, 0u);

  // Recency, oldest first: B, C, A.
  ASSERT_NE(cache.lookup(key_for("A")), nullptr);
  cache.insert(key_for("D"), make_result(1000));  // evicts B
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.stats().entries, 3u);
  EXPECT_EQ(cache.lookup(key_for("B")), nullptr);

  // Recency, oldest first: C, A, D.
  cache.insert(key_for("E"), make_result(1000));  // evicts C
  EXPECT_EQ(cache.stats().evictions, 2u);
  EXPECT_EQ(cache.lookup(key_for("C")), nullptr);
  EXPECT_NE(cache.lookup(key_for("A")), nullptr);
  EXPECT_NE(cache.lookup(key_for("D")), nullptr);
  EXPECT_NE(cache.lookup(key_for("E")), nullptr);
  EXPECT_EQ(cache.stats().bytes, 3 * c);
}

TEST(ResultCacheTest, ReinsertingMakesAnEntryMostRecent) {
  const size_t c = expected_charge(10);
  ResultCache cache(2 * c);
  cache.insert(key_for("A"), make_result(10));
  cache.insert(key_for("B"), make_result(10));
  cache.insert(key_for("A"), make_result(10));  // replaces A, now most recent
  EXPECT_EQ(cache.stats().entries, 2u);
  EXPECT_EQ(cache.stats().bytes, 2 * c);
  cache.insert(key_for("C"), make_result(10));  // evicts B
  EXPECT_EQ(cache.lookup(key_for("B")), nullptr);
  EXPECT_NE(cache.lookup(key_for("A")), nullptr);
  EXPECT_NE(cache.lookup(key_for("C")), nullptr);
}

TEST(ResultCacheTest, LargeEntryEvictsAsManyAsNeededAndNoMore) {
  const size_t s = expected_charge(100);
  // Room for four small entries plus less than one more.
  ResultCache cache(4 * s + s / 2);
  for (const char* name : {"S1", "S2", "S3", "S4"}) cache.insert(key_for(name), make_result(100));
  EXPECT_EQ(cache.stats().bytes, 4 * s);

  // A model sized so that its entry is charged exactly 2 * s: S1 and S2 must go, S3 and S4 stay.
  const size_t big_model = 2 * s - (expected_charge(0));
  ASSERT_EQ(expected_charge(big_model), 2 * s);
  cache.insert(key_for("big"), make_result(big_model));
  Result big = cache.lookup(key_for("big"));
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(big->optimized_model.size(), big_model);
  EXPECT_EQ(cache.stats().evictions, 2u);
  EXPECT_EQ(cache.stats().bytes, 4 * s);
  EXPECT_EQ(cache.lookup(key_for("S1")), nullptr);
  EXPECT_EQ(cache.lookup(key_for("S2")), nullptr);
  EXPECT_NE(cache.lookup(key_for("S3")), nullptr);
  EXPECT_NE(cache.lookup(key_for("S4")), nullptr);
}

TEST(ResultCacheTest, ReportBytesCountAgainstTheBudget) {
  const std::string report(500, 'r');
  const size_t c = expected_charge(100, report);
  ResultCache cache(2 * c);
  cache.insert(key_for("A"), make_result(100, report));
  cache.insert(key_for("B"), make_result(100, report));
  EXPECT_EQ(cache.stats().bytes, 2 * c);
  EXPECT_EQ(cache.stats().evictions, 0u);
  cache.insert(key_for("C"), make_result(100, report));
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_EQ(cache.lookup(key_for("A")), nullptr);
}

TEST(ResultCacheTest, EntryOfExactlyTheBudgetIsCached) {
  const size_t c = expected_charge(777);
  ResultCache cache(c);
  cache.insert(key_for("A"), make_result(777));
  EXPECT_NE(cache.lookup(key_for("A")), nullptr);
  EXPECT_EQ(cache.stats().bytes, c);
  cache.insert(key_for("B"), make_result(777));
  EXPECT_EQ(cache.lookup(key_for("A")), nullptr);
  EXPECT_NE(cache.lookup(key_for("B")), nullptr);
  EXPECT_EQ(cache.stats().evictions, 1u);
}

TEST(ResultCacheTest, OversizedEntryIsNotCachedAndEvictsNothing) {
  const size_t c = expected_charge(100);
  ResultCache cache(3 * c);
  cache.insert(key_for("A"), make_result(100));
  cache.insert(key_for("B"), make_result(100));

  const size_t huge = 3 * c - expected_charge(0) + 1;  // one byte over the whole budget
  ASSERT_EQ(expected_charge(huge), 3 * c + 1);
  cache.insert(key_for("huge"), make_result(huge));
  EXPECT_EQ(cache.lookup(key_for("huge")), nullptr);
  ResultCache::Stats s = cache.stats();
  EXPECT_EQ(s.oversized, 1u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.bytes, 2 * c);
  EXPECT_NE(cache.lookup(key_for("A")), nullptr);
  EXPECT_NE(cache.lookup(key_for("B")), nullptr);
}

TEST(ResultCacheTest, OversizedComputedResultIsReturnedButNotStored) {
  ResultCache cache(expected_charge(10));
  int calls = 0;
  auto compute = [&]() -> absl::StatusOr<Result> {
    ++calls;
    return make_result(11);
  };
  Outcome outcome;
  auto r = cache.get_or_compute(key_for("A"), compute, &outcome);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->optimized_model.size(), 11u);
  EXPECT_EQ(outcome, Outcome::kMiss);
  r = cache.get_or_compute(key_for("A"), compute, &outcome);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(outcome, Outcome::kMiss);
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(cache.stats().oversized, 2u);
  EXPECT_EQ(cache.stats().entries, 0u);
}

TEST(ResultCacheTest, ZeroCapacityStoresNothing) {
  ResultCache cache(0);
  cache.insert(key_for("A"), make_result(0, ""));
  EXPECT_EQ(cache.lookup(key_for("A")), nullptr);
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().bytes, 0u);
}

TEST(ResultCacheTest, NullInsertIsIgnored) {
  ResultCache cache(1 << 20);
  cache.insert(key_for("A"), nullptr);
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().inserts, 0u);
}

TEST(ResultCacheTest, EvictedResultsAreReleased) {
  ResultCache cache(expected_charge(100));
  std::weak_ptr<const CachedResult> first;
  {
    Result r = make_result(100);
    first = r;
    cache.insert(key_for("A"), std::move(r));
  }
  EXPECT_FALSE(first.expired());
  cache.insert(key_for("B"), make_result(100));
  EXPECT_TRUE(first.expired());
}

Result with_files(std::vector<uint64_t> sizes) {
  auto r = std::make_shared<CachedResult>(CachedResult{"model", "{}", {}, {}});
  for (size_t i = 0; i < sizes.size(); ++i)
    r->files.push_back(CachedFile{"w" + std::to_string(i), "/spool/w", sizes[i], ""});
  return r;
}

TEST(ResultCacheTest, FilesCountAgainstTheDiskBudgetAndEvictInLruOrder) {
  ResultCache cache(1 << 20, 50ms, /*disk_capacity_bytes=*/1000);
  cache.insert(key_for("A"), with_files({300, 100}));
  cache.insert(key_for("B"), with_files({400}));
  EXPECT_EQ(cache.stats().disk_bytes, 800u);
  ASSERT_NE(cache.lookup(key_for("A")), nullptr);  // A is now the most recent
  cache.insert(key_for("C"), with_files({500}));   // 1300 > 1000: B goes, A stays
  EXPECT_EQ(cache.lookup(key_for("B")), nullptr);
  EXPECT_NE(cache.lookup(key_for("A")), nullptr);
  EXPECT_NE(cache.lookup(key_for("C")), nullptr);
  EXPECT_EQ(cache.stats().disk_bytes, 900u);
  EXPECT_EQ(cache.stats().evictions, 1u);
  // A result without files takes no disk, however full the disk budget is.
  cache.insert(key_for("D"), make_result(10));
  EXPECT_EQ(cache.stats().entries, 3u);
}

TEST(ResultCacheTest, FilesLargerThanTheDiskBudgetAreNotStoredAndEvictNothing) {
  ResultCache cache(1 << 20, 50ms, 1000);
  cache.insert(key_for("A"), with_files({600}));
  cache.insert(key_for("B"), with_files({1001}));
  EXPECT_EQ(cache.lookup(key_for("B")), nullptr);
  EXPECT_NE(cache.lookup(key_for("A")), nullptr);
  EXPECT_EQ(cache.stats().oversized, 1u);
  // Without a disk budget, no result with files is kept.
  ResultCache memory_only(1 << 20);
  memory_only.insert(key_for("A"), with_files({1}));
  EXPECT_EQ(memory_only.lookup(key_for("A")), nullptr);
}

TEST(ResultCacheTest, StatsCountEveryPath) {
  ResultCache cache(1 << 20);
  EXPECT_EQ(cache.stats().capacity_bytes, 1u << 20);
  EXPECT_EQ(cache.lookup(key_for("A")), nullptr);  // miss
  cache.insert(key_for("A"), make_result(10));
  cache.lookup(key_for("A"));  // hit
  cache.lookup(key_for("A"));  // hit
  int calls = 0;
  auto compute = [&]() -> absl::StatusOr<Result> {
    ++calls;
    return make_result(20);
  };
  Outcome outcome;
  ASSERT_TRUE(cache.get_or_compute(key_for("A"), compute, &outcome).ok());  // hit
  EXPECT_EQ(outcome, Outcome::kHit);
  ASSERT_TRUE(cache.get_or_compute(key_for("B"), compute, &outcome).ok());  // miss
  EXPECT_EQ(outcome, Outcome::kMiss);
  ASSERT_TRUE(cache.get_or_compute(key_for("B"), compute, nullptr).ok());  // hit
  EXPECT_EQ(calls, 1);

  ResultCache::Stats s = cache.stats();
  EXPECT_EQ(s.hits, 4u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.shared, 0u);
  EXPECT_EQ(s.inserts, 2u);
  EXPECT_EQ(s.entries, 2u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.bytes, expected_charge(10) + expected_charge(20));
}

TEST(SingleFlightTest, ConcurrentCallersShareOneComputation) {
  Watchdog watchdog;
  constexpr int kThreads = 16;
  ResultCache cache(1 << 20);
  std::atomic<int> invocations{0};
  std::atomic<bool> saw_in_flight{false};
  auto compute = [&]() -> absl::StatusOr<Result> {
    ++invocations;
    saw_in_flight = cache.stats().in_flight == 1;  // also shows the lock is not held here
    // Stay in flight until every other caller has joined, so none can arrive after the end and
    // get a plain hit; the sleep then gives a wrong implementation time to start a second one.
    if (!wait_until([&] { return cache.stats().shared == kThreads - 1; })) {
      return absl::DeadlineExceededError("the other callers never joined");
    }
    std::this_thread::sleep_for(20ms);
    return make_result(1000);
  };

  std::latch start(kThreads);
  std::vector<absl::StatusOr<Result>> results(kThreads);
  std::vector<Outcome> outcomes(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      results[i] = cache.get_or_compute(key_for("model"), compute, &outcomes[i]);
    });
  }
  for (auto& t : threads) t.join();

  EXPECT_EQ(invocations, 1);
  EXPECT_TRUE(saw_in_flight);
  int misses = 0, shared = 0;
  for (int i = 0; i < kThreads; ++i) {
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_EQ(results[i]->get(), results[0]->get()) << i;
    misses += outcomes[i] == Outcome::kMiss;
    shared += outcomes[i] == Outcome::kShared;
  }
  EXPECT_EQ(misses, 1);
  EXPECT_EQ(shared, kThreads - 1);

  ResultCache::Stats s = cache.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.shared, kThreads - 1u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(cache.lookup(key_for("model")).get(), results[0]->get());
}

TEST(SingleFlightTest, ErrorReachesEveryWaiterAndIsNotCached) {
  Watchdog watchdog;
  constexpr int kThreads = 16;
  ResultCache cache(1 << 20);
  std::atomic<int> invocations{0};
  auto failing = [&]() -> absl::StatusOr<Result> {
    ++invocations;
    if (!wait_until([&] { return cache.stats().shared == kThreads - 1; })) {
      return absl::DeadlineExceededError("the other callers never joined");
    }
    return absl::InvalidArgumentError("boom");
  };

  std::latch start(kThreads);
  std::vector<absl::StatusOr<Result>> results(kThreads);
  std::vector<Outcome> outcomes(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      results[i] = cache.get_or_compute(key_for("model"), failing, &outcomes[i]);
    });
  }
  for (auto& t : threads) t.join();

  EXPECT_EQ(invocations, 1);
  int misses = 0;
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(results[i].status(), absl::InvalidArgumentError("boom")) << i;
    misses += outcomes[i] == Outcome::kMiss;
  }
  EXPECT_EQ(misses, 1);
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().in_flight, 0u);
  EXPECT_EQ(cache.lookup(key_for("model")), nullptr);

  // The next request computes again, and its success is cached.
  int retries = 0;
  Outcome outcome;
  auto r = cache.get_or_compute(
      key_for("model"),
      [&]() -> absl::StatusOr<Result> {
        ++retries;
        return make_result(5);
      },
      &outcome);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(outcome, Outcome::kMiss);
  EXPECT_EQ(retries, 1);
  EXPECT_EQ(cache.lookup(key_for("model")).get(), r->get());
}

// Two parties meet here or give up after the hang guard.
class Rendezvous {
 public:
  bool arrive_and_wait_for(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    ++arrived_;
    cv_.notify_all();
    return cv_.wait_for(lock, timeout, [&] { return arrived_ >= 2; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
};

TEST(SingleFlightTest, DifferentKeysComputeConcurrently) {
  Watchdog watchdog;
  ResultCache cache(1 << 20);
  Rendezvous both_running;
  // Each computation finishes only once the other has started: serialized computations would
  // time out instead.
  auto compute = [&](std::string payload) {
    return [&, payload]() -> absl::StatusOr<Result> {
      if (!both_running.arrive_and_wait_for(kHangGuard)) {
        return absl::DeadlineExceededError("the two computations did not overlap");
      }
      return std::make_shared<const CachedResult>(CachedResult{payload, "{}", {}, {}});
    };
  };
  absl::StatusOr<Result> r1, r2;
  Outcome o1, o2;
  std::thread t1([&] { r1 = cache.get_or_compute(key_for("one"), compute("one"), &o1); });
  std::thread t2([&] { r2 = cache.get_or_compute(key_for("two"), compute("two"), &o2); });
  t1.join();
  t2.join();
  ASSERT_TRUE(r1.ok()) << r1.status();
  ASSERT_TRUE(r2.ok()) << r2.status();
  EXPECT_EQ((*r1)->optimized_model, "one");
  EXPECT_EQ((*r2)->optimized_model, "two");
  EXPECT_EQ(o1, Outcome::kMiss);
  EXPECT_EQ(o2, Outcome::kMiss);
  EXPECT_EQ(cache.stats().entries, 2u);
}

TEST(SingleFlightTest, CacheIsUsableWhileComputing) {
  Watchdog watchdog;
  ResultCache cache(1 << 20);
  cache.insert(key_for("other"), make_result(1));
  auto r = cache.get_or_compute(key_for("model"), [&]() -> absl::StatusOr<Result> {
    // Re-entering from inside a computation must neither deadlock nor see a stored entry.
    EXPECT_NE(cache.lookup(key_for("other")), nullptr);
    EXPECT_EQ(cache.lookup(key_for("model")), nullptr);
    cache.insert(key_for("third"), make_result(2));
    return make_result(3);
  });
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(cache.stats().entries, 3u);
}

TEST(SingleFlightTest, CancelledWaiterLeavesWhileTheComputationContinues) {
  Watchdog watchdog;
  // A short poll keeps the test quick; the behaviour does not depend on it.
  ResultCache cache(1 << 20, 5ms);
  Gate release;
  std::atomic<int> invocations{0};
  std::atomic<bool> computation_done{false};
  auto compute = [&]() -> absl::StatusOr<Result> {
    ++invocations;
    bool released = release.wait_for(kHangGuard);
    computation_done = true;
    if (!released) return absl::DeadlineExceededError("never released");
    return make_result(100);
  };

  absl::StatusOr<Result> r_leader, r_quitter, r_patient;
  Outcome o_leader, o_quitter, o_patient;
  std::atomic<bool> quit{false}, quitter_done{false}, patient_done{false};
  std::atomic<int> patient_polls{0};

  std::thread leader([&] { r_leader = cache.get_or_compute(key_for("m"), compute, &o_leader); });
  ASSERT_TRUE(wait_until([&] { return cache.stats().in_flight == 1; }));
  std::thread quitter([&] {
    r_quitter =
        cache.get_or_compute(key_for("m"), compute, &o_quitter, [&] { return quit.load(); });
    quitter_done = true;
  });
  std::thread patient([&] {
    r_patient = cache.get_or_compute(key_for("m"), compute, &o_patient, [&] {
      ++patient_polls;
      return false;
    });
    patient_done = true;
  });
  EXPECT_TRUE(wait_until([&] { return cache.stats().shared == 2; }));

  quit = true;
  EXPECT_TRUE(wait_until([&] { return quitter_done.load(); }));
  // The patient waiter keeps polling and waiting; the computation is still running.
  EXPECT_TRUE(wait_until([&] { return patient_polls >= 2; }));
  EXPECT_FALSE(patient_done);
  EXPECT_FALSE(computation_done);
  EXPECT_EQ(cache.stats().in_flight, 1u);

  release.open();
  leader.join();
  quitter.join();
  patient.join();

  EXPECT_EQ(r_quitter.status().code(), absl::StatusCode::kCancelled) << r_quitter.status();
  EXPECT_EQ(o_quitter, Outcome::kShared);
  ASSERT_TRUE(r_leader.ok()) << r_leader.status();
  ASSERT_TRUE(r_patient.ok()) << r_patient.status();
  EXPECT_EQ(o_leader, Outcome::kMiss);
  EXPECT_EQ(o_patient, Outcome::kShared);
  EXPECT_EQ(r_patient->get(), r_leader->get());
  EXPECT_EQ(invocations, 1);
  EXPECT_EQ(cache.lookup(key_for("m")).get(), r_leader->get());
}

TEST(SingleFlightTest, AllWaitersCancelledStillStoresTheResult) {
  Watchdog watchdog;
  ResultCache cache(1 << 20, 5ms);
  Gate release;
  auto compute = [&]() -> absl::StatusOr<Result> {
    if (!release.wait_for(kHangGuard)) return absl::DeadlineExceededError("never released");
    return make_result(100);
  };
  absl::StatusOr<Result> r_leader;
  std::thread leader([&] { r_leader = cache.get_or_compute(key_for("m"), compute); });
  ASSERT_TRUE(wait_until([&] { return cache.stats().in_flight == 1; }));
  auto r = cache.get_or_compute(key_for("m"), compute, nullptr, [] { return true; });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  release.open();
  leader.join();
  ASSERT_TRUE(r_leader.ok()) << r_leader.status();
  EXPECT_EQ(cache.lookup(key_for("m")).get(), r_leader->get());
}

TEST(SingleFlightTest, NullResultBecomesAnError) {
  Watchdog watchdog;
  ResultCache cache(1 << 20);
  auto r = cache.get_or_compute(key_for("m"), []() -> absl::StatusOr<Result> { return nullptr; });
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.stats().in_flight, 0u);
}

TEST(SingleFlightTest, ThrowingComputationReleasesWaiters) {
  Watchdog watchdog;
  ResultCache cache(1 << 20);
  absl::StatusOr<Result> r_waiter;
  Outcome o_waiter;
  std::thread waiter;
  auto never = []() -> absl::StatusOr<Result> {
    ADD_FAILURE() << "a waiter must not compute";
    return make_result(1);
  };
  auto throwing = [&]() -> absl::StatusOr<Result> {
    waiter = std::thread([&] { r_waiter = cache.get_or_compute(key_for("m"), never, &o_waiter); });
    if (!wait_until([&] { return cache.stats().shared == 1; })) {
      return absl::DeadlineExceededError("the waiter never joined");
    }
    throw std::runtime_error("pass crashed");
  };
  EXPECT_THROW(cache.get_or_compute(key_for("m"), throwing), std::runtime_error);
  waiter.join();
  EXPECT_EQ(o_waiter, Outcome::kShared);
  EXPECT_EQ(r_waiter.status().code(), absl::StatusCode::kInternal) << r_waiter.status();
  EXPECT_EQ(cache.stats().in_flight, 0u);

  Outcome outcome;
  auto r = cache.get_or_compute(
      key_for("m"), []() -> absl::StatusOr<Result> { return make_result(1); }, &outcome);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(outcome, Outcome::kMiss);
}

TEST(SingleFlightTest, ConcurrentMixedKeysStayConsistent) {
  Watchdog watchdog;
  constexpr int kThreads = 8, kOps = 2000, kKeys = 24;
  // Room for roughly a third of the keys, so that eviction happens throughout.
  ResultCache cache(8 * expected_charge(64, "{}"), 1ms);
  std::atomic<int> invocations{0};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::uniform_int_distribution<int> pick(0, kKeys - 1);
      for (int i = 0; i < kOps; ++i) {
        std::string name = "k" + std::to_string(pick(rng));
        if (i % 10 == 0) {
          Result r = cache.lookup(key_for(name));
          if (r && r->report_json != name) ++wrong;
          continue;
        }
        auto r = cache.get_or_compute(
            key_for(name),
            [&]() -> absl::StatusOr<Result> {
              ++invocations;
              return make_result(64, name);
            },
            nullptr, [] { return false; });
        if (!r.ok() || (*r)->report_json != name) ++wrong;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong, 0);
  ResultCache::Stats s = cache.stats();
  const uint64_t lookups = kThreads * (kOps / 10);
  const uint64_t computes = kThreads * kOps - lookups;
  EXPECT_EQ(s.hits + s.misses + s.shared, lookups + computes);
  EXPECT_LE(s.bytes, s.capacity_bytes);
  EXPECT_LE(s.entries, 8u);
  EXPECT_EQ(s.in_flight, 0u);
  EXPECT_EQ(s.inserts, static_cast<uint64_t>(invocations));
  EXPECT_EQ(s.inserts - s.evictions, s.entries);
}

}  // namespace
}  // namespace graft::cache
