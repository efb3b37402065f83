// Helpers shared by the kernel unit tests: building tensors and running one node.
#pragma once

#include <string>
#include <vector>

#include "core/eval/kernel.h"
#include "core/eval/tensor.h"
#include "tests/testing.h"

namespace graft::eval {

// A tensor holding `values`; no values gives an all-zero tensor of that shape.
template <typename T>
Tensor make(int32_t dtype, std::vector<int64_t> dims, std::vector<T> values) {
  auto t = Tensor::zeros(dtype, std::move(dims), 1 << 20);
  EXPECT_TRUE(t.ok());
  if (!values.empty()) {
    EXPECT_EQ(t->size(), static_cast<int64_t>(values.size()));
  }
  for (size_t i = 0; i < values.size(); ++i) t->data<T>()[i] = values[i];
  return *t;
}

inline Tensor ints(std::vector<int64_t> values) {
  return make<int64_t>(onnx::TensorProto::INT64, {static_cast<int64_t>(values.size())}, values);
}

inline std::vector<int64_t> ints_of(const Tensor& t) {
  std::vector<int64_t> v(t.size());
  for (int64_t i = 0; i < t.size(); ++i) v[i] = t.get_int64(i);
  return v;
}

inline std::vector<double> doubles_of(const Tensor& t) {
  std::vector<double> v(t.size());
  for (int64_t i = 0; i < t.size(); ++i) v[i] = t.get_double(i);
  return v;
}

// A one-graph model text at the given default-domain opset.
inline std::string model(int opset, const std::string& sig, const std::string& body) {
  return "<ir_version: 8, opset_import: [\"\" : " + std::to_string(opset) + "]>\ng " + sig + " { " +
         body + " }";
}

// Runs the single node of `text` on `inputs`; returns the status and leaves outputs in `out`.
inline absl::Status run(const std::string& text, std::vector<const Tensor*> inputs,
                        std::vector<Tensor>* out, uint64_t limit = 1 << 20) {
  auto parsed = testing::parse_text(text);
  if (!parsed) return absl::InternalError("parse");
  const ir::Node& node = *parsed->graph().nodes().at(0);
  const Kernel* kernel = find_kernel(node.op_type(), node.domain(), node.opset());
  if (kernel == nullptr) return absl::NotFoundError("no kernel");
  KernelContext ctx{node, node.opset(), std::move(inputs), {}, {}};
  ctx.limits.max_tensor_bytes = limit;
  ctx.outputs.resize(node.outputs().size());
  absl::Status st = (*kernel)(ctx);
  *out = std::move(ctx.outputs);
  return st;
}

}  // namespace graft::eval
