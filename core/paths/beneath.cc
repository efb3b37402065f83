#include "core/paths/beneath.h"

#include "core/paths/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <cerrno>
#include <system_error>
#include <utility>
#include <vector>

#include <absl/strings/escaping.h>
#include <absl/strings/str_cat.h>

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
  return absl::Status(errno_code(err), absl::StrCat("external data location '", shown(name),
                                                    "': cannot ", what, " '", path,
                                                    "': ", errno_text(err)));
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

absl::StatusOr<int> open_beneath(const std::string& folder, std::string_view name,
                                 uint64_t* size) {
  if (auto st = check_location(name); !st.ok()) return st;
  const std::vector<std::string> parts = components(name);
  auto dir = open_folders(folder, name, parts, /*create=*/false);
  if (!dir.ok()) return dir.status();
  const std::string path = (folder.empty() ? "." : folder) + "/" + std::string(name);
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused just below).
  Fd fd(::openat(dir->get(), parts.back().c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.ok())
    return open_error(dir->get(), name, folder.empty() ? "." : folder, parts.back(),
                      std::string(name), errno);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return io_error(name, "read", path, errno);
  if (!S_ISREG(st.st_mode)) return invalid(name, "not a regular file");
  if (size) *size = static_cast<uint64_t>(st.st_size);
  return fd.release();
}

absl::StatusOr<std::string> read_beneath(const std::string& folder, std::string_view name) {
  uint64_t size = 0;
  auto opened = open_beneath(folder, name, &size);
  if (!opened.ok()) return opened.status();
  Fd fd(*opened);
  const std::string path = (folder.empty() ? "." : folder) + "/" + std::string(name);
  auto bytes = read_all(fd.get(), absl::StrCat("'", path, "'"), size);
  if (!bytes.ok())
    return absl::Status(bytes.status().code(),
                        absl::StrCat("external data location '", shown(name), "': ",
                                     bytes.status().message()));
  return bytes;
}

namespace {

// write_beneath's procedure, with `fill` writing the contents to the temporary file's
// descriptor (returning 0, or the errno of a failed write).
absl::Status write_beneath_with(const std::string& folder, std::string_view name,
                                const std::function<int(int)>& fill) {
  if (auto st = check_location(name); !st.ok()) return st;
  const std::vector<std::string> parts = components(name);
  auto dir = open_folders(folder, name, parts, /*create=*/true);
  if (!dir.ok()) return dir.status();
  const std::string path = (folder.empty() ? "." : folder) + "/" + std::string(name);
  const std::string& last = parts.back();
  // rename() would replace a symbolic link rather than write through it; it is refused all the
  // same, so the rule is the same for reading and writing.
  struct stat st;
  if (::fstatat(dir->get(), last.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode))
      return invalid(name, absl::StrCat("'", shown(name), "' is a symbolic link (not followed)"));
    if (!S_ISREG(st.st_mode)) return invalid(name, "exists and is not a regular file");
  }
  // A short temporary name: `last` may already be as long as a name can be.
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = absl::StrCat(".graft-tmp-", ::getpid(), "-", counter++);
  Fd fd(::openat(dir->get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                 0666));
  if (!fd.ok()) return io_error(name, "create", path, errno);
  auto fail = [&](int err) {
    ::unlinkat(dir->get(), tmp.c_str(), 0);
    return io_error(name, "write", path, err);
  };
  if (int err = fill(fd.get()); err != 0) return fail(err);
  if (::close(fd.release()) != 0) return fail(errno);
  if (::renameat(dir->get(), tmp.c_str(), dir->get(), last.c_str()) != 0) return fail(errno);
  return absl::OkStatus();
}

}  // namespace

absl::Status write_beneath(const std::string& folder, std::string_view name,
                           std::string_view bytes) {
  return write_beneath_with(folder, name, [&](int fd) {
    for (size_t off = 0; off < bytes.size();) {
      ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno;
      off += static_cast<size_t>(n);
    }
    return 0;
  });
}

absl::Status copy_beneath(const std::string& from_folder, const std::string& to_folder,
                          std::string_view name) {
  uint64_t size = 0;
  auto opened = open_beneath(from_folder, name, &size);
  if (!opened.ok()) return opened.status();
  Fd in(*opened);
  return write_beneath_with(to_folder, name, [&](int out) {
    uint64_t done = 0;
    bool kernel_copy = true;
    std::string buffer;
    while (done < size) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(size - done, 64u << 20));
      ssize_t n = -1;
      if (kernel_copy) {
        // In the kernel (no copy through user memory; a reflink where the filesystem can).
        loff_t off_in = static_cast<loff_t>(done);
        n = ::copy_file_range(in.get(), &off_in, out, nullptr, want, 0);
        if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
          kernel_copy = false;
          continue;
        }
      } else {
        if (buffer.empty()) buffer.resize(4u << 20);
        n = ::pread(in.get(), buffer.data(), std::min(want, buffer.size()),
                    static_cast<off_t>(done));
        if (n > 0) {
          for (ssize_t w = 0; w < n;) {
            ssize_t m = ::write(out, buffer.data() + w, static_cast<size_t>(n - w));
            if (m < 0 && errno == EINTR) continue;
            if (m < 0) return errno;
            w += m;
          }
        }
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno;
      if (n == 0) return EIO;  // the file shrank while being copied
      done += static_cast<uint64_t>(n);
    }
    return 0;
  });
}

}  // namespace graft::paths
