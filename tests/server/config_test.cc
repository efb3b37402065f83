// graftd configuration: precedence (defaults < YAML < environment < flags) and validation.
#include <unistd.h>

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
  EXPECT_EQ(from_file.max_inflight_bytes, defaults.max_inflight_bytes);
  EXPECT_EQ(from_file.grace_period_seconds, defaults.grace_period_seconds);
  EXPECT_EQ(from_file.log_format, defaults.log_format);
  EXPECT_EQ(from_file.tls_cert_file, defaults.tls_cert_file);
  EXPECT_EQ(from_file.tls_key_file, defaults.tls_key_file);
  EXPECT_EQ(from_file.tls_client_ca_file, defaults.tls_client_ca_file);
  EXPECT_EQ(from_file.tls_client_auth, defaults.tls_client_auth);
  EXPECT_EQ(from_file.tls_reload_interval_seconds, defaults.tls_reload_interval_seconds);
  EXPECT_EQ(from_file.health_listen, defaults.health_listen);
  EXPECT_EQ(from_file.shared_cache_url, defaults.shared_cache_url);
  EXPECT_EQ(from_file.shared_cache_key_prefix, defaults.shared_cache_key_prefix);
  EXPECT_EQ(from_file.shared_cache_ttl_seconds, defaults.shared_cache_ttl_seconds);
  EXPECT_EQ(from_file.shared_cache_max_entry_bytes, defaults.shared_cache_max_entry_bytes);
  EXPECT_EQ(from_file.shared_cache_chunk_bytes, defaults.shared_cache_chunk_bytes);
  EXPECT_EQ(from_file.shared_cache_connect_timeout_ms, defaults.shared_cache_connect_timeout_ms);
  EXPECT_EQ(from_file.shared_cache_timeout_ms, defaults.shared_cache_timeout_ms);
  EXPECT_EQ(from_file.shared_cache_retry_min_ms, defaults.shared_cache_retry_min_ms);
  EXPECT_EQ(from_file.shared_cache_retry_max_ms, defaults.shared_cache_retry_max_ms);
  EXPECT_EQ(from_file.shared_cache_write_queue, defaults.shared_cache_write_queue);
  // Off unless configured.
  EXPECT_FALSE(defaults.shared_cache());
  EXPECT_FALSE(defaults.tls());  // the README's main job runs plaintext on loopback
}

// The shared cache is one YAML mapping; its keys are flags and environment variables too.
TEST(ServerConfig, SharedCacheIsAYamlMappingAndFlags) {
  ServerConfig c;
  auto st = server::apply_yaml(
      "shared_cache:\n  url: redis://redis:6379/1\n  ttl_seconds: 60\n  timeout_ms: 50\n", &c);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_TRUE(c.shared_cache());
  EXPECT_EQ(c.shared_cache_url, "redis://redis:6379/1");
  EXPECT_EQ(c.shared_cache_ttl_seconds, 60);
  EXPECT_EQ(c.shared_cache_timeout_ms, 50);
  EXPECT_TRUE(server::validate(c).ok());
  ServerConfig empty;
  EXPECT_TRUE(server::apply_yaml("shared_cache:\n", &empty).ok());
  EXPECT_FALSE(empty.shared_cache());
  // Typos and the flat spelling are errors, as for every other key.
  EXPECT_FALSE(server::apply_yaml("shared_cache:\n  urll: redis://r\n", &c).ok());
  EXPECT_FALSE(server::apply_yaml("shared_cache_url: redis://r\n", &c).ok());
  EXPECT_FALSE(server::apply_yaml("shared_cache: redis://r\n", &c).ok());

  auto flags = load({"--shared-cache-url", "redis://127.0.0.1:7000", "--shared-cache-retry-min-ms",
                     "10", "--shared-cache-retry-max-ms", "20"});
  ASSERT_TRUE(flags.ok()) << flags.status();
  EXPECT_EQ(flags->shared_cache_url, "redis://127.0.0.1:7000");
  EXPECT_EQ(flags->shared_cache_retry_max_ms, 20);
  auto error = [](std::vector<std::string> args) {
    auto c = load(std::move(args));
    return c.ok() ? std::string("accepted") : std::string(c.status().message());
  };
  EXPECT_NE(error({"--shared-cache-url", "http://r"}).find("redis://"), std::string::npos);
  EXPECT_NE(error({"--shared-cache-chunk-bytes", "100"}).find("chunk_bytes"), std::string::npos);
  EXPECT_NE(error({"--shared-cache-retry-min-ms", "500", "--shared-cache-retry-max-ms", "100"})
                .find("retry_max_ms"),
            std::string::npos);
  EXPECT_NE(error({"--shared-cache-write-queue", "0"}).find("write_queue"), std::string::npos);
}

// Half a TLS configuration must not start a plaintext server, nor a TLS server that silently
// ignores the client CA.
TEST(ServerConfig, TlsKeysMustBeCompleteAndConsistent) {
  auto error = [](std::vector<std::string> args) {
    auto c = load(std::move(args));
    return c.ok() ? std::string("accepted") : std::string(c.status().message());
  };
  EXPECT_NE(error({"--tls-cert-file", "c.pem"}).find("tls_key_file"), std::string::npos);
  EXPECT_NE(error({"--tls-key-file", "k.pem"}).find("tls_cert_file"), std::string::npos);
  EXPECT_NE(error({"--tls-client-ca-file", "ca.pem"}).find("need TLS"), std::string::npos);
  EXPECT_NE(error({"--tls-client-auth", "require"}).find("need TLS"), std::string::npos);
  const std::vector<std::string> tls = {"--tls-cert-file", "c.pem", "--tls-key-file", "k.pem"};
  auto with_tls = [&](std::vector<std::string> more) {
    more.insert(more.begin(), tls.begin(), tls.end());
    return more;
  };
  EXPECT_EQ(error(tls), "accepted");
  EXPECT_NE(error(with_tls({"--tls-client-auth", "require"})).find("tls_client_ca_file"),
            std::string::npos);
  EXPECT_NE(error(with_tls({"--tls-client-auth", "request"})).find("tls_client_ca_file"),
            std::string::npos);
  EXPECT_NE(error(with_tls({"--tls-client-ca-file", "ca.pem"})).find("tls_client_auth is none"),
            std::string::npos);
  EXPECT_NE(error(with_tls({"--tls-client-ca-file", "ca.pem", "--tls-client-auth", "yes"}))
                .find("none, request or require"),
            std::string::npos);
  EXPECT_EQ(error(with_tls({"--tls-client-ca-file", "ca.pem", "--tls-client-auth", "require"})),
            "accepted");
  EXPECT_EQ(error(with_tls({"--tls-client-ca-file", "ca.pem", "--tls-client-auth", "request"})),
            "accepted");
  EXPECT_NE(error(with_tls({"--tls-reload-interval-seconds", "0"})).find("1..86400"),
            std::string::npos);
  EXPECT_NE(error({"--health-listen", "8081"}).find("HOST:PORT"), std::string::npos);
  EXPECT_EQ(error({"--health-listen", "127.0.0.1:8081"}), "accepted");
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

TEST(ServerConfig, NegativeSizesAndUnrepresentableDurationsAreErrors) {
  ServerConfig c;
  // An unsigned read of "-1" used to wrap to 2^64 - 1: an unbounded limit.
  for (const char* yaml : {"max_model_bytes: -1\n", "cache_bytes: -5\n", "max_inflight_bytes: -1\n",
                           "verify_max_bytes: -1\n"})
    EXPECT_FALSE(server::apply_yaml(yaml, &c).ok()) << yaml;
  for (const char* flag : {"--default-deadline-seconds", "--grace-period-seconds"})
    for (const char* value : {"1e30", "nan", "-1"})
      EXPECT_FALSE(load({flag, value}).ok()) << flag << value;
  EXPECT_TRUE(load({"--default-deadline-seconds", "3600"}).ok());
}

TEST(ServerConfig, InflightBytesDefaultsToAShareOfMemory) {
  auto automatic = load({});
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  const uint64_t physical = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) *
                            static_cast<uint64_t>(::sysconf(_SC_PAGE_SIZE));
  EXPECT_GT(automatic->max_inflight_bytes, 0u);
  EXPECT_LE(automatic->max_inflight_bytes, physical / 4);
  auto explicit_value = load({"--max-inflight-bytes", "12345"});
  ASSERT_TRUE(explicit_value.ok());
  EXPECT_EQ(explicit_value->max_inflight_bytes, 12345u);
}

TEST(ServerConfig, MissingFileIsAnError) {
  auto c = load({"--config", "/no/such/graftd.yaml"});
  EXPECT_FALSE(c.ok());
}

}  // namespace
}  // namespace graft::testing
