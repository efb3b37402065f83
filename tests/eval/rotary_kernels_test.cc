// RotaryEmbedding kernels (core/eval/kernels/rotary.cc): the standard op (opset 23) and ONNX
// Runtime's com.microsoft op, each against the rotation written out in standard ops as the ONNX
// spec's function body does it (Slice the halves or the even and odd elements, cos * x1 - sin *
// x2 and sin * x1 + cos * x2, Concat or interleave, the rest passed through), on the same random
// inputs for several seeds; and every malformed operand refused with an error, position ids
// outside the caches included, never a crash or a read out of bounds.
#include <string>
#include <vector>

#include "tests/eval/kernel_testing.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;
using testing::parse_text;
using testing::same_outputs;

// What a case rotates: X (B, N, S, H) when heads_first, else (B, S, N * H); `rot` of each head's
// H elements (H / 2 pairs when rot == H); caches of P rows, gathered by position ids (B, S) when
// `ids`, else (B, S, rot / 2) per token.
struct Case {
  bool heads_first = true;
  bool interleaved = false;
  int64_t rot = 8;
  bool ids = true;
  std::string type = "float";  // "float16": X and the caches cast to float16 in both models
};
constexpr int64_t B = 2, N = 3, S = 4, H = 8, P = 6;

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t v : d) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

// Constant caches of `count` values: c for cos, s for sin (any values: the kernels must not
// assume cos^2 + sin^2 = 1).
std::string cache_values(int64_t count, double offset) {
  std::string s;
  for (int64_t i = 0; i < count; ++i)
    s += (i ? ", " : "") + std::to_string(0.1 * static_cast<double>((i * 7) % 11) - offset);
  return s;
}

std::string signature(const Case& c, const std::string& ids_input) {
  const std::string x = c.heads_first ? dims({B, N, S, H}) : dims({B, S, N * H});
  const std::string cache = c.ids ? dims({P, c.rot / 2}) : dims({B, S, c.rot / 2});
  const int64_t count = c.ids ? P * c.rot / 2 : B * S * c.rot / 2;
  return "<ir_version: 10, opset_import: [\"\" : 23, \"com.microsoft\" : 1]>\ng (float[" + x +
         "] xf" + ids_input + ") => (float[" + x + "] y)\n  <float[" + cache + "] cf = {" +
         cache_values(count, 0.3) + "}, float[" + cache + "] sf = {" + cache_values(count, 0.5) +
         "}, int64[1] zero = {0}, int64[1] one = {1}, int64[1] two = {2}, int64[1] minus1 = "
         "{-1}, int64[1] rot = {" +
         std::to_string(c.rot) + "}, int64[1] half = {" + std::to_string(c.rot / 2) +
         "}, int64[1] head = {" + std::to_string(H) + "}, int64[4] split = {0, 0, " +
         std::to_string(N) + ", " + std::to_string(H) + "}> {\n";
}

// X, the caches in the case's type (x, c, s), and the output cast back to float.
std::string cast_in(const Case& c) {
  const std::string to = c.type == "float16" ? "10" : "1";
  return "x = Cast <to = " + to + "> (xf)\nc = Cast <to = " + to + "> (cf)\ns = Cast <to = " + to +
         "> (sf)\n";
}
const char* kCastOut = "y = Cast <to = 1> (yt)\n}";

// The rotation in standard ops; `rows_c` / `rows_s` are the cos and sin rows of every token,
// (B or 1, S, rot / 2).
std::string decomposition(const Case& c, const std::string& rows_c, const std::string& rows_s) {
  // Heads on axis 2 of (B, S, N, H) or axis 1 of (B, N, S, H): the rows broadcast over them.
  std::string t = c.heads_first ? "xh = Identity (x)\n" : "xh = Reshape (x, split)\n";
  const std::string axis = c.heads_first ? "one" : "two";
  t += "uc = Unsqueeze (" + rows_c + ", " + axis + ")\nus = Unsqueeze (" + rows_s + ", " + axis +
       ")\n";
  t += "xr = Slice (xh, zero, rot, minus1)\n";
  if (c.interleaved) {
    t += "x1 = Slice (xr, zero, rot, minus1, two)\nx2 = Slice (xr, one, rot, minus1, two)\n";
  } else {
    t += "x1 = Slice (xr, zero, half, minus1)\nx2 = Slice (xr, half, rot, minus1)\n";
  }
  t += "cx1 = Mul (uc, x1)\nsx2 = Mul (us, x2)\nreal = Sub (cx1, sx2)\n"
       "sx1 = Mul (us, x1)\ncx2 = Mul (uc, x2)\nimag = Add (sx1, cx2)\n";
  if (c.interleaved) {
    t += "r1 = Unsqueeze (real, minus1)\ni1 = Unsqueeze (imag, minus1)\n"
         "pairs = Concat <axis = -1> (r1, i1)\nshape = Shape (xr)\nrotated = Reshape (pairs, "
         "shape)\n";
  } else {
    t += "rotated = Concat <axis = -1> (real, imag)\n";
  }
  if (c.rot < H) {
    t += "rest = Slice (xh, rot, head, minus1)\nout = Concat <axis = -1> (rotated, rest)\n";
  } else {
    t += "out = Identity (rotated)\n";
  }
  t += c.heads_first ? "yt = Identity (out)\n" : "xs = Shape (x)\nyt = Reshape (out, xs)\n";
  return t;
}

std::string attrs(const Case& c) {
  std::string a;
  auto add = [&](const std::string& s) { a += (a.empty() ? "" : ", ") + s; };
  if (c.interleaved) add("interleaved = 1");
  if (c.rot < H) add("rotary_embedding_dim = " + std::to_string(c.rot));
  if (!c.heads_first || c.rot < H) add("num_heads = " + std::to_string(N));
  return a.empty() ? "" : "<" + a + "> ";
}

// The standard op for `c` and its decomposition.
std::pair<std::string, std::string> standard(const Case& c) {
  const std::string sig = signature(c, c.ids ? ", int64[" + dims({B, S}) + "] ids" : "");
  std::string fused = sig + cast_in(c) + "yt = RotaryEmbedding " + attrs(c) +
                      (c.ids ? "(x, c, s, ids)\n" : "(x, c, s)\n") + kCastOut;
  std::string rows = c.ids ? "gc = Gather (c, ids)\ngs = Gather (s, ids)\n"
                           : "gc = Identity (c)\ngs = Identity (s)\n";
  return {fused, sig + cast_in(c) + rows + decomposition(c, "gc", "gs") + kCastOut};
}

// Runs both models on the same seeded random inputs (several seeds) and expects equal outputs.
void expect_same(const std::pair<std::string, std::string>& models, double tolerance = 1e-5) {
  auto fused = parse_text(models.first);
  auto reference = parse_text(models.second);
  ASSERT_TRUE(fused && reference);
  for (uint32_t seed : {1u, 2u, 3u, 4u})
    EXPECT_EQ(same_outputs(*reference, *fused, seed, tolerance, tolerance), "") << "seed " << seed;
}

TEST(RotaryKernels, StandardHeadsFirstWithPositionIds) { expect_same(standard(Case{})); }

TEST(RotaryKernels, StandardForms) {
  for (bool heads_first : {true, false})
    for (bool interleaved : {false, true})
      for (int64_t rot : {H, int64_t{4}})
        for (bool ids : {true, false}) {
          SCOPED_TRACE(::testing::Message() << "heads_first " << heads_first << " interleaved "
                                            << interleaved << " rot " << rot << " ids " << ids);
          expect_same(standard(Case{heads_first, interleaved, rot, ids}));
        }
}

TEST(RotaryKernels, StandardFloat16) {
  // The decomposition rounds every step to float16; the kernel once.
  expect_same(standard(Case{true, false, H, true, "float16"}), 4e-3);
  expect_same(standard(Case{false, true, 4, false, "float16"}), 4e-3);
}

// com.microsoft RotaryEmbedding(input, position_ids, cos, sin) with (B, S) ids, against the
// same decomposition.
std::pair<std::string, std::string> microsoft(const Case& c) {
  const std::string sig = signature(c, ", int64[" + dims({B, S}) + "] ids");
  std::string fused = sig + cast_in(c) + "yt = com.microsoft.RotaryEmbedding " + attrs(c) +
                      "(x, ids, c, s)\n" + kCastOut;
  return {fused, sig + cast_in(c) + "gc = Gather (c, ids)\ngs = Gather (s, ids)\n" +
                     decomposition(c, "gc", "gs") + kCastOut};
}

TEST(RotaryKernels, MicrosoftForms) {
  for (bool heads_first : {true, false})
    for (bool interleaved : {false, true})
      for (int64_t rot : {H, int64_t{4}}) {
        SCOPED_TRACE(::testing::Message() << "heads_first " << heads_first << " interleaved "
                                          << interleaved << " rot " << rot);
        expect_same(microsoft(Case{heads_first, interleaved, rot, true}));
      }
  expect_same(microsoft(Case{true, false, H, true, "float16"}), 4e-3);
}

TEST(RotaryKernels, MicrosoftHeadSizeFromTheCachesWithoutNumHeads) {
  // A 3-D input without num_heads: heads of twice the caches' width.
  Case c{false, false, H, true};
  auto [fused, reference] = microsoft(c);
  const std::string with = "com.microsoft.RotaryEmbedding <num_heads = 3> ";
  fused.replace(fused.find(with), with.size(), "com.microsoft.RotaryEmbedding ");
  expect_same({fused, reference});
}

TEST(RotaryKernels, MicrosoftOffsetPositionIds) {
  // One position p: token s of every batch takes row p + s (caches of 8 rows for p in [0, 3]).
  Case c;
  const std::string sig =
      "<ir_version: 10, opset_import: [\"\" : 23, \"com.microsoft\" : 1]>\n"
      "g (float[2,3,4,8] x, int64[1] p) => (float[2,3,4,8] y)\n"
      "  <float[8,4] c = {" +
      cache_values(32, 0.3) + "}, float[8,4] s = {" + cache_values(32, 0.5) +
      "}, int64[1] zero = {0}, int64[1] one = {1}, int64[1] minus1 = {-1}, "
      "int64[1] rot = {8}, int64[1] half = {4}, int64[1] head = {8}, "
      "int64 start = {0}, int64 limit = {4}, int64 step = {1}> {\n";
  std::string fused = sig + "y = com.microsoft.RotaryEmbedding (x, p, c, s)\n}";
  std::string rows =
      "r = Range (start, limit, step)\nr2 = Unsqueeze (r, zero)\nids = Add (r2, p)\n"
      "gc = Gather (c, ids)\ngs = Gather (s, ids)\n";
  std::string body = decomposition(c, "gc", "gs");
  body.replace(body.find("yt = Identity (out)"), 19, "y = Identity (out)");
  expect_same({fused, sig + rows + body + "}"});
}

// ------------------------------------------------------------------------------ error cases

struct Operands {
  std::vector<int64_t> x = {B, N, S, H}, cos = {P, H / 2}, ids = {B, S};
  int32_t x_type = TensorProto::FLOAT, cache_type = TensorProto::FLOAT,
          ids_type = TensorProto::INT64;
  std::vector<int64_t> sin;        // empty: cos's dims
  std::vector<int64_t> id_values;  // empty: all 0
};

// Runs one standard (opset 23) or com.microsoft RotaryEmbedding node with `attributes` on
// tensors of `o`'s shapes; its status.
absl::Status run_rotary(bool microsoft, const std::string& attributes, const Operands& o,
                        bool with_ids = true) {
  auto make_tensor = [](int32_t type, const std::vector<int64_t>& d) {
    auto t = Tensor::zeros(type, d, 1 << 20);
    EXPECT_TRUE(t.ok()) << t.status();
    return *std::move(t);
  };
  Tensor x = make_tensor(o.x_type, o.x);
  for (int64_t i = 0; i < x.size(); ++i) x.set_double(i, 0.25 * static_cast<double>(i % 7));
  const Tensor cos = make_tensor(o.cache_type, o.cos);
  const Tensor sin = make_tensor(o.cache_type, o.sin.empty() ? o.cos : o.sin);
  Tensor ids = make_tensor(o.ids_type, o.ids);
  for (size_t i = 0; i < o.id_values.size() && static_cast<int64_t>(i) < ids.size(); ++i)
    ids.set_int64(static_cast<int64_t>(i), o.id_values[i]);
  const std::string node =
      microsoft
          ? "y = com.microsoft.RotaryEmbedding " + attributes + " (x, ids, c, s)"
          : "y = RotaryEmbedding " + attributes + (with_ids ? " (x, c, s, ids)" : " (x, c, s)");
  const std::string text =
      "<ir_version: 10, opset_import: [\"\" : 23, \"com.microsoft\" : 1]>\ng (float x, float c, "
      "float s, int64 ids) => (float y) { " +
      node + " }";
  std::vector<Tensor> out;
  std::vector<const Tensor*> inputs =
      microsoft ? std::vector<const Tensor*>{&x, &ids, &cos, &sin}
                : std::vector<const Tensor*>{&x, &cos, &sin, with_ids ? &ids : nullptr};
  absl::Status st = run(text, inputs, &out);
  if (st.ok()) {
    EXPECT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].dims(), x.dims());
  }
  return st;
}

void expect_invalid(const absl::Status& st, const std::string& what) {
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << what << ": " << st;
}

TEST(RotaryKernels, StandardRefusesMalformedOperands) {
  EXPECT_TRUE(run_rotary(false, "", Operands{}).ok());
  Operands o;
  o.x = {B, S, N * H};
  expect_invalid(run_rotary(false, "", o), "3-D without num_heads");
  EXPECT_TRUE(run_rotary(false, "<num_heads = 3>", o).ok());
  expect_invalid(run_rotary(false, "<num_heads = 5>", o), "hidden not a multiple of num_heads");
  o = {};
  o.x = {B * N * S, H};
  expect_invalid(run_rotary(false, "", o), "2-D input");
  o.x = {1, B, N, S, H};
  expect_invalid(run_rotary(false, "", o), "5-D input");
  o = {};
  expect_invalid(run_rotary(false, "<rotary_embedding_dim = 10>", o), "rot above the head");
  expect_invalid(run_rotary(false, "<rotary_embedding_dim = 3>", o), "odd rot");
  expect_invalid(run_rotary(false, "<rotary_embedding_dim = -2>", o), "negative rot");
  expect_invalid(run_rotary(false, "<interleaved = 2>", o), "interleaved 2");
  o.cos = {P, H};
  expect_invalid(run_rotary(false, "", o), "caches of the full head");
  o = {};
  o.cos = {P, 2, H / 2};
  expect_invalid(run_rotary(false, "", o), "3-D caches with position ids");
  o = {};
  o.sin = {P + 1, H / 2};
  expect_invalid(run_rotary(false, "", o), "caches of different shapes");
  o = {};
  o.cache_type = TensorProto::DOUBLE;
  expect_invalid(run_rotary(false, "", o), "caches of another type");
  o = {};
  o.ids = {B, S + 1};
  expect_invalid(run_rotary(false, "", o), "ids not (B, S)");
  o.ids = {B * S};
  expect_invalid(run_rotary(false, "", o), "1-D ids");
  o = {};
  o.ids_type = TensorProto::INT32;
  expect_invalid(run_rotary(false, "", o), "int32 ids");
  // Without position ids the caches are (B, S, rot / 2).
  o = {};
  o.cos = {B, S, H / 2};
  EXPECT_TRUE(run_rotary(false, "", o, /*with_ids=*/false).ok());
  o.cos = {1, S, H / 2};
  expect_invalid(run_rotary(false, "", o, false), "caches of another batch");
  o.cos = {P, H / 2};
  expect_invalid(run_rotary(false, "", o, false), "2-D caches without position ids");
  // Types outside the schema's float, float16 and bfloat16.
  o = {};
  o.x_type = o.cache_type = TensorProto::INT32;
  expect_invalid(run_rotary(false, "", o), "int32 X");
  o.x_type = o.cache_type = TensorProto::DOUBLE;
  expect_invalid(run_rotary(false, "", o), "double X");
}

TEST(RotaryKernels, PositionIdsOutsideTheCachesAreErrors) {
  for (bool microsoft : {false, true}) {
    SCOPED_TRACE(microsoft ? "com.microsoft" : "standard");
    Operands o;
    o.id_values = {0, 1, 2, P - 1, 0, 1, 2, 3};
    EXPECT_TRUE(run_rotary(microsoft, "", o).ok());
    o.id_values = {0, 1, 2, P, 0, 1, 2, 3};
    expect_invalid(run_rotary(microsoft, "", o), "id P");
    o.id_values = {0, 1, 2, 3, 0, -1, 2, 3};
    expect_invalid(run_rotary(microsoft, "", o), "id -1");
    o.id_values = {0, 1, 2, 3, 0, INT64_MIN, 2, 3};
    expect_invalid(run_rotary(microsoft, "", o), "id INT64_MIN");
    o.id_values = {0, 1, 2, 3, 0, INT64_MAX, 2, 3};
    expect_invalid(run_rotary(microsoft, "", o), "id INT64_MAX");
  }
  // com.microsoft's one-position form: p .. p + S - 1 must be rows.
  Operands o;
  o.ids = {1};
  o.id_values = {P - S};
  EXPECT_TRUE(run_rotary(true, "", o).ok());
  o.id_values = {P - S + 1};
  expect_invalid(run_rotary(true, "", o), "offset past the end");
  o.id_values = {-1};
  expect_invalid(run_rotary(true, "", o), "negative offset");
  o.id_values = {INT64_MAX};
  expect_invalid(run_rotary(true, "", o), "offset INT64_MAX");
}

TEST(RotaryKernels, MicrosoftRefusesMalformedOperands) {
  Operands o;
  o.x = {B, S, N * H};
  EXPECT_TRUE(run_rotary(true, "", o).ok());  // heads of twice the caches' width
  EXPECT_TRUE(run_rotary(true, "<num_heads = 3>", o).ok());
  expect_invalid(run_rotary(true, "<num_heads = 5>", o), "hidden not a multiple of num_heads");
  expect_invalid(run_rotary(true, "<num_heads = 4>", o), "caches not half the head");
  expect_invalid(run_rotary(true, "<rotary_embedding_dim = 4>", o), "rot without num_heads");
  o = {};
  EXPECT_TRUE(run_rotary(true, "<num_heads = 3>", o).ok());
  expect_invalid(run_rotary(true, "<num_heads = 2>", o), "num_heads not the input's heads");
  expect_invalid(run_rotary(true, "<interleaved = 3>", o), "interleaved 3");
  o.x = {B, N * S * H};
  expect_invalid(run_rotary(true, "", o), "2-D input");
  o = {};
  o.cos = {P, 2, H / 2};
  expect_invalid(run_rotary(true, "", o), "3-D caches");
  o = {};
  o.sin = {P, H / 2 + 1};
  expect_invalid(run_rotary(true, "", o), "caches of different shapes");
  o = {};
  o.ids = {B, S, 1};
  expect_invalid(run_rotary(true, "", o), "3-D ids");
  // Forms ONNX Runtime's CPU kernel does not compute: Unimplemented.
  o = {};
  EXPECT_TRUE(absl::IsUnimplemented(run_rotary(true, "<is_packed_batching = 1>", o)));
  o.cos = {S - 1, H / 2};
  o.id_values.assign(B * S, 0);
  EXPECT_TRUE(absl::IsUnimplemented(run_rotary(true, "", o))) << "caches shorter than S";
  o = {};
  o.x_type = o.cache_type = TensorProto::DOUBLE;
  EXPECT_TRUE(absl::IsUnimplemented(run_rotary(true, "", o))) << "double";
}

TEST(RotaryKernels, EmptyInputsWithHugeDimsAllocateNothing) {
  // B * S is far beyond memory, but X has no element: the output is empty, no row is made.
  Operands o;
  o.x = {int64_t{1} << 30, 0, int64_t{1} << 30, H};
  o.ids = {1};
  EXPECT_TRUE(absl::IsUnimplemented(run_rotary(true, "", o))) << "S > P";
  o.cos = {(int64_t{1} << 30) + 1, 0};
  o.x = {int64_t{1} << 30, 0, int64_t{1} << 30, 0};
  EXPECT_TRUE(run_rotary(true, "", o).ok());
  o = {};
  o.x = {0, N, S, H};
  o.ids = {0, S};
  EXPECT_TRUE(run_rotary(false, "", o).ok());
}

}  // namespace
}  // namespace graft::eval
