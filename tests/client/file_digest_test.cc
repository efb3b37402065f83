// client::digest_file: a file's sha256, hashed in pieces or recalled from the user's digest cache
// while its stamp (device, inode, size, modification time) is unchanged and it had settled
// before it was hashed; the input file itself is never written to.
#include "client/file_digest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "core/cache/digest.h"
#include "core/paths/files.h"
#include "tests/temp_folder.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

class FileDigest : public ::testing::Test {
 protected:
  FileDigest() : cache_((folder_.path() / "cache").string()) {}

  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = (folder_.path() / name).string();
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    return path;
  }
  // Sets the file's modification time `seconds_ago` seconds in the past (a settled file).
  static void age(const std::string& path, int seconds_ago, long nanoseconds = 123456789) {
    timespec times[2];
    ::clock_gettime(CLOCK_REALTIME, &times[0]);
    times[1] = times[0];
    times[1].tv_sec -= seconds_ago;
    times[1].tv_nsec = nanoseconds;
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  }
  // digest_file on the file at `path`, counting the pieces it read.
  absl::StatusOr<client::FileDigest> digest(const std::string& path,
                                            client::DigestOptions options = {}) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0) << path;
    if (options.cache_folder.empty()) options.cache_folder = cache_;
    pieces_ = 0;
    options.scan = [&, inner = options.scan](std::string_view piece) {
      ++pieces_;
      if (inner) inner(piece);
    };
    auto d = client::digest_file(fd, path, options);
    ::close(fd);
    return d;
  }
  // The cache entry for the file at `path` ("" when there is none).
  std::string entry(const std::string& path) const {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return "";
    auto read = paths::read_file(cache_ + "/" + std::to_string(st.st_dev) + "-" +
                                 std::to_string(st.st_ino));
    return read.ok() ? *read : "";
  }
  void set_entry(const std::string& path, const std::string& value) const {
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    ASSERT_TRUE(
        paths::write_file_atomic(
            cache_ + "/" + std::to_string(st.st_dev) + "-" + std::to_string(st.st_ino), value)
            .ok());
  }

  TempFolder folder_;
  std::string cache_;
  int pieces_ = 0;
};

TEST_F(FileDigest, ASettledFileIsHashedOnceThenRecalledWithItsNote) {
  const std::string bytes(10 << 20, 'x');
  const std::string path = write("model.onnx", bytes);
  age(path, 60);
  client::DigestOptions options;
  options.piece_bytes = 1 << 20;
  options.note = [] { return std::string("plain"); };
  auto first = digest(path, options);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(first->recalled);
  EXPECT_EQ(first->sha256, cache::sha256_hex(bytes));
  EXPECT_EQ(first->size, bytes.size());
  EXPECT_EQ(pieces_, 10);
  EXPECT_NE(entry(path).find(first->sha256), std::string::npos) << entry(path);
  // The cache folder is the user's own; the input was not written to.
  EXPECT_EQ(std::filesystem::status(cache_).permissions(), std::filesystem::perms::owner_all);
  EXPECT_EQ(read_file(path), bytes);
  auto second = digest(path, options);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(second->recalled);
  EXPECT_EQ(pieces_, 0);  // not read
  EXPECT_EQ(second->sha256, first->sha256);
  EXPECT_EQ(second->size, bytes.size());
  EXPECT_EQ(second->note, "plain");
  // recall = false reads it again (and refreshes the attribute).
  options.recall = false;
  auto third = digest(path, options);
  ASSERT_TRUE(third.ok());
  EXPECT_FALSE(third->recalled);
  EXPECT_EQ(third->sha256, first->sha256);
}

TEST_F(FileDigest, AJustWrittenFileIsNotRemembered) {
  const std::string path = write("fresh.onnx", "fresh bytes");
  ASSERT_TRUE(digest(path).ok());
  EXPECT_EQ(entry(path), "");
  auto again = digest(path);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->recalled);
  // remember = false keeps nothing even for a settled file, nor does an unusable folder.
  age(path, 60);
  client::DigestOptions off;
  off.remember = false;
  ASSERT_TRUE(digest(path, off).ok());
  EXPECT_EQ(entry(path), "");
  client::DigestOptions unusable;
  unusable.cache_folder = path + "/not-a-folder";
  auto d = digest(path, unusable);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->sha256, cache::sha256_hex("fresh bytes"));
}

TEST_F(FileDigest, AChangedStampIsHashedAgain) {
  const std::string path = write("m.onnx", "aaaa");
  age(path, 60);
  ASSERT_TRUE(digest(path).ok());
  ASSERT_TRUE(digest(path)->recalled);
  // Same size, new bytes, a new modification time: the stamp differs.
  write("m.onnx", "bbbb");
  age(path, 30);
  auto d = digest(path);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->recalled);
  EXPECT_EQ(d->sha256, cache::sha256_hex("bbbb"));
  // Another size, the old modification time restored: the size differs.
  write("m.onnx", "ccccc");
  age(path, 30);
  d = digest(path);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->recalled);
  EXPECT_EQ(d->sha256, cache::sha256_hex("ccccc"));
  // A copy (another inode) with the same size and time is hashed too.
  const std::string copy = (folder_.path() / "copy.onnx").string();
  std::filesystem::copy_file(path, copy);
  age(copy, 30);
  std::string stored = entry(path);
  set_entry(copy, stored);  // the original's entry, under the copy's inode
  d = digest(copy);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->recalled);
}

TEST_F(FileDigest, RewritingInPlaceAndRestoringTheTimeNeedsRecallOff) {
  // The documented limit: same inode, size and modification time with other bytes is believed;
  // --rehash (recall = false) gets the truth.
  const std::string path = write("m.onnx", "aaaa");
  age(path, 60, 5);
  ASSERT_TRUE(digest(path).ok());
  write("m.onnx", "bbbb");  // same inode (truncated and rewritten)
  age(path, 60, 5);
  auto believed = digest(path);
  ASSERT_TRUE(believed.ok());
  EXPECT_TRUE(believed->recalled);
  EXPECT_EQ(believed->sha256, cache::sha256_hex("aaaa"));
  client::DigestOptions rehash;
  rehash.recall = false;
  auto truth = digest(path, rehash);
  ASSERT_TRUE(truth.ok());
  EXPECT_EQ(truth->sha256, cache::sha256_hex("bbbb"));
  EXPECT_TRUE(digest(path)->sha256 == truth->sha256);  // refreshed
}

TEST_F(FileDigest, AMalformedEntryIsNotBelieved) {
  const std::string path = write("m.onnx", "model");
  age(path, 60);
  ASSERT_TRUE(digest(path).ok());
  const std::string stored = entry(path);
  ASSERT_FALSE(stored.empty());
  const std::string sha = cache::sha256_hex("model");
  const std::string key = stored.substr(0, stored.find(sha));
  for (const std::string& bad :
       {std::string("garbage"), key + "NOTHEX" + std::string(58, 'a') + " -", key + sha,
        key + sha + " two words", key.substr(0, key.size() - 2) + "0 " + sha + " -",
        stored + std::string(600, ' ')}) {
    set_entry(path, bad);
    client::DigestOptions keep_none;
    keep_none.remember = false;
    auto d = digest(path, keep_none);
    ASSERT_TRUE(d.ok());
    EXPECT_FALSE(d->recalled) << bad;
    EXPECT_EQ(d->sha256, sha);
  }
  set_entry(path, stored);
  EXPECT_TRUE(digest(path)->recalled);
}

TEST_F(FileDigest, TheFolderComesFromTheEnvironment) {
  ::setenv("GRAFT_DIGEST_CACHE", "/some/where", 1);
  EXPECT_EQ(client::default_digest_cache(), "/some/where");
  ::setenv("GRAFT_DIGEST_CACHE", "off", 1);
  EXPECT_EQ(client::default_digest_cache(), "");
  ::unsetenv("GRAFT_DIGEST_CACHE");
  ::setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(client::default_digest_cache(), "/xdg/graft/digests");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(client::default_digest_cache(), "/home/u/.cache/graft/digests");
  ::unsetenv("HOME");
  EXPECT_EQ(client::default_digest_cache(), "");
}

TEST_F(FileDigest, AFileThatChangesWhileHashedIsDataLoss) {
  const std::string path = write("m.onnx", std::string(3 << 20, 'z'));
  age(path, 60);
  client::DigestOptions options;
  options.piece_bytes = 1 << 20;
  bool grown = false;
  options.scan = [&](std::string_view) {
    if (grown) return;
    grown = true;
    std::ofstream(path, std::ios::binary | std::ios::app) << "more";
  };
  auto d = digest(path, options);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss) << d.status();
  EXPECT_EQ(entry(path), "");
}

}  // namespace
}  // namespace graft::testing
