#include "server/upload.h"

#include <algorithm>
#include <climits>

#include <absl/strings/str_cat.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/paths/beneath.h"
#include "core/paths/files.h"
#include "server/spool.h"

namespace graft::server {

namespace {

using Clock = std::chrono::system_clock;

grpc::Status invalid(std::string message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(message));
}

grpc::Status exhausted(std::string message) {
  return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, std::move(message));
}

std::string shown(const std::string& name) { return paths::shown_location(name); }

bool lowercase_hex_sha256(const std::string& s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

}  // namespace

bool InflightBudget::try_acquire(uint64_t bytes) {
  uint64_t used = used_.load();
  do {
    if (bytes > limit_ - used) return false;  // used <= limit_ always: no wrap
  } while (!used_.compare_exchange_weak(used, used + bytes));
  notify();
  return true;
}

void InflightBudget::release(uint64_t bytes) {
  if (bytes == 0) return;
  used_.fetch_sub(bytes);
  notify();
}

void InflightBudget::notify() {
  if (!observer_) return;
  std::lock_guard<std::mutex> lock(observer_mutex_);
  observer_(used_.load());
}

ChargedBuffer::ChargedBuffer(ChargedBuffer&& other) noexcept
    : budget_(other.budget_),
      announced_(other.announced_),
      first_bytes_(other.first_bytes_),
      charged_(std::exchange(other.charged_, 0)),
      bytes_(std::move(other.bytes_)) {}

ChargedBuffer::~ChargedBuffer() {
  std::string().swap(bytes_);
  if (budget_) budget_->release(charged_);
}

bool ChargedBuffer::append(std::string_view data) {
  const uint64_t need = bytes_.size() + data.size();
  if (need > charged_) {
    // Doubling keeps the copies linear; the announced size caps it, so a buffer never holds
    // more than was announced, and never much more than what arrived. The budget counts what
    // buffers hold: the old copy alive while a buffer grows is not charged, or an upload of
    // more than half the budget could never complete.
    const uint64_t doubled = charged_ > announced_ / 2 ? announced_ : 2 * charged_;
    const uint64_t target = std::max(need, std::min(announced_, std::max(doubled, first_bytes_)));
    if (budget_ && !budget_->try_acquire(target - charged_)) return false;
    // A fresh string reserves exactly `target` (reserve() on a non-empty one may round up).
    std::string grown;
    grown.reserve(static_cast<size_t>(target));
    grown.append(bytes_);
    bytes_.swap(grown);
    charged_ = target;
  }
  bytes_.append(data);
  return true;
}

UploadAssembler::UploadAssembler(const UploadLimits& limits, InflightBudget* budget, Spool* spool)
    : limits_(limits), budget_(budget), spool_(spool) {}

UploadAssembler::~UploadAssembler() { close_file(); }

void UploadAssembler::close_file() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

grpc::Status UploadAssembler::write_file(size_t index, std::string_view data) {
  UploadedFile& f = files_[index];
  if (fd_ < 0 || fd_index_ != index) {
    // Chunks normally come file after file; a client interleaving them costs an open per switch,
    // never more than one descriptor.
    close_file();
    fd_ = ::open(f.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd_ < 0)
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat("cannot write to the spool: ", std::strerror(errno)));
    fd_index_ = index;
  }
  if (!file_digests_[index]) file_digests_[index] = std::make_unique<cache::Sha256>();
  if (auto st = paths::write_all(fd_, data, "the spool"); !st.ok()) {
    const int err = errno;
    close_file();
    const bool full = err == ENOSPC || err == EDQUOT || err == EFBIG;
    return grpc::Status(
        full ? grpc::StatusCode::RESOURCE_EXHAUSTED : grpc::StatusCode::INTERNAL,
        absl::StrCat(full ? "this server's spool disk is full: " : "", std::string(st.message())));
  }
  file_digests_[index]->update(data);
  f.received += data.size();
  return grpc::Status::OK;
}

grpc::Status UploadAssembler::add(v1::OptimizeRequest& msg) {
  if (failed_)
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the upload has already failed");
  grpc::Status st;
  if (!started_) {
    st = msg.has_start() ? add_start(*msg.mutable_start())
                         : invalid("the first message must be OptimizeStart");
  } else {
    st = msg.has_chunk() ? add_chunk(msg.chunk()) : invalid("only chunks may follow OptimizeStart");
  }
  failed_ = !st.ok();
  return st;
}

grpc::Status UploadAssembler::budget_full() const {
  return exhausted(
      absl::StrCat("this server's memory for uploads in progress is full (max_inflight_bytes: ",
                   budget_->limit(), " bytes); retry later"));
}

grpc::Status UploadAssembler::add_start(v1::OptimizeStart& start) {
  started_ = true;
  start_ = std::move(start);
  const uint64_t size = start_.model_size();
  const uint64_t limit = limits_.max_model_bytes;
  if (size > static_cast<uint64_t>(INT_MAX))
    return invalid(
        "model_size exceeds protobuf's 2 GB limit: send large weights as external-data files");
  if (!start_.expected_sha256().empty() && !lowercase_hex_sha256(start_.expected_sha256()))
    return invalid("expected_sha256 must be 64 lowercase hex characters");
  if (size > limit)
    return exhausted(absl::StrCat("model of ", size, " bytes exceeds this server's limit of ",
                                  limit, " bytes (max_model_bytes)"));
  if (static_cast<size_t>(start_.external_files_size()) > limits_.max_external_files)
    return exhausted(absl::StrCat(start_.external_files_size(),
                                  " external files: this server takes at most ",
                                  limits_.max_external_files));
  if (start_.external_files_size() > 0 && spool_ == nullptr)
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this server takes no external-data files (its spool is off: "
                        "spool.max_bytes 0)");
  // The running total is checked at every step, so no sum of client sizes can wrap.
  uint64_t total = 0;
  const uint64_t spool_limit = spool_ ? spool_->limit() : 0;
  files_.reserve(static_cast<size_t>(start_.external_files_size()));
  for (const auto& f : start_.external_files()) {
    if (auto st = paths::check_location(f.name()); !st.ok())
      return invalid(std::string(st.message()));
    if (!file_index_.emplace(f.name(), files_.size()).second)
      return invalid(absl::StrCat("external file '", shown(f.name()), "' is listed twice"));
    if (!f.sha256().empty() && !lowercase_hex_sha256(f.sha256()))
      return invalid(absl::StrCat("external file '", shown(f.name()),
                                  "': sha256 must be 64 lowercase hex characters"));
    if (__builtin_add_overflow(total, f.size(), &total) || total > spool_limit)
      return exhausted(absl::StrCat(
          "the external files exceed this server's disk for uploads (spool.max_bytes: ",
          spool_limit, " bytes) at external file '", shown(f.name()), "' of ", f.size(), " bytes"));
    UploadedFile file;
    file.name = f.name();
    file.size = f.size();
    file.expected_sha256 = f.sha256();
    files_.push_back(std::move(file));
  }
  file_digests_.resize(files_.size());
  if (!files_.empty()) {
    auto dir = spool_->make_dir("upload");
    if (!dir.ok())
      return grpc::Status(grpc::StatusCode::INTERNAL, std::string(dir.status().message()));
    dir_ = std::move(*dir);
    // Reserved whole at the start, so an upload the disk cannot take fails before it is sent.
    if (!dir_->reserve(total))
      return exhausted(absl::StrCat(
          "this server's disk for uploads in progress is full (spool.max_bytes: ", spool_limit,
          " bytes, ", spool_->used(), " in use); retry later"));
    for (size_t i = 0; i < files_.size(); ++i) files_[i].path = absl::StrCat(dir_->path(), "/f", i);
  }
  if (budget_ && size > budget_->limit())
    return exhausted(absl::StrCat("the model (", size,
                                  " bytes) exceeds the memory this server gives all uploads in "
                                  "progress together (max_inflight_bytes: ",
                                  budget_->limit(), " bytes)"));
  auto buffer = std::make_shared<ChargedBuffer>(budget_, size, limits_.first_buffer_bytes);
  model_buffer_ = buffer.get();
  model_ = std::shared_ptr<const std::string>(buffer, &buffer->bytes());
  return grpc::Status::OK;
}

grpc::Status UploadAssembler::add_chunk(const v1::Chunk& chunk) {
  const std::string& data = chunk.data();
  const std::string& file = chunk.file();
  if (!file.empty()) {
    auto it = file_index_.find(file);
    if (it == file_index_.end())
      return invalid(absl::StrCat("chunk for undeclared external file '", shown(file), "'"));
    UploadedFile& f = files_[it->second];
    if (data.size() > f.size - f.received)
      return invalid(absl::StrCat("external file '", shown(file),
                                  "' exceeds its announced size of ", f.size, " bytes"));
    if (data.empty()) return grpc::Status::OK;
    return write_file(it->second, data);
  }
  if (data.size() > model_buffer_->announced() - model_->size())
    return invalid(absl::StrCat("upload exceeds the announced model_size of ",
                                model_buffer_->announced(), " bytes"));
  if (!model_buffer_->append(data)) return budget_full();
  digest_.update(data);
  return grpc::Status::OK;
}

grpc::Status UploadAssembler::finish() {
  if (failed_)
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the upload has already failed");
  if (!started_) return invalid("no OptimizeStart message received");
  const uint64_t size = start_.model_size();
  if (model_->size() != size)
    return invalid(
        absl::StrCat("upload ended after ", model_->size(), " of ", size, " announced bytes"));
  for (const auto& f : files_)
    if (f.received != f.size)
      return invalid(absl::StrCat("external file '", shown(f.name), "' ended after ", f.received,
                                  " of ", f.size, " announced bytes"));
  // The same words as a local run's (ir::Model::parse), so the CLI maps both to exit 3.
  if (size == 0) return invalid("invalid model: empty input");
  sha256_ = digest_.hex_digest();
  if (!start_.expected_sha256().empty() && start_.expected_sha256() != sha256_)
    return invalid(absl::StrCat("sha256 mismatch: expected ", start_.expected_sha256(),
                                ", received bytes hash to ", sha256_));
  close_file();
  std::vector<cache::ExternalFileDigest> digests;
  for (size_t i = 0; i < files_.size(); ++i) {
    UploadedFile& f = files_[i];
    if (!file_digests_[i]) {  // an empty file: no chunk made it
      if (auto st = write_file(i, {}); !st.ok()) return st;
      close_file();
    }
    f.sha256 = file_digests_[i]->hex_digest();
    if (!f.expected_sha256.empty() && f.expected_sha256 != f.sha256)
      return invalid(absl::StrCat("sha256 mismatch for external file '", shown(f.name),
                                  "': expected ", f.expected_sha256, ", received bytes hash to ",
                                  f.sha256));
    digests.push_back({f.name, f.size, f.sha256});
  }
  input_digest_ = cache::input_digest(sha256_, std::move(digests));
  return grpc::Status::OK;
}

Clock::time_point request_deadline(Clock::time_point call_deadline, uint64_t hint_ms,
                                   double default_seconds, Clock::time_point now) {
  if (call_deadline != Clock::time_point::max()) return call_deadline;
  double seconds = hint_ms > 0 ? static_cast<double>(hint_ms) / 1000.0 : default_seconds;
  if (!(seconds > 0)) seconds = 0;
  // Half the room left: the double -> integer tick conversion must not round past the end.
  const double room =
      std::chrono::duration<double>(Clock::time_point::max() - std::max(now, Clock::time_point{}))
          .count();
  if (seconds >= room / 2) return Clock::time_point::max();
  return now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace graft::server
