// The result cache's key (api::canonical_config, proto/config_key.h): derived from every field of
// graft.v1.PipelineConfig, each keyed or excluded with its reason, and stable for the configs
// that existed before the derivation became table-driven.
#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/text_format.h>

#include "core/cache/digest.h"
#include "proto/convert.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

// The key of a request's config as graftd computes it (from_proto, then the canonical text).
absl::StatusOr<std::string> key_of(const v1::PipelineConfig& proto) {
  auto config = api::from_proto(proto);
  if (!config.ok()) return config.status();
  return api::canonical_config(*config);
}

std::string tensor_bytes(const std::string& name, float value) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  t.add_dims(1);
  t.add_float_data(value);
  return t.SerializeAsString();
}

// A small explicit pass list, so the goldens below do not move when a level gains a pass or a
// pass an option.
v1::PipelineConfig small() {
  v1::PipelineConfig c;
  c.add_passes("eliminate_identity");
  c.add_passes("prune");
  return c;
}

// The configs whose keys must not change, each with the sha256 of its canonical text as the
// code before the table-driven derivation computed it. A change here is a change of every
// cached result's key: say so in the release notes (the build fingerprint changes with it).
std::vector<std::pair<std::string, v1::PipelineConfig>> golden_configs() {
  std::vector<std::pair<std::string, v1::PipelineConfig>> out;
  out.emplace_back("small", small());
  {
    auto c = small();
    c.set_max_rounds(3);
    out.emplace_back("rounds", c);
  }
  {
    auto c = small();
    c.set_onnx_checker(true);
    c.set_shape_inference(true);
    out.emplace_back("checks", c);
  }
  {
    auto c = small();
    auto& v = *c.mutable_verify();
    v.set_enabled(true);
    v.set_seed(1);
    v.set_trials(2);
    v.set_rtol(1e-3);
    v.set_atol(1e-4);
    out.emplace_back("verify", c);
    (*v.mutable_dims())["batch"] = 4;
    v.set_default_dim(16);
    (*v.mutable_shapes())["x"].add_dims(2);
    (*v.mutable_values())["k"] = 1.5;
    (*v.mutable_ranges())["x"].set_high(0.25);
    out.emplace_back("verify_random", c);
    (*v.add_input_sets()->mutable_tensors())["x"] = tensor_bytes("x", 1.0f);
    out.emplace_back("verify_inputs", c);
  }
  {
    auto c = small();
    c.set_target("onnxruntime:1.17");
    out.emplace_back("target", c);
  }
  {
    auto c = small();
    c.set_target_opset(17);
    out.emplace_back("target_opset", c);
  }
  {
    auto c = small();
    (*c.mutable_fix_dims())["batch"] = 1;
    (*c.mutable_fix_shapes())["x"].add_dims(3);
    out.emplace_back("fix", c);
  }
  {
    auto c = small();
    (*c.mutable_io_layout())["x"] = "NHWC";
    c.set_layout_sensitive_ops(true);
    out.emplace_back("io_layout", c);
  }
  {
    v1::PipelineConfig c;
    c.add_passes("eliminate_noop");
    c.add_explain("eliminate_noop");
    out.emplace_back("explain", c);
  }
  {
    auto c = small();
    (*c.mutable_memory_dims())["seq"] = 128;
    c.set_memory_default_dim(2);
    out.emplace_back("memory", c);
  }
  {
    v1::PipelineConfig c;
    c.add_passes("convert_fp16");
    out.emplace_back("lossy", c);
    c.set_max_error(0.25);
    c.set_min_cosine(0.5);
    c.set_accept_unmeasured_error(true);
    (*c.add_calibration_sets()->mutable_tensors())["x"] = tensor_bytes("x", 2.0f);
    out.emplace_back("lossy_gates", c);
  }
  return out;
}

// The verified configs' keys include the work budget (max_work=...): they changed when its
// default went from 2e10 to 2e11, as they must (a result not verifiable under the old budget may
// verify under the new one). They changed again when numbers (tolerances, values, ranges, gate
// thresholds) began to be written exactly (atol=1e-04; StrCat kept 6 digits, so settings that
// differed in the 7th were one key) and verify.ranges was added (verify_random).
TEST(ConfigKey, KeysOfExistingConfigsAreUnchanged) {
  const std::map<std::string, std::string> golden = {
      {"small", "e7ca3115fd5bb53e04b55db7f118c88305542267ff6c4de508aeaaaa0e657c3d"},
      {"rounds", "5ed1c953eb990f2312d822d15c4a3fafd9f3ec1694280ef5d84ea7523eff994a"},
      {"checks", "e633d66f223067b27912f45663e72aa259e6964d370f965770fc204b8d061581"},
      {"verify", "01b8345400f5eba9ac43bd1e30edda7da29c53da84b3a4a9d278f6f54d342228"},
      {"verify_random", "57e8dd82c118951cccd457f07de9d40f6df9450a9f730012d119bfc9b6501db3"},
      {"verify_inputs", "aa19797bb09e3f2a49f20951756716979bd91567fa3bf2cc71d9ffe0cd8b5f53"},
      {"target", "61b62da267636c9c1caeb22eda9ff977e4508a182cea1a5e531ec679d34b9740"},
      {"target_opset", "f5d9c6973acc38a41f36eaf2864cd69deec75197bdce73246d4314200ae8d1df"},
      {"fix", "b016a3cf216692051006876c77ce4cbc9ccff58f226bf7a3a0259c5f7bcf4214"},
      {"io_layout", "c4d046248fc1440dbe43fcc4c5f56f34b33e45eec5b4ec774a4a7176fcf8cc38"},
      {"explain", "beb2378a8d7e233bb699075e9394ff4ca6207649d71d4f66ba764638a2a37560"},
      {"memory", "76f2f87ce1cc4d3f6e55614a4387cb7cd84d64f0a2d64e6cb993ed7fc735c467"},
      {"lossy", "40f99600d90b3f8b0cc11250350e2b0793357b60ad86ad0841b6d475a0551a68"},
      {"lossy_gates", "c92511d72e5d55a3413fca984fd7cac41b3c9cbb0c29dd4125ad31a0bae6a765"},
  };
  for (const auto& [name, config] : golden_configs()) {
    auto key = key_of(config);
    ASSERT_TRUE(key.ok()) << name << ": " << key.status();
    const auto it = golden.find(name);
    EXPECT_TRUE(it != golden.end() && it->second == cache::sha256_hex(*key))
        << name << ": {\"" << name << "\", \"" << cache::sha256_hex(*key) << "\"},\n"
        << *key;
  }
}

// Every field of graft.v1.PipelineConfig, by path: singular message fields (verify) are walked
// into; maps, repeated fields and their messages are one field each.
void walk(const google::protobuf::Descriptor* d, const std::string& prefix,
          std::vector<const google::protobuf::FieldDescriptor*>* fields,
          std::vector<std::string>* paths) {
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    const std::string path = prefix + f->name();
    if (f->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE && !f->is_repeated()) {
      walk(f->message_type(), path + ".", fields, paths);
      continue;
    }
    fields->push_back(f);
    paths->push_back(path);
  }
}

std::vector<std::string> message_fields() {
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  std::vector<std::string> paths;
  walk(v1::PipelineConfig::descriptor(), "", &fields, &paths);
  return paths;
}

TEST(ConfigKey, EveryFieldIsKeyedOrExcluded) {
  std::set<std::string> keyed, excluded;
  for (const api::KeyedField& f : api::keyed_fields()) keyed.emplace(f.path);
  for (const api::ExcludedField& f : api::excluded_fields()) {
    excluded.emplace(f.path);
    EXPECT_FALSE(f.reason.empty()) << f.path << " is excluded without a reason";
  }
  const std::vector<std::string> fields = message_fields();
  EXPECT_GT(fields.size(), 25u);  // the walk reaches verify's fields
  for (const std::string& path : fields) {
    EXPECT_TRUE(keyed.count(path) || excluded.count(path))
        << "graft.v1.PipelineConfig." << path
        << " is neither keyed nor excluded: add it to key_parts() in proto/config_key.cc (with "
           "when it changes the result), or to excluded_fields() with the reason";
    EXPECT_FALSE(keyed.count(path) && excluded.count(path)) << path << " is keyed and excluded";
  }
  // No entry names a field the message does not have (a renamed or removed one).
  const std::set<std::string> real(fields.begin(), fields.end());
  for (const std::string& path : keyed)
    EXPECT_TRUE(real.count(path)) << "keyed field " << path << " is not in the message";
  for (const std::string& path : excluded)
    EXPECT_TRUE(real.count(path)) << "excluded field " << path << " is not in the message";
}

// A config in which a field read under `scope` matters: verification on for kVerifying and
// kVerifyingRandom, a lossy pass in the list for kLossy.
v1::PipelineConfig context(api::KeyScope scope) {
  v1::PipelineConfig c;
  switch (scope) {
    case api::KeyScope::kAlways:
      break;
    case api::KeyScope::kVerifying:
    case api::KeyScope::kVerifyingRandom:
      c.mutable_verify()->set_enabled(true);
      break;
    case api::KeyScope::kLossy:
      c.add_passes("eliminate_identity");
      c.add_passes("convert_fp16");
      break;
  }
  return c;
}

// A valid value other than the default for each field, set on `c`.
const std::map<std::string, std::function<void(v1::PipelineConfig&)>>& samples() {
  using C = v1::PipelineConfig;
  static const std::map<std::string, std::function<void(C&)>> table = {
      {"level", [](C& c) { c.set_level("O1"); }},
      {"passes", [](C& c) { c.add_passes("cse"); }},
      {"pass_options",
       [](C& c) {
         (*(*c.mutable_pass_options())["fold_constants"].mutable_values())["max_growth"] = "2";
       }},
      {"max_rounds", [](C& c) { c.set_max_rounds(3); }},
      {"onnx_checker", [](C& c) { c.set_onnx_checker(true); }},
      {"shape_inference", [](C& c) { c.set_shape_inference(true); }},
      {"verify.enabled", [](C& c) { c.mutable_verify()->set_enabled(true); }},
      {"verify.dims", [](C& c) { (*c.mutable_verify()->mutable_dims())["batch"] = 4; }},
      {"verify.default_dim", [](C& c) { c.mutable_verify()->set_default_dim(16); }},
      {"verify.shapes", [](C& c) { (*c.mutable_verify()->mutable_shapes())["x"].add_dims(2); }},
      {"verify.values", [](C& c) { (*c.mutable_verify()->mutable_values())["k"] = 1.5; }},
      {"verify.ranges",
       [](C& c) {
         auto& r = (*c.mutable_verify()->mutable_ranges())["x"];
         r.set_low(-0.5);
         r.set_high(0.5);
       }},
      {"verify.seed", [](C& c) { c.mutable_verify()->set_seed(7); }},
      {"verify.trials", [](C& c) { c.mutable_verify()->set_trials(3); }},
      {"verify.rtol", [](C& c) { c.mutable_verify()->set_rtol(0.01); }},
      {"verify.atol", [](C& c) { c.mutable_verify()->set_atol(0.01); }},
      {"verify.input_sets",
       [](C& c) {
         (*c.mutable_verify()->add_input_sets()->mutable_tensors())["x"] = tensor_bytes("x", 1);
       }},
      {"max_error", [](C& c) { c.set_max_error(0.25); }},
      {"min_cosine", [](C& c) { c.set_min_cosine(0.5); }},
      {"accept_unmeasured_error", [](C& c) { c.set_accept_unmeasured_error(true); }},
      {"calibration_sets",
       [](C& c) { (*c.add_calibration_sets()->mutable_tensors())["x"] = tensor_bytes("x", 2); }},
      {"memory_dims", [](C& c) { (*c.mutable_memory_dims())["seq"] = 128; }},
      {"memory_default_dim", [](C& c) { c.set_memory_default_dim(2); }},
      {"explain", [](C& c) { c.add_explain("eliminate_noop"); }},
      {"target", [](C& c) { c.set_target("onnxruntime"); }},
      {"target_opset", [](C& c) { c.set_target_opset(17); }},
      {"fix_dims", [](C& c) { (*c.mutable_fix_dims())["batch"] = 1; }},
      {"fix_shapes", [](C& c) { (*c.mutable_fix_shapes())["x"].add_dims(3); }},
      {"io_layout", [](C& c) { (*c.mutable_io_layout())["x"] = "NHWC"; }},
      {"layout_sensitive_ops", [](C& c) { c.set_layout_sensitive_ops(true); }},
      {"output_gates",
       [](C& c) {
         auto* g = c.add_output_gates();
         g->set_output("y");
         g->set_kind("top1");
       }},
  };
  return table;
}

// A field's sample: the one above, else, for a plain option, one its spec allows (true, the
// number 1 or its nearest bound, "x"); empty when there is none.
std::function<void(v1::PipelineConfig&)> sample(const std::string& path) {
  if (auto it = samples().find(path); it != samples().end()) return it->second;
  for (const auto& [f, spec] : api::plain_fields()) {
    if (f->name() != path) continue;
    double number = 1;
    if (spec->has_min() && number < spec->min()) number = spec->min();
    if (spec->has_max() && number > spec->max()) number = spec->max();
    return [f = f, number](v1::PipelineConfig& c) {
      using FD = google::protobuf::FieldDescriptor;
      const auto* r = c.GetReflection();
      switch (f->cpp_type()) {
        case FD::CPPTYPE_BOOL:
          return r->SetBool(&c, f, true);
        case FD::CPPTYPE_INT32:
          return r->SetInt32(&c, f, static_cast<int32_t>(number));
        case FD::CPPTYPE_INT64:
          return r->SetInt64(&c, f, static_cast<int64_t>(number));
        case FD::CPPTYPE_UINT32:
          return r->SetUInt32(&c, f, static_cast<uint32_t>(number));
        case FD::CPPTYPE_UINT64:
          return r->SetUInt64(&c, f, static_cast<uint64_t>(number));
        case FD::CPPTYPE_DOUBLE:
          return r->SetDouble(&c, f, number);
        default:
          return r->SetString(&c, f, "x");
      }
    };
  }
  return nullptr;
}

// The derivation can fail: each keyed field, set on its own to a value other than its default
// where it matters, gives a key other than the config without it.
TEST(ConfigKey, EachKeyedFieldChangesTheKey) {
  for (const api::KeyedField& f : api::keyed_fields()) {
    const std::string path(f.path);
    const auto set = sample(path);
    ASSERT_TRUE(set != nullptr) << "no sample value for " << path
                                << ": add one to samples() in this test";
    const v1::PipelineConfig base = context(f.scope);
    v1::PipelineConfig changed = base;
    set(changed);
    ASSERT_NE(changed.SerializeAsString(), base.SerializeAsString()) << path;
    auto before = key_of(base);
    auto after = key_of(changed);
    ASSERT_TRUE(before.ok()) << path << ": " << before.status();
    ASSERT_TRUE(after.ok()) << path << ": " << after.status();
    EXPECT_NE(*before, *after) << path << " (keyed " << api::scope_name(f.scope)
                               << ") does not change the key:\n"
                               << *after;
  }
}

// Outside its scope a field does not split the cache: the same run gets the same key.
TEST(ConfigKey, FieldsOutsideTheirScopeLeaveTheKeyAlone) {
  auto same = [](const std::string& path, const v1::PipelineConfig& base) {
    v1::PipelineConfig changed = base;
    sample(path)(changed);
    auto a = key_of(base);
    auto b = key_of(changed);
    ASSERT_TRUE(a.ok() && b.ok()) << path;
    EXPECT_EQ(*a, *b) << path;
  };
  // No lossy pass: the gates, calibration and accept_unmeasured_error mean nothing.
  for (const char* path :
       {"max_error", "min_cosine", "accept_unmeasured_error", "calibration_sets", "output_gates"})
    same(path, v1::PipelineConfig{});
  // No verification: its tolerances and random-input settings mean nothing.
  for (const char* path : {"verify.seed", "verify.trials", "verify.rtol", "verify.atol",
                           "verify.shapes", "verify.values", "verify.ranges"})
    same(path, v1::PipelineConfig{});
  // Given inputs replace the random ones: their settings mean nothing then.
  v1::PipelineConfig given;
  samples().at("verify.input_sets")(given);
  for (const char* path :
       {"verify.seed", "verify.trials", "verify.shapes", "verify.values", "verify.ranges"})
    same(path, given);
}

// The plain options (graft.proto's fields with a (graft.v1.field) spec) travel as they are:
// each, set to its sample, comes back from the core config unchanged (the generated members and
// copies cover every one), and a request that leaves it unset keeps the core's default.
TEST(PlainFields, EachTravelsToTheCoreConfigAndBack) {
  ASSERT_FALSE(api::plain_fields().empty());
  for (const auto& [f, spec] : api::plain_fields()) {
    v1::PipelineConfig request;
    if (f->name() == "max_error" || f->name() == "min_cosine" ||
        f->name() == "accept_unmeasured_error")
      request.add_passes("convert_fp16");  // a lossy pass, for the gates to mean something
    const v1::PipelineConfig unset = request;
    sample(f->name())(request);
    auto config = api::from_proto(request);
    ASSERT_TRUE(config.ok()) << f->name() << ": " << config.status();
    const v1::PipelineConfig back = api::to_proto(*config);
    const auto* r = back.GetReflection();
    EXPECT_TRUE(r->HasField(back, f)) << f->name() << " is lost on the way";
    std::string want, got;
    google::protobuf::TextFormat::PrintFieldValueToString(request, f, -1, &want);
    google::protobuf::TextFormat::PrintFieldValueToString(back, f, -1, &got);
    EXPECT_EQ(got, want) << f->name();
    auto plain = api::from_proto(unset);
    ASSERT_TRUE(plain.ok());
    EXPECT_FALSE(r->HasField(api::to_proto(*plain), f)) << f->name() << " is set by default";
  }
}

// Each spec's bounds are graftd's too: a value past one is INVALID_ARGUMENT naming the field,
// whichever client sent it.
TEST(PlainFields, BoundsAreCheckedByName) {
  using FD = google::protobuf::FieldDescriptor;
  int checked = 0;
  for (const auto& [f, spec] : api::plain_fields()) {
    for (int side = 0; side < 2; ++side) {
      const bool below = side == 0;
      if (below ? !spec->has_min() : !spec->has_max()) continue;
      const double bound = below ? spec->min() : spec->max();
      v1::PipelineConfig request;
      const auto* r = request.GetReflection();
      switch (f->cpp_type()) {
        case FD::CPPTYPE_DOUBLE:
          r->SetDouble(&request, f, below ? bound - 1 : std::nextafter(bound, INFINITY) * 2);
          break;
        case FD::CPPTYPE_INT32:
          if (below ? bound <= INT32_MIN : bound >= INT32_MAX) continue;
          r->SetInt32(&request, f, static_cast<int32_t>(below ? bound - 1 : bound + 1));
          break;
        case FD::CPPTYPE_INT64:
          r->SetInt64(&request, f, static_cast<int64_t>(below ? bound - 1 : bound + 1));
          break;
        default:
          continue;  // unsigned: only an upper bound could be passed, none is declared today
      }
      auto config = api::from_proto(request);
      ASSERT_FALSE(config.ok()) << f->name() << (below ? " below " : " above ") << bound;
      EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(config.status().message().find(f->name()), std::string::npos) << config.status();
      ++checked;
    }
  }
  EXPECT_GE(checked, 4);  // max_error and min_cosine's bounds, target_opset's minimum
}

// NaN passes no bound: a plain number that is not finite is refused by name.
TEST(PlainFields, NotANumberIsRefused) {
  v1::PipelineConfig request;
  request.set_min_cosine(std::nan(""));
  auto config = api::from_proto(request);
  ASSERT_FALSE(config.ok());
  EXPECT_NE(config.status().message().find("min_cosine"), std::string::npos) << config.status();
}

}  // namespace
}  // namespace graft::testing
