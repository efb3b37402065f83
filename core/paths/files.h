// Whole-file reads and writes with sized system calls. A regular file is read with one
// allocation of its size (fstat) straight into the result; a pipe or terminal in blocks that
// double. Writes go out in as few write(2) calls as the kernel takes. Used wherever a whole
// model or file is read or written (the CLI, Model::load_file, external data), so none of them
// reads byte by byte through a stream buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>

#include <absl/status/statusor.h>

namespace graft::paths {

inline constexpr uint64_t kNoLimit = std::numeric_limits<uint64_t>::max();

// The status code for a failed system call's errno, one mapping for every file error Graft
// reports: NotFound (ENOENT, ENOTDIR), PermissionDenied (EACCES, EPERM, EROFS), InvalidArgument
// (EISDIR), ResourceExhausted (ENOMEM, ENOSPC, EDQUOT, EFBIG), else DataLoss.
absl::StatusCode errno_code(int err);

// Everything `fd` yields until end of file (`fd` stays open). `size_hint`: the expected size
// (e.g. from fstat; 0 when unknown), allocated at once. `what` names the source in errors.
// Errors: DataLoss "cannot read <what>: <strerror>", ResourceExhausted when more than
// `max_bytes` arrive or memory for them cannot be had.
absl::StatusOr<std::string> read_all(int fd, std::string_view what, uint64_t size_hint = 0,
                                     uint64_t max_bytes = kNoLimit);

// The bytes of the file at `path` (read_all with its size). Errors name the path: NotFound or
// PermissionDenied when it cannot be opened, InvalidArgument for a directory, else read_all's.
absl::StatusOr<std::string> read_file(const std::string& path, uint64_t max_bytes = kNoLimit);

// Reads the file at `path` in blocks of `block_bytes` into one reused buffer, calling `each` on
// every block in order: for a pass over a file (a digest, say) without holding all of it.
// Errors as read_file's.
absl::Status read_blocks(const std::string& path, const std::function<void(std::string_view)>& each,
                         size_t block_bytes = size_t{4} << 20);

// Reads exactly `n` bytes of `fd` at `offset` into `dst` (pread, retried until done). DataLoss
// "<what>: cannot read: <strerror>", or "<what> ended before offset <offset + n> (it changed
// while being read)" when the file is shorter.
absl::Status pread_exact(int fd, char* dst, size_t n, uint64_t offset, std::string_view what);

// Reads the `size` bytes of `fd` from `offset` in pieces of at most `piece_bytes`, into one
// reused buffer, calling `each` on every piece in order: a range of a multi-GB file passed on
// (hashed, sent, copied) without holding it. `each` returning false stops the read (OK).
// Errors as pread_exact's.
absl::Status read_range(int fd, uint64_t offset, uint64_t size, size_t piece_bytes,
                        std::string_view what, const std::function<bool(std::string_view)>& each);

// Writes all of `bytes` to `fd`. DataLoss "cannot write <what>: <strerror>" on failure.
absl::Status write_all(int fd, std::string_view bytes, std::string_view what);

// A file written in pieces through a temporary file beside `path` ("<path>.tmp.<pid>"),
// renamed over `path` by commit(): until then `path` is untouched, and a writer destroyed
// without commit() removes its temporary file, so a failed or abandoned write never leaves a
// partial file at `path`. For a result that arrives in chunks (the CLI's download). Errors name
// the path: open's (NotFound, PermissionDenied ...), DataLoss or ResourceExhausted (ENOSPC) for
// a failed write.
class AtomicFileWriter {
 public:
  static absl::StatusOr<AtomicFileWriter> open(const std::string& path);
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&& other) = delete;
  ~AtomicFileWriter();

  absl::Status append(std::string_view bytes);
  // Drops what was appended: the file is empty again.
  absl::Status restart();
  uint64_t size() const { return size_; }
  // Closes the temporary file and renames it over `path`. Once only.
  absl::Status commit();

 private:
  AtomicFileWriter(std::string path, std::string tmp, int fd);
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Writes `bytes` to `path` with an AtomicFileWriter: a failed write never leaves a partial file
// at `path`. Errors name the path.
absl::Status write_file_atomic(const std::string& path, std::string_view bytes);

}  // namespace graft::paths
