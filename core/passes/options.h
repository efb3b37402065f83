// Pass options: each pass declares a schema (name, type, default, range, help) beside its code;
// the pipeline parses and checks the values a client gives against it when it is configured,
// so a bad value is a configuration error before any work, and a pass reads typed values that
// cannot be malformed.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <absl/status/statusor.h>

namespace graft {

// Option values as a client writes them: option name -> text.
using PassOptions = std::map<std::string, std::string>;

enum class OptionType {
  kInteger,  // decimal, within [min, max]
  kBytes,    // a byte count within [min, max]: decimal, optionally with a KiB, MiB or GiB suffix
  kBoolean,  // true/false (1/0)
  kEnum,     // one of `choices`
  kList,     // comma-separated names (each one of `choices` when there are choices); a set:
             // spaces around names and repeats are dropped, canonical text sorted
};

// int64_t for kInteger and kBytes, bool for kBoolean, std::string for kEnum, a sorted vector
// of distinct names for kList.
using OptionValue = std::variant<int64_t, bool, std::string, std::vector<std::string>>;

// Bounds on a kList value: client text, so bounded.
inline constexpr size_t kMaxListItems = 4096;
inline constexpr size_t kMaxListItemBytes = 1024;

struct OptionSpec {
  std::string name;
  OptionType type = OptionType::kInteger;
  OptionValue default_value;
  int64_t min = std::numeric_limits<int64_t>::min();  // kInteger, kBytes
  int64_t max = std::numeric_limits<int64_t>::max();
  std::vector<std::string> choices;  // kEnum; kList: the names allowed (empty: any name)
  std::string help;                  // one line
  // kBytes: memory the pass holds on the evaluator (fold_constants' largest folded result). A
  // server caps such an option at the larger of its default and the evaluator memory it grants
  // a request (check_evaluator_memory_options in core/pipeline/pipeline.h).
  bool evaluator_memory = false;
};

OptionSpec integer_option(std::string name, int64_t default_value, int64_t min, int64_t max,
                          std::string help);
OptionSpec bytes_option(std::string name, int64_t default_value, int64_t max, std::string help);
// A bytes_option that sizes evaluator memory (OptionSpec::evaluator_memory).
OptionSpec evaluator_bytes_option(std::string name, int64_t default_value, int64_t max,
                                  std::string help);
OptionSpec boolean_option(std::string name, bool default_value, std::string help);
OptionSpec enum_option(std::string name, std::string default_value,
                       std::vector<std::string> choices, std::string help);

// A list of names; `choices` empty means any name (a non-empty text without a comma or a
// control character, at most kMaxListItemBytes).
OptionSpec list_option(std::string name, std::vector<std::string> default_value,
                       std::vector<std::string> choices, std::string help);

std::string_view type_name(OptionType type);  // "integer", "bytes", "boolean", "enum", "list"
// What the option accepts, for messages and listings: "an integer in [0, 10]", "true or false".
std::string accepted_values(const OptionSpec& spec);
// Type, range and default in a few words, for listings: "bytes in [0, 2147483648], default
// 16777216", "integer >= 0, default 4", "boolean, default false", "a|b|c, default a".
std::string option_summary(const OptionSpec& spec);
// The canonical text of a value: decimal for integers and byte counts, "true"/"false", a
// list's names sorted and joined by commas.
std::string format_value(const OptionValue& value);

// Parses one value; InvalidArgument "option <pass>.<name> must be <accepted>, got '<text>'".
absl::StatusOr<OptionValue> parse_option(std::string_view pass, const OptionSpec& spec,
                                         std::string_view text);

// Every option of a pass, typed and checked, defaults filled in.
class OptionValues {
 public:
  OptionValues() = default;
  // A pass reads only options it declares, with their declared type; anything else is a bug in
  // the pass and throws std::logic_error (the pipeline rolls such a pass back).
  int64_t integer(std::string_view name) const;  // kInteger and kBytes
  bool boolean(std::string_view name) const;
  const std::string& choice(std::string_view name) const;             // kEnum
  const std::vector<std::string>& list(std::string_view name) const;  // kList, sorted, distinct

  // In the schema's order, for canonical texts.
  const std::vector<std::pair<std::string, OptionValue>>& values() const { return values_; }

 private:
  friend absl::StatusOr<OptionValues> parse_options(std::string_view,
                                                    const std::vector<OptionSpec>&,
                                                    const PassOptions&);
  const OptionValue& find(std::string_view name) const;
  std::vector<std::pair<std::string, OptionValue>> values_;
};

// Checks `given` against `schema` (unknown option, wrong type, out of range: InvalidArgument
// naming the pass, the option and what it accepts) and fills in the defaults.
absl::StatusOr<OptionValues> parse_options(std::string_view pass,
                                           const std::vector<OptionSpec>& schema,
                                           const PassOptions& given);

}  // namespace graft
