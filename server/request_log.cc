#include "server/request_log.h"

#include <cstdio>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

namespace graft::server {

namespace {
LogFormat g_format = LogFormat::kText;  // set once before serving
}

void setup_logging(const std::string& level, LogFormat format) {
  g_format = format;
  auto logger = spdlog::stderr_logger_mt("graftd");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
  if (format == LogFormat::kJson) {
    // The message itself is a JSON object's members; the pattern adds time and level.
    spdlog::set_pattern(R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l",%v})");
  } else {
    spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %v");
  }
}

RequestLog::RequestLog(std::string method, uint64_t id) {
  fields_.emplace_back("request_id", std::to_string(id));
  fields_.emplace_back("method", std::move(method));
}

void RequestLog::set(std::string key, std::string value) {
  for (auto& [k, v] : fields_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  fields_.emplace_back(std::move(key), std::move(value));
}

void RequestLog::finish(const std::string& code, const std::string& message, double seconds) {
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.3f", seconds * 1e3);
  set("duration_ms", ms);
  set("status", code);
  if (!message.empty()) set("message", message);
  std::string line;
  if (g_format == LogFormat::kJson) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : fields_) j[k] = v;
    std::string obj = j.dump();
    line = obj.substr(1, obj.size() - 2);  // members only: the pattern wraps them
  } else {
    for (const auto& [k, v] : fields_) {
      if (!line.empty()) line += ' ';
      bool quote = v.find(' ') != std::string::npos || v.empty();
      line += k + "=" + (quote ? nlohmann::json(v).dump() : v);
    }
  }
  if (code == "OK")
    spdlog::info("{}", line);
  else if (code == "INTERNAL" || code == "UNKNOWN" || code == "DATA_LOSS")
    spdlog::error("{}", line);
  else
    spdlog::warn("{}", line);
}

void log_event(spdlog::level::level_enum level, const std::string& text) {
  if (g_format == LogFormat::kJson) {
    std::string obj = nlohmann::json{{"msg", text}}.dump();
    spdlog::log(level, "{}", obj.substr(1, obj.size() - 2));
  } else {
    spdlog::log(level, "{}", text);
  }
}

}  // namespace graft::server
