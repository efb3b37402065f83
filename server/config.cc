#include "server/config.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

#include <absl/strings/str_cat.h>
#include <yaml-cpp/yaml.h>
#include <CLI/CLI.hpp>

#include "core/base/status.h"
#include "server/shared_cache.h"
#include "server/shared_entry.h"

namespace graft::server {

namespace {

// Keys written in YAML as a mapping: shared_cache_url is `shared_cache: {url: ...}`, spool_dir
// is `spool: {dir: ...}`.
constexpr std::string_view kSections[] = {"shared_cache", "spool"};

bool in_section(std::string_view name, std::string_view section) {
  return name.size() > section.size() + 1 && name.substr(0, section.size()) == section &&
         name[section.size()] == '_';
}

bool in_any_section(std::string_view name) {
  for (auto section : kSections)
    if (in_section(name, section)) return true;
  return false;
}

// A key as YAML writes it, which its errors name: "spool.max_bytes" for spool_max_bytes.
std::string yaml_name(std::string_view name) {
  for (auto section : kSections)
    if (in_section(name, section))
      return std::string(section) + "." + std::string(name.substr(section.size() + 1));
  return std::string(name);
}

template <typename T>
absl::Status parse_number(const std::string& text, T* out, const std::string& key) {
  // istream reads "-1" into an unsigned as its wrapped value: a huge limit, not an error.
  if (std::is_unsigned_v<T> && text.find('-') != std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat(key, ": must not be negative: '", text, "'"));
  std::istringstream in(text);
  T v{};
  in >> v;
  if (in.fail() || !in.eof())
    return absl::InvalidArgumentError(absl::StrCat(key, ": not a number: '", text, "'"));
  *out = v;
  return absl::OkStatus();
}

absl::Status parse_bool(const std::string& text, bool* out, const std::string& key) {
  if (text == "true" || text == "1") {
    *out = true;
  } else if (text == "false" || text == "0") {
    *out = false;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(key, ": expected true or false, not '", text.substr(0, 64), "'"));
  }
  return absl::OkStatus();
}

// One table drives YAML keys, environment variables and flags, so they cannot drift apart.
struct Key {
  const char* name;  // YAML key; flag is --name with '-' for '_'; env is GRAFTD_NAME
  const char* help;
  std::function<absl::Status(ServerConfig&, const std::string&)> set;
};

// The key `name` setting `member`, parsed by the member's type: text as it is, true or false, a
// number (no negative one for an unsigned member).
template <typename T>
Key key(const char* name, const char* help, T ServerConfig::*member) {
  auto set = [member, shown = yaml_name(name)](ServerConfig& c, const std::string& text) {
    if constexpr (std::is_same_v<T, std::string>) {
      c.*member = text;
      return absl::OkStatus();
    } else if constexpr (std::is_same_v<T, bool>) {
      return parse_bool(text, &(c.*member), shown);
    } else {
      static_assert(std::is_arithmetic_v<T>, "a key's member is a string, a bool or a number");
      return parse_number(text, &(c.*member), shown);
    }
  };
  return {name, help, std::move(set)};
}

// The tables below name the members they set as &C::member.
using C = ServerConfig;

// The service's own keys: addresses, workers, memory, deadlines, logs.
std::vector<Key> service_keys() {
  return {
      key("listen", "gRPC address HOST:PORT", &C::listen),
      key("metrics_listen", "Prometheus /metrics address HOST:PORT", &C::metrics_listen),
      key("serve_reports",
          "also serve /reports/<result sha256>.html (the HTML report of a cached result) on "
          "metrics_listen (true or false)",
          &C::serve_reports),
      key("workers", "pipeline worker threads (0 = cores)", &C::workers),
      key("queue_length", "requests waiting for a worker before RESOURCE_EXHAUSTED",
          &C::queue_length),
      key("cache_bytes", "result cache budget in bytes", &C::cache_bytes),
      key("max_model_bytes", "largest accepted model in bytes", &C::max_model_bytes),
      key("max_inflight_bytes",
          "bytes of all uploads held in memory at once; 0 = a quarter of the memory available",
          &C::max_inflight_bytes),
      key("verify_max_bytes",
          "evaluator memory per verified request (tensors alive at once); 0 = verification off",
          &C::verify_max_bytes),
      key("verify_max_work",
          "evaluator operations (multiply-adds, elements written) per verified request; 0 = no "
          "cap",
          &C::verify_max_work),
      key("default_deadline_seconds", "deadline for requests that set none",
          &C::default_deadline_seconds),
      key("grace_period_seconds", "SIGTERM: time in-flight requests get to finish",
          &C::grace_period_seconds),
      key("log_level", "trace, debug, info, warn, error", &C::log_level),
      key("log_format", "text or json", &C::log_format),
  };
}

// TLS on listen, and the plaintext health port for probes that cannot speak it.
std::vector<Key> tls_keys() {
  return {
      key("tls_cert_file", "PEM certificate chain: serve TLS on listen (empty = plaintext)",
          &C::tls_cert_file),
      key("tls_key_file", "PEM private key of tls_cert_file (unencrypted)", &C::tls_key_file),
      key("tls_client_ca_file", "PEM CA bundle that signs client certificates (mTLS)",
          &C::tls_client_ca_file),
      key("tls_client_auth",
          "client certificates: none, request (verified if sent) or require (mTLS); request and "
          "require need tls_client_ca_file",
          &C::tls_client_auth),
      key("tls_reload_interval_seconds", "how often the TLS files are re-read (1..86400)",
          &C::tls_reload_interval_seconds),
      key("health_listen",
          "plaintext address HOST:PORT serving only grpc.health.v1, for probes that cannot speak "
          "TLS (empty = off)",
          &C::health_listen),
  };
}

// Disk for external data: in YAML, the keys of the mapping `spool:`.
std::vector<Key> spool_keys() {
  return {
      key("spool_dir",
          "folder for external-data uploads and cached result files (default "
          "$TMPDIR/graftd-spool)",
          &C::spool_dir),
      key("spool_max_bytes",
          "disk for all external-data uploads in progress and cached result files; 0 = refuse "
          "external data",
          &C::spool_max_bytes),
      key("spool_cache_bytes", "part of spool.max_bytes that cached result files may keep",
          &C::spool_cache_bytes),
  };
}

// The shared cache tier: in YAML, the keys of the mapping `shared_cache:`.
std::vector<Key> shared_cache_keys() {
  return {
      key("shared_cache_url",
          "shared result cache on Redis: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] (empty = "
          "off)",
          &C::shared_cache_url),
      key("shared_cache_key_prefix", "prefix of every Redis key graftd writes",
          &C::shared_cache_key_prefix),
      key("shared_cache_ttl_seconds", "time an entry stays in Redis (1..31536000)",
          &C::shared_cache_ttl_seconds),
      key("shared_cache_max_entry_bytes", "larger results (model + report) are not shared",
          &C::shared_cache_max_entry_bytes),
      key("shared_cache_chunk_bytes", "Redis value size of one chunk (1 KiB..64 MiB)",
          &C::shared_cache_chunk_bytes),
      key("shared_cache_connect_timeout_ms", "Redis connect timeout (1..60000)",
          &C::shared_cache_connect_timeout_ms),
      key("shared_cache_timeout_ms", "Redis command timeout (1..60000)",
          &C::shared_cache_timeout_ms),
      key("shared_cache_retry_min_ms", "first retry of a down Redis after this (1..3600000)",
          &C::shared_cache_retry_min_ms),
      key("shared_cache_retry_max_ms", "retries double up to this (>= retry_min_ms, <= 3600000)",
          &C::shared_cache_retry_max_ms),
      key("shared_cache_write_queue", "results waiting to be written to Redis; more are dropped",
          &C::shared_cache_write_queue),
  };
}

// Every key, in the order of graftd --help.
const std::vector<Key>& keys() {
  static const std::vector<Key> table = [] {
    std::vector<Key> all;
    for (auto group : {service_keys(), tls_keys(), spool_keys(), shared_cache_keys()})
      for (Key& k : group) all.push_back(std::move(k));
    return all;
  }();
  return table;
}

std::string env_name(const char* key) {
  std::string out = "GRAFTD_";
  for (const char* p = key; *p; ++p) out += static_cast<char>(std::toupper(*p));
  return out;
}

const Key* find_key(std::string_view name) {
  for (const auto& k : keys())
    if (name == k.name) return &k;
  return nullptr;
}

std::string flag_name(const char* key) {
  std::string out = "--";
  for (const char* p = key; *p; ++p) out += *p == '_' ? '-' : *p;
  return out;
}

}  // namespace

absl::Status apply_yaml(const std::string& yaml_text, ServerConfig* config) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config is not valid YAML: ", e.what()));
  }
  if (root.IsNull()) return absl::OkStatus();
  if (!root.IsMap()) return absl::InvalidArgumentError("config must be a YAML mapping");
  for (const auto& entry : root) {
    std::string name = entry.first.as<std::string>();
    bool section = false;
    for (auto s : kSections) section = section || name == s;
    if (section) {
      if (entry.second.IsNull()) continue;  // `shared_cache:` with nothing under it: defaults
      if (!entry.second.IsMap())
        return absl::InvalidArgumentError(absl::StrCat(name, ": expected a mapping"));
      for (const auto& sub : entry.second) {
        const std::string sub_name = sub.first.as<std::string>();
        const Key* key = find_key(absl::StrCat(name, "_", sub_name));
        if (!key)
          return absl::InvalidArgumentError(
              absl::StrCat("unknown config key '", name, ".", sub_name, "'"));
        if (!sub.second.IsScalar())
          return absl::InvalidArgumentError(
              absl::StrCat(name, ".", sub_name, ": expected a scalar value"));
        RETURN_IF_ERROR(key->set(*config, sub.second.as<std::string>()));
      }
      continue;
    }
    const Key* key = in_any_section(name) ? nullptr : find_key(name);
    if (!key) return absl::InvalidArgumentError(absl::StrCat("unknown config key '", name, "'"));
    if (!entry.second.IsScalar())
      return absl::InvalidArgumentError(absl::StrCat(name, ": expected a scalar value"));
    RETURN_IF_ERROR(key->set(*config, entry.second.as<std::string>()));
  }
  return absl::OkStatus();
}

absl::Status validate(const ServerConfig& c) {
  if (c.workers < 0) return absl::InvalidArgumentError("workers must be >= 0");
  if (c.queue_length < 0) return absl::InvalidArgumentError("queue_length must be >= 0");
  // Durations become clock ticks (int64 nanoseconds, about 292 years): a year bounds them
  // well inside, and the negated comparisons also refuse NaN.
  constexpr double kMaxSeconds = 365.0 * 24 * 3600;
  if (!(c.default_deadline_seconds > 0 && c.default_deadline_seconds <= kMaxSeconds))
    return absl::InvalidArgumentError("default_deadline_seconds must be > 0 and at most a year");
  if (!(c.grace_period_seconds >= 0 && c.grace_period_seconds <= kMaxSeconds))
    return absl::InvalidArgumentError("grace_period_seconds must be >= 0 and at most a year");
  if (c.max_model_bytes == 0) return absl::InvalidArgumentError("max_model_bytes must be > 0");
  if (c.log_format != "text" && c.log_format != "json")
    return absl::InvalidArgumentError("log_format must be text or json");
  static const char* levels[] = {"trace", "debug", "info", "warn", "error"};
  bool known = false;
  for (const char* l : levels) known = known || c.log_level == l;
  if (!known)
    return absl::InvalidArgumentError("log_level must be trace, debug, info, warn or error");
  if (c.listen.find(':') == std::string::npos)
    return absl::InvalidArgumentError("listen must be HOST:PORT");
  if (c.metrics_listen.find(':') == std::string::npos)
    return absl::InvalidArgumentError("metrics_listen must be HOST:PORT");
  if (!c.health_listen.empty() && c.health_listen.find(':') == std::string::npos)
    return absl::InvalidArgumentError("health_listen must be HOST:PORT (or empty: off)");
  // Half a TLS configuration is refused rather than silently served as plaintext.
  if (c.tls_cert_file.empty() != c.tls_key_file.empty())
    return absl::InvalidArgumentError(
        "tls_cert_file and tls_key_file go together: set both (TLS) or neither (plaintext)");
  if (c.tls_client_auth != "none" && c.tls_client_auth != "request" &&
      c.tls_client_auth != "require")
    return absl::InvalidArgumentError("tls_client_auth must be none, request or require");
  if (!c.tls() && (!c.tls_client_ca_file.empty() || c.tls_client_auth != "none"))
    return absl::InvalidArgumentError(
        "client certificates need TLS: set tls_cert_file and tls_key_file too");
  if (c.tls_client_auth != "none" && c.tls_client_ca_file.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("tls_client_auth ", c.tls_client_auth,
                     " needs tls_client_ca_file, the CA bundle that signs client certificates"));
  if (c.tls_client_auth == "none" && !c.tls_client_ca_file.empty())
    return absl::InvalidArgumentError(
        "tls_client_ca_file is set but tls_client_auth is none: set tls_client_auth to require "
        "(or request), or drop the CA bundle");
  if (c.tls_reload_interval_seconds < 1 || c.tls_reload_interval_seconds > 86400)
    return absl::InvalidArgumentError("tls_reload_interval_seconds must be 1..86400");
  if (c.shared_cache()) RETURN_IF_ERROR(parse_redis_url(c.shared_cache_url));
  if (c.shared_cache_ttl_seconds < 1 || c.shared_cache_ttl_seconds > 31536000)
    return absl::InvalidArgumentError("shared_cache.ttl_seconds must be 1..31536000");
  if (c.shared_cache_max_entry_bytes == 0)
    return absl::InvalidArgumentError("shared_cache.max_entry_bytes must be > 0");
  if (c.shared_cache_chunk_bytes < shared::kMinChunkBytes ||
      c.shared_cache_chunk_bytes > shared::kMaxChunkBytes)
    return absl::InvalidArgumentError(absl::StrCat(
        "shared_cache.chunk_bytes must be ", shared::kMinChunkBytes, "..", shared::kMaxChunkBytes));
  if (c.shared_cache_connect_timeout_ms < 1 || c.shared_cache_connect_timeout_ms > 60000 ||
      c.shared_cache_timeout_ms < 1 || c.shared_cache_timeout_ms > 60000)
    return absl::InvalidArgumentError(
        "shared_cache.connect_timeout_ms and shared_cache.timeout_ms must be 1..60000");
  if (c.shared_cache_retry_min_ms < 1 || c.shared_cache_retry_max_ms > 3600000 ||
      c.shared_cache_retry_max_ms < c.shared_cache_retry_min_ms)
    return absl::InvalidArgumentError(
        "shared_cache.retry_min_ms must be >= 1, and retry_max_ms >= retry_min_ms and <= 3600000");
  if (c.shared_cache_write_queue < 1 || c.shared_cache_write_queue > 1024)
    return absl::InvalidArgumentError("shared_cache.write_queue must be 1..1024");
  if (c.shared_cache_key_prefix.size() > 256)
    return absl::InvalidArgumentError("shared_cache.key_prefix must be at most 256 bytes");
  return absl::OkStatus();
}

absl::StatusOr<ServerConfig> load_config(int argc, char** argv, int* exit_code) {
  CLI::App app{"graftd: the Graft ONNX optimization service"};
  std::string config_file;
  app.add_option("--config", config_file, "YAML config file (keys as the flags, with '_')");
  std::map<std::string, std::string> flag_values;
  for (const auto& k : keys())
    app.add_option(flag_name(k.name), flag_values[k.name],
                   std::string(k.help) + " (env " + env_name(k.name) + ")");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e);
    return absl::InvalidArgumentError(e.what());
  }

  ServerConfig config;
  if (!config_file.empty()) {
    std::ifstream in(config_file);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read config '", config_file, "'"));
    std::stringstream text;
    text << in.rdbuf();
    if (auto st = apply_yaml(text.str(), &config); !st.ok())
      return absl::InvalidArgumentError(absl::StrCat(config_file, ": ", std::string(st.message())));
  }
  for (const auto& k : keys())
    if (const char* env = std::getenv(env_name(k.name).c_str()))
      RETURN_IF_ERROR(k.set(config, env));
  for (const auto& k : keys())
    if (app.count(flag_name(k.name))) RETURN_IF_ERROR(k.set(config, flag_values[k.name]));
  if (config.workers == 0)
    config.workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (config.max_inflight_bytes == 0) config.max_inflight_bytes = automatic_inflight_bytes();
  RETURN_IF_ERROR(validate(config));
  return config;
}

namespace {

// A memory limit file's value ("max" or a byte count), or 0 when absent or unlimited.
uint64_t read_limit(const std::string& path) {
  std::ifstream in(path);
  uint64_t value = 0;
  if (!(in >> value)) return 0;
  return value;
}

}  // namespace

uint64_t automatic_inflight_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGE_SIZE);
  uint64_t memory = pages > 0 && page_size > 0
                        ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size)
                        : uint64_t{4} << 30;
  std::vector<std::string> limits = {"/sys/fs/cgroup/memory.max",
                                     "/sys/fs/cgroup/memory/memory.limit_in_bytes"};
  // cgroup v2 without a cgroup namespace: this process's own group.
  std::ifstream groups("/proc/self/cgroup");
  for (std::string line; std::getline(groups, line);)
    if (line.rfind("0::", 0) == 0)
      limits.push_back("/sys/fs/cgroup" + line.substr(3) + "/memory.max");
  for (const auto& path : limits)
    if (uint64_t limit = read_limit(path); limit > 0) memory = std::min(memory, limit);
  return std::max<uint64_t>(memory / 4, 1);
}

std::string ServerConfig::spool_path() const {
  if (!spool_dir.empty()) return spool_dir;
  const char* tmp = std::getenv("TMPDIR");
  return absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/graftd-spool");
}

uint64_t inflight_bytes(const ServerConfig& config) {
  return config.max_inflight_bytes > 0 ? config.max_inflight_bytes : automatic_inflight_bytes();
}

}  // namespace graft::server
