// The spool: instance folders locked for a process's life, per-request folders removed with
// their last reference, a disk budget, and leftovers of dead processes (crashes, kills) removed
// by the next graftd to open the spool.
#include "server/spool.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/temp_folder.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

namespace fs = std::filesystem;
using server::Spool;

class SpoolTest : public ::testing::Test {
 protected:
  std::unique_ptr<Spool> open(uint64_t max_bytes = 1 << 20, uint64_t* removed = nullptr) {
    auto spool = Spool::open(dir_.string(), max_bytes, removed);
    EXPECT_TRUE(spool.ok()) << spool.status();
    return spool.ok() ? std::move(*spool) : nullptr;
  }
  static void write(const fs::path& path, size_t bytes) {
    fs::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << std::string(bytes, 'x');
  }
  TempFolder folder_;
  const fs::path& dir_ = folder_.path();
};

TEST_F(SpoolTest, FoldersAreRemovedWithTheirLastReferenceAndGiveBackTheirReservation) {
  auto spool = open(1000);
  ASSERT_NE(spool, nullptr);
  EXPECT_TRUE(fs::is_directory(spool->instance_path()));
  auto a = spool->make_dir("upload");
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = spool->make_dir("upload");
  ASSERT_TRUE(b.ok());
  EXPECT_NE((*a)->path(), (*b)->path());
  EXPECT_TRUE((*a)->reserve(700));
  EXPECT_FALSE((*b)->reserve(301));  // 1001 > 1000
  EXPECT_TRUE((*b)->reserve(300));
  EXPECT_EQ(spool->used(), 1000u);
  (*b)->unreserve(100);
  EXPECT_EQ(spool->used(), 900u);
  write(fs::path((*a)->path()) / "f0", 10);
  const std::string path = (*a)->path();
  a->reset();
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(spool->used(), 200u);
}

TEST_F(SpoolTest, ClosingRemovesTheInstanceFolder) {
  std::string instance;
  {
    auto spool = open();
    ASSERT_NE(spool, nullptr);
    instance = spool->instance_path();
    auto d = spool->make_dir("result");
    ASSERT_TRUE(d.ok());
    write(fs::path((*d)->path()) / "w.bin", 100);
  }
  EXPECT_FALSE(fs::exists(instance));
  EXPECT_TRUE(fs::exists(dir_));  // the spool folder itself is the operator's
}

TEST_F(SpoolTest, AFolderMayOutliveItsSpool) {
  std::shared_ptr<server::SpoolDir> kept;
  {
    auto spool = open();
    auto d = spool->make_dir("result");
    ASSERT_TRUE(d.ok());
    kept = *d;
    EXPECT_TRUE(kept->reserve(10));
  }
  kept.reset();  // no crash: the budget lives as long as its folders
}

// A graftd killed (SIGKILL: no destructor runs) leaves its folder; the next one removes it, and
// leaves alone the folder of a graftd still running and names that are not graftd's.
TEST_F(SpoolTest, TheNextProcessRemovesWhatAKilledOneLeft) {
  auto running = open();
  ASSERT_NE(running, nullptr);
  auto live = running->make_dir("upload");
  ASSERT_TRUE(live.ok());
  write(fs::path((*live)->path()) / "f0", 1000);
  write(dir_ / "operator-notes" / "keep.txt", 5);

  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto spool = Spool::open(dir_.string(), 1 << 20);
    if (!spool.ok()) ::_exit(2);
    auto d = (*spool)->make_dir("upload");
    if (!d.ok()) ::_exit(3);
    std::ofstream(fs::path((*d)->path()) / "f0", std::ios::binary) << std::string(5000, 'k');
    ::kill(::getpid(), SIGKILL);
    ::_exit(4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  size_t instances = 0;
  for (const auto& e : fs::directory_iterator(dir_))
    if (e.path().filename().string().rfind("graftd-", 0) == 0) ++instances;
  EXPECT_EQ(instances, 2u);  // the running one's and the killed one's

  uint64_t removed = 0;
  auto next = open(1 << 20, &removed);
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(removed, 5000u);
  EXPECT_TRUE(fs::exists(fs::path((*live)->path()) / "f0"));
  EXPECT_TRUE(fs::exists(dir_ / "operator-notes" / "keep.txt"));
  instances = 0;
  for (const auto& e : fs::directory_iterator(dir_))
    if (e.path().filename().string().rfind("graftd-", 0) == 0) ++instances;
  EXPECT_EQ(instances, 2u);  // the running one's and the new one's
}

TEST_F(SpoolTest, AnUnusableFolderIsAClearError) {
  write(dir_ / "file", 1);
  auto spool = Spool::open((dir_ / "file").string(), 1000);
  ASSERT_FALSE(spool.ok());
  EXPECT_NE(spool.status().message().find("spool"), std::string::npos) << spool.status();
  EXPECT_NE(spool.status().message().find((dir_ / "file").string()), std::string::npos)
      << spool.status();
  EXPECT_FALSE(Spool::open("", 1000).ok());
}

}  // namespace
}  // namespace graft::testing
