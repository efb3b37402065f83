#include "core/passes/options.h"

#include <charconv>
#include <limits>
#include <optional>
#include <stdexcept>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <absl/strings/str_split.h>
#include <absl/strings/strip.h>

#include <algorithm>

#include "core/base/status.h"

namespace graft {

namespace {

constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// This abseil's string_view is its own type, which StrCat wants.
absl::string_view sv(std::string_view s) { return {s.data(), s.size()}; }

// Client text echoed in a message is cut short: a message must stay readable and small.
// Control characters are written as \xNN, so a message cannot carry terminal escapes.
std::string quoted(std::string_view text) {
  constexpr size_t kMaxEcho = 200;
  std::string shown;
  for (unsigned char c : text.substr(0, kMaxEcho)) {
    if (c < 0x20 || c == 0x7f) {
      static constexpr char kHex[] = "0123456789abcdef";
      shown += {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
    } else {
      shown += static_cast<char>(c);
    }
  }
  if (text.size() <= kMaxEcho) return absl::StrCat("'", shown, "'");
  return absl::StrCat("'", shown, "'... (", text.size(), " bytes)");
}

std::optional<int64_t> parse_int(std::string_view text) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

std::optional<int64_t> parse_bytes(std::string_view text) {
  static constexpr std::pair<std::string_view, int> kSuffixes[] = {
      {"KiB", 10}, {"MiB", 20}, {"GiB", 30}};
  int shift = 0;
  for (const auto& [suffix, bits] : kSuffixes)
    if (text.size() > suffix.size() && text.substr(text.size() - suffix.size()) == suffix) {
      text.remove_suffix(suffix.size());
      shift = bits;
      break;
    }
  auto v = parse_int(text);
  if (!v || *v > (kInt64Max >> shift) || *v < (kInt64Min >> shift)) return std::nullopt;
  return *v * (int64_t{1} << shift);
}

// A kList text: names separated by commas, spaces around them dropped, empty items skipped
// (so "" and "," are the empty list), sorted and made distinct.
std::optional<std::vector<std::string>> parse_list(const OptionSpec& spec, std::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view item : absl::StrSplit(sv(text), ',')) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty()) continue;
    if (item.size() > kMaxListItemBytes || out.size() >= kMaxListItems) return std::nullopt;
    for (unsigned char c : item)
      if (c < 0x20 || c == 0x7f) return std::nullopt;
    if (!spec.choices.empty() &&
        std::find(spec.choices.begin(), spec.choices.end(), item) == spec.choices.end())
      return std::nullopt;
    out.emplace_back(item);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string range_text(const OptionSpec& spec) {
  if (spec.min == kInt64Min && spec.max == kInt64Max) return "";
  if (spec.max == kInt64Max) return absl::StrCat(" >= ", spec.min);
  if (spec.min == kInt64Min) return absl::StrCat(" <= ", spec.max);
  return absl::StrCat(" in [", spec.min, ", ", spec.max, "]");
}

}  // namespace

OptionSpec integer_option(std::string name, int64_t default_value, int64_t min, int64_t max,
                          std::string help) {
  return {std::move(name),
          OptionType::kInteger,
          OptionValue(std::in_place_type<int64_t>, default_value),
          min,
          max,
          {},
          std::move(help)};
}

OptionSpec bytes_option(std::string name, int64_t default_value, int64_t max, std::string help) {
  return {std::move(name),
          OptionType::kBytes,
          OptionValue(std::in_place_type<int64_t>, default_value),
          0,
          max,
          {},
          std::move(help)};
}

OptionSpec evaluator_bytes_option(std::string name, int64_t default_value, int64_t max,
                                  std::string help) {
  OptionSpec spec = bytes_option(std::move(name), default_value, max, std::move(help));
  spec.evaluator_memory = true;
  return spec;
}

OptionSpec boolean_option(std::string name, bool default_value, std::string help) {
  return {std::move(name),
          OptionType::kBoolean,
          OptionValue(std::in_place_type<bool>, default_value),
          // No range: the same defaults as OptionSpec and the protocol conversion.
          kInt64Min,
          kInt64Max,
          {},
          std::move(help)};
}

OptionSpec enum_option(std::string name, std::string default_value,
                       std::vector<std::string> choices, std::string help) {
  return {std::move(name), OptionType::kEnum,
          OptionValue(std::in_place_type<std::string>, std::move(default_value)),
          // No range: the same defaults as OptionSpec and the protocol conversion.
          kInt64Min, kInt64Max, std::move(choices), std::move(help)};
}

OptionSpec list_option(std::string name, std::vector<std::string> default_value,
                       std::vector<std::string> choices, std::string help) {
  std::sort(default_value.begin(), default_value.end());
  default_value.erase(std::unique(default_value.begin(), default_value.end()), default_value.end());
  return {std::move(name),
          OptionType::kList,
          OptionValue(std::in_place_type<std::vector<std::string>>, std::move(default_value)),
          kInt64Min,
          kInt64Max,
          std::move(choices),
          std::move(help)};
}

std::string_view type_name(OptionType type) {
  switch (type) {
    case OptionType::kInteger:
      return "integer";
    case OptionType::kBytes:
      return "bytes";
    case OptionType::kBoolean:
      return "boolean";
    case OptionType::kEnum:
      return "enum";
    case OptionType::kList:
      return "list";
  }
  return "unknown";
}

std::string accepted_values(const OptionSpec& spec) {
  switch (spec.type) {
    case OptionType::kInteger:
      return absl::StrCat("an integer", range_text(spec));
    case OptionType::kBytes:
      return absl::StrCat("a byte count", range_text(spec),
                          " (digits, optionally followed by KiB, MiB or GiB)");
    case OptionType::kBoolean:
      return "true or false";
    case OptionType::kEnum:
      return absl::StrCat("one of ", absl::StrJoin(spec.choices, ", "));
    case OptionType::kList:
      if (!spec.choices.empty())
        return absl::StrCat("a comma-separated list of ", absl::StrJoin(spec.choices, ", "));
      return absl::StrCat("a comma-separated list of names (at most ", kMaxListItems,
                          ", each at most ", kMaxListItemBytes,
                          " bytes without a control character)");
  }
  return "";
}

std::string option_summary(const OptionSpec& spec) {
  std::string kind = spec.type == OptionType::kEnum ? absl::StrJoin(spec.choices, "|")
                                                    : std::string(type_name(spec.type));
  if (spec.type == OptionType::kInteger || spec.type == OptionType::kBytes)
    kind += range_text(spec);
  if (spec.type == OptionType::kList) {
    if (!spec.choices.empty()) kind = absl::StrCat("list of ", absl::StrJoin(spec.choices, "|"));
    std::string def = format_value(spec.default_value);
    return absl::StrCat(kind, ", default ", def.empty() ? "none" : def);
  }
  return absl::StrCat(kind, ", default ", format_value(spec.default_value));
}

std::string format_value(const OptionValue& value) {
  if (const auto* i = std::get_if<int64_t>(&value)) return absl::StrCat(*i);
  if (const auto* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const auto* l = std::get_if<std::vector<std::string>>(&value)) return absl::StrJoin(*l, ",");
  return std::get<std::string>(value);
}

absl::StatusOr<OptionValue> parse_option(std::string_view pass, const OptionSpec& spec,
                                         std::string_view text) {
  std::optional<OptionValue> value;
  switch (spec.type) {
    case OptionType::kInteger:
    case OptionType::kBytes:
      if (auto v = spec.type == OptionType::kBytes ? parse_bytes(text) : parse_int(text);
          v && *v >= spec.min && *v <= spec.max)
        value = *v;
      break;
    case OptionType::kBoolean:
      if (text == "true" || text == "1") value.emplace(std::in_place_type<bool>, true);
      if (text == "false" || text == "0") value.emplace(std::in_place_type<bool>, false);
      break;
    case OptionType::kEnum:
      for (const auto& c : spec.choices)
        if (text == c) value = c;
      break;
    case OptionType::kList:
      if (auto l = parse_list(spec, text)) value = std::move(*l);
      break;
  }
  if (value) return *value;
  return absl::InvalidArgumentError(absl::StrCat("option ", sv(pass), ".", spec.name, " must be ",
                                                 accepted_values(spec), ", got ", quoted(text)));
}

absl::StatusOr<OptionValues> parse_options(std::string_view pass,
                                           const std::vector<OptionSpec>& schema,
                                           const PassOptions& given) {
  for (const auto& [name, text] : given) {
    bool known = false;
    for (const auto& spec : schema) known = known || spec.name == name;
    if (known) continue;
    std::vector<std::string> names;
    for (const auto& spec : schema) names.push_back(spec.name);
    return absl::InvalidArgumentError(
        absl::StrCat("pass '", sv(pass), "' has no option ", quoted(name),
                     names.empty() ? "; it takes no options"
                                   : absl::StrCat("; its options: ", absl::StrJoin(names, ", "))));
  }
  OptionValues out;
  for (const auto& spec : schema) {
    auto it = given.find(spec.name);
    if (it == given.end()) {
      out.values_.emplace_back(spec.name, spec.default_value);
      continue;
    }
    ASSIGN_OR_RETURN(OptionValue value, parse_option(pass, spec, it->second));
    out.values_.emplace_back(spec.name, std::move(value));
  }
  return out;
}

const OptionValue& OptionValues::find(std::string_view name) const {
  for (const auto& [n, v] : values_)
    if (n == name) return v;
  throw std::logic_error(
      absl::StrCat("the pass read option '", sv(name), "', which it does not declare"));
}

int64_t OptionValues::integer(std::string_view name) const {
  const auto* v = std::get_if<int64_t>(&find(name));
  if (!v) throw std::logic_error(absl::StrCat("option '", sv(name), "' is not an integer"));
  return *v;
}

bool OptionValues::boolean(std::string_view name) const {
  const auto* v = std::get_if<bool>(&find(name));
  if (!v) throw std::logic_error(absl::StrCat("option '", sv(name), "' is not a boolean"));
  return *v;
}

const std::string& OptionValues::choice(std::string_view name) const {
  const auto* v = std::get_if<std::string>(&find(name));
  if (!v) throw std::logic_error(absl::StrCat("option '", sv(name), "' is not an enum"));
  return *v;
}

const std::vector<std::string>& OptionValues::list(std::string_view name) const {
  const auto* v = std::get_if<std::vector<std::string>>(&find(name));
  if (!v) throw std::logic_error(absl::StrCat("option '", sv(name), "' is not a list"));
  return *v;
}

}  // namespace graft
