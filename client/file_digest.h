// A file's sha256 for the lookup before upload, hashed in pieces, and remembered in a cache of
// the user's own so that asking again about an unchanged file costs no reading (a multi-GB model
// hashes at about 1.5 GB/s; its second lookup should not wait for that).
//
// The cache is one small file per input file, "<folder>/<dev>-<ino>", holding
// "graft-sha256-v1 <dev> <ino> <size> <mtime ns> <sha256> <note>". The input itself is never
// written to (no attribute, no change of its ctime, which backup tools watch). An entry is
// believed only when:
//  - dev, ino, size and modification time (nanoseconds) are those of the file now;
//  - it was written by a hash that started at least kSettleSeconds after the file's last
//    modification, and the file's stamp did not change while it was hashed: a file written again
//    within the clock's granularity of the hash could otherwise keep its stamp with new bytes
//    (git's "racily clean" entries; DVC keys its hash cache on inode, size and mtime alike).
// A file that was just written is therefore hashed again until it has settled. Storing is best
// effort: without a writable cache folder the digest is computed every time. Tools that rewrite
// a file in place and then restore its old modification time defeat this, as they defeat make
// and rsync: `graft ... --rehash` ignores remembered digests (and refreshes them).
//
// The folder: $GRAFT_DIGEST_CACHE ("off" or empty: none), else $XDG_CACHE_HOME/graft/digests,
// else $HOME/.cache/graft/digests (created with mode 0700).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include <absl/status/statusor.h>

namespace graft::client {

// How long after its last modification a file's digest may be remembered.
inline constexpr int64_t kSettleSeconds = 2;

struct FileDigest {
  std::string sha256;  // lowercase hex
  uint64_t size = 0;
  std::string note;       // what `note` returned when the file was hashed (remembered with it)
  bool recalled = false;  // from the attribute: the file was not read
};

// The cache folder from the environment (above); empty when there is none.
std::string default_digest_cache();

struct DigestOptions {
  std::string cache_folder;  // empty: nothing recalled or remembered
  bool recall = true;        // use a remembered digest when it is valid
  bool remember = true;      // store the digest after hashing
  // Sees every piece of the file when it is hashed (not when the digest is recalled).
  std::function<void(std::string_view)> scan;
  // A short word (no spaces) kept with the digest, computed after the last piece.
  std::function<std::string()> note;
  // (bytes hashed, size) as the hash goes.
  std::function<void(uint64_t, uint64_t)> progress;
  size_t piece_bytes = size_t{4} << 20;
};

// The digest of the regular file open at `fd` (its whole content, read with pread from offset
// 0). `what` names it in errors: DataLoss for a read error or a file that changed size while
// it was read.
absl::StatusOr<FileDigest> digest_file(int fd, std::string_view what,
                                       const DigestOptions& options = {});

}  // namespace graft::client
