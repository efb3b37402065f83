// The runtime a model is optimized for (PipelineConfig::target, `--target`).
//
//   onnx                 standard ONNX ops only: the result runs on any conforming runtime
//                        (the default).
//   onnxruntime[:X.Y]    may also emit ONNX Runtime's com.microsoft ops (fused attention,
//                        skip-LayerNorm, fused GELUs...) where ONNX Runtime X.Y's CPU execution
//                        provider has a kernel for them; X.Y defaults to kDefaultOrtVersion.
//
// A rewrite that emits an op outside the default domain asks `target.has_kernel(...)` first, so
// nothing is ever emitted for a kernel the target lacks (the kernel table in target.cc: op,
// first ONNX Runtime release with a CPU kernel, element types).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <absl/status/statusor.h>

namespace graft {

inline constexpr char kMicrosoftDomain[] = "com.microsoft";

struct OrtVersion {
  int major = 0, minor = 0;
  friend bool operator<(OrtVersion a, OrtVersion b) {
    return a.major != b.major ? a.major < b.major : a.minor < b.minor;
  }
  friend bool operator==(OrtVersion a, OrtVersion b) = default;
};

// The ONNX Runtime version `--target onnxruntime` means: old enough that serving stacks run it
// or newer, new enough for every fusion Graft emits (by the table's conservative dates,
// GroupQueryAttention on CPU is there from 1.18).
inline constexpr OrtVersion kDefaultOrtVersion{1, 18};
// The oldest version a target may name: the table knows nothing older.
inline constexpr OrtVersion kOldestOrtVersion{1, 10};

struct Target {
  enum class Kind { kOnnx, kOnnxRuntime };
  Kind kind = Kind::kOnnx;
  OrtVersion ort;  // kOnnxRuntime only

  bool onnxruntime() const { return kind == Kind::kOnnxRuntime; }
  // "onnx" or "onnxruntime:1.18" (the canonical spelling, as reports show it).
  std::string str() const;
  // ONNX Runtime's CPU execution provider at this version has a kernel for `op` of `domain`
  // with inputs of element type `elem_type` (onnx::TensorProto_DataType). Always false for
  // kOnnx: the standard domain is never asked (every pass emits standard ops by opset).
  bool has_kernel(std::string_view domain, std::string_view op, int32_t elem_type) const;
};

// "onnx" or "onnxruntime".
const char* target_kind_name(Target::Kind kind);

// "onnx", "onnxruntime" or "onnxruntime:MAJOR.MINOR" ("" means "onnx"). InvalidArgument naming
// what is wrong, with the accepted forms.
absl::StatusOr<Target> parse_target(std::string_view text);

// One row of the kernel table, for docs and `graft passes`.
struct OrtKernel {
  const char* domain;
  const char* op;
  OrtVersion since;            // first release whose CPU provider has the kernel
  std::vector<int32_t> types;  // element types it takes
};
const std::vector<OrtKernel>& ort_kernel_table();

}  // namespace graft
