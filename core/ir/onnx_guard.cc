// Guards in front of libonnx's shape inference (see onnx_guard.h).
#include "core/ir/onnx_guard.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <onnx/defs/shape_inference.h>

#include "core/ir/tensor.h"

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
  for (const char* name :
       {"kernel_shape", "strides", "dilations", "output_shape", "output_padding"})
    if (const auto* a = ints_attr(ctx, name); a && a->ints_size() != spatial)
      fail_shape_inference("attribute ", name, " has ", a->ints_size(), " values for ", spatial,
                           " spatial axes");
  const auto* pads = ints_attr(ctx, "pads");
  if (pads && pads->ints_size() != 2 * spatial)
    fail_shape_inference("attribute pads has ", pads->ints_size(), " values for ", spatial,
                         " spatial axes");
  const auto* strides = ints_attr(ctx, "strides");
  if (!strides) return;
  const onnx::AttributeProto* auto_pad = ctx.getAttribute("auto_pad");
  for (int i = 0; i < spatial; ++i) {
    const int64_t s = strides->ints(i);
    if (s < 1) fail_shape_inference("strides must be positive, got ", s);
    const auto& d = x->dim(2 + i);
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

// The values of an integer initializer input (nullopt when the input has none, or when they are
// not all there: libonnx then infers nothing from them or refuses cleanly).
std::optional<std::vector<int64_t>> int_data(const InferenceContext& ctx, size_t i) {
  if (i >= ctx.getNumInputs()) return std::nullopt;
  const onnx::TensorProto* t = ctx.getInputData(i);
  if (!t) return std::nullopt;
  return read_int64s(*t);
}

// DepthToSpace (every opset) divides the channels by blocksize * blocksize, which wraps to 0
// (an integer division by zero) for a blocksize of 2^32.
void check_depth_to_space(const InferenceContext& ctx) {
  const onnx::AttributeProto* a = ctx.getAttribute("blocksize");
  if (!a || a->type() != onnx::AttributeProto::INT) return;
  int64_t square;
  if (__builtin_mul_overflow(a->i(), a->i(), &square))
    fail_shape_inference("blocksize ", a->i(), " squared overflows int64");
}

// Reshape (every opset with a -1 in the target shape) divides the product of the input's known
// dims by the product of the target's other dims, both in wrapping int64: INT64_MIN / -1 traps.
// A product past int64 is no real tensor's, so the node is refused when either overflows.
void check_reshape(const InferenceContext& ctx) {
  std::optional<std::vector<int64_t>> target;
  if (const auto* a = ints_attr(ctx, "shape"))
    target.emplace(a->ints().begin(), a->ints().end());
  else
    target = int_data(ctx, 1);
  const onnx::TensorShapeProto* x = input_shape(ctx, 0);
  if (!target || !x || std::find(target->begin(), target->end(), -1) == target->end()) return;
  int64_t product = 1;
  for (size_t i = 0; i < target->size(); ++i) {
    int64_t d = (*target)[i];
    // A 0 copies the input's dim (what libonnx multiplies in, unless allowzero).
    if (d == 0 && static_cast<int>(i) < x->dim_size() &&
        x->dim(static_cast<int>(i)).has_dim_value())
      d = x->dim(static_cast<int>(i)).dim_value();
    if (d > 0 && __builtin_mul_overflow(product, d, &product))
      fail_shape_inference("the target shape's dims multiply past int64");
  }
  product = 1;
  for (const auto& d : x->dim())
    if (d.has_dim_value() && __builtin_mul_overflow(product, d.dim_value(), &product))
      fail_shape_inference("the input's dims multiply past int64");
}

// Split (every opset) divides the split axis by its number of outputs, which can be 0.
void check_split(const InferenceContext& ctx) {
  if (ctx.getNumOutputs() == 0) fail_shape_inference("Split has no outputs");
}

// SplitToSequence takes the split axis modulo a scalar split, which can be 0.
void check_split_to_sequence(const InferenceContext& ctx) {
  const onnx::TensorShapeProto* split = input_shape(ctx, 1);
  if (!split || split->dim_size() != 0) return;
  if (auto v = int_data(ctx, 1); v && !v->empty() && (*v)[0] < 1)
    fail_shape_inference("scalar split must be positive, got ", (*v)[0]);
}

// Einsum without "->" counts the left side's letters in a 26-entry table indexed by c - 'a':
// any other character writes outside it (on the stack).
void check_einsum(const InferenceContext& ctx) {
  const onnx::AttributeProto* a = ctx.getAttribute("equation");
  if (!a || a->type() != onnx::AttributeProto::STRING) return;
  const std::string& eq = a->s();
  if (eq.find("->") != std::string::npos || ctx.getNumInputs() == 0) return;
  for (size_t i = 0; i < ctx.getNumInputs(); ++i)
    if (!input_shape(ctx, i)) return;  // libonnx infers no shape then, nor counts letters
  for (char c : eq)
    if (c != ',' && c != '.' && c != ' ' && (c < 'a' || c > 'z'))
      fail_shape_inference("equation without -> has a character other than a-z, ',', '.': '",
                           std::string(1, c), "'");
}

// Gemm-6 reads dim 0 or 1 of A and B whatever their ranks (later opsets check them first).
void check_gemm(const InferenceContext& ctx) {
  const onnx::TensorShapeProto* a = input_shape(ctx, 0);
  const onnx::TensorShapeProto* b = input_shape(ctx, 1);
  if (!a || !b) return;
  if (a->dim_size() != 2) fail_shape_inference("Gemm's A has rank ", a->dim_size(), ", not 2");
  if (b->dim_size() != 2) fail_shape_inference("Gemm's B has rank ", b->dim_size(), ", not 2");
}

// STFT reads dims 0 and 1 of the signal whatever its rank.
void check_stft(const InferenceContext& ctx) {
  if (const onnx::TensorShapeProto* signal = input_shape(ctx, 0); signal && signal->dim_size() < 2)
    fail_shape_inference("STFT's signal has rank ", signal->dim_size(), ", less than 2");
}

// Expand (input 1) and ConstantOfShape (input 0): without the shape's values, libonnx adds one
// unknown dim per element of the 1-D shape input, so a length of 2^40 allocates without bound.
void check_shape_input(const InferenceContext& ctx, size_t i) {
  if (i >= ctx.getNumInputs() || ctx.getInputData(i)) return;
  const onnx::TensorShapeProto* shape = input_shape(ctx, i);
  if (shape && shape->dim_size() == 1 && shape->dim(0).has_dim_value() &&
      shape->dim(0).dim_value() > kMaxShapeTensorLength)
    fail_shape_inference("the shape input has ", shape->dim(0).dim_value(), " elements, more than ",
                         kMaxShapeTensorLength);
}

// RNN-1, GRU-3 and LSTM-1 read dims 0 and 1 of X whatever its rank (later opsets check it is 3).
void check_recurrent(const InferenceContext& ctx) {
  if (const onnx::TensorShapeProto* x = input_shape(ctx, 0); x && x->dim_size() != 3)
    fail_shape_inference("X has rank ", x->dim_size(), ", not 3");
}

// GatherND copies data's dims from index (indices' last dim + batch_dims) on, which a negative
// batch_dims (or last dim) puts before dim 0.
void check_gather_nd(const InferenceContext& ctx) {
  const onnx::AttributeProto* b = ctx.getAttribute("batch_dims");
  if (b && b->type() == onnx::AttributeProto::INT && b->i() < 0)
    fail_shape_inference("batch_dims must not be negative, got ", b->i());
  const onnx::TensorShapeProto* indices = input_shape(ctx, 1);
  if (indices && indices->dim_size() > 0) {
    const auto& last = indices->dim(indices->dim_size() - 1);
    if (last.has_dim_value() && last.dim_value() < 0)
      fail_shape_inference("indices' last dim is negative: ", last.dim_value());
  }
}

// LayerNormalization sets the Mean and InvStdDev dims from axis (taken as an int, plus the rank
// when negative; -1 by default) on, unchecked: outside [-rank, rank) it writes before dim 0 (a
// scalar X with the default axis included).
void check_layer_norm(const InferenceContext& ctx) {
  const onnx::TensorShapeProto* x = input_shape(ctx, 0);
  if (!x) return;
  const onnx::AttributeProto* a = ctx.getAttribute("axis");
  const int64_t axis = a && a->type() == onnx::AttributeProto::INT ? a->i() : -1;
  const int64_t rank = x->dim_size();
  if (axis < -rank || axis >= rank)
    fail_shape_inference("axis ", axis, " is out of range for rank ", rank);
}

// Range (its three inputs) and TopK-10/11 (K) read value 0 of an initializer input, which libonnx
// does not check is there for a scalar or for raw data (a data-less external scalar included).
void check_first_values(const InferenceContext& ctx, std::initializer_list<size_t> inputs) {
  for (size_t i : inputs) {
    if (i >= ctx.getNumInputs()) continue;
    const onnx::TensorProto* t = ctx.getInputData(i);
    if (t && tensor_bytes(*t) == 0)
      fail_shape_inference("input ", i, " is an initializer holding no value");
  }
}

// Scan-9 and later fill a vector of num_scan_inputs axes (and one of the scan outputs' axes,
// counted from it) before looking at the inputs: 2^28 allocates gigabytes. Without the attribute
// every Scan dereferences null (Graft's loader already refuses that model; checked here too).
void check_scan(const InferenceContext& ctx) {
  const onnx::AttributeProto* a = ctx.getAttribute("num_scan_inputs");
  if (!a || a->type() != onnx::AttributeProto::INT)
    fail_shape_inference("Scan needs an int attribute num_scan_inputs");
  if (a->i() < 1 || static_cast<uint64_t>(a->i()) > ctx.getNumInputs())
    fail_shape_inference("num_scan_inputs is ", a->i(), " for ", ctx.getNumInputs(), " inputs");
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
      {"DepthToSpace", check_depth_to_space},
      {"Reshape", check_reshape},
      {"Split", check_split},
      {"SplitToSequence", check_split_to_sequence},
      {"Einsum", check_einsum},
      {"Gemm", check_gemm},
      {"STFT", check_stft},
      {"Expand", [](const InferenceContext& c) { check_shape_input(c, 1); }},
      {"ConstantOfShape", [](const InferenceContext& c) { check_shape_input(c, 0); }},
      {"GatherND", check_gather_nd},
      {"Scan", check_scan},
      {"Range",
       [](const InferenceContext& c) {
         check_first_values(c, {0, 1, 2});
       }},
      {"TopK", [](const InferenceContext& c) { check_first_values(c, {1}); }},
      {"LayerNormalization", check_layer_norm},
      {"RNN", check_recurrent},
      {"GRU", check_recurrent},
      {"LSTM", check_recurrent},
  };
  return *table;
}

// Every op: libonnx hands an inference function a null type for an input it knows nothing of (a
// graph input declared without a type, the output of a node whose inference failed), and some
// functions propagate from it unchecked (EyeLike reads it through propagateShape: a null
// dereference; found by the verify fuzzer). A required input without a type fails inference for
// the node instead. `required[i]`: formal input i is neither optional nor variadic (an absent
// optional input is null too, and is fine).
void check_typed_inputs(const InferenceContext& ctx, const std::vector<bool>& required) {
  const size_t n = std::min(ctx.getNumInputs(), required.size());
  for (size_t i = 0; i < n; ++i)
    if (required[i] && ctx.getInputType(i) == nullptr)
      fail_shape_inference("input ", i, " has no type");
}

class GuardedRegistry final : public onnx::ISchemaRegistry {
 public:
  GuardedRegistry() {
    for (const onnx::OpSchema& s : onnx::OpSchemaRegistry::get_all_schemas_with_history()) {
      if (!s.domain().empty() || !s.has_type_and_shape_inference_function()) continue;
      const onnx::OpSchema* original =
          onnx::OpSchemaRegistry::Schema(s.Name(), s.SinceVersion(), s.domain());
      if (!original) continue;
      std::vector<bool> required;
      for (const auto& formal : original->inputs())
        required.push_back(formal.GetOption() == onnx::OpSchema::Single);
      auto check = checks().find(s.Name());
      onnx::OpSchema copy = *original;
      copy.TypeAndShapeInferenceFunction(
          [required = std::move(required),
           check = check == checks().end() ? Check() : check->second,
           infer = original->GetTypeAndShapeInferenceFunction()](InferenceContext& ctx) {
            check_typed_inputs(ctx, required);
            if (check) check(ctx);
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
