// The built-in passes in pipeline order, and the levels as sets of them. Each pass declares its
// own name, level, description and options (PassInfo, at the end of its file).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/passes/pass.h"

namespace graft {

// Every built-in pass in pipeline order.
const std::vector<PassInfo>& all_passes();
const PassInfo* find_pass(std::string_view name);
// Pass names run at `level` (0..3) for `target`, in pipeline order.
std::vector<std::string> passes_for_level(int level, const Target& target = {});
constexpr int kMaxLevel = 3;

}  // namespace graft
