// The pass contract: a pass rewrites a Model in place and reports whether it changed anything.
// A pass recurses into every graph it can rewrite (main graph, subgraphs, function bodies) and
// never touches what it does not understand (unknown domains, custom ops).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <absl/status/statusor.h>

#include "core/ir/model.h"

namespace graft {

using PassOptions = std::map<std::string, std::string>;

struct PassResult {
  bool changed = false;
  int64_t rewrites = 0;  // pass-defined unit: nodes removed, nodes fused, tensors merged...
  std::map<std::string, int64_t> rules;  // rewrites per rule, for passes made of rules
  void add(int64_t n = 1) {
    rewrites += n;
    changed = changed || n > 0;
  }
};

class PassContext {
 public:
  explicit PassContext(const PassOptions& options) : options_(options) {}
  const PassOptions& options() const { return options_; }
  // Integer option with a default; a malformed value is an InvalidArgument error.
  absl::StatusOr<int64_t> option_int(const std::string& name, int64_t def) const;
  absl::StatusOr<bool> option_bool(const std::string& name, bool def) const;

  // The most initializer bytes (all graphs) the model may hold when the pass ends; 0 = no limit.
  // Set by the pipeline from the input's size, so a small model cannot fold itself into
  // gigabytes of constants one fold at a time. Passes that create weights stop adding at it.
  uint64_t max_weight_bytes = 0;

 private:
  const PassOptions& options_;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  virtual absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) = 0;
};

}  // namespace graft
