#include "client/cli/input_data.h"

#include <map>
#include <optional>
#include <vector>

#include "client/cli/options.h"
#include "client/exit_codes.h"
#include "client/verify_data.h"
#include "core/paths/files.h"

namespace graft::cli {
namespace {

// An input data read failing: DataLoss when the model itself does not parse (add_input_data), a
// bad model; InvalidArgument and ResourceExhausted a usage error; else an I/O error.
int fail_input_data(const absl::Status& st) {
  const bool usage = st.code() == absl::StatusCode::kInvalidArgument ||
                     st.code() == absl::StatusCode::kResourceExhausted;
  const int code = st.code() == absl::StatusCode::kDataLoss ? kBadModel : usage ? kUsage : kIoError;
  return fail(code, std::string(st.message()));
}

// --verify-data / --calibration-data (`flag`): reads `args` into input sets. `input_names`
// gives the model's feedable inputs when a tensor is fed by position. Returns an exit code:
// kOk, or the failure already reported.
int read_input_data(const std::vector<std::string>& args, const std::string& flag,
                    uint64_t max_tensor_bytes,
                    const std::function<absl::StatusOr<std::vector<std::string>>()>& input_names,
                    std::vector<std::map<std::string, eval::Tensor>>* out) {
  auto sets = read_verify_data(args, max_tensor_bytes, flag);
  if (!sets.ok()) return fail_input_data(sets.status());
  std::vector<std::string> inputs;
  if (needs_input_names(*sets)) {
    auto names = input_names();
    if (!names.ok()) return fail_input_data(names.status());
    inputs = std::move(*names);
  }
  auto named = name_input_sets(std::move(*sets), inputs, flag);
  if (!named.ok()) return fail_input_data(named.status());
  *out = std::move(*named);
  return kOk;
}

}  // namespace

int add_input_data(const PipelineArgs& a, const std::string& input, PipelineConfig* config,
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
        names = absl::DataLossError(input + ": " + std::string(found.status().message()));
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

absl::StatusOr<std::string> model_file(const std::string& path) {
  if (path.empty() || path == "-")
    return absl::InvalidArgumentError(
        "--verify-data, --calibration-data: a tensor without a name is fed by its position among "
        "the model's inputs, which needs the model as a file; name it with NAME=FILE");
  return paths::read_file(path);
}

}  // namespace graft::cli
