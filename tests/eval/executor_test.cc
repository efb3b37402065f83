// Whole-graph execution, and the semantic check it exists for: optimized models compute the
// same outputs as the originals.
#include <atomic>
#include <random>
#include <thread>

#include "core/eval/executor.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

namespace fs = std::filesystem;

eval::Tensor load_tensor(const fs::path& path) {
  onnx::TensorProto proto;
  EXPECT_TRUE(proto.ParseFromString(read_file(path))) << path;
  auto t = eval::Tensor::from_proto(proto, 1ull << 30);
  EXPECT_TRUE(t.ok()) << path << ": " << t.status();
  return t.ok() ? std::move(*t) : eval::Tensor();
}

void expect_close(const eval::Tensor& a, const eval::Tensor& b, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.dims(), b.dims()) << what;
  for (int64_t i = 0; i < a.size(); ++i) {
    double x = a.get_double(i), y = b.get_double(i);
    if (std::isnan(x) && std::isnan(y)) continue;
    ASSERT_LE(std::abs(x - y), atol + rtol * std::abs(y)) << what << " element " << i;
  }
}

TEST(Executor, LiveTensorsAreFreedAfterTheirLastReaderAndCapped) {
  // Every tensor is 1024 floats (4 KiB). The chain keeps at most two alive at a time; the fan
  // keeps all four branches alive until the Concat reads them.
  auto chain = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1024] x) => (float[1024] y) {
      a = Neg (x)
      b = Neg (a)
      c = Neg (b)
      d = Neg (c)
      y = Neg (d)
    }
  )");
  auto fan = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[1024] x) => (float[4096] y) {
      a = Neg (x)
      b = Abs (x)
      c = Exp (x)
      d = Sin (x)
      y = Concat <axis = 0> (a, b, c, d)
    }
  )");
  ASSERT_TRUE(chain && fan);
  auto x = eval::Tensor::zeros(onnx::TensorProto::FLOAT, {1024}, 1 << 20);
  ASSERT_TRUE(x.ok());
  std::map<std::string, eval::Tensor> feeds{{"x", *x}};
  eval::Limits limits;
  limits.max_live_bytes = 3 * 4096 + 100;  // three 4 KiB tensors
  auto ok = eval::run_model(*chain, feeds, limits);
  EXPECT_TRUE(ok.ok()) << ok.status();
  auto too_wide = eval::run_model(*fan, feeds, limits);
  EXPECT_EQ(too_wide.status().code(), absl::StatusCode::kResourceExhausted) << too_wide.status();
  EXPECT_NE(too_wide.status().message().find("memory budget"), std::string::npos);
  limits.max_live_bytes = 0;  // no cap
  EXPECT_TRUE(eval::run_model(*fan, feeds, limits).ok());
}

// y = Relu(x W + b) and W itself as a second output, with W and b in raw_data (read in place by
// the runs) or in float_data (converted on every run, as all initializers were before).
std::unique_ptr<ir::Model> dense_model(bool raw, int64_t k, int64_t n) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("dense");
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto add_init = [&](const std::string& name, std::vector<int64_t> dims) {
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t count = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      count *= d;
    }
    std::vector<float> v(static_cast<size_t>(count));
    for (float& f : v) f = u(rng);
    if (raw) {
      t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
    } else {
      for (float f : v) t->add_float_data(f);
    }
  };
  add_init("W", {k, n});
  add_init("b", {n});
  auto value_info = [](onnx::ValueInfoProto* vi, const std::string& name,
                       std::vector<int64_t> dims) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  value_info(g->add_input(), "x", {3, 5, k});
  value_info(g->add_output(), "y", {3, 5, n});
  value_info(g->add_output(), "W", {k, n});
  auto node = [&](const std::string& op, std::vector<std::string> in, const std::string& out) {
    onnx::NodeProto* nd = g->add_node();
    nd->set_op_type(op);
    for (const auto& i : in) nd->add_input(i);
    nd->add_output(out);
  };
  node("MatMul", {"x", "W"}, "xw");
  node("Add", {"xw", "b"}, "s");
  node("Relu", {"s"}, "y");
  auto model = ir::Model::from_proto(std::move(m));
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

// Runs read the initializers in place (Tensor::view_of) and share them, on any number of
// threads: the same bits as converting them on every run, the same memory charged, and outputs
// that stay valid when the model is gone (W, an initializer, is returned as a view of it).
TEST(Executor, InitializersReadInPlaceAreSharedByConcurrentRuns) {
  constexpr int64_t k = 96, n = 200;
  auto raw = dense_model(true, k, n);
  auto typed = dense_model(false, k, n);
  ASSERT_TRUE(raw && typed);
  auto x = eval::Tensor::zeros(onnx::TensorProto::FLOAT, {3, 5, k}, 1 << 20);
  ASSERT_TRUE(x.ok());
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t i = 0; i < x->size(); ++i) x->set_double(i, u(rng));
  const std::map<std::string, eval::Tensor> feeds{{"x", *x}};
  eval::RunStats converted_stats, shared_stats;
  auto converted = eval::run_model(*typed, feeds, {}, &converted_stats);
  ASSERT_TRUE(converted.ok()) << converted.status();
  std::vector<eval::Tensor> expected;
  {
    auto model = dense_model(true, k, n);
    auto out = eval::run_model(*model, feeds, {}, &shared_stats);
    ASSERT_TRUE(out.ok()) << out.status();
    expected = std::move(*out);
  }  // the model is gone: W, a view of its initializer, keeps that alive
  ASSERT_EQ(expected.size(), 2u);
  EXPECT_FALSE(expected[0].is_view());
  EXPECT_TRUE(expected[1].is_view());
  EXPECT_TRUE(expected[0] == (*converted)[0]);
  EXPECT_TRUE(expected[1] == (*converted)[1]);
  EXPECT_EQ(shared_stats.peak_bytes, converted_stats.peak_bytes);
  EXPECT_EQ(shared_stats.work, converted_stats.work);
  // Within a budget that holds one run's tensors but not two copies of the weights per run.
  eval::Limits limits;
  limits.max_live_bytes = shared_stats.peak_bytes;
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int r = 0; r < 5; ++r) {
        eval::RunStats stats;
        auto out = eval::run_model(*raw, feeds, limits, &stats);
        if (!out.ok()) {
          ++failures;
          continue;
        }
        if (!((*out)[0] == expected[0]) || !((*out)[1] == expected[1]) ||
            stats.peak_bytes != shared_stats.peak_bytes)
          ++mismatches;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  // One byte less than a run charges: refused, as before weights were shared.
  limits.max_live_bytes = shared_stats.peak_bytes - 1;
  EXPECT_EQ(eval::run_model(*raw, feeds, limits).status().code(),
            absl::StatusCode::kResourceExhausted);
}

// Runs a backend test case (model + input_*.pb) and compares with output_*.pb.
void run_backend_case(const fs::path& dir) {
  auto model = ir::Model::load_file((dir / "model.onnx").string());
  ASSERT_TRUE(model.ok()) << model.status();
  fs::path data = dir / "test_data_set_0";
  std::map<std::string, eval::Tensor> feeds;
  const auto& inputs = (*model)->graph().inputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    fs::path p = data / ("input_" + std::to_string(i) + ".pb");
    if (fs::exists(p)) feeds[inputs[i].value->name()] = load_tensor(p);
  }
  auto outputs = eval::run_model(**model, feeds);
  ASSERT_TRUE(outputs.ok()) << dir << ": " << outputs.status();
  for (size_t i = 0; i < outputs->size(); ++i)
    expect_close((*outputs)[i], load_tensor(data / ("output_" + std::to_string(i) + ".pb")), 1e-3,
                 1e-5, dir.string());
}

TEST(Executor, IfAndLoopBackendCases) {
  fs::path root = onnx_testdata_dir();
  if (root.empty()) GTEST_SKIP() << "libonnx-testdata is not installed";
  for (const char* name : {"test_if", "test_loop11"}) run_backend_case(root / "node" / name);
}

TEST(Executor, UnsupportedOpIsNamed) {
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "custom" : 1]>
    g (float[2] x) => (float[2] y) {
      y = custom.Frobnicate (x)
    }
  )");
  std::map<std::string, eval::Tensor> feeds;
  auto x = eval::Tensor::zeros(onnx::TensorProto::FLOAT, {2}, 1 << 20);
  ASSERT_TRUE(x.ok());
  feeds["x"] = *x;
  auto out = eval::run_model(*model, feeds);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(out.status().message()).find("Frobnicate"), std::string::npos);
}

// Seeded random inputs from the model's declared shapes (symbolic dims from `dims`).
std::map<std::string, eval::Tensor> random_feeds(
    const ir::Model& model, const std::map<std::string, std::vector<int64_t>>& shapes,
    uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::map<std::string, eval::Tensor> feeds;
  for (const auto& in : model.graph().inputs()) {
    if (in.value->is_initializer()) continue;
    std::vector<int64_t> dims;
    auto it = shapes.find(in.value->name());
    if (it != shapes.end()) {
      dims = it->second;
    } else {
      for (const auto& d : in.info.type().tensor_type().shape().dim())
        dims.push_back(d.has_dim_value() ? d.dim_value() : 1);
    }
    auto t = eval::Tensor::zeros(in.info.type().tensor_type().elem_type(), dims, 1ull << 30);
    EXPECT_TRUE(t.ok()) << t.status();
    for (int64_t i = 0; i < t->size(); ++i) t->set_double(i, dist(rng));
    feeds[in.value->name()] = std::move(*t);
  }
  return feeds;
}

TEST(Executor, OptimizedExampleModelComputesTheSameOutputs) {
  std::string bytes = read_file(fs::path(GRAFT_SOURCE_DIR) / "models" / "ppocr_mobile_v2_cls.onnx");
  auto original = ir::Model::parse(bytes);
  auto optimized = ir::Model::parse(bytes);
  ASSERT_TRUE(original.ok() && optimized.ok());
  auto report = run_pipeline(*optimized, test_pipeline_config());
  ASSERT_TRUE(report.ok());
  ASSERT_LT(report->nodes_after, report->nodes_before);
  auto feeds = random_feeds(**original, {{"x", {1, 3, 48, 192}}}, 42);
  eval::Limits limits;
  limits.max_tensor_bytes = 1ull << 30;
  auto a = eval::run_model(**original, feeds, limits);
  if (!a.ok() && a.status().code() == absl::StatusCode::kUnimplemented)
    GTEST_SKIP() << "not verifiable yet: " << a.status();
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = eval::run_model(**optimized, feeds, limits);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->size(), b->size());
  for (size_t i = 0; i < a->size(); ++i) expect_close((*b)[i], (*a)[i], 1e-4, 1e-5, "output");
}

}  // namespace
}  // namespace graft::testing

namespace graft::testing {
namespace {

TEST(Executor, OptimizedSharedModelsComputeTheSameOutputs) {
  fs::path root = shared_models_dir();
  if (root.empty()) GTEST_SKIP() << "../shared/models is absent (only in the team's checkout)";
  const std::map<std::string, std::map<std::string, std::vector<int64_t>>> shapes = {
      {"ppocrv4_det.onnx", {{"x", {1, 3, 64, 64}}}},
      {"ppocr_mobile_v2_cls.onnx", {{"x", {1, 3, 48, 192}}}},
  };
  for (const auto& [file, dims] : shapes) {
    std::string bytes = read_file(root / file);
    auto original = ir::Model::parse(bytes);
    auto optimized = ir::Model::parse(bytes);
    ASSERT_TRUE(original.ok() && optimized.ok()) << file;
    ASSERT_TRUE(run_pipeline(*optimized, test_pipeline_config()).ok()) << file;
    auto feeds = random_feeds(**original, dims, 7);
    eval::Limits limits;
    limits.max_tensor_bytes = 1ull << 30;
    auto a = eval::run_model(**original, feeds, limits);
    ASSERT_TRUE(a.ok()) << file << ": " << a.status();
    auto b = eval::run_model(**optimized, feeds, limits);
    ASSERT_TRUE(b.ok()) << file << ": " << b.status();
    ASSERT_EQ(a->size(), b->size());
    double worst = 0;
    for (size_t i = 0; i < a->size(); ++i) {
      expect_close((*b)[i], (*a)[i], 1e-4, 1e-5, file);
      for (int64_t k = 0; k < (*a)[i].size(); ++k)
        worst = std::max(worst, std::abs((*a)[i].get_double(k) - (*b)[i].get_double(k)));
    }
    std::cout << file << ": " << (*a)[0].size() << " output elements, max abs difference " << worst
              << "\n";
  }
}

}  // namespace
}  // namespace graft::testing

// Model-local functions and Scan.
namespace graft::testing {
namespace {

eval::Tensor floats(std::vector<int64_t> dims, const std::vector<double>& values) {
  auto t = eval::Tensor::zeros(onnx::TensorProto::FLOAT, std::move(dims), 1 << 20);
  EXPECT_TRUE(t.ok());
  EXPECT_EQ(t->size(), static_cast<int64_t>(values.size()));
  for (size_t i = 0; i < values.size(); ++i) t->set_double(static_cast<int64_t>(i), values[i]);
  return *t;
}

void expect_values(const eval::Tensor& t, const std::vector<int64_t>& dims,
                   const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(t.dims(), dims) << what;
  ASSERT_EQ(t.size(), static_cast<int64_t>(want.size())) << what;
  for (int64_t i = 0; i < t.size(); ++i)
    EXPECT_NEAR(t.get_double(i), want[i], 1e-5 + 1e-5 * std::abs(want[i])) << what << " @" << i;
}

TEST(Executor, LocalFunctionsRunTheirBodies) {
  // Twice calls Square through another local function; both calls of Twice share one body.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[3] x, float[3] z) => (float[3] y, float[3] w, float[3] v) {
      y, w = local.Twice (x)
      v, unused = local.Twice (z)
    }
    <domain: "local", opset_import: ["" : 13, "local" : 1]>
    Twice (a) => (b, c) {
      s = Add (a, a)
      b = local.Square (s)
      c = Neg (a)
    }
    <domain: "local", opset_import: ["" : 13]>
    Square (p) => (q) {
      q = Mul (p, p)
    }
  )");
  ASSERT_TRUE(model);
  const std::vector<double> x = {1, -2, 0.5}, z = {3, 0, -1};
  auto out = eval::run_model(*model, {{"x", floats({3}, x)}, {"z", floats({3}, z)}});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> y, w, v;
  for (int i = 0; i < 3; ++i) {
    y.push_back(4 * x[i] * x[i]);
    w.push_back(-x[i]);
    v.push_back(4 * z[i] * z[i]);
  }
  expect_values((*out)[0], {3}, y, "y");
  expect_values((*out)[1], {3}, w, "w");
  expect_values((*out)[2], {3}, v, "v");
}

TEST(Executor, LocalFunctionAttributeReferences) {
  // alpha comes from the caller, or is LeakyRelu's default 0.01 when the caller sets none.
  auto model_single = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[4] x) => (float[4] d) {
      d = local.Leaky (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    Leaky <alpha> (a, m) => (b) {
      b = LeakyRelu <alpha: float = @alpha> (a)
    }
  )");
  ASSERT_TRUE(model_single);
  const std::vector<double> x = {-4, -1, 2, 0.5}, lo = {-0.5, -0.5, -0.5, 1};
  auto leaky = [](double v, double alpha) { return v < 0 ? alpha * v : v; };
  auto out = eval::run_model(*model_single, {{"x", floats({4}, x)}});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> d;
  for (double v : x) d.push_back(leaky(v, 0.01));
  expect_values((*out)[0], {4}, d, "default alpha");

  auto model2 = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[4] x, float[4] lo) => (float[4] y, float[4] c) {
      y = local.Leaky <alpha = 0.25> (x, lo)
      c = local.Leaky <alpha = 0.5> (x, lo)
    }
    <domain: "local", opset_import: ["" : 13]>
    Leaky <alpha> (a, m) => (b) {
      r = LeakyRelu <alpha: float = @alpha> (a)
      b = Max (r, m)
    }
  )");
  ASSERT_TRUE(model2);
  out = eval::run_model(*model2, {{"x", floats({4}, x)}, {"lo", floats({4}, lo)}});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> y, c;
  for (int i = 0; i < 4; ++i) {
    y.push_back(std::max(leaky(x[i], 0.25), lo[i]));
    c.push_back(std::max(leaky(x[i], 0.5), lo[i]));
  }
  expect_values((*out)[0], {4}, y, "alpha 0.25");
  expect_values((*out)[1], {4}, c, "alpha 0.5");
}

TEST(Executor, LocalFunctionOptionalInputLeftOut) {
  // Clip's min comes from the function's optional second input; without it, no lower bound.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 13, "local" : 1]>
    g (float[3] x, float lo) => (float[3] y, float[3] z) {
      y = local.Floor (x, lo)
      z = local.Floor (x)
    }
    <domain: "local", opset_import: ["" : 13]>
    Floor (a, m) => (b) {
      b = Clip (a, m)
    }
  )");
  ASSERT_TRUE(model);
  const std::vector<double> x = {-3, 0.25, 7};
  const double lo = -1;
  auto out = eval::run_model(*model, {{"x", floats({3}, x)}, {"lo", floats({}, {lo})}});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> y;
  for (double v : x) y.push_back(std::max(v, lo));
  expect_values((*out)[0], {3}, y, "with min");
  expect_values((*out)[1], {3}, x, "without min");
}

TEST(Executor, ScanWithAxesDirectionsAndState) {
  // Scans x [2, T, 3] along axis 1 forward and in reverse; the state accumulates the forward
  // rows; outputs: the running sum stacked on axis 0 in reverse order, the reversed rows times 2
  // stacked on axis -1.
  auto model = parse_text(R"(
    <ir_version: 8, opset_import: ["" : 16]>
    g (float[2,3] init, float[2,4,3] x) => (float[2,3] final, float[4,2,3] sums, float[2,3,4] rev) {
      final, sums, rev = Scan <num_scan_inputs = 2, scan_input_axes = [1, 1],
                               scan_input_directions = [0, 1], scan_output_axes = [0, -1],
                               scan_output_directions = [1, 0],
          body = step (float[2,3] acc, float[2,3] row, float[2,3] back)
                   => (float[2,3] acc_out, float[2,3] sum_out, float[2,3] twice) {
            acc_out = Add (acc, row)
            sum_out = Identity (acc_out)
            two = Constant <value_float = 2.0> ()
            twice = Mul (back, two)
          }> (init, x, x)
    }
  )");
  ASSERT_TRUE(model);
  const int64_t B = 2, T = 4, C = 3;
  std::vector<double> init(B * C), x(B * T * C);
  for (size_t i = 0; i < init.size(); ++i) init[i] = 0.1 * static_cast<double>(i) - 0.2;
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<double>(i));
  auto out = eval::run_model(*model, {{"init", floats({B, C}, init)}, {"x", floats({B, T, C}, x)}});
  ASSERT_TRUE(out.ok()) << out.status();
  auto X = [&](int64_t b, int64_t t, int64_t c) { return x[(b * T + t) * C + c]; };
  std::vector<double> final_state(B * C), sums(T * B * C), rev(B * C * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      double acc = init[b * C + c];
      for (int64_t t = 0; t < T; ++t) {
        acc += X(b, t, c);
        // Iteration t's sum lands at position T-1-t (reverse output direction).
        sums[((T - 1 - t) * B + b) * C + c] = acc;
        // Iteration t reads row T-1-t (reverse input) and stacks forward on the last axis.
        rev[(b * C + c) * T + t] = 2 * X(b, T - 1 - t, c);
      }
      final_state[b * C + c] = acc;
    }
  expect_values((*out)[0], {B, C}, final_state, "final");
  expect_values((*out)[1], {T, B, C}, sums, "sums");
  expect_values((*out)[2], {B, C, T}, rev, "rev");
}

TEST(Executor, Scan8BatchesAndSequenceLengths) {
  // Opset 8: batch axis 0, sequence axis 1, per-batch lengths; outputs past a length are zero.
  auto model = parse_text(R"(
    <ir_version: 4, opset_import: ["" : 8]>
    g (int64[2] lens, float[2,2] init, float[2,3,2] x) => (float[2,2] final, float[2,3,2] seen) {
      final, seen = Scan <num_scan_inputs = 1, directions = [1],
          body = step (float[2] acc, float[2] row) => (float[2] acc_out, float[2] row_out) {
            acc_out = Add (acc, row)
            row_out = Identity (row)
          }> (lens, init, x)
    }
  )");
  ASSERT_TRUE(model);
  const std::vector<double> init = {1, 2, 3, 4};
  std::vector<double> x(12);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<double>(i) + 1;
  auto lens = eval::Tensor::zeros(onnx::TensorProto::INT64, {2}, 1 << 20);
  ASSERT_TRUE(lens.ok());
  lens->set_int64(0, 3);
  lens->set_int64(1, 2);
  auto out = eval::run_model(
      *model, {{"lens", *lens}, {"init", floats({2, 2}, init)}, {"x", floats({2, 3, 2}, x)}});
  ASSERT_TRUE(out.ok()) << out.status();
  const int64_t len[2] = {3, 2};
  std::vector<double> final_state(4), seen(12, 0.0);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t c = 0; c < 2; ++c) {
      double acc = init[b * 2 + c];
      for (int64_t t = 0; t < len[b]; ++t) {
        const double row = x[(b * 3 + (len[b] - 1 - t)) * 2 + c];  // reverse within the length
        acc += row;
        seen[(b * 3 + t) * 2 + c] = row;
      }
      final_state[b * 2 + c] = acc;
    }
  expect_values((*out)[0], {2, 2}, final_state, "final");
  expect_values((*out)[1], {2, 3, 2}, seen, "seen");
}

TEST(Executor, OptimizedSileroComputesTheSameOutputs) {
  // An LSTM inside If branches chosen by the sample rate.
  fs::path root = shared_models_dir();
  if (root.empty()) GTEST_SKIP() << "../shared/models is absent (only in the team's checkout)";
  std::string bytes = read_file(root / "silero_vad_v5.onnx");
  auto original = ir::Model::parse(bytes);
  auto optimized = ir::Model::parse(bytes);
  ASSERT_TRUE(original.ok() && optimized.ok());
  ASSERT_TRUE(run_pipeline(*optimized, test_pipeline_config()).ok());
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> audio(-0.5, 0.5), state(-0.1, 0.1);
  std::vector<double> x(512), h(2 * 128);
  for (double& v : x) v = audio(rng);
  for (double& v : h) v = state(rng);
  auto sr = eval::Tensor::zeros(onnx::TensorProto::INT64, {}, 1 << 20);
  ASSERT_TRUE(sr.ok());
  sr->set_int64(0, 16000);
  std::map<std::string, eval::Tensor> feeds = {
      {"input", floats({1, 512}, x)}, {"state", floats({2, 1, 128}, h)}, {"sr", *sr}};
  auto a = eval::run_model(**original, feeds);
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = eval::run_model(**optimized, feeds);
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->size(), 2u);
  ASSERT_EQ(b->size(), 2u);
  // A speech probability, and the next LSTM state.
  ASSERT_EQ((*a)[0].dims(), (std::vector<int64_t>{1, 1}));
  EXPECT_GT((*a)[0].get_double(0), 0.0);
  EXPECT_LT((*a)[0].get_double(0), 1.0);
  ASSERT_EQ((*a)[1].dims(), (std::vector<int64_t>{2, 1, 128}));
  for (size_t i = 0; i < a->size(); ++i) expect_close((*b)[i], (*a)[i], 1e-4, 1e-5, "silero");
}

TEST(Executor, ScanBackendCases) {
  fs::path root = onnx_testdata_dir();
  if (root.empty()) GTEST_SKIP() << "libonnx-testdata is not installed";
  for (const char* name : {"test_scan_sum", "test_scan9_sum"})
    run_backend_case(root / "node" / name);
}

}  // namespace
}  // namespace graft::testing
