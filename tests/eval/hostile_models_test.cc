// Models built to hurt the evaluator: required inputs left out, Loop outputs that grow without
// bound, kernels with far more work than a request may spend. Each must end in a precise error,
// within the run's memory and work budget, never a crash.
#include <onnx/defs/data_type_utils.h>
#include <onnx/defs/parser.h>
#include <onnx/defs/schema.h>

#include <absl/strings/str_cat.h>
#include <absl/strings/str_join.h>

#include "core/eval/executor.h"
#include "core/eval/kernel.h"
#include "core/ir/operands.h"
#include "core/pipeline/pipeline.h"
#include "tests/testing.h"

namespace graft::testing {
namespace {

using onnx::TensorProto;

// Empty input names: the text syntax has none, so the models name them EMPTY.
void clear_placeholders(onnx::GraphProto* g) {
  for (auto& n : *g->mutable_node()) {
    for (auto& in : *n.mutable_input())
      if (in == "EMPTY") in.clear();
    for (auto& a : *n.mutable_attribute())
      if (a.has_g()) clear_placeholders(a.mutable_g());
  }
}

absl::StatusOr<std::unique_ptr<ir::Model>> load_text(const std::string& text) {
  onnx::ModelProto proto;
  auto status = onnx::OnnxParser::Parse(proto, text.c_str());
  EXPECT_TRUE(status.IsOK()) << status.ErrorMessage() << "\n" << text;
  clear_placeholders(proto.mutable_graph());
  return ir::Model::from_proto(std::move(proto));
}

eval::Tensor scalar(int32_t dtype, double v) {
  auto t = eval::Tensor::zeros(dtype, {}, 64);
  EXPECT_TRUE(t.ok());
  t->set_double(0, v);
  return std::move(*t);
}

eval::Tensor filled(std::vector<int64_t> dims, double v) {
  auto t = eval::Tensor::zeros(TensorProto::FLOAT, std::move(dims), 1ull << 30);
  EXPECT_TRUE(t.ok());
  for (int64_t i = 0; i < t->size(); ++i) t->set_double(i, v);
  return std::move(*t);
}

bool contains(const absl::Status& st, const std::string& what) {
  return std::string(st.message()).find(what) != std::string::npos;
}

// ---------------------------------------------------------------------------------------------
// Finding 1: If without its condition, Loop with an empty loop-carried input.

constexpr const char* kIfWithoutCondition = R"(
  <ir_version: 8, opset_import: ["" : OPSET]>
  g (float[2] x) => (float[2] y) {
    y = If (EMPTY) <
      then_branch = t () => (float[2] a) { a = Neg (x) },
      else_branch = e () => (float[2] b) { b = Abs (x) }
    >
  }
)";

constexpr const char* kLoopWithEmptyCarried = R"(
  <ir_version: 8, opset_import: ["" : OPSET]>
  g (float[2] x, int64 m) => (float[2] y) {
    y = Loop (m, EMPTY, EMPTY) <
      body = b (int64 i, bool c, float[2] v) => (bool co, float[2] vo) {
        co = Identity (c)
        vo = Neg (v)
      }
    >
  }
)";

std::string with_opset(std::string text, int opset) {
  text.replace(text.find("OPSET"), 5, std::to_string(opset));
  return text;
}

TEST(HostileModels, IfWithoutConditionIsRejectedOnLoad) {
  auto model = load_text(with_opset(kIfWithoutCondition, 13));
  ASSERT_FALSE(model.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(model.status())) << model.status();
  EXPECT_TRUE(contains(model.status(), "required input 0 ('cond') is missing")) << model.status();
}

TEST(HostileModels, LoopWithEmptyCarriedInputIsRejectedOnLoad) {
  auto model = load_text(with_opset(kLoopWithEmptyCarried, 13));
  ASSERT_FALSE(model.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(model.status())) << model.status();
  EXPECT_TRUE(contains(model.status(), "variadic) is empty")) << model.status();
}

// Opsets newer than the ONNX library knows load (their ops stay opaque to passes), so the
// evaluator checks them itself against the newest schema it has.
TEST(HostileModels, NewerOpsetsWithoutRequiredInputsAreNotRun) {
  std::map<std::string, eval::Tensor> feeds;
  feeds.emplace("x", filled({2}, 1.0));
  feeds.emplace("m", scalar(TensorProto::INT64, 3));
  for (const char* text : {kIfWithoutCondition, kLoopWithEmptyCarried}) {
    auto model = load_text(with_opset(text, 99));
    ASSERT_TRUE(model.ok()) << model.status();
    auto out = eval::run_model(**model, feeds);
    ASSERT_FALSE(out.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(out.status())) << out.status();
    EXPECT_TRUE(contains(out.status(), "missing") || contains(out.status(), "empty"))
        << out.status();
  }
}

// A one-node model of `op` at `opset` reading graph inputs x0..x{count-1} (float, any shape).
onnx::ModelProto one_node(const std::string& op, int opset, size_t count, int outputs) {
  onnx::ModelProto proto;
  proto.set_ir_version(8);
  proto.add_opset_import()->set_version(opset);
  auto* g = proto.mutable_graph();
  g->set_name("g");
  auto* node = g->add_node();
  node->set_op_type(op);
  node->set_name("n");
  for (size_t i = 0; i < count; ++i) {
    const std::string name = "x" + std::to_string(i);
    node->add_input(name);
    auto* in = g->add_input();
    in->set_name(name);
    in->mutable_type()->mutable_tensor_type()->set_elem_type(TensorProto::FLOAT);
  }
  for (int o = 0; o < std::max(1, outputs); ++o) node->add_output("y" + std::to_string(o));
  g->add_output()->set_name("y0");
  // Required attributes get a value of their type, so that only the inputs are missing.
  const int newest = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map().at("").second;
  if (const onnx::OpSchema* schema =
          onnx::OpSchemaRegistry::Schema(op, std::min(opset, newest), ""))
    for (const auto& [name, formal] : schema->attributes()) {
      if (!formal.required) continue;
      auto* a = node->add_attribute();
      a->set_name(name);
      a->set_type(formal.type);
      switch (formal.type) {
        case onnx::AttributeProto::INT:
          a->set_i(1);
          break;
        case onnx::AttributeProto::FLOAT:
          a->set_f(1);
          break;
        case onnx::AttributeProto::STRING:
          a->set_s("x");
          break;
        case onnx::AttributeProto::INTS:
          a->add_ints(1);
          break;
        case onnx::AttributeProto::FLOATS:
          a->add_floats(1);
          break;
        case onnx::AttributeProto::STRINGS:
          a->add_strings("x");
          break;
        case onnx::AttributeProto::TENSOR:
          a->mutable_t()->set_data_type(TensorProto::FLOAT);
          break;
        case onnx::AttributeProto::GRAPH:
          a->mutable_g()->set_name(name);
          break;
        default:
          break;
      }
    }
  return proto;
}

// The class for attributes: every schema the ONNX library has for the default domain, at every
// version, with each required attribute left out, or given with another type, is rejected on
// load (ONNX's shape inference, which facts run, would read it without checking: a Scan without
// num_scan_inputs crashed it, found by model_fuzzer).
TEST(HostileModels, EveryOpRejectsEachMissingOrMistypedRequiredAttribute) {
  int cases = 0;
  for (const onnx::OpSchema& schema : onnx::OpSchemaRegistry::get_all_schemas_with_history()) {
    if (!schema.domain().empty() || schema.Deprecated()) continue;
    for (const auto& [name, formal] : schema.attributes()) {
      if (!formal.required) continue;
      const int since = schema.SinceVersion();
      onnx::ModelProto proto =
          one_node(schema.Name(), since, schema.min_input(), std::max(1, schema.min_output()));
      auto* node = proto.mutable_graph()->mutable_node(0);
      int at = -1;
      for (int i = 0; i < node->attribute_size(); ++i)
        if (node->attribute(i).name() == name) at = i;
      ASSERT_GE(at, 0) << schema.Name();
      onnx::ModelProto mistyped = proto;
      auto* wrong = mistyped.mutable_graph()->mutable_node(0)->mutable_attribute(at);
      wrong->set_type(formal.type == onnx::AttributeProto::FLOAT ? onnx::AttributeProto::INT
                                                                 : onnx::AttributeProto::FLOAT);
      node->mutable_attribute()->DeleteSubrange(at, 1);
      auto missing = ir::Model::from_proto(std::move(proto));
      ASSERT_FALSE(missing.ok()) << schema.Name() << "-" << since << " without " << name;
      EXPECT_TRUE(absl::IsInvalidArgument(missing.status())) << missing.status();
      EXPECT_TRUE(contains(missing.status(), "required attribute '" + name + "' is missing"))
          << missing.status();
      auto bad = ir::Model::from_proto(std::move(mistyped));
      ASSERT_FALSE(bad.ok()) << schema.Name() << "-" << since << " with a mistyped " << name;
      EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << bad.status();
      ++cases;
    }
  }
  EXPECT_GT(cases, 50);
}

// The class: every op the evaluator registers, at every opset it registers, with each of the
// schema's required inputs left out. Loading rejects the model (for opsets the ONNX library
// knows); the kernel entry point rejects the node in any case (a pass could build one); neither
// dereferences the absent input.
TEST(HostileModels, EveryRegisteredOpRejectsEachMissingRequiredInput) {
  const int newest = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map().at("").second;
  int cases = 0;
  std::vector<std::string> without_schema;
  for (const std::string& op : eval::supported_ops()) {
    for (const auto& [since, until] : eval::kernel_versions(op)) {
      const onnx::OpSchema* schema =
          onnx::OpSchemaRegistry::Schema(op, std::min(since, newest), "");
      if (schema == nullptr) {
        // Ops newer than the ONNX library: no schema to check against, so the kernel must
        // check its inputs itself. Each of the first four left out must be an error, not a
        // crash.
        without_schema.push_back(op + "-" + std::to_string(since));
        for (size_t p = 0; p < 4; ++p) {
          auto model = ir::Model::from_proto(one_node(op, since, 4, 1));
          ASSERT_TRUE(model.ok()) << model.status();
          ir::Node* n = (*model)->graph().nodes()[0];
          n->set_input(p, nullptr);
          const eval::Tensor one = filled({1}, 1.0);
          std::vector<const eval::Tensor*> inputs(4, &one);
          inputs[p] = nullptr;
          (void)eval::run_kernel(*n, inputs, eval::Limits{});
        }
        continue;
      }
      const auto& formals = schema->inputs();
      for (size_t p = 0; p < formals.size(); ++p) {
        if (formals[p].GetOption() != onnx::OpSchema::Single) continue;
        const size_t count = std::max<size_t>(p + 1, static_cast<size_t>(schema->min_input()));
        onnx::ModelProto proto = one_node(op, since, count, schema->min_output());

        // On load, where the library knows the opset.
        onnx::ModelProto without = proto;
        without.mutable_graph()->mutable_node(0)->set_input(static_cast<int>(p), "");
        auto rejected = ir::Model::from_proto(std::move(without));
        if (since <= newest) {
          ASSERT_FALSE(rejected.ok()) << op << "-" << since << " without input " << p;
          EXPECT_TRUE(absl::IsInvalidArgument(rejected.status())) << rejected.status();
          EXPECT_TRUE(contains(rejected.status(), "required input")) << rejected.status();
        }

        // At the kernel entry point: the node loads with the input, then loses it.
        auto model = ir::Model::from_proto(std::move(proto));
        ASSERT_TRUE(model.ok()) << model.status();
        ir::Node* n = (*model)->graph().nodes()[0];
        n->set_input(p, nullptr);
        const eval::Tensor one = filled({1}, 1.0);
        std::vector<const eval::Tensor*> inputs(count, &one);
        inputs[p] = nullptr;
        auto out = eval::run_kernel(*n, inputs, eval::Limits{});
        ASSERT_FALSE(out.ok()) << op << "-" << since;
        EXPECT_TRUE(absl::IsInvalidArgument(out.status())) << out.status();
        EXPECT_TRUE(contains(out.status(), "required input")) << out.status();
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 200);
  // Pinned so that a new kernel without a schema is a deliberate choice.
  EXPECT_EQ(absl::StrJoin(without_schema, " "),
            "Attention-23 Gelu-20 RMSNormalization-23 RotaryEmbedding-23")
      << "ops checked only by their kernels";
}

// ---------------------------------------------------------------------------------------------
// Finding 3: memory. A Loop of many iterations, each emitting a 16 KB scan slice.

TEST(HostileModels, LoopScanOutputsStayWithinTheMemoryBudget) {
  auto model = load_text(loop_scan_bomb(200000));  // 200,000 x 16 KiB = 3.3 GB
  ASSERT_TRUE(model.ok()) << model.status();
  std::map<std::string, eval::Tensor> feeds;
  feeds.emplace("x", filled({4096}, 1.0));
  eval::Limits limits;
  limits.max_tensor_bytes = 1ull << 30;
  limits.max_live_bytes = 64ull << 20;
  limits.max_work = 0;
  eval::RunStats stats;
  auto out = eval::run_model(**model, feeds, limits, &stats);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(out.status())) << out.status();
  EXPECT_TRUE(contains(out.status(), "memory budget")) << out.status();
  EXPECT_LE(stats.peak_bytes, limits.max_live_bytes);
  EXPECT_GT(stats.peak_bytes, limits.max_live_bytes / 2);  // it did fill the budget first

  // A few iterations fit, and give the right stack.
  auto few = load_text(loop_scan_bomb(3));
  ASSERT_TRUE(few.ok()) << few.status();
  auto small = eval::run_model(**few, feeds, limits, &stats);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ((*small)[0].dims(), (std::vector<int64_t>{3, 4096}));
}

// Kernel scratch counts: MatMul converts both operands to double (twice their float bytes).
TEST(HostileModels, KernelScratchCountsAgainstTheBudget) {
  auto model = load_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (float[256, 256] a, float[256, 256] b) => (float[256, 256] y) { y = MatMul (a, b) }
  )");
  ASSERT_TRUE(model.ok()) << model.status();
  std::map<std::string, eval::Tensor> feeds;
  feeds.emplace("a", filled({256, 256}, 1.0));
  feeds.emplace("b", filled({256, 256}, 2.0));
  const uint64_t tensors = 3 * 256 * 256 * 4;  // a, b and y as float
  eval::Limits limits;
  limits.max_live_bytes = 0;
  eval::RunStats stats;
  auto out = eval::run_model(**model, feeds, limits, &stats);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].get_double(0), 512.0);
  EXPECT_GE(stats.peak_bytes, tensors + 2 * 256 * 256 * 8);  // plus both operands as double
  // A budget that holds the tensors but not the scratch is refused, not overrun.
  limits.max_live_bytes = tensors + 256 * 256 * 8;
  out = eval::run_model(**model, feeds, limits, &stats);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(contains(out.status(), "memory budget")) << out.status();
  EXPECT_LE(stats.peak_bytes, limits.max_live_bytes);
}

// ---------------------------------------------------------------------------------------------
// Finding 4: CPU. Expand to 1024 x 1024, then MatMul: 2^30 multiply-adds from a tiny model.

constexpr const char* kMatMulBomb = R"(
  <ir_version: 8, opset_import: ["" : 13]>
  g (float[1, 1] x) => (float[1024, 1024] y) {
    shape = Constant <value = int64[2] {1024, 1024}> ()
    big = Expand (x, shape)
    y = MatMul (big, big)
  }
)";

TEST(HostileModels, WorkBeyondTheBudgetIsRefusedBeforeItStarts) {
  auto model = load_text(kMatMulBomb);
  ASSERT_TRUE(model.ok()) << model.status();
  std::map<std::string, eval::Tensor> feeds;
  feeds.emplace("x", filled({1, 1}, 1.0));
  eval::Limits limits;
  limits.max_work = 100'000'000;  // a tenth of the MatMul
  eval::RunStats stats;
  auto out = eval::run_model(**model, feeds, limits, &stats);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(out.status())) << out.status();
  EXPECT_TRUE(contains(out.status(), "work budget")) << out.status();
  EXPECT_LT(stats.work, limits.max_work);  // refused up front, not after burning it
}

// A deadline reaches inside a long kernel: the poll that fails is one made by the MatMul loop,
// not one between nodes, and the run stops long before the MatMul's work is done.
TEST(HostileModels, DeadlineStopsALongKernelFromInside) {
  auto model = load_text(kMatMulBomb);
  ASSERT_TRUE(model.ok()) << model.status();
  std::map<std::string, eval::Tensor> feeds;
  feeds.emplace("x", filled({1, 1}, 1.0));
  int polls = 0;
  // Polls come before each of the three nodes and every 2^20 units of work (Expand's and
  // MatMul's outputs are 2^20 elements each, MatMul rows 2^20 multiply-adds): the sixth is in
  // MatMul's loop.
  std::function<absl::Status()> should_continue = [&]() -> absl::Status {
    if (++polls >= 6) return absl::DeadlineExceededError("deadline passed");
    return absl::OkStatus();
  };
  eval::Limits limits;
  limits.max_work = 0;
  limits.max_live_bytes = 0;
  limits.should_continue = &should_continue;
  eval::RunStats stats;
  auto out = eval::run_model(**model, feeds, limits, &stats);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(out.status())) << out.status();
  EXPECT_TRUE(contains(out.status(), "MatMul")) << out.status();
  EXPECT_EQ(polls, 6);
  EXPECT_LT(stats.work, uint64_t{1} << 30 >> 4);  // stopped within the first 1/16 of its work
}

// Found by kernel_fuzzer: RNN, GRU and LSTM read X's last dim before checking its rank.
TEST(HostileModels, RecurrentOpsWithAScalarInputAreInvalid) {
  for (const char* op : {"RNN", "GRU", "LSTM"}) {
    auto model = load_text(std::string(R"(
      <ir_version: 8, opset_import: ["" : 14]>
      g (float x, float[1, 3, 2] w, float[1, 3, 1] r) => (float[1, 1, 1, 1] y) {
        y = )") + op + R"( <hidden_size = 1> (x, w, r)
      }
    )");
    ASSERT_TRUE(model.ok()) << model.status();
    std::map<std::string, eval::Tensor> feeds;
    feeds.emplace("x", scalar(TensorProto::FLOAT, 1.0));
    feeds.emplace("w", filled({1, 3, 2}, 0.5));
    feeds.emplace("r", filled({1, 3, 1}, 0.5));
    auto out = eval::run_model(**model, feeds);
    ASSERT_FALSE(out.ok()) << op;
    EXPECT_TRUE(absl::IsInvalidArgument(out.status())) << out.status();
  }
}

// ---------------------------------------------------------------------------------------------
// Finding 5: empty tensors. kernel_fuzzer found Softmax over the empty axis of a [1, 0, 2] input
// offsetting a null buffer (UBSan: "applying non-zero offset to null pointer"). The class: every
// op the evaluator registers, at every opset it registers, on inputs with a zero-sized dim at
// each position (and, for ops with an `axis`, that axis at each dim). Each run either succeeds
// with consistent outputs or gives an error; under the sanitizer build (scripts/test.sh asan) no
// report either.

// The type a schema allows for an input: float where allowed, else int64, else the first.
int32_t input_type(const onnx::OpSchema::FormalParameter& formal) {
  int32_t first = 0;
  for (const onnx::DataType& t : formal.GetTypes()) {
    const onnx::TypeProto& type = onnx::Utils::DataTypeUtils::ToTypeProto(t);
    if (!type.has_tensor_type()) continue;
    const int32_t e = type.tensor_type().elem_type();
    if (e == TensorProto::FLOAT) return e;
    if (e == TensorProto::INT64) first = e;
    if (first == 0 && e != TensorProto::STRING) first = e;
  }
  return first == 0 ? TensorProto::FLOAT : first;
}

// Each version of `op`'s ONNX schema that one of its kernels covers (a kernel usually serves
// several, switching behaviour by opset).
std::vector<const onnx::OpSchema*> kernel_schemas(const std::string& op) {
  const int newest = onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map().at("").second;
  std::vector<const onnx::OpSchema*> out;
  for (int v = 1; v <= newest; ++v) {
    const onnx::OpSchema* s = onnx::OpSchemaRegistry::Schema(op, v, "");
    if (s == nullptr || (!out.empty() && out.back() == s) || !eval::find_kernel(op, "", v))
      continue;
    out.push_back(s);
  }
  return out;
}

TEST(HostileModels, EveryRegisteredOpSurvivesEmptyTensors) {
  const std::vector<std::vector<int64_t>> shapes = {{0}, {2, 0}, {0, 2, 3}, {1, 0, 2}, {2, 3, 0}};
  int runs = 0, succeeded = 0;
  for (const std::string& op : eval::supported_ops()) {
    for (const onnx::OpSchema* schema : kernel_schemas(op)) {
      const int since = schema->SinceVersion();
      const auto& formals = schema->inputs();
      if (formals.empty()) continue;
      const size_t count = std::min<size_t>(formals.size(), 6);
      const int outputs = schema->max_output() > 8 ? 1 : std::max(1, schema->max_output());
      const bool has_axis = schema->attributes().count("axis") > 0;
      for (const auto& dims : shapes) {
        std::vector<int64_t> axes = {0};
        if (has_axis)
          for (int64_t a = 1; a < static_cast<int64_t>(dims.size()); ++a) axes.push_back(a);
        for (const int64_t axis : axes) {
          // Every input empty, or only the first (the others a single 1, which broadcasts and
          // is a valid count, index or size for most ops).
          for (const bool all_empty : {true, false}) {
            onnx::ModelProto proto = one_node(op, since, count, outputs);
            if (has_axis) {
              auto* a = proto.mutable_graph()->mutable_node(0)->add_attribute();
              a->set_name("axis");
              a->set_type(onnx::AttributeProto::INT);
              a->set_i(axis);
            }
            auto model = ir::Model::from_proto(std::move(proto));
            if (!model.ok()) continue;  // an op whose schema needs what one_node does not give
            const ir::Node& n = *(*model)->graph().nodes()[0];
            std::vector<eval::Tensor> tensors;
            for (size_t p = 0; p < count; ++p) {
              const bool empty = all_empty || p == 0;
              auto t = eval::Tensor::zeros(input_type(formals[p]),
                                           empty ? dims : std::vector<int64_t>{1}, 1 << 20);
              ASSERT_TRUE(t.ok()) << t.status();
              if (!empty && t->dtype() != TensorProto::STRING) t->set_double(0, 1);
              tensors.push_back(std::move(*t));
            }
            std::vector<const eval::Tensor*> inputs;
            for (const auto& t : tensors) inputs.push_back(&t);
            auto out = eval::run_kernel(n, inputs, eval::Limits{});
            ++runs;
            if (!out.ok()) continue;
            ++succeeded;
            for (const eval::Tensor& y : *out) {
              int64_t elements = 1;
              for (int64_t d : y.dims()) elements *= d;
              EXPECT_EQ(y.size(), elements) << op << "-" << since << " on " << dims.size() << "-D";
            }
          }
        }
      }
    }
  }
  EXPECT_GT(runs, 3000);
  EXPECT_GT(succeeded, 2000);  // most ops accept empty tensors; the sweep must reach the kernels
}

// kernel_fuzzer: Pow of an int64 base with a float exponent converted 2^63 (which is what the
// int64 maximum rounds to as a double) back to int64, undefined behaviour. Results out of the
// integer type's range are its minimum, like the integer power's wrap-free convention; 2^62 is
// still exact.
TEST(HostileModels, IntegerPowJustPastTheRangeIsNotConvertedUndefined) {
  auto model = load_text(R"(
    <ir_version: 8, opset_import: ["" : 13]>
    g (int64[2] x, float[2] e) => (int64[2] y) { y = Pow (x, e) }
  )");
  ASSERT_TRUE(model.ok()) << model.status();
  std::map<std::string, eval::Tensor> feeds;
  auto x = eval::Tensor::zeros(TensorProto::INT64, {2}, 64);
  auto e = eval::Tensor::zeros(TensorProto::FLOAT, {2}, 64);
  ASSERT_TRUE(x.ok() && e.ok());
  x->set_double(0, 2);
  x->set_double(1, 2);
  e->set_double(0, 63);
  e->set_double(1, 62);
  feeds.emplace("x", std::move(*x));
  feeds.emplace("e", std::move(*e));
  auto out = eval::run_model(**model, feeds, eval::Limits{});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].get_int64(0), std::numeric_limits<int64_t>::min());
  EXPECT_EQ((*out)[0].get_int64(1), int64_t{1} << 62);
}

// ---------------------------------------------------------------------------------------------
// 4-bit tensors whose payload does not match their dims (raw_data or int32_data one byte short
// or long, the unpacked size), at the opset that defines them and at one that does not: the
// evaluator refuses them with InvalidArgument, and the pipeline (O2, verified) neither crashes
// nor rolls a pass back for them.

TEST(HostileModels, FourBitTensorsOfTheWrongSizeAreRefusedEverywhere) {
  for (int opset : {13, 21}) {
    for (int variant = 0; variant < 5; ++variant) {
      auto model = parse_text(absl::StrCat(R"(
        <ir_version: 10, opset_import: ["" : )",
                                           opset, R"(]>
        g (float[3,5] x) => (float[3,5] y, int4[5,5] i) <int4[5,5] w = {)",
                                           absl::StrJoin(std::vector<int>(25, 1), ", "),
                                           R"(}, float s = {0.5}> {
          d = DequantizeLinear (w, s)
          y = Add (x, d)
          i = Identity (w)
        }
      )"));
      ASSERT_NE(model, nullptr);
      onnx::TensorProto w = *model->graph().find_local("w")->initializer();
      w.clear_raw_data();
      switch (variant) {
        case 0:  // ceil(25 / 2) = 13 bytes expected
          w.set_raw_data(std::string(12, '\x11'));
          break;
        case 1:
          w.set_raw_data(std::string(14, '\x11'));
          break;
        case 2:
          w.set_raw_data(std::string(25, '\x11'));  // one byte per element
          break;
        case 3:
          for (int k = 0; k < 12; ++k) w.add_int32_data(0x11);
          break;
        default:
          for (int k = 0; k < 25; ++k) w.add_int32_data(1);
          break;
      }
      model->graph().find_local("w")->set_initializer(w);
      std::map<std::string, eval::Tensor> feeds;
      feeds.emplace("x", filled({3, 5}, 1.0f));
      auto run = eval::run_model(*model, feeds);
      EXPECT_TRUE(absl::IsInvalidArgument(run.status()))
          << opset << " " << variant << ": " << run.status();
      PipelineConfig config = test_pipeline_config();
      config.level = 2;
      config.verify = true;
      std::unique_ptr<ir::Model> m = std::move(model);
      auto report = run_pipeline(m, config);
      ASSERT_TRUE(report.ok()) << report.status();
      for (const auto& pass : report->passes) EXPECT_EQ(pass.rollbacks, 0) << pass.name;
    }
  }
}

}  // namespace
}  // namespace graft::testing
