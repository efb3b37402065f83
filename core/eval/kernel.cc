#include "core/eval/kernel.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>

#include <absl/strings/str_cat.h>

#include "core/base/status.h"
#include "core/eval/kernels.h"
#include "core/ir/operands.h"

namespace graft::eval {

namespace {

struct Entry {
  int since;
  int until;  // 0 = open-ended
  Kernel kernel;
};

using Registry = std::map<std::string, std::vector<Entry>, std::less<>>;

// The default ONNX domain's kernels by op type.
Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

// Other domains' kernels (com.microsoft: kernels/contrib.cc) by domain, then op type.
std::map<std::string, Registry, std::less<>>& domain_registry() {
  static auto* r = new std::map<std::string, Registry, std::less<>>();
  return *r;
}

const Kernel* find_in(const Registry& r, std::string_view op, int64_t opset) {
  auto it = r.find(op);
  if (it == r.end()) return nullptr;
  for (const Entry& e : it->second) {
    if (opset >= e.since && (e.until == 0 || opset <= e.until)) return &e.kernel;
  }
  return nullptr;
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
    register_quantize_dynamic_kernels();
    register_detection_kernels();
    register_contrib_kernels();
    register_attention_kernels();
    register_rotary_kernels();
  });
}

}  // namespace

absl::StatusOr<Tensor*> KernelContext::make_output(size_t i, int32_t dtype,
                                                   std::vector<int64_t> dims) {
  if (i >= outputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        node.op_type(), ": output ", i, " does not exist (node has ", outputs.size(), ")"));
  }
  ASSIGN_OR_RETURN(Tensor t, Tensor::zeros(dtype, std::move(dims), limits.max_tensor_bytes));
  spend_work(static_cast<uint64_t>(t.size()));
  outputs[i] = std::move(t);
  return &outputs[i];
}

absl::Status KernelContext::afford(double units) const {
  if (Budget* b = current_budget()) return b->afford(units);
  return absl::OkStatus();
}

void register_kernel(std::string op, int since_version, int until_version, Kernel kernel) {
  registry()[std::move(op)].push_back({since_version, until_version, std::move(kernel)});
}

void register_kernel(std::string domain, std::string op, int since_version, int until_version,
                     Kernel kernel) {
  domain_registry()[std::move(domain)][std::move(op)].push_back(
      {since_version, until_version, std::move(kernel)});
}

const Kernel* find_kernel(std::string_view op, std::string_view domain, int64_t opset) {
  ensure_registered();
  if (ir::is_onnx_domain(domain)) return find_in(registry(), op, opset);
  auto it = domain_registry().find(domain);
  return it == domain_registry().end() ? nullptr : find_in(it->second, op, opset);
}

std::vector<std::pair<int, int>> kernel_versions(std::string_view op) {
  ensure_registered();
  std::vector<std::pair<int, int>> out;
  auto it = registry().find(op);
  if (it != registry().end())
    for (const Entry& e : it->second) out.emplace_back(e.since, e.until);
  return out;
}

absl::StatusOr<std::vector<Tensor>> run_kernel(const ir::Node& node,
                                               std::vector<const Tensor*> inputs,
                                               const Limits& limits) {
  auto named = [&](const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat(node.op_type(), " '", node.name(),
                                                "': ", std::string(st.message())));
  };
  // Newer opsets than libonnx knows are checked against the newest schema it has: the evaluator
  // runs them, so it must not trust them more.
  RETURN_IF_ERROR(ir::check_operands(node, /*clamp_to_known_opset=*/true));
  const Kernel* kernel = find_kernel(node.op_type(), node.domain(), node.opset());
  if (!kernel)
    return absl::UnimplementedError(
        absl::StrCat("the evaluator cannot run ", node.op_type(), " (opset ", node.opset(), ")"));
  std::shared_ptr<Budget> own;
  std::optional<BudgetScope> scope;
  if (!current_budget()) {
    std::function<absl::Status()> poll;
    if (limits.should_continue && *limits.should_continue) poll = *limits.should_continue;
    own = Budget::make(limits.max_live_bytes, limits.max_work, std::move(poll));
    scope.emplace(own.get());
  }
  KernelContext ctx{node, node.opset(), std::move(inputs), {}, limits};
  ctx.outputs.resize(node.outputs().size());
  try {
    if (auto st = (*kernel)(ctx); !st.ok()) return named(st);
  } catch (const Stop& stop) {
    return named(stop.status());
  } catch (const std::bad_alloc&) {
    return named(absl::ResourceExhaustedError("out of memory"));
  }
  return std::move(ctx.outputs);
}

std::vector<std::string> supported_ops() {
  ensure_registered();
  std::vector<std::string> ops;
  for (const auto& [name, entries] : registry()) ops.push_back(name);
  return ops;
}

std::vector<std::string> supported_domain_ops() {
  ensure_registered();
  std::vector<std::string> ops;
  for (const auto& [domain, r] : domain_registry())
    for (const auto& [name, entries] : r) ops.push_back(absl::StrCat(domain, ":", name));
  return ops;
}

}  // namespace graft::eval
