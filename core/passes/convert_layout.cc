// convert_layout: the Transposes a layout change leaves (PipelineConfig::io_layout, applied by
// the pipeline before the passes: core/pipeline/io_layout.h) taken through layout-sensitive ops
// as well. It is optimize_transposes' push_transpose rule with two more kinds of op a region
// may hold:
//  - Resize from opset 11 with constant scales or sizes (remapped to the untransposed axes);
//    every mode interpolates axis by axis, so the values are the same up to the order in which
//    a linear or cubic interpolation sums its terms (as multi-axis reductions in
//    optimize_transposes). tf_crop_and_resize is not taken;
//  - GlobalAveragePool and GlobalMaxPool, rebuilt as ReduceMean / ReduceMax (keepdims) over the
//    axes the spatial dims move to.
// By name only (PipelineConfig::layout_sensitive_ops, the CLI's --layout-sensitive-ops, adds it
// after optimize_transposes): a runtime's kernels for these ops may run slower in the other
// layout (ONNX Runtime's Resize has channels-last paths; its global pools are channels-first),
// so fewer Transposes is not always faster.
#include "core/passes/passes.h"
#include "core/passes/rules.h"

namespace graft {

PassInfo convert_layout_pass() {
  return describe(
      {.name = "convert_layout",
       .level = 2,
       .by_name_only = true,
       .description = "Transposes moved down as optimize_transposes does, and through Resize "
                      "and GlobalAveragePool/GlobalMaxPool too, so fewer remain after an "
                      "--io-layout change (by name, or --layout-sensitive-ops); the interface "
                      "change itself is --io-layout",
       .options = {}},
      {layout_sensitive_transpose_rules});
}

}  // namespace graft
