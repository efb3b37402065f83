// `graft optimize --verify-data`: recorded inputs in the ONNX backend test-data layout (a
// serialized onnx.TensorProto per file) read as verification input sets.
//
// Each argument is one of:
//   FILE         one tensor (input_0.pb); its input is the tensor's own name, else its position
//   NAME=FILE    one tensor for input NAME (when the argument is not itself an existing path)
//   DIR          with test_data_set_* subfolders: one input set per subfolder (in numeric order),
//                each made of its input_<N>.pb files; otherwise one input set of DIR's
//                input_<N>.pb files (N = 0, 1, ...: the position)
// The single files of all FILE and NAME=FILE arguments form one input set, in argument order.
// A tensor without a name (and no NAME=) feeds the graph input at its position in its set among
// the inputs that are not initializers, as ONNX's test runner does.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <absl/status/statusor.h>

#include "core/eval/tensor.h"

namespace graft::cli {

struct DataTensor {
  std::string name;  // empty: fed by position
  eval::Tensor tensor;
  std::string source;  // the file, for messages
};
using DataSet = std::vector<DataTensor>;  // in position order

// Reads every argument's files. NotFound/PermissionDenied for files that cannot be read,
// InvalidArgument (naming the file) for anything else: a folder without input files, a file that
// is not a valid inline TensorProto (eval::parse_input_tensor), more than 16 sets. Messages
// start with `flag`, the option the arguments came with (--verify-data, --calibration-data).
absl::StatusOr<std::vector<DataSet>> read_verify_data(const std::vector<std::string>& args,
                                                      uint64_t max_tensor_bytes,
                                                      const std::string& flag = "--verify-data");

// Whether some tensor needs the model's input names (it has neither NAME= nor a name of its own).
bool needs_input_names(const std::vector<DataSet>& sets);

// The input sets by input name; an unnamed tensor at position i of its set takes inputs[i].
// InvalidArgument for a position past the inputs or two tensors for one input of a set.
absl::StatusOr<std::vector<std::map<std::string, eval::Tensor>>> name_input_sets(
    std::vector<DataSet> sets, const std::vector<std::string>& inputs,
    const std::string& flag = "--verify-data");

// The names of a serialized model's main-graph inputs that are not initializers, in order.
absl::StatusOr<std::vector<std::string>> feedable_inputs(std::string_view model_bytes);

}  // namespace graft::cli
