// store_sparse: initializers that are mostly zeros are saved as ONNX sparse initializers
// (graph.sparse_initializer: COO values and linear int64 indices, core/ir/sparse.h). Storage
// only: the values are the same bits (a zero is an element whose bytes are all zero, so -0.0 stays
// dense), and the IR, every later pass and the evaluator see the dense tensor
// (Value::stored_sparse); Model saving writes it sparse.
//
// A weight is stored sparse when it has at least `min_elements` elements, at least
// `min_zero_percent` of them are zero, and its COO parts ((element size + 8) bytes per non-zero)
// are smaller than its dense payload. Numeric types of 1, 2, 4 or 8 bytes
// (ir::sparse_element_type).
//
// Left alone:
//  - models before IR version 6, which has no sparse initializers (the IR version is not raised:
//    a storage choice does not change what a model declares it needs);
//  - initializers that are graph inputs (overridable defaults: interface);
//  - external-data initializers (stored sparse they would move into the model file);
//  - Constant nodes (function bodies' constants; extract_constants makes the main graph's
//    initializers first).
//
// ONNX Runtime turns sparse initializers back into dense tensors when a session is created, so
// the gain is the file's size; docs/performance.md has the cost at session creation.
#include <string>

#include <absl/strings/str_format.h>

#include "core/ir/sparse.h"
#include "core/passes/passes.h"

namespace graft {

namespace {

constexpr char kMinZeroPercent[] = "min_zero_percent";
constexpr char kMinElements[] = "min_elements";
// ONNX IR version 6 (2019) added sparse initializers.
constexpr int64_t kSparseIrVersion = 6;

class StoreSparse final : public Pass {
 public:
  std::string_view name() const override { return "store_sparse"; }

  absl::StatusOr<PassResult> run(ir::Model& model, PassContext& ctx) override {
    const int64_t min_percent = ctx.int_option(kMinZeroPercent);
    const int64_t min_elements = ctx.int_option(kMinElements);
    PassResult result;
    result.always_explained = true;
    if (model.rest().ir_version() < kSparseIrVersion) {
      result.explanations.push_back(
          {.rule = "kept dense",
           .node = "",
           .op = "",
           .graph = "",
           .reason = absl::StrFormat("IR version %d has no sparse initializers (IR version >= %d)",
                                     model.rest().ir_version(), kSparseIrVersion)});
      return result;
    }
    for (ir::Graph* g : model.all_graphs())
      for (ir::Value* v : g->initializers()) {
        if (v->stored_sparse() || !v->is_constant()) continue;
        std::optional<ir::SparseSize> size = ir::sparse_size(*v->initializer());
        if (!size || size->elements < min_elements) continue;
        const int64_t zeros = size->elements - size->nonzeros;
        // zeros / elements >= min_percent / 100, in integers.
        if (zeros * 100 < min_percent * size->elements || size->sparse_bytes >= size->dense_bytes)
          continue;
        v->set_stored_sparse(true);
        result.add();
        result.explanations.push_back(
            {.rule = "stored sparse",
             .node = v->name(),
             .op = "initializer",
             .graph = g->parent() ? g->name() : "",
             .reason = absl::StrFormat(
                 "%.1f%% zeros: %d bytes dense, %d bytes sparse",
                 100.0 * static_cast<double>(zeros) / static_cast<double>(size->elements),
                 size->dense_bytes, size->sparse_bytes)});
      }
    return result;
  }
};

}  // namespace

PassInfo store_sparse_pass() {
  return describe<StoreSparse>(
      {.name = "store_sparse",
       .level = 2,
       .by_name_only = true,
       .description = "initializers that are mostly zeros are saved as ONNX sparse initializers "
                      "(COO): a smaller file, the same values (lossless; IR version >= 6; by "
                      "name only)",
       .options = {
           integer_option(kMinZeroPercent, 50, 1, 100,
                          "the least percentage of zero elements a stored-sparse weight has"),
           integer_option(kMinElements, 1024, 1, std::numeric_limits<int64_t>::max(),
                          "initializers with fewer elements stay dense")}});
}

}  // namespace graft
