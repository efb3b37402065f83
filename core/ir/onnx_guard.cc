// Guards in front of libonnx's shape inference (see onnx_guard.h).
#include "core/ir/onnx_guard.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <onnx/defs/shape_inference.h>

namespace graft::ir {
namespace {

using onnx::InferenceContext;

// Libonnx's count-down loop for SAME padding runs dim / stride times; past this, inference of
// the node is refused (no real spatial dim comes near it).
constexpr int64_t kMaxPaddingSteps = int64_t{1} << 24;

const onnx::TensorShapeProto* input_shape(const InferenceContext& ctx, size_t i) {
  if (i >= ctx.getNumInputs()) return nullptr;
  const onnx::TypeProto* t = ctx.getInputType(i);
  if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) return nullptr;
  return &t->tensor_type().shape();
}

const onnx::AttributeProto* ints_attr(const InferenceContext& ctx, const char* name) {
  const onnx::AttributeProto* a = ctx.getAttribute(name);
  return a && a->type() == onnx::AttributeProto::INTS ? a : nullptr;
}

// Conv, ConvInteger, QLinearConv, ConvTranspose, MaxPool, AveragePool and LpPool (every opset):
// X's rank fixes the spatial rank n that libonnx indexes the attributes and the weights' dims by.
// `weights` is the input holding W (-1 for pools).
void check_window(const InferenceContext& ctx, int weights) {
  const onnx::TensorShapeProto* x = input_shape(ctx, 0);
  if (!x || x->dim_size() < 2) return;  // libonnx infers nothing or refuses cleanly
  const int rank = x->dim_size();
  const int spatial = rank - 2;
  if (weights >= 0) {
    // Without kernel_shape the kernel is W's dims past the first two; the output's channels
    // are W's dim 0 (Conv) or dim 1 (ConvTranspose).
    if (const onnx::TensorShapeProto* w = input_shape(ctx, static_cast<size_t>(weights));
        w && w->dim_size() != rank)
      fail_shape_inference("W has rank ", w->dim_size(), " but X has rank ", rank);
  }
  for (const char* name : {"kernel_shape", "strides", "dilations", "output_shape",
                           "output_padding"})
    if (const auto* a = ints_attr(ctx, name); a && a->ints_size() != spatial)
      fail_shape_inference("attribute ", name, " has ", a->ints_size(), " values for ", spatial,
                           " spatial axes");
  const auto* pads = ints_attr(ctx, "pads");
  if (pads && pads->ints_size() != 2 * spatial)
    fail_shape_inference("attribute pads has ", pads->ints_size(), " values for ", spatial,
                         " spatial axes");
  const auto* strides = ints_attr(ctx, "strides");
  if (!strides) return;
  for (int i = 0; i < spatial; ++i) {
    const int64_t s = strides->ints(i);
    if (s < 1) fail_shape_inference("strides must be positive, got ", s);
    const auto& d = x->dim(2 + i);
    const onnx::AttributeProto* auto_pad = ctx.getAttribute("auto_pad");
    if (!pads && auto_pad && d.has_dim_value() && d.dim_value() / s > kMaxPaddingSteps)
      fail_shape_inference("spatial dim ", d.dim_value(), " is too large to pad");
  }
}

// MaxUnpool reads dim 1 of its second input, whatever that input's type.
void check_unpool(const InferenceContext& ctx) {
  const onnx::TensorShapeProto* x = input_shape(ctx, 0);
  if (!x || x->dim_size() < 2 || ctx.getNumInputs() == 3) return;
  const onnx::TensorShapeProto* indices = input_shape(ctx, 1);
  if (!indices || indices->dim_size() < 2)
    fail_shape_inference("MaxUnpool's indices need a known shape of rank 2 or more");
}

// MaxRoiPool writes pooled_shape[0] and [1] once pooled_shape has X's spatial rank.
void check_roi_pool(const InferenceContext& ctx) {
  if (const auto* a = ints_attr(ctx, "pooled_shape"); a && a->ints_size() < 2)
    fail_shape_inference("attribute pooled_shape needs 2 values, got ", a->ints_size());
}

using Check = std::function<void(const InferenceContext&)>;

const std::map<std::string, Check, std::less<>>& checks() {
  static const auto* table = new std::map<std::string, Check, std::less<>>{
      {"Conv", [](const InferenceContext& c) { check_window(c, 1); }},
      {"ConvInteger", [](const InferenceContext& c) { check_window(c, 1); }},
      {"QLinearConv", [](const InferenceContext& c) { check_window(c, 3); }},
      {"ConvTranspose", [](const InferenceContext& c) { check_window(c, 1); }},
      {"MaxPool", [](const InferenceContext& c) { check_window(c, -1); }},
      {"AveragePool", [](const InferenceContext& c) { check_window(c, -1); }},
      {"LpPool", [](const InferenceContext& c) { check_window(c, -1); }},
      {"MaxUnpool", check_unpool},
      {"MaxRoiPool", check_roi_pool},
  };
  return *table;
}

class GuardedRegistry final : public onnx::ISchemaRegistry {
 public:
  GuardedRegistry() {
    for (const onnx::OpSchema& s : onnx::OpSchemaRegistry::get_all_schemas_with_history()) {
      if (!s.domain().empty() || !s.has_type_and_shape_inference_function()) continue;
      auto check = checks().find(s.Name());
      if (check == checks().end()) continue;
      const onnx::OpSchema* original =
          onnx::OpSchemaRegistry::Schema(s.Name(), s.SinceVersion(), s.domain());
      if (!original) continue;
      onnx::OpSchema copy = *original;
      copy.TypeAndShapeInferenceFunction(
          [check = check->second,
           infer = original->GetTypeAndShapeInferenceFunction()](InferenceContext& ctx) {
            check(ctx);
            infer(ctx);
          });
      wrapped_.emplace(original, std::move(copy));
    }
  }

  const onnx::OpSchema* GetSchema(const std::string& key, const int max_inclusive_version,
                                  const std::string& domain) const override {
    const onnx::OpSchema* s = onnx::OpSchemaRegistry::Schema(key, max_inclusive_version, domain);
    auto it = wrapped_.find(s);
    return it == wrapped_.end() ? s : &it->second;
  }

 private:
  std::map<const onnx::OpSchema*, onnx::OpSchema> wrapped_;
};

}  // namespace

const onnx::ISchemaRegistry* guarded_schemas() {
  static const GuardedRegistry* registry = new GuardedRegistry();
  return registry;
}

}  // namespace graft::ir
