// MatMul(A, B) followed by Add(., C) with a constant bias is exactly Gemm(A, B, C) when the
// product is 2-D and C broadcasts to it in Gemm's (unidirectional) sense: one node instead of
// two, and runtimes have fused GEMM+bias kernels.
//
// Gemm only takes 2-D operands, so a MatMul whose rank is unknown or not 2 is left alone, as is
// an Add whose bias would broadcast the result to a bigger shape.
#include <optional>
#include <vector>

#include "core/passes/passes.h"

namespace graft {

namespace {

using onnx::TensorProto;

// Dims from the initializer or the declared type; a symbolic dim is nullopt. nullopt overall if
// even the rank is unknown.
std::optional<std::vector<std::optional<int64_t>>> known_dims(const ir::Value* v) {
  if (!v) return std::nullopt;
  std::vector<std::optional<int64_t>> dims;
  if (v->initializer()) {
    for (int64_t d : v->initializer()->dims()) dims.push_back(d);
    return dims;
  }
  const onnx::TypeProto* t = v->type();
  if (!t || !t->has_tensor_type() || !t->tensor_type().has_shape()) return std::nullopt;
  for (const auto& d : t->tensor_type().shape().dim()) {
    if (d.has_dim_value() && d.dim_value() >= 0)
      dims.push_back(d.dim_value());
    else
      dims.push_back(std::nullopt);
  }
  return dims;
}

// True if a dim of the bias is provably compatible with output dim `out` without making the
// result bigger: it is 1, or equal to a known `out`.
bool broadcasts_into(int64_t bias_dim, std::optional<int64_t> out) {
  return bias_dim == 1 || (out && *out == bias_dim);
}

class FuseMatmulAdd final : public Pass {
 public:
  std::string_view name() const override { return "fuse_matmul_add"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext&) override {
    PassResult result;
    for (ir::Graph* g : model.all_graphs()) {
      for (ir::Node* add : g->nodes()) {
        if (add->dead() || !add->is("Add")) continue;
        for (int side = 0; side < 2; ++side) {
          if (fuse(*g, add, side)) {
            result.add();
            break;
          }
        }
      }
    }
    return result;
  }

 private:
  // Fuses when Add's input `side` is the MatMul product and the other input the bias.
  bool fuse(ir::Graph& g, ir::Node* add, int side) {
    // Add before opset 7 broadcasts only with its `broadcast` attribute, and Gemm before 7 has
    // no unidirectional broadcasting of C.
    if (add->opset() < 7 || !add->attributes().empty() || add->inputs().size() != 2 ||
        add->outputs().size() != 1)
      return false;
    ir::Value* product = add->input(side);
    ir::Value* bias = add->input(1 - side);
    ir::Value* out = add->output(0);
    if (!product || !bias || !out || out->use_count() == 0) return false;
    ir::Node* matmul = product->producer();
    if (!matmul || matmul->dead() || !matmul->is("MatMul") || matmul->graph() != &g) return false;
    if (!matmul->attributes().empty() || matmul->inputs().size() != 2) return false;
    if (product->uses().size() != 1 || product->is_graph_output()) return false;

    // Integer Gemm exists only from opset 9 and bfloat16 only from 13: stay with float types.
    if (!bias->is_constant()) return false;
    const int32_t dtype = bias->initializer()->data_type();
    if (dtype != TensorProto::FLOAT && dtype != TensorProto::DOUBLE &&
        dtype != TensorProto::FLOAT16)
      return false;
    ir::Value* a = matmul->input(0);
    ir::Value* b = matmul->input(1);
    for (const ir::Value* v : {a, b, product})
      if (v && v->elem_type() != 0 && v->elem_type() != dtype) return false;

    const auto a_dims = known_dims(a);
    const auto b_dims = known_dims(b);
    if (!a_dims || !b_dims || a_dims->size() != 2 || b_dims->size() != 2) return false;
    const std::optional<int64_t> m = (*a_dims)[0];
    const std::optional<int64_t> n = (*b_dims)[1];
    std::vector<int64_t> c_dims(bias->initializer()->dims().begin(),
                                bias->initializer()->dims().end());
    // A bias of rank > 2, or with a dim that does not fit [M, N], would make Add's result
    // bigger than the product, which Gemm cannot express.
    if (c_dims.size() > 2) return false;
    if (!c_dims.empty() && !broadcasts_into(c_dims.back(), n)) return false;
    if (c_dims.size() == 2 && !broadcasts_into(c_dims[0], m)) return false;

    ir::Node* gemm = g.add_node("Gemm", {a, b, bias}, {out->name()});
    // Removing the Add first leaves `out` alive (it has uses) without a producer.
    g.remove_node(add);
    g.move_output_name(gemm, 0, out);
    g.remove_node(matmul);
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_matmul_add() { return std::make_unique<FuseMatmulAdd>(); }

PassInfo fuse_matmul_add_pass() {
  return {.name = "fuse_matmul_add",
          .level = 2,
          .description = "2-D MatMul followed by Add of a constant bias becomes Gemm",
          .options = {},
          .create = make_fuse_matmul_add};
}

}  // namespace graft
