#include "core/paths/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <utility>

#include <absl/strings/str_cat.h>

#include "core/base/status.h"

namespace graft::paths {

namespace {

// One read(2) or write(2) moves at most this much (Linux caps a call near 2 GiB anyway).
constexpr size_t kMaxCall = size_t{1} << 30;
// The first block for a source of unknown size.
constexpr size_t kFirstBlock = size_t{1} << 20;

absl::Status errno_status(int err, std::string_view doing, std::string_view what) {
  return absl::Status(errno_code(err), absl::StrCat("cannot ", std::string(doing), " ",
                                                    std::string(what), ": ", std::strerror(err)));
}

absl::Status too_big(std::string_view what, uint64_t max_bytes) {
  return absl::ResourceExhaustedError(
      absl::StrCat(std::string(what), " is larger than ", max_bytes, " bytes"));
}

// Grows `out` to at least `want` bytes (zero-filled), false when memory cannot be had.
bool grow(std::string& out, size_t want) {
  try {
    out.resize(want);
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  } catch (const std::length_error&) {
    return false;
  }
}

struct Closer {
  int fd;
  ~Closer() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

absl::StatusCode errno_code(int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::StatusCode::kNotFound;
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case EISDIR:
      return absl::StatusCode::kInvalidArgument;
    case ENOMEM:
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return absl::StatusCode::kResourceExhausted;
    default:
      return absl::StatusCode::kDataLoss;
  }
}

absl::StatusOr<std::string> read_all(int fd, std::string_view what, uint64_t size_hint,
                                     uint64_t max_bytes) {
  std::string out;
  const uint64_t first = std::min<uint64_t>(size_hint > 0 ? size_hint : kFirstBlock, max_bytes);
  if (!grow(out, static_cast<size_t>(std::min<uint64_t>(first, out.max_size()))))
    return absl::ResourceExhaustedError(absl::StrCat("no memory for ", std::string(what)));
  size_t len = 0;
  while (true) {
    if (len == out.size()) {
      // Full: one small read tells the end of the data from more of it.
      char probe[4096];
      ssize_t n = ::read(fd, probe, sizeof probe);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno_status(errno, "read", what);
      if (n == 0) break;
      if (len + static_cast<uint64_t>(n) > max_bytes) return too_big(what, max_bytes);
      const uint64_t want =
          std::min<uint64_t>(std::max<uint64_t>(2 * out.size(), kFirstBlock), max_bytes);
      if (!grow(out, static_cast<size_t>(std::max<uint64_t>(want, len + n))))
        return absl::ResourceExhaustedError(absl::StrCat("no memory for ", std::string(what)));
      std::memcpy(out.data() + len, probe, static_cast<size_t>(n));
      len += static_cast<size_t>(n);
      continue;
    }
    ssize_t n = ::read(fd, out.data() + len, std::min(out.size() - len, kMaxCall));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status(errno, "read", what);
    if (n == 0) break;
    len += static_cast<size_t>(n);
  }
  out.resize(len);
  return out;
}

// Opens `path` for reading (not a directory); its size when it is a regular file, else 0.
absl::Status open_for_reading(const std::string& path, const std::string& what, Closer* fd,
                              uint64_t* size) {
  fd->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd->fd < 0) return errno_status(errno, "open", what);
  struct stat st;
  if (::fstat(fd->fd, &st) != 0) return errno_status(errno, "read", what);
  if (S_ISDIR(st.st_mode)) return errno_status(EISDIR, "read", what);
  *size = S_ISREG(st.st_mode) && st.st_size > 0 ? static_cast<uint64_t>(st.st_size) : 0;
  return absl::OkStatus();
}

absl::StatusOr<std::string> read_file(const std::string& path, uint64_t max_bytes) {
  const std::string what = absl::StrCat("'", path, "'");
  Closer fd{-1};
  uint64_t size = 0;
  RETURN_IF_ERROR(open_for_reading(path, what, &fd, &size));
  if (size > max_bytes) return too_big(what, max_bytes);
  return read_all(fd.fd, what, size, max_bytes);
}

absl::Status read_blocks(const std::string& path, const std::function<void(std::string_view)>& each,
                         size_t block_bytes) {
  const std::string what = absl::StrCat("'", path, "'");
  Closer fd{-1};
  uint64_t size = 0;
  RETURN_IF_ERROR(open_for_reading(path, what, &fd, &size));
  std::string buffer(std::max<size_t>(block_bytes, 1), '\0');
  while (true) {
    ssize_t n = ::read(fd.fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status(errno, "read", what);
    if (n == 0) return absl::OkStatus();
    each(std::string_view(buffer.data(), static_cast<size_t>(n)));
  }
}

absl::Status pread_exact(int fd, char* dst, size_t n, uint64_t offset, std::string_view what) {
  for (size_t done = 0; done < n;) {
    ssize_t got = ::pread(fd, dst + done, n - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      return absl::DataLossError(
          absl::StrCat(std::string(what), ": cannot read: ", std::strerror(errno)));
    if (got == 0)
      return absl::DataLossError(absl::StrCat(std::string(what), " ended before offset ",
                                              offset + n, " (it changed while being read)"));
    done += static_cast<size_t>(got);
  }
  return absl::OkStatus();
}

absl::Status read_range(int fd, uint64_t offset, uint64_t size, size_t piece_bytes,
                        std::string_view what, const std::function<bool(std::string_view)>& each) {
  std::string buffer(
      static_cast<size_t>(std::min<uint64_t>(size, std::max<size_t>(piece_bytes, 1))), '\0');
  for (uint64_t done = 0; done < size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(size - done, buffer.size()));
    RETURN_IF_ERROR(pread_exact(fd, buffer.data(), n, offset + done, what));
    done += n;
    if (!each(std::string_view(buffer.data(), n))) break;
  }
  return absl::OkStatus();
}

absl::Status write_all(int fd, std::string_view bytes, std::string_view what) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, std::min(bytes.size() - done, kMaxCall));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno_status(errno, "write", what);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

AtomicFileWriter::AtomicFileWriter(std::string path, std::string tmp, int fd)
    : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      tmp_(std::move(other.tmp_)),
      fd_(std::exchange(other.fd_, -1)),
      size_(other.size_) {}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

absl::StatusOr<AtomicFileWriter> AtomicFileWriter::open(const std::string& path) {
  std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return errno_status(errno, "write", absl::StrCat("'", path, "'"));
  return AtomicFileWriter(path, std::move(tmp), fd);
}

absl::Status AtomicFileWriter::append(std::string_view bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError("the file was committed already");
  size_ += bytes.size();
  return write_all(fd_, bytes, absl::StrCat("'", path_, "'"));
}

absl::Status AtomicFileWriter::restart() {
  if (fd_ < 0) return absl::FailedPreconditionError("the file was committed already");
  if (::ftruncate(fd_, 0) != 0 || ::lseek(fd_, 0, SEEK_SET) != 0)
    return errno_status(errno, "write", absl::StrCat("'", path_, "'"));
  size_ = 0;
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::commit() {
  if (fd_ < 0) return absl::FailedPreconditionError("the file was committed already");
  const std::string what = absl::StrCat("'", path_, "'");
  absl::Status st;
  if (::close(std::exchange(fd_, -1)) != 0) st = errno_status(errno, "write", what);
  if (st.ok() && std::rename(tmp_.c_str(), path_.c_str()) != 0)
    st = errno_status(errno, "write", what);
  if (!st.ok()) ::unlink(tmp_.c_str());
  return st;
}

absl::Status write_file_atomic(const std::string& path, std::string_view bytes) {
  ASSIGN_OR_RETURN(AtomicFileWriter writer, AtomicFileWriter::open(path));
  RETURN_IF_ERROR(writer.append(bytes));
  return writer.commit();
}

}  // namespace graft::paths
