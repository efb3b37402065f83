// Converts models written in ONNX's text syntax (onnx/defs/parser.h; int4/uint4 too, see
// tests/onnx_text.h) to binary ModelProto files.
// scripts/fuzz.sh turns the generated seeds (fuzz/seeds/*.onnxtxt) into corpus entries with it,
// so the seeds stay readable in review. Each model must also load into Graft's IR, so a seed
// that no longer loads is noticed instead of silently seeding nothing.
//
// Usage: onnx_from_text OUT_DIR FILE.onnxtxt...   (writes OUT_DIR/<stem>.onnx; exit 1 on error)
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "core/ir/model.h"
#include "tests/onnx_text.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: onnx_from_text OUT_DIR FILE.onnxtxt...\n";
    return 2;
  }
  const std::filesystem::path out_dir = argv[1];
  std::filesystem::create_directories(out_dir);
  int failures = 0;
  for (int i = 2; i < argc; ++i) {
    const std::filesystem::path in = argv[i];
    std::ifstream file(in);
    std::stringstream text;
    text << file.rdbuf();
    onnx::ModelProto proto;
    const std::string error = graft::testing::parse_onnx_text(text.str(), &proto);
    if (!file || !error.empty()) {
      std::cerr << in.string() << ": " << (file ? error : "cannot read") << "\n";
      ++failures;
      continue;
    }
    std::string bytes;
    proto.SerializeToString(&bytes);
    if (auto loaded = graft::ir::Model::parse(bytes); !loaded.ok()) {
      std::cerr << in.string() << ": " << loaded.status() << "\n";
      ++failures;
      continue;
    }
    std::ofstream(out_dir / (in.stem().string() + ".onnx"), std::ios::binary) << bytes;
  }
  return failures ? 1 : 0;
}
