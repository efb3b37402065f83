// Recurrent kernels (RNN, GRU, LSTM) and Dropout on what the ONNX test data does not cover:
// the cell formulas written out for one hidden unit (peepholes, clip, input_forget,
// linear_before_reset, activation lists with alphas), and the relations between directions,
// layouts and sequence lengths.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/eval/kernel_testing.h"

namespace graft::eval {
namespace {

using onnx::TensorProto;

Tensor f32(std::vector<int64_t> dims, std::vector<float> values) {
  return make<float>(TensorProto::FLOAT, std::move(dims), std::move(values));
}

// Deterministic pseudo-random values in [-scale, scale].
std::vector<float> wave(size_t n, double seed, double scale = 0.8) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * std::sin(seed + 1.7 * i));
  return v;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

void expect_near_all(const Tensor& t, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(t.size(), static_cast<int64_t>(want.size())) << what;
  for (int64_t i = 0; i < t.size(); ++i)
    EXPECT_NEAR(t.get_double(i), want[i], 1e-5) << what << " element " << i;
}

// LSTM with one input feature, one hidden unit, batch 1: the ONNX equations step by step.
struct ScalarLstm {
  double w[4], r[4], b[8], p[3];  // gate order i, o, f, c; peepholes i, o, f
  double clip = 0;                // 0: none
  bool input_forget = false;
  double cl(double v) const { return clip > 0 ? std::fmax(-clip, std::fmin(clip, v)) : v; }
  // Returns Y per step; h and c are updated.
  std::vector<double> run(const std::vector<double>& xs, double& h, double& c) const {
    std::vector<double> y;
    for (double x : xs) {
      auto pre = [&](int g) { return w[g] * x + r[g] * h + b[g] + b[4 + g]; };
      const double i = sigmoid(cl(pre(0) + p[0] * c));
      const double f = input_forget ? 1 - i : sigmoid(cl(pre(2) + p[2] * c));
      const double g = std::tanh(cl(pre(3)));
      c = f * c + i * g;
      const double o = sigmoid(cl(pre(1) + p[1] * c));
      h = o * std::tanh(c);
      y.push_back(h);
    }
    return y;
  }
};

void check_scalar_lstm(double clip, bool input_forget) {
  ScalarLstm ref{{0.5, -0.4, 0.9, 1.2},
                 {0.3, 0.7, -0.6, 0.2},
                 {0.1, -0.2, 0.3, 0.05, -0.1, 0.2, 0.15, -0.3},
                 {0.4, -0.5, 0.6}};
  ref.clip = clip;
  ref.input_forget = input_forget;
  const std::vector<double> xs = {1.5, -0.7, 2.2};
  double h = 0.25, c = -0.4;
  const double h0 = h, c0 = c;
  std::vector<double> y = ref.run(xs, h, c);

  auto f = [](const double* p, int n) { return std::vector<float>(p, p + n); };
  Tensor X = f32({3, 1, 1}, {1.5f, -0.7f, 2.2f});
  Tensor W = f32({1, 4, 1}, f(ref.w, 4)), R = f32({1, 4, 1}, f(ref.r, 4));
  Tensor B = f32({1, 8}, f(ref.b, 8)), P = f32({1, 3}, f(ref.p, 3));
  Tensor H0 = f32({1, 1, 1}, {static_cast<float>(h0)}),
         C0 = f32({1, 1, 1}, {static_cast<float>(c0)});
  std::string attrs = "hidden_size = 1";
  if (clip > 0) attrs += ", clip = " + std::to_string(clip);
  if (input_forget) attrs += ", input_forget = 1";
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(14,
                        "(float[3,1,1] X, float[1,4,1] W, float[1,4,1] R, float[1,8] B, "
                        "int32[1] L, float[1,1,1] H, float[1,1,1] C, float[1,3] P) => "
                        "(float[3,1,1,1] Y, float[1,1,1] Yh, float[1,1,1] Yc)",
                        "Y, Yh, Yc = LSTM <" + attrs + "> (X, W, R, B, , H, C, P)"),
                  {&X, &W, &R, &B, nullptr, &H0, &C0, &P}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{3, 1, 1, 1}));
  expect_near_all(out[0], y, "Y");
  expect_near_all(out[1], {h}, "Y_h");
  expect_near_all(out[2], {c}, "Y_c");
}

TEST(RnnKernelsTest, LstmOneUnitFollowsTheEquations) { check_scalar_lstm(0, false); }
TEST(RnnKernelsTest, LstmClip) { check_scalar_lstm(0.3, false); }
TEST(RnnKernelsTest, LstmInputForget) { check_scalar_lstm(0, true); }

TEST(RnnKernelsTest, GruOneUnitBothResetPlacements) {
  const double w[3] = {0.6, -0.8, 1.1}, r[3] = {0.4, 0.9, -0.7};
  const double b[6] = {0.1, -0.2, 0.3, 0.25, -0.15, 0.05};  // Wb z r h, Rb z r h
  const std::vector<double> xs = {0.9, -1.3};
  for (int linear : {0, 1}) {
    double h = -0.3;
    std::vector<double> y;
    for (double x : xs) {
      const double z = sigmoid(w[0] * x + r[0] * h + b[0] + b[3]);
      const double rr = sigmoid(w[1] * x + r[1] * h + b[1] + b[4]);
      const double cand = linear ? std::tanh(w[2] * x + rr * (r[2] * h + b[5]) + b[2])
                                 : std::tanh(w[2] * x + r[2] * (rr * h) + b[5] + b[2]);
      h = (1 - z) * cand + z * h;
      y.push_back(h);
    }
    Tensor X = f32({2, 1, 1}, {0.9f, -1.3f});
    Tensor W = f32({1, 3, 1}, {0.6f, -0.8f, 1.1f}), R = f32({1, 3, 1}, {0.4f, 0.9f, -0.7f});
    Tensor B = f32({1, 6}, {0.1f, -0.2f, 0.3f, 0.25f, -0.15f, 0.05f});
    Tensor H0 = f32({1, 1, 1}, {-0.3f});
    std::vector<Tensor> out;
    ASSERT_TRUE(run(model(14,
                          "(float[2,1,1] X, float[1,3,1] W, float[1,3,1] R, float[1,6] B, "
                          "int32[1] L, float[1,1,1] H) => (float[2,1,1,1] Y, float[1,1,1] Yh)",
                          "Y, Yh = GRU <hidden_size = 1, linear_before_reset = " +
                              std::to_string(linear) + "> (X, W, R, B, , H)"),
                    {&X, &W, &R, &B, nullptr, &H0}, &out)
                    .ok());
    expect_near_all(out[0], y, "Y linear_before_reset=" + std::to_string(linear));
    expect_near_all(out[1], {h}, "Y_h");
  }
}

TEST(RnnKernelsTest, RnnActivationListWithAlphas) {
  // Bidirectional with the activation named once: both directions use LeakyRelu(alpha 0.3);
  // the reverse direction sees the sequence backwards.
  const std::vector<double> xs = {1.0, -2.0, 0.5};
  const double w[2] = {0.7, -1.1}, r[2] = {0.5, 0.8};
  auto leaky = [](double v) { return v >= 0 ? v : 0.3 * v; };
  std::vector<double> y(6), yh(2);
  for (int d = 0; d < 2; ++d) {
    double h = 0;
    for (int step = 0; step < 3; ++step) {
      const int t = d == 0 ? step : 2 - step;
      h = leaky(w[d] * xs[t] + r[d] * h);
      y[t * 2 + d] = h;
    }
    yh[d] = h;
  }
  Tensor X = f32({3, 1, 1}, {1.0f, -2.0f, 0.5f});
  Tensor W = f32({2, 1, 1}, {0.7f, -1.1f}), R = f32({2, 1, 1}, {0.5f, 0.8f});
  std::vector<Tensor> out;
  ASSERT_TRUE(run(model(14,
                        "(float[3,1,1] X, float[2,1,1] W, float[2,1,1] R) => "
                        "(float[3,2,1,1] Y, float[2,1,1] Yh)",
                        "Y, Yh = RNN <hidden_size = 1, direction = \"bidirectional\", "
                        "activations = [\"LeakyRelu\"], activation_alpha = [0.3]> (X, W, R)"),
                  {&X, &W, &R}, &out)
                  .ok());
  EXPECT_EQ(out[0].dims(), (std::vector<int64_t>{3, 2, 1, 1}));
  expect_near_all(out[0], y, "Y");
  expect_near_all(out[1], yh, "Y_h");
}

// An LSTM over X [seq 4, batch 2, input 3] with hidden 2 and the given attributes/weights.
std::vector<Tensor> lstm(const std::string& attrs, const Tensor& X, const Tensor& W,
                         const Tensor& R, const Tensor& B, const Tensor* lens, const Tensor& H0,
                         const Tensor& C0, int opset = 14) {
  std::vector<Tensor> out;
  EXPECT_TRUE(run(model(opset,
                        "(float[a,b,c] X, float[d,e,f] W, float[g,h,i] R, float[j,k] B, "
                        "int32[l] L, float[m,n,o] H, float[p,q,r] C) => "
                        "(float[s,t,u,v] Y, float[w,x,y] Yh, float[z,zz,zzz] Yc)",
                        "Y, Yh, Yc = LSTM <hidden_size = 2" + attrs + "> (X, W, R, B, L, H, C)"),
                  {&X, &W, &R, &B, lens, &H0, &C0}, &out)
                  .ok())
      << attrs;
  return out;
}

// Element [i0, i1, ...] of a row-major tensor.
double at(const Tensor& t, std::vector<int64_t> idx) {
  int64_t off = 0;
  for (size_t k = 0; k < idx.size(); ++k) off = off * t.dims()[k] + idx[k];
  return t.get_double(off);
}

TEST(RnnKernelsTest, BidirectionalIsForwardAndReverse) {
  Tensor X = f32({4, 2, 3}, wave(24, 0.3, 1.5));
  std::vector<float> w = wave(2 * 8 * 3, 1.1), r = wave(2 * 8 * 2, 2.3), b = wave(2 * 16, 3.7, 0.3);
  std::vector<float> h0 = wave(2 * 2 * 2, 4.1, 0.5), c0 = wave(2 * 2 * 2, 5.3, 0.5);
  Tensor W = f32({2, 8, 3}, w), R = f32({2, 8, 2}, r), B = f32({2, 16}, b);
  Tensor H = f32({2, 2, 2}, h0), C = f32({2, 2, 2}, c0);
  auto both = lstm(", direction = \"bidirectional\"", X, W, R, B, nullptr, H, C);
  auto half = [](const std::vector<float>& v, int d) {
    return std::vector<float>(v.begin() + d * v.size() / 2, v.begin() + (d + 1) * v.size() / 2);
  };
  for (int d = 0; d < 2; ++d) {
    Tensor Wd = f32({1, 8, 3}, half(w, d)), Rd = f32({1, 8, 2}, half(r, d));
    Tensor Bd = f32({1, 16}, half(b, d)), Hd = f32({1, 2, 2}, half(h0, d));
    Tensor Cd = f32({1, 2, 2}, half(c0, d));
    auto one = lstm(d == 0 ? ", direction = \"forward\"" : ", direction = \"reverse\"", X, Wd, Rd,
                    Bd, nullptr, Hd, Cd);
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t bi = 0; bi < 2; ++bi)
        for (int64_t k = 0; k < 2; ++k)
          EXPECT_NEAR(at(both[0], {t, d, bi, k}), at(one[0], {t, 0, bi, k}), 1e-6);
    for (int64_t bi = 0; bi < 2; ++bi)
      for (int64_t k = 0; k < 2; ++k) {
        EXPECT_NEAR(at(both[1], {d, bi, k}), at(one[1], {0, bi, k}), 1e-6);
        EXPECT_NEAR(at(both[2], {d, bi, k}), at(one[2], {0, bi, k}), 1e-6);
      }
  }
}

TEST(RnnKernelsTest, BatchMajorLayoutIsTheTransposedLayout) {
  Tensor X = f32({4, 2, 3}, wave(24, 0.9, 1.5));
  Tensor W = f32({2, 8, 3}, wave(48, 1.4)), R = f32({2, 8, 2}, wave(32, 2.8));
  Tensor B = f32({2, 16}, wave(32, 3.1, 0.3));
  Tensor H = f32({2, 2, 2}, wave(8, 4.4, 0.5)), C = f32({2, 2, 2}, wave(8, 5.9, 0.5));
  auto seq_major = lstm(", direction = \"bidirectional\"", X, W, R, B, nullptr, H, C);
  // Batch-major copies: X [batch, seq, input], states [batch, directions, hidden].
  Tensor Xb = f32({2, 4, 3}, {}), Hb = f32({2, 2, 2}, {}), Cb = f32({2, 2, 2}, {});
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t bi = 0; bi < 2; ++bi)
      for (int64_t k = 0; k < 3; ++k) Xb.set_double((bi * 4 + t) * 3 + k, at(X, {t, bi, k}));
  for (int64_t d = 0; d < 2; ++d)
    for (int64_t bi = 0; bi < 2; ++bi)
      for (int64_t k = 0; k < 2; ++k) {
        Hb.set_double((bi * 2 + d) * 2 + k, at(H, {d, bi, k}));
        Cb.set_double((bi * 2 + d) * 2 + k, at(C, {d, bi, k}));
      }
  auto batch_major =
      lstm(", direction = \"bidirectional\", layout = 1", Xb, W, R, B, nullptr, Hb, Cb);
  ASSERT_EQ(batch_major[0].dims(), (std::vector<int64_t>{2, 4, 2, 2}));
  ASSERT_EQ(batch_major[1].dims(), (std::vector<int64_t>{2, 2, 2}));
  for (int64_t t = 0; t < 4; ++t)
    for (int64_t d = 0; d < 2; ++d)
      for (int64_t bi = 0; bi < 2; ++bi)
        for (int64_t k = 0; k < 2; ++k)
          EXPECT_NEAR(at(batch_major[0], {bi, t, d, k}), at(seq_major[0], {t, d, bi, k}), 1e-6);
  for (int64_t d = 0; d < 2; ++d)
    for (int64_t bi = 0; bi < 2; ++bi)
      for (int64_t k = 0; k < 2; ++k) {
        EXPECT_NEAR(at(batch_major[1], {bi, d, k}), at(seq_major[1], {d, bi, k}), 1e-6);
        EXPECT_NEAR(at(batch_major[2], {bi, d, k}), at(seq_major[2], {d, bi, k}), 1e-6);
      }
}

TEST(RnnKernelsTest, SequenceLengthsStopEachEntryEarly) {
  // Entry 1 has length 2: its outputs equal a run on its first two steps alone (the reverse
  // direction starts at its last valid step), and its Y rows past the length are zero.
  Tensor X = f32({4, 2, 3}, wave(24, 0.5, 1.5));
  Tensor W = f32({2, 8, 3}, wave(48, 1.9)), R = f32({2, 8, 2}, wave(32, 2.2));
  Tensor B = f32({2, 16}, wave(32, 3.3, 0.3));
  Tensor H = f32({2, 2, 2}, wave(8, 4.7, 0.5)), C = f32({2, 2, 2}, wave(8, 5.1, 0.5));
  Tensor lens = make<int32_t>(TensorProto::INT32, {2}, {4, 2});
  auto full = lstm(", direction = \"bidirectional\"", X, W, R, B, &lens, H, C);
  // Entry 1 alone, batch 1, sequence 2.
  Tensor X1 = f32({2, 1, 3}, {}), H1 = f32({2, 1, 2}, {}), C1 = f32({2, 1, 2}, {});
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t k = 0; k < 3; ++k) X1.set_double(t * 3 + k, at(X, {t, 1, k}));
  for (int64_t d = 0; d < 2; ++d)
    for (int64_t k = 0; k < 2; ++k) {
      H1.set_double(d * 2 + k, at(H, {d, 1, k}));
      C1.set_double(d * 2 + k, at(C, {d, 1, k}));
    }
  auto alone = lstm(", direction = \"bidirectional\"", X1, W, R, B, nullptr, H1, C1);
  for (int64_t d = 0; d < 2; ++d)
    for (int64_t k = 0; k < 2; ++k) {
      for (int64_t t = 0; t < 4; ++t)
        EXPECT_NEAR(at(full[0], {t, d, 1, k}), t < 2 ? at(alone[0], {t, d, 0, k}) : 0.0, 1e-6);
      EXPECT_NEAR(at(full[1], {d, 1, k}), at(alone[1], {d, 0, k}), 1e-6);
      EXPECT_NEAR(at(full[2], {d, 1, k}), at(alone[2], {d, 0, k}), 1e-6);
    }
}

TEST(RnnKernelsTest, BadShapesAreErrors) {
  Tensor X = f32({2, 1, 3}, {}), W = f32({1, 8, 2}, {}), R = f32({1, 8, 2}, {});
  std::vector<Tensor> out;
  absl::Status st =
      run(model(14, "(float[2,1,3] X, float[1,8,2] W, float[1,8,2] R) => (float[a,b,c,d] Y)",
                "Y = LSTM <hidden_size = 2> (X, W, R)"),
          {&X, &W, &R}, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  Tensor W3 = f32({1, 8, 3}, {});
  st = run(model(14, "(float[2,1,3] X, float[1,8,3] W, float[1,8,2] R) => (float[a,b,c,d] Y)",
                 "Y = LSTM <hidden_size = 2, direction = \"sideways\"> (X, W, R)"),
           {&X, &W3, &R}, &out);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
}

TEST(RnnKernelsTest, DropoutIsTheIdentityUnlessRandom) {
  Tensor x = f32({3}, {1.5f, -2.0f, 0.25f});
  std::vector<Tensor> out;
  ASSERT_TRUE(
      run(model(13, "(float[3] x) => (float[3] y, bool[3] m)", "y, m = Dropout (x)"), {&x}, &out)
          .ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{1.5, -2.0, 0.25}));
  EXPECT_EQ(out[1].dtype(), TensorProto::BOOL);
  EXPECT_EQ(ints_of(out[1]), (std::vector<int64_t>{1, 1, 1}));
  // Opset 7-9 masks have the data type.
  ASSERT_TRUE(
      run(model(7, "(float[3] x) => (float[3] y, float[3] m)", "y, m = Dropout (x)"), {&x}, &out)
          .ok());
  EXPECT_EQ(out[1].dtype(), TensorProto::FLOAT);
  // Training mode: random unless the ratio is 0.
  Tensor ratio = f32({}, {0.5f}), zero = f32({}, {0.0f});
  Tensor on = make<bool>(TensorProto::BOOL, {}, {true});
  const std::string text =
      model(13, "(float[3] x, float r, bool t) => (float[3] y)", "y = Dropout (x, r, t)");
  EXPECT_EQ(run(text, {&x, &ratio, &on}, &out).code(), absl::StatusCode::kUnimplemented);
  ASSERT_TRUE(run(text, {&x, &zero, &on}, &out).ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{1.5, -2.0, 0.25}));
  // Before opset 7 the default is training (is_test = 0).
  const std::string old = model(6, "(float[3] x) => (float[3] y)", "y = Dropout (x)");
  EXPECT_EQ(run(old, {&x}, &out).code(), absl::StatusCode::kUnimplemented);
  ASSERT_TRUE(
      run(model(6, "(float[3] x) => (float[3] y)", "y = Dropout <is_test = 1> (x)"), {&x}, &out)
          .ok());
  EXPECT_EQ(doubles_of(out[0]), (std::vector<double>{1.5, -2.0, 0.25}));
}

}  // namespace
}  // namespace graft::eval
