// Runs the node models of the ONNX backend test data (libonnx-testdata) through the reference
// kernels (graphs with If/Loop/Scan through run_model) and compares with the recorded outputs,
// then the small whole-model suites the same way. Ops without a kernel are skipped; a
// registered op must pass all of its cases.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>
#include <gtest/gtest.h>

#include "core/eval/executor.h"
#include "core/eval/kernel.h"
#include "core/eval/tensor.h"
#include "core/ir/model.h"
#include "tests/testing.h"

namespace graft::eval {
namespace {

namespace fs = std::filesystem;
using onnx::TensorProto;

enum class Outcome { kPassed, kFailed, kSkipped };

struct CaseResult {
  Outcome outcome;
  std::string message;
};

bool is_tensor_type(const onnx::TypeProto* type) {
  return type == nullptr || type->value_case() == onnx::TypeProto::kTensorType;
}

CaseResult run_case(const fs::path& dir) {
  auto model = ir::Model::load_file((dir / "model.onnx").string());
  if (!model.ok()) return {Outcome::kSkipped, std::string(model.status().message())};
  ir::Graph& graph = (*model)->graph();
  // Single-node graphs test one op; the "_expanded" variants (function bodies) chain several
  // kernels and run when every node has one.
  std::vector<ir::Node*> nodes = graph.nodes();
  if (nodes.empty()) return {Outcome::kSkipped, "empty graph"};
  // Control flow (If, Loop, Scan) is the executor's job: such graphs run through run_model.
  bool use_executor = false;
  std::vector<const Kernel*> kernels;
  for (const ir::Node* node : nodes) {
    if (!node->is_onnx_domain()) return {Outcome::kSkipped, "non-default domain"};
    if (!node->subgraphs().empty()) {
      use_executor = true;
      continue;
    }
    const Kernel* kernel = find_kernel(node->op_type(), node->domain(), node->opset());
    if (kernel == nullptr) {
      return {Outcome::kSkipped,
              absl::StrCat("no kernel for ", node->op_type(), " (opset ", node->opset(), ")")};
    }
    kernels.push_back(kernel);
  }
  for (const auto& in : graph.inputs()) {
    if (!is_tensor_type(&in.info.type())) return {Outcome::kSkipped, "non-tensor input"};
  }
  for (const auto& out : graph.outputs()) {
    if (!is_tensor_type(&out.info.type())) return {Outcome::kSkipped, "non-tensor output"};
  }

  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename().string().starts_with("test_data_set_")) {
      sets.push_back(e.path());
    }
  }
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) return {Outcome::kSkipped, "no data sets"};

  Limits limits;
  limits.max_tensor_bytes = 256ull << 20;
  for (const fs::path& set : sets) {
    // Graph inputs (then initializers) by name.
    std::map<std::string, Tensor> values;
    for (size_t i = 0; i < graph.inputs().size(); ++i) {
      TensorProto proto;
      fs::path file = set / absl::StrCat("input_", i, ".pb");
      if (!fs::exists(file)) continue;  // an omitted optional input
      if (!testing::read_recorded_tensor(file, &proto))
        return {Outcome::kFailed, "unreadable " + file.string()};
      testing::fix_bfloat16(graph.inputs()[i].info, &proto);
      auto t = Tensor::from_proto(proto, limits.max_tensor_bytes);
      if (!t.ok()) return {Outcome::kSkipped, std::string(t.status().message())};
      values[graph.inputs()[i].value->name()] = std::move(*t);
    }
    for (ir::Value* init : graph.initializers()) {
      if (values.count(init->name())) continue;
      auto t = Tensor::from_proto(*init->initializer(), limits.max_tensor_bytes);
      if (!t.ok()) return {Outcome::kSkipped, std::string(t.status().message())};
      values[init->name()] = std::move(*t);
    }
    if (use_executor) {
      auto outs = run_model(**model, values, limits);
      if (absl::IsUnimplemented(outs.status())) {
        return {Outcome::kSkipped, std::string(outs.status().message())};
      }
      if (!outs.ok()) return {Outcome::kFailed, std::string(outs.status().message())};
      for (size_t o = 0; o < outs->size(); ++o) {
        values[graph.outputs()[o].value->name()] = std::move((*outs)[o]);
      }
    }
    for (size_t k = 0; k < nodes.size() && !use_executor; ++k) {
      const ir::Node& node = *nodes[k];
      KernelContext ctx{node, node.opset(), {}, {}, limits};
      for (ir::Value* v : node.inputs()) {
        if (v == nullptr) {
          ctx.inputs.push_back(nullptr);
          continue;
        }
        auto it = values.find(v->name());
        if (it == values.end()) return {Outcome::kSkipped, "input without data: " + v->name()};
        ctx.inputs.push_back(&it->second);
      }
      ctx.outputs.resize(node.outputs().size());
      absl::Status st = (*kernels[k])(ctx);
      if (absl::IsUnimplemented(st)) return {Outcome::kSkipped, std::string(st.message())};
      if (!st.ok()) {
        return {Outcome::kFailed, absl::StrCat(node.op_type(), ": ", std::string(st.message()))};
      }
      for (size_t o = 0; o < node.outputs().size(); ++o) {
        if (node.output(o) != nullptr) values[node.output(o)->name()] = std::move(ctx.outputs[o]);
      }
    }
    for (size_t i = 0; i < graph.outputs().size(); ++i) {
      TensorProto proto;
      fs::path file = set / absl::StrCat("output_", i, ".pb");
      if (!testing::read_recorded_tensor(file, &proto))
        return {Outcome::kFailed, "unreadable " + file.string()};
      testing::fix_bfloat16(graph.outputs()[i].info, &proto);
      auto want = Tensor::from_proto(proto, limits.max_tensor_bytes);
      if (!want.ok()) return {Outcome::kSkipped, std::string(want.status().message())};
      auto it = values.find(graph.outputs()[i].value->name());
      if (it == values.end()) return {Outcome::kSkipped, "graph output not computed"};
      std::string diff = testing::compare_recorded(it->second, *want);
      if (!diff.empty()) {
        return {Outcome::kFailed, absl::StrCat(set.filename().string(), " output ", i, ": ", diff)};
      }
    }
  }
  return {Outcome::kPassed, ""};
}

struct SuiteResult {
  int passed = 0, failed = 0, skipped = 0;
  std::vector<std::string> failures;
};

// Runs every case directory under `root / suite`.
SuiteResult run_suite(const fs::path& root, const std::string& suite) {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root / suite)) {
    if (e.is_directory()) dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  SuiteResult result;
  for (const fs::path& dir : dirs) {
    CaseResult r = run_case(dir);
    switch (r.outcome) {
      case Outcome::kPassed:
        ++result.passed;
        break;
      case Outcome::kFailed:
        ++result.failed;
        result.failures.push_back(absl::StrCat(dir.filename().string(), ": ", r.message));
        break;
      case Outcome::kSkipped:
        ++result.skipped;
        if (std::getenv("GRAFT_CONFORMANCE_VERBOSE")) {
          std::cout << "skipped " << dir.filename().string() << ": " << r.message << "\n";
        }
        break;
    }
  }
  return result;
}

TEST(ConformanceTest, NodeTests) {
  fs::path root = testing::onnx_testdata_dir();
  if (root.empty()) GTEST_SKIP() << "libonnx-testdata is not installed";
  SuiteResult r = run_suite(root, "node");
  std::cout << "conformance: " << r.passed << " passed, " << r.failed << " failed, " << r.skipped
            << " skipped\n";
  for (const auto& f : r.failures) std::cout << "  FAILED " << f << "\n";
  EXPECT_EQ(r.failed, 0) << absl::StrJoin(r.failures, "\n");
  EXPECT_GT(r.passed, 0);
}

// Whole small models (converted from PyTorch modules and operators, and simple hand-written
// ones): same runner, every node needs a kernel (or control flow) for a case to count.
TEST(ConformanceTest, ModelTests) {
  fs::path root = testing::onnx_testdata_dir();
  if (root.empty()) GTEST_SKIP() << "libonnx-testdata is not installed";
  SuiteResult total;
  for (const char* suite : {"pytorch-converted", "pytorch-operator", "simple"}) {
    if (!fs::exists(root / suite)) continue;
    SuiteResult r = run_suite(root, suite);
    total.passed += r.passed;
    total.failed += r.failed;
    total.skipped += r.skipped;
    for (auto& f : r.failures) total.failures.push_back(absl::StrCat(suite, "/", f));
  }
  std::cout << "model conformance: " << total.passed << " passed, " << total.failed << " failed, "
            << total.skipped << " skipped\n";
  for (const auto& f : total.failures) std::cout << "  FAILED " << f << "\n";
  EXPECT_EQ(total.failed, 0) << absl::StrJoin(total.failures, "\n");
  EXPECT_GT(total.passed, 0);
}

// The ops each kernel group registers (one list per file in core/eval/kernels/, kept in sync by
// whoever changes that file); keeps an op from silently disappearing or appearing unlisted.
TEST(ConformanceTest, SupportedOps) {
  const std::vector<std::string> elementwise = {"Abs",
                                                "Add",
                                                "And",
                                                "Cast",
                                                "CastLike",
                                                "Ceil",
                                                "Clip",
                                                "Cos",
                                                "Div",
                                                "Elu",
                                                "Equal",
                                                "Erf",
                                                "Exp",
                                                "Floor",
                                                "Gelu",
                                                "Greater",
                                                "GreaterOrEqual",
                                                "HardSigmoid",
                                                "HardSwish",
                                                "Identity",
                                                "LeakyRelu",
                                                "Less",
                                                "LessOrEqual",
                                                "Log",
                                                "Max",
                                                "Mean",
                                                "Min",
                                                "Mod",
                                                "Mul",
                                                "Neg",
                                                "Not",
                                                "Or",
                                                "Pow",
                                                "Reciprocal",
                                                "Relu",
                                                "Round",
                                                "Selu",
                                                "Sigmoid",
                                                "Sign",
                                                "Sin",
                                                "Softplus",
                                                "Sqrt",
                                                "Sub",
                                                "Sum",
                                                "Tanh",
                                                "Where",
                                                "Xor"};
  const std::vector<std::string> shape = {"Compress",
                                          "Concat",
                                          "Constant",
                                          "ConstantOfShape",
                                          "DepthToSpace",
                                          "Expand",
                                          "EyeLike",
                                          "Flatten",
                                          "Gather",
                                          "GatherElements",
                                          "GatherND",
                                          "NonZero",
                                          "OneHot",
                                          "Pad",
                                          "Range",
                                          "Reshape",
                                          "ReverseSequence",
                                          "Scatter",
                                          "ScatterElements",
                                          "ScatterND",
                                          "Shape",
                                          "Size",
                                          "Slice",
                                          "SpaceToDepth",
                                          "Split",
                                          "Squeeze",
                                          "Tile",
                                          "Transpose",
                                          "Trilu",
                                          "Unsqueeze"};
  const std::vector<std::string> reduce = {
      "ArgMax",       "ArgMin",          "CumSum",          "ReduceL1",   "ReduceL2",
      "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",       "ReduceMean", "ReduceMin",
      "ReduceProd",   "ReduceSum",       "ReduceSumSquare", "TopK"};
  const std::vector<std::string> nn = {"AveragePool",
                                       "BatchNormalization",
                                       "Conv",
                                       "ConvTranspose",
                                       "DequantizeLinear",
                                       "Einsum",
                                       "Gemm",
                                       "GlobalAveragePool",
                                       "GlobalMaxPool",
                                       "LayerNormalization",
                                       "LogSoftmax",
                                       "MatMul",
                                       "MaxPool",
                                       "QuantizeLinear",
                                       "RMSNormalization",
                                       "Resize",
                                       "Softmax",
                                       "Upsample"};
  const std::vector<std::string> rnn = {"Dropout", "GRU", "LSTM", "RNN"};
  const std::vector<std::string> extra = {"Acos",    "Acosh",
                                          "Asin",    "Asinh",
                                          "Atan",    "Atanh",
                                          "Celu",    "Cosh",
                                          "Hardmax", "InstanceNormalization",
                                          "IsInf",   "IsNaN",
                                          "LRN",     "MeanVarianceNormalization",
                                          "PRelu",   "Shrink",
                                          "Sinh",    "Softsign",
                                          "Tan",     "ThresholdedRelu"};
  const std::vector<std::string> quantize_dynamic = {"ConvInteger", "DynamicQuantizeLinear",
                                                     "MatMulInteger"};
  const std::vector<std::string> detection = {"GridSample", "NonMaxSuppression", "RoiAlign"};
  const std::vector<std::string> attention = {"Attention"};
  const std::vector<std::string> rotary = {"RotaryEmbedding"};
  std::set<std::string> expected;
  for (const auto* group : {&elementwise, &shape, &reduce, &nn, &rnn, &extra, &quantize_dynamic,
                            &detection, &attention, &rotary}) {
    expected.insert(group->begin(), group->end());
  }
  std::vector<std::string> ops = supported_ops();
  std::cout << "supported ops (" << ops.size() << "): " << absl::StrJoin(ops, " ") << "\n";
  std::set<std::string> actual(ops.begin(), ops.end());
  for (const auto& op : expected) EXPECT_TRUE(actual.count(op)) << op << " is not registered";
  for (const auto& op : actual) EXPECT_TRUE(expected.count(op)) << op << " is not listed";
  EXPECT_EQ(ops.size(), expected.size());
}

}  // namespace
}  // namespace graft::eval
