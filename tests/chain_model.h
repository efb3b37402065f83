// The Identity/Relu chain model that the server tests and bench/graft_soak both send: `pairs`
// pairs on an unshaped float input (O2 removes every Identity), the doc string set to `tag` so
// that equal chains can still miss the cache. Header-only: bench/ does not link the test library.
#pragma once

#include <string>

#include <onnx/onnx_pb.h>

namespace graft::testing {

inline std::string chain_model(int pairs, const std::string& tag = "") {
  onnx::ModelProto proto;
  proto.set_ir_version(8);
  proto.add_opset_import()->set_version(13);
  proto.set_doc_string(tag);
  auto* g = proto.mutable_graph();
  g->set_name("chain");
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  std::string prev = "x";
  for (int i = 0; i < pairs; ++i) {
    for (const char* op : {"Identity", "Relu"}) {
      auto* n = g->add_node();
      n->set_op_type(op);
      n->add_input(prev);
      prev = std::string(op) + std::to_string(i);
      n->add_output(prev);
    }
  }
  auto* out = g->add_output();
  out->set_name(prev);
  out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  return proto.SerializeAsString();
}

}  // namespace graft::testing
