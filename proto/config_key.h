// The result cache's key for a pipeline configuration: derived from every field of
// graft.v1.PipelineConfig by one table (config_key.cc). Each field is either keyed, by a part of
// the table that says under which condition it changes the result, or excluded, with the reason.
// tests/server/config_key_test.cc walks the message's descriptor: a field that is neither fails
// it by name, and every keyed field, set on its own, must change the key.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <absl/status/statusor.h>

#include "core/pipeline/pipeline.h"

namespace graft::api {

// When a keyed field can change what a request computes or reports, and so enters the key.
enum class KeyScope {
  kAlways,
  kVerifying,        // verification runs: verify.enabled, given input sets, or a lossy pass
  kVerifyingRandom,  // verification runs on random inputs (no verify.input_sets given)
  kLossy,            // a lossy pass runs
};
std::string_view scope_name(KeyScope scope);

// A field of graft.v1.PipelineConfig by its path: "level", "verify.seed" (singular message
// fields are walked into; maps, repeated fields and their messages are one field each).
struct KeyedField {
  std::string_view path;
  KeyScope scope;
};
struct ExcludedField {
  std::string_view path;
  std::string_view reason;
};
// Every (field, scope) the key derivation reads, in the key's order; a field read under two
// conditions (verify.dims: the random inputs' sizes and the memory estimate's) appears twice.
std::vector<KeyedField> keyed_fields();
// Fields that never enter the key, each with why that is right.
const std::vector<ExcludedField>& excluded_fields();

// A canonical text of what the config means, built part by part from the table: the resolved
// pass list with every option's parsed value (defaults included), rounds, target, checks, the
// lossy passes' gates, verification, fixed dims, explanations and memory sizes. Equal for
// configs that run the same pipeline (e.g. "O2" and O2's explicit list, or an option left out and
// given as its default). Given verify input sets and calibration sets enter as the sha256 of
// their contents (input_sets_digest), in place of the random-input settings they make
// irrelevant. A part whose fields are at their old defaults adds nothing, so keys made before
// it existed hold. Besides the message's fields, the key holds what the server sets on the core
// config (verification's memory and work budgets).
absl::StatusOr<std::string> canonical_config(const PipelineConfig& config);

}  // namespace graft::api
