// graft: the command-line client. `graft optimize --local` runs the core pipeline in-process.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_split.h>
#include <google/protobuf/util/json_util.h>
#include <grpc/support/log.h>
#include <CLI/CLI.hpp>

#include "client/exit_codes.h"
#include "client/file_digest.h"
#include "client/graft_client.h"
#include "client/verify_data.h"
#include "common/report.h"
#include "core/build_info.h"
#include "core/cache/digest.h"
#include "core/ir/model.h"
#include "core/passes/registry.h"
#include "core/paths/beneath.h"
#include "core/paths/files.h"
#include "core/pipeline/fix_dims.h"
#include "core/pipeline/pipeline.h"
#include "proto/convert.h"

namespace graft::cli {
namespace {

using namespace ::graft::report;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int fail(int code, const std::string& msg) {
  // Messages may quote the model's names or a server's text: no terminal escapes get through.
  std::cerr << "graft: " << terminal_safe(msg, /*keep_newlines=*/true) << "\n";
  return code;
}

// The whole input: a file read with one allocation of its size, or standard input ("-") in
// doubling blocks (paths::read_all).
bool read_input(const std::string& path, std::string* bytes, std::string* error) {
  auto read =
      path == "-" ? paths::read_all(STDIN_FILENO, "standard input") : paths::read_file(path);
  if (!read.ok()) {
    *error = std::string(read.status().message());
    return false;
  }
  *bytes = std::move(*read);
  return true;
}

// Standard output ("-") in as few writes as it takes, or a file written beside its target and
// renamed over it, so a failed run never leaves a half-written model.
bool write_output(const std::string& path, const std::string& bytes, std::string* error) {
  if (path == "-") std::cout.flush();  // what was printed through std::cout goes first
  absl::Status st = path == "-" ? paths::write_all(STDOUT_FILENO, bytes, "standard output")
                                : paths::write_file_atomic(path, bytes);
  if (!st.ok()) *error = std::string(st.message());
  return st.ok();
}

void collect_locations(const onnx::TensorProto& t, std::set<std::string>* out) {
  if (t.data_location() != onnx::TensorProto::EXTERNAL) return;
  for (const auto& e : t.external_data())
    if (e.key() == "location") out->insert(e.value());
}

void collect_locations(const onnx::SparseTensorProto& t, std::set<std::string>* out) {
  collect_locations(t.values(), out);
  collect_locations(t.indices(), out);
}

void collect_locations(const onnx::GraphProto& g, std::set<std::string>* out);

void collect_locations(const onnx::NodeProto& n, std::set<std::string>* out) {
  for (const auto& a : n.attribute()) {
    if (a.has_t()) collect_locations(a.t(), out);
    for (const auto& t : a.tensors()) collect_locations(t, out);
    if (a.has_sparse_tensor()) collect_locations(a.sparse_tensor(), out);
    for (const auto& t : a.sparse_tensors()) collect_locations(t, out);
    if (a.has_g()) collect_locations(a.g(), out);
    for (const auto& sub : a.graphs()) collect_locations(sub, out);
  }
}

// Every tensor a graph holds: initializers (dense and sparse) and node attributes, subgraphs
// included (protobuf's parse depth limit bounds the recursion).
void collect_locations(const onnx::GraphProto& g, std::set<std::string>* out) {
  for (const auto& t : g.initializer()) collect_locations(t, out);
  for (const auto& t : g.sparse_initializer()) collect_locations(t, out);
  for (const auto& n : g.node()) collect_locations(n, out);
}

void collect_locations(const onnx::ModelProto& m, std::set<std::string>* out) {
  collect_locations(m.graph(), out);
  for (const auto& f : m.functions())
    for (const auto& n : f.node()) collect_locations(n, out);
  for (const auto& t : m.training_info()) {
    collect_locations(t.initialization(), out);
    collect_locations(t.algorithm(), out);
  }
}

// External-data files the model's tensors reference ("location" entries), relative to the
// model's folder. The parse is skipped when the bytes cannot contain such an entry.
absl::StatusOr<std::set<std::string>> external_locations(const std::string& bytes) {
  std::set<std::string> out;
  if (bytes.find("location") == std::string::npos) return out;
  onnx::ModelProto proto;
  if (!proto.ParseFromString(bytes))
    return absl::InvalidArgumentError("invalid model: not a serialized ONNX ModelProto");
  collect_locations(proto, &out);
  return out;
}

// The model's bytes, read again to name --verify-data tensors by position (only a file will do:
// standard input is read once, for the upload).
absl::StatusOr<std::string> model_file(const std::string& path) {
  if (path.empty() || path == "-")
    return absl::InvalidArgumentError(
        "--verify-data, --calibration-data: a tensor without a name is fed by its position among "
        "the model's inputs, which needs the model as a file; name it with NAME=FILE");
  return paths::read_file(path);
}

// Exit code for an external-data read or write: a location that breaks the rules (outside the
// folder, not normalised, a symbolic link) is a bad model, anything else an I/O error.
int path_exit_code(const absl::Status& st) {
  return st.code() == absl::StatusCode::kInvalidArgument ? kBadModel : kIoError;
}

std::filesystem::path folder_of(const std::string& path) {
  if (path == "-" || path.empty()) return std::filesystem::current_path();
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::filesystem::current_path() : parent;
}

int level_from_string(const std::string& s) {
  if (s.size() == 2 && (s[0] == 'O' || s[0] == 'o') && s[1] >= '0' && s[1] <= '9')
    return s[1] - '0';
  if (s.size() == 1 && s[0] >= '0' && s[0] <= '9') return s[0] - '0';
  return -1;
}

struct OptimizeArgs {
  std::string input;
  std::string output;
  bool local = false;
  std::string server;  // HOST:PORT; GRAFT_SERVER by default
  double timeout_seconds = 0;
  std::string level = "O2";
  std::string target = "onnx";
  int target_opset = 0;
  std::vector<std::string> passes;
  std::vector<std::string> options;  // pass.key=value
  int max_rounds = 10;
  std::string report_path;
  std::string report_html;  // --report-html: the report as a self-contained page
  std::string dump_dir;
  bool check = false;
  bool verify = false;
  std::vector<std::string> verify_dims, verify_shapes, verify_values;  // NAME=...
  uint32_t verify_seed = 1;
  int verify_trials = 2;
  double verify_rtol = 1e-3, verify_atol = 1e-4;
  // --local: evaluator memory of the verification (graftd: its verify_max_bytes setting).
  uint64_t verify_max_bytes = eval::kDefaultVerifyMaxBytes;
  bool verify_max_bytes_given = false;
  std::vector<std::string> verify_data;       // --verify-data: files and folders of input tensors
  std::vector<std::string> calibration_data;  // --calibration-data: the same form
  double max_error = -1;                      // < 0: each lossy pass's own gate
  double min_cosine = -2;                     // < -1: each lossy pass's own gate
  bool accept_unmeasured_error = false;
  std::vector<std::string> dims;                  // NAME=N for the memory estimates
  std::vector<std::string> fix_dims, fix_shapes;  // NAME=N, INPUT=D,D,...: made static first
  std::vector<std::string> explain;               // PASS or PASS/RULE
  bool quiet = false;
  bool no_lookup = false;  // remote: send the model without asking Lookup first
  bool rehash = false;     // hash every file again instead of recalling remembered digests
  std::string sha256;      // lookup only
  // TLS from the flags; GRAFT_TLS* fill in what they leave unset.
  tls::ClientOptions tls;
};

// Builds the pipeline config from flags; the error is a usage message.
absl::StatusOr<PipelineConfig> pipeline_config(const OptimizeArgs& a) {
  PipelineConfig config;
  config.level = level_from_string(a.level);
  if (config.level < 0 || config.level > kMaxLevel)
    return absl::InvalidArgumentError("level must be O0, O1, O2 or O3, got '" + a.level + "'");
  auto target = parse_target(a.target);
  if (!target.ok())
    return absl::InvalidArgumentError("--target: " + std::string(target.status().message()));
  config.target = *target;
  config.target_opset = a.target_opset;
  config.passes = a.passes;
  config.max_rounds = a.max_rounds;
  config.onnx_checker = config.shape_inference = a.check;
  config.dump_dir = a.dump_dir;
  config.explain = a.explain;
  for (const auto& opt : a.options) {
    auto dot = opt.find('.'), eq = opt.find('=');
    if (dot == std::string::npos || eq == std::string::npos || dot > eq)
      return absl::InvalidArgumentError("--option must look like pass.key=value, got '" + opt +
                                        "'");
    config.pass_options[opt.substr(0, dot)][opt.substr(dot + 1, eq - dot - 1)] = opt.substr(eq + 1);
  }
  config.verify = a.verify || !a.verify_data.empty();
  if (a.max_error >= 0) config.max_error = a.max_error;
  if (a.min_cosine >= -1) config.min_cosine = a.min_cosine;
  config.accept_unmeasured_error = a.accept_unmeasured_error;
  eval::VerifyOptions& v = config.verify_options;
  v.seed = a.verify_seed;
  v.trials = a.verify_trials;
  v.rtol = a.verify_rtol;
  v.atol = a.verify_atol;
  eval::set_memory_budget(&v, a.verify_max_bytes);
  // NAME=VALUE pairs; the error names the flag.
  auto split = [](const std::string& flag, const std::string& arg, std::string* name,
                  std::string* value) -> absl::Status {
    auto eq = arg.find('=');
    if (eq == 0 || eq == std::string::npos || eq + 1 == arg.size())
      return absl::InvalidArgumentError(flag + " must look like NAME=VALUE, got '" + arg + "'");
    *name = arg.substr(0, eq);
    *value = arg.substr(eq + 1);
    return absl::OkStatus();
  };
  auto number = [](const std::string& flag, const std::string& text, auto* out) -> absl::Status {
    std::istringstream in(text);
    in >> *out;
    if (!in || !in.eof())
      return absl::InvalidArgumentError(flag + ": '" + text + "' is not a number");
    return absl::OkStatus();
  };
  std::string name, value;
  for (const auto& d : a.verify_dims) {
    if (auto st = split("--verify-dim", d, &name, &value); !st.ok()) return st;
    if (name == "*") {
      if (auto st = number("--verify-dim", value, &v.default_dim); !st.ok()) return st;
    } else if (auto st = number("--verify-dim", value, &v.dims[name]); !st.ok()) {
      return st;
    }
  }
  for (const auto& sh : a.verify_shapes) {
    if (auto st = split("--verify-shape", sh, &name, &value); !st.ok()) return st;
    auto& dims = v.shapes[name];
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      int64_t d = 0;
      if (auto st = number("--verify-shape", std::string(part), &d); !st.ok()) return st;
      dims.push_back(d);
    }
  }
  for (const auto& val : a.verify_values) {
    if (auto st = split("--verify-value", val, &name, &value); !st.ok()) return st;
    if (auto st = number("--verify-value", value, &v.values[name]); !st.ok()) return st;
  }
  // Sizes the model's inputs are fixed to: checked here to name the flag, then with the rest of
  // the config (resolve_pipeline: check_fix_config) like a request's.
  auto fixed_size = [&](const std::string& flag, const std::string& text,
                        int64_t* size) -> absl::Status {
    if (auto st = number(flag, text, size); !st.ok()) return st;
    if (*size < kMinFixedDim || *size > kMaxFixedDim)
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": '", text, "' must be ", kMinFixedDim, "..", kMaxFixedDim));
    return absl::OkStatus();
  };
  for (const auto& d : a.fix_dims) {
    if (auto st = split("--fix-dim", d, &name, &value); !st.ok()) return st;
    int64_t size = 0;
    if (auto st = fixed_size("--fix-dim", value, &size); !st.ok()) return st;
    auto [it, added] = config.fix_dims.emplace(name, size);
    if (!added && it->second != size)
      return absl::InvalidArgumentError(
          absl::StrCat("--fix-dim: '", name, "' is given twice, as ", it->second, " and ", size));
  }
  for (const auto& sh : a.fix_shapes) {
    if (auto st = split("--fix-shape", sh, &name, &value); !st.ok()) return st;
    std::vector<int64_t> dims;
    for (absl::string_view part : absl::StrSplit(value, ',')) {
      int64_t d = 0;
      if (auto st = fixed_size("--fix-shape", std::string(part), &d); !st.ok()) return st;
      dims.push_back(d);
    }
    auto [it, added] = config.fix_shapes.emplace(name, dims);
    if (!added && it->second != dims)
      return absl::InvalidArgumentError(
          absl::StrCat("--fix-shape: input '", name, "' is given two shapes"));
  }
  for (const auto& d : a.dims) {
    if (auto st = split("--dim", d, &name, &value); !st.ok()) return st;
    int64_t size = 0;
    if (auto st = number("--dim", value, &size); !st.ok()) return st;
    if (size < 0) return absl::InvalidArgumentError("--dim: '" + value + "' is negative");
    if (name == "*")
      config.memory_default_dim = size;
    else
      config.memory_dims[name] = size;
  }
  if (auto st = api::check_limits(config); !st.ok()) return st;
  if (auto st = eval::validate(v); !st.ok()) return st;
  return config;
}

// --verify-data / --calibration-data (`flag`): reads `args` into input sets. `input_names`
// gives the model's feedable inputs when a tensor is fed by position. Returns an exit code:
// kOk, or the failure already reported.
int read_input_data(const std::vector<std::string>& args, const std::string& flag,
                    uint64_t max_tensor_bytes,
                    const std::function<absl::StatusOr<std::vector<std::string>>()>& input_names,
                    std::vector<std::map<std::string, eval::Tensor>>* out) {
  // DataLoss: the model itself does not parse (add_input_data), a bad model.
  auto data_fail = [](const absl::Status& st) {
    const bool usage = st.code() == absl::StatusCode::kInvalidArgument ||
                       st.code() == absl::StatusCode::kResourceExhausted;
    const int code = st.code() == absl::StatusCode::kDataLoss ? kBadModel
                     : usage                                  ? kUsage
                                                              : kIoError;
    return fail(code, std::string(st.message()));
  };
  auto sets = read_verify_data(args, max_tensor_bytes, flag);
  if (!sets.ok()) return data_fail(sets.status());
  std::vector<std::string> inputs;
  if (needs_input_names(*sets)) {
    auto names = input_names();
    if (!names.ok()) return data_fail(names.status());
    inputs = std::move(*names);
  }
  auto named = name_input_sets(std::move(*sets), inputs, flag);
  if (!named.ok()) return data_fail(named.status());
  *out = std::move(*named);
  return kOk;
}

// --verify-data (verification on, one trial per set) and --calibration-data: reads their input
// sets into `config`. `model_bytes` gives the model when a tensor is fed by position; it is
// called at most once, for both options. Returns an exit code: kOk, or the failure already
// reported.
int add_input_data(const OptimizeArgs& a, PipelineConfig* config,
                   const std::function<absl::StatusOr<std::string>()>& model_bytes) {
  std::optional<absl::StatusOr<std::vector<std::string>>> names;
  auto input_names = [&]() -> absl::StatusOr<std::vector<std::string>> {
    if (!names) {
      auto bytes = model_bytes();
      if (!bytes.ok()) {
        names = bytes.status();
      } else if (auto found = feedable_inputs(*bytes); found.ok()) {
        names = std::move(found);
      } else {
        // A model that does not parse: exit 3, as for the model itself (DataLoss marks it).
        names = absl::DataLossError(a.input + ": " + std::string(found.status().message()));
      }
    }
    return *names;
  };
  const uint64_t max_bytes = config->verify_options.max_tensor_bytes;
  if (!a.calibration_data.empty()) {
    if (int rc = read_input_data(a.calibration_data, "--calibration-data", max_bytes, input_names,
                                 &config->calibration_sets);
        rc != kOk)
      return rc;
  }
  if (a.verify_data.empty()) return kOk;
  std::vector<std::map<std::string, eval::Tensor>> sets;
  if (int rc = read_input_data(a.verify_data, "--verify-data", max_bytes, input_names, &sets);
      rc != kOk)
    return rc;
  config->verify = true;
  config->verify_options.input_sets = std::move(sets);
  config->verify_options.trials = static_cast<int>(config->verify_options.input_sets.size());
  if (auto st = eval::validate(config->verify_options); !st.ok())
    return fail(kUsage, std::string(st.message()));
  return kOk;
}

// Exit code for an error status from the server.
int remote_exit_code(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument: {
      // The server's model errors, and external-data locations (the model's, or names the
      // server returned) that break the path rules.
      const std::string msg(st.message());
      return msg.find("invalid model") != std::string::npos ||
                     msg.find("invalid external data location") != std::string::npos
                 ? kBadModel
                 : kUsage;
    }
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kCancelled:
      return kServer;
    default:
      return kInternal;
  }
}

int fail_remote(const absl::Status& st) {
  return fail(remote_exit_code(st),
              std::string(absl::StatusCodeToString(st.code())) + ": " + std::string(st.message()));
}

// A one-line progress bar on stderr, only when stderr is a terminal and the model is large.
client::Progress progress_bar(uint64_t size) {
  if (!::isatty(2) || size < (4u << 20)) return nullptr;
  return [](bool upload, uint64_t done, uint64_t total) {
    if (upload && total > 0) {
      int pct = static_cast<int>(100 * done / total);
      std::fprintf(stderr, "\rupload   [%-40s] %3d%% %.1f MiB",
                   std::string(pct * 40 / 100, '#').c_str(), pct, done / 1048576.0);
      if (done == total) std::fprintf(stderr, "\n");
    } else if (!upload) {
      std::fprintf(stderr, "\rdownload %.1f MiB", done / 1048576.0);
    }
    std::fflush(stderr);
  };
}

std::string resolve_server(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = std::getenv("GRAFT_SERVER");
  return env ? env : "";
}

// A client for `server`, with TLS from the flags and GRAFT_TLS* for what they leave unset. A
// TLS file that cannot be read is exit 4, one that is not usable PEM (or a --cert without
// --key) is exit 2.
absl::StatusOr<client::GraftClient> connect(const std::string& server, tls::ClientOptions tls) {
  tls::apply_environment(&tls);
  return client::GraftClient::connect(server, tls);
}

int fail_connect(const absl::Status& st) {
  bool unreadable =
      st.code() == absl::StatusCode::kNotFound || st.code() == absl::StatusCode::kPermissionDenied;
  return fail(unreadable ? kIoError : kUsage, std::string(st.message()));
}

bool wants_report(const OptimizeArgs& a) {
  return !a.report_path.empty() || !a.report_html.empty();
}

// The configuration for the report: graft.v1.PipelineConfig as JSON with proto field names, the
// tensors of input and calibration sets replaced by how many sets there are.
nlohmann::json config_json(const PipelineConfig& config) {
  v1::PipelineConfig proto = api::to_proto(config);
  const int input_sets = proto.verify().input_sets_size();
  const int calibration_sets = proto.calibration_sets_size();
  proto.mutable_verify()->clear_input_sets();
  proto.clear_calibration_sets();
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  std::string text;
  if (!google::protobuf::util::MessageToJsonString(proto, &text, options).ok()) return nullptr;
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return nullptr;
  if (input_sets > 0) j["verify"]["input_sets"] = input_sets;
  if (calibration_sets > 0) j["calibration_sets"] = calibration_sets;
  return j;
}

// The profile of the model in `bytes` for the report, sized as the report's memory estimates;
// nullopt (the report goes without) when it does not parse.
std::optional<ModelProfile> profile_bytes(const std::string& bytes, const PipelineConfig& config) {
  auto model = ir::Model::parse(bytes);
  if (!model.ok()) return std::nullopt;
  DimBindings dims;
  return profile_model(**model, memory_size_rule(config, &dims));
}

// Writes the model (and report); external-data files first: `files` (bytes in hand), then
// `kept` (files of the input the result still references), copied from `input_folder` when the
// output goes to another folder.
// With `config` and a report asked for, the report gets the configuration and the profiles the
// run lacks: the input's read from its file, the result's from `model` (read back from the
// output file when it was streamed there).
int finish_run(const OptimizeArgs& a, RunSummary run, const std::string& model,
               const client::ExternalFiles& files = {}, const std::vector<std::string>& kept = {},
               const std::string& input_folder = {}, paths::AtomicFileWriter* streamed = nullptr,
               const PipelineConfig* config = nullptr) {
  std::string error;
  if (!a.output.empty() && (!files.empty() || !kept.empty())) {
    if (a.output == "-")
      return fail(kUsage, "the model uses external-data files: write it to a file, not stdout");
    // Every name is checked before anything is written, and the files go before the model, so
    // a refused location leaves no model referring to files that are not there.
    for (const auto& [name, bytes] : files)
      if (auto st = paths::check_location(name); !st.ok())
        return fail(kBadModel, std::string(st.message()));
    for (const auto& name : kept)
      if (auto st = paths::check_location(name); !st.ok())
        return fail(kBadModel, std::string(st.message()));
    for (const auto& [name, bytes] : files)
      if (auto st = paths::write_beneath(folder_of(a.output).string(), name, bytes); !st.ok())
        return fail(path_exit_code(st), std::string(st.message()));
    std::error_code same_error;
    const bool same_folder =
        !input_folder.empty() &&
        std::filesystem::equivalent(input_folder, folder_of(a.output), same_error);
    if (!same_folder && !kept.empty()) {
      if (input_folder.empty())
        return fail(kUsage,
                    "the result references the input's external-data files: give the "
                    "model file (not a digest) so they can be copied beside the output");
      for (const auto& name : kept)
        if (auto st = paths::copy_beneath(input_folder, folder_of(a.output).string(), name);
            !st.ok())
          return fail(path_exit_code(st), std::string(st.message()));
    }
  }
  if (streamed != nullptr) {
    // The model was written to the output's temporary file as it arrived.
    if (auto st = streamed->commit(); !st.ok())
      return fail(path_exit_code(st), std::string(st.message()));
  } else if (!a.output.empty() && !write_output(a.output, model, &error)) {
    return fail(kIoError, error);
  }
  if (config != nullptr && wants_report(a)) {
    run.config = config_json(*config);
    // A lookup hit never read the input; a lookup by --sha256 has none.
    if (!run.profile_before && !a.input.empty() && a.input != "-")
      if (auto bytes = paths::read_file(a.input); bytes.ok())
        run.profile_before = profile_bytes(*bytes, *config);
    if (!run.profile_after && !model.empty()) {
      run.profile_after = profile_bytes(model, *config);
    } else if (!run.profile_after && streamed != nullptr) {
      if (auto bytes = paths::read_file(a.output); bytes.ok())
        run.profile_after = profile_bytes(*bytes, *config);
    }
  }
  const nlohmann::json report = wants_report(a) ? to_json(run) : nlohmann::json();
  if (!a.report_path.empty()) {
    // Names from the model need not be UTF-8: invalid bytes are written as U+FFFD.
    std::string json = report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    if (!write_output(a.report_path, json, &error)) return fail(kIoError, error);
  }
  if (!a.report_html.empty() && !write_output(a.report_html, render_html(report), &error))
    return fail(kIoError, error);
  if (!a.quiet) std::cerr << format_table(run);
  return kOk;
}

int optimize_local(const OptimizeArgs& a, const PipelineConfig& config, std::string bytes) {
  RunSummary run;
  run.input = a.input;
  run.input_bytes = bytes.size();
  run.graft_version = graft_version();
  run.build_fingerprint = build_fingerprint();
  auto t = Clock::now();
  // The input's external-data files, so a new weights file gets a name none of them has.
  auto input_locations = external_locations(bytes);
  if (!input_locations.ok())
    return fail(kBadModel, a.input + ": " + std::string(input_locations.status().message()));
  auto model = ir::Model::parse(bytes);
  if (!model.ok()) return fail(kBadModel, a.input + ": " + std::string(model.status().message()));
  std::string().swap(bytes);  // the IR now owns the weights; free the input copy
  // External tensors are read from the input's folder, one at a time, when a pass needs them.
  const std::filesystem::path input_folder = folder_of(a.input);
  (*model)->set_external_data(ir::ExternalData::beneath(input_folder.string()));
  run.load_seconds = since(t);
  DimBindings memory_dims;
  if (wants_report(a))
    run.profile_before = profile_model(**model, memory_size_rule(config, &memory_dims));

  auto report = run_pipeline(*model, config);
  // InvalidArgument: --verify-data that does not fit the model (the config was checked before).
  if (!report.ok())
    return fail(absl::IsInvalidArgument(report.status()) ? kUsage : kInternal,
                std::string(report.status().message()));
  run.pipeline = std::move(*report);
  if (wants_report(a))
    run.profile_after = profile_model(**model, memory_size_rule(config, &memory_dims));

  t = Clock::now();
  const bool to_file = !a.output.empty() && a.output != "-";
  std::string out;
  std::vector<std::string> locations;
  if (to_file && (!input_locations->empty() || (*model)->has_external_tensors())) {
    // Weights the passes made (folded, fused, relayouted) go to a new file beside the output
    // rather than into the model: "<output stem>.graft.weights", numbered if the input uses it.
    const std::string stem = std::filesystem::path(a.output).stem().string();
    std::string location = stem + ".graft.weights";
    for (int i = 1; input_locations->count(location); ++i)
      location = stem + ".graft-" + std::to_string(i) + ".weights";
    ir::Model::ExternalWrite write;
    write.folder = folder_of(a.output).string();
    write.location = location;
    write.even_without_external = true;  // the input had external data (passes may use it up)
    // Written elsewhere, an input file the result uses only in part (a pass replaced some of
    // its weights) would be copied whole beside the output: its tensors go to the new file.
    std::error_code same_error;
    write.compact = !std::filesystem::equivalent(input_folder, write.folder, same_error);
    auto saved = (*model)->serialize_with_external(write);
    if (!saved.ok())
      return fail(saved.status().code() == absl::StatusCode::kResourceExhausted ||
                          saved.status().code() == absl::StatusCode::kInvalidArgument
                      ? kBadModel
                      : kIoError,
                  std::string(saved.status().message()));
    out = std::move(saved->model);
    for (auto& name : saved->locations)
      if (name != location || saved->new_file_bytes == 0) locations.push_back(std::move(name));
  } else {
    auto serialized = (*model)->serialize_and_release();
    if (!serialized.ok()) return fail(kBadModel, std::string(serialized.status().message()));
    out = std::move(*serialized);
    auto names = external_locations(out);
    if (!names.ok()) return fail(kInternal, std::string(names.status().message()));
    locations.assign(names->begin(), names->end());
  }
  run.save_seconds = since(t);
  run.output_bytes = out.size();
  // The input's files the output still references are copied next to it (in blocks) when it is
  // written elsewhere. Their names obey the same rule in every mode, so a model that refers
  // outside its folder fails the same way with or without -o.
  for (const auto& name : locations)
    if (auto st = paths::check_location(name); !st.ok())
      return fail(kBadModel, a.input + ": " + std::string(st.message()));
  // Copied beside the output by finish_run, as a remote run's.
  return finish_run(a, std::move(run), out, {}, to_file ? locations : std::vector<std::string>{},
                    input_folder.string(), nullptr, &config);
}

// The sha256 of the file at `path` (client::digest_file: hashed in pieces, or recalled from the
// user's digest cache unless `rehash`), and whether the word "location" occurs in it: a model
// without it has no external-data tensors, so its digest alone keys its result.
struct ModelDigest {
  std::string sha256;
  bool mentions_location = false;
  uint64_t size = 0;
};

absl::StatusOr<ModelDigest> digest_model(const std::string& path, bool rehash) {
  static constexpr std::string_view kWord = "location";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::Status(paths::errno_code(errno),
                        absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  bool mentions = false;
  std::string tail;  // the last bytes of the previous piece, for a word split between pieces
  client::DigestOptions options;
  options.cache_folder = client::default_digest_cache();
  options.recall = !rehash;
  options.scan = [&](std::string_view piece) {
    if (mentions) return;
    std::string joint = tail + std::string(piece.substr(0, kWord.size() - 1));
    if (joint.find(kWord) != std::string::npos || piece.find(kWord) != std::string_view::npos)
      mentions = true;
    tail = std::string(piece.substr(piece.size() - std::min(piece.size(), kWord.size() - 1)));
  };
  // Remembered with the digest: a recalled digest does not read the file.
  options.note = [&] { return std::string(mentions ? "location" : "plain"); };
  auto d = client::digest_file(fd, "'" + path + "'", options);
  if (!d.ok()) return d.status();
  if (d->recalled && d->note != "location" && d->note != "plain") {
    options.recall = false;  // a note this version does not know: hash again
    d = client::digest_file(fd, "'" + path + "'", options);
    if (!d.ok()) return d.status();
  }
  return ModelDigest{d->sha256, d->note == "location", d->size};
}

int report_remote(const OptimizeArgs& a, const std::string& server, client::OptimizeResult result,
                  uint64_t input_bytes, const std::string& lookup,
                  paths::AtomicFileWriter* streamed, const PipelineConfig& config) {
  RunSummary run;
  run.input = a.input;
  run.input_bytes = input_bytes;
  run.output_bytes = result.report.output_bytes();  // the Receiver checked what arrived
  run.load_seconds = result.report.load_seconds();
  run.save_seconds = result.report.save_seconds();
  run.pipeline = api::to_pipeline_report(result.report);
  run.graft_version = result.report.graft_version();
  run.build_fingerprint = result.report.build_fingerprint();
  run.server = server;
  run.cache_hit = result.report.cache_hit();
  run.input_sha256 = result.report.input_sha256();
  run.output_sha256 = result.report.output_sha256();
  run.lookup = lookup;
  run.bytes_sent = result.bytes_sent;
  run.bytes_received = result.bytes_received;
  return finish_run(a, std::move(run), result.model, result.external_files, result.kept_files,
                    a.input == "-" ? std::string() : folder_of(a.input).string(), streamed,
                    &config);
}

// The output file a remote result is streamed to as it arrives (nullopt for standard output or
// no output: those get the model whole), and the sink that writes it.
struct StreamedOutput {
  std::optional<paths::AtomicFileWriter> writer;
  client::ModelSink sink;
  paths::AtomicFileWriter* get() { return writer ? &*writer : nullptr; }
};

absl::Status open_streamed_output(const OptimizeArgs& a, StreamedOutput* out) {
  if (a.output.empty() || a.output == "-") return absl::OkStatus();
  auto writer = paths::AtomicFileWriter::open(a.output);
  if (!writer.ok()) return writer.status();
  out->writer.emplace(std::move(*writer));
  paths::AtomicFileWriter* w = &*out->writer;
  out->sink.write = [w](std::string_view piece) { return w->append(piece); };
  out->sink.restart = [w] { return w->restart(); };
  return absl::OkStatus();
}

// Progress of hashing external-data files (a multi-GB model takes a while).
std::function<void(uint64_t, uint64_t)> hashing_bar() {
  if (!::isatty(2)) return nullptr;
  return [shown = uint64_t{0}](uint64_t done, uint64_t total) mutable {
    if (total < (64u << 20)) return;
    if (done != total && done - shown < (64u << 20)) return;
    shown = done;
    int pct = total ? static_cast<int>(100 * done / total) : 100;
    std::fprintf(stderr, "\rhashing  [%-40s] %3d%% %.1f MiB",
                 std::string(pct * 40 / 100, '#').c_str(), pct, done / 1048576.0);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
}

uint64_t total_size(const client::ExternalSources& sources) {
  uint64_t total = 0;
  for (const auto& s : sources) total += s.size;
  return total;
}

// The model's external-data files (`locations`, from external_locations), as sources read
// from the input's folder in pieces, each name checked and each file hashed (in blocks, with a
// bar on a terminal). Returns an exit code: kOk, or the failure already reported.
int external_sources(const OptimizeArgs& a, const std::set<std::string>& locations,
                     client::ExternalSources* sources) {
  sources->clear();
  for (const auto& name : locations) {
    if (auto st = paths::check_location(name); !st.ok())
      return fail(kBadModel, a.input + ": " + std::string(st.message()));
    client::ExternalSource s;
    s.name = name;
    s.folder = folder_of(a.input).string();
    sources->push_back(std::move(s));
  }
  if (auto st = client::digest_sources(*sources, hashing_bar(), client::default_digest_cache(),
                                       /*recall=*/!a.rehash);
      !st.ok())
    return fail(path_exit_code(st), std::string(st.message()));
  return kOk;
}

// Remote: asks Lookup first (unless --no-lookup) with the digest of the file read in blocks, so
// a hit never holds the input in memory; otherwise (a miss, standard input, a model that may
// have external data) reads it whole and sends it.
int optimize_remote(const OptimizeArgs& a, const std::string& server,
                    const PipelineConfig& config) {
  if (!a.dump_dir.empty()) return fail(kUsage, "--dump-dir needs --local");
  if (a.verify_max_bytes_given)
    return fail(kUsage,
                "--verify-max-bytes needs --local (a server verifies within its own "
                "verify_max_bytes)");
  auto client = connect(server, a.tls);
  if (!client.ok()) return fail_connect(client.status());
  std::optional<std::chrono::milliseconds> timeout;
  if (a.timeout_seconds > 0)
    timeout = std::chrono::milliseconds(static_cast<int64_t>(a.timeout_seconds * 1000));
  const client::Deadline deadline = client::deadline_in(timeout);  // the Lookup and the upload
  const v1::PipelineConfig proto_config = api::to_proto(config);
  // The output file is written as the result arrives (never held whole).
  StreamedOutput output;
  if (auto st = open_streamed_output(a, &output); !st.ok())
    return fail(path_exit_code(st), std::string(st.message()));
  std::string digest;
  bool looked_up = false;
  std::string bytes, error;
  bool have_bytes = false;
  client::ExternalSources sources;
  // Reads the model (small: the weights of a model with external data are in its files), and
  // lists and hashes its files.
  auto read_model = [&]() -> int {
    if (!read_input(a.input, &bytes, &error)) return fail(kIoError, error);
    have_bytes = true;
    auto locations = external_locations(bytes);
    if (!locations.ok())
      return fail(kBadModel, a.input + ": " + std::string(locations.status().message()));
    return external_sources(a, *locations, &sources);
  };
  if (!a.no_lookup && a.input != "-") {
    auto d = digest_model(a.input, a.rehash);
    if (!d.ok()) return fail(kIoError, std::string(d.status().message()));
    digest = d->sha256;
    // The key covers the files: each is hashed (in pieces), and the digests are sent along.
    if (d->mentions_location)
      if (int rc = read_model(); rc != kOk) return rc;
    const std::string input_digest = client::input_digest_of(d->sha256, sources);
    client::Progress bar = progress_bar(d->size);
    auto cached = client->fetch_cached(input_digest, proto_config, deadline, bar, output.sink);
    if (bar) std::fprintf(stderr, "\n");
    if (!cached.ok()) return fail_remote(cached.status());
    if (*cached) {
      if (auto st = client::check_kept_files(**cached, sources); !st.ok()) return fail_remote(st);
      return report_remote(a, server, std::move(**cached), d->size, "hit", output.get(), config);
    }
    looked_up = true;
  }
  if (!have_bytes)
    if (int rc = read_model(); rc != kOk) return rc;
  client::SendOptions send;
  send.deadline = deadline;
  send.progress = progress_bar(bytes.size() + total_size(sources));
  // Standard input, or --no-lookup.
  send.lookup_first = !a.no_lookup && !looked_up;
  // Already hashed in blocks when it was looked up (the digest only routes the call: graftd
  // hashes what it receives); otherwise the client hashes the bytes.
  send.model_sha256 = digest;
  send.model_sink = output.sink;
  const bool bar = static_cast<bool>(send.progress);
  auto result = client->optimize(bytes, proto_config, send, sources);
  if (bar) std::fprintf(stderr, "\n");  // ends the download line
  if (!result.ok()) return fail_remote(result.status());
  std::string lookup;
  if (looked_up) lookup = "miss";
  if (send.lookup_first) lookup = result->from_lookup ? "hit" : "miss";
  return report_remote(a, server, std::move(*result), bytes.size(), lookup, output.get(), config);
}

int optimize(const OptimizeArgs& a) {
  auto config = pipeline_config(a);
  if (!config.ok()) return fail(kUsage, std::string(config.status().message()));
  std::string server = resolve_server(a.server);
  if (!a.local && server.empty())
    return fail(kUsage,
                "say where to optimize: --local (in-process) or --server HOST:PORT "
                "(or set GRAFT_SERVER)");
  if (a.local) {
    if (auto names = resolve_passes(*config); !names.ok())
      return fail(kUsage, std::string(names.status().message()));
  }
  if (!a.local) {
    if (int rc = add_input_data(a, &*config, [&] { return model_file(a.input); }); rc != kOk)
      return rc;
    if (api::input_sets_bytes(config->verify_options.input_sets) +
            api::input_sets_bytes(config->calibration_sets) >
        api::kMaxInputSetBytes)
      return fail(kUsage,
                  absl::StrCat("--verify-data, --calibration-data: a request carries at most ",
                               api::kMaxInputSetBytes,
                               " bytes of input data; use fewer or smaller sets, or "
                               "--local"));
    return optimize_remote(a, server, *config);
  }
  std::string bytes, error;
  if (!read_input(a.input, &bytes, &error)) return fail(kIoError, error);
  if (int rc = add_input_data(a, &*config, [&] { return absl::StatusOr<std::string>(bytes); });
      rc != kOk)
    return rc;
  return optimize_local(a, *config, std::move(bytes));
}

int lookup(const OptimizeArgs& a) {
  auto config = pipeline_config(a);
  if (!config.ok()) return fail(kUsage, std::string(config.status().message()));
  std::string server = resolve_server(a.server);
  if (server.empty()) return fail(kUsage, "lookup needs --server HOST:PORT (or GRAFT_SERVER)");
  if (int rc = add_input_data(a, &*config, [&] { return model_file(a.input); }); rc != kOk)
    return rc;
  std::string digest = a.sha256;
  client::ExternalSources sources;
  if (digest.empty()) {
    if (a.input.empty()) return fail(kUsage, "give a model file or --sha256");
    std::string model_sha256;
    bool read_model = a.input == "-";
    if (!read_model) {
      auto d = digest_model(a.input, a.rehash);
      if (!d.ok()) return fail(path_exit_code(d.status()), std::string(d.status().message()));
      model_sha256 = d->sha256;
      read_model = d->mentions_location;
    }
    if (read_model) {
      std::string bytes, error;
      if (!read_input(a.input, &bytes, &error)) return fail(kIoError, error);
      if (model_sha256.empty()) model_sha256 = cache::sha256_hex(bytes);
      // A model with external data is keyed by its files' digests too.
      auto locations = external_locations(bytes);
      if (!locations.ok())
        return fail(kBadModel, a.input + ": " + std::string(locations.status().message()));
      if (!locations->empty() && a.input == "-")
        return fail(kUsage, "a model with external-data files must be given as a file");
      if (int rc = external_sources(a, *locations, &sources); rc != kOk) return rc;
    }
    digest = client::input_digest_of(model_sha256, sources);
  }
  auto client = connect(server, a.tls);
  if (!client.ok()) return fail_connect(client.status());
  auto result = client->lookup(digest, api::to_proto(*config), !a.output.empty());
  if (!result.ok()) return fail_remote(result.status());
  std::cout << digest << (result->cached ? " cached" : " not cached") << "\n";
  if (!result->cached) return kNotCached;
  if (result->result) {
    RunSummary run;
    run.input = a.input.empty() ? digest : a.input;
    run.input_bytes = result->result->report.input_bytes();
    run.output_bytes = result->result->model.size();
    run.pipeline = api::to_pipeline_report(result->result->report);
    run.graft_version = result->result->report.graft_version();
    run.build_fingerprint = result->result->report.build_fingerprint();
    run.server = server;
    run.cache_hit = true;
    run.lookup = "hit";
    run.bytes_received = result->result->bytes_received;
    run.input_sha256 = digest;
    run.output_sha256 = result->result->report.output_sha256();
    if (auto st = client::check_kept_files(*result->result, sources); !st.ok())
      return fail_remote(st);
    return finish_run(
        a, std::move(run), result->result->model, result->result->external_files,
        result->result->kept_files,
        a.input.empty() || a.input == "-" ? std::string() : folder_of(a.input).string(), nullptr,
        &*config);
  }
  return kOk;
}

int list_passes(const std::string& server_flag, const tls::ClientOptions& tls) {
  std::string server = resolve_server(server_flag);
  std::vector<PassInfo> passes;
  std::string version = graft_version(), fingerprint = build_fingerprint();
  if (server.empty()) {
    passes = all_passes();
  } else {
    auto client = connect(server, tls);
    if (!client.ok()) return fail_connect(client.status());
    auto response = client->list_passes();
    if (!response.ok()) return fail_remote(response.status());
    for (const auto& p : response->passes()) passes.push_back(api::from_proto(p));
    version = response->graft_version();
    fingerprint = response->build_fingerprint();
  }
  std::printf("%-22s %-6s %s\n", "pass", "level", "description");
  for (const auto& p : passes) {
    const std::string level = p.by_name_only ? "name" : "O" + std::to_string(p.level);
    const std::string lossy =
        p.lossy ? absl::StrCat("[lossy; kept if every output has rel <= ", p.gate.max_rel,
                               " and cosine >= ", p.gate.min_cosine, "] ")
                : "";
    std::printf("%-22s %-6s %s%s\n", p.name.c_str(), level.c_str(), lossy.c_str(),
                p.description.c_str());
    for (const auto& o : p.options)
      std::printf("%-29s option %s (%s): %s\n", "", o.name.c_str(), option_summary(o).c_str(),
                  o.help.c_str());
  }
  std::printf(
      "\nlevels: O0 runs nothing; O1 safe cleanups; O2 (default) adds fusions; O3 adds the "
      "O3 passes, lossy ones included (float16); \"name\": only when named with --passes\n"
      "lossy passes run only at O3 or when named; their error is measured, reported and held to "
      "their gate (--max-error, --min-cosine replace it); one whose error cannot be measured is "
      "rolled back unless --accept-unmeasured-error\noptions: --option PASS.OPTION=VALUE "
      "(repeatable)\n");
  // The cache serves a result only to the build that computed it (docs/shared-cache.md).
  const std::string who = server.empty() ? "this CLI" : "server " + server;
  std::printf("%s: graft %s, build %s\n", who.c_str(), version.c_str(), fingerprint.c_str());
  return kOk;
}

int health(const std::string& server_flag, const tls::ClientOptions& tls) {
  std::string server = resolve_server(server_flag);
  if (server.empty()) return fail(kUsage, "health needs --server HOST:PORT (or GRAFT_SERVER)");
  auto client = connect(server, tls);
  if (!client.ok()) return fail_connect(client.status());
  auto serving = client->serving();
  if (!serving.ok()) return fail_remote(serving.status());
  std::cout << (*serving ? "SERVING" : "NOT_SERVING") << "\n";
  return *serving ? kOk : kServer;
}

// graft report: a saved JSON report as an HTML page. Takes the CLI's --report JSON, and a
// graft.v1.OptimizeReport as JSON (graftd's, the Python client's report_json()).
int render_report(const OptimizeArgs& a) {
  // Never more than the largest report is read: a bigger input is a usage error, as it is not a
  // report.
  auto text = a.input == "-"
                  ? paths::read_all(STDIN_FILENO, "standard input", 0, kMaxSavedReportBytes)
                  : paths::read_file(a.input, kMaxSavedReportBytes);
  if (!text.ok() && text.status().code() == absl::StatusCode::kResourceExhausted)
    return fail(kUsage, std::string(text.status().message()) + ": not a report");
  if (!text.ok()) return fail(path_exit_code(text.status()), std::string(text.status().message()));
  std::string error;
  std::optional<nlohmann::json> report = parse_saved_report(*text, &error);
  if (!report) return fail(kUsage, a.input + ": " + error);
  std::string out = a.output;
  if (out.empty()) {
    if (a.input == "-") return fail(kUsage, "give -o FILE (or -) for a report on standard input");
    out = std::filesystem::path(a.input).replace_extension(".html").string();
  }
  if (!write_output(out, render_html(*report), &error)) return fail(kIoError, error);
  return kOk;
}

}  // namespace
}  // namespace graft::cli

int main(int argc, char** argv) {
  using namespace graft::cli;
  CLI::App app{"graft: ONNX graph optimizer"};
  app.require_subcommand(1);
  app.footer(
      "exit codes: 0 ok, 1 lookup: not cached, 2 bad arguments or configuration, 3 invalid "
      "input model, 4 I/O error, 5 internal error, 6 server unreachable, busy, out of time or "
      "cancelled");

  OptimizeArgs args;
  // Options that mean nothing without --verify or --verify-data (checked after parsing).
  std::vector<CLI::Option*> needs_verification;
  auto add_pipeline_options = [&](CLI::App* cmd) {
    auto* level =
        cmd->add_option("--level", args.level, "optimization level O0..O3")->capture_default_str();
    cmd->add_option("--target", args.target,
                    "the runtime the result is for: onnx (standard ops, any runtime), "
                    "onnxruntime or onnxruntime:MAJOR.MINOR (also ONNX Runtime's com.microsoft "
                    "fused ops that version's CPU provider has; default version 1.18)")
        ->capture_default_str();
    cmd->add_option("--target-opset", args.target_opset,
                    "raise the model's opset to N (13..23) first, converting the nodes whose "
                    "schema changed, so newer fused ops may be written (e.g. 17: "
                    "LayerNormalization); never lowers; 0 keeps it")
        ->capture_default_str();
    // A repeatable option takes one value per occurrence: CLI11 would otherwise let a list
    // option swallow the arguments after it (`--option a.b=1 in.onnx` losing the input).
    auto one_value = [](CLI::Option* o) { return o->allow_extra_args(false); };
    one_value(
        cmd->add_option("--passes", args.passes, "explicit ordered pass list (comma separated)"))
        ->delimiter(',')
        ->excludes(level);
    one_value(cmd->add_option("--option", args.options,
                              "pass option as PASS.OPTION=VALUE (repeatable; `graft passes` "
                              "lists them)"));
    cmd->add_option("--max-rounds", args.max_rounds, "fixed-point rounds at most")
        ->capture_default_str();
    cmd->add_flag("--check", args.check,
                  "run the ONNX checker and shape inference after each changing pass (slower)");
    auto* verify = cmd->add_flag(
        "--verify", args.verify,
        "run the original and optimized model on random inputs with the reference evaluator and "
        "compare the outputs; a pass that changes them is rolled back");
    one_value(cmd->add_option(
                  "--verify-dim", args.verify_dims,
                  "value of a symbolic input dim, NAME=N; *=N for every unnamed or unlisted "
                  "one (default: the first of 1, 16, 64, 256 the original runs with) (repeatable)"))
        ->needs(verify);
    one_value(cmd->add_option("--verify-shape", args.verify_shapes,
                              "an input's full shape, INPUT=D,D,... (repeatable)"))
        ->needs(verify);
    one_value(cmd->add_option(
                  "--verify-value", args.verify_values,
                  "fill an input with one number instead of random ones, INPUT=V (repeatable)"))
        ->needs(verify);
    cmd->add_option("--verify-seed", args.verify_seed, "random input seed")
        ->capture_default_str()
        ->needs(verify);
    cmd->add_option("--verify-trials", args.verify_trials, "input sets to compare on (1..16)")
        ->capture_default_str()
        ->needs(verify);
    // The tolerances also apply to --verify-data, which implies --verify (checked after parsing).
    needs_verification.push_back(
        cmd->add_option("--verify-rtol", args.verify_rtol, "relative tolerance for float outputs")
            ->capture_default_str());
    needs_verification.push_back(
        cmd->add_option("--verify-atol", args.verify_atol, "absolute tolerance for float outputs")
            ->capture_default_str());
    one_value(cmd->add_option(
        "--verify-data", args.verify_data,
        "verify on recorded inputs (implies --verify; replaces the random ones) in ONNX test-data "
        "form: FILE.pb (a serialized TensorProto, for the input it names, else the one at its "
        "position), NAME=FILE.pb, or a folder of input_<N>.pb files or of test_data_set_<N> "
        "folders (one input set each); single files together make one set; at most 16 sets "
        "(repeatable)"));
    one_value(cmd->add_option(
        "--calibration-data", args.calibration_data,
        "recorded inputs the lossy passes learn value ranges from (quantize_static_int8's "
        "scales, convert_fp16's activations), in --verify-data's forms; without it they use "
        "random inputs and the report says so (repeatable)"));
    cmd->add_option("--max-error", args.max_error,
                    "a lossy pass (convert_fp16, quantize_dynamic_int8) is kept only if every "
                    "float output's relative error (worst absolute difference over the output's "
                    "largest magnitude) is at most this; default: the pass's own gate "
                    "(`graft passes`)")
        ->check(CLI::Range(0.0, 1e300));
    cmd->add_option("--min-cosine", args.min_cosine,
                    "a lossy pass is kept only if every float output's cosine similarity to the "
                    "original's is at least this; default: the pass's own gate")
        ->check(CLI::Range(-1.0, 1.0));
    cmd->add_flag("--accept-unmeasured-error", args.accept_unmeasured_error,
                  "keep a lossy pass whose error cannot be measured (the evaluator cannot run the "
                  "model); by default it is rolled back");
    one_value(cmd->add_option(
        "--explain", args.explain,
        "PASS or PASS/RULE: for each node a rule of that pass was tried on and did not rewrite "
        "(in the pass's last run), print why, e.g. 'fuse_blocks/layer_norm at /ln/Div (Div): "
        "epsilon is not a constant'; rules are listed per pass in the report (repeatable)"));
    one_value(cmd->add_option(
        "--fix-dim", args.fix_dims,
        "make a symbolic input dim static before optimizing, NAME=N (N >= 1): every input dim "
        "named NAME becomes N, so what follows from it (shape arithmetic, Reshape targets) "
        "folds; the output accepts only that size (repeatable)"));
    one_value(cmd->add_option(
        "--fix-shape", args.fix_shapes,
        "give an input static dims before optimizing, INPUT=D,D,... (each >= 1; dims the model "
        "declares static must be equal) (repeatable)"));
    one_value(cmd->add_option(
        "--dim", args.dims,
        "size of a symbolic dim for the memory estimates of the report, NAME=N; *=N for every "
        "other symbolic or unknown dim (default: the --verify-dim values, else 1) (repeatable)"));
  };
  auto add_server = [&](CLI::App* cmd) {
    cmd->add_option("--server", args.server, "graftd address HOST:PORT (default: $GRAFT_SERVER)");
    cmd->add_flag("--tls", args.tls.enabled,
                  "connect with TLS; implied by the four options below (default: $GRAFT_TLS)");
    cmd->add_option("--ca", args.tls.ca_file,
                    "PEM CA bundle that signs the server's certificate (default: $GRAFT_TLS_CA, "
                    "else the system's trusted CAs)");
    cmd->add_option("--cert", args.tls.cert_file,
                    "PEM client certificate, for servers that require one (mTLS) (default: "
                    "$GRAFT_TLS_CERT)");
    cmd->add_option("--key", args.tls.key_file,
                    "PEM private key of --cert, unencrypted (default: $GRAFT_TLS_KEY)");
    cmd->add_option("--server-name", args.tls.server_name,
                    "name the server's certificate must carry, when it differs from the host in "
                    "--server (default: $GRAFT_TLS_SERVER_NAME)");
  };

  auto* opt = app.add_subcommand("optimize", "optimize an ONNX model");
  opt->add_option("input", args.input, "input model (.onnx), - for standard input")->required();
  opt->add_option("-o,--output", args.output,
                  "where to write the optimized model, - for standard output (omit for a "
                  "report-only dry run)");
  auto* local =
      opt->add_flag("--local", args.local, "run the pipeline in this process (no server)");
  add_server(opt);
  for (const char* remote_only : {"--server", "--tls", "--ca", "--cert", "--key", "--server-name"})
    opt->get_option(remote_only)->excludes(local);
  opt->add_option("--timeout", args.timeout_seconds, "remote: deadline in seconds")
      ->check(CLI::Range(0.0, 1e9));
  add_pipeline_options(opt);
  opt->add_option("--report", args.report_path, "write the per-pass report as JSON here");
  opt->add_option("--report-html", args.report_html,
                  "write the report as a self-contained HTML page here (summary, passes, op "
                  "types, memory, verification; opens offline)");
  opt->add_option("--dump-dir", args.dump_dir,
                  "local: write the graph as ONNX text after each pass that changed it");
  opt->add_option("--verify-max-bytes", args.verify_max_bytes,
                  "local: bytes of tensors the verification may hold at once (graftd: its "
                  "verify_max_bytes); a model that needs more is reported not verifiable")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, std::numeric_limits<uint64_t>::max() >> 1));
  needs_verification.push_back(opt->get_option("--verify-max-bytes"));
  opt->add_flag("-q,--quiet", args.quiet, "do not print the per-pass table");
  opt->add_flag("--no-lookup", args.no_lookup,
                "remote: send the model without first asking the server whether it has the "
                "result cached (by the model's sha256)");
  const char* rehash_help =
      "hash the model and its files again instead of recalling the digests remembered for them "
      "in $GRAFT_DIGEST_CACHE (default ~/.cache/graft/digests; kept while a file's size, "
      "modification time and inode stay the same)";
  opt->add_flag("--rehash", args.rehash, rehash_help);

  auto* report_cmd = app.add_subcommand(
      "report", "render a saved JSON report (graft optimize --report, or graftd's) as HTML");
  report_cmd->add_option("report", args.input, "the JSON report, - for standard input")->required();
  report_cmd->add_option("-o,--output", args.output,
                         "the HTML page to write, - for standard output (default: the report's "
                         "name with .html)");

  auto* passes = app.add_subcommand("passes", "list every pass with its level and description");
  add_server(passes);

  auto* health_cmd = app.add_subcommand("health", "ask a server whether it is serving");
  add_server(health_cmd);

  auto* lookup_cmd = app.add_subcommand(
      "lookup", "ask a server whether a model's result is cached (exit 0) or not (exit 1)");
  lookup_cmd->add_option("input", args.input, "model file whose digest to look up");
  lookup_cmd->add_option("--sha256", args.sha256, "the model's sha256 instead of the file");
  lookup_cmd->add_option("-o,--output", args.output, "fetch the cached optimized model here");
  lookup_cmd->add_option("--report", args.report_path, "write the cached report as JSON here");
  lookup_cmd->add_option("--report-html", args.report_html,
                         "write the cached report as an HTML page here");
  lookup_cmd->add_flag("--rehash", args.rehash, rehash_help);
  lookup_cmd->add_flag("-q,--quiet", args.quiet, "do not print the per-pass table");
  add_server(lookup_cmd);
  add_pipeline_options(lookup_cmd);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kOk : kUsage;
  }
  args.verify_max_bytes_given = opt->get_option("--verify-max-bytes")->count() > 0;
  for (const CLI::Option* o : needs_verification)
    if (o->count() > 0 && !args.verify && args.verify_data.empty()) {
      return fail(kUsage, o->get_name() + " requires --verify or --verify-data");
    }
  // gRPC logs failed TLS handshakes on stderr itself; the CLI reports them once, in its own
  // message (GRPC_VERBOSITY set: gRPC's logs are wanted).
  if (!std::getenv("GRPC_VERBOSITY")) gpr_set_log_function([](gpr_log_func_args*) {});
  try {
    if (app.got_subcommand("report")) return render_report(args);
    if (app.got_subcommand("passes")) return list_passes(args.server, args.tls);
    if (app.got_subcommand("health")) return health(args.server, args.tls);
    if (app.got_subcommand("lookup")) return lookup(args);
    return optimize(args);
  } catch (const std::exception& e) {
    std::cerr << "graft: internal error: " << e.what() << "\n";
    return kInternal;
  }
}
