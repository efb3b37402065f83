// The external-data location rule and the reads and writes that cannot leave their folder.
#include "core/paths/beneath.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "tests/testing.h"

namespace graft::testing {
namespace {

namespace fs = std::filesystem;
using paths::check_location;
using paths::copy_beneath;
using paths::open_beneath;
using paths::read_beneath;
using paths::write_beneath;

TEST(CheckLocation, AcceptsRelativeNormalisedPaths) {
  for (const char* name : {"w.bin", "weights/w.bin", "a/b/c/d.data", "..w", "w..", ".hidden",
                           "a/.b", "name with spaces", "C:w"})
    EXPECT_TRUE(check_location(name).ok()) << name;
}

TEST(CheckLocation, RejectsWhatCouldLeaveTheFolderOrIsNotNormalised) {
  const std::vector<std::string> bad = {"",
                                        "/etc/passwd",
                                        "..",
                                        "../w.bin",
                                        "a/../../w.bin",
                                        "a/..",
                                        ".",
                                        "./w.bin",
                                        "a/./b",
                                        "a//b",
                                        "a/",
                                        "a\\..\\b",
                                        std::string("a\0/../../b", 10),
                                        "a\nb",
                                        std::string(4096, 'a'),
                                        std::string(256, 'a') + "/b"};
  for (const auto& name : bad) {
    auto st = check_location(name);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << name.substr(0, 40);
    EXPECT_NE(st.message().find("invalid external data location '"), absl::string_view::npos) << st;
  }
  // The message quotes the name so the user can find it in the model.
  EXPECT_NE(check_location("a/./b").message().find("'a/./b'"), absl::string_view::npos);
  EXPECT_NE(check_location("../x").message().find("'..'"), absl::string_view::npos);
  // Long names are quoted short.
  EXPECT_LT(check_location(std::string(100000, '/')).message().size(), 400u);
}

class Beneath : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("graft_beneath_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(dir() / "sub");
    std::ofstream(dir() / "sub" / "w.bin") << "weights";
    std::ofstream(root_ / "secret") << "secret";
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path dir() const { return root_ / "dir"; }
  fs::path root_;
};

TEST_F(Beneath, ReadsAPlainFile) {
  auto bytes = read_beneath(dir().string(), "sub/w.bin");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, "weights");
}

TEST_F(Beneath, TheFolderItselfMayBeReachedThroughASymlink) {
  fs::create_directory_symlink(dir(), root_ / "alias");
  auto bytes = read_beneath((root_ / "alias").string(), "sub/w.bin");
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, "weights");
}

TEST_F(Beneath, RefusesSymlinksToFilesAndFolders) {
  fs::create_symlink(root_ / "secret", dir() / "file_link");
  fs::create_directory_symlink(root_, dir() / "dir_link");
  fs::create_symlink(root_ / "secret", dir() / "sub" / "deep_link");
  for (const char* name : {"file_link", "dir_link/secret", "sub/deep_link"}) {
    auto r = read_beneath(dir().string(), name);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(r.status().message().find("symbolic link"), absl::string_view::npos) << r.status();
    EXPECT_NE(r.status().message().find(std::string("'") + name + "'"), absl::string_view::npos)
        << r.status();
  }
  // A dangling link is refused the same way, not reported as missing.
  fs::create_symlink(root_ / "none", dir() / "dangling");
  EXPECT_EQ(read_beneath(dir().string(), "dangling").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(Beneath, RefusesBadNamesBeforeTouchingTheDisk) {
  for (const char* name : {"../secret", "sub/../../secret", "/etc/passwd", "sub/./w.bin"})
    EXPECT_EQ(read_beneath(dir().string(), name).status().code(),
              absl::StatusCode::kInvalidArgument)
        << name;
}

TEST_F(Beneath, RefusesWhatIsNotARegularFile) {
  ASSERT_EQ(::mkfifo((dir() / "fifo").c_str(), 0600), 0);
  // A FIFO without a writer: the open must not wait for one.
  EXPECT_EQ(read_beneath(dir().string(), "fifo").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(read_beneath(dir().string(), "sub").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(Beneath, MissingFilesAreNotFound) {
  auto r = read_beneath(dir().string(), "sub/none.bin");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_NE(r.status().message().find("sub/none.bin"), absl::string_view::npos);
  EXPECT_EQ(read_beneath(dir().string(), "sub/w.bin/x").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(Beneath, WritesCreatingFoldersAndReplacingFiles) {
  ASSERT_TRUE(write_beneath(dir().string(), "new/deeper/w.bin", "abc").ok());
  EXPECT_EQ(read_file(dir() / "new" / "deeper" / "w.bin"), "abc");
  ASSERT_TRUE(write_beneath(dir().string(), "sub/w.bin", "replaced").ok());
  EXPECT_EQ(read_file(dir() / "sub" / "w.bin"), "replaced");
  // No temporary file is left behind.
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir() / "sub")) entries += !e.path().empty();
  EXPECT_EQ(entries, 1);
}

TEST_F(Beneath, NeverWritesThroughASymlink) {
  fs::create_directories(root_ / "elsewhere");
  fs::create_directory_symlink(root_ / "elsewhere", dir() / "linked");
  fs::create_symlink(root_ / "secret", dir() / "file_link");
  for (const char* name : {"linked/w.bin", "file_link", "linked/new/w.bin"}) {
    auto st = write_beneath(dir().string(), name, "evil");
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << name << ": " << st;
    EXPECT_NE(st.message().find("symbolic link"), absl::string_view::npos) << st;
  }
  EXPECT_TRUE(fs::is_empty(root_ / "elsewhere"));
  EXPECT_EQ(read_file(root_ / "secret"), "secret");
  EXPECT_TRUE(fs::is_symlink(dir() / "file_link"));
  for (const char* name : {"../evil", "/tmp/evil", "a/./evil"})
    EXPECT_EQ(write_beneath(dir().string(), name, "evil").code(),
              absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(root_ / "evil"));
}

TEST_F(Beneath, CopiesInPiecesUnderBothRules) {
  // Larger than one piece of the fallback and not uniform, so a misplaced piece shows.
  std::string big(9u << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 131 + i / 4093) & 0xff);
  ASSERT_TRUE(write_beneath(dir().string(), "w/big.bin", big).ok());
  const fs::path out = root_ / "out";
  fs::create_directories(out);
  auto copied = copy_beneath(dir().string(), out.string(), "w/big.bin");
  ASSERT_TRUE(copied.ok()) << copied;
  EXPECT_EQ(read_file(out / "w" / "big.bin"), big);
  ASSERT_TRUE(copy_beneath(dir().string(), out.string(), "sub/w.bin").ok());
  EXPECT_EQ(read_file(out / "sub" / "w.bin"), "weights");
  // An empty file copies as an empty file.
  ASSERT_TRUE(write_beneath(dir().string(), "empty", "").ok());
  ASSERT_TRUE(copy_beneath(dir().string(), out.string(), "empty").ok());
  EXPECT_TRUE(fs::exists(out / "empty"));
  EXPECT_EQ(fs::file_size(out / "empty"), 0u);

  // The source under read_beneath's rules, the target under write_beneath's.
  fs::create_symlink(root_ / "secret", dir() / "file_link");
  auto st = copy_beneath(dir().string(), out.string(), "file_link");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_FALSE(fs::exists(out / "file_link"));
  fs::create_directories(root_ / "elsewhere");
  fs::create_directory_symlink(root_ / "elsewhere", out / "linked");
  ASSERT_TRUE(write_beneath(dir().string(), "linked/w.bin", "x").ok());
  st = copy_beneath(dir().string(), out.string(), "linked/w.bin");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(fs::is_empty(root_ / "elsewhere"));
  EXPECT_EQ(copy_beneath(dir().string(), out.string(), "missing").code(),
            absl::StatusCode::kNotFound);
}

TEST_F(Beneath, OpensForPiecewiseReadsWithItsSize) {
  uint64_t size = 0;
  auto fd = open_beneath(dir().string(), "sub/w.bin", &size);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_EQ(size, 7u);
  char buf[8] = {};
  EXPECT_EQ(::pread(*fd, buf, sizeof buf, 0), 7);
  EXPECT_EQ(std::string(buf, 7), "weights");
  ::close(*fd);
  fs::create_symlink(root_ / "secret", dir() / "file_link");
  EXPECT_EQ(open_beneath(dir().string(), "file_link").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(open_beneath(dir().string(), "sub").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace graft::testing
