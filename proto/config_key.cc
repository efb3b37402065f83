#include "proto/config_key.h"

#include <algorithm>
#include <charconv>
#include <functional>
#include <optional>

#include <google/protobuf/text_format.h>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "core/base/status.h"
#include "proto/convert.h"

namespace graft::api {

namespace {

// A double as the shortest text that reads back as the same double: two settings that differ
// anywhere give two keys (StrCat keeps 6 digits: 1234567 and 1234568 were one key).
std::string exact(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

// What every part of the key reads: the config and what resolving it gave.
struct KeyContext {
  const PipelineConfig& config;
  const std::vector<PassSpec>& specs;
  bool lossy;  // a lossy pass runs: it always verifies, against its gate
};

// Lengths prefix every field, so no value can imitate a separator.
class KeyText {
 public:
  void field(const std::string& s) { absl::StrAppend(&out_, s.size(), ":", s, ";"); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// One part of the key: the message fields it reads (with when they matter) and what it writes.
struct KeyPart {
  std::vector<KeyedField> fields;
  std::function<void(const KeyContext&, KeyText&)> write;
};

// Every option of every pass that runs, parsed, defaults included: a value given as its default,
// or spelt differently ("1" and "true", "1KiB" and "1024"), means the same run. The level, the
// explicit list and target_opset (convert_opset first) all end up in the resolved list.
void write_passes(const KeyContext& c, KeyText& key) {
  key.field("passes");
  for (const auto& spec : c.specs) {
    key.field(spec.name);
    for (const auto& [name, value] : spec.options.values())
      key.field(absl::StrCat(name, "=", format_value(value)));
  }
}

// Verification can roll passes back, so its settings are part of what the result means; lossy
// passes always verify. Given inputs enter by digest: the random-input settings do not matter
// then. The budgets (max_bytes, max_live, max_work) are the server's, set on the core config.
void write_verify(const KeyContext& c, KeyText& key) {
  if (!c.config.verify && !c.lossy) return;
  const eval::VerifyOptions& o = c.config.verify_options;
  key.field("verify");
  if (!o.input_sets.empty()) {
    key.field(absl::StrCat("inputs=", input_sets_digest(o.input_sets)));
  } else {
    for (const auto& [name, d] : o.dims) key.field(absl::StrCat(name, "=", d));
    key.field(absl::StrCat("default_dim=", o.default_dim));
    for (const auto& [name, shape] : o.shapes)
      key.field(absl::StrCat(name, "=[", absl::StrJoin(shape, ","), "]"));
    for (const auto& [name, value] : o.values) key.field(absl::StrCat(name, "=", exact(value)));
    for (const auto& [name, range] : o.ranges)
      key.field(absl::StrCat(name, " in [", exact(range.first), ",", exact(range.second), "]"));
    key.field(absl::StrCat("seed=", o.seed, ",trials=", o.trials, ",range=", exact(o.float_range),
                           ",int_max=", o.int_max));
  }
  key.field(absl::StrCat("rtol=", exact(o.rtol), ",atol=", exact(o.atol),
                         ",max_bytes=", o.max_tensor_bytes, ",max_live=", o.max_live_bytes,
                         ",max_work=", o.max_work));
}

// Fixed input dims and changed layouts change the model itself.
void write_fixed(const KeyContext& c, KeyText& key) {
  if (!c.config.fix_dims.empty()) {
    key.field("fix_dims");
    for (const auto& [name, size] : c.config.fix_dims) {
      key.field(name);
      key.field(absl::StrCat(size));
    }
  }
  if (!c.config.fix_shapes.empty()) {
    key.field("fix_shapes");
    for (const auto& [name, shape] : c.config.fix_shapes) {
      key.field(name);
      key.field(absl::StrJoin(shape, ","));
    }
  }
  if (!c.config.io_layout.empty()) {
    key.field("io_layout");
    for (const auto& [name, layout] : c.config.io_layout) {
      key.field(name);
      key.field(layout);
    }
  }
}

// Explanations are part of the report a result is cached with; order and repeats do not matter.
void write_explain(const KeyContext& c, KeyText& key) {
  if (c.config.explain.empty()) return;
  std::vector<std::string> explain = c.config.explain;
  std::sort(explain.begin(), explain.end());
  explain.erase(std::unique(explain.begin(), explain.end()), explain.end());
  key.field("explain");
  for (const auto& e : explain) key.field(e);
}

// The report's memory estimates depend on the sizes they use (memory_size_rule: memory_dims,
// else the random inputs' verify.dims; memory_default_dim, else verify.default_dim). The plain
// default (no dim bound, every other dim 1) adds nothing.
void write_memory(const KeyContext& c, KeyText& key) {
  DimBindings dims;
  const SizeRule rule = memory_size_rule(c.config, &dims);
  if (dims.empty() && rule.default_dim == 1) return;
  key.field("memory");
  for (const auto& [name, d] : dims) key.field(absl::StrCat(name, "=", d));
  key.field(absl::StrCat("default_dim=", rule.default_dim));
}

using enum KeyScope;

// A plain option's spec.key as a scope; nullopt for KEY_BY_PART (a part below writes it).
std::optional<KeyScope> spec_scope(const v1::FieldSpec& spec) {
  switch (spec.key()) {
    case v1::KEY_ALWAYS:
      return kAlways;
    case v1::KEY_VERIFYING:
      return kVerifying;
    case v1::KEY_VERIFYING_RANDOM:
      return kVerifyingRandom;
    case v1::KEY_LOSSY:
      return kLossy;
    default:
      return std::nullopt;
  }
}

bool in_scope(KeyScope scope, const KeyContext& c) {
  const bool verifying = c.config.verify || c.lossy;
  switch (scope) {
    case kAlways:
      return true;
    case kVerifying:
      return verifying;
    case kVerifyingRandom:
      return verifying && c.config.verify_options.input_sets.empty();
    case kLossy:
      return c.lossy;
  }
  return true;
}

// Each plain option its spec keys, when its scope applies and it is not zero: a true bool as
// its name, any other value as "name=value". Zero adds nothing, so a new option leaves the keys
// of configs that do not set it as they were.
void write_plain(const KeyContext& c, KeyText& key) {
  v1::PipelineConfig message;
  copy_plain_fields(c.config, &message);
  const auto* reflection = message.GetReflection();
  for (const auto& [f, spec] : plain_fields()) {
    const std::optional<KeyScope> scope = spec_scope(*spec);
    if (!scope || !in_scope(*scope, c) || !reflection->HasField(message, f)) continue;
    if (f->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_BOOL) {
      key.field(f->name());
    } else {
      std::string text;
      google::protobuf::TextFormat::PrintFieldValueToString(message, f, -1, &text);
      key.field(absl::StrCat(f->name(), "=", text));
    }
  }
}

// The key, part by part, in the order the text has always had: a new part goes at the end and
// adds nothing at its fields' defaults, so that existing keys hold.
const std::vector<KeyPart>& key_parts() {
  static const std::vector<KeyPart> parts = {
      {{{"level", kAlways},
        {"passes", kAlways},
        {"pass_options", kAlways},
        {"target_opset", kAlways}},
       write_passes},
      {{{"max_rounds", kAlways}},
       [](const KeyContext& c, KeyText& key) {
         key.field(absl::StrCat("rounds=", c.config.max_rounds));
       }},
      // The default target adds nothing.
      {{{"target", kAlways}},
       [](const KeyContext& c, KeyText& key) {
         if (c.config.target.onnxruntime())
           key.field(absl::StrCat("target=", c.config.target.str()));
       }},
      {{{"onnx_checker", kAlways}, {"shape_inference", kAlways}},
       [](const KeyContext& c, KeyText& key) {
         key.field(
             absl::StrCat("checker=", c.config.onnx_checker, ",shapes=", c.config.shape_inference));
       }},
      // The resolved gates (defaults are part of the build) decide whether a lossy pass stays.
      {{{"max_error", kLossy}, {"min_cosine", kLossy}},
       [](const KeyContext& c, KeyText& key) {
         for (const auto& spec : c.specs)
           if (spec.lossy)
             key.field(absl::StrCat("gate:", spec.name, "=", spec.gate.max_rel, ",",
                                    spec.gate.min_cosine));
       }},
      // The plain options whose spec keys them (FieldSpec.key), in field order: their fields
      // are listed by plain_keyed_fields(), not here.
      {{}, write_plain},
      // Calibration data changes what lossy passes compute (ranges, scales).
      {{{"calibration_sets", kLossy}},
       [](const KeyContext& c, KeyText& key) {
         if (c.lossy && !c.config.calibration_sets.empty())
           key.field(absl::StrCat("calibration=", input_sets_digest(c.config.calibration_sets)));
       }},
      {{{"verify.enabled", kAlways},
        {"verify.input_sets", kAlways},  // given sets turn verification on
        {"verify.dims", kVerifyingRandom},
        {"verify.default_dim", kVerifyingRandom},
        {"verify.shapes", kVerifyingRandom},
        {"verify.values", kVerifyingRandom},
        {"verify.ranges", kVerifyingRandom},
        {"verify.seed", kVerifyingRandom},
        {"verify.trials", kVerifyingRandom},
        {"verify.rtol", kVerifying},
        {"verify.atol", kVerifying}},
       write_verify},
      {{{"fix_dims", kAlways}, {"fix_shapes", kAlways}, {"io_layout", kAlways}}, write_fixed},
      {{{"explain", kAlways}}, write_explain},
      {{{"memory_dims", kAlways},
        {"memory_default_dim", kAlways},
        {"verify.dims", kAlways},
        {"verify.default_dim", kAlways}},
       write_memory},
      // The task gates decide whether a lossy pass stays; in output order, as given (two specs
      // for one output are refused). Names are length-prefixed: any bytes may be in them.
      {{{"output_gates", kLossy}},
       [](const KeyContext& c, KeyText& key) {
         if (!c.lossy) return;
         for (const auto& g : c.config.output_gates)
           key.field(absl::StrCat("gate_output=", g.output.size(), ":", g.output, "=", g.kind,
                                  g.threshold ? absl::StrCat(":", exact(*g.threshold)) : ""));
       }},
  };
  return parts;
}

}  // namespace

std::string_view scope_name(KeyScope scope) {
  switch (scope) {
    case kAlways:
      return "always";
    case kVerifying:
      return "when verifying";
    case kVerifyingRandom:
      return "when verifying on random inputs";
    case kLossy:
      return "when a lossy pass runs";
  }
  return "?";
}

std::vector<KeyedField> keyed_fields() {
  std::vector<KeyedField> out;
  for (const auto& part : key_parts())
    out.insert(out.end(), part.fields.begin(), part.fields.end());
  for (const auto& [f, spec] : plain_fields())
    if (const std::optional<KeyScope> scope = spec_scope(*spec)) out.push_back({f->name(), *scope});
  return out;
}

const std::vector<ExcludedField>& excluded_fields() {
  // Every field of graft.v1.PipelineConfig changes what a request computes or the report cached
  // with its result, so none is excluded today. A field that does neither (a progress or
  // transport setting) belongs here, with its reason, instead of in key_parts().
  static const std::vector<ExcludedField> excluded;
  return excluded;
}

absl::StatusOr<std::string> canonical_config(const PipelineConfig& config) {
  ASSIGN_OR_RETURN(const std::vector<PassSpec> specs, resolve_pipeline(config));
  const bool lossy =
      std::any_of(specs.begin(), specs.end(), [](const PassSpec& s) { return s.lossy; });
  const KeyContext context{config, specs, lossy};
  KeyText key;
  for (const auto& part : key_parts()) part.write(context, key);
  return key.take();
}

}  // namespace graft::api
