#include "client/verify_data.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include <absl/strings/str_cat.h>
#include <onnx/onnx_pb.h>

#include "core/base/status.h"
#include "core/eval/verify.h"
#include "core/paths/files.h"

namespace graft::cli {

namespace fs = std::filesystem;

namespace {

// The N of "<prefix><N><suffix>", or -1.
int64_t numbered(const std::string& name, std::string_view prefix, std::string_view suffix) {
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

// Entries of `dir` named <prefix><N><suffix>, by N.
absl::StatusOr<std::vector<fs::path>> numbered_entries(const fs::path& dir, std::string_view prefix,
                                                       std::string_view suffix, bool folders) {
  std::map<int64_t, fs::path> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const int64_t n = numbered(it->path().filename().string(), prefix, suffix);
    if (n < 0) continue;
    std::error_code type_ec;
    if (folders ? it->is_directory(type_ec) : it->is_regular_file(type_ec))
      found.emplace(n, it->path());
  }
  if (ec)
    return absl::Status(paths::errno_code(ec.value()),
                        absl::StrCat("cannot list '", dir.string(), "': ", ec.message()));
  std::vector<fs::path> out;
  for (auto& [n, path] : found) out.push_back(std::move(path));
  return out;
}

absl::StatusOr<DataTensor> read_tensor(const fs::path& path, std::string name,
                                       uint64_t max_tensor_bytes, const std::string& flag) {
  // A TensorProto's encoding is never much larger than its data: the cap bounds the read.
  ASSIGN_OR_RETURN(std::string bytes,
                   paths::read_file(path.string(), max_tensor_bytes + (1u << 20)));
  std::string own_name;
  auto t = eval::parse_input_tensor(bytes, max_tensor_bytes, &own_name);
  if (!t.ok())
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", path.string(), "': ", t.status().message()));
  return DataTensor{name.empty() ? own_name : std::move(name), std::move(*t), path.string()};
}

absl::StatusOr<DataSet> read_folder_set(const fs::path& dir, uint64_t max_tensor_bytes,
                                        const std::string& flag) {
  ASSIGN_OR_RETURN(std::vector<fs::path> files,
                   numbered_entries(dir, "input_", ".pb", /*folders=*/false));
  if (files.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " '", dir.string(), "': no input_<N>.pb files and no test_data_set_<N> folders"));
  DataSet set;
  for (const auto& f : files) {
    ASSIGN_OR_RETURN(DataTensor t, read_tensor(f, "", max_tensor_bytes, flag));
    set.push_back(std::move(t));
  }
  return set;
}

}  // namespace

absl::StatusOr<std::vector<DataSet>> read_verify_data(const std::vector<std::string>& args,
                                                      uint64_t max_tensor_bytes,
                                                      const std::string& flag) {
  std::vector<DataSet> sets;
  DataSet loose;
  size_t loose_at = 0;  // where the set of single files goes: at its first file
  for (const auto& arg : args) {
    std::error_code ec;
    std::string name;
    fs::path path = arg;
    const auto eq = arg.find('=');
    if (!fs::exists(path, ec) && eq != std::string::npos && eq > 0) {
      name = arg.substr(0, eq);
      path = arg.substr(eq + 1);
    }
    if (name.empty() && fs::is_directory(path, ec)) {
      ASSIGN_OR_RETURN(std::vector<fs::path> subsets,
                       numbered_entries(path, "test_data_set_", "", /*folders=*/true));
      if (subsets.empty()) subsets.push_back(path);
      for (const auto& dir : subsets) {
        ASSIGN_OR_RETURN(DataSet set, read_folder_set(dir, max_tensor_bytes, flag));
        sets.push_back(std::move(set));
        if (sets.size() > static_cast<size_t>(eval::kMaxInputSets))
          return absl::InvalidArgumentError(
              absl::StrCat(flag, ": more than ", eval::kMaxInputSets, " input sets"));
      }
      continue;
    }
    if (loose.empty()) loose_at = sets.size();
    ASSIGN_OR_RETURN(DataTensor t, read_tensor(path, name, max_tensor_bytes, flag));
    loose.push_back(std::move(t));
  }
  if (!loose.empty()) {
    sets.insert(sets.begin() + static_cast<std::ptrdiff_t>(loose_at), std::move(loose));
    if (sets.size() > static_cast<size_t>(eval::kMaxInputSets))
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": more than ", eval::kMaxInputSets, " input sets"));
  }
  return sets;
}

bool needs_input_names(const std::vector<DataSet>& sets) {
  for (const auto& set : sets)
    for (const auto& t : set)
      if (t.name.empty()) return true;
  return false;
}

absl::StatusOr<std::vector<std::map<std::string, eval::Tensor>>> name_input_sets(
    std::vector<DataSet> sets, const std::vector<std::string>& inputs, const std::string& flag) {
  std::vector<std::map<std::string, eval::Tensor>> out;
  for (size_t s = 0; s < sets.size(); ++s) {
    auto& named = out.emplace_back();
    for (size_t i = 0; i < sets[s].size(); ++i) {
      DataTensor& t = sets[s][i];
      if (t.name.empty()) {
        if (i >= inputs.size())
          return absl::InvalidArgumentError(absl::StrCat(
              flag, " '", t.source, "': the tensor has no name and its position ", i,
              " is past the model's ", inputs.size(), " inputs; name it with NAME=FILE"));
        t.name = inputs[i];
      }
      if (!named.emplace(t.name, std::move(t.tensor)).second)
        return absl::InvalidArgumentError(absl::StrCat(flag, " '", t.source, "': input set ", s + 1,
                                                       " has two tensors for input '", t.name,
                                                       "'"));
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> feedable_inputs(std::string_view model_bytes) {
  onnx::ModelProto model;
  if (model_bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !model.ParseFromArray(model_bytes.data(), static_cast<int>(model_bytes.size())))
    return absl::InvalidArgumentError("invalid model: not a serialized onnx.ModelProto");
  std::set<std::string> initializers;
  for (const auto& t : model.graph().initializer()) initializers.insert(t.name());
  std::vector<std::string> names;
  for (const auto& in : model.graph().input())
    if (!initializers.count(in.name())) names.push_back(in.name());
  return names;
}

}  // namespace graft::cli
