// One log line per request (spdlog): request id, method, digest prefix, sizes, duration, cache
// result, status. Text or JSON, chosen once at start-up.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/common.h>

namespace graft::server {

enum class LogFormat { kText, kJson };
// Configures the default spdlog logger (stderr) for the given level and format.
void setup_logging(const std::string& level, LogFormat format);

// A log line that is not about one request (start-up, shutdown), in the configured format.
void log_event(spdlog::level::level_enum level, const std::string& text);

class RequestLog {
 public:
  RequestLog(std::string method, uint64_t id);
  void set(std::string key, std::string value);
  void finish(const std::string& code, const std::string& message, double seconds);

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

}  // namespace graft::server
