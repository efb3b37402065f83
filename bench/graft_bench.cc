// Times Graft (load + O2 pipeline + save) against a floor measured in the same run: protobuf
// parsing and re-serializing the same bytes, the least any tool that reads and writes ONNX has to
// do. Ratios, not absolute times, are the result: they carry over between machines.
//
//   graft_bench            full run (a 512 MiB weight model, chains up to 1M nodes; minutes)
//   graft_bench --quick    tiny sizes, for a CI smoke run (seconds)
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <onnx/onnx_pb.h>

#include "core/ir/model.h"
#include "core/pipeline/pipeline.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
}

// ---------------------------------------------------------------------------------------------
// Synthetic models, built as protos so the bench does not depend on the code it measures.

onnx::ModelProto new_model(const std::string& graph_name) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("graft_bench");
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(13);
  m.mutable_graph()->set_name(graph_name);
  return m;
}

void set_float_type(onnx::ValueInfoProto* info, const std::string& name,
                    const std::vector<int64_t>& dims) {
  info->set_name(name);
  auto* tensor = info->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) tensor->mutable_shape()->add_dim()->set_dim_value(d);
}

onnx::NodeProto* add_node(onnx::GraphProto* g, const char* op, std::vector<std::string> inputs,
                          const std::string& output) {
  auto* n = g->add_node();
  n->set_op_type(op);
  for (auto& in : inputs) n->add_input(std::move(in));
  n->add_output(output);
  return n;
}

// Floats in [lo, hi) from a seeded splitmix64 stream, stored as raw_data like exporters do. Equal
// seeds give byte-identical tensors, which is how duplicates are made.
onnx::TensorProto float_tensor(const std::string& name, const std::vector<int64_t>& dims,
                               uint64_t seed, float lo = -1, float hi = 1) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  size_t count = 1;
  for (int64_t d : dims) {
    t.add_dims(d);
    count *= static_cast<size_t>(d);
  }
  std::string raw(count * sizeof(float), '\0');
  uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (size_t i = 0; i < count; ++i) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    float f = lo + (hi - lo) * static_cast<float>(z >> 40) / static_cast<float>(1 << 24);
    std::memcpy(raw.data() + i * sizeof(float), &f, sizeof(float));
  }
  t.set_raw_data(std::move(raw));
  return t;
}

void add_constant(onnx::GraphProto* g, const std::string& output, onnx::TensorProto value) {
  auto* n = add_node(g, "Constant", {}, output);
  auto* attr = n->add_attribute();
  attr->set_name("value");
  attr->set_type(onnx::AttributeProto::TENSOR);
  value.clear_name();
  *attr->mutable_t() = std::move(value);
}

// Few nodes, big weights: `layers` MatMul+Add(+Relu) layers of [hidden, hidden] floats whose last
// two weights duplicate the first two (dedup_initializers), biases from Constant nodes
// (extract_constants, then fuse_matmul_add), Identity nodes, and a Conv+BatchNormalization branch
// (fuse_conv_batchnorm).
std::string weight_heavy_model(int64_t hidden, int layers, int64_t channels) {
  onnx::ModelProto m = new_model("weight_heavy");
  auto* g = m.mutable_graph();
  set_float_type(g->add_input(), "x", {1, hidden});
  std::string x = "x";
  for (int i = 0; i < layers; ++i) {
    const uint64_t seed = static_cast<uint64_t>(i < layers - 2 ? i : i - (layers - 2)) + 1;
    const std::string s = std::to_string(i);
    *g->add_initializer() = float_tensor("w" + s, {hidden, hidden}, seed, -0.02f, 0.02f);
    add_constant(g, "bias" + s, float_tensor("", {hidden}, 1000 + seed));
    add_node(g, "MatMul", {x, "w" + s}, "mm" + s);
    add_node(g, "Add", {"mm" + s, "bias" + s}, "add" + s);
    add_node(g, "Relu", {"add" + s}, "relu" + s);
    x = "relu" + s;
    if (i % 2) {
      add_node(g, "Identity", {x}, "id" + s);
      x = "id" + s;
    }
    for (const char* v : {"mm", "add", "relu"})
      set_float_type(g->add_value_info(), v + s, {1, hidden});
  }
  set_float_type(g->add_output(), x, {1, hidden});

  const int64_t spatial = 28;
  set_float_type(g->add_input(), "image", {1, channels, spatial, spatial});
  *g->add_initializer() = float_tensor("conv_w", {channels, channels, 3, 3}, 77, -0.1f, 0.1f);
  *g->add_initializer() = float_tensor("conv_b", {channels}, 78);
  *g->add_initializer() = float_tensor("bn_scale", {channels}, 79, 0.5f, 1.5f);
  *g->add_initializer() = float_tensor("bn_bias", {channels}, 80);
  *g->add_initializer() = float_tensor("bn_mean", {channels}, 81);
  *g->add_initializer() = float_tensor("bn_var", {channels}, 82, 0.5f, 2.0f);
  auto* conv = add_node(g, "Conv", {"image", "conv_w", "conv_b"}, "conv");
  auto* pads = conv->add_attribute();
  pads->set_name("pads");
  pads->set_type(onnx::AttributeProto::INTS);
  for (int k = 0; k < 4; ++k) pads->add_ints(1);
  add_node(g, "BatchNormalization", {"conv", "bn_scale", "bn_bias", "bn_mean", "bn_var"}, "bn");
  add_node(g, "Relu", {"bn"}, "bn_relu");
  add_node(g, "Identity", {"bn_relu"}, "features");
  set_float_type(g->add_output(), "features", {1, channels, spatial, spatial});

  std::string bytes;
  m.SerializeToString(&bytes);
  return bytes;
}

// A chain of exactly `nodes` nodes, repeating an 11-node block on [1, 4] floats in which every
// O2 pass has something to do: a Constant (extract_constants, then dedup_initializers across
// blocks), Identity, an identity Transpose (eliminate_noop), two equal Sigmoids (cse), a dead Neg
// (prune) and MatMul + Add of a constant bias (fuse_matmul_add; weights repeat every 4 blocks).
std::string chain_model(int64_t nodes) {
  onnx::ModelProto m = new_model("chain");
  auto* g = m.mutable_graph();
  set_float_type(g->add_input(), "x", {1, 4});
  std::string x = "x";
  int64_t made = 0;
  for (int64_t b = 0; made + 11 <= nodes; ++b, made += 11) {
    const std::string s = std::to_string(b);
    add_constant(g, "c" + s, float_tensor("", {1, 4}, 1));
    add_node(g, "Relu", {x}, "r" + s);
    add_node(g, "Identity", {"r" + s}, "i" + s);
    auto* tr = add_node(g, "Transpose", {"i" + s}, "t" + s);
    auto* perm = tr->add_attribute();
    perm->set_name("perm");
    perm->set_type(onnx::AttributeProto::INTS);
    perm->add_ints(0);
    perm->add_ints(1);
    add_node(g, "Add", {"t" + s, "c" + s}, "a" + s);
    add_node(g, "Sigmoid", {"a" + s}, "s" + s);
    add_node(g, "Sigmoid", {"a" + s}, "u" + s);
    add_node(g, "Add", {"s" + s, "u" + s}, "f" + s);
    add_node(g, "Neg", {"f" + s}, "dead" + s);
    *g->add_initializer() = float_tensor("w" + s, {4, 4}, 10 + b % 4, -0.5f, 0.5f);
    *g->add_initializer() = float_tensor("b" + s, {4}, 20);
    add_node(g, "MatMul", {"f" + s, "w" + s}, "m" + s);
    add_node(g, "Add", {"m" + s, "b" + s}, "o" + s);
    set_float_type(g->add_value_info(), "f" + s, {1, 4});
    set_float_type(g->add_value_info(), "m" + s, {1, 4});
    x = "o" + s;
  }
  for (; made < nodes; ++made) {
    std::string out = "pad" + std::to_string(made);
    add_node(g, "Relu", {x}, out);
    x = out;
  }
  set_float_type(g->add_output(), x, {1, 4});
  std::string bytes;
  m.SerializeToString(&bytes);
  return bytes;
}

// ---------------------------------------------------------------------------------------------
// Measurement

struct Result {
  std::string name;
  std::string error;
  int reps = 0;
  size_t in_bytes = 0, out_bytes = 0;
  size_t nodes_in = 0, nodes_out = 0;
  uint64_t init_in = 0, init_out = 0;
  // Medians over the repetitions.
  double floor = 0, load = 0, pipeline = 0, save = 0, graft = 0;
  // Estimates of two fixed costs inside the pipeline: the snapshot cloned at the start of every
  // round (for rollback), and finalize() + verify() after every changing run. They are timed
  // outside the stages, on the loaded and on the optimized model; the first round's snapshot is
  // of the input, later rounds are charged at the optimized model's cost.
  double clone_in = 0, clone_out = 0, check_out = 0;
  int pass_runs = 0, changed_runs = 0, rounds = 0;
  bool fixed_point = false;
  std::vector<graft::PassStats> passes;  // from the last repetition
  double ratio() const { return floor > 0 ? graft / floor : 0; }
  double clone_estimate() const { return rounds > 0 ? clone_in + clone_out * (rounds - 1) : 0; }
  double check_estimate() const { return check_out * changed_runs; }
};

// Time of one clone of `model`, including the copy's destruction (the pipeline frees every
// snapshot of a pass that succeeded).
double time_clone(const graft::ir::Model& model) {
  auto start = Clock::now();
  { auto copy = model.clone(); }
  return since(start);
}

Result measure(const std::string& name, const std::string& bytes, int reps) {
  Result r;
  r.name = name;
  r.reps = reps;
  r.in_bytes = bytes.size();
  std::vector<double> floors, loads, pipelines, saves, totals, clones_in, clones_out, checks_out;
  graft::PipelineConfig config;
  config.level = 2;
  for (int rep = 0; rep < reps; ++rep) {
    // (a) The floor. The proto is destroyed inside the timed region because Graft's save frees
    // its proto too; the output strings of both are freed outside.
    std::string out;
    auto start = Clock::now();
    {
      onnx::ModelProto proto;
      if (!proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) ||
          !proto.SerializeToString(&out)) {
        r.error = "protobuf could not parse/serialize the model";
        return r;
      }
    }
    floors.push_back(since(start));
    out = std::string();

    // (b) Graft, split into its three stages.
    start = Clock::now();
    auto model = graft::ir::Model::parse(bytes);
    loads.push_back(since(start));
    if (!model.ok()) {
      r.error = "load: " + std::string(model.status().message());
      return r;
    }
    if (rep == 0) {
      r.nodes_in = (*model)->total_nodes();
      r.init_in = (*model)->initializer_bytes();
    }
    clones_in.push_back(time_clone(**model));
    start = Clock::now();
    auto report = graft::run_pipeline(*model, config);
    pipelines.push_back(since(start));
    if (!report.ok()) {
      r.error = "pipeline: " + std::string(report.status().message());
      return r;
    }
    r.nodes_out = (*model)->total_nodes();
    r.init_out = (*model)->initializer_bytes();
    clones_out.push_back(time_clone(**model));
    start = Clock::now();
    absl::Status checked = (*model)->finalize();
    if (checked.ok()) checked = (*model)->verify();
    checks_out.push_back(since(start));
    if (!checked.ok()) {
      r.error = "optimized model fails verify(): " + std::string(checked.message());
      return r;
    }
    start = Clock::now();
    auto saved = (*model)->serialize_and_release();
    saves.push_back(since(start));
    if (!saved.ok()) {
      r.error = "save: " + std::string(saved.status().message());
      return r;
    }
    r.out_bytes = saved->size();
    totals.push_back(loads.back() + pipelines.back() + saves.back());
    r.rounds = report->rounds;
    r.fixed_point = report->reached_fixed_point;
    r.pass_runs = r.changed_runs = 0;
    for (const auto& p : report->passes) {
      r.pass_runs += p.runs;
      r.changed_runs += p.changed_runs;
    }
    r.passes = report->passes;
  }
  r.floor = median(floors);
  r.load = median(loads);
  r.pipeline = median(pipelines);
  r.save = median(saves);
  r.graft = median(totals);
  r.clone_in = median(clones_in);
  r.clone_out = median(clones_out);
  r.check_out = median(checks_out);
  return r;
}

// ---------------------------------------------------------------------------------------------
// Output

double ms(double s) { return s * 1e3; }
double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

void print_ratio_table(const std::vector<Result>& results) {
  std::printf("\n%-30s %9s %17s %19s %4s %9s %9s %9s %9s %9s %7s %6s\n", "model", "size MiB",
              "nodes in->out", "init MiB in->out", "reps", "floor ms", "load ms", "pipe ms",
              "save ms", "graft ms", "ratio", "rounds");
  for (const auto& r : results) {
    if (!r.error.empty()) {
      std::printf("%-30s ERROR %s\n", r.name.c_str(), r.error.c_str());
      continue;
    }
    char nodes[32], init[32];
    std::snprintf(nodes, sizeof nodes, "%zu->%zu", r.nodes_in, r.nodes_out);
    std::snprintf(init, sizeof init, "%.1f->%.1f", mib(r.init_in), mib(r.init_out));
    std::printf("%-30s %9.1f %17s %19s %4d %9.1f %9.1f %9.1f %9.1f %9.1f %7.2f %5d%s\n",
                r.name.c_str(), mib(r.in_bytes), nodes, init, r.reps, ms(r.floor), ms(r.load),
                ms(r.pipeline), ms(r.save), ms(r.graft), r.ratio(), r.rounds,
                r.fixed_point ? "" : "+");
  }
}

void print_shares(const std::vector<Result>& results) {
  std::printf(
      "\nWhere Graft's time goes (%% of load+pipe+save medians). Inside pipe: snapshot~ = rollback "
      "clones, one per round "
      "(estimated),\ncheck~ = finalize+verify after changing passes (estimated), passes~ = the "
      "rest (pass work).\n");
  std::printf("%-30s %6s %6s %6s | %9s %7s %8s | %10s %10s\n", "model", "load", "pipe", "save",
              "snapshot~", "check~", "passes~", "load/floor", "pass runs");
  for (const auto& r : results) {
    if (!r.error.empty() || r.load + r.pipeline + r.save <= 0) continue;
    // Shares of the sum of the stage medians, so that they add up to 100%.
    double total = r.load + r.pipeline + r.save;
    double clone = std::min(r.clone_estimate(), r.pipeline);
    double check = std::min(r.check_estimate(), r.pipeline - clone);
    double rest = r.pipeline - clone - check;
    std::printf("%-30s %5.0f%% %5.0f%% %5.0f%% | %8.0f%% %6.0f%% %7.0f%% | %10.2f %10d\n",
                r.name.c_str(), 100 * r.load / total, 100 * r.pipeline / total,
                100 * r.save / total, 100 * clone / total, 100 * check / total, 100 * rest / total,
                r.floor > 0 ? r.load / r.floor : 0, r.pass_runs);
  }
}

void print_passes(const Result& r) {
  if (!r.error.empty() || r.passes.empty()) return;
  std::printf("\nPasses on %s (last repetition; seconds include the snapshot clone and checks):\n",
              r.name.c_str());
  std::printf("  %-22s %5s %8s %10s %10s %s\n", "pass", "runs", "changed", "ms", "rewrites",
              "rollbacks");
  for (const auto& p : r.passes) {
    std::printf("  %-22s %5d %8d %10.1f %10lld %d%s%s\n", p.name.c_str(), p.runs, p.changed_runs,
                ms(p.seconds), static_cast<long long>(p.rewrites), p.rollbacks,
                p.rollback_reason.empty() ? "" : " ", p.rollback_reason.c_str());
  }
}

void print_scaling(const std::vector<Result>& chains, const std::vector<std::string>& skipped) {
  std::printf(
      "\nPer-node cost on chains (growth = ns/node relative to the smallest chain; 1.0 = "
      "linear)\n");
  std::printf("%10s %4s %9s %9s %9s %9s %9s %9s %9s %11s %11s %7s %7s %8s\n", "nodes", "reps",
              "floor ms", "load ms", "pipe ms", "snap~ ms", "check~ ms", "save ms", "graft ms",
              "graft ns/n", "floor ns/n", "ratio", "growth", "pipe gr.");
  const Result* base = nullptr;
  for (const auto& r : chains) {
    if (!r.error.empty()) {
      std::printf("%10s ERROR %s\n", r.name.c_str(), r.error.c_str());
      continue;
    }
    double n = static_cast<double>(r.nodes_in);
    if (!base) base = &r;
    double base_n = static_cast<double>(base->nodes_in);
    double growth = (r.graft / n) / (base->graft / base_n);
    double pipe_growth = (r.pipeline / n) / (base->pipeline / base_n);
    std::printf(
        "%10zu %4d %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %11.0f %11.0f %7.2f %7.2f %8.2f\n",
        r.nodes_in, r.reps, ms(r.floor), ms(r.load), ms(r.pipeline), ms(r.clone_estimate()),
        ms(r.check_estimate()), ms(r.save), ms(r.graft), r.graft / n * 1e9, r.floor / n * 1e9,
        r.ratio(), growth, pipe_growth);
  }
  for (const auto& s : skipped) std::printf("%s\n", s.c_str());
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  return "unknown CPU";
}

fs::path shared_models_dir() {
  if (const char* env = std::getenv("GRAFT_SHARED_MODELS"))
    return fs::exists(env) ? fs::path(env) : fs::path();
  fs::path p = fs::path(GRAFT_SOURCE_DIR) / ".." / "shared" / "models";
  return fs::exists(p) ? fs::canonical(p) : fs::path();
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

// Cost of --verify on a real model: pipeline time with verification / without, medians over
// alternating repetitions. Verification runs the original once, the result once, and (only on
// a mismatch) a bisection; its inputs follow the automatic dims (first of 1, 16, 64, 256).
struct VerifyCost {
  std::string name;
  double plain_ms = 0, verify_ms = 0;
  std::string status, note;
};

VerifyCost measure_verify(const std::string& name, const std::string& bytes, int reps) {
  VerifyCost c;
  c.name = name;
  std::vector<double> plain, verified;
  for (int i = 0; i < reps; ++i) {
    for (bool verify : {false, true}) {
      auto model = graft::ir::Model::parse(bytes);
      if (!model.ok()) {
        c.status = "load failed";
        return c;
      }
      graft::PipelineConfig config;
      config.verify = verify;
      auto start = Clock::now();
      auto report = graft::run_pipeline(*model, config);
      double ms = since(start) * 1e3;
      if (!report.ok()) {
        c.status = "pipeline failed";
        return c;
      }
      (verify ? verified : plain).push_back(ms);
      if (verify) {
        c.status = graft::eval::verify_status_name(report->verification.result.status);
        c.note = report->verification.result.message;
      }
    }
  }
  c.plain_ms = median(plain);
  c.verify_ms = median(verified);
  return c;
}

int main(int argc, char** argv) {
  bool quick = false;
  double chain_budget_s = -1;  // default depends on --quick
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--chain-budget" && i + 1 < argc) {
      chain_budget_s = std::atof(argv[++i]);
    } else if (arg == "--write-chain" && i + 2 < argc) {
      // For profiling one size with the CLI, e.g. under perf.
      std::string bytes = chain_model(std::atoll(argv[i + 1]));
      std::ofstream(argv[i + 2], std::ios::binary)
          .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      return 0;
    } else if (arg == "--profile" && i + 2 < argc) {
      // For perf: only load + O2 pipeline + save of one model, REPS times in this process.
      std::string bytes = read_file(argv[i + 1]);
      const int reps = std::max(1, std::atoi(argv[i + 2]));
      Result r = measure(fs::path(argv[i + 1]).filename().string(), bytes, reps);
      if (!r.error.empty()) {
        std::fprintf(stderr, "%s\n", r.error.c_str());
        return 1;
      }
      std::printf(
          "%s: %d reps, median load %.2f ms, pipeline %.2f ms, save %.2f ms, floor %.2f ms, "
          "ratio %.2f, nodes %zu -> %zu\n",
          r.name.c_str(), reps, ms(r.load), ms(r.pipeline), ms(r.save), ms(r.floor), r.ratio(),
          r.nodes_in, r.nodes_out);
      for (const auto& p : r.passes)  // the last repetition's
        std::printf("  %-22s %8.3f ms\n", p.name.c_str(), p.seconds * 1e3);
      return 0;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--quick] [--chain-budget SECONDS] | --write-chain NODES FILE"
                   " | --profile MODEL REPS\n"
                   "  Times Graft (load + O2 pipeline + save) against protobuf parse + serialize\n"
                   "  of the same bytes. --quick uses tiny sizes (CI smoke run).\n"
                   "  --chain-budget: skip a chain size whose single repetition is predicted to\n"
                   "  take longer (default 240 s, 10 s with --quick); 0 stops after two sizes.\n"
                   "  --profile: only time MODEL, REPS times in this process (for perf).\n",
                   argv[0]);
      return arg == "--help" || arg == "-h" ? 0 : 2;
    }
  }
  if (chain_budget_s < 0) chain_budget_s = quick ? 10 : 240;
  const auto bench_start = Clock::now();

  std::printf(
      "Graft benchmark%s: ratio = Graft (Model::parse + run_pipeline O2 + "
      "serialize_and_release) / floor (onnx::ModelProto ParseFromArray + "
      "SerializeToString), medians over reps\n",
      quick ? " (--quick: tiny sizes, numbers not meaningful)" : "");
  std::printf("machine: %s, %u hardware threads%s\n", cpu_name().c_str(),
              std::thread::hardware_concurrency(),
#ifdef NDEBUG
              ""
#else
              "; WARNING: assertions on (not a Release build), times are not representative"
#endif
  );
  std::fflush(stdout);

  std::vector<Result> results;

  // Weight-heavy: 8 x [4096, 4096] floats = 512 MiB (2 of them duplicates).
  {
    const int64_t hidden = quick ? 256 : 4096;
    std::fprintf(stderr, "building weight-heavy model...\n");
    std::string bytes = weight_heavy_model(hidden, 8, quick ? 16 : 256);
    std::fprintf(stderr, "measuring weight-heavy model (%.0f MiB)...\n", mib(bytes.size()));
    results.push_back(measure(
        "weight-heavy " + std::to_string(hidden) + "x" + std::to_string(hidden) + " x8", bytes, 3));
  }  // its bytes are freed before the chains are built

  // Chains for per-node cost; the 100k one doubles as the deep model.
  std::vector<int64_t> sizes = quick ? std::vector<int64_t>{500, 1000, 2000, 4000}
                                     : std::vector<int64_t>{1000, 10000, 100000, 1000000};
  const int64_t deep_size = quick ? 2000 : 100000;
  // A chain size is skipped when one repetition (floor + Graft) is predicted to exceed
  // chain_budget_s.
  std::vector<Result> chains;
  std::vector<std::string> skipped;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t n = sizes[i];
    if (i >= 2 && chains.size() >= 2 && chains[chains.size() - 1].error.empty() &&
        chains[chains.size() - 2].error.empty()) {
      // Extrapolate with the square root of the per-node growth seen between the two previous
      // sizes: the growth measured so far flattens with size (cache and allocator effects; the
      // full growth overestimated the 1M chain 2x), while a quadratic pass still trips this.
      const Result& a = chains[chains.size() - 2];
      const Result& b = chains[chains.size() - 1];
      double scale = static_cast<double>(n) / static_cast<double>(b.nodes_in);
      double per_node_growth = (b.graft / b.nodes_in) / (a.graft / a.nodes_in);
      double predicted = (b.graft + b.floor) * scale * std::max(1.0, std::sqrt(per_node_growth));
      if (predicted > chain_budget_s) {
        char msg[200];
        std::snprintf(msg, sizeof msg,
                      "%10lld skipped: one repetition predicted to take %.0f s (budget %.0f s)",
                      static_cast<long long>(n), predicted, chain_budget_s);
        skipped.push_back(msg);
        break;
      }
    }
    const int reps = n <= 10000 ? 5 : n <= 100000 ? 3 : 1;
    std::fprintf(stderr, "measuring chain of %lld nodes (%d reps)...\n", static_cast<long long>(n),
                 reps);
    std::string bytes = chain_model(n);
    chains.push_back(measure("chain " + std::to_string(n), bytes, reps));
    if (n == deep_size) {
      Result deep = chains.back();
      deep.name = "deep chain " + std::to_string(n) + " nodes";
      results.push_back(deep);
    }
  }

  // Real models: every one in ../shared/models, the largest first.
  std::vector<VerifyCost> verify_costs;
  fs::path dir = shared_models_dir();
  std::string shared_note;
  if (dir.empty()) {
    shared_note =
        "shared models not found (set GRAFT_SHARED_MODELS or place ../shared/models): "
        "real-model rows skipped";
  } else {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().extension() == ".onnx") files.push_back(e.path());
    std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) {
      return fs::file_size(a) > fs::file_size(b);
    });
    if (files.empty()) shared_note = "no .onnx files in " + dir.string();
    for (size_t i = 0; i < files.size(); ++i) {
      std::fprintf(stderr, "measuring %s...\n", files[i].filename().c_str());
      std::string label = files[i].stem().string();
      if (i == 0) label += " (largest)";
      results.push_back(measure(label, read_file(files[i]), quick ? 3 : 9));
      verify_costs.push_back(measure_verify(label, read_file(files[i]), quick ? 1 : 3));
    }
  }

  print_ratio_table(results);
  std::printf("  ('+' after rounds: no fixed point within max_rounds)\n");
  if (!shared_note.empty()) std::printf("%s\n", shared_note.c_str());
  print_shares(results);
  print_scaling(chains, skipped);
  for (const auto& r : results) print_passes(r);
  if (!verify_costs.empty()) {
    std::printf("\n--verify on real models (pipeline ms without / with verification, medians):\n");
    std::printf("%-30s %10s %10s %8s  %s\n", "model", "O2 ms", "O2+verify", "ratio", "result");
    for (const auto& c : verify_costs)
      std::printf("%-30s %10.1f %10.1f %8.1f  %s (%s)\n", c.name.c_str(), c.plain_ms, c.verify_ms,
                  c.plain_ms > 0 ? c.verify_ms / c.plain_ms : 0.0, c.status.c_str(),
                  c.note.c_str());
  }

  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  std::printf("\npeak RSS %.0f MiB, total bench time %.1f s\n", usage.ru_maxrss / 1024.0,
              since(bench_start));

  bool failed = false;
  for (const auto& r : results) failed = failed || !r.error.empty();
  for (const auto& c : verify_costs) failed = failed || c.status == "mismatch";
  for (const auto& r : chains) failed = failed || !r.error.empty();
  return failed ? 1 : 0;
}
