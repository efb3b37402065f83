#include "client/file_digest.h"

#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include <cerrno>
#include <cstring>

#include <absl/strings/str_cat.h>

#include "core/base/status.h"
#include "core/cache/digest.h"
#include "core/paths/files.h"

namespace graft::client {

namespace {

constexpr char kVersion[] = "graft-sha256-v1";

// What identifies a file's content as long as nobody rewrites it behind its stamp.
struct Stamp {
  uint64_t dev = 0, ino = 0, size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const Stamp& o) const {
    return dev == o.dev && ino == o.ino && size == o.size && mtime_ns == o.mtime_ns;
  }
};

absl::Status stamp_of(int fd, std::string_view what, Stamp* out) {
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return absl::DataLossError(
        absl::StrCat(std::string(what), ": cannot stat: ", std::strerror(errno)));
  out->dev = static_cast<uint64_t>(st.st_dev);
  out->ino = static_cast<uint64_t>(st.st_ino);
  out->size = static_cast<uint64_t>(st.st_size);
  out->mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  return absl::OkStatus();
}

std::string key_of(const Stamp& s) {
  return absl::StrCat(kVersion, " ", s.dev, " ", s.ino, " ", s.size, " ", s.mtime_ns);
}

int64_t now_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

bool is_sha256_hex(std::string_view s) {
  return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

std::string entry_path(const std::string& folder, const Stamp& s) {
  return absl::StrCat(folder, "/", s.dev, "-", s.ino);
}

// The remembered digest and note, when the cache holds a valid entry for `now`.
bool recall(const std::string& folder, const Stamp& now, FileDigest* out) {
  auto read = paths::read_file(entry_path(folder, now), 512);
  if (!read.ok()) return false;
  // "<key: five words> <sha256> <note>"
  const std::string& value = *read;
  const std::string key = key_of(now);
  if (value.size() < key.size() + 1 || value.compare(0, key.size(), key) != 0 ||
      value[key.size()] != ' ')
    return false;
  const std::string rest = value.substr(key.size() + 1);
  const size_t space = rest.find(' ');
  if (space == std::string::npos) return false;
  const std::string sha = rest.substr(0, space), note = rest.substr(space + 1);
  if (!is_sha256_hex(sha) || note.empty() || note.find(' ') != std::string::npos) return false;
  out->sha256 = sha;
  out->size = now.size;
  out->note = note == "-" ? std::string() : note;
  out->recalled = true;
  return true;
}

}  // namespace

absl::StatusOr<FileDigest> digest_file(int fd, std::string_view what,
                                       const DigestOptions& options) {
  Stamp before;
  RETURN_IF_ERROR(stamp_of(fd, what, &before));
  const std::string& folder = options.cache_folder;
  FileDigest d;
  if (options.recall && !folder.empty() && recall(folder, before, &d)) return d;

  const int64_t started = now_ns();
  cache::Sha256 sha;
  uint64_t done = 0;
  RETURN_IF_ERROR(
      paths::read_range(fd, 0, before.size, options.piece_bytes, what, [&](std::string_view piece) {
        sha.update(piece);
        if (options.scan) options.scan(piece);
        done += piece.size();
        if (options.progress) options.progress(done, before.size);
        return true;
      }));
  Stamp after;
  RETURN_IF_ERROR(stamp_of(fd, what, &after));
  if (!(after == before))
    return absl::DataLossError(
        absl::StrCat(std::string(what), " changed while it was being hashed"));
  d.sha256 = sha.hex_digest();
  d.size = before.size;
  if (options.note) d.note = options.note();
  const bool settled = started - before.mtime_ns >= kSettleSeconds * 1'000'000'000;
  const bool plain_note = d.note.find_first_of(" \n") == std::string::npos && d.note != "-";
  if (options.remember && !folder.empty() && settled && plain_note) {
    const std::string value =
        absl::StrCat(key_of(before), " ", d.sha256, " ", d.note.empty() ? "-" : d.note);
    // Best effort: a folder that cannot be made or written keeps nothing.
    std::error_code ec;
    std::filesystem::create_directories(folder, ec);
    if (!ec) {
      std::filesystem::permissions(folder, std::filesystem::perms::owner_all,
                                   std::filesystem::perm_options::replace, ec);
      (void)paths::write_file_atomic(entry_path(folder, before), value);
    }
  }
  return d;
}

std::string default_digest_cache() {
  if (const char* own = std::getenv("GRAFT_DIGEST_CACHE")) {
    const std::string v = own;
    return v == "off" ? std::string() : v;
  }
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/')
    return absl::StrCat(xdg, "/graft/digests");
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] == '/')
    return absl::StrCat(home, "/.cache/graft/digests");
  return {};
}

}  // namespace graft::client
