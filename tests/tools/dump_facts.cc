// Prints the shape fact of every value of every graph (main graph, subgraphs, function bodies) of
// the models given, one line per value, in a fixed order. Two builds' outputs diffed show whether
// a change to the shape rules changed any fact. Usage:
//   dump_facts [--no-inference] MODEL...
// --no-inference: facts from Graft's rules alone (Model::disable_shape_inference), where they
// matter most (models libonnx cannot infer).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/ir/model.h"
#include "core/ir/shapes.h"

namespace {

using graft::ir::Graph;
using graft::ir::Model;
using graft::ir::Value;

void print_value(const char* kind, const Value* v) {
  if (!v) return;
  std::printf("  %s %s %s%s\n", kind, v->name().c_str(), v->fact().to_string().c_str(),
              graft::ir::fact_exact(*v) ? " exact" : "");
}

void dump(const char* path, bool inference) {
  std::printf("# %s\n", path);
  auto model = Model::load_file(path);
  if (!model.ok()) {
    std::printf("load error: %s\n", std::string(model.status().message()).c_str());
    return;
  }
  if (!inference) (*model)->disable_shape_inference();
  const std::vector<Graph*> graphs = (*model)->all_graphs();
  for (size_t i = 0; i < graphs.size(); ++i) {
    const Graph* g = graphs[i];
    std::printf("graph %zu %s%s%s\n", i, g->name().c_str(), g->parent() ? " in " : "",
                g->parent() ? g->parent()->op_type().c_str() : "");
    for (const auto& in : g->inputs()) print_value("input", in.value);
    for (const Value* v : g->initializers()) print_value("initializer", v);
    for (const auto* n : g->nodes()) {
      std::printf(" node %s %s\n", n->op_type().c_str(), n->name().c_str());
      for (const Value* o : n->outputs()) print_value("output", o);
    }
    for (const auto& out : g->outputs()) print_value("graph-output", out.value);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool inference = true;
  int first = 1;
  if (argc > 1 && std::strcmp(argv[1], "--no-inference") == 0) {
    inference = false;
    first = 2;
  }
  if (first >= argc) {
    std::fprintf(stderr, "usage: %s [--no-inference] MODEL...\n", argv[0]);
    return 2;
  }
  for (int i = first; i < argc; ++i) dump(argv[i], inference);
  return 0;
}
