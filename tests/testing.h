// Shared helpers for Graft's tests: models written in ONNX text syntax, running one pass (with
// the check that a pass reporting "unchanged" changed nothing), golden rewrite tests on canonical
// text, the ONNX checker, numeric comparison of two models on the evaluator, and the readers
// pass tests use in their assertions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "core/eval/tensor.h"
#include "core/ir/model.h"
#include "core/passes/pass.h"
#include "core/pipeline/pipeline.h"
#include "tests/chain_model.h"

namespace graft::testing {

// Parses a model in ONNX text syntax (onnx/defs/parser.h); fails the test on a syntax error.
// The 4-bit types, which libonnx 1.12's parser does not know, may be written `int4` and `uint4`
// for declared values and named tensors (`<int4[2,2] w = {1, -2, 3, 7}>`, a Constant's
// `value = uint4[3] c {1, 2, 3}`): parsed as int8/uint8, then given back their type by name
// (tensors stored packed in raw_data).
std::unique_ptr<ir::Model> parse_text(const std::string& text);

// ------------------------------------------------------------------------- running passes

// The pass a test runs: a registered pass by name ("fuse_matmul_add"), or one the test builds
// (a PassSpec, e.g. a deliberately wrong pass). The name form is the place to address a single
// rule of a rule-set pass as "pass/rule" once rules exist.
struct PassRef {
  PassRef(const char* name);  // NOLINT(google-explicit-constructor): tests pass names
  PassRef(const std::string& name);
  PassRef(PassSpec spec);
  // The same pass run for another target ("onnxruntime:1.10").
  PassRef for_target(std::string_view text) const;
  PassSpec spec;  // `create` is empty when the name is unknown (the test fails when run)
  // PassContext::target: the default ("onnx"), or for a pass that runs for one runtime only
  // (PassInfo::target) that runtime at its default version.
  Target target;
};

// Runs one pass on the model, then finalize() and verify(); fails the test on error, and when
// the pass reports "unchanged" but the model changed (verify_unchanged, as the pipeline checks
// with PipelineConfig::check_unchanged). `options` are added to the spec's.
// `calibration`: the inputs a pass that runs the model sees (PassContext::calibration).
PassResult run_pass(ir::Model& model, const PassRef& pass, const PassOptions& options = {},
                    const CalibrationInputs* calibration = nullptr);
// run_pass, plus a check (EXPECT) that the reference evaluator computes the same outputs before
// and after the pass (same_outputs(...) == ""). For models the evaluator cannot run (custom
// domains, local functions) use run_pass and say why.
PassResult run_pass_checked(ir::Model& model, const PassRef& pass, const PassOptions& options = {});
// The default PipelineConfig with check_unchanged on: what tests that run the pipeline use.
PipelineConfig test_pipeline_config();
// The stats of pass `pass` in a pipeline report (nullptr if it did not run).
const PassStats* stats_of(const PipelineReport& report, const std::string& pass);

// ------------------------------------------------------------------------- golden rewrite tests

// How a rewrite test compares the model's outputs before and after the pass (same_outputs).
enum class Outputs {
  kSame,              // the evaluator must run the model and compute the same outputs
  kSameIfVerifiable,  // the same, but a model the evaluator cannot run passes (say why)
  kNotCompared,       // no evaluation at all (say why)
};
struct RewriteOptions {
  PassOptions pass_options;
  int64_t rewrites = -1;  // PassResult::rewrites the pass must report; -1: any
  Outputs outputs = Outputs::kSame;
  // The comparison's tolerances (|a - b| <= atol + rtol * |a|): exact passes keep the defaults;
  // a lossy pass's test (convert_fp16, quantize_dynamic_int8) states the error it accepts.
  double rtol = 1e-4, atol = 1e-5;
  // Input sets the pass may run the model on (PassContext::calibration; none when empty).
  std::vector<std::map<std::string, eval::Tensor>> calibration;
};
// RewriteOptions expecting `count` rewrites (designated initializers would draw g++ 12's
// -Wmissing-field-initializers).
RewriteOptions rewrites(int64_t count, Outputs outputs = Outputs::kSame);
// RewriteOptions comparing outputs as `outputs` says.
RewriteOptions compare_outputs(Outputs outputs);

// Parses `text`, runs the pass (run_pass) and expects it to report a change (and
// options.rewrites), the result to pass the ONNX checker (onnx_errors; a model newer than libonnx
// knows is skipped) and the outputs to compare as options.outputs says. Returns the result for
// further assertions (nullptr if `text` does not parse).
std::unique_ptr<ir::Model> run_rewrite(const PassRef& pass, const std::string& text,
                                       const RewriteOptions& options = {});
// run_rewrite on `before`, then expects the result's canonical_text to equal that of `after`
// (a test failure shows both and a line diff). Returns the result (nullptr if a text does not
// parse).
std::unique_ptr<ir::Model> expect_rewrite(const PassRef& pass, const std::string& before,
                                          const std::string& after,
                                          const RewriteOptions& options = {});
// The same on a model built in code: for what ONNX's text syntax (libonnx 1.12) cannot write,
// such as node names.
std::unique_ptr<ir::Model> run_rewrite(const PassRef& pass, std::unique_ptr<ir::Model> model,
                                       const RewriteOptions& options = {});
std::unique_ptr<ir::Model> expect_rewrite(const PassRef& pass, std::unique_ptr<ir::Model> before,
                                          const std::string& after,
                                          const RewriteOptions& options = {});
// Runs the pass on `text` and expects no change: changed == false, rewrites == 0 and the same
// serialized model (so names, order and value_info too), and outputs as options.outputs says
// (options.rewrites is not used).
void expect_no_rewrite(const PassRef& pass, const std::string& text,
                       const RewriteOptions& options = {});

// A float tensor type of known `dims`, e.g. for declaring a value's shape with Value::set_type.
onnx::TypeProto float_type(const std::vector<int64_t>& dims);

// The whole model as text in ONNX's text syntax, extended with initializers (with every value),
// value_info, node domains and functions; names and order as stored. For failure messages.
std::string print(const ir::Model& model);
// Text that is the same for two models that differ only in the names a pass invents and the
// order it stored things in:
//  - nodes in dataflow order: depth first from the graph outputs through each node's inputs
//    (then the names its subgraphs capture); nodes no output needs follow in stored order;
//  - values named %0, %1, ... in order of first appearance in that text, per main graph or
//    function (subgraphs included, so a captured name reads the same inside and out); the
//    inputs and outputs of every graph (main, subgraph, function body) keep their names
//    (interface), and so do initializers named in `kept_initializers` (expect_rewrite passes
//    those of the model before the pass: a weight the pass kept reads as itself, one it made
//    reads as %N);
//  - initializers and value_info sorted by those names; an orphan value_info prints as "?";
//  - node names, subgraph names and doc strings left out; attributes sorted by name;
//    "ai.onnx" written as ""; opsets and functions sorted;
//  - tensors by type, dims and every element (shortest round-trip decimal), whatever their
//    storage (raw_data or typed fields).
std::string canonical_text(const ir::Model& model,
                           const std::set<std::string>& kept_initializers = {});
// Names of the initializers of every graph of the model.
std::set<std::string> initializer_names(const ir::Model& model);

// ------------------------------------------------------------------------- checking results

// Runs both models with eval::run_model on the same seeded random inputs (generated from the
// declared types of `before`'s non-initializer main graph inputs: floats uniform in [-2, 2],
// integers in [0, 3], bools random; symbolic or unknown dims are 2) and compares every output
// (dtype, dims; floats with rtol 1e-4 / atol 1e-5 and NaN == NaN; everything else exactly).
// Returns "" when equal, "not verifiable: <reason>" when the evaluator cannot run `before` or
// the inputs cannot be generated, else a description of the first difference.
std::string same_outputs(const ir::Model& before, const ir::Model& after, uint32_t seed = 1,
                         double rtol = 1e-4, double atol = 1e-5);
// Runs the ONNX checker and strict shape inference on the model; empty string when it passes.
std::string onnx_errors(const ir::Model& model);

// ------------------------------------------------------------------------- reading a model

// Number of nodes with op type `op` in all graphs of the model.
int count_ops(const ir::Model& model, const std::string& op);
// Every value name defined anywhere in the model (graph inputs, initializers that are not
// inputs, node outputs, in every graph), with repeats; and whether none repeats.
std::multiset<std::string> defined_names(const ir::Model& model);
bool names_unique(const ir::Model& model);
// Op types of a graph's nodes, in order.
std::vector<std::string> op_types(const ir::Graph& graph);
// The node computing `name` as seen from `graph` (its scope, then enclosing ones); nullptr when
// no node does (a graph input, an initializer, or no such value).
ir::Node* producer(const ir::Graph& graph, const std::string& name);
ir::Node* producer(const ir::Model& model, const std::string& name);  // in the main graph
// Its op type, "" when no node computes `name`.
std::string producer_op(const ir::Graph& graph, const std::string& name);
// The only node of op type `op` in `graph`; fails the test when there are several (and returns
// the first) or none (and returns nullptr).
ir::Node* only_node(const ir::Graph& graph, const std::string& op);

// Names of a node's inputs ("" for an absent optional input), of a graph's inputs and outputs,
// and of its initializers (in saved order).
std::vector<std::string> input_names(const ir::Node& node);
std::vector<std::string> input_names(const ir::Node* node);  // fails the test on nullptr
std::vector<std::string> input_names(const ir::Graph& graph);
std::vector<std::string> output_names(const ir::Graph& graph);
std::vector<std::string> initializer_names(const ir::Graph& graph);

// Elements of an initializer as doubles (integers exactly up to 2^53); fails the test if `value`
// is not an initializer or not numeric.
std::vector<double> values_of(const ir::Value* value);
// The same for an initializer of the main graph, by name.
std::vector<double> initializer_values(const ir::Model& model, const std::string& name);
// Dims of an initializer; fails the test if `value` is not one.
std::vector<int64_t> dims_of(const ir::Value* value);
std::vector<int64_t> dims_of(const ir::Model& model, const std::string& name);  // main graph
// Expects equal sizes and |got[i] - want[i]| <= max(abs_tolerance, rel_tolerance * |want[i]|).
void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                 double abs_tolerance = 1e-6, double rel_tolerance = 0);

// Root of the libonnx-testdata models, or empty if the package is not installed.
std::filesystem::path onnx_testdata_dir();

// Serialized test models shared by the service and CLI tests; chain_model (a chain of Identity/
// Relu pairs that keeps a worker busy; distinct tags, distinct digests) is in chain_model.h.
// x -> Identity -> MatMul(., w) -> y, whose 4x4 float weight w lives in the external-data file
// `location` (with a "length" entry when `length` is not negative).
std::string external_data_model(const std::string& location, int64_t length = -1);
// Text of a Loop of `trips` iterations, each emitting a 16 KiB scan slice of input x.
std::string loop_scan_bomb(int64_t trips);
// Text of a LayerNormalization block (opset 17, over the last axis of float[2,3,4] x, output y)
// whose epsilon `eps` is a graph input, not a constant: fuse_blocks' layer_norm stops at its Add
// `a` and says so (--explain tests). The quotient is `y`.
std::string near_miss_layer_norm();
// ../shared/models next to the repository (GRAFT_SHARED_MODELS overrides), or empty.
std::filesystem::path shared_models_dir();

// libonnx-testdata's recorded data. The backend tests compare with rtol 1e-3, atol 1e-7; the
// atol is relaxed slightly for float32 results near zero computed through different (but
// correct) formulas.
inline constexpr double kRecordedRtol = 1e-3;
inline constexpr double kRecordedAtol = 1e-5;
// A serialized TensorProto file; false when it cannot be read or parsed.
bool read_recorded_tensor(const std::filesystem::path& path, onnx::TensorProto* proto);
// The ONNX 1.12 test data stores bfloat16 tensors as UINT16 ones holding the same bits; the
// declared graph input/output type tells them apart.
void fix_bfloat16(const onnx::ValueInfoProto& info, onnx::TensorProto* proto);
// "" if `got` matches `want` (same type and dims; floats within the tolerances above, NaN
// matching NaN; others exact), else what differs.
std::string compare_recorded(const eval::Tensor& got, const eval::Tensor& want);
// One recorded set of a case folder (test_data_set_N: input_I.pb in graph input order,
// output_I.pb in graph output order).
struct RecordedSet {
  std::map<std::string, eval::Tensor> inputs;
  std::vector<eval::Tensor> outputs;
};
// The recorded sets of case folder `dir` for `model`; a set with a file that does not parse,
// an omitted input or a tensor of another type than declared is left out.
std::vector<RecordedSet> load_test_data_sets(const std::filesystem::path& dir,
                                             const ir::Model& model);
// compare_recorded over a model's outputs, naming the first that differs.
std::string compare_recorded(const std::vector<eval::Tensor>& got,
                             const std::vector<eval::Tensor>& want);
std::string read_file(const std::filesystem::path& path);

}  // namespace graft::testing
