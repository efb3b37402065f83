// ONNX external-data locations, read and written without leaving a folder. One rule for the
// server (names in an upload), the client library (names a server returns) and the CLI (names
// in a model it reads, files it writes): a location is a relative, normalised path inside the
// folder, and no component of it is a symbolic link.
#pragma once

#include <cstdint>
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

// Opens `folder`/`name` for reading under read_beneath's rules, for a caller that reads it in
// pieces (a multi-GB file); the caller owns (and closes) the descriptor. `size`, if not null,
// receives the file's size. Errors as read_beneath's.
absl::StatusOr<int> open_beneath(const std::string& folder, std::string_view name,
                                 uint64_t* size = nullptr);

// Writes `bytes` to `folder`/`name`, creating the intermediate folders, atomically (a temporary
// file renamed over the target). The same rules as read_beneath: an existing component that is
// a symbolic link is an InvalidArgument error, and nothing is written; other failures are
// PermissionDenied, NotFound or DataLoss.
absl::Status write_beneath(const std::string& folder, std::string_view name,
                           std::string_view bytes);

// Copies `from_folder`/`name` to `to_folder`/`name` in pieces (copy_file_range, so a multi-GB
// file never passes through memory), reading under read_beneath's rules and writing under
// write_beneath's (atomically). Errors as theirs.
absl::Status copy_beneath(const std::string& from_folder, const std::string& to_folder,
                          std::string_view name);

}  // namespace graft::paths
