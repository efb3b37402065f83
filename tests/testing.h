// Shared helpers for Graft's tests: models written in ONNX text syntax, running one pass,
// counting ops, the ONNX checker, and numeric comparison of two models on the evaluator.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "core/ir/model.h"
#include "core/passes/pass.h"

namespace graft::testing {

// Parses a model in ONNX text syntax (onnx/defs/parser.h); fails the test on a syntax error.
std::unique_ptr<ir::Model> parse_text(const std::string& text);
// Runs one registered pass on the model with `options` checked against its schema (defaults
// for the rest), then finalize() and verify(); fails the test on error.
PassResult run_pass(ir::Model& model, const std::string& pass, const PassOptions& options = {});
// run_pass, plus a check (EXPECT) that the reference evaluator computes the same outputs before
// and after the pass (same_outputs(...) == ""). For models the evaluator cannot run (custom
// domains, local functions) use run_pass and say why.
PassResult run_pass_checked(ir::Model& model, const std::string& pass,
                            const PassOptions& options = {});
// Runs both models with eval::run_model on the same seeded random inputs (generated from the
// declared types of `before`'s non-initializer main graph inputs: floats uniform in [-2, 2],
// integers in [0, 3], bools random; symbolic or unknown dims are 2) and compares every output
// (dtype, dims; floats with rtol 1e-4 / atol 1e-5 and NaN == NaN; everything else exactly).
// Returns "" when equal, "not verifiable: <reason>" when the evaluator cannot run `before` or
// the inputs cannot be generated, else a description of the first difference.
std::string same_outputs(const ir::Model& before, const ir::Model& after, uint32_t seed = 1);
// Number of nodes with op type `op` in all graphs of the model.
int count_ops(const ir::Model& model, const std::string& op);
// The main graph as ONNX text.
std::string print(const ir::Model& model);
// Runs the ONNX checker and strict shape inference on the model; empty string when it passes.
std::string onnx_errors(const ir::Model& model);
// Floats of an initializer by name in the main graph (fails the test if absent).
std::vector<double> initializer_values(const ir::Model& model, const std::string& name);

// Names of a node's inputs ("" for an absent optional input), and of a graph's outputs.
std::vector<std::string> input_names(const ir::Node& node);
std::vector<std::string> output_names(const ir::Graph& graph);

// Root of the libonnx-testdata models, or empty if the package is not installed.
std::filesystem::path onnx_testdata_dir();

// Serialized test models shared by the service and CLI tests.
// A chain of `pairs` Identity/Relu pairs (keeps a worker busy); distinct tags, distinct digests.
std::string chain_model(int pairs, const std::string& tag = "");
// x -> Identity -> MatMul(., w) -> y, whose 4x4 float weight w lives in the external-data file
// `location` (with a "length" entry when `length` is not negative).
std::string external_data_model(const std::string& location, int64_t length = -1);
// Text of a Loop of `trips` iterations, each emitting a 16 KiB scan slice of input x.
std::string loop_scan_bomb(int64_t trips);
// ../shared/models next to the repository (GRAFT_SHARED_MODELS overrides), or empty.
std::filesystem::path shared_models_dir();
std::string read_file(const std::filesystem::path& path);

}  // namespace graft::testing
