#include "core/cache/result_cache.h"

#include <exception>
#include <utility>

#include <absl/status/status.h>

namespace graft::cache {
namespace {

void append_field(std::string& out, std::string_view field) {
  out += std::to_string(field.size());
  out += ':';
  out += field;
  out += ';';
}

size_t entry_charge(size_t key_bytes, const CachedResult& result) {
  size_t files = 0;
  for (const auto& f : result.files)
    files += f.name.size() + f.path.size() + f.sha256.size() + sizeof(CachedFile);
  return result.optimized_model.size() + result.report_json.size() + key_bytes + files +
         ResultCache::kEntryOverhead;
}

}  // namespace

std::string CacheKey::str() const {
  // Length prefixes make the encoding injective whatever the fields contain.
  std::string out;
  out.reserve(model_sha256.size() + config.size() + version.size() + build.size() + 48);
  append_field(out, model_sha256);
  append_field(out, config);
  append_field(out, version);
  append_field(out, build);
  return out;
}

uint64_t CachedResult::disk_bytes() const {
  uint64_t total = 0;
  for (const auto& f : files) total += f.size;
  return total;
}

ResultCache::ResultCache(size_t capacity_bytes, std::chrono::milliseconds cancel_poll,
                         uint64_t disk_capacity_bytes)
    : capacity_(capacity_bytes), disk_capacity_(disk_capacity_bytes), cancel_poll_(cancel_poll) {}

size_t ResultCache::charge(const CacheKey& key, const CachedResult& result) {
  return entry_charge(key.str().size(), result);
}

std::shared_ptr<const CachedResult> ResultCache::find_locked(const std::string& key) {
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);  // iterators stay valid
  return it->second->result;
}

void ResultCache::insert_locked(std::string key, std::shared_ptr<const CachedResult> result,
                                std::vector<std::shared_ptr<const CachedResult>>& released) {
  size_t charge = entry_charge(key.size(), *result);
  const uint64_t disk = result->disk_bytes();
  if (charge > capacity_ || disk > disk_capacity_) {
    ++stats_.oversized;
    released.push_back(std::move(result));
    return;
  }
  if (auto it = index_.find(key); it != index_.end()) {
    Lru::iterator old = it->second;
    index_.erase(it);
    stats_.bytes -= old->charge;
    stats_.disk_bytes -= old->disk;
    released.push_back(std::move(old->result));
    lru_.erase(old);
  }
  while (stats_.bytes + charge > capacity_ || stats_.disk_bytes + disk > disk_capacity_) {
    Entry& victim = lru_.back();
    index_.erase(victim.key);
    stats_.bytes -= victim.charge;
    stats_.disk_bytes -= victim.disk;
    ++stats_.evictions;
    released.push_back(std::move(victim.result));
    lru_.pop_back();
  }
  lru_.push_front(Entry{std::move(key), std::move(result), charge, disk});
  index_.emplace(lru_.front().key, lru_.begin());
  stats_.bytes += charge;
  stats_.disk_bytes += disk;
  ++stats_.inserts;
}

std::shared_ptr<const CachedResult> ResultCache::lookup(const CacheKey& key) {
  std::string k = key.str();
  std::lock_guard lock(mu_);
  auto result = find_locked(k);
  ++(result ? stats_.hits : stats_.misses);
  return result;
}

std::shared_ptr<const CachedResult> ResultCache::find_output(std::string_view sha256) const {
  if (sha256.empty()) return nullptr;
  std::lock_guard lock(mu_);
  for (const Entry& e : lru_)
    if (e.result->output_sha256 == sha256) return e.result;
  return nullptr;
}

void ResultCache::insert(const CacheKey& key, std::shared_ptr<const CachedResult> result) {
  if (result == nullptr) return;
  std::string k = key.str();
  std::vector<std::shared_ptr<const CachedResult>> released;
  std::lock_guard lock(mu_);
  insert_locked(std::move(k), std::move(result), released);
  // `released` is destroyed after `lock` (reverse declaration order), outside the mutex.
}

void ResultCache::finish_flight(const std::string& key, const std::shared_ptr<Flight>& flight,
                                absl::StatusOr<std::shared_ptr<const CachedResult>> result) {
  std::vector<std::shared_ptr<const CachedResult>> released;
  {
    std::lock_guard lock(mu_);
    if (result.ok()) insert_locked(key, *result, released);
    flight->result = std::move(result);
    flight->done = true;
    flights_.erase(key);
  }
  flight->cv.notify_all();
}

absl::StatusOr<std::shared_ptr<const CachedResult>> ResultCache::get_or_compute(
    const CacheKey& key, const Compute& compute, Outcome* outcome,
    const std::function<bool()>& cancelled) {
  Outcome ignored;
  if (outcome == nullptr) outcome = &ignored;
  std::string k = key.str();
  std::unique_lock lock(mu_);

  if (auto result = find_locked(k)) {
    ++stats_.hits;
    *outcome = Outcome::kHit;
    return result;
  }

  if (auto it = flights_.find(k); it != flights_.end()) {
    ++stats_.shared;
    *outcome = Outcome::kShared;
    // Holding the flight keeps it alive after the computing call removes it from flights_.
    std::shared_ptr<Flight> flight = it->second;
    if (!cancelled) {
      flight->cv.wait(lock, [&] { return flight->done; });
      return flight->result;
    }
    while (!flight->cv.wait_for(lock, cancel_poll_, [&] { return flight->done; })) {
      // The callback is the caller's code: never run it under the cache's lock.
      lock.unlock();
      bool stop = cancelled();
      lock.lock();
      if (flight->done) break;  // a result that arrived meanwhile wins
      if (stop) return absl::CancelledError("cancelled while waiting for an identical request");
    }
    return flight->result;
  }

  ++stats_.misses;
  *outcome = Outcome::kMiss;
  auto flight = std::make_shared<Flight>();
  flights_.emplace(k, flight);
  lock.unlock();

  absl::StatusOr<std::shared_ptr<const CachedResult>> result;
  try {
    result = compute();
  } catch (...) {
    finish_flight(k, flight, absl::InternalError("the computation threw an exception"));
    throw;
  }
  if (result.ok() && *result == nullptr) {
    result = absl::InternalError("the computation returned no result");
  }
  finish_flight(k, flight, result);
  return result;
}

ResultCache::Stats ResultCache::stats() const {
  std::lock_guard lock(mu_);
  Stats s = stats_;
  s.entries = lru_.size();
  s.in_flight = flights_.size();
  s.capacity_bytes = capacity_;
  s.disk_capacity_bytes = disk_capacity_;
  return s;
}

}  // namespace graft::cache
