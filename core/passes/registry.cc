#include "core/passes/registry.h"

#include "core/passes/passes.h"

namespace graft {

const std::vector<PassInfo>& all_passes() {
  // Pipeline order: passes.def's (see the comments there).
  static const std::vector<PassInfo> passes = {
#define GRAFT_PASS(name) name##_pass(),
#include "core/passes/passes.def"
#undef GRAFT_PASS
  };
  return passes;
}

const PassInfo* find_pass(std::string_view name) {
  for (const auto& p : all_passes())
    if (p.name == name) return &p;
  return nullptr;
}

std::vector<std::string> passes_for_level(int level, const Target& target) {
  std::vector<std::string> out;
  for (const auto& p : all_passes())
    if (p.level <= level && !p.by_name_only && (!p.target || *p.target == target.kind))
      out.push_back(p.name);
  return out;
}

}  // namespace graft
