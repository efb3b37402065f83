#include "server/shared_cache.h"

#include <sys/time.h>

#include <algorithm>
#include <string_view>
#include <utility>

#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <hiredis/hiredis.h>
#include <spdlog/spdlog.h>

#include "core/base/status.h"
#include "server/request_log.h"
#include "server/shared_entry.h"

namespace graft::server {

namespace {

using Clock = std::chrono::steady_clock;
using SysClock = std::chrono::system_clock;

// Idle connections kept for reuse (each lookup or write holds one while it runs).
constexpr size_t kMaxIdleConnections = 8;
// Chunks outlive their manifest by this much, so an entry does not lose a chunk to its TTL
// while its manifest is still readable.
constexpr std::chrono::seconds kChunkTtlSlack{300};
// Framing around a bulk reply ("$<length>\r\n...\r\n").
constexpr size_t kReplyOverhead = 64;

timeval to_timeval(std::chrono::microseconds d) {
  if (d.count() < 1000) d = std::chrono::microseconds(1000);
  timeval tv;
  tv.tv_sec = static_cast<time_t>(d.count() / 1000000);
  tv.tv_usec = static_cast<suseconds_t>(d.count() % 1000000);
  return tv;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

bool is_ok_status(const redisReply& r) {
  return r.type == REDIS_REPLY_STATUS && std::string_view(r.str, r.len) == "OK";
}

std::string_view reply_text(const redisReply& r) {
  return r.str == nullptr ? std::string_view() : std::string_view(r.str, r.len);
}

std::string format_millis(std::chrono::milliseconds d) {
  return absl::StrCat(static_cast<double>(d.count()) / 1000.0, " s");
}

}  // namespace

absl::StatusOr<RedisAddress> parse_redis_url(const std::string& url) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared_cache url '", url, "': ", std::string(why),
                     " (expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB])"));
  };
  constexpr std::string_view kScheme = "redis://";
  if (url.rfind(kScheme, 0) != 0) return bad("scheme must be redis://");
  std::string_view rest = std::string_view(url).substr(kScheme.size());
  RedisAddress a;
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view userinfo = rest.substr(0, at);
    rest.remove_prefix(at + 1);
    auto colon = userinfo.find(':');
    if (colon == std::string_view::npos) return bad("credentials must be [USER]:PASSWORD");
    a.username = userinfo.substr(0, colon);
    a.password = userinfo.substr(colon + 1);
    if (a.password.empty()) return bad("empty password");
  }
  std::string_view hostport = rest;
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    hostport = rest.substr(0, slash);
    std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && (!absl::SimpleAtoi(std::string(db), &a.db) || a.db < 0 || a.db > 1000000))
      return bad("database must be a number");
  }
  std::string_view port;
  if (!hostport.empty() && hostport.front() == '[') {
    auto close = hostport.find(']');
    if (close == std::string_view::npos) return bad("unclosed [");
    a.host = hostport.substr(1, close - 1);
    std::string_view after = hostport.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("junk after ]");
      port = after.substr(1);
    }
  } else {
    auto colon = hostport.rfind(':');
    a.host = hostport.substr(0, colon);
    if (colon != std::string_view::npos) port = hostport.substr(colon + 1);
  }
  if (a.host.empty()) return bad("no host");
  if (!port.empty() &&
      (!absl::SimpleAtoi(std::string(port), &a.port) || a.port < 1 || a.port > 65535))
    return bad("port must be 1..65535");
  return a;
}

// One hiredis connection with bounded commands: every command has a deadline, and a reply
// larger than the caller's bound fails before it is buffered further.
class SharedCache::Connection {
 public:
  static absl::StatusOr<std::unique_ptr<Connection>> open(const RedisAddress& address,
                                                          const SharedCacheOptions& options) {
    redisContext* ctx = redisConnectWithTimeout(address.host.c_str(), address.port,
                                                to_timeval(options.connect_timeout));
    if (ctx == nullptr) return absl::UnavailableError("cannot allocate a Redis context");
    if (ctx->err) {
      std::string message = absl::StrCat("connect: ", ctx->errstr);
      redisFree(ctx);
      return absl::UnavailableError(message);
    }
    std::unique_ptr<Connection> c(new Connection(ctx, options.command_timeout));
    auto expect_ok = [&](std::vector<std::string_view> args,
                         std::string_view what) -> absl::Status {
      ASSIGN_OR_RETURN(Reply reply, c->command(args, 1024, Clock::now() + options.command_timeout));
      if (!is_ok_status(*reply) && !(what == "PING" && reply_text(*reply) == "PONG"))
        return absl::UnavailableError(absl::StrCat(
            std::string(what), " failed: ", std::string(reply_text(*reply).substr(0, 200))));
      return absl::OkStatus();
    };
    if (!address.password.empty()) {
      std::vector<std::string_view> args = {"AUTH"};
      if (!address.username.empty()) args.push_back(address.username);
      args.push_back(address.password);
      RETURN_IF_ERROR(expect_ok(args, "AUTH"));
    }
    if (address.db != 0) {
      const std::string db = std::to_string(address.db);
      RETURN_IF_ERROR(expect_ok({"SELECT", db}, "SELECT"));
    }
    RETURN_IF_ERROR(expect_ok({"PING"}, "PING"));
    return c;
  }
  ~Connection() { redisFree(ctx_); }

  // The reply, or: UNAVAILABLE (I/O error: the connection is unusable), DEADLINE_EXCEEDED,
  // RESOURCE_EXHAUSTED (reply larger than max_reply_bytes). After any error the connection must
  // be dropped.
  absl::StatusOr<Reply> command(const std::vector<std::string_view>& args, size_t max_reply_bytes,
                                Clock::time_point deadline) {
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    for (auto a : args) {
      argv.push_back(a.data());
      lengths.push_back(a.size());
    }
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lengths.data()) !=
        REDIS_OK)
      return io_error();
    for (int done = 0; !done;) {
      RETURN_IF_ERROR(set_timeout(deadline));
      if (redisBufferWrite(ctx_, &done) != REDIS_OK) return io_error(deadline);
    }
    for (;;) {
      void* raw = nullptr;
      if (redisReaderGetReply(ctx_->reader, &raw) != REDIS_OK)
        return absl::UnavailableError(absl::StrCat("Redis protocol error: ", ctx_->reader->errstr));
      if (raw != nullptr) return Reply(static_cast<redisReply*>(raw));
      // Everything buffered is the one reply being read: bound it before reading more.
      // (The reader keeps up to 1 KiB of earlier replies before `pos`.)
      if (ctx_->reader->len - ctx_->reader->pos > max_reply_bytes + kReplyOverhead)
        return absl::ResourceExhaustedError(
            absl::StrCat("Redis reply larger than ", max_reply_bytes, " bytes"));
      RETURN_IF_ERROR(set_timeout(deadline));
      if (redisBufferRead(ctx_) != REDIS_OK) return io_error(deadline);
    }
  }

 private:
  Connection(redisContext* ctx, std::chrono::milliseconds timeout) : ctx_(ctx) {
    redisSetTimeout(ctx_, to_timeval(timeout));
  }
  // Each socket wait is bounded by what is left of the command's deadline.
  absl::Status set_timeout(Clock::time_point deadline) {
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero())
      return absl::DeadlineExceededError("Redis command timed out");
    if (redisSetTimeout(ctx_, to_timeval(std::chrono::duration_cast<std::chrono::microseconds>(
                                  left))) != REDIS_OK)
      return io_error();
    return absl::OkStatus();
  }
  absl::Status io_error(Clock::time_point deadline = Clock::time_point::max()) {
    if (Clock::now() >= deadline) return absl::DeadlineExceededError("Redis command timed out");
    return absl::UnavailableError(
        absl::StrCat("Redis I/O error: ", ctx_->errstr[0] ? ctx_->errstr : "connection lost"));
  }

  redisContext* ctx_;
};

const char* SharedCache::name(Lookup result) {
  switch (result) {
    case Lookup::kHit:
      return "hit";
    case Lookup::kMiss:
      return "miss";
    case Lookup::kError:
      return "error";
    case Lookup::kCorrupt:
      return "corrupt";
    case Lookup::kIncomplete:
      return "incomplete";
    case Lookup::kBusy:
      return "busy";
  }
  return "error";
}

const char* SharedCache::name(Write result) {
  switch (result) {
    case Write::kStored:
      return "stored";
    case Write::kError:
      return "error";
    case Write::kDropped:
      return "dropped";
    case Write::kOversized:
      return "oversized";
  }
  return "error";
}

absl::StatusOr<std::unique_ptr<SharedCache>> SharedCache::create(SharedCacheOptions options,
                                                                 Observer observer) {
  ASSIGN_OR_RETURN(RedisAddress address, parse_redis_url(options.url));
  if (options.chunk_bytes < shared::kMinChunkBytes || options.chunk_bytes > shared::kMaxChunkBytes)
    return absl::InvalidArgumentError("shared cache chunk size out of range");
  std::unique_ptr<SharedCache> cache(
      new SharedCache(std::move(options), std::move(address), std::move(observer)));
  // The first probe: logs whether Redis is reachable and sets the gauge.
  if (auto c = cache->acquire()) cache->release(std::move(c));
  cache->writer_ = std::thread([c = cache.get()] { c->writer_loop(); });
  return cache;
}

SharedCache::SharedCache(SharedCacheOptions options, RedisAddress address, Observer observer)
    : options_(std::move(options)), address_(std::move(address)), observer_(std::move(observer)) {
  const bool ipv6 = address_.host.find(':') != std::string::npos;
  display_url_ = absl::StrCat("redis://", ipv6 ? "[" : "", address_.host, ipv6 ? "]" : "", ":",
                              address_.port, "/", address_.db);
  if (observer_.state) observer_.state(false);
}

SharedCache::~SharedCache() {
  {
    std::lock_guard lock(queue_mu_);
    stopping_ = true;
    queue_.clear();
  }
  queue_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void SharedCache::count(Lookup result) {
  if (observer_.lookup) observer_.lookup(result);
}

void SharedCache::count(Write result) {
  if (observer_.write) observer_.write(result);
}

std::unique_ptr<SharedCache::Connection> SharedCache::acquire() {
  {
    std::lock_guard lock(state_mu_);
    if (up_) {
      if (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        return c;
      }
    } else {
      // Down: one caller at a time probes, and only once the backoff has passed.
      if (probing_ || Clock::now() < retry_at_) return nullptr;
      probing_ = true;
    }
  }
  auto c = Connection::open(address_, options_);
  if (!c.ok()) {
    mark_down(std::string(c.status().message()));
    return nullptr;
  }
  mark_up();
  return std::move(*c);
}

void SharedCache::release(std::unique_ptr<Connection> connection) {
  std::lock_guard lock(state_mu_);
  if (up_ && idle_.size() < kMaxIdleConnections) idle_.push_back(std::move(connection));
  // Otherwise it is closed here, under the lock: closing a socket does not block.
}

void SharedCache::mark_up() {
  std::lock_guard lock(state_mu_);
  const bool was_probe = probing_;
  probing_ = false;
  if (up_) return;
  up_ = true;
  backoff_ = std::chrono::milliseconds(0);
  if (observer_.state) observer_.state(true);
  log_event(spdlog::level::info,
            absl::StrCat("shared cache ", display_url_, " is up",
                         was_probe && retry_at_ != Clock::time_point{} ? " again" : ""));
}

void SharedCache::mark_down(const std::string& reason) {
  std::vector<std::unique_ptr<Connection>> dropped;
  std::lock_guard lock(state_mu_);
  const bool was_probe = probing_;
  probing_ = false;
  if (up_) {
    up_ = false;
    backoff_ = options_.retry_min;
    dropped.swap(idle_);  // likely broken too
    if (observer_.state) observer_.state(false);
    log_event(spdlog::level::warn,
              absl::StrCat("shared cache ", display_url_, " is down (", reason,
                           "): serving from the local cache only; retrying in ",
                           format_millis(backoff_)));
  } else if (was_probe) {
    const bool first = backoff_.count() == 0;
    backoff_ = std::clamp(backoff_ * 2, options_.retry_min, options_.retry_max);
    // The start-up probe is logged as a warning; later failed retries only at debug level.
    log_event(first ? spdlog::level::warn : spdlog::level::debug,
              absl::StrCat("shared cache ", display_url_, " is unavailable (", reason,
                           "); retrying in ", format_millis(backoff_)));
  } else {
    return;  // a call that started before Redis was marked down: already handled
  }
  retry_at_ = Clock::now() + backoff_;
}

std::shared_ptr<const cache::CachedResult> SharedCache::get(const cache::CacheKey& key,
                                                            SysClock::time_point deadline,
                                                            Lookup* outcome) {
  Lookup ignored;
  if (outcome == nullptr) outcome = &ignored;
  *outcome = Lookup::kError;
  auto request_deadline = Clock::time_point::max();
  if (deadline != SysClock::time_point::max()) {
    const auto left = deadline - SysClock::now();
    request_deadline =
        left <= SysClock::duration::zero()
            ? Clock::now()
            : Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                 std::min<SysClock::duration>(left, std::chrono::hours(24 * 365)));
  }
  struct Slot {
    std::atomic<int>& reads;
    ~Slot() { --reads; }
  } slot{reads_};
  if (++reads_ > options_.max_concurrent_reads) {
    *outcome = Lookup::kBusy;
    count(Lookup::kBusy);
    return nullptr;
  }
  auto connection = acquire();
  if (!connection) {
    count(Lookup::kError);
    return nullptr;
  }
  std::string error;
  bool drop = false;
  auto result = read(*connection, key, request_deadline, outcome, &drop, &error);
  if (error.empty() && !drop) {
    release(std::move(connection));
  } else if (!error.empty() && Clock::now() < request_deadline) {
    mark_down(error);  // Redis failed, not the request's deadline
  }
  count(*outcome);
  return result;
}

std::shared_ptr<const cache::CachedResult> SharedCache::read(Connection& c,
                                                             const cache::CacheKey& key,
                                                             Clock::time_point request_deadline,
                                                             Lookup* outcome, bool* drop,
                                                             std::string* error) {
  const std::string hash = shared::key_hash(key);
  auto get = [&](const std::string& name, size_t max_bytes) -> absl::StatusOr<Reply> {
    return c.command({"GET", name}, max_bytes,
                     std::min(request_deadline, Clock::now() + options_.command_timeout));
  };
  auto fail = [&](const absl::Status& st) -> std::shared_ptr<const cache::CachedResult> {
    *outcome = Lookup::kError;
    *error = std::string(st.message());
    return nullptr;
  };
  auto reply = get(shared::manifest_key(options_.key_prefix, hash), shared::kMaxManifestBytes);
  if (!reply.ok() && reply.status().code() == absl::StatusCode::kResourceExhausted) {
    *drop = true;
    *outcome = Lookup::kCorrupt;
    return nullptr;
  }
  if (!reply.ok()) return fail(reply.status());
  if ((*reply)->type == REDIS_REPLY_NIL) {
    *outcome = Lookup::kMiss;
    return nullptr;
  }
  *outcome = Lookup::kCorrupt;
  if ((*reply)->type != REDIS_REPLY_STRING) return nullptr;
  auto manifest = shared::parse_manifest(reply_text(**reply), options_.max_entry_bytes);
  if (!manifest.ok() || manifest->key_hash != hash) return nullptr;
  reply->reset();
  shared::EntryAssembler assembler(*manifest);
  for (uint64_t i = 0; i < manifest->chunks; ++i) {
    auto chunk = get(shared::chunk_key(options_.key_prefix, hash, manifest->write_id, i),
                     manifest->chunk_size(i));
    if (!chunk.ok()) {
      // A hostile or broken reply larger than the chunk is corruption, not a dead Redis; the
      // connection is dropped either way (the reply was not read to its end).
      if (chunk.status().code() == absl::StatusCode::kResourceExhausted) {
        *drop = true;
        *outcome = Lookup::kCorrupt;
        return nullptr;
      }
      return fail(chunk.status());
    }
    if ((*chunk)->type == REDIS_REPLY_NIL) {
      *outcome = Lookup::kIncomplete;
      return nullptr;
    }
    if ((*chunk)->type != REDIS_REPLY_STRING || !assembler.add(reply_text(**chunk)).ok())
      return nullptr;
  }
  auto result = std::move(assembler).finish();
  if (!result.ok()) return nullptr;
  *outcome = Lookup::kHit;
  return std::make_shared<const cache::CachedResult>(std::move(*result));
}

void SharedCache::put_async(const cache::CacheKey& key,
                            std::shared_ptr<const cache::CachedResult> result) {
  if (result == nullptr) return;
  const uint64_t bytes = result->optimized_model.size() + result->report_json.size();
  if (bytes > options_.max_entry_bytes) {
    count(Write::kOversized);
    return;
  }
  {
    std::lock_guard lock(queue_mu_);
    if (stopping_ || queue_.size() >= options_.write_queue) {
      count(Write::kDropped);
      return;
    }
    queue_.push_back({key, std::move(result)});
  }
  queue_cv_.notify_all();
}

void SharedCache::flush() {
  std::unique_lock lock(queue_mu_);
  queue_cv_.wait(lock, [&] { return stopping_ || (queue_.empty() && !writing_); });
}

bool SharedCache::write(Connection& c, const cache::CacheKey& key,
                        const cache::CachedResult& result, std::string* error) {
  const std::string hash = shared::key_hash(key);
  const shared::Manifest manifest =
      shared::make_manifest(hash, shared::new_write_id(), result, options_.chunk_bytes);
  const std::string chunk_ttl = std::to_string((options_.ttl + kChunkTtlSlack).count());
  const std::string ttl = std::to_string(options_.ttl.count());
  auto set = [&](const std::string& name, std::string_view value,
                 const std::string& seconds) -> bool {
    auto reply = c.command({"SET", name, value, "EX", seconds}, 1024,
                           Clock::now() + options_.command_timeout);
    if (!reply.ok()) {
      *error = std::string(reply.status().message());
      return false;
    }
    // An error reply (e.g. OOM under maxmemory with noeviction) fails this write only.
    return is_ok_status(**reply);
  };
  for (uint64_t i = 0; i < manifest.chunks; ++i) {
    if (stopping_) return false;  // shutting down: the entry stays invisible without a manifest
    const std::string bytes = shared::chunk_bytes(result, manifest, i);
    if (!set(shared::chunk_key(options_.key_prefix, hash, manifest.write_id, i), bytes, chunk_ttl))
      return false;
  }
  // Last: until now no reader could see this write.
  return set(shared::manifest_key(options_.key_prefix, hash), shared::encode_manifest(manifest),
             ttl);
}

void SharedCache::writer_loop() {
  for (;;) {
    PendingWrite item;
    {
      std::unique_lock lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      item = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
    }
    auto connection = acquire();
    Write outcome = Write::kError;
    if (connection) {
      std::string error;
      if (write(*connection, item.key, *item.result, &error)) outcome = Write::kStored;
      if (error.empty())
        release(std::move(connection));
      else
        mark_down(error);
    }
    count(outcome);
    item.result.reset();  // freed outside the lock
    {
      std::lock_guard lock(queue_mu_);
      writing_ = false;
    }
    queue_cv_.notify_all();
  }
}

}  // namespace graft::server
