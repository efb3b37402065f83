// ONNX external-data locations, read and written without leaving a folder. One rule for the
// server (names in an upload), the client library (names a server returns) and the CLI (names
// in a model it reads, files it writes): a location is a relative, normalised path inside the
// folder, and no component of it is a symbolic link.
#pragma once

#include <string>
#include <string_view>

#include <absl/status/statusor.h>

namespace graft::paths {

// InvalidArgument "invalid external data location '<name>': <why>" unless `name` is a relative
// path of non-empty components, none of them "." or "..", without a backslash or a control
// character, at most 4095 bytes with components of at most 255. Checks the text only.
absl::Status check_location(std::string_view name);

// `name` as error messages quote it: C-escaped, cut after 200 bytes.
std::string shown_location(std::string_view name);

// The bytes of `folder`/`name`. `folder` is the caller's (it may be reached through symlinks);
// below it no component may be a symbolic link and the last must be a regular file.
// Errors: InvalidArgument (as check_location's) for a bad name, a symbolic link or something
// other than a regular file; NotFound, PermissionDenied or DataLoss (message naming the path)
// when the file cannot be opened or read.
absl::StatusOr<std::string> read_beneath(const std::string& folder, std::string_view name);

// Writes `bytes` to `folder`/`name`, creating the intermediate folders, atomically (a temporary
// file renamed over the target). The same rules as read_beneath: an existing component that is
// a symbolic link is an InvalidArgument error, and nothing is written; other failures are
// PermissionDenied, NotFound or DataLoss.
absl::Status write_beneath(const std::string& folder, std::string_view name,
                           std::string_view bytes);

// A regular file below `folder` opened for reading parts of it (pread), by the same rules and
// with the same errors as read_beneath. The descriptor is the caller's to close.
// `size`, if not null, receives the file's size.
absl::StatusOr<int> open_beneath(const std::string& folder, std::string_view name,
                                 uint64_t* size = nullptr);

// A file below `folder` written in pieces (write_beneath's rules): the bytes go to a temporary
// file beside the target, renamed over it by commit(). Destroyed without commit(), the
// temporary file is removed and the target left as it was.
class BeneathWriter {
 public:
  static absl::StatusOr<BeneathWriter> create(const std::string& folder, std::string_view name);
  BeneathWriter(BeneathWriter&& other) noexcept;
  BeneathWriter& operator=(BeneathWriter&& other) noexcept;
  BeneathWriter(const BeneathWriter&) = delete;
  ~BeneathWriter();

  absl::Status append(std::string_view bytes);
  // Appends what is left of the file open as `in` (named `in_path` in errors), in the kernel
  // where it can (copy_file_range), else in blocks.
  absl::Status append_file(int in, const std::string& in_path);
  // Zero bytes up to the next multiple of `alignment` (a power of two or any positive number).
  absl::Status pad_to(uint64_t alignment);
  uint64_t size() const { return size_; }
  absl::Status commit();

 private:
  BeneathWriter() = default;
  void abandon();
  int dir_ = -1, fd_ = -1;
  std::string name_, last_, tmp_, path_;
  uint64_t size_ = 0;
};

// Copies `from_folder`/`name` to `to_folder`/`name` in blocks (never the whole file in memory),
// by the rules of read_beneath and write_beneath. Errors as theirs.
absl::Status copy_beneath(const std::string& from_folder, const std::string& to_folder,
                          std::string_view name);

}  // namespace graft::paths
