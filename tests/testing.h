// Shared helpers for Graft's tests: models written in ONNX text syntax, running one pass,
// counting ops, and the ONNX checker.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "core/ir/model.h"
#include "core/passes/pass.h"

namespace graft::testing {

// Parses a model in ONNX text syntax (onnx/defs/parser.h); fails the test on a syntax error.
std::unique_ptr<ir::Model> parse_text(const std::string& text);
// Runs one registered pass on the model, then finalize() and verify(); fails the test on error.
PassResult run_pass(ir::Model& model, const std::string& pass, const PassOptions& options = {});
// Number of nodes with op type `op` in all graphs of the model.
int count_ops(const ir::Model& model, const std::string& op);
// The main graph as ONNX text.
std::string print(const ir::Model& model);
// Runs the ONNX checker and strict shape inference on the model; empty string when it passes.
std::string onnx_errors(const ir::Model& model);
// Floats of an initializer by name in the main graph (fails the test if absent).
std::vector<double> initializer_values(const ir::Model& model, const std::string& name);

// Root of the libonnx-testdata models, or empty if the package is not installed.
std::filesystem::path onnx_testdata_dir();
// ../shared/models next to the repository (GRAFT_SHARED_MODELS overrides), or empty.
std::filesystem::path shared_models_dir();
std::string read_file(const std::filesystem::path& path);

}  // namespace graft::testing
