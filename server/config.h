// graftd's configuration: built-in defaults < YAML file < GRAFTD_* environment < flags.
#pragma once

#include <cstdint>
#include <string>

#include <absl/status/statusor.h>

#include "core/eval/verify.h"

namespace graft::server {

struct ServerConfig {
  std::string listen = "127.0.0.1:50051";
  std::string metrics_listen = "127.0.0.1:9464";
  // Serve the HTML reports of cached results on metrics_listen (docs/security.md: they show
  // names from the models).
  bool serve_reports = false;
  int workers = 0;  // 0 = number of cores
  int queue_length = 64;
  uint64_t cache_bytes = 1ull << 30;
  uint64_t max_model_bytes = 2147483647ull;
  // Bytes of all uploads held in memory at once (models and external files, from the first
  // chunk until the response is sent); 0 = automatic, see automatic_inflight_bytes().
  uint64_t max_inflight_bytes = 0;
  // Evaluator memory of one verified request (tensors alive at once, weights included);
  // 0 turns verification off (requests asking for it get FAILED_PRECONDITION).
  uint64_t verify_max_bytes = eval::kDefaultVerifyMaxBytes;
  // Evaluator work of one verified request, all its runs together (original, candidates,
  // bisection); when spent the result is NOT_VERIFIABLE. 0 = no cap (the deadline still holds).
  uint64_t verify_max_work = 200'000'000'000;
  double default_deadline_seconds = 300;
  double grace_period_seconds = 25;
  std::string log_level = "info";
  std::string log_format = "text";
  // TLS on `listen` (off while tls_cert_file is empty). The files are re-read every
  // tls_reload_interval_seconds, so a renewed certificate is served without a restart.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;        // CA bundle that signs client certificates (mTLS)
  std::string tls_client_auth = "none";  // none, request (verified if sent) or require
  int tls_reload_interval_seconds = 60;
  // Plaintext grpc.health.v1 only, for probes that cannot speak TLS; empty = off.
  std::string health_listen;
  bool tls() const { return !tls_cert_file.empty(); }
  // Shared result cache tier on Redis, behind the in-process cache (docs/shared-cache.md); off
  // while shared_cache_url is empty. In YAML these keys form one mapping, `shared_cache:`, with
  // the names after "shared_cache_" (url, ttl_seconds, ...).
  std::string shared_cache_url;  // redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]
  std::string shared_cache_key_prefix = "graft:";
  int shared_cache_ttl_seconds = 86400;
  uint64_t shared_cache_max_entry_bytes = 256ull << 20;  // larger results are not shared
  uint64_t shared_cache_chunk_bytes = 4ull << 20;        // Redis value size of one chunk
  int shared_cache_connect_timeout_ms = 200;
  int shared_cache_timeout_ms = 1000;     // per Redis command
  int shared_cache_retry_min_ms = 1000;   // backoff after Redis fails, doubling ...
  int shared_cache_retry_max_ms = 30000;  // ... up to this
  int shared_cache_write_queue = 4;       // results waiting to be written; more are dropped
  bool shared_cache() const { return !shared_cache_url.empty(); }
  // Disk for external-data files (docs/big-models.md): uploads are written under spool_dir as
  // they arrive, never held in memory, and results that wrote new weights keep them there while
  // cached. In YAML, the mapping `spool:` (dir, max_bytes, cache_bytes).
  std::string spool_dir;  // empty = $TMPDIR/graftd-spool (/tmp when TMPDIR is unset)
  // Disk for all uploads in progress and cached result files together; 0 = no external data.
  uint64_t spool_max_bytes = 64ull << 30;
  // Of which results kept by the cache may use (least recently used dropped first; at most
  // spool_max_bytes).
  uint64_t spool_cache_bytes = 16ull << 30;
  // spool_dir, or its default when empty.
  std::string spool_path() const;
};

// Parses argv (flags --config, --listen, --metrics-listen, --workers, ...). Returns the config,
// or an error status; `exit_code` is set when the process should exit at once (e.g. --help).
absl::StatusOr<ServerConfig> load_config(int argc, char** argv, int* exit_code);

// Applies one YAML document's keys; unknown keys are an error (typos must not pass silently).
absl::Status apply_yaml(const std::string& yaml_text, ServerConfig* config);
absl::Status validate(const ServerConfig& config);

// A quarter of the memory this process may use: the cgroup's memory limit when one is set
// (a container), else the machine's physical memory.
uint64_t automatic_inflight_bytes();
// config.max_inflight_bytes, or automatic_inflight_bytes() when it is 0.
uint64_t inflight_bytes(const ServerConfig& config);

}  // namespace graft::server
