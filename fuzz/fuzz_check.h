// A failed property in a fuzz target: print why and abort, which libFuzzer reports as a crash
// and saves the input for (the sanitizers report memory errors on their own).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace graft::fuzz {

[[noreturn]] inline void fail(std::string_view what, std::string_view detail = {}) {
  std::fprintf(stderr, "FUZZ PROPERTY FAILED: %.*s%s%.*s\n", static_cast<int>(what.size()),
               what.data(), detail.empty() ? "" : ": ", static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

}  // namespace graft::fuzz
