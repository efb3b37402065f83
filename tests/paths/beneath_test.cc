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

}  // namespace
}  // namespace graft::testing
