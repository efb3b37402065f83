#include "core/passes/quantization.h"

#include <algorithm>
#include <limits>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <absl/strings/str_cat.h>

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

namespace {

#if defined(__x86_64__) || defined(__i386__)
// XCR0: the register state the OS saves (AVX: bits 1-2; AVX-512: also 5-7).
uint64_t xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
#endif

}  // namespace

Int8Cpu detected_int8_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return Int8Cpu::kAvx2;  // no OSXSAVE
  const uint64_t xcr = xcr0();
  const bool os_avx = (xcr & 0x6) == 0x6, os_avx512 = (xcr & 0xe6) == 0xe6;
  if (!os_avx || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return Int8Cpu::kAvx2;
  const bool avx512f = b & (1u << 16), avx512_vnni = c & (1u << 11);
  if (os_avx512 && avx512f && avx512_vnni) return Int8Cpu::kAvx512Vnni;
  if (a >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)))
    return Int8Cpu::kAvxVnni;
  return Int8Cpu::kAvx2;
#else
  return Int8Cpu::kOther;
#endif
}

std::string_view int8_cpu_name(Int8Cpu cpu) {
  switch (cpu) {
    case Int8Cpu::kAvx2:
      return "avx2";
    case Int8Cpu::kAvxVnni:
      return "avx-vnni";
    case Int8Cpu::kAvx512Vnni:
      return "avx512-vnni";
    case Int8Cpu::kOther:
      break;
  }
  return "other";
}

std::optional<Int8Cpu> parse_int8_cpu(std::string_view name) {
  for (Int8Cpu c : {Int8Cpu::kAvx2, Int8Cpu::kAvxVnni, Int8Cpu::kAvx512Vnni, Int8Cpu::kOther})
    if (int8_cpu_name(c) == name) return c;
  return std::nullopt;
}

OptionSpec serving_cpu_option() {
  return enum_option(kServingCpu, std::string(int8_cpu_name(detected_int8_cpu())),
                     {"avx2", "avx-vnni", "avx512-vnni", "other"},
                     "the CPU the model will be served on, by its 8-bit dot products (default: "
                     "this machine's): avx2 (x86 without VNNI), avx-vnni, avx512-vnni, or other "
                     "(not x86)");
}

Int8Cpu serving_cpu(const PassContext& ctx) {
  return parse_int8_cpu(ctx.enum_option(kServingCpu)).value_or(Int8Cpu::kOther);
}

std::string int8_cpu_note(Int8Cpu cpu, bool detected) {
  if (cpu != Int8Cpu::kAvx2) return "";
  const std::string_view whose = detected ? ", this machine" : ", option serving_cpu";
  return absl::StrCat(
      "the serving CPU (", std::string(int8_cpu_name(cpu)), std::string(whose),
      ") has no 8-bit dot-product instructions (VNNI): ONNX Runtime's int8 kernels there can be "
      "no faster than float, or slower; measure on it before serving (docs/quantization.md)");
}

void note_serving_cpu(const PassContext& ctx, absl::StatusOr<PassResult>& result) {
  const Int8Cpu cpu = serving_cpu(ctx);
  std::string note = int8_cpu_note(cpu, cpu == detected_int8_cpu());
  if (result.ok() && result->changed && !note.empty())
    result->add_model_finding(kServingCpu, std::move(note));
}

}  // namespace graft
