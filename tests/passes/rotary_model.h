// Rotary position embedding as torch.onnx exports Hugging Face's LLaMA attention, for the tests
// of the matcher (core/passes/patterns/rotary.h) and of the rules that fuse it (fuse_blocks,
// fuse_onnxruntime): y = x * cos + rotate_half(x) * sin over x (B, N, S, D) = (2, 2, 3, 4), with
// cos and sin gathered from (5, 4) tables of cat(angles, angles) by position ids (2, 3) and
// unsqueezed over the heads. Variants are made by replacing lines (`with`).
#pragma once

#include <cmath>
#include <string>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_format.h>
#include <gtest/gtest.h>

namespace graft::testing {

struct RotaryBlock {
  int opset = 23;
  std::string ids_type = "int64";
  bool equal_halves = true;  // false: one element of each table's second half differs
};

// Row p of a table: f(p * w) for the frequencies w = 1, 0.25, written with 9 significant digits
// (float literals that read back to the same float in the fused caches).
inline std::string rotary_rows(double (*f)(double), bool repeat, bool perturb) {
  std::string s;
  for (int p = 0; p < 5; ++p) {
    const double a = f(p * 1.0), b = f(p * 0.25);
    absl::StrAppend(&s, p ? ", " : "", absl::StrFormat("%.9g, %.9g", a, b));
    if (repeat)
      absl::StrAppend(&s, absl::StrFormat(", %.9g, %.9g", a, perturb && p == 2 ? b + 0.5 : b));
  }
  return s;
}

inline std::string rotary_block(const RotaryBlock& b = {}) {
  const bool perturb = !b.equal_halves;
  return absl::StrCat(R"(<ir_version: 8, opset_import: ["" : )", b.opset, R"(]>
    g (float[2,2,3,4] x, )",
                      b.ids_type, R"([2,3] ids) => (float[2,2,3,4] y)
      <float[5,4] cos_table = {)",
                      rotary_rows(std::cos, true, perturb), R"(},
       float[5,4] sin_table = {)",
                      rotary_rows(std::sin, true, perturb), R"(},
       int64[1] zero = {0}, int64[1] one = {1}, int64[1] two = {2}, int64[1] last = {-1},
       int64[1] big = {9223372036854775807}> {
      gc = Gather (cos_table, ids)
      cos = Unsqueeze (gc, one)
      gs = Gather (sin_table, ids)
      sin = Unsqueeze (gs, one)
      xc = Mul (x, cos)
      x2 = Slice (x, two, big, last)
      neg = Neg (x2)
      x1 = Slice (x, zero, two, last)
      rot = Concat <axis = -1> (neg, x1)
      rs = Mul (rot, sin)
      y = Add (xc, rs)
    })");
}

// The caches the fused ops take: declarations of the tables' first halves, (5, 2).
inline std::string rotary_caches_decl() {
  return absl::StrCat("float[5,2] cos_cache = {", rotary_rows(std::cos, false, false),
                      "}, float[5,2] sin_cache = {", rotary_rows(std::sin, false, false), "}");
}

// `text` with its first `from` replaced by `to` (a test failure when there is none).
inline std::string with(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// rotary_block's `text` with each table sliced to its leading rows before the Gather, as
// transformers' cos_cached[:seq_len] exports: Slice(table, 0, total, axis 0), `total` computed at
// run time (x's sequence length + 2 = the table's 5 rows). `slice` replaces the Slice's inputs
// after the table (default: starts, ends, axes).
inline std::string rotary_sliced(std::string text, const std::string& slice = "zero, total, zero") {
  text = with(text, "      gc = Gather (cos_table, ids)\n",
              absl::StrCat(R"(      seq = Shape <start = 2, end = 3> (x)
      total = Add (seq, two)
      cut_cos = Slice (cos_table, )",
                           slice, R"()
      gc = Gather (cut_cos, ids)
)"));
  return with(text, "      gs = Gather (sin_table, ids)\n",
              absl::StrCat("      cut_sin = Slice (sin_table, ", slice,
                           ")\n      gs = Gather (cut_sin, ids)\n"));
}

// rotary_block's `text` with the rotary inside the then-branch of an If on a new input `cond`
// (the else-branch passes x through), reading x, the ids and the tables from the main graph.
inline std::string rotary_inside_if(std::string text) {
  text = with(text, "g (float[2,2,3,4] x,", "g (bool cond, float[2,2,3,4] x,");
  text = with(text, "      gc = Gather (cos_table, ids)", R"(      y = If (cond) <
        then_branch = then_g () => (float[2,2,3,4] t) {
      gc = Gather (cos_table, ids))");
  return with(text, "      y = Add (xc, rs)\n", R"(      t = Add (xc, rs)
        },
        else_branch = else_g () => (float[2,2,3,4] e) {
          e = Identity (x)
        }>
)");
}

}  // namespace graft::testing
