#include "core/paths/beneath.h"

#include "core/paths/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <system_error>
#include <utility>
#include <vector>

#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>

#include "core/base/status.h"

namespace graft::paths {

namespace {

constexpr size_t kMaxLocationBytes = 4095;  // PATH_MAX without the terminating NUL
constexpr size_t kMaxComponentBytes = 255;  // NAME_MAX
constexpr size_t kMaxShownBytes = 200;      // of a name quoted in an error message

std::string shown(std::string_view name) { return shown_location(name); }

absl::Status invalid(std::string_view name, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid external data location '", shown(name), "': ", std::string(why)));
}

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// A failed open, read or write of `path` (for location `name`) as a status a caller can map to
// "I/O error" (paths::errno_code: NotFound, PermissionDenied, DataLoss, ...).
absl::Status io_error(std::string_view name, const std::string& what, const std::string& path,
                      int err) {
  return absl::Status(errno_code(err),
                      absl::StrCat("external data location '", shown(name), "': cannot ", what,
                                   " '", path, "': ", errno_text(err)));
}

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  Fd(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::vector<std::string> components(std::string_view name) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t end = name.find('/', start);
    out.emplace_back(name.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

// Why opening `component` (the path so far is `prefix`) in `dir` failed with `err`: a symbolic
// link is the caller's rule broken (InvalidArgument), anything else an I/O error.
absl::Status open_error(int dir, std::string_view name, const std::string& folder,
                        const std::string& component, const std::string& prefix, int err) {
  struct stat st;
  if (::fstatat(dir, component.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
    return invalid(name, absl::StrCat("'", shown(prefix), "' is a symbolic link (not followed)"));
  return io_error(name, "open", folder + "/" + prefix, err);
}

// Opens the folders of `name` below `folder` one component at a time: each with O_NOFOLLOW, so
// a symbolic link anywhere below `folder` fails the open instead of being followed (lstat
// before a plain open would leave a window in which a component could be swapped for a link).
// With `create`, missing folders are made. Returns the innermost folder.
absl::StatusOr<Fd> open_folders(const std::string& folder, std::string_view name,
                                const std::vector<std::string>& parts, bool create) {
  const std::string root = folder.empty() ? "." : folder;
  Fd dir(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.ok()) return io_error(name, "open folder", root, errno);
  std::string prefix;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    prefix += (i ? "/" : "") + parts[i];
    const int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    Fd next(::openat(dir.get(), parts[i].c_str(), flags));
    if (!next.ok() && errno == ENOENT && create) {
      if (::mkdirat(dir.get(), parts[i].c_str(), 0777) != 0 && errno != EEXIST)
        return io_error(name, "create folder", root + "/" + prefix, errno);
      next = Fd(::openat(dir.get(), parts[i].c_str(), flags));
    }
    if (!next.ok()) return open_error(dir.get(), name, root, parts[i], prefix, errno);
    dir = std::move(next);
  }
  return dir;
}

}  // namespace

std::string shown_location(std::string_view name) {
  const std::string_view head = name.substr(0, kMaxShownBytes);
  std::string out = absl::CHexEscape(absl::string_view(head.data(), head.size()));
  if (name.size() > kMaxShownBytes) out += "...";
  return out;
}

absl::Status check_location(std::string_view name) {
  if (name.empty()) return invalid(name, "empty");
  if (name.size() > kMaxLocationBytes)
    return invalid(name, absl::StrCat("longer than ", kMaxLocationBytes, " bytes"));
  if (name.front() == '/')
    return invalid(name, "an absolute path (locations are relative to the model's folder)");
  for (char c : name) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return invalid(name, "contains a control character");
    if (c == '\\') return invalid(name, "contains a backslash");
  }
  for (const std::string& part : components(name)) {
    if (part.empty()) return invalid(name, "an empty path component ('//' or a trailing '/')");
    if (part == ".") return invalid(name, "a '.' component (not a normalised path)");
    if (part == "..") return invalid(name, "a '..' component (locations may not leave the folder)");
    if (part.size() > kMaxComponentBytes)
      return invalid(name, absl::StrCat("a component longer than ", kMaxComponentBytes, " bytes"));
  }
  return absl::OkStatus();
}

namespace {

// The regular file `folder`/`name`, opened by read_beneath's rules.
absl::StatusOr<Fd> open_regular(const std::string& folder, std::string_view name, struct stat* st) {
  RETURN_IF_ERROR(check_location(name));
  const std::vector<std::string> parts = components(name);
  ASSIGN_OR_RETURN(Fd dir, open_folders(folder, name, parts, /*create=*/false));
  const std::string path = (folder.empty() ? "." : folder) + "/" + std::string(name);
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
  Fd fd(::openat(dir.get(), parts.back().c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.ok())
    return open_error(dir.get(), name, folder.empty() ? "." : folder, parts.back(),
                      std::string(name), errno);
  if (::fstat(fd.get(), st) != 0) return io_error(name, "read", path, errno);
  if (!S_ISREG(st->st_mode)) return invalid(name, "not a regular file");
  return fd;
}

}  // namespace

absl::StatusOr<std::string> read_beneath(const std::string& folder, std::string_view name) {
  struct stat st;
  ASSIGN_OR_RETURN(Fd fd, open_regular(folder, name, &st));
  const std::string path = (folder.empty() ? "." : folder) + "/" + std::string(name);
  auto bytes = read_all(fd.get(), absl::StrCat("'", path, "'"), static_cast<uint64_t>(st.st_size));
  if (!bytes.ok())
    return absl::Status(bytes.status().code(), absl::StrCat("external data location '", shown(name),
                                                            "': ", bytes.status().message()));
  return bytes;
}

absl::StatusOr<int> open_beneath(const std::string& folder, std::string_view name, uint64_t* size) {
  struct stat st;
  ASSIGN_OR_RETURN(Fd fd, open_regular(folder, name, &st));
  if (size) *size = static_cast<uint64_t>(st.st_size);
  // Reads of parts of it may block like any regular file read.
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags >= 0) ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  return fd.release();
}

absl::Status write_beneath(const std::string& folder, std::string_view name,
                           std::string_view bytes) {
  RETURN_IF_ERROR(check_location(name));
  const std::vector<std::string> parts = components(name);
  ASSIGN_OR_RETURN(Fd dir, open_folders(folder, name, parts, /*create=*/true));
  const std::string path = (folder.empty() ? "." : folder) + "/" + std::string(name);
  const std::string& last = parts.back();
  // rename() would replace a symbolic link rather than write through it; it is refused all the
  // same, so the rule is the same for reading and writing.
  struct stat st;
  if (::fstatat(dir.get(), last.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode))
      return invalid(name, absl::StrCat("'", shown(name), "' is a symbolic link (not followed)"));
    if (!S_ISREG(st.st_mode)) return invalid(name, "exists and is not a regular file");
  }
  // A short temporary name: `last` may already be as long as a name can be.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(".graft-tmp-", ::getpid(), "-", counter++);
  Fd fd(
      ::openat(dir.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666));
  if (!fd.ok()) return io_error(name, "create", path, errno);
  auto fail = [&](int err) {
    ::unlinkat(dir.get(), tmp.c_str(), 0);
    return io_error(name, "write", path, err);
  };
  for (size_t off = 0; off < bytes.size();) {
    ssize_t n = ::write(fd.get(), bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return fail(errno);
    off += static_cast<size_t>(n);
  }
  if (::close(fd.release()) != 0) return fail(errno);
  if (::renameat(dir.get(), tmp.c_str(), dir.get(), last.c_str()) != 0) return fail(errno);
  return absl::OkStatus();
}

absl::StatusOr<BeneathWriter> BeneathWriter::create(const std::string& folder,
                                                    std::string_view name) {
  RETURN_IF_ERROR(check_location(name));
  const std::vector<std::string> parts = components(name);
  ASSIGN_OR_RETURN(Fd dir, open_folders(folder, name, parts, /*create=*/true));
  BeneathWriter w;
  w.name_ = std::string(name);
  w.last_ = parts.back();
  w.path_ = (folder.empty() ? "." : folder) + "/" + std::string(name);
  struct stat st;
  if (::fstatat(dir.get(), w.last_.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode))
      return invalid(name, absl::StrCat("'", shown(name), "' is a symbolic link (not followed)"));
    if (!S_ISREG(st.st_mode)) return invalid(name, "exists and is not a regular file");
  }
  static std::atomic<uint64_t> counter{0};
  w.tmp_ = absl::StrCat(".graft-tmp-", ::getpid(), "-w", counter++);
  Fd fd(::openat(dir.get(), w.tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                 0666));
  if (!fd.ok()) return io_error(name, "create", w.path_, errno);
  w.dir_ = dir.release();
  w.fd_ = fd.release();
  return w;
}

BeneathWriter::BeneathWriter(BeneathWriter&& other) noexcept { *this = std::move(other); }

BeneathWriter& BeneathWriter::operator=(BeneathWriter&& other) noexcept {
  if (this != &other) {
    abandon();
    dir_ = std::exchange(other.dir_, -1);
    fd_ = std::exchange(other.fd_, -1);
    name_ = std::move(other.name_);
    last_ = std::move(other.last_);
    tmp_ = std::move(other.tmp_);
    path_ = std::move(other.path_);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

BeneathWriter::~BeneathWriter() { abandon(); }

void BeneathWriter::abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    if (dir_ >= 0) ::unlinkat(dir_, tmp_.c_str(), 0);
  }
  if (dir_ >= 0) {
    ::close(dir_);
    dir_ = -1;
  }
}

absl::Status BeneathWriter::append(std::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError("write to a closed file");
  for (size_t off = 0; off < bytes.size();) {
    ssize_t n = ::write(fd_, bytes.data() + off, bytes.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(name_, "write", path_, errno);
    off += static_cast<size_t>(n);
  }
  size_ += bytes.size();
  return absl::OkStatus();
}

absl::Status BeneathWriter::append_file(int in, const std::string& in_path) {
  if (fd_ < 0) return absl::FailedPreconditionError("write to a closed file");
  // In the kernel first (no copy through this process's memory); in blocks where the two
  // files' filesystems do not allow it.
  for (;;) {
    ssize_t n = ::copy_file_range(in, nullptr, fd_, nullptr, size_t{1} << 30, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      size_ += static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0) return absl::OkStatus();
    if (errno != EXDEV && errno != ENOSYS && errno != EINVAL && errno != EOPNOTSUPP)
      return io_error(name_, "write", path_, errno);
    break;
  }
  std::string block(size_t{4} << 20, 0);
  for (;;) {
    ssize_t n = ::read(in, block.data(), block.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error(name_, "read", in_path, errno);
    if (n == 0) return absl::OkStatus();
    RETURN_IF_ERROR(append(std::string_view(block.data(), static_cast<size_t>(n))));
  }
}

absl::Status BeneathWriter::pad_to(uint64_t alignment) {
  if (alignment <= 1 || size_ % alignment == 0) return absl::OkStatus();
  static const std::string zeros(4096, '\0');
  uint64_t missing = alignment - size_ % alignment;
  while (missing > 0) {
    const uint64_t n = std::min<uint64_t>(missing, zeros.size());
    RETURN_IF_ERROR(append(std::string_view(zeros.data(), n)));
    missing -= n;
  }
  return absl::OkStatus();
}

absl::Status BeneathWriter::commit() {
  if (fd_ < 0) return absl::FailedPreconditionError("commit of a closed file");
  const int fd = std::exchange(fd_, -1);
  auto fail = [&](int err) {
    ::unlinkat(dir_, tmp_.c_str(), 0);
    return io_error(name_, "write", path_, err);
  };
  if (::close(fd) != 0) return fail(errno);
  if (::renameat(dir_, tmp_.c_str(), dir_, last_.c_str()) != 0) return fail(errno);
  ::close(std::exchange(dir_, -1));
  return absl::OkStatus();
}

absl::Status copy_beneath(const std::string& from_folder, const std::string& to_folder,
                          std::string_view name) {
  ASSIGN_OR_RETURN(const int in, open_beneath(from_folder, name));
  Fd fd(in);
  ASSIGN_OR_RETURN(BeneathWriter out, BeneathWriter::create(to_folder, name));
  const std::string path = (from_folder.empty() ? "." : from_folder) + "/" + std::string(name);
  RETURN_IF_ERROR(out.append_file(fd.get(), path));
  return out.commit();
}

}  // namespace graft::paths
