// Pass option schemas: parsing and range checks per type, unknown options and passes, and the
// built-in passes' own declarations.
#include <limits>
#include <regex>
#include <set>

#include <absl/strings/str_cat.h>

#include "core/passes/options.h"
#include "core/passes/registry.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

const std::vector<OptionSpec>& schema() {
  static const std::vector<OptionSpec> s = {
      integer_option("rounds", 3, -2, 10, "an integer with a range"),
      integer_option("any", 0, kMin, kMax, "an unbounded integer"),
      bytes_option("limit", 1024, int64_t{4} << 30, "a byte count"),
      boolean_option("strict", false, "a boolean"),
      enum_option("mode", "fast", {"fast", "exact"}, "an enum"),
      list_option("ops", {"Pow", "Exp"}, {"Exp", "Log", "Pow"}, "a list of choices"),
      list_option("names", {}, {}, "a list of any names"),
  };
  return s;
}

absl::StatusOr<OptionValues> parse(const PassOptions& given) {
  return parse_options("demo", schema(), given);
}

// The error for `name=text`: InvalidArgument naming the pass, the option and the text.
std::string error_for(const std::string& name, const std::string& text) {
  auto r = parse({{name, text}});
  EXPECT_FALSE(r.ok()) << name << "=" << text;
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  std::string msg(r.status().message());
  EXPECT_NE(msg.find("option demo." + name + " must be "), std::string::npos) << msg;
  EXPECT_NE(msg.find("got '" + text + "'"), std::string::npos) << msg;
  return msg;
}

TEST(PassOptions, DefaultsFillWhatIsNotGiven) {
  auto r = parse({});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->integer("rounds"), 3);
  EXPECT_EQ(r->integer("any"), 0);
  EXPECT_EQ(r->integer("limit"), 1024);
  EXPECT_FALSE(r->boolean("strict"));
  EXPECT_EQ(r->choice("mode"), "fast");
  EXPECT_EQ(r->list("ops"), (std::vector<std::string>{"Exp", "Pow"}));  // sorted
  EXPECT_TRUE(r->list("names").empty());
  ASSERT_EQ(r->values().size(), schema().size());  // in the schema's order
  for (size_t i = 0; i < schema().size(); ++i) EXPECT_EQ(r->values()[i].first, schema()[i].name);
}

TEST(PassOptions, IntegersAreCheckedAgainstTheirRange) {
  for (auto [text, value] :
       std::vector<std::pair<std::string, int64_t>>{{"-2", -2}, {"10", 10}, {"0", 0}, {"007", 7}}) {
    auto r = parse({{"rounds", text}});
    ASSERT_TRUE(r.ok()) << text << ": " << r.status();
    EXPECT_EQ(r->integer("rounds"), value) << text;
  }
  for (const char* bad :
       {"-3", "11", "abc", "", " 1", "1 ", "+1", "1.0", "1e1", "0x5", "99999999999999999999"}) {
    std::string msg = error_for("rounds", bad);
    EXPECT_NE(msg.find("an integer in [-2, 10]"), std::string::npos) << msg;
  }
  auto edges = parse({{"any", std::to_string(kMin)}});
  ASSERT_TRUE(edges.ok()) << edges.status();
  EXPECT_EQ(edges->integer("any"), kMin);
  edges = parse({{"any", std::to_string(kMax)}});
  ASSERT_TRUE(edges.ok()) << edges.status();
  EXPECT_EQ(edges->integer("any"), kMax);
  EXPECT_NE(error_for("any", "9223372036854775808").find("must be an integer, got"),
            std::string::npos);
}

TEST(PassOptions, ByteCountsTakeBinarySuffixesAndAreNeverNegative) {
  for (auto [text, value] :
       std::vector<std::pair<std::string, int64_t>>{{"0", 0},
                                                    {"1500", 1500},
                                                    {"2KiB", 2048},
                                                    {"3MiB", 3 << 20},
                                                    {"4GiB", int64_t{4} << 30},
                                                    {"4294967296", int64_t{4} << 30}}) {
    auto r = parse({{"limit", text}});
    ASSERT_TRUE(r.ok()) << text << ": " << r.status();
    EXPECT_EQ(r->integer("limit"), value) << text;
  }
  for (const char* bad : {"-1", "4294967297", "5GiB", "4194305KiB", "KiB", "1kib", "1KB", "1 MiB",
                          "1MiBKiB", "1.5MiB", "9223372036854775807GiB", "abc"}) {
    std::string msg = error_for("limit", bad);
    EXPECT_NE(msg.find("a byte count in [0, 4294967296]"), std::string::npos) << msg;
  }
}

TEST(PassOptions, BooleansAreTrueOrFalse) {
  for (auto [text, value] : std::vector<std::pair<std::string, bool>>{
           {"true", true}, {"1", true}, {"false", false}, {"0", false}}) {
    auto r = parse({{"strict", text}});
    ASSERT_TRUE(r.ok()) << text << ": " << r.status();
    EXPECT_EQ(r->boolean("strict"), value) << text;
  }
  for (const char* bad : {"yes", "TRUE", "2", ""}) {
    std::string msg = error_for("strict", bad);
    EXPECT_NE(msg.find("true or false"), std::string::npos) << msg;
  }
}

TEST(PassOptions, EnumsAreOneOfTheirChoices) {
  auto r = parse({{"mode", "exact"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->choice("mode"), "exact");
  for (const char* bad : {"Exact", "slow", ""}) {
    std::string msg = error_for("mode", bad);
    EXPECT_NE(msg.find("one of fast, exact"), std::string::npos) << msg;
  }
}

// A list is a set of names: spaces around names, empty items and repeats are dropped, the
// canonical text is sorted, so "b, a" and "a,b,a" configure (and cache) the same.
TEST(PassOptions, ListsAreSetsOfNames) {
  for (auto [text, want] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"Log", {"Log"}}, {" Pow , Log,Pow,", {"Log", "Pow"}}, {"", {}}, {",", {}}}) {
    auto r = parse({{"ops", text}});
    ASSERT_TRUE(r.ok()) << text << ": " << r.status();
    EXPECT_EQ(r->list("ops"), want) << text;
  }
  auto a = parse_option("demo", schema()[5], "Pow, Exp");
  auto b = parse_option("demo", schema()[5], "Exp,Pow,Exp");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(format_value(*a), "Exp,Pow");
  EXPECT_EQ(format_value(*a), format_value(*b));
  // With choices, every name must be one of them (case matters).
  for (const char* bad : {"Sqrt", "Exp,exp", "Log;Exp"}) {
    std::string msg = error_for("ops", bad);
    EXPECT_NE(msg.find("a comma-separated list of Exp, Log, Pow"), std::string::npos) << msg;
  }
  // Without choices any name, e.g. node names with spaces or slashes, but no control
  // character, no name over the byte bound and no more names than the item bound.
  auto names = parse({{"names", "/layer.0/MatMul, node 7"}});
  ASSERT_TRUE(names.ok()) << names.status();
  EXPECT_EQ(names->list("names"), (std::vector<std::string>{"/layer.0/MatMul", "node 7"}));
  {
    // Control characters are refused, and echoed escaped (no terminal escapes in messages).
    auto esc = parse({{"names", "a\x1b[31mb"}});
    ASSERT_FALSE(esc.ok());
    EXPECT_NE(esc.status().message().find("got 'a\\x1b[31mb'"), absl::string_view::npos)
        << esc.status();
  }
  EXPECT_FALSE(parse({{"names", std::string("a\x01b")}}).ok());
  EXPECT_FALSE(parse({{"names", std::string(kMaxListItemBytes + 1, 'n')}}).ok());
  EXPECT_TRUE(parse({{"names", std::string(kMaxListItemBytes, 'n')}}).ok());
  std::string many;
  for (size_t i = 0; i <= kMaxListItems; ++i) absl::StrAppend(&many, "n", i, ",");
  EXPECT_FALSE(parse({{"names", many}}).ok());
  auto d = parse({});
  ASSERT_TRUE(d.ok());
  EXPECT_THROW(d->choice("ops"), std::logic_error);
  EXPECT_THROW(d->list("mode"), std::logic_error);
}

TEST(PassOptions, UnknownOptionNamesTheValidOnes) {
  auto r = parse({{"rounds", "1"}, {"round", "1"}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  std::string msg(r.status().message());
  EXPECT_NE(msg.find("pass 'demo' has no option 'round'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rounds, any, limit, strict, mode, ops, names"), std::string::npos) << msg;
  auto none = parse_options("bare", {}, {{"x", "1"}});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("takes no options"), absl::string_view::npos)
      << none.status();
}

TEST(PassOptions, LongTextIsCutShortInMessages) {
  std::string huge(100000, '7');
  auto r = parse({{"rounds", huge}});
  ASSERT_FALSE(r.ok());
  EXPECT_LT(r.status().message().size(), 500u) << r.status().message().size();
  EXPECT_NE(r.status().message().find("100000 bytes"), absl::string_view::npos);
}

// A pass reading an option it does not declare, or with another type, is a bug the pipeline
// catches (it throws, and the pass is rolled back).
TEST(PassOptions, ReadingAnUndeclaredOptionThrows) {
  auto r = parse({});
  ASSERT_TRUE(r.ok());
  EXPECT_THROW(r->integer("nope"), std::logic_error);
  EXPECT_THROW(r->boolean("rounds"), std::logic_error);
  EXPECT_THROW(r->integer("mode"), std::logic_error);
  EXPECT_THROW(r->choice("strict"), std::logic_error);
}

TEST(PassOptions, SummariesSayTypeRangeAndDefault) {
  EXPECT_EQ(option_summary(schema()[0]), "integer in [-2, 10], default 3");
  EXPECT_EQ(option_summary(schema()[1]), "integer, default 0");
  EXPECT_EQ(option_summary(schema()[2]), "bytes in [0, 4294967296], default 1024");
  EXPECT_EQ(option_summary(schema()[3]), "boolean, default false");
  EXPECT_EQ(option_summary(schema()[4]), "fast|exact, default fast");
  EXPECT_EQ(option_summary(schema()[5]), "list of Exp|Log|Pow, default Exp,Pow");
  EXPECT_EQ(option_summary(schema()[6]), "list, default none");
  EXPECT_EQ(option_summary(integer_option("n", 4, 0, kMax, "")), "integer >= 0, default 4");
}

// Every built-in pass's declaration is usable: names the CLI can address, a level, a
// description, one line of help per option, and defaults its own parser accepts (given as
// text, the default parses back to itself).
TEST(PassOptions, EveryRegisteredDefaultPassesItsOwnValidation) {
  const std::regex identifier("[a-z][a-z0-9_]*");
  std::set<std::string> pass_names;
  size_t options_seen = 0;
  for (const PassInfo& p : all_passes()) {
    EXPECT_TRUE(std::regex_match(p.name, identifier)) << p.name;
    EXPECT_TRUE(pass_names.insert(p.name).second) << "duplicate pass " << p.name;
    EXPECT_GE(p.level, 1) << p.name;
    EXPECT_LE(p.level, kMaxLevel) << p.name;
    EXPECT_FALSE(p.description.empty()) << p.name;
    ASSERT_TRUE(p.create) << p.name;
    EXPECT_EQ(p.create()->name(), p.name);
    std::set<std::string> option_names;
    for (const OptionSpec& o : p.options) {
      ++options_seen;
      EXPECT_TRUE(std::regex_match(o.name, identifier)) << p.name << "." << o.name;
      EXPECT_TRUE(option_names.insert(o.name).second) << "duplicate " << p.name << "." << o.name;
      EXPECT_FALSE(o.help.empty()) << p.name << "." << o.name;
      EXPECT_EQ(o.help.find('\n'), std::string::npos) << p.name << "." << o.name;
      if (o.type == OptionType::kEnum || o.type == OptionType::kList) {
        for (const auto& c : o.choices) EXPECT_EQ(c.find(','), std::string::npos) << o.name;
      }
      if (o.type == OptionType::kEnum) {
        EXPECT_FALSE(o.choices.empty()) << p.name << "." << o.name;
      }
      auto parsed = parse_option(p.name, o, format_value(o.default_value));
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      EXPECT_EQ(*parsed, o.default_value) << p.name << "." << o.name;
      // The range's edges are accepted and one past them is not.
      if (o.type == OptionType::kInteger || o.type == OptionType::kBytes) {
        EXPECT_TRUE(parse_option(p.name, o, std::to_string(o.min)).ok()) << o.name;
        EXPECT_TRUE(parse_option(p.name, o, std::to_string(o.max)).ok()) << o.name;
        if (o.min > kMin) {
          EXPECT_FALSE(parse_option(p.name, o, std::to_string(o.min - 1)).ok()) << o.name;
        }
        if (o.max < kMax) {
          EXPECT_FALSE(parse_option(p.name, o, std::to_string(o.max + 1)).ok()) << o.name;
        }
      }
    }
    auto defaults = parse_options(p.name, p.options, {});
    ASSERT_TRUE(defaults.ok()) << defaults.status();
    EXPECT_EQ(defaults->values().size(), p.options.size());
  }
  EXPECT_GT(options_seen, 0u);  // fold_constants declares max_bytes and max_growth
}

// The built-in options keep the names and defaults they always had.
TEST(PassOptions, FoldConstantsDeclaresItsLimits) {
  const PassInfo* fold = find_pass("fold_constants");
  ASSERT_NE(fold, nullptr);
  auto defaults = parse_options(fold->name, fold->options, {});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->integer("max_bytes"), 16777216);
  EXPECT_EQ(defaults->integer("max_growth"), 4);
  auto bad = parse_options(fold->name, fold->options, {{"max_bytes", "abc"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(
                "option fold_constants.max_bytes must be a byte count in [0, 2147483648]"),
            absl::string_view::npos)
      << bad.status();
}

}  // namespace
}  // namespace graft::testing
