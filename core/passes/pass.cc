#include "core/passes/pass.h"

#include <charconv>

#include <absl/strings/str_cat.h>

namespace graft {

absl::StatusOr<int64_t> PassContext::option_int(const std::string& name, int64_t def) const {
  auto it = options_.find(name);
  if (it == options_.end()) return def;
  int64_t v = 0;
  const std::string& s = it->second;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size())
    return absl::InvalidArgumentError(
        absl::StrCat("option '", name, "' must be an integer, got '", s, "'"));
  return v;
}

absl::StatusOr<bool> PassContext::option_bool(const std::string& name, bool def) const {
  auto it = options_.find(name);
  if (it == options_.end()) return def;
  if (it->second == "true" || it->second == "1") return true;
  if (it->second == "false" || it->second == "0") return false;
  return absl::InvalidArgumentError(
      absl::StrCat("option '", name, "' must be true or false, got '", it->second, "'"));
}

}  // namespace graft
