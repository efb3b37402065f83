// Request assembly without a network: message order, sizes checked without wrapping, memory
// that follows the bytes received, the shared in-flight budget, and deadlines that saturate.
#include "server/upload.h"

#include <unistd.h>

#include <filesystem>

#include "core/cache/digest.h"
#include "core/paths/files.h"
#include "server/spool.h"
#include "tests/temp_folder.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

using server::InflightBudget;
using server::request_deadline;
using server::Spool;
using server::UploadAssembler;
using server::UploadLimits;
using Code = grpc::StatusCode;

v1::OptimizeRequest start_msg(uint64_t model_size,
                              std::vector<std::pair<std::string, uint64_t>> files = {}) {
  v1::OptimizeRequest msg;
  msg.mutable_start()->set_model_size(model_size);
  for (const auto& [name, size] : files) {
    auto* f = msg.mutable_start()->add_external_files();
    f->set_name(name);
    f->set_size(size);
  }
  return msg;
}

v1::OptimizeRequest chunk_msg(const std::string& data, const std::string& file = "") {
  v1::OptimizeRequest msg;
  msg.mutable_chunk()->set_data(data);
  msg.mutable_chunk()->set_file(file);
  return msg;
}

grpc::Status add(UploadAssembler& up, v1::OptimizeRequest msg) { return up.add(msg); }

UploadLimits limits(uint64_t max_model_bytes) {
  UploadLimits l;
  l.max_model_bytes = max_model_bytes;
  return l;
}

// A spool of `max_bytes` in a folder of its own, removed at the end.
struct TestSpool {
  explicit TestSpool(uint64_t max_bytes) {
    auto opened = Spool::open(folder.str(), max_bytes);
    EXPECT_TRUE(opened.ok()) << opened.status();
    spool = std::move(*opened);
  }
  Spool* operator->() const { return spool.get(); }
  Spool* get() const { return spool.get(); }
  TempFolder folder;  // declared first: removed after the spool is closed
  std::unique_ptr<Spool> spool;
};

std::string contents(const std::string& path) {
  auto bytes = paths::read_file(path);
  return bytes.ok() ? *bytes : "<" + std::string(bytes.status().message()) + ">";
}

TEST(UploadAssembler, AssemblesTheModelAndItsFilesOnDisk) {
  TestSpool spool(1000);
  UploadAssembler up(limits(1000), nullptr, spool.get());
  auto started = add(up, start_msg(5, {{"a.bin", 3}, {"w/b.bin", 0}}));
  ASSERT_TRUE(started.ok()) << started.error_message();
  ASSERT_TRUE(add(up, chunk_msg("mod")).ok());
  ASSERT_TRUE(add(up, chunk_msg("ab", "a.bin")).ok());
  ASSERT_TRUE(add(up, chunk_msg("el")).ok());
  ASSERT_TRUE(add(up, chunk_msg("c", "a.bin")).ok());
  ASSERT_TRUE(add(up, chunk_msg("")).ok());
  ASSERT_TRUE(up.finish().ok());
  EXPECT_EQ(*up.model(), "model");
  EXPECT_EQ(up.sha256(), cache::sha256_hex("model"));
  ASSERT_EQ(up.files().size(), 2u);
  EXPECT_EQ(up.files()[0].name, "a.bin");
  EXPECT_EQ(contents(up.files()[0].path), "abc");
  EXPECT_EQ(up.files()[0].sha256, cache::sha256_hex("abc"));
  EXPECT_EQ(up.files()[1].name, "w/b.bin");
  EXPECT_EQ(contents(up.files()[1].path), "");
  EXPECT_EQ(up.files()[1].sha256, cache::sha256_hex(""));
  // The files live in the upload's own folder of the spool, whatever their names.
  ASSERT_NE(up.spool_dir(), nullptr);
  EXPECT_EQ(up.files()[1].path.rfind(up.spool_dir()->path() + "/", 0), 0u);
  EXPECT_EQ(up.input_digest(), cache::input_digest(cache::sha256_hex("model"),
                                                   {{"a.bin", 3, cache::sha256_hex("abc")},
                                                    {"w/b.bin", 0, cache::sha256_hex("")}}));
}

TEST(UploadAssembler, WithoutFilesTheInputDigestIsTheModels) {
  UploadAssembler up(limits(1000), nullptr);
  ASSERT_TRUE(add(up, start_msg(5)).ok());
  ASSERT_TRUE(add(up, chunk_msg("model")).ok());
  ASSERT_TRUE(up.finish().ok());
  EXPECT_EQ(up.input_digest(), cache::sha256_hex("model"));
  EXPECT_EQ(up.spool_dir(), nullptr);
}

TEST(UploadAssembler, InterleavedFilesEachGetTheirOwnBytes) {
  TestSpool spool(1 << 20);
  UploadAssembler up(limits(1000), nullptr, spool.get());
  ASSERT_TRUE(add(up, start_msg(1, {{"a", 4}, {"b", 4}, {"c", 2}})).ok());
  for (auto [data, file] : std::vector<std::pair<const char*, const char*>>{
           {"a1", "a"}, {"b1", "b"}, {"c", "c"}, {"a2", "a"}, {"m", ""}, {"b2", "b"}, {"C", "c"}})
    ASSERT_TRUE(add(up, chunk_msg(data, file)).ok()) << data;
  ASSERT_TRUE(up.finish().ok());
  EXPECT_EQ(contents(up.files()[0].path), "a1a2");
  EXPECT_EQ(contents(up.files()[1].path), "b1b2");
  EXPECT_EQ(contents(up.files()[2].path), "cC");
  EXPECT_EQ(up.files()[2].sha256, cache::sha256_hex("cC"));
}

TEST(UploadAssembler, FileDigestsAreCheckedWhenGiven) {
  TestSpool spool(1000);
  auto msg = start_msg(1, {{"a", 3}});
  msg.mutable_start()->mutable_external_files(0)->set_sha256(cache::sha256_hex("abd"));
  UploadAssembler up(limits(1000), nullptr, spool.get());
  ASSERT_TRUE(add(up, msg).ok());
  ASSERT_TRUE(add(up, chunk_msg("m")).ok());
  ASSERT_TRUE(add(up, chunk_msg("abc", "a")).ok());
  auto st = up.finish();
  EXPECT_EQ(st.error_code(), Code::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("sha256 mismatch for external file 'a'"), std::string::npos)
      << st.error_message();

  msg.mutable_start()->mutable_external_files(0)->set_sha256(cache::sha256_hex("abc"));
  UploadAssembler good(limits(1000), nullptr, spool.get());
  ASSERT_TRUE(add(good, msg).ok());
  ASSERT_TRUE(add(good, chunk_msg("m")).ok());
  ASSERT_TRUE(add(good, chunk_msg("abc", "a")).ok());
  EXPECT_TRUE(good.finish().ok());

  msg.mutable_start()->mutable_external_files(0)->set_sha256("ABC");
  UploadAssembler bad(limits(1000), nullptr, spool.get());
  EXPECT_EQ(add(bad, msg).error_code(), Code::INVALID_ARGUMENT);
}

TEST(UploadAssembler, WithoutASpoolExternalFilesAreRefused) {
  UploadAssembler up(limits(1000), nullptr);
  auto st = add(up, start_msg(1, {{"a", 3}}));
  EXPECT_EQ(st.error_code(), Code::FAILED_PRECONDITION);
  EXPECT_NE(st.error_message().find("spool"), std::string::npos) << st.error_message();
}

TEST(UploadAssembler, TheSpoolBoundsFilesOfAllUploadsAndIsReservedAtTheStart) {
  TestSpool spool(1000);
  auto a = std::make_unique<UploadAssembler>(limits(1000), nullptr, spool.get());
  ASSERT_TRUE(add(*a, start_msg(1, {{"a", 600}})).ok());
  EXPECT_EQ(spool->used(), 600u);  // before any byte arrived: refusals come first
  UploadAssembler b(limits(1000), nullptr, spool.get());
  auto st = add(b, start_msg(1, {{"b", 401}}));
  EXPECT_EQ(st.error_code(), Code::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("spool.max_bytes"), std::string::npos) << st.error_message();
  EXPECT_NE(st.error_message().find("retry later"), std::string::npos) << st.error_message();
  UploadAssembler c(limits(1000), nullptr, spool.get());
  EXPECT_TRUE(add(c, start_msg(1, {{"c", 400}})).ok());
  EXPECT_EQ(spool->used(), 1000u);
  // A worker still holding the folder keeps its files and reservation; then both go.
  ASSERT_TRUE(add(*a, chunk_msg("m")).ok());
  ASSERT_TRUE(add(*a, chunk_msg(std::string(600, 'a'), "a")).ok());
  ASSERT_TRUE(a->finish().ok());
  auto held = a->spool_dir();
  const std::string path = a->files()[0].path;
  a.reset();
  EXPECT_EQ(contents(path), std::string(600, 'a'));
  EXPECT_EQ(spool->used(), 1000u);
  held.reset();
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(spool->used(), 400u);
}

TEST(UploadAssembler, AFailedUploadLeavesNothingOnDisk) {
  TestSpool spool(1 << 20);
  std::string folder;
  {
    UploadAssembler up(limits(1000), nullptr, spool.get());
    ASSERT_TRUE(add(up, start_msg(1, {{"a", 10}})).ok());
    ASSERT_TRUE(add(up, chunk_msg("abc", "a")).ok());
    folder = up.spool_dir()->path();
    EXPECT_TRUE(std::filesystem::exists(folder));
    EXPECT_EQ(add(up, chunk_msg(std::string(8, 'x'), "a")).error_code(), Code::INVALID_ARGUMENT);
  }
  EXPECT_FALSE(std::filesystem::exists(folder));
  EXPECT_EQ(spool->used(), 0u);
}

TEST(UploadAssembler, StreamShapeIsChecked) {
  TestSpool spool(1000);
  {
    UploadAssembler up(limits(1000), nullptr, spool.get());
    EXPECT_EQ(up.finish().error_code(), Code::INVALID_ARGUMENT);  // nothing received
  }
  {
    UploadAssembler up(limits(1000), nullptr, spool.get());
    EXPECT_EQ(add(up, chunk_msg("x")).error_code(), Code::INVALID_ARGUMENT);
    // After an error, the upload stays failed.
    EXPECT_EQ(add(up, start_msg(1)).error_code(), Code::FAILED_PRECONDITION);
    EXPECT_EQ(up.finish().error_code(), Code::FAILED_PRECONDITION);
  }
  {
    UploadAssembler up(limits(1000), nullptr, spool.get());
    ASSERT_TRUE(add(up, start_msg(1)).ok());
    EXPECT_EQ(add(up, start_msg(1)).error_code(), Code::INVALID_ARGUMENT);
  }
  {
    UploadAssembler up(limits(1000), nullptr, spool.get());
    ASSERT_TRUE(add(up, start_msg(1)).ok());
    EXPECT_EQ(add(up, v1::OptimizeRequest()).error_code(), Code::INVALID_ARGUMENT);
  }
  {
    UploadAssembler up(limits(1000), nullptr, spool.get());
    ASSERT_TRUE(add(up, start_msg(4)).ok());
    EXPECT_EQ(add(up, chunk_msg("12345")).error_code(), Code::INVALID_ARGUMENT);
  }
  {
    UploadAssembler up(limits(1000), nullptr, spool.get());
    ASSERT_TRUE(add(up, start_msg(4, {{"f", 2}})).ok());
    EXPECT_EQ(add(up, chunk_msg("x", "g")).error_code(), Code::INVALID_ARGUMENT);  // undeclared
  }
  {
    UploadAssembler up(limits(1000), nullptr, spool.get());
    ASSERT_TRUE(add(up, start_msg(4, {{"f", 2}})).ok());
    ASSERT_TRUE(add(up, chunk_msg("xx", "f")).ok());
    EXPECT_EQ(add(up, chunk_msg("x", "f")).error_code(), Code::INVALID_ARGUMENT);  // past its size
  }
  {
    UploadAssembler up(limits(1000), nullptr, spool.get());
    ASSERT_TRUE(add(up, start_msg(4, {{"f", 2}})).ok());
    ASSERT_TRUE(add(up, chunk_msg("abcd")).ok());
    auto st = up.finish();  // the file never came
    EXPECT_EQ(st.error_code(), Code::INVALID_ARGUMENT);
    EXPECT_NE(st.error_message().find("'f'"), std::string::npos) << st.error_message();
  }
}

TEST(UploadAssembler, EmptyModelIsAnInvalidModel) {
  UploadAssembler up(limits(1000), nullptr);
  ASSERT_TRUE(add(up, start_msg(0)).ok());
  auto st = up.finish();
  EXPECT_EQ(st.error_code(), Code::INVALID_ARGUMENT);
  EXPECT_EQ(st.error_message(), "invalid model: empty input");
}

TEST(UploadAssembler, Sha256IsCheckedWhenExpected) {
  auto msg = start_msg(5);
  msg.mutable_start()->set_expected_sha256(cache::sha256_hex("other"));
  UploadAssembler up(limits(1000), nullptr);
  ASSERT_TRUE(add(up, msg).ok());
  ASSERT_TRUE(add(up, chunk_msg("model")).ok());
  EXPECT_EQ(up.finish().error_code(), Code::INVALID_ARGUMENT);

  msg.mutable_start()->set_expected_sha256("not hex");
  UploadAssembler bad(limits(1000), nullptr);
  EXPECT_EQ(add(bad, msg).error_code(), Code::INVALID_ARGUMENT);
}

TEST(UploadAssembler, ExternalFileNamesFollowTheSharedRule) {
  TestSpool spool(1000);
  for (const char* name : {"../w.bin", "/etc/passwd", "a/./b", "a//b", "", "a\\b"}) {
    UploadAssembler up(limits(1000), nullptr, spool.get());
    auto st = add(up, start_msg(1, {{name, 1}}));
    EXPECT_EQ(st.error_code(), Code::INVALID_ARGUMENT) << name;
    EXPECT_NE(st.error_message().find("invalid external data location"), std::string::npos)
        << st.error_message();
  }
  UploadAssembler dup(limits(1000), nullptr, spool.get());
  EXPECT_EQ(add(dup, start_msg(1, {{"w", 1}, {"w", 1}})).error_code(), Code::INVALID_ARGUMENT);
  UploadLimits few = limits(1000);
  few.max_external_files = 2;
  UploadAssembler many(few, nullptr, spool.get());
  EXPECT_EQ(add(many, start_msg(1, {{"a", 1}, {"b", 1}, {"c", 1}})).error_code(),
            Code::RESOURCE_EXHAUSTED);
}

// Finding: one file of 2^64 - model_size made the total wrap to 0 and let any amount in.
TEST(UploadAssembler, DeclaredSizesCannotWrap) {
  const uint64_t max = 10'000'000;
  const std::vector<std::vector<std::pair<std::string, uint64_t>>> wrapping = {
      {{"a", 0 - uint64_t{100}}},
      {{"a", uint64_t{1} << 63}, {"b", uint64_t{1} << 63}},
      {{"a", ~uint64_t{0}}, {"b", 2}},
      {{"a", max - 100}, {"b", 101}},  // no wrap, one byte over
  };
  TestSpool spool(max);
  for (const auto& files : wrapping) {
    UploadAssembler up(limits(max), nullptr, spool.get());
    auto st = add(up, start_msg(100, files));
    EXPECT_EQ(st.error_code(), Code::RESOURCE_EXHAUSTED) << files[0].second;
    EXPECT_NE(st.error_message().find("spool.max_bytes"), std::string::npos) << st.error_message();
    EXPECT_NE(st.error_message().find(std::to_string(max)), std::string::npos)
        << st.error_message();
  }
  EXPECT_EQ(spool->used(), 0u);
  UploadAssembler exact(limits(max), nullptr, spool.get());
  EXPECT_TRUE(add(exact, start_msg(100, {{"a", max - 100}, {"b", 100}})).ok());
  UploadAssembler model(limits(max), nullptr, spool.get());
  auto st = add(model, start_msg(max + 1));
  EXPECT_EQ(st.error_code(), Code::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("max_model_bytes"), std::string::npos) << st.error_message();
  UploadAssembler huge(limits(~uint64_t{0}), nullptr);
  EXPECT_EQ(add(huge, start_msg(uint64_t{1} << 40)).error_code(), Code::INVALID_ARGUMENT);
}

// Finding: OptimizeStart reserved the announced model_size before any data arrived.
TEST(UploadAssembler, MemoryFollowsTheBytesReceived) {
  InflightBudget budget(uint64_t{1} << 40);
  TestSpool spool(uint64_t{1} << 40);
  UploadAssembler up(limits(uint64_t{1} << 40), &budget, spool.get());
  ASSERT_TRUE(add(up, start_msg(2147483647, {{"w", 1000000000}})).ok());
  EXPECT_EQ(budget.used(), 0u);
  EXPECT_LT(up.model()->capacity(), 1024u);
  ASSERT_TRUE(add(up, chunk_msg(std::string(1000, 'x'))).ok());
  EXPECT_LE(budget.used(), 64u << 10);
  EXPECT_LE(up.model()->capacity(), 64u << 10);
  // Growth doubles: after 1 MB the buffer holds at most twice that.
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(add(up, chunk_msg(std::string(1000, 'x'))).ok());
  EXPECT_LE(up.model()->capacity(), 2u * 1001 * 1000);
  EXPECT_EQ(budget.used(), up.model()->capacity());
}

TEST(UploadAssembler, GrowthStopsAtTheAnnouncedSize) {
  InflightBudget budget(uint64_t{1} << 30);
  TestSpool spool(1 << 20);
  UploadAssembler up(limits(1 << 30), &budget, spool.get());
  const uint64_t size = 300000, file = 70000;
  ASSERT_TRUE(add(up, start_msg(size, {{"f", file}})).ok());
  for (uint64_t sent = 0; sent < size; sent += 1000)
    ASSERT_TRUE(add(up, chunk_msg(std::string(1000, 'm'))).ok());
  for (uint64_t sent = 0; sent < file; sent += 7000)
    ASSERT_TRUE(add(up, chunk_msg(std::string(7000, 'f'), "f")).ok());
  ASSERT_TRUE(up.finish().ok());
  EXPECT_EQ(up.model()->capacity(), size);
  EXPECT_EQ(budget.used(), size);  // files go to disk, not memory
  EXPECT_EQ(spool->used(), file);
}

TEST(UploadAssembler, TheBudgetBoundsAllUploadsTogether) {
  InflightBudget budget(200000);
  auto a = std::make_unique<UploadAssembler>(limits(1 << 30), &budget);
  ASSERT_TRUE(add(*a, start_msg(150000)).ok());
  ASSERT_TRUE(add(*a, chunk_msg(std::string(150000, 'a'))).ok());
  ASSERT_TRUE(a->finish().ok());
  EXPECT_EQ(budget.used(), 150000u);

  UploadAssembler b(limits(1 << 30), &budget);
  ASSERT_TRUE(add(b, start_msg(100000)).ok());  // fits alone: announced is not charged
  auto st = add(b, chunk_msg(std::string(100000, 'b')));
  EXPECT_EQ(st.error_code(), Code::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("max_inflight_bytes"), std::string::npos) << st.error_message();
  EXPECT_EQ(budget.used(), 150000u);  // the refused chunk took nothing

  // A request larger than the whole budget is refused at once, naming the key.
  UploadAssembler c(limits(1 << 30), &budget);
  auto too_big = add(c, start_msg(200001));
  EXPECT_EQ(too_big.error_code(), Code::RESOURCE_EXHAUSTED);
  EXPECT_NE(too_big.error_message().find("max_inflight_bytes"), std::string::npos);

  // The model's bytes stay charged while anyone (a worker) still holds them.
  std::shared_ptr<const std::string> held = a->model();
  a.reset();
  EXPECT_EQ(budget.used(), 150000u);
  held.reset();
  EXPECT_EQ(budget.used(), 0u);

  UploadAssembler d(limits(1 << 30), &budget);
  ASSERT_TRUE(add(d, start_msg(100000)).ok());
  EXPECT_TRUE(add(d, chunk_msg(std::string(100000, 'd'))).ok());
}

TEST(UploadAssembler, OneUploadMayUseTheWholeBudget) {
  InflightBudget budget(1000000);
  TestSpool spool(1 << 20);
  UploadAssembler up(limits(1 << 30), &budget, spool.get());
  ASSERT_TRUE(add(up, start_msg(1000000, {{"f", 10000}})).ok());
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(add(up, chunk_msg(std::string(10000, 'm'))).ok()) << i;
  ASSERT_TRUE(add(up, chunk_msg(std::string(10000, 'f'), "f")).ok());
  ASSERT_TRUE(up.finish().ok());
  EXPECT_EQ(budget.used(), 1000000u);
}

TEST(UploadAssembler, FilesAreReleasedWithTheAssembler) {
  TestSpool spool(1 << 20);
  uint64_t observed = 12345;
  spool->set_observer([&](uint64_t v) { observed = v; });
  std::string path;
  {
    UploadAssembler up(limits(1 << 20), nullptr, spool.get());
    ASSERT_TRUE(add(up, start_msg(1, {{"f", 5000}})).ok());
    ASSERT_TRUE(add(up, chunk_msg(std::string(5000, 'f'), "f")).ok());
    path = up.files()[0].path;
    EXPECT_EQ(std::filesystem::file_size(path), 5000u);
    EXPECT_EQ(spool->used(), 5000u);
    EXPECT_EQ(observed, 5000u);
  }
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(spool->used(), 0u);
  EXPECT_EQ(observed, 0u);
}

TEST(InflightBudget, NeverExceedsItsLimit) {
  InflightBudget budget(100);
  EXPECT_TRUE(budget.try_acquire(60));
  EXPECT_FALSE(budget.try_acquire(41));
  EXPECT_FALSE(budget.try_acquire(~uint64_t{0}));
  EXPECT_TRUE(budget.try_acquire(40));
  EXPECT_EQ(budget.used(), 100u);
  budget.release(100);
  EXPECT_EQ(budget.used(), 0u);
}

TEST(RequestDeadline, SaturatesInsteadOfOverflowing) {
  using Clock = std::chrono::system_clock;
  const auto now = Clock::now();
  const auto none = Clock::time_point::max();
  const auto call = now + std::chrono::seconds(5);
  EXPECT_EQ(request_deadline(call, 1000, 300, now), call);  // the call's own deadline wins
  EXPECT_EQ(request_deadline(none, 1500, 300, now), now + std::chrono::milliseconds(1500));
  EXPECT_EQ(request_deadline(none, 0, 300, now), now + std::chrono::seconds(300));
  for (uint64_t hint : {~uint64_t{0}, uint64_t{1} << 62, uint64_t{10'000'000'000'000'000}})
    EXPECT_EQ(request_deadline(none, hint, 300, now), none) << hint;
  EXPECT_GT(request_deadline(none, 0, 1e300, now), now);
  EXPECT_EQ(request_deadline(none, 0, std::nan(""), now), now);
}

}  // namespace
}  // namespace graft::testing
