// graftd configuration: precedence (defaults < YAML < environment < flags) and validation.
#include <cstdlib>
#include <fstream>

#include "server/config.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

using server::ServerConfig;

absl::StatusOr<ServerConfig> load(std::vector<std::string> args) {
  args.insert(args.begin(), "graftd");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int exit_code = -1;
  return server::load_config(static_cast<int>(argv.size()), argv.data(), &exit_code);
}

TEST(ServerConfig, ExampleFileIsValidAndMatchesDefaults) {
  ServerConfig defaults;
  ServerConfig from_file;
  auto st = server::apply_yaml(
      read_file(std::filesystem::path(GRAFT_SOURCE_DIR) / "server" / "graftd.example.yaml"),
      &from_file);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(from_file.listen, defaults.listen);
  EXPECT_EQ(from_file.metrics_listen, defaults.metrics_listen);
  EXPECT_EQ(from_file.queue_length, defaults.queue_length);
  EXPECT_EQ(from_file.cache_bytes, defaults.cache_bytes);
  EXPECT_EQ(from_file.max_model_bytes, defaults.max_model_bytes);
  EXPECT_EQ(from_file.grace_period_seconds, defaults.grace_period_seconds);
  EXPECT_EQ(from_file.log_format, defaults.log_format);
}

TEST(ServerConfig, UnknownKeysAndBadValuesAreErrors) {
  ServerConfig c;
  EXPECT_FALSE(server::apply_yaml("cache_byte: 10\n", &c).ok());  // typo
  EXPECT_FALSE(server::apply_yaml("workers: many\n", &c).ok());
  EXPECT_FALSE(server::apply_yaml("- a\n- b\n", &c).ok());
  EXPECT_FALSE(server::apply_yaml("listen: [1, 2]\n", &c).ok());
  EXPECT_TRUE(server::apply_yaml("", &c).ok());
  c.log_format = "xml";
  EXPECT_FALSE(server::validate(c).ok());
}

TEST(ServerConfig, FlagsOverrideEnvironmentOverrideFile) {
  auto path = std::filesystem::temp_directory_path() / "graftd_config_test.yaml";
  std::ofstream(path) << "queue_length: 7\nworkers: 3\ncache_bytes: 1000\nlog_format: json\n";
  ::setenv("GRAFTD_WORKERS", "5", 1);
  ::setenv("GRAFTD_CACHE_BYTES", "2000", 1);
  auto c = load({"--config", path.string(), "--cache-bytes", "3000"});
  ::unsetenv("GRAFTD_WORKERS");
  ::unsetenv("GRAFTD_CACHE_BYTES");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->queue_length, 7);     // file
  EXPECT_EQ(c->workers, 5);          // environment over file
  EXPECT_EQ(c->cache_bytes, 3000u);  // flag over environment
  EXPECT_EQ(c->log_format, "json");  // file
  std::filesystem::remove(path);
}

TEST(ServerConfig, ZeroWorkersMeansCores) {
  auto c = load({"--workers", "0"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_GE(c->workers, 1);
}

TEST(ServerConfig, MissingFileIsAnError) {
  auto c = load({"--config", "/no/such/graftd.yaml"});
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace graft::testing
