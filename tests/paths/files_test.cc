// Whole-file reads and writes (core/paths/files.h): sized reads of regular files, doubling
// blocks from pipes, limits, errors naming the path, and writes that never leave a partial file.
#include "core/paths/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>
#include <thread>

#include "tests/testing.h"

namespace graft::testing {
namespace {

namespace fs = std::filesystem;

class Files : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("graft_files_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  void write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
  }
  fs::path dir_;
};

// Bytes that are not all the same, so a misplaced block shows.
std::string pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + i / 4096) & 0xff);
  return s;
}

TEST_F(Files, ReadsRegularFilesWhole) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{4096}, size_t{3} << 20}) {
    const std::string bytes = pattern(n);
    write("f", bytes);
    auto got = paths::read_file(path("f"));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, bytes) << n;
  }
}

TEST_F(Files, ReadsPipesOfUnknownSizeInGrowingBlocks) {
  // More than the first block (1 MiB) and not a multiple of it, written in odd pieces.
  const std::string bytes = pattern((5 << 20) + 12345);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::thread writer([&] {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n =
          ::write(fds[1], bytes.data() + done, std::min<size_t>(70001, bytes.size() - done));
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::close(fds[1]);
  });
  auto got = paths::read_all(fds[0], "a pipe");
  writer.join();
  ::close(fds[0]);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->size(), bytes.size());
  EXPECT_EQ(*got, bytes);
}

TEST_F(Files, AHintSmallerOrLargerThanTheDataStillReadsItAll) {
  const std::string bytes = pattern(100000);
  write("f", bytes);
  for (uint64_t hint : {uint64_t{10}, uint64_t{100000}, uint64_t{1} << 24}) {
    int fd = ::open(path("f").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    auto got = paths::read_all(fd, "f", hint);
    ::close(fd);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, bytes) << hint;
  }
}

TEST_F(Files, LimitsAndErrorsNameTheFile) {
  write("f", pattern(1000));
  auto big = paths::read_file(path("f"), 999);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(paths::read_file(path("f"), 1000).ok());
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], "0123456789", 10), 10);
  ::close(fds[1]);
  EXPECT_EQ(paths::read_all(fds[0], "a pipe", 0, 9).status().code(),
            absl::StatusCode::kResourceExhausted);
  ::close(fds[0]);

  auto missing = paths::read_file(path("none"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(path("none")), std::string::npos) << missing.status();
  auto folder = paths::read_file(dir_.string());
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kInvalidArgument) << folder.status();
}

TEST_F(Files, BlocksCoverTheFileInOrder) {
  const std::string bytes = pattern((1 << 20) + 77);
  write("f", bytes);
  for (size_t block : {size_t{1000}, size_t{1} << 20, size_t{4} << 20}) {
    std::string joined;
    size_t calls = 0;
    auto st = paths::read_blocks(
        path("f"),
        [&](std::string_view b) {
          EXPECT_LE(b.size(), block);
          joined.append(b);
          ++calls;
        },
        block);
    ASSERT_TRUE(st.ok()) << st;
    EXPECT_EQ(joined, bytes) << block;
    EXPECT_GE(calls, (bytes.size() + block - 1) / block);
  }
  EXPECT_EQ(paths::read_blocks(path("none"), [](std::string_view) {}).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(Files, AtomicWritesReplaceWholeOrNotAtAll) {
  const std::string bytes = pattern(2 << 20);
  ASSERT_TRUE(paths::write_file_atomic(path("out"), bytes).ok());
  EXPECT_EQ(read_file(dir_ / "out"), bytes);
  ASSERT_TRUE(paths::write_file_atomic(path("out"), "short").ok());
  EXPECT_EQ(read_file(dir_ / "out"), "short");
  auto st = paths::write_file_atomic(path("no/such/folder/out"), bytes);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  // Nothing but the target is left behind.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_EQ(e.path().filename(), "out");
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST_F(Files, AnAtomicWriterShowsNothingUntilCommitAndCleansUpWhenDropped) {
  write("out", "old");
  const std::string a = pattern(3 << 20), b = pattern(1000);
  {
    auto w = paths::AtomicFileWriter::open(path("out"));
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE(w->append(a.substr(0, 1 << 20)).ok());
    ASSERT_TRUE(w->append(a.substr(1 << 20)).ok());
    EXPECT_EQ(w->size(), a.size());
    EXPECT_EQ(read_file(dir_ / "out"), "old");  // untouched until commit
    // Dropped without commit: the temporary file goes, the target stays.
  }
  EXPECT_EQ(read_file(dir_ / "out"), "old");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  auto w = paths::AtomicFileWriter::open(path("out"));
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE(w->append(a).ok());
  ASSERT_TRUE(w->restart().ok());  // what was appended is dropped
  EXPECT_EQ(w->size(), 0u);
  ASSERT_TRUE(w->append(b).ok());
  // Moved writers keep the file; the moved-from one owns nothing.
  paths::AtomicFileWriter moved(std::move(*w));
  ASSERT_TRUE(moved.commit().ok());
  EXPECT_EQ(read_file(dir_ / "out"), b);
  EXPECT_EQ(moved.commit().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(moved.append("x").code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  EXPECT_EQ(paths::AtomicFileWriter::open(path("no/such/folder/out")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(Files, WriteAllToAClosedPipeIsAnError) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ::close(fds[0]);
  signal(SIGPIPE, SIG_IGN);
  auto st = paths::write_all(fds[1], "bytes", "a closed pipe");
  ::close(fds[1]);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("a closed pipe"), std::string::npos) << st;
}

TEST_F(Files, RangesAreReadInPiecesAndAShortFileIsDataLoss) {
  const std::string bytes = pattern(10000);
  write("r.bin", bytes);
  const int fd = ::open(path("r.bin").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::string got;
  size_t pieces = 0;
  auto st = paths::read_range(fd, 100, 9000, 4096, "'r.bin'", [&](std::string_view piece) {
    EXPECT_LE(piece.size(), 4096u);
    got += piece;
    ++pieces;
    return true;
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(got, bytes.substr(100, 9000));
  EXPECT_EQ(pieces, 3u);
  // `each` returning false stops the read.
  pieces = 0;
  EXPECT_TRUE(paths::read_range(fd, 0, 10000, 1000, "'r.bin'", [&](std::string_view) {
                return ++pieces < 2;
              }).ok());
  EXPECT_EQ(pieces, 2u);
  // Past the end: DataLoss naming the file and the offset it needed.
  st = paths::read_range(fd, 5000, 6000, 4096, "'r.bin'", [](std::string_view) { return true; });
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find("'r.bin' ended before offset 11000"), std::string::npos) << st;
  char buf[8];
  EXPECT_TRUE(paths::pread_exact(fd, buf, sizeof buf, 9992, "'r.bin'").ok());
  EXPECT_EQ(std::string(buf, 8), bytes.substr(9992));
  EXPECT_EQ(paths::pread_exact(fd, buf, sizeof buf, 9993, "'r.bin'").code(),
            absl::StatusCode::kDataLoss);
  ::close(fd);
}

}  // namespace
}  // namespace graft::testing
