#include "client/cli/pipeline_options.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include <absl/strings/ascii.h>
#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>

#include "client/cli/options.h"
#include "client/exit_codes.h"
#include "core/base/status.h"
#include "core/passes/registry.h"
#include "core/passes/target.h"
#include "core/pipeline/fix_dims.h"
#include "proto/convert.h"

namespace graft::cli {
namespace {

// A repeatable option takes one value per occurrence: CLI11 would otherwise let a list option
// swallow the arguments after it (`--option a.b=1 in.onnx` losing the input).
CLI::Option* one_value(CLI::Option* o) { return o->allow_extra_args(false); }

// What runs: --level, --target, --passes, --option, --max-rounds, --check.
void add_pass_selection_options(CLI::App* cmd, PipelineArgs* args) {
  auto* level =
      cmd->add_option("--level", args->level, "optimization level O0..O3")->capture_default_str();
  cmd->add_option("--target", args->target,
                  "the runtime the result is for: onnx (standard ops, any runtime), "
                  "onnxruntime or onnxruntime:MAJOR.MINOR (also ONNX Runtime's com.microsoft "
                  "fused ops that version's CPU provider has; default version 1.18)")
      ->capture_default_str();
  one_value(
      cmd->add_option("--passes", args->passes, "explicit ordered pass list (comma separated)"))
      ->delimiter(',')
      ->excludes(level);
  one_value(cmd->add_option("--option", args->options,
                            "pass option as PASS.OPTION=VALUE (repeatable; `graft passes` "
                            "lists them)"));
  cmd->add_option("--max-rounds", args->max_rounds, "fixed-point rounds at most")
      ->capture_default_str();
  cmd->add_flag("--check", args->check,
                "run the ONNX checker and shape inference after each changing pass (slower)");
}

// --verify and what it takes: random inputs (--verify-dim, ...), tolerances, recorded inputs;
// and --calibration-data, in --verify-data's forms.
void add_verify_options(CLI::App* cmd, PipelineArgs* args) {
  auto* verify = cmd->add_flag(
      "--verify", args->verify,
      "run the original and optimized model on random inputs with the reference evaluator and "
      "compare the outputs; a pass that changes them is rolled back");
  one_value(cmd->add_option(
                "--verify-dim", args->verify_dims,
                "value of a symbolic input dim, NAME=N; *=N for every unnamed or unlisted "
                "one (default: the first of 1, 16, 64, 256 the original runs with) (repeatable)"))
      ->needs(verify);
  one_value(cmd->add_option("--verify-shape", args->verify_shapes,
                            "an input's full shape, INPUT=D,D,... (repeatable)"))
      ->needs(verify);
  one_value(
      cmd->add_option("--verify-value", args->verify_values,
                      "fill an input with one number instead of random ones, INPUT=V (repeatable)"))
      ->needs(verify);
  one_value(cmd->add_option("--verify-range", args->verify_ranges,
                            "draw an input from LOW..HIGH instead of by its role, INPUT=LOW,HIGH "
                            "(floats uniform in [LOW, HIGH), integers from ceil(LOW) to "
                            "floor(HIGH); e.g. audio in -0.5,0.5) (repeatable)"))
      ->needs(verify);
  cmd->add_option("--verify-seed", args->verify_seed, "random input seed")
      ->capture_default_str()
      ->needs(verify);
  cmd->add_option("--verify-trials", args->verify_trials, "input sets to compare on (1..16)")
      ->capture_default_str()
      ->needs(verify);
  // The tolerances also apply to --verify-data, which implies --verify (checked after parsing).
  args->needs_verification.push_back(
      cmd->add_option("--verify-rtol", args->verify_rtol, "relative tolerance for float outputs")
          ->capture_default_str());
  args->needs_verification.push_back(
      cmd->add_option("--verify-atol", args->verify_atol, "absolute tolerance for float outputs")
          ->capture_default_str());
  one_value(cmd->add_option(
      "--verify-data", args->verify_data,
      "verify on recorded inputs (implies --verify; replaces the random ones) in ONNX test-data "
      "form: FILE.pb (a serialized TensorProto, for the input it names, else the one at its "
      "position), NAME=FILE.pb, or a folder of input_<N>.pb files or of test_data_set_<N> "
      "folders (one input set each); single files together make one set; at most 16 sets "
      "(repeatable)"));
  one_value(cmd->add_option(
      "--calibration-data", args->calibration_data,
      "recorded inputs the lossy passes learn value ranges from (quantize_static_int8's "
      "scales, convert_fp16's activations), in --verify-data's forms; without it they use "
      "random inputs and the report says so (repeatable)"));
}

// A plain option's bounds as a CLI check: its spec's, within its type's [lo, hi]; the help shows
// "in [MIN, MAX]" and an error names the bounds the way graftd's does.
CLI::Validator plain_bounds(const v1::FieldSpec& spec, double lo, double hi) {
  const double min = spec.has_min() ? std::max(spec.min(), lo) : lo;
  const double max = spec.has_max() ? std::min(spec.max(), hi) : hi;
  const std::string bounds =
      absl::StrCat("[", api::bound_text(min), ", ", api::bound_text(max), "]");
  return CLI::Validator(
      [min, max, bounds](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "'" + text + "' is not a number";
        if (!(value >= min && value <= max)) return text + " is not in " + bounds;
        return "";
      },
      "in " + bounds);
}

// The plain options (graft.proto's fields with a (graft.v1.field) spec: the lossy passes'
// gates, --target-opset, ...), each as its spec says: flag, help, bounds.
void add_plain_options(CLI::App* cmd, PipelineArgs* args) {
  using google::protobuf::FieldDescriptor;
  for (const auto& [field, spec] : api::plain_fields()) {
    if (spec->flag().empty()) continue;
    PipelineArgs::PlainFlag& p = args->plain.emplace_back();
    p.field = field;
    const std::string flag = "--" + spec->flag();
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_BOOL:
        p.option = cmd->add_flag(flag, p.flag, spec->help());
        continue;
      case FieldDescriptor::CPPTYPE_INT32:
        p.option = cmd->add_option(flag, p.integer, spec->help())
                       ->check(plain_bounds(*spec, std::numeric_limits<int32_t>::min(),
                                            std::numeric_limits<int32_t>::max()));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        p.option = cmd->add_option(flag, p.integer, spec->help())
                       ->check(plain_bounds(*spec, -0x1p63, 0x1p63));
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
      case FieldDescriptor::CPPTYPE_UINT64:
        p.option =
            cmd->add_option(flag, p.unsigned_integer, spec->help())
                ->check(plain_bounds(
                    *spec, 0,
                    field->cpp_type() == FieldDescriptor::CPPTYPE_UINT32 ? 0x1p32 - 1 : 0x1p64));
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        p.option = cmd->add_option(flag, p.number, spec->help());
        if (spec->has_min() || spec->has_max())
          p.option->check(plain_bounds(*spec, -std::numeric_limits<double>::max(),
                                       std::numeric_limits<double>::max()));
        break;
      default:
        p.option = cmd->add_option(flag, p.text, spec->help());
        break;
    }
    if (!field->has_presence()) p.option->capture_default_str();
  }
}

// The plain options given on the command line into `config`'s message form.
void set_plain_fields(const PipelineArgs& a, v1::PipelineConfig* config) {
  using google::protobuf::FieldDescriptor;
  const auto* reflection = config->GetReflection();
  for (const PipelineArgs::PlainFlag& p : a.plain) {
    if (p.option->count() == 0) continue;
    switch (p.field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_BOOL:
        reflection->SetBool(config, p.field, p.flag);
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        reflection->SetInt32(config, p.field, static_cast<int32_t>(p.integer));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        reflection->SetInt64(config, p.field, p.integer);
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        reflection->SetUInt32(config, p.field, static_cast<uint32_t>(p.unsigned_integer));
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        reflection->SetUInt64(config, p.field, p.unsigned_integer);
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        reflection->SetDouble(config, p.field, p.number);
        break;
      default:
        reflection->SetString(config, p.field, p.text);
        break;
    }
  }
}

// --explain; the input dims made static (--fix-dim, --fix-shape) and the report's (--dim).
void add_explain_and_dim_options(CLI::App* cmd, PipelineArgs* args) {
  one_value(cmd->add_option(
      "--explain", args->explain,
      "PASS or PASS/RULE: for each node a rule of that pass was tried on and did not rewrite "
      "(in the pass's last run), print why, e.g. 'fuse_blocks/layer_norm at /ln/Div (Div): "
      "epsilon is not a constant'; rules are listed per pass in the report (repeatable)"));
  one_value(cmd->add_option(
      "--fix-dim", args->fix_dims,
      "make a symbolic input dim static before optimizing, NAME=N (N >= 1): every input dim "
      "named NAME becomes N, so what follows from it (shape arithmetic, Reshape targets) "
      "folds; the output accepts only that size (repeatable)"));
  one_value(cmd->add_option(
      "--fix-shape", args->fix_shapes,
      "give an input static dims before optimizing, INPUT=D,D,... (each >= 1; dims the model "
      "declares static must be equal) (repeatable)"));
  one_value(cmd->add_option(
      "--io-layout", args->io_layouts,
      "serve an input or output in another memory layout, NAME=NHWC (the model computes in "
      "NCHW), NCHW (from NHWC), NWC/NCW or NDHWC/NCDHW: its declared dims are permuted and "
      "Transposes at the boundary are moved inward until they cancel or meet a "
      "layout-sensitive op (the report counts those left); verification inputs are in the new "
      "layout (repeatable)"));
  one_value(cmd->add_option(
      "--gate", args->gates,
      "how a lossy pass is judged on one output, OUTPUT=KIND[:THRESHOLD]: detection (rows "
      "matched by label and box IoU >= 0.5; THRESHOLD the least matched share, default 0.9), "
      "top1 / top5 (the original's top class is the candidate's top one / within its top five "
      "in THRESHOLD of the rows; 0.9 / 0.99), mask (IoU, 0.9), values (no task judgment); "
      "graft infers them (detectors with NonMaxSuppression, classifiers, segmenters) and "
      "reports each (repeatable)"));
  one_value(cmd->add_option(
      "--dim", args->dims,
      "size of a symbolic dim for the memory estimates of the report, NAME=N; *=N for every "
      "other symbolic or unknown dim (default: the --verify-dim values, else 1) (repeatable)"));
}

int level_from_string(const std::string& s) {
  if (s.size() == 2 && (s[0] == 'O' || s[0] == 'o') && s[1] >= '0' && s[1] <= '9')
    return s[1] - '0';
  if (s.size() == 1 && s[0] >= '0' && s[0] <= '9') return s[0] - '0';
  return -1;
}

// A NAME=VALUE pair; the error names the flag.
absl::Status split_pair(const std::string& flag, const std::string& arg, std::string* name,
                        std::string* value) {
  auto eq = arg.find('=');
  if (eq == 0 || eq == std::string::npos || eq + 1 == arg.size())
    return absl::InvalidArgumentError(flag + " must look like NAME=VALUE, got '" + arg + "'");
  *name = arg.substr(0, eq);
  *value = arg.substr(eq + 1);
  return absl::OkStatus();
}

// The whole of `text` as a number; the error names the flag.
template <typename T>
absl::Status parse_number(const std::string& flag, const std::string& text, T* out) {
  std::istringstream in(text);
  in >> *out;
  if (!in || !in.eof())
    return absl::InvalidArgumentError(flag + ": '" + text + "' is not a number");
  return absl::OkStatus();
}

// A size a model's input is fixed to: checked here to name the flag, then with the rest of the
// config (resolve_pipeline: check_fix_config) like a request's.
absl::Status parse_fixed_size(const std::string& flag, const std::string& text, int64_t* size) {
  RETURN_IF_ERROR(parse_number(flag, text, size));
  if (*size < kMinFixedDim || *size > kMaxFixedDim)
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", text, "' must be ", kMinFixedDim, "..", kMaxFixedDim));
  return absl::OkStatus();
}

// --option PASS.KEY=VALUE.
absl::Status set_pass_options(const std::vector<std::string>& options, PipelineConfig* config) {
  for (const auto& opt : options) {
    auto dot = opt.find('.'), eq = opt.find('=');
    if (dot == std::string::npos || eq == std::string::npos || dot > eq)
      return absl::InvalidArgumentError("--option must look like pass.key=value, got '" + opt +
                                        "'");
    config->pass_options[opt.substr(0, dot)][opt.substr(dot + 1, eq - dot - 1)] =
        opt.substr(eq + 1);
  }
  return absl::OkStatus();
}

// --verify-dim, --verify-shape, --verify-value, --verify-range: the random inputs' sizes and
// values.
absl::Status add_random_inputs(const PipelineArgs& a, eval::VerifyOptions* v) {
  std::string name, value;
  for (const auto& d : a.verify_dims) {
    RETURN_IF_ERROR(split_pair("--verify-dim", d, &name, &value));
    if (name == "*") {
      RETURN_IF_ERROR(parse_number("--verify-dim", value, &v->default_dim));
    } else {
      RETURN_IF_ERROR(parse_number("--verify-dim", value, &v->dims[name]));
    }
  }
  for (const auto& sh : a.verify_shapes) {
    RETURN_IF_ERROR(split_pair("--verify-shape", sh, &name, &value));
    auto& dims = v->shapes[name];
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      int64_t d = 0;
      RETURN_IF_ERROR(parse_number("--verify-shape", std::string(part), &d));
      dims.push_back(d);
    }
  }
  for (const auto& val : a.verify_values) {
    RETURN_IF_ERROR(split_pair("--verify-value", val, &name, &value));
    RETURN_IF_ERROR(parse_number("--verify-value", value, &v->values[name]));
  }
  for (const auto& r : a.verify_ranges) {
    RETURN_IF_ERROR(split_pair("--verify-range", r, &name, &value));
    std::vector<std::string> bounds = absl::StrSplit(value, ',');
    if (bounds.size() != 2)
      return absl::InvalidArgumentError(
          absl::StrCat("--verify-range: expected INPUT=LOW,HIGH, got '", r.substr(0, 200), "'"));
    auto& range = v->ranges[name];
    RETURN_IF_ERROR(parse_number("--verify-range", bounds[0], &range.first));
    RETURN_IF_ERROR(parse_number("--verify-range", bounds[1], &range.second));
  }
  return absl::OkStatus();
}

// --fix-dim, --fix-shape: the input dims made static before optimizing; --io-layout.
absl::Status add_fixed_dims(const PipelineArgs& a, PipelineConfig* config) {
  std::string name, value;
  for (const auto& d : a.fix_dims) {
    RETURN_IF_ERROR(split_pair("--fix-dim", d, &name, &value));
    int64_t size = 0;
    RETURN_IF_ERROR(parse_fixed_size("--fix-dim", value, &size));
    auto [it, added] = config->fix_dims.emplace(name, size);
    if (!added && it->second != size)
      return absl::InvalidArgumentError(
          absl::StrCat("--fix-dim: '", name, "' is given twice, as ", it->second, " and ", size));
  }
  for (const auto& sh : a.fix_shapes) {
    RETURN_IF_ERROR(split_pair("--fix-shape", sh, &name, &value));
    std::vector<int64_t> dims;
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      int64_t d = 0;
      RETURN_IF_ERROR(parse_fixed_size("--fix-shape", std::string(part), &d));
      dims.push_back(d);
    }
    auto [it, added] = config->fix_shapes.emplace(name, dims);
    if (!added && it->second != dims)
      return absl::InvalidArgumentError(
          absl::StrCat("--fix-shape: input '", name, "' is given two shapes"));
  }
  for (const auto& l : a.io_layouts) {
    RETURN_IF_ERROR(split_pair("--io-layout", l, &name, &value));
    value = absl::AsciiStrToUpper(value);
    auto [it, added] = config->io_layout.emplace(name, value);
    if (!added && it->second != value)
      return absl::InvalidArgumentError(
          absl::StrCat("--io-layout: '", name.substr(0, 200), "' is given two layouts"));
  }
  return absl::OkStatus();
}

// --dim: the sizes of symbolic dims in the report's memory estimates.
absl::Status add_memory_dims(const PipelineArgs& a, PipelineConfig* config) {
  std::string name, value;
  for (const auto& d : a.dims) {
    RETURN_IF_ERROR(split_pair("--dim", d, &name, &value));
    int64_t size = 0;
    RETURN_IF_ERROR(parse_number("--dim", value, &size));
    if (size < 0) return absl::InvalidArgumentError("--dim: '" + value + "' is negative");
    if (name == "*")
      config->memory_default_dim = size;
    else
      config->memory_dims[name] = size;
  }
  return absl::OkStatus();
}

// The verification's settings but its input data (--verify-data: add_input_data).
void set_verify_options(const PipelineArgs& a, eval::VerifyOptions* v) {
  v->seed = a.verify_seed;
  v->trials = a.verify_trials;
  v->rtol = a.verify_rtol;
  v->atol = a.verify_atol;
  eval::set_memory_budget(v, a.verify_max_bytes);
}

}  // namespace

void add_pipeline_options(CLI::App* cmd, PipelineArgs* args) {
  add_pass_selection_options(cmd, args);
  add_verify_options(cmd, args);
  add_plain_options(cmd, args);
  add_explain_and_dim_options(cmd, args);
}

void add_local_pipeline_options(CLI::App* cmd, PipelineArgs* args) {
  cmd->add_option("--dump-dir", args->dump_dir,
                  "local: write the graph as ONNX text after each pass that changed it");
  args->verify_max_bytes_option =
      cmd->add_option("--verify-max-bytes", args->verify_max_bytes,
                      "local: bytes of tensors the verification may hold at once (graftd: its "
                      "verify_max_bytes); a model that needs more is reported not verifiable")
          ->capture_default_str()
          ->check(CLI::Range(uint64_t{1}, std::numeric_limits<uint64_t>::max() >> 1));
  args->needs_verification.push_back(args->verify_max_bytes_option);
}

int check_parsed_options(PipelineArgs* args) {
  args->verify_max_bytes_given =
      args->verify_max_bytes_option != nullptr && args->verify_max_bytes_option->count() > 0;
  for (const CLI::Option* o : args->needs_verification)
    if (o->count() > 0 && !args->verify && args->verify_data.empty())
      return fail(kUsage, o->get_name() + " requires --verify or --verify-data");
  return kOk;
}

absl::StatusOr<PipelineConfig> pipeline_config(const PipelineArgs& a) {
  PipelineConfig config;
  config.level = level_from_string(a.level);
  if (config.level < 0 || config.level > kMaxLevel)
    return absl::InvalidArgumentError("level must be O0, O1, O2 or O3, got '" + a.level + "'");
  auto target = parse_target(a.target);
  if (!target.ok())
    return absl::InvalidArgumentError("--target: " + std::string(target.status().message()));
  config.target = *target;
  config.passes = a.passes;
  config.max_rounds = a.max_rounds;
  config.onnx_checker = config.shape_inference = a.check;
  config.dump_dir = a.dump_dir;
  config.explain = a.explain;
  for (const std::string& text : a.gates) {
    auto spec = eval::parse_output_gate(text);
    if (!spec.ok())
      return absl::InvalidArgumentError("--gate: " + std::string(spec.status().message()));
    if (auto ok = eval::check_output_gate(*spec); !ok.ok())
      return absl::InvalidArgumentError("--gate: " + std::string(ok.message()));
    config.output_gates.push_back(std::move(*spec));
  }
  if (config.output_gates.size() > static_cast<size_t>(api::kMaxOutputGates))
    return absl::InvalidArgumentError(absl::StrCat("--gate: at most ", api::kMaxOutputGates));
  RETURN_IF_ERROR(set_pass_options(a.options, &config));
  config.verify = a.verify || !a.verify_data.empty();
  v1::PipelineConfig plain;
  set_plain_fields(a, &plain);
  RETURN_IF_ERROR(api::check_plain_fields(plain));
  api::copy_plain_fields(plain, &config);
  set_verify_options(a, &config.verify_options);
  RETURN_IF_ERROR(add_random_inputs(a, &config.verify_options));
  RETURN_IF_ERROR(add_fixed_dims(a, &config));
  RETURN_IF_ERROR(add_memory_dims(a, &config));
  RETURN_IF_ERROR(api::check_limits(config));
  RETURN_IF_ERROR(eval::validate(config.verify_options));
  return config;
}

}  // namespace graft::cli
