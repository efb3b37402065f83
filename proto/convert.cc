#include "proto/convert.h"

#include <algorithm>

#include <cmath>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "core/base/status.h"
#include "core/cache/digest.h"
#include "core/passes/registry.h"

namespace graft::api {

namespace {

uint64_t payload_bytes(const eval::Tensor& t) {
  uint64_t total = t.bytes();
  for (const auto& str : t.strings()) total += str.size();
  return total;
}

// Input sets from the wire (VerifyConfig.input_sets, PipelineConfig.calibration_sets) into
// `out`, checked for what needs no model: at most 16 sets, none empty, names, tensors that
// parse inline, `total` payload bytes (shared by both lists) within kMaxInputSetBytes. Errors
// name "<what> input set N" / "<what> set N" and the input.
absl::Status parse_input_sets(const google::protobuf::RepeatedPtrField<v1::InputSet>& sets,
                              const std::string& what, uint64_t max_tensor_bytes, uint64_t& total,
                              std::vector<std::map<std::string, eval::Tensor>>& out) {
  if (sets.size() > eval::kMaxInputSets)
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": at most ", eval::kMaxInputSets, " input sets, got ", sets.size()));
  const std::string label = eval::input_set_label(what);
  for (int s = 0; s < sets.size(); ++s) {
    auto& set = out.emplace_back();
    // A map's order on the wire is unspecified: sorted, so the first error is the same one.
    std::map<std::string, const std::string*> sorted;
    for (const auto& [name, bytes] : sets[s].tensors()) sorted.emplace(name, &bytes);
    if (sorted.empty())
      return absl::InvalidArgumentError(absl::StrCat(label, " ", s + 1, " is empty"));
    for (const auto& [name, bytes] : sorted) {
      const std::string where = absl::StrCat(label, " ", s + 1, ", input '", name.substr(0, 200),
                                             name.size() > 200 ? "...'" : "'", ": ");
      if (name.empty())
        return absl::InvalidArgumentError(
            absl::StrCat(label, " ", s + 1, ": a tensor has an empty input name"));
      auto t = eval::parse_input_tensor(*bytes, max_tensor_bytes);
      if (!t.ok()) return absl::InvalidArgumentError(where + std::string(t.status().message()));
      total += payload_bytes(*t);
      set.emplace(name, std::move(*t));
      if (total > kMaxInputSetBytes)
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": the input sets' data exceeds ", kMaxInputSetBytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

const std::vector<PlainField>& plain_fields() {
  static const std::vector<PlainField> fields = [] {
    std::vector<PlainField> out;
    const auto* message = v1::PipelineConfig::descriptor();
    for (int i = 0; i < message->field_count(); ++i) {
      const google::protobuf::FieldDescriptor* f = message->field(i);
      if (f->options().HasExtension(v1::field))
        out.push_back({f, &f->options().GetExtension(v1::field)});
    }
    return out;
  }();
  return fields;
}

std::string bound_text(double bound) {
  if (std::nearbyint(bound) == bound && std::fabs(bound) < 0x1p63)
    return absl::StrCat(static_cast<int64_t>(bound));
  return absl::StrCat(bound);
}

absl::Status check_plain_fields(const v1::PipelineConfig& config) {
  using google::protobuf::FieldDescriptor;
  const auto* reflection = config.GetReflection();
  for (const auto& [f, spec] : plain_fields()) {
    if (f->has_presence() && !reflection->HasField(config, f)) continue;
    double value = 0;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        value = reflection->GetInt32(config, f);
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        value = static_cast<double>(reflection->GetInt64(config, f));
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        value = reflection->GetUInt32(config, f);
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        value = static_cast<double>(reflection->GetUInt64(config, f));
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        value = reflection->GetDouble(config, f);
        if (!std::isfinite(value))
          return absl::InvalidArgumentError(
              absl::StrCat(f->name(), " must be a finite number, got ", value));
        break;
      default:
        continue;  // bools and strings have no bounds
    }
    if ((spec->has_min() && value < spec->min()) || (spec->has_max() && value > spec->max()))
      return absl::InvalidArgumentError(absl::StrCat(
          f->name(), " must be in [", spec->has_min() ? bound_text(spec->min()) : "-inf", ", ",
          spec->has_max() ? bound_text(spec->max()) : "inf", "], got ", bound_text(value)));
  }
  return absl::OkStatus();
}

void copy_plain_fields(const v1::PipelineConfig& from, PipelineConfig* to) {
#define GRAFT_PLAIN_FIELD(type, name) to->name = from.name();
#define GRAFT_PLAIN_OPTIONAL(type, name) \
  if (from.has_##name()) to->name = from.name();
#include "core/pipeline/plain_fields.inc"
#undef GRAFT_PLAIN_FIELD
#undef GRAFT_PLAIN_OPTIONAL
}

void copy_plain_fields(const PipelineConfig& from, v1::PipelineConfig* to) {
#define GRAFT_PLAIN_FIELD(type, name) to->set_##name(from.name);
#define GRAFT_PLAIN_OPTIONAL(type, name) \
  if (from.name) to->set_##name(*from.name);
#include "core/pipeline/plain_fields.inc"
#undef GRAFT_PLAIN_FIELD
#undef GRAFT_PLAIN_OPTIONAL
}

absl::Status check_limits(const PipelineConfig& config) {
  if (config.passes.size() > kMaxPassList)
    return absl::InvalidArgumentError(absl::StrCat(
        "at most ", kMaxPassList, " passes may be listed, got ", config.passes.size()));
  // A value also fills integer inputs (cast to int64), so it must be finite and in range.
  constexpr double kMaxValue = 9223372036854775807.0;  // rounds to 2^63, itself out of range
  for (const auto& [name, value] : config.verify_options.values)
    if (!(std::fabs(value) < kMaxValue))
      return absl::InvalidArgumentError(
          absl::StrCat("verify: the value of '", name.substr(0, 200),
                       "' must be a finite number of magnitude below 2^63, got ", value));
  return absl::OkStatus();
}

absl::StatusOr<PipelineConfig> from_proto(const v1::PipelineConfig& config) {
  PipelineConfig out;
  const std::string& level = config.level();
  if (level.empty()) {
    out.level = 2;
  } else if (level.size() == 2 && (level[0] == 'O' || level[0] == 'o') && level[1] >= '0' &&
             level[1] <= '0' + kMaxLevel) {
    out.level = level[1] - '0';
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("level must be O0..O", kMaxLevel, ", got '", level, "'"));
  }
  ASSIGN_OR_RETURN(out.target, parse_target(config.target()));
  out.passes.assign(config.passes().begin(), config.passes().end());
  for (const auto& [pass, options] : config.pass_options())
    for (const auto& [key, value] : options.values()) out.pass_options[pass][key] = value;
  out.explain.assign(config.explain().begin(), config.explain().end());
  out.max_rounds = config.max_rounds() == 0 ? 10 : config.max_rounds();
  out.onnx_checker = config.onnx_checker();
  out.shape_inference = config.shape_inference();
  const v1::VerifyConfig& v = config.verify();
  out.verify = v.enabled();
  eval::VerifyOptions& o = out.verify_options;
  o.dims.insert(v.dims().begin(), v.dims().end());
  if (v.default_dim() != 0) o.default_dim = v.default_dim();
  for (const auto& [name, shape] : v.shapes())
    o.shapes[name].assign(shape.dims().begin(), shape.dims().end());
  o.values.insert(v.values().begin(), v.values().end());
  for (const auto& [name, range] : v.ranges()) o.ranges[name] = {range.low(), range.high()};
  if (v.seed() != 0) o.seed = v.seed();
  if (v.trials() != 0) o.trials = v.trials();
  if (v.has_rtol()) o.rtol = v.rtol();
  if (v.has_atol()) o.atol = v.atol();
  uint64_t input_bytes = 0;
  RETURN_IF_ERROR(
      parse_input_sets(v.input_sets(), "verify", o.max_tensor_bytes, input_bytes, o.input_sets));
  RETURN_IF_ERROR(parse_input_sets(config.calibration_sets(), "calibration", o.max_tensor_bytes,
                                   input_bytes, out.calibration_sets));
  if (!o.input_sets.empty()) {
    out.verify = true;  // given inputs are only for verification
    o.trials = static_cast<int>(o.input_sets.size());
  }
  copy_plain_fields(config, &out);
  for (const auto& [name, size] : config.memory_dims()) {
    if (size < 0)
      return absl::InvalidArgumentError(absl::StrCat(
          "memory_dims: the size of '", name.substr(0, 200), "' must be >= 0, got ", size));
    out.memory_dims[name] = size;
  }
  if (config.memory_default_dim() < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("memory_default_dim must be >= 0, got ", config.memory_default_dim()));
  out.memory_default_dim = config.memory_default_dim();
  // Sizes and counts are checked with the rest of the config by resolve_passes below
  // (check_fix_config); the map's size is bounded by the message's.
  out.fix_dims.insert(config.fix_dims().begin(), config.fix_dims().end());
  for (const auto& [name, shape] : config.fix_shapes())
    out.fix_shapes[name].assign(shape.dims().begin(), shape.dims().end());
  out.io_layout.insert(config.io_layout().begin(), config.io_layout().end());
  if (config.output_gates_size() > kMaxOutputGates)
    return absl::InvalidArgumentError(absl::StrCat(
        "at most ", kMaxOutputGates, " output_gates, got ", config.output_gates_size()));
  for (const auto& g : config.output_gates()) {
    eval::OutputGateSpec spec{.output = g.output(), .kind = g.kind(), .threshold = std::nullopt};
    if (g.has_threshold()) spec.threshold = g.threshold();
    RETURN_IF_ERROR(eval::check_output_gate(spec));
    out.output_gates.push_back(std::move(spec));
  }
  RETURN_IF_ERROR(check_limits(out));
  RETURN_IF_ERROR(eval::validate(o));
  RETURN_IF_ERROR(resolve_passes(out));
  RETURN_IF_ERROR(check_plain_fields(config));
  return out;
}

v1::PipelineConfig to_proto(const PipelineConfig& config) {
  v1::PipelineConfig out;
  out.set_level(absl::StrCat("O", config.level));
  if (config.target.onnxruntime()) out.set_target(config.target.str());
  for (const auto& p : config.passes) out.add_passes(p);
  for (const auto& [pass, options] : config.pass_options) {
    auto& values = *(*out.mutable_pass_options())[pass].mutable_values();
    for (const auto& [key, value] : options) values[key] = value;
  }
  out.set_max_rounds(config.max_rounds);
  out.set_onnx_checker(config.onnx_checker);
  out.set_shape_inference(config.shape_inference);
  v1::VerifyConfig& v = *out.mutable_verify();
  const eval::VerifyOptions& o = config.verify_options;
  v.set_enabled(config.verify);
  v.mutable_dims()->insert(o.dims.begin(), o.dims.end());
  v.set_default_dim(o.default_dim);
  for (const auto& [name, shape] : o.shapes)
    (*v.mutable_shapes())[name].mutable_dims()->Add(shape.begin(), shape.end());
  v.mutable_values()->insert(o.values.begin(), o.values.end());
  for (const auto& [name, range] : o.ranges) {
    v1::ValueRange& r = (*v.mutable_ranges())[name];
    r.set_low(range.first);
    r.set_high(range.second);
  }
  v.set_seed(o.seed);
  v.set_trials(o.trials);
  v.set_rtol(o.rtol);
  v.set_atol(o.atol);
  for (const auto& set : o.input_sets) {
    auto& tensors = *v.add_input_sets()->mutable_tensors();
    for (const auto& [name, tensor] : set)
      tensors[name] = tensor.to_proto(name).SerializeAsString();
  }
  for (const auto& set : config.calibration_sets) {
    auto& tensors = *out.add_calibration_sets()->mutable_tensors();
    for (const auto& [name, tensor] : set)
      tensors[name] = tensor.to_proto(name).SerializeAsString();
  }
  copy_plain_fields(config, &out);
  out.mutable_memory_dims()->insert(config.memory_dims.begin(), config.memory_dims.end());
  out.set_memory_default_dim(config.memory_default_dim);
  for (const auto& e : config.explain) out.add_explain(e);
  for (const auto& g : config.output_gates) {
    v1::OutputGate& to = *out.add_output_gates();
    to.set_output(g.output);
    to.set_kind(g.kind);
    if (g.threshold) to.set_threshold(*g.threshold);
  }
  out.mutable_fix_dims()->insert(config.fix_dims.begin(), config.fix_dims.end());
  for (const auto& [name, shape] : config.fix_shapes)
    (*out.mutable_fix_shapes())[name].mutable_dims()->Add(shape.begin(), shape.end());
  out.mutable_io_layout()->insert(config.io_layout.begin(), config.io_layout.end());
  return out;
}

void fill_pass_info(const PassInfo& info, v1::PassInfo* out) {
  out->set_name(info.name);
  out->set_description(info.description);
  out->set_level(info.level);
  out->set_lossy(info.lossy);
  out->set_by_name_only(info.by_name_only);
  if (info.lossy) {
    out->set_gate_max_rel(info.gate.max_rel);
    out->set_gate_min_cosine(info.gate.min_cosine);
  }
  for (const auto& o : info.options) {
    auto* opt = out->add_options();
    opt->set_name(o.name);
    opt->set_default_value(format_value(o.default_value));
    opt->set_description(o.help);
    switch (o.type) {
      case OptionType::kInteger:
        opt->set_type(v1::PassOption::INTEGER);
        break;
      case OptionType::kBytes:
        opt->set_type(v1::PassOption::BYTES);
        break;
      case OptionType::kBoolean:
        opt->set_type(v1::PassOption::BOOLEAN);
        break;
      case OptionType::kEnum:
        opt->set_type(v1::PassOption::ENUM);
        break;
      case OptionType::kList:
        opt->set_type(v1::PassOption::LIST);
        break;
    }
    if (o.type == OptionType::kInteger || o.type == OptionType::kBytes) {
      opt->set_min(o.min);
      opt->set_max(o.max);
    }
    for (const auto& c : o.choices) opt->add_choices(c);
  }
}

PassInfo from_proto(const v1::PassInfo& info) {
  PassInfo out{.name = info.name(),
               .level = info.level(),
               .lossy = info.lossy(),
               .gate = {.max_rel = info.gate_max_rel(), .min_cosine = info.gate_min_cosine()},
               .by_name_only = info.by_name_only(),
               .description = info.description(),
               .options = {},
               .create = nullptr};
  for (const auto& o : info.options()) {
    OptionSpec spec;
    spec.name = o.name();
    spec.help = o.description();
    switch (o.type()) {
      case v1::PassOption::BYTES:
        spec.type = OptionType::kBytes;
        break;
      case v1::PassOption::BOOLEAN:
        spec.type = OptionType::kBoolean;
        break;
      case v1::PassOption::ENUM:
        spec.type = OptionType::kEnum;
        break;
      case v1::PassOption::LIST:
        spec.type = OptionType::kList;
        break;
      default:  // INTEGER, or a server that does not say: shown as an integer, unbounded
        spec.type = OptionType::kInteger;
        break;
    }
    if (o.type() == v1::PassOption::INTEGER || o.type() == v1::PassOption::BYTES) {
      spec.min = o.min();
      spec.max = o.max();
    }
    spec.choices.assign(o.choices().begin(), o.choices().end());
    // The server's canonical text: parsing it gives the typed default; a value this client
    // cannot parse is kept as text, for display.
    auto value = parse_option(info.name(), spec, o.default_value());
    spec.default_value = value.ok() ? *value : OptionValue(o.default_value());
    out.options.push_back(std::move(spec));
  }
  return out;
}

namespace {

void fill_memory(const MemoryStats& m, v1::MemoryStats* out) {
  out->set_weight_bytes(m.weight_bytes);
  out->set_peak_activation_bytes(m.peak_activation_bytes);
  out->set_peak_node(m.peak_node_name);
  out->set_largest_tensor(m.largest_tensor);
  out->set_largest_tensor_bytes(m.largest_tensor_bytes);
  out->set_unknown_size_values(m.unknown_size_values);
}

MemoryStats memory_from(const v1::MemoryStats& m) {
  MemoryStats out;
  out.weight_bytes = m.weight_bytes();
  out.peak_activation_bytes = m.peak_activation_bytes();
  out.peak_node_name = m.peak_node();
  out.largest_tensor = m.largest_tensor();
  out.largest_tensor_bytes = m.largest_tensor_bytes();
  out.unknown_size_values = m.unknown_size_values();
  return out;
}

void fill_error(const eval::OutputError& e, v1::OutputError* out) {
  out->set_name(e.name);
  out->set_max_abs(e.max_abs);
  out->set_rel(e.rel);
  out->set_cosine(e.cosine);
}

void fill_task(const eval::TaskResult& t, v1::TaskCheck* out) {
  out->set_output(t.output);
  out->set_kind(eval::task_kind_name(t.kind));
  out->set_threshold(t.threshold);
  out->set_figure(t.figure);
  out->set_judged(t.judged);
  out->set_passed(t.passed);
  out->set_detail(t.detail);
  out->set_origin(t.origin);
  for (const auto& [name, value] : t.figures) (*out->mutable_figures())[name] = value;
  for (const auto& name : t.replaces_value_gate) out->add_replaces_value_gate(name);
}

void fill_note(const eval::InputNote& n, v1::InputNote* out) {
  out->set_name(n.name);
  out->mutable_dims()->Add(n.dims.begin(), n.dims.end());
  out->set_how(n.how);
}

eval::InputNote note_from(const v1::InputNote& n) {
  return {n.name(), std::vector<int64_t>(n.dims().begin(), n.dims().end()), n.how()};
}

eval::TaskResult task_from(const v1::TaskCheck& t) {
  eval::TaskResult r;
  r.output = t.output();
  r.kind = eval::task_kind_from_name(t.kind()).value_or(eval::TaskKind::kValues);
  r.threshold = t.threshold();
  r.figure = t.figure();
  r.judged = t.judged();
  r.passed = t.passed();
  r.detail = t.detail();
  r.origin = t.origin();
  // Sorted by name (a proto map has no order).
  std::map<std::string, double> figures(t.figures().begin(), t.figures().end());
  r.figures.assign(figures.begin(), figures.end());
  r.replaces_value_gate.assign(t.replaces_value_gate().begin(), t.replaces_value_gate().end());
  return r;
}

eval::OutputError error_from(const v1::OutputError& e) {
  return {e.name(), e.max_abs(), e.rel(), e.cosine()};
}

}  // namespace

std::string input_sets_digest(const std::vector<std::map<std::string, eval::Tensor>>& sets) {
  if (sets.empty()) return "";
  cache::Sha256 digest;
  // Lengths prefix every variable part, so no content can imitate a boundary.
  auto add = [&](std::string_view bytes) {
    const std::string size = absl::StrCat(bytes.size(), ":");
    digest.update(size);
    digest.update(bytes);
  };
  add("graft-input-sets-v1");
  for (const auto& set : sets) {
    add(absl::StrCat("set ", set.size()));
    for (const auto& [name, t] : set) {
      add(name);
      add(absl::StrCat(t.dtype(), " [", absl::StrJoin(t.dims(), ","), "]"));
      if (t.dtype() == onnx::TensorProto::STRING) {
        for (const auto& str : t.strings()) add(str);
      } else {
        add(std::string_view(t.data<char>(), t.bytes()));
      }
    }
  }
  return digest.hex_digest();
}

uint64_t input_sets_bytes(const std::vector<std::map<std::string, eval::Tensor>>& sets) {
  uint64_t total = 0;
  for (const auto& set : sets)
    for (const auto& [name, t] : set) total += payload_bytes(t);
  return total;
}

void fill_report(const PipelineReport& r, v1::OptimizeReport* out) {
  for (const auto& p : r.passes) {
    auto* s = out->add_passes();
    s->set_name(p.name);
    s->set_runs(p.runs);
    s->set_changed_runs(p.changed_runs);
    s->set_seconds(p.seconds);
    s->set_nodes_before(p.nodes_before);
    s->set_nodes_after(p.nodes_after);
    s->set_initializer_bytes_before(p.bytes_before);
    s->set_initializer_bytes_after(p.bytes_after);
    s->set_rewrites(p.rewrites);
    s->set_rollbacks(p.rollbacks);
    s->set_rollback_reason(p.rollback_reason);
    for (const auto& [rule, count] : p.rules) (*s->mutable_rule_rewrites())[rule] = count;
    s->set_peak_activation_bytes_before(p.peak_before);
    s->set_peak_activation_bytes_after(p.peak_after);
    s->set_capped_runs(p.capped_runs);
    for (const auto& e : p.explanations) {
      auto* x = s->add_explanations();
      x->set_rule(e.rule);
      x->set_node(e.node);
      x->set_op(e.op);
      x->set_graph(e.graph);
      x->set_reason(e.reason);
    }
    s->set_explanations_dropped(p.explanations_dropped);
    s->set_error_verdict(p.error_verdict);
    s->set_calibration(p.calibration);
  }
  out->set_rounds(r.rounds);
  out->set_reached_fixed_point(r.reached_fixed_point);
  out->set_nodes_before(r.nodes_before);
  out->set_nodes_after(r.nodes_after);
  out->set_initializer_bytes_before(r.bytes_before);
  out->set_initializer_bytes_after(r.bytes_after);
  out->set_checker_note(r.checker_note);
  out->set_value_info_refined(r.value_info_refined);
  out->set_target(r.target);
  out->set_pipeline_seconds(r.seconds);
  fill_memory(r.memory_before, out->mutable_memory_before());
  fill_memory(r.memory_after, out->mutable_memory_after());
  out->mutable_memory_dims()->insert(r.memory_dims.begin(), r.memory_dims.end());
  out->set_memory_default_dim(r.memory_default_dim);
  for (const auto& line : r.fixed_inputs) out->add_fixed_inputs(line);
  for (const auto& line : r.layout_changes) out->add_layout_changes(line);
  out->set_transposes_before(r.transposes_before);
  out->set_transposes_after(r.transposes_after);
  const VerificationReport& v = r.verification;
  if (v.requested) {
    auto* o = out->mutable_verification();
    switch (v.result.status) {
      case eval::VerifyStatus::kVerified:
        o->set_status(v1::Verification::VERIFIED);
        break;
      case eval::VerifyStatus::kNotVerifiable:
        o->set_status(v1::Verification::NOT_VERIFIABLE);
        break;
      case eval::VerifyStatus::kMismatch:
        o->set_status(v1::Verification::MISMATCH);
        break;
    }
    o->set_message(v.result.message);
    o->set_unsupported_op(v.result.unsupported_op);
    o->set_max_abs_diff(v.result.max_abs_diff);
    o->set_max_rel_diff(v.result.max_rel_diff);
    o->set_worst_output(v.result.worst_output);
    for (const auto& p : v.rolled_back) o->add_rolled_back(p);
    o->set_seconds(v.seconds);
    for (const auto& p : v.lossy_passes) o->add_lossy_passes(p);
    if (v.max_error) o->set_max_error(*v.max_error);
    for (const auto& e : v.errors) fill_error(e, o->add_errors());
    for (const auto& t : v.lossy_trials) {
      auto* ot = o->add_lossy_trials();
      ot->set_pass(t.pass);
      ot->set_kept(t.kept);
      ot->set_measured(t.measured);
      ot->set_gate_max_rel(t.gate.max_rel);
      ot->set_gate_min_cosine(t.gate.min_cosine);
      for (const auto& e : t.errors) fill_error(e, ot->add_errors());
      ot->set_verdict(t.verdict);
      for (const auto& task : t.tasks) fill_task(task, ot->add_tasks());
    }
    for (const auto& n : v.inputs) fill_note(n, o->add_inputs());
    for (const auto& n : v.lossy_inputs) fill_note(n, o->add_lossy_inputs());
  }
}

PipelineReport to_pipeline_report(const v1::OptimizeReport& in) {
  PipelineReport r;
  for (const auto& s : in.passes()) {
    PassStats p;
    p.name = s.name();
    p.runs = s.runs();
    p.changed_runs = s.changed_runs();
    p.seconds = s.seconds();
    p.nodes_before = s.nodes_before();
    p.nodes_after = s.nodes_after();
    p.bytes_before = s.initializer_bytes_before();
    p.bytes_after = s.initializer_bytes_after();
    p.rewrites = s.rewrites();
    p.rollbacks = s.rollbacks();
    p.rollback_reason = s.rollback_reason();
    for (const auto& [rule, count] : s.rule_rewrites()) p.rules[rule] = count;
    p.peak_before = s.peak_activation_bytes_before();
    p.peak_after = s.peak_activation_bytes_after();
    p.capped_runs = s.capped_runs();
    for (const auto& x : s.explanations())
      p.explanations.push_back({x.rule(), x.node(), x.op(), x.graph(), x.reason()});
    p.explanations_dropped = s.explanations_dropped();
    p.error_verdict = s.error_verdict();
    p.calibration = s.calibration();
    r.passes.push_back(std::move(p));
  }
  r.rounds = in.rounds();
  r.reached_fixed_point = in.reached_fixed_point();
  r.nodes_before = in.nodes_before();
  r.nodes_after = in.nodes_after();
  r.bytes_before = in.initializer_bytes_before();
  r.bytes_after = in.initializer_bytes_after();
  r.checker_note = in.checker_note();
  r.value_info_refined = in.value_info_refined();
  r.target = in.target();
  r.seconds = in.pipeline_seconds();
  r.memory_before = memory_from(in.memory_before());
  r.memory_after = memory_from(in.memory_after());
  r.memory_dims.insert(in.memory_dims().begin(), in.memory_dims().end());
  r.memory_default_dim = in.memory_default_dim();
  r.fixed_inputs.assign(in.fixed_inputs().begin(), in.fixed_inputs().end());
  r.layout_changes.assign(in.layout_changes().begin(), in.layout_changes().end());
  r.transposes_before = in.transposes_before();
  r.transposes_after = in.transposes_after();
  const v1::Verification& v = in.verification();
  if (v.status() != v1::Verification::NOT_REQUESTED) {
    VerificationReport& o = r.verification;
    o.requested = true;
    o.result.status = v.status() == v1::Verification::VERIFIED ? eval::VerifyStatus::kVerified
                      : v.status() == v1::Verification::MISMATCH
                          ? eval::VerifyStatus::kMismatch
                          : eval::VerifyStatus::kNotVerifiable;
    o.result.message = v.message();
    o.result.unsupported_op = v.unsupported_op();
    o.result.max_abs_diff = v.max_abs_diff();
    o.result.max_rel_diff = v.max_rel_diff();
    o.result.worst_output = v.worst_output();
    o.rolled_back.assign(v.rolled_back().begin(), v.rolled_back().end());
    o.seconds = v.seconds();
    o.lossy_passes.assign(v.lossy_passes().begin(), v.lossy_passes().end());
    if (v.has_max_error()) o.max_error = v.max_error();
    for (const auto& e : v.errors()) o.errors.push_back(error_from(e));
    o.result.outputs = o.errors;
    for (const auto& t : v.lossy_trials()) {
      LossyTrial trial{.pass = t.pass(),
                       .kept = t.kept(),
                       .measured = t.measured(),
                       .gate = {.max_rel = t.gate_max_rel(), .min_cosine = t.gate_min_cosine()},
                       .errors = {},
                       .verdict = t.verdict()};
      for (const auto& e : t.errors()) trial.errors.push_back(error_from(e));
      for (const auto& task : t.tasks()) trial.tasks.push_back(task_from(task));
      o.lossy_trials.push_back(std::move(trial));
    }
    for (const auto& n : v.inputs()) o.inputs.push_back(note_from(n));
    for (const auto& n : v.lossy_inputs()) o.lossy_inputs.push_back(note_from(n));
  }
  return r;
}

}  // namespace graft::api
