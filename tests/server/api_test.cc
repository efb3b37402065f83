// The API's conversions of pipeline configs and pass descriptors (proto/convert.h): option
// values are checked where the config is built, and the cache key means what the run means.
#include "core/passes/registry.h"
#include "proto/convert.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

v1::PipelineConfig with_option(const std::string& pass, const std::string& key,
                               const std::string& value) {
  v1::PipelineConfig c;
  (*(*c.mutable_pass_options())[pass].mutable_values())[key] = value;
  return c;
}

std::string canonical(const v1::PipelineConfig& proto) {
  auto config = api::from_proto(proto);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return "";
  auto text = api::canonical_config(*config);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

TEST(Api, BadOptionValuesAreInvalidArgumentWhenTheConfigIsBuilt) {
  for (auto [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"max_bytes", "abc"}, {"max_bytes", "-1"}, {"max_growth", "x"}, {"nope", "1"}}) {
    auto config = api::from_proto(with_option("fold_constants", key, value));
    ASSERT_FALSE(config.ok()) << key << "=" << value;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(config.status().message().find(key), absl::string_view::npos) << config.status();
    EXPECT_NE(config.status().message().find("fold_constants"), absl::string_view::npos)
        << config.status();
  }
  // canonical_config checks too (a core config built without from_proto).
  PipelineConfig core;
  core.pass_options["fold_constants"]["max_bytes"] = "abc";
  EXPECT_EQ(api::canonical_config(core).status().code(), absl::StatusCode::kInvalidArgument);
}

// Configs that run the same pipeline share a cache key; those that do not, do not.
TEST(Api, CanonicalConfigComparesParsedValuesWithDefaults) {
  const std::string o2 = canonical(v1::PipelineConfig{});
  EXPECT_NE(o2, "");
  EXPECT_EQ(canonical(with_option("fold_constants", "max_bytes", "16777216")), o2);
  EXPECT_EQ(canonical(with_option("fold_constants", "max_bytes", "16MiB")), o2);
  EXPECT_EQ(canonical(with_option("fold_constants", "max_growth", "04")), o2);
  EXPECT_NE(canonical(with_option("fold_constants", "max_bytes", "1000")), o2);
  EXPECT_NE(canonical(with_option("fold_constants", "max_growth", "5")), o2);
  EXPECT_EQ(canonical(with_option("fold_constants", "max_bytes", "1KiB")),
            canonical(with_option("fold_constants", "max_bytes", "1024")));

  v1::PipelineConfig list;
  for (const auto& name : passes_for_level(2)) list.add_passes(name);
  EXPECT_EQ(canonical(list), o2);
  // Options of a pass the list does not run do not change what runs.
  v1::PipelineConfig prune_only;
  prune_only.add_passes("prune");
  v1::PipelineConfig prune_with_fold_option = with_option("fold_constants", "max_bytes", "1000");
  prune_with_fold_option.add_passes("prune");
  EXPECT_EQ(canonical(prune_only), canonical(prune_with_fold_option));
  EXPECT_NE(canonical(prune_only), o2);
}

// ListPasses carries each option's type, range and default; the client reads them back.
TEST(Api, PassDescriptorsRoundTrip) {
  for (const PassInfo& p : all_passes()) {
    v1::PassInfo proto;
    api::fill_pass_info(p, &proto);
    PassInfo back = api::from_proto(proto);
    EXPECT_EQ(back.name, p.name);
    EXPECT_EQ(back.level, p.level);
    EXPECT_EQ(back.description, p.description);
    ASSERT_EQ(back.options.size(), p.options.size()) << p.name;
    for (size_t i = 0; i < p.options.size(); ++i) {
      const OptionSpec &a = p.options[i], &b = back.options[i];
      EXPECT_EQ(b.name, a.name);
      EXPECT_EQ(b.type, a.type) << a.name;
      EXPECT_EQ(b.default_value, a.default_value) << a.name;
      EXPECT_EQ(b.min, a.min) << a.name;
      EXPECT_EQ(b.max, a.max) << a.name;
      EXPECT_EQ(b.choices, a.choices) << a.name;
      EXPECT_EQ(b.help, a.help) << a.name;
      EXPECT_EQ(option_summary(b), option_summary(a));
    }
  }
  const PassInfo* fold = find_pass("fold_constants");
  ASSERT_NE(fold, nullptr);
  v1::PassInfo proto;
  api::fill_pass_info(*fold, &proto);
  ASSERT_EQ(proto.options_size(), 2);
  EXPECT_EQ(proto.options(0).name(), "max_bytes");
  EXPECT_EQ(proto.options(0).type(), v1::PassOption::BYTES);
  EXPECT_EQ(proto.options(0).default_value(), "16777216");
  EXPECT_EQ(proto.options(0).min(), 0);
  EXPECT_EQ(proto.options(0).max(), int64_t{1} << 31);
  EXPECT_EQ(proto.options(1).name(), "max_growth");
  EXPECT_EQ(proto.options(1).type(), v1::PassOption::INTEGER);
  EXPECT_EQ(proto.options(1).default_value(), "4");
}

// The memory estimates' sizes are part of the cache key when set (the report depends on them),
// and only then: keys of configs without them are as before. Negative sizes are refused.
TEST(Api, MemoryDimsAreInTheKeyOnlyWhenSet) {
  const std::string o2 = canonical(v1::PipelineConfig{});
  EXPECT_EQ(o2.find("memory"), std::string::npos);
  v1::PipelineConfig n8, n9, star;
  (*n8.mutable_memory_dims())["N"] = 8;
  (*n9.mutable_memory_dims())["N"] = 9;
  star.set_memory_default_dim(1);  // the default, spelt out
  EXPECT_NE(canonical(n8), o2);
  EXPECT_NE(canonical(n8), canonical(n9));
  EXPECT_EQ(canonical(star), o2);
  star.set_memory_default_dim(4);
  EXPECT_NE(canonical(star), o2);
  v1::PipelineConfig bad;
  (*bad.mutable_memory_dims())["N"] = -1;
  auto config = api::from_proto(bad);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find("'N' must be >= 0"), absl::string_view::npos)
      << config.status();
  bad.clear_memory_dims();
  bad.set_memory_default_dim(-2);
  EXPECT_FALSE(api::from_proto(bad).ok());
  auto back = api::from_proto(api::to_proto(*api::from_proto(n8)));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->memory_dims, (DimBindings{{"N", 8}}));
}

// The report's memory statistics survive the protocol both ways.
TEST(Api, MemoryStatisticsRoundTrip) {
  PipelineReport r;
  r.memory_before = {.weight_bytes = 1000,
                     .peak_activation_bytes = 800,
                     .largest_tensor = "big",
                     .largest_tensor_bytes = 400,
                     .unknown_size_values = 2,
                     .peak_node = 3,
                     .peak_node_name = "/layer/Concat"};
  r.memory_after = r.memory_before;
  r.memory_after.peak_activation_bytes = 500;
  r.memory_dims = {{"batch", 4}};
  r.memory_default_dim = 16;
  PassStats p;
  p.name = "schedule_memory";
  p.peak_before = 800;
  p.peak_after = 500;
  r.passes.push_back(p);
  v1::OptimizeReport proto;
  api::fill_report(r, &proto);
  PipelineReport back = api::to_pipeline_report(proto);
  for (auto [a, b] : {std::pair{&r.memory_before, &back.memory_before},
                      std::pair{&r.memory_after, &back.memory_after}}) {
    EXPECT_EQ(b->weight_bytes, a->weight_bytes);
    EXPECT_EQ(b->peak_activation_bytes, a->peak_activation_bytes);
    EXPECT_EQ(b->largest_tensor, a->largest_tensor);
    EXPECT_EQ(b->largest_tensor_bytes, a->largest_tensor_bytes);
    EXPECT_EQ(b->unknown_size_values, a->unknown_size_values);
    EXPECT_EQ(b->peak_node_name, a->peak_node_name);
  }
  EXPECT_EQ(back.memory_dims, r.memory_dims);
  EXPECT_EQ(back.memory_default_dim, 16);
  ASSERT_EQ(back.passes.size(), 1u);
  EXPECT_EQ(back.passes[0].peak_before, 800u);
  EXPECT_EQ(back.passes[0].peak_after, 500u);
}

}  // namespace
}  // namespace graft::testing
