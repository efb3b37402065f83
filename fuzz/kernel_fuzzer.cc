// libFuzzer target: the evaluator's kernels on fuzzed tensors and attributes.
//
// Input format: an op name and '\n', then bytes that FuzzedDataProvider decodes into an opset,
// input tensors (type, dims, data), attributes and output slots. The op name is read as text so
// seeds and dictionary entries stay meaningful when ops are added; a name the evaluator does not
// support picks a supported op by hash. Types, attributes and input counts follow the op's ONNX
// schema most of the time (so inputs get past the kernels' first checks) and ignore it sometimes
// (so those checks are exercised too). The node runs as a one-node model through
// eval::run_model with small limits.
//
// Properties beyond "no crash, no sanitizer report": a successful run returns one tensor per
// graph output, each consistent (element count matching its dims, bytes matching its count).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <onnx/defs/data_type_utils.h>
#include <onnx/defs/schema.h>
#include <onnx/onnx_pb.h>

#include "core/eval/executor.h"
#include "core/eval/gemm.h"
#include "core/eval/kernel.h"
#include "core/ir/model.h"
#include "core/ir/tensor.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/heap_limit.h"

namespace {

using onnx::AttributeProto;
using onnx::TensorProto;

constexpr int kMaxOpset = 23;  // RMSNormalization, Attention, RotaryEmbedding
constexpr uint64_t kMaxTensorBytes = 1 << 20;
constexpr uint64_t kMaxLiveBytes = 8 << 20;

constexpr int32_t kTypes[] = {
    TensorProto::FLOAT, TensorProto::DOUBLE, TensorProto::FLOAT16, TensorProto::BFLOAT16,
    TensorProto::INT8,  TensorProto::UINT8,  TensorProto::INT16,   TensorProto::UINT16,
    TensorProto::INT32, TensorProto::UINT32, TensorProto::INT64,   TensorProto::UINT64,
    TensorProto::BOOL,  TensorProto::STRING, graft::ir::kInt4,     graft::ir::kUint4,
};

// Attribute names kernels read, for attributes the schema does not list (or has no schema for).
const char* const kAttrNames[] = {"num_heads",
                                  "q_num_heads",
                                  "kv_num_heads",
                                  "is_causal",
                                  "softcap",
                                  "interleaved",
                                  "rotary_embedding_dim",
                                  "is_packed_batching",
                                  "unidirectional",
                                  "qkv_hidden_sizes",
                                  "mask_filter_value",
                                  "transBatchA",
                                  "gather_axis",
                                  "quantize_axis",
                                  "block_size",
                                  "bits",
                                  "axis",
                                  "axes",
                                  "keepdims",
                                  "perm",
                                  "to",
                                  "alpha",
                                  "beta",
                                  "gamma",
                                  "transA",
                                  "transB",
                                  "kernel_shape",
                                  "pads",
                                  "strides",
                                  "dilations",
                                  "group",
                                  "auto_pad",
                                  "mode",
                                  "direction",
                                  "hidden_size",
                                  "epsilon",
                                  "value",
                                  "shape",
                                  "split",
                                  "starts",
                                  "ends",
                                  "blocksize",
                                  "noop_with_empty_axes",
                                  "select_last_index",
                                  "exclusive",
                                  "reverse",
                                  "largest",
                                  "sorted",
                                  "k",
                                  "batch_dims",
                                  "ceil_mode",
                                  "count_include_pad",
                                  "p",
                                  "lambd",
                                  "bias",
                                  "size",
                                  "seed",
                                  "dtype",
                                  "scale",
                                  "coordinate_transformation_mode",
                                  "block_size",
                                  "output_dtype",
                                  "nearest_mode",
                                  "cubic_coeff_a",
                                  "exclude_outside",
                                  "extrapolation_value",
                                  "activations",
                                  "activation_alpha",
                                  "activation_beta",
                                  "clip",
                                  "layout",
                                  "linear_before_reset",
                                  "input_forget",
                                  "upper",
                                  "momentum",
                                  "training_mode",
                                  "output_padding",
                                  "output_shape",
                                  "reduction",
                                  "allowzero",
                                  "value_float",
                                  "value_floats",
                                  "value_int",
                                  "value_ints",
                                  "value_string",
                                  "value_strings",
                                  "sparse_value",
                                  "fmod",
                                  "detect_negative",
                                  "detect_positive",
                                  "center_point_box",
                                  "approximate",
                                  "stash_type",
                                  "align_corners",
                                  "padding_mode",
                                  "output_height",
                                  "output_width",
                                  "sampling_ratio",
                                  "spatial_scale"};

// Values of string attributes (padding and interpolation modes, activations, directions...).
const char* const kAttrStrings[] = {"NOTSET",
                                    "SAME_UPPER",
                                    "SAME_LOWER",
                                    "VALID",
                                    "constant",
                                    "reflect",
                                    "edge",
                                    "wrap",
                                    "nearest",
                                    "linear",
                                    "cubic",
                                    "bilinear",
                                    "half_pixel",
                                    "asymmetric",
                                    "align_corners",
                                    "pytorch_half_pixel",
                                    "tf_crop_and_resize",
                                    "round_prefer_floor",
                                    "round_prefer_ceil",
                                    "floor",
                                    "ceil",
                                    "forward",
                                    "reverse",
                                    "bidirectional",
                                    "Sigmoid",
                                    "Tanh",
                                    "Relu",
                                    "Affine",
                                    "LeakyRelu",
                                    "ThresholdedRelu",
                                    "ScaledTanh",
                                    "HardSigmoid",
                                    "Elu",
                                    "Softsign",
                                    "Softplus",
                                    "DCR",
                                    "CRD",
                                    "mean",
                                    "sum",
                                    "none",
                                    "tanh",
                                    "",
                                    "x",
                                    "bicubic",
                                    "zeros",
                                    "border",
                                    "reflection",
                                    "output_half_pixel",
                                    "avg",
                                    "max"};

const float kSpecialFloats[] = {0.0f,
                                1.0f,
                                -1.0f,
                                0.5f,
                                2.0f,
                                3.0f,
                                1e-5f,
                                -0.0f,
                                1e30f,
                                -1e30f,
                                std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity()};

// The default domain's ops, then other domains' as "DOMAIN:OP" (com.microsoft:Attention),
// sorted together.
const std::vector<std::string>& supported_ops() {
  static const auto* ops = [] {
    auto* v = new std::vector<std::string>(graft::eval::supported_ops());
    for (const std::string& op : graft::eval::supported_domain_ops()) v->push_back(op);
    std::sort(v->begin(), v->end());
    return v;
  }();
  return *ops;
}

template <typename T, size_t N>
T pick(FuzzedDataProvider& in, const T (&values)[N]) {
  return values[in.ConsumeIntegralInRange<size_t>(0, N - 1)];
}

// A tensor type of "tensor(float)"-style type strings, 0 for sequences, maps and optionals.
int32_t tensor_elem_type(const std::string* type) {
  const onnx::TypeProto& proto = onnx::Utils::DataTypeUtils::ToTypeProto(type);
  return proto.has_tensor_type() ? proto.tensor_type().elem_type() : 0;
}

class Decoder {
 public:
  explicit Decoder(FuzzedDataProvider& in) : in_(in) {}

  int64_t small_int() { return in_.ConsumeIntegralInRange<int64_t>(-3, 8); }
  // Mostly small (axes, sizes, flags); sometimes any value (overflow and range checks).
  int64_t int_value() {
    return in_.ConsumeIntegralInRange(0, 7) == 0 ? in_.ConsumeIntegral<int64_t>() : small_int();
  }
  float float_value() {
    return in_.ConsumeBool() ? pick(in_, kSpecialFloats) : in_.ConsumeFloatingPoint<float>();
  }
  std::string string_value() {
    return in_.ConsumeIntegralInRange(0, 3) == 0 ? in_.ConsumeRandomLengthString(12)
                                                 : std::string(pick(in_, kAttrStrings));
  }

  std::vector<int64_t> dims(int max_rank) {
    std::vector<int64_t> d(in_.ConsumeIntegralInRange(0, max_rank));
    for (auto& x : d) x = in_.ConsumeIntegralInRange<int64_t>(0, 5);
    return d;
  }

  // A small tensor of `dtype`: raw bytes, small integers, special floats, or zeros.
  TensorProto tensor(int32_t dtype, std::vector<int64_t> dims, const std::string& name) {
    auto zeros = graft::eval::Tensor::zeros(dtype, dims, kMaxTensorBytes);
    if (!zeros.ok()) {  // not reachable with the dims above; an empty tensor keeps going
      TensorProto empty;
      empty.set_name(name);
      empty.set_data_type(dtype);
      empty.add_dims(0);
      return empty;
    }
    graft::eval::Tensor& t = *zeros;
    if (dtype == TensorProto::STRING) {
      for (auto& s : t.strings()) s = in_.ConsumeRandomLengthString(6);
      return t.to_proto(name);
    }
    switch (in_.ConsumeIntegralInRange(0, 3)) {
      case 0: {  // raw bytes (bools are normalised to 0/1 when the evaluator loads them)
        std::string bytes = in_.ConsumeBytesAsString(t.bytes());
        std::memcpy(t.data<char>(), bytes.data(), bytes.size());
        break;
      }
      case 1:
        for (int64_t i = 0; i < t.size(); ++i) t.set_int64(i, small_int());
        break;
      case 2:
        for (int64_t i = 0; i < t.size(); ++i) t.set_double(i, pick(in_, kSpecialFloats));
        break;
      default:
        break;
    }
    return t.to_proto(name);
  }

  void attribute_value(AttributeProto& a, AttributeProto::AttributeType type) {
    a.set_type(type);
    const int n = in_.ConsumeIntegralInRange(0, 6);
    switch (type) {
      case AttributeProto::INT:
        a.set_i(int_value());
        break;
      case AttributeProto::FLOAT:
        a.set_f(float_value());
        break;
      case AttributeProto::STRING:
        a.set_s(string_value());
        break;
      case AttributeProto::INTS:
        for (int i = 0; i < n; ++i) a.add_ints(int_value());
        break;
      case AttributeProto::FLOATS:
        for (int i = 0; i < n; ++i) a.add_floats(float_value());
        break;
      case AttributeProto::STRINGS:
        for (int i = 0; i < n; ++i) a.add_strings(string_value());
        break;
      case AttributeProto::TENSOR:
        *a.mutable_t() = tensor(pick(in_, kTypes), dims(2), "");
        break;
      case AttributeProto::TENSORS:
        for (int i = 0; i < n; ++i) *a.add_tensors() = tensor(pick(in_, kTypes), dims(2), "");
        break;
      case AttributeProto::SPARSE_TENSOR: {
        auto* sparse = a.mutable_sparse_tensor();
        const int64_t nnz = in_.ConsumeIntegralInRange(0, 4);
        *sparse->mutable_values() = tensor(pick(in_, kTypes), {nnz}, "");
        *sparse->mutable_indices() = tensor(
            TensorProto::INT64,
            in_.ConsumeBool() ? std::vector<int64_t>{nnz} : std::vector<int64_t>{nnz, 2}, "");
        for (int64_t d : dims(3)) sparse->add_dims(d);
        break;
      }
      default:  // graphs and type protos: no kernel reads them
        a.set_type(AttributeProto::INT);
        a.set_i(int_value());
        break;
    }
  }

  AttributeProto::AttributeType attribute_type() {
    static constexpr AttributeProto::AttributeType kAttrTypes[] = {
        AttributeProto::INT,    AttributeProto::FLOAT,   AttributeProto::STRING,
        AttributeProto::INTS,   AttributeProto::FLOATS,  AttributeProto::STRINGS,
        AttributeProto::TENSOR, AttributeProto::TENSORS, AttributeProto::SPARSE_TENSOR};
    return pick(in_, kAttrTypes);
  }

  FuzzedDataProvider& in() { return in_; }

 private:
  FuzzedDataProvider& in_;
};

// Splits "Op\nrest" into the op to run (a supported one) and the rest.
std::string_view take_op(std::string_view& data) {
  const auto& ops = supported_ops();
  std::string_view name;
  if (size_t nl = data.substr(0, 64).find('\n'); nl != std::string_view::npos) {
    name = data.substr(0, nl);
    data.remove_prefix(nl + 1);
  }
  if (std::binary_search(ops.begin(), ops.end(), name)) return name;
  return ops[std::hash<std::string_view>()(name) % ops.size()];
}

// Ops named in GRAFT_FUZZ_SKIP_OPS (comma-separated) are not run, so a long run can explore past
// a known bug (saved in fuzz/regressions/kernel/) while it is being fixed.
const std::set<std::string, std::less<>>& skipped_ops() {
  static const auto* ops = [] {
    auto* s = new std::set<std::string, std::less<>>();
    if (const char* env = std::getenv("GRAFT_FUZZ_SKIP_OPS")) {
      std::string_view list = env;
      while (!list.empty()) {
        const size_t comma = std::min(list.find(','), list.size());
        if (comma) s->emplace(list.substr(0, comma));
        list.remove_prefix(std::min(comma + 1, list.size()));
      }
    }
    return s;
  }();
  return *ops;
}

// With GRAFT_FUZZ_DUMP set: the decoded node on stderr (for triage of a saved input).
void dump(const onnx::ModelProto& model) {
  const auto& g = model.graph();
  std::string text = "opset " + std::to_string(model.opset_import(0).version()) + "\n";
  auto dims = [](const auto& list) {
    std::string s = "[";
    for (int64_t d : list) s += (s.size() > 1 ? "," : "") + std::to_string(d);
    return s + "]";
  };
  for (const auto& t : g.initializer())
    text += "initializer " + t.name() + ": type " + std::to_string(t.data_type()) + " dims " +
            dims(t.dims()) + "\n";
  for (const auto& in : g.input()) {
    const auto& tt = in.type().tensor_type();
    std::vector<int64_t> d;
    for (const auto& dim : tt.shape().dim()) d.push_back(dim.dim_value());
    text += "input " + in.name() + ": type " + std::to_string(tt.elem_type()) + " dims " + dims(d) +
            "\n";
  }
  onnx::NodeProto node = g.node(0);
  for (auto& a : *node.mutable_attribute()) a.clear_t();  // tensors: type and dims are enough
  text += node.ShortDebugString() + "\n";
  std::fputs(text.c_str(), stderr);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using graft::fuzz::fail;
  // Tensors are capped at 1 MiB and 8 MiB live; kernel scratch must stay in proportion.
  graft::fuzz::HeapLimit heap_limit(64ll << 20);
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  std::string op(take_op(rest));
  if (skipped_ops().count(op)) return 0;
  // "DOMAIN:OP": a node of that domain (no ONNX schema: inputs and attributes at random).
  std::string domain;
  if (const size_t colon = op.find(':'); colon != std::string::npos) {
    domain = op.substr(0, colon);
    op = op.substr(colon + 1);
  }
  FuzzedDataProvider in(reinterpret_cast<const uint8_t*>(rest.data()), rest.size());
  Decoder dec(in);

  // An opset the evaluator has a kernel for: the one asked for, else the nearest above, else
  // the nearest below.
  int opset = in.ConsumeIntegralInRange(1, kMaxOpset);
  auto has_kernel = [&](int v) { return graft::eval::find_kernel(op, domain, v) != nullptr; };
  int found = 0;
  for (int v = opset; v <= kMaxOpset && !found; ++v)
    if (has_kernel(v)) found = v;
  for (int v = opset - 1; v >= 1 && !found; --v)
    if (has_kernel(v)) found = v;
  if (!found) return 0;
  opset = found;
  const onnx::OpSchema* schema =
      domain.empty() ? onnx::OpSchemaRegistry::Schema(op, opset, "") : nullptr;
  const bool follow_schema = schema != nullptr && in.ConsumeIntegralInRange(0, 15) != 0;

  onnx::ModelProto model;
  model.set_ir_version(8);
  auto* opset_import = model.add_opset_import();
  opset_import->set_domain(domain);
  opset_import->set_version(opset);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("kernel_fuzz");
  onnx::NodeProto* node = graph->add_node();
  node->set_op_type(op);
  node->set_domain(domain);
  node->set_name("n");
  std::map<std::string, graft::eval::Tensor> feeds;

  // Inputs. Same-constraint inputs ("T") share a type, as the schema requires.
  int lo = 0, hi = 4;
  if (follow_schema) {
    lo = schema->min_input();
    hi = std::max(lo, std::min(schema->max_input(), lo + 4));
    if (in.ConsumeIntegralInRange(0, 15) == 0) lo = 0;  // required inputs missing
  }
  const int num_inputs = in.ConsumeIntegralInRange(lo, hi);
  std::map<std::string, int32_t> constraint_types;
  for (int i = 0; i < num_inputs; ++i) {
    const onnx::OpSchema::FormalParameter* formal = nullptr;
    if (follow_schema && !schema->inputs().empty())
      formal = &schema->inputs()[std::min<size_t>(i, schema->inputs().size() - 1)];
    const bool optional =
        formal == nullptr || formal->GetOption() == onnx::OpSchema::FormalParameterOption::Optional;
    if (in.ConsumeIntegralInRange(0, optional ? 3 : 31) == 0) {
      node->add_input("");  // absent
      continue;
    }
    int32_t dtype = 0;
    if (formal != nullptr && in.ConsumeIntegralInRange(0, 15) != 0) {
      auto it = constraint_types.find(formal->GetTypeStr());
      if (it != constraint_types.end()) {
        dtype = it->second;
      } else {
        // Sorted by name: the set is ordered by pointer, which differs between runs.
        std::vector<const std::string*> allowed;
        for (const std::string* t : formal->GetTypes())
          if (tensor_elem_type(t)) allowed.push_back(t);
        std::sort(allowed.begin(), allowed.end(),
                  [](const std::string* a, const std::string* b) { return *a < *b; });
        if (!allowed.empty()) {
          dtype =
              tensor_elem_type(allowed[in.ConsumeIntegralInRange<size_t>(0, allowed.size() - 1)]);
          constraint_types[formal->GetTypeStr()] = dtype;
        }
      }
    }
    if (dtype == 0) dtype = pick(in, kTypes);
    const std::string name = "x" + std::to_string(i);
    TensorProto t = dec.tensor(dtype, dec.dims(4), name);
    node->add_input(name);
    if (in.ConsumeBool()) {
      *graph->add_initializer() = std::move(t);
      continue;
    }
    auto* input = graph->add_input();
    input->set_name(name);
    auto* tensor_type = input->mutable_type()->mutable_tensor_type();
    tensor_type->set_elem_type(dtype);
    auto* shape = tensor_type->mutable_shape();
    for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
    auto feed = graft::eval::Tensor::from_proto(t, kMaxTensorBytes);
    if (!feed.ok()) fail("a generated tensor does not load", feed.status().ToString());
    feeds.emplace(name, std::move(*feed));
  }

  // Attributes: the schema's (required ones always, others at random, the right type most of
  // the time), plus sometimes one the schema does not list.
  if (follow_schema) {
    for (const auto& [name, attr] : schema->attributes()) {
      if (!attr.required && in.ConsumeIntegralInRange(0, 2) != 0) continue;
      AttributeProto* a = node->add_attribute();
      a->set_name(name);
      dec.attribute_value(*a,
                          in.ConsumeIntegralInRange(0, 15) == 0 ? dec.attribute_type() : attr.type);
    }
  }
  for (int extra = follow_schema ? in.ConsumeIntegralInRange(0, 7) == 0
                                 : in.ConsumeIntegralInRange(0, 3);
       extra > 0; --extra) {
    const std::string name = pick(in, kAttrNames);
    bool duplicate = false;
    for (const auto& a : node->attribute()) duplicate = duplicate || a.name() == name;
    if (duplicate) continue;
    AttributeProto* a = node->add_attribute();
    a->set_name(name);
    dec.attribute_value(*a, dec.attribute_type());
  }

  // Outputs; optional ones past the first may be left unnamed.
  lo = 1, hi = 3;
  if (follow_schema) {
    lo = std::max(1, schema->min_output());
    hi = std::max(lo, std::min(schema->max_output(), 5));
  }
  const int num_outputs = in.ConsumeIntegralInRange(lo, hi);
  for (int i = 0; i < num_outputs; ++i) {
    if (i > 0 && in.ConsumeIntegralInRange(0, 3) == 0) {
      node->add_output("");
      continue;
    }
    const std::string name = "y" + std::to_string(i);
    node->add_output(name);
    graph->add_output()->set_name(name);
  }

  // For the dgemm comparison below, read before `model` is moved: the largest |alpha| or |beta|,
  // and the largest finite operand and element count of the feeds and initializers.
  double attr_scale = 1, amax = 0, n = 1;
  for (const auto& attr : node->attribute())
    if ((attr.name() == "alpha" || attr.name() == "beta") && attr.type() == AttributeProto::FLOAT)
      attr_scale = std::max(attr_scale, std::fabs(static_cast<double>(attr.f())));
  auto scan = [&](const graft::eval::Tensor& t) {
    n = std::max(n, static_cast<double>(t.size()));
    if (t.dtype() == TensorProto::STRING) return;
    for (int64_t i = 0; i < t.size(); ++i) {
      const double v = std::fabs(t.get_double(i));
      if (std::isfinite(v)) amax = std::max(amax, v);
    }
  };
  for (const auto& [name, t] : feeds) scan(t);
  for (const auto& init : graph->initializer())
    if (auto t = graft::eval::Tensor::from_proto(init, kMaxTensorBytes); t.ok()) scan(*t);

  if (std::getenv("GRAFT_FUZZ_DUMP")) dump(model);
  auto loaded = graft::ir::Model::from_proto(std::move(model));
  if (!loaded.ok()) return 0;
  graft::eval::Limits limits;
  limits.max_tensor_bytes = kMaxTensorBytes;
  limits.max_live_bytes = kMaxLiveBytes;
  auto outputs = graft::eval::run_model(**loaded, feeds, limits);
  if (!outputs.ok()) return 0;

  if (outputs->size() != (*loaded)->graph().outputs().size())
    fail("run_model returned a different number of outputs than the graph has", op);
  for (const auto& t : *outputs) {
    if (t.dtype() == 0) continue;  // an output the kernel did not set (checked elsewhere)
    auto count = graft::ir::element_count(t.dims());
    if (!count || *count != t.size()) fail("an output's element count does not match its dims", op);
    if (t.dtype() == TensorProto::STRING ? t.strings().size() != static_cast<size_t>(t.size())
                                         : t.bytes() != t.size() * t.element_size())
      fail("an output's data does not match its element count", op);
  }

  // The kernels with a dgemm path (core/eval/gemm.h) agree with their reference loops where both
  // are finite: within double rounding of the sums plus one rounding to the output type. (Where
  // a sum overflows, or alpha is huge, the order of the additions may decide between an infinity
  // and a NaN; tests/eval/blas_kernels_test.cc checks non-finite operands on their own.)
  static const std::set<std::string> kDgemmOps = {"MatMul", "Gemm", "Conv", "ConvInteger",
                                                  "FusedMatMul"};
  if (kDgemmOps.count(op) != 0) {
    std::vector<graft::eval::Tensor> reference;
    {
      graft::eval::ReferenceKernelsScope scope;
      auto ref = graft::eval::run_model(**loaded, feeds, limits);
      if (!ref.ok()) return 0;  // e.g. the memory budget, spent differently
      reference = std::move(*ref);
    }
    // Two double sums of the same n products differ by at most about 2 n u sum |products|
    // (u = 2^-53), which cancellation can leave far above the result: bounded here by n^2 times
    // the largest operand squared (n at most the largest operand's element count), times alpha
    // or beta when they are larger than 1.
    const double slack = 4 * n * n * 0x1p-53 * attr_scale * std::max(amax * amax, amax);
    for (size_t o = 0; o < reference.size() && o < outputs->size(); ++o) {
      const graft::eval::Tensor& f = (*outputs)[o];
      const graft::eval::Tensor& r = reference[o];
      if (f.dtype() != r.dtype() || f.dims() != r.dims())
        fail("dgemm path and reference loops give different output types or shapes", op);
      if (f.dtype() == 0 || f.dtype() == TensorProto::STRING) continue;
      // Each path's one rounding to the output type: a unit in the last place, relative or (for
      // subnormal results) absolute.
      const bool half = f.dtype() == TensorProto::FLOAT16 || f.dtype() == TensorProto::BFLOAT16;
      const double rtol = f.dtype() == TensorProto::DOUBLE  ? 0x1p-50
                          : f.dtype() == TensorProto::FLOAT ? 0x1p-22
                          : half                            ? 0x1p-6
                                                            : 0;
      const double atol = half ? 0x1p-23 : f.dtype() == TensorProto::FLOAT ? 0x1p-148 : 0;
      for (int64_t i = 0; i < f.size(); ++i) {
        const double a = f.get_double(i), b = r.get_double(i);
        if (a == b || !std::isfinite(a) || !std::isfinite(b) || !std::isfinite(slack)) continue;
        if (std::fabs(a - b) <= slack + atol + rtol * std::max(std::fabs(a), std::fabs(b)))
          continue;
        fail("dgemm path and reference loops differ", op);
      }
    }
  }
  return 0;
}
