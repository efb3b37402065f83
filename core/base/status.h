// The one idiom for propagating errors: RETURN_IF_ERROR on an absl::Status, ASSIGN_OR_RETURN on
// an absl::StatusOr. Every layer uses these (kernels, passes, pipeline, server, client); an
// open-coded `if (!x.ok()) return x;` is only written where the error is changed on its way out
// (a prefix naming the input, a different code), and then through with_prefix where it fits.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#define GRAFT_STATUS_CONCAT_INNER(a, b) a##b
#define GRAFT_STATUS_CONCAT(a, b) GRAFT_STATUS_CONCAT_INNER(a, b)

// Returns a non-OK absl::Status (or the status of a non-OK StatusOr) from the enclosing function.
#define RETURN_IF_ERROR(expr)                                                             \
  do {                                                                                    \
    if (absl::Status graft_status_ = ::graft::base::status_of(expr); !graft_status_.ok()) \
        [[unlikely]]                                                                      \
      return graft_status_;                                                               \
  } while (0)

// `lhs = *expr` for an OK StatusOr (lhs may declare a variable: `ASSIGN_OR_RETURN(auto x, f())`),
// else returns its status. Expands to more than one statement: not the body of an unbraced if.
#define ASSIGN_OR_RETURN(lhs, expr) \
  GRAFT_ASSIGN_OR_RETURN_IMPL(GRAFT_STATUS_CONCAT(graft_statusor_, __LINE__), lhs, expr)
#define GRAFT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) [[unlikely]]                       \
    return std::move(tmp).status();                 \
  lhs = std::move(*tmp)

namespace graft::base {

inline const absl::Status& status_of(const absl::Status& s) { return s; }
inline absl::Status status_of(absl::Status&& s) { return std::move(s); }
template <typename T>
const absl::Status& status_of(const absl::StatusOr<T>& s) {
  return s.status();
}
template <typename T>
absl::Status status_of(absl::StatusOr<T>&& s) {
  return std::move(s).status();
}

// `s` with "<prefix>" before its message, same code; OK stays OK.
inline absl::Status with_prefix(const absl::Status& s, std::string_view prefix) {
  if (s.ok()) return s;
  return absl::Status(s.code(), std::string(prefix) + std::string(s.message()));
}

}  // namespace graft::base
