// Evaluator latency: each model run by eval::run_model with its float MatMul/Gemm/Conv on the
// reference loops and on dgemm (core/eval/gemm.h), interleaved, one thread, on one seeded random
// input in [-1, 1]. Prints per model the medians, their ratio, the work the run charged (the
// unit of Limits::max_work) and the largest difference between the two paths' outputs; and the
// dgemm runs' median CPU time (of this thread: what other processes on a loaded machine take
// from the wall time does not count).
//
//   graft_eval_bench [--reps N] [--blas-only] MODEL.onnx ...
//
// bench/eval_speed/make_models.py writes the models; bench/eval_speed/README.md tells the rest.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>

#include "core/eval/executor.h"
#include "core/eval/gemm.h"
#include "core/ir/model.h"

namespace {

using Clock = std::chrono::steady_clock;

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "graft_eval_bench: %s\n", what.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  bool blas_only = false;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--blas-only") {
      blas_only = true;
    } else {
      paths.push_back(a);
    }
  }
  if (paths.empty()) die("usage: graft_eval_bench [--reps N] [--blas-only] MODEL.onnx ...");

  graft::eval::Limits limits;
  limits.max_tensor_bytes = uint64_t{1} << 32;
  limits.max_live_bytes = 0;
  limits.max_work = 0;
  std::printf("%-14s %12s %12s %8s %16s %12s %12s\n", "model", "reference ms", "dgemm ms", "ratio",
              "work (mul-adds)", "max |diff|", "dgemm cpu ms");
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    onnx::ModelProto proto;
    if (!in || !proto.ParseFromIstream(&in)) die("cannot read " + path);
    // The one graph input that is not an initializer, float, with fixed dims.
    std::map<std::string, graft::eval::Tensor> feeds;
    std::mt19937 rng(0);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    for (const auto& input : proto.graph().input()) {
      bool init = false;
      for (const auto& t : proto.graph().initializer()) init = init || t.name() == input.name();
      if (init) continue;
      std::vector<int64_t> dims;
      for (const auto& d : input.type().tensor_type().shape().dim()) dims.push_back(d.dim_value());
      auto t = graft::eval::Tensor::zeros(onnx::TensorProto::FLOAT, dims, limits.max_tensor_bytes);
      if (!t.ok()) die(std::string(t.status().message()));
      for (int64_t i = 0; i < t->size(); ++i) t->set_double(i, u(rng));
      feeds.emplace(input.name(), std::move(*t));
    }
    auto model = graft::ir::Model::from_proto(std::move(proto));
    if (!model.ok()) die(std::string(model.status().message()));

    std::vector<double> ref_ms, blas_ms, ref_cpu, blas_cpu;
    std::vector<graft::eval::Tensor> ref_out, blas_out;
    uint64_t work = 0;
    auto run = [&](bool reference, std::vector<double>& times, std::vector<double>& cpu,
                   std::vector<graft::eval::Tensor>& out) {
      graft::eval::ReferenceKernelsScope scope(reference);
      graft::eval::RunStats stats;
      const auto start = Clock::now();
      const double cpu_start = thread_cpu_ms();
      auto result = graft::eval::run_model(**model, feeds, limits, &stats);
      cpu.push_back(thread_cpu_ms() - cpu_start);
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
      if (!result.ok()) die(path + ": " + std::string(result.status().message()));
      out = std::move(*result);
      work = stats.work;
    };
    run(false, blas_ms, blas_cpu, blas_out);  // warm-up: first touch of the weights, OpenBLAS's
    blas_ms.clear();                          // buffers
    blas_cpu.clear();
    for (int r = 0; r < reps; ++r) {
      if (!blas_only) run(true, ref_ms, ref_cpu, ref_out);
      run(false, blas_ms, blas_cpu, blas_out);
    }
    double diff = 0;
    if (!blas_only)
      for (size_t o = 0; o < ref_out.size(); ++o)
        for (int64_t i = 0; i < ref_out[o].size(); ++i)
          diff = std::max(diff, std::abs(ref_out[o].get_double(i) - blas_out[o].get_double(i)));
    const std::string name = path.substr(path.find_last_of('/') + 1);
    const double ref = blas_only ? 0 : median(ref_ms), fast = median(blas_ms);
    std::printf("%-14s %12.1f %12.1f %8.1f %16llu %12.3g %12.1f\n", name.c_str(), ref, fast,
                blas_only ? 0.0 : ref / fast, static_cast<unsigned long long>(work), diff,
                median(blas_cpu));
    std::fflush(stdout);
  }
  return 0;
}
