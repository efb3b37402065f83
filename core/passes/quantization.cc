#include "core/passes/quantization.h"

#include <algorithm>
#include <limits>

namespace graft {

OptionSpec min_weight_elements_option() {
  return integer_option(kMinWeightElements, 4096, 0, std::numeric_limits<int64_t>::max(),
                        "weights with fewer elements stay float");
}

OptionSpec exclude_ops_option(std::vector<std::string> default_ops, std::vector<std::string> ops,
                              std::string help) {
  return list_option(kExcludeOps, std::move(default_ops), std::move(ops), std::move(help));
}

OptionSpec exclude_nodes_option(std::string help) {
  return list_option(kExcludeNodes, {}, {}, std::move(help));
}

bool excluded_op(const std::vector<std::string>& excluded, std::string_view op) {
  return std::find(excluded.begin(), excluded.end(), op) != excluded.end();
}

WeightFilter weight_filter(const PassContext& ctx) {
  WeightFilter f;
  f.min_elements = ctx.int_option(kMinWeightElements);
  f.exclude_ops = ctx.list_option(kExcludeOps);
  f.exclude_nodes = ctx.list_option(kExcludeNodes);
  std::sort(f.exclude_nodes.begin(), f.exclude_nodes.end());
  return f;
}

std::optional<ActivationQuantization> activation_params(double lo, double hi, bool uint8) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) return std::nullopt;
  lo = std::min(lo, 0.0);
  hi = std::max(hi, 0.0);
  ActivationQuantization q;
  if (lo == 0 && hi == 0) return q;
  const double scale = uint8 ? (hi - lo) / 255.0 : std::max(-lo, hi) / 127.0;
  q.scale = static_cast<float>(scale);
  if (!(q.scale >= FLT_MIN) || !std::isfinite(q.scale)) return std::nullopt;
  if (uint8)
    q.zero_point = static_cast<int32_t>(std::clamp(std::nearbyint(-lo / q.scale), 0.0, 255.0));
  return q;
}

onnx::TensorProto byte_tensor(int32_t dtype, const std::vector<int64_t>& dims, std::string bytes) {
  onnx::TensorProto t;
  t.set_data_type(dtype);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::move(bytes));
  return t;
}

onnx::TensorProto zero_point_tensor(int32_t dtype, int32_t value) {
  return byte_tensor(dtype, {}, std::string(1, static_cast<char>(static_cast<uint8_t>(value))));
}

bool excluded_node(const ir::Node& node, const std::vector<std::string>& sorted_names) {
  return !node.name().empty() &&
         std::binary_search(sorted_names.begin(), sorted_names.end(), node.name());
}

}  // namespace graft
