// The API's conversions of pipeline configs and pass descriptors (proto/convert.h): option
// values are checked where the config is built, and the cache key means what the run means.
#include <map>

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
// The target: checked where the config is built, part of the key when not the default, and a
// default spelt out ("onnx") keeps the default's key; the report carries it back.
TEST(Api, TargetIsCheckedAndKeyed) {
  const std::string o2 = canonical(v1::PipelineConfig{});
  v1::PipelineConfig c;
  c.set_target("onnx");
  EXPECT_EQ(canonical(c), o2);
  c.set_target("onnxruntime");
  const std::string ort = canonical(c);
  EXPECT_NE(ort, o2);
  EXPECT_NE(ort.find("fuse_onnxruntime"), std::string::npos);
  c.set_target("onnxruntime:1.18");
  EXPECT_EQ(canonical(c), ort);  // the default version spelt out
  c.set_target("onnxruntime:1.16");
  EXPECT_NE(canonical(c), ort);
  for (const char* bad : {"tensorrt", "onnxruntime:1", "onnxruntime:1.2", "onnxruntime:x.y"}) {
    c.set_target(bad);
    auto config = api::from_proto(c);
    ASSERT_FALSE(config.ok()) << bad;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  // Naming the runtime's pass without its target.
  v1::PipelineConfig named;
  named.add_passes("fuse_onnxruntime");
  auto config = api::from_proto(named);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(config.status().message().find("runs only with target onnxruntime"), std::string::npos);
  // Round trip through the proto.
  PipelineConfig core;
  core.target = *parse_target("onnxruntime:1.17");
  auto back = api::from_proto(api::to_proto(core));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->target.str(), "onnxruntime:1.17");
  PipelineReport report;
  report.target = "onnxruntime:1.17";
  v1::OptimizeReport wire;
  api::fill_report(report, &wire);
  EXPECT_EQ(wire.target(), "onnxruntime:1.17");
  EXPECT_EQ(api::to_pipeline_report(wire).target, "onnxruntime:1.17");
}

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

// ------------------------------------------------------------------------- fixed input dims

v1::PipelineConfig with_fixed(const std::map<std::string, int64_t>& dims,
                              const std::map<std::string, std::vector<int64_t>>& shapes) {
  v1::PipelineConfig c;
  c.mutable_fix_dims()->insert(dims.begin(), dims.end());
  for (const auto& [name, shape] : shapes)
    (*c.mutable_fix_shapes())[name].mutable_dims()->Add(shape.begin(), shape.end());
  return c;
}

TEST(Api, FixDimsAndShapesRoundTrip) {
  const std::map<std::string, int64_t> dims = {{"batch", 1}, {"H", 224}};
  const std::map<std::string, std::vector<int64_t>> shapes = {{"x", {1, 3, 224, 224}}};
  auto config = api::from_proto(with_fixed(dims, shapes));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->fix_dims, dims);
  EXPECT_EQ(config->fix_shapes, shapes);
  const v1::PipelineConfig proto = api::to_proto(*config);
  EXPECT_EQ(proto.fix_dims().size(), 2);
  EXPECT_EQ(proto.fix_dims().at("H"), 224);
  ASSERT_EQ(proto.fix_shapes().count("x"), 1u);
  EXPECT_EQ(std::vector<int64_t>(proto.fix_shapes().at("x").dims().begin(),
                                 proto.fix_shapes().at("x").dims().end()),
            shapes.at("x"));
  auto back = api::from_proto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->fix_dims, dims);
  EXPECT_EQ(back->fix_shapes, shapes);

  // The report's lines too.
  PipelineReport r;
  r.fixed_inputs = {"'x': [batch,3,H,W] -> [1,3,224,224]", "'mask': [batch] -> [1]"};
  v1::OptimizeReport report;
  api::fill_report(r, &report);
  EXPECT_EQ(report.fixed_inputs_size(), 2);
  EXPECT_EQ(api::to_pipeline_report(report).fixed_inputs, r.fixed_inputs);
}

TEST(Api, FixedDimsAreInTheKeyOnlyWhenSet) {
  const std::string o2 = canonical(v1::PipelineConfig{});
  EXPECT_EQ(o2.find("fix_"), std::string::npos);
  // Empty maps add nothing, so keys made before fix_dims existed hold.
  EXPECT_EQ(canonical(with_fixed({}, {})), o2);
  const auto batch1 = with_fixed({{"batch", 1}}, {});
  EXPECT_NE(canonical(batch1), o2);
  EXPECT_EQ(canonical(batch1), canonical(with_fixed({{"batch", 1}}, {})));
  EXPECT_NE(canonical(batch1), canonical(with_fixed({{"batch", 2}}, {})));
  EXPECT_NE(canonical(batch1), canonical(with_fixed({{"seq", 1}}, {})));
  const auto shape = with_fixed({}, {{"x", {1, 3}}});
  EXPECT_NE(canonical(shape), o2);
  EXPECT_EQ(canonical(shape), canonical(with_fixed({}, {{"x", {1, 3}}})));
  EXPECT_NE(canonical(shape), canonical(with_fixed({}, {{"x", {1, 4}}})));
  EXPECT_NE(canonical(shape), canonical(with_fixed({}, {{"x", {13}}})));
  // A dim name and an input name that read alike are different requests.
  EXPECT_NE(canonical(with_fixed({{"x", 1}}, {})), canonical(with_fixed({}, {{"x", {1}}})));
  EXPECT_EQ(canonical(with_fixed({{"batch", 1}}, {{"x", {1, 3}}})),
            canonical(with_fixed({{"batch", 1}}, {{"x", {1, 3}}})));
}

TEST(Api, FixedSizesOutOfRangeAreInvalidArgumentWhenTheConfigIsBuilt) {
  for (int64_t bad : {int64_t{0}, int64_t{-3}, (int64_t{1} << 31) + 1}) {
    auto config = api::from_proto(with_fixed({{"batch", bad}}, {}));
    ASSERT_FALSE(config.ok()) << bad;
    EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(config.status().message().find("fix_dims: the size of 'batch' must be 1..2147483648"),
              std::string::npos)
        << config.status();
    config = api::from_proto(with_fixed({}, {{"x", {1, bad}}}));
    ASSERT_FALSE(config.ok()) << bad;
    EXPECT_NE(config.status().message().find("fix_shapes: dim 1 of 'x' must be 1..2147483648"),
              std::string::npos)
        << config.status();
  }
  EXPECT_TRUE(api::from_proto(with_fixed({{"batch", int64_t{1} << 31}}, {})).ok());
}

// ------------------------------------------------------------------------- verify input sets

// A serialized float tensor with `values` and `dims`.
std::string float_bytes(std::vector<int64_t> dims, std::vector<float> values, bool raw = true) {
  onnx::TensorProto t;
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  if (raw)
    t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  else
    for (float v : values) t.add_float_data(v);
  return t.SerializeAsString();
}

v1::PipelineConfig with_inputs(const std::vector<std::map<std::string, std::string>>& sets) {
  v1::PipelineConfig c;
  for (const auto& set : sets) {
    auto& tensors = *c.mutable_verify()->add_input_sets()->mutable_tensors();
    for (const auto& [name, bytes] : set) tensors[name] = bytes;
  }
  return c;
}

void expect_invalid(const v1::PipelineConfig& proto, const std::string& part) {
  auto config = api::from_proto(proto);
  ASSERT_FALSE(config.ok()) << part;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << config.status();
  EXPECT_NE(config.status().message().find(part), std::string::npos)
      << config.status().message() << "\nexpected: " << part;
}

TEST(Api, InputSetsImplyVerificationAndRoundTrip) {
  auto config = api::from_proto(
      with_inputs({{{"x", float_bytes({2}, {1.5f, -2})}}, {{"x", float_bytes({1}, {7})}}}));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->verify);
  EXPECT_EQ(config->verify_options.trials, 2);
  ASSERT_EQ(config->verify_options.input_sets.size(), 2u);
  EXPECT_EQ(config->verify_options.input_sets[0].at("x").get_double(1), -2);
  auto again = api::from_proto(api::to_proto(*config));
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->verify_options.input_sets.size(), 2u);
  EXPECT_TRUE(again->verify_options.input_sets[1].at("x") ==
              config->verify_options.input_sets[1].at("x"));
}

TEST(Api, MalformedInputSetsAreInvalidArgumentNamingTheSetAndInput) {
  expect_invalid(with_inputs({{{"x", float_bytes({1}, {1})}}, {{"x", "\xff\xff\xff"}}}),
                 "verify input set 2, input 'x': not a serialized onnx.TensorProto");
  onnx::TensorProto external;
  external.set_data_type(onnx::TensorProto::FLOAT);
  external.add_dims(4);
  external.set_data_location(onnx::TensorProto::EXTERNAL);
  expect_invalid(with_inputs({{{"x", external.SerializeAsString()}}}),
                 "verify input set 1, input 'x': the tensor refers to external data");
  onnx::TensorProto huge;
  huge.set_data_type(onnx::TensorProto::FLOAT);
  huge.add_dims(1000000);
  huge.add_dims(1000000);
  expect_invalid(with_inputs({{{"x", huge.SerializeAsString()}}}),
                 "declare 1000000000000 elements, but the tensor holds data for at most 0");
  // Fewer values than the dims say is caught before allocating, more by the exact count.
  expect_invalid(with_inputs({{{"x", float_bytes({3}, {1, 2}, /*raw=*/false)}}}),
                 "dims [3] declare 3 elements, but the tensor holds data for at most 2");
  expect_invalid(with_inputs({{{"x", float_bytes({2}, {1, 2, 3}, /*raw=*/false)}}}),
                 "tensor field has 3 entries, expected 2");
  expect_invalid(with_inputs({{}}), "verify input set 1 is empty");
  expect_invalid(with_inputs({{{"", float_bytes({1}, {1})}}}), "empty input name");
  expect_invalid(with_inputs(std::vector<std::map<std::string, std::string>>(
                     17, {{"x", float_bytes({1}, {1})}})),
                 "at most 16 input sets, got 17");
  // Payloads above kMaxInputSetBytes together: 7 sets of 1 MiB.
  const std::vector<float> mib(1 << 18, 0.5f);
  expect_invalid(with_inputs(std::vector<std::map<std::string, std::string>>(
                     7, {{"x", float_bytes({1 << 18}, mib)}})),
                 "the input sets' data exceeds 6291456 bytes");
}

TEST(Api, TheCacheKeyCoversTheInputSetsContents) {
  const auto a = with_inputs({{{"x", float_bytes({2}, {1, 2})}}});
  const auto b = with_inputs({{{"x", float_bytes({2}, {1, 3})}}});
  EXPECT_NE(canonical(a), canonical(b));
  EXPECT_EQ(canonical(a), canonical(with_inputs({{{"x", float_bytes({2}, {1, 2})}}})));
  // The encoding does not matter, the contents do: typed fields vs raw_data, a tensor's own name.
  EXPECT_EQ(canonical(a), canonical(with_inputs({{{"x", float_bytes({2}, {1, 2}, false)}}})));
  EXPECT_NE(canonical(a), canonical(with_inputs({{{"x", float_bytes({1, 2}, {1, 2})}}})));
  EXPECT_NE(canonical(a), canonical(with_inputs({{{"z", float_bytes({2}, {1, 2})}}})));
  EXPECT_NE(canonical(a), canonical(with_inputs({{{"x", float_bytes({2}, {1, 2})}},
                                                 {{"x", float_bytes({2}, {1, 2})}}})));
  // Random-input settings are ignored with given inputs, so they do not split the key; tolerances
  // still decide rollbacks.
  v1::PipelineConfig seeded = a;
  seeded.mutable_verify()->set_seed(7);
  (*seeded.mutable_verify()->mutable_dims())["N"] = 4;
  EXPECT_EQ(canonical(a), canonical(seeded));
  v1::PipelineConfig tighter = a;
  tighter.mutable_verify()->set_rtol(1e-6);
  EXPECT_NE(canonical(a), canonical(tighter));
  // Without verification (no input sets) the inputs are not in the key at all.
  v1::PipelineConfig verified;
  verified.mutable_verify()->set_enabled(true);
  EXPECT_NE(canonical(a), canonical(verified));
  EXPECT_EQ(canonical(v1::PipelineConfig{}).find("inputs="), std::string::npos);
}

}  // namespace
}  // namespace graft::testing
