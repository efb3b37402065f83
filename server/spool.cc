#include "server/spool.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include <absl/strings/str_cat.h>

#include "core/paths/files.h"

namespace graft::server {

namespace fs = std::filesystem;

namespace {

constexpr const char* kInstancePrefix = "graftd-";
constexpr const char* kLockName = "lock";
// A folder without its lock file is one being created; older than this, one whose process died
// before it took the lock.
constexpr auto kUnlockedGrace = std::chrono::minutes(1);

absl::Status errno_status(int err, std::string_view what, const std::string& path) {
  return absl::Status(paths::errno_code(err), absl::StrCat("spool: cannot ", std::string(what),
                                                           " '", path, "': ", std::strerror(err)));
}

// Bytes of the regular files below `path` (what a removal frees).
uint64_t tree_bytes(const fs::path& path) {
  uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec),
       end;
       !ec && it != end; it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) {
      uint64_t size = it->file_size(size_ec);
      if (!size_ec) total += size;
    }
  }
  return total;
}

// True if the instance folder `path` belongs to no live process: its lock file is not held, or
// it has none and is older than the grace period.
bool abandoned(const fs::path& path) {
  const std::string lock = (path / kLockName).string();
  int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno != ENOENT) return false;
    std::error_code ec;
    auto written = fs::last_write_time(path, ec);
    return !ec && fs::file_time_type::clock::now() - written > kUnlockedGrace;
  }
  bool free = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);  // also drops the lock just taken
  return free;
}

}  // namespace

SpoolDir::~SpoolDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
  if (reserved_ > 0) budget_->release(reserved_);
}

bool SpoolDir::reserve(uint64_t bytes) {
  if (bytes == 0) return true;
  if (!budget_->try_acquire(bytes)) return false;
  reserved_ += bytes;
  return true;
}

void SpoolDir::unreserve(uint64_t bytes) {
  bytes = std::min(bytes, reserved_);
  reserved_ -= bytes;
  budget_->release(bytes);
}

Spool::Spool(std::string instance, int lock_fd, uint64_t max_bytes)
    : instance_(std::move(instance)),
      lock_fd_(lock_fd),
      budget_(std::make_shared<InflightBudget>(max_bytes)) {}

Spool::~Spool() {
  std::error_code ec;
  fs::remove_all(instance_, ec);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

absl::StatusOr<std::unique_ptr<Spool>> Spool::open(const std::string& dir, uint64_t max_bytes,
                                                   uint64_t* removed_bytes) {
  if (removed_bytes) *removed_bytes = 0;
  if (dir.empty()) return absl::InvalidArgumentError("spool: the folder name is empty");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return errno_status(ec.value(), "create the folder", dir);
  if (!fs::is_directory(dir, ec)) return errno_status(ENOTDIR, "use", dir);

  std::random_device rd;
  std::string instance;
  for (int attempt = 0;; ++attempt) {
    instance = absl::StrCat(dir, "/", kInstancePrefix, ::getpid(), "-",
                            absl::Hex(static_cast<uint32_t>(rd()), absl::kZeroPad8));
    if (::mkdir(instance.c_str(), 0700) == 0) break;
    if (errno != EEXIST || attempt == 8) return errno_status(errno, "create the folder", instance);
  }
  const std::string lock = instance + "/" + kLockName;
  int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    if (fd >= 0) ::close(fd);
    fs::remove_all(instance, ec);
    return errno_status(err, "lock", lock);
  }
  std::unique_ptr<Spool> spool(new Spool(instance, fd, max_bytes));

  // Folders of processes that are gone: a crash (or a kill) never ran their cleanup.
  const std::string own = fs::path(instance).filename().string();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == own || name.rfind(kInstancePrefix, 0) != 0) continue;
    std::error_code type_ec;
    if (!it->is_directory(type_ec) || it->is_symlink(type_ec)) continue;
    if (!abandoned(it->path())) continue;
    const uint64_t bytes = tree_bytes(it->path());
    std::error_code rm_ec;
    fs::remove_all(it->path(), rm_ec);
    if (!rm_ec && removed_bytes) *removed_bytes += bytes;
  }
  return spool;
}

absl::StatusOr<std::shared_ptr<SpoolDir>> Spool::make_dir(std::string_view kind) {
  const std::string path =
      absl::StrCat(instance_, "/", std::string(kind), "-", static_cast<uint64_t>(next_++));
  if (::mkdir(path.c_str(), 0700) != 0) return errno_status(errno, "create the folder", path);
  return std::shared_ptr<SpoolDir>(new SpoolDir(budget_, path));
}

}  // namespace graft::server
