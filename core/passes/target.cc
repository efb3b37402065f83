#include "core/passes/target.h"

#include <algorithm>
#include <charconv>

#include <absl/strings/str_cat.h>
#include <onnx/onnx_pb.h>

namespace graft {

namespace {

constexpr int32_t kFloat = onnx::TensorProto::FLOAT;
constexpr int32_t kFloat16 = onnx::TensorProto::FLOAT16;
constexpr int32_t kDouble = onnx::TensorProto::DOUBLE;

constexpr char kForms[] =
    "'onnx', 'onnxruntime' or 'onnxruntime:MAJOR.MINOR' (e.g. onnxruntime:1.18)";

// A number of at most 3 digits, the whole of `s`.
bool small_number(std::string_view s, int* out) {
  if (s.empty() || s.size() > 3) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

const char* target_kind_name(Target::Kind kind) {
  return kind == Target::Kind::kOnnx ? "onnx" : "onnxruntime";
}

std::string Target::str() const {
  if (kind == Kind::kOnnx) return "onnx";
  return absl::StrCat("onnxruntime:", ort.major, ".", ort.minor);
}

// ONNX Runtime's CPU execution provider registers these com.microsoft kernels
// (onnxruntime/contrib_ops/cpu/cpu_contrib_kernels.cc). `since` is the first release whose CPU
// provider has the kernel for those types; where the release is not certain the later candidate
// is written, so that the table errs towards not emitting. Ops with a kernel only on GPU
// providers (BiasSoftmax, BiasAdd, ...) are absent on purpose: a CPU target must never get them.
const std::vector<OrtKernel>& ort_kernel_table() {
  static const auto* table = new std::vector<OrtKernel>{
      {kMicrosoftDomain, "Attention", {1, 10}, {kFloat}},
      {kMicrosoftDomain, "MultiHeadAttention", {1, 15}, {kFloat}},
      {kMicrosoftDomain, "GroupQueryAttention", {1, 18}, {kFloat}},
      {kMicrosoftDomain, "GroupQueryAttention", {1, 19}, {kFloat16}},
      // 1.16's kernel took 3-D inputs only, without num_heads and rotary_embedding_dim; the
      // (batch, heads, sequence, head) form fuse_onnxruntime emits runs from 1.17. Releases
      // before 1.20 have no float16 kernel (ONNX Runtime casts such a node to float around it).
      {kMicrosoftDomain, "RotaryEmbedding", {1, 17}, {kFloat}},
      {kMicrosoftDomain, "RotaryEmbedding", {1, 20}, {kFloat16}},
      {kMicrosoftDomain, "SkipLayerNormalization", {1, 10}, {kFloat, kDouble}},
      {kMicrosoftDomain, "SkipLayerNormalization", {1, 18}, {kFloat16}},
      {kMicrosoftDomain, "SkipSimplifiedLayerNormalization", {1, 16}, {kFloat, kDouble}},
      {kMicrosoftDomain, "SkipSimplifiedLayerNormalization", {1, 18}, {kFloat16}},
      // int4/uint4 tables with float scales, as quantize_weights_int4 writes them (1.19 added
      // the op; 1.20 is written, the table erring towards not emitting).
      {kMicrosoftDomain, "GatherBlockQuantized", {1, 20}, {kFloat}},
      // 4-bit weights in blocks along K with accuracy_level, as quantize_weights_int4 writes them
      // (1.17 added the op; 1.18 is written, the table erring towards not emitting).
      {kMicrosoftDomain, "MatMulNBits", {1, 18}, {kFloat}},
      {kMicrosoftDomain, "Gelu", {1, 10}, {kFloat}},
      {kMicrosoftDomain, "BiasGelu", {1, 10}, {kFloat}},
      {kMicrosoftDomain, "FastGelu", {1, 10}, {kFloat}},
      {kMicrosoftDomain, "QuickGelu", {1, 12}, {kFloat}},
      {kMicrosoftDomain, "FusedMatMul", {1, 10}, {kFloat}},
  };
  return *table;
}

bool Target::has_kernel(std::string_view domain, std::string_view op, int32_t elem_type) const {
  if (kind != Kind::kOnnxRuntime) return false;
  const auto& table = ort_kernel_table();
  return std::any_of(table.begin(), table.end(), [&](const OrtKernel& k) {
    return k.domain == domain && k.op == op && !(ort < k.since) &&
           std::find(k.types.begin(), k.types.end(), elem_type) != k.types.end();
  });
}

absl::StatusOr<Target> parse_target(std::string_view text) {
  Target t;
  if (text.empty() || text == "onnx") return t;
  constexpr std::string_view kOrt = "onnxruntime";
  if (text.substr(0, kOrt.size()) != kOrt)
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown target '", std::string(text.substr(0, 64)), "'; valid targets: ", kForms));
  t.kind = Target::Kind::kOnnxRuntime;
  t.ort = kDefaultOrtVersion;
  std::string_view rest = text.substr(kOrt.size());
  if (rest.empty()) return t;
  const size_t dot = rest.find('.');
  if (rest[0] != ':' || dot == std::string_view::npos ||
      !small_number(rest.substr(1, dot - 1), &t.ort.major) ||
      !small_number(rest.substr(dot + 1), &t.ort.minor))
    return absl::InvalidArgumentError(absl::StrCat(
        "malformed target '", std::string(text.substr(0, 64)), "'; valid targets: ", kForms));
  if (t.ort < kOldestOrtVersion)
    return absl::InvalidArgumentError(
        absl::StrCat("target ", t.str(), " is older than the oldest ONNX Runtime Graft knows (",
                     kOldestOrtVersion.major, ".", kOldestOrtVersion.minor, ")"));
  return t;
}

}  // namespace graft
