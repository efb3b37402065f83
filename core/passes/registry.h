// Names every pass, its level and its order in the default pipeline.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/passes/pass.h"

namespace graft {

struct PassOptionInfo {
  std::string name;
  std::string default_value;
  std::string description;
};

struct PassInfo {
  std::string name;
  std::string description;
  int level;  // lowest optimization level that runs this pass (1..3)
  std::vector<PassOptionInfo> options;
  std::function<std::unique_ptr<Pass>()> create;
};

// Every built-in pass in pipeline order.
const std::vector<PassInfo>& all_passes();
const PassInfo* find_pass(std::string_view name);
// Pass names run at `level` (0..3), in pipeline order.
std::vector<std::string> passes_for_level(int level);
constexpr int kMaxLevel = 3;

}  // namespace graft
