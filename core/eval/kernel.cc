#include "core/eval/kernel.h"

#include <algorithm>
#include <map>
#include <mutex>

#include <absl/strings/str_cat.h>

#include "core/eval/kernels.h"

namespace graft::eval {

namespace {

struct Entry {
  int since;
  int until;  // 0 = open-ended
  Kernel kernel;
};

std::map<std::string, std::vector<Entry>, std::less<>>& registry() {
  static auto* r = new std::map<std::string, std::vector<Entry>, std::less<>>();
  return *r;
}

// The groups register through register_kernel, which must not re-enter this once-guard.
void ensure_registered() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_elementwise_kernels();
    register_shape_kernels();
    register_reduce_kernels();
    register_nn_kernels();
    register_rnn_kernels();
    register_extra_kernels();
  });
}

}  // namespace

absl::StatusOr<Tensor*> KernelContext::make_output(size_t i, int32_t dtype,
                                                   std::vector<int64_t> dims) {
  if (i >= outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        node.op_type(), ": output ", i, " does not exist (node has ", outputs.size(), ")"));
  }
  auto t = Tensor::zeros(dtype, std::move(dims), limits.max_tensor_bytes);
  if (!t.ok()) return t.status();
  outputs[i] = std::move(*t);
  return &outputs[i];
}

void register_kernel(std::string op, int since_version, int until_version, Kernel kernel) {
  registry()[std::move(op)].push_back({since_version, until_version, std::move(kernel)});
}

const Kernel* find_kernel(std::string_view op, std::string_view domain, int64_t opset) {
  if (!ir::is_onnx_domain(domain)) return nullptr;
  ensure_registered();
  auto it = registry().find(op);
  if (it == registry().end()) return nullptr;
  for (const Entry& e : it->second) {
    if (opset >= e.since && (e.until == 0 || opset <= e.until)) return &e.kernel;
  }
  return nullptr;
}

std::vector<std::string> supported_ops() {
  ensure_registered();
  std::vector<std::string> ops;
  for (const auto& [name, entries] : registry()) ops.push_back(name);
  return ops;
}

}  // namespace graft::eval
