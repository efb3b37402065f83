// Serving a model in another memory layout than it was exported in (PipelineConfig::io_layout,
// the CLI's --io-layout NAME=NHWC): a camera or TensorFlow pipeline hands over channels-last
// frames, a PyTorch export reads channels-first. The interface changes, so like fix_dims it is
// not a pass: the pipeline applies it after fixing dims and before anything records the
// interface or runs the model. Each named input gets the new layout's declaration and a
// Transpose back to the layout the model computes in; each named output is computed as before
// and transposed to the new layout. The passes then move those Transposes inward
// (optimize_transposes) until they cancel against the model's own Transposes (a tf2onnx export
// served in its framework's layout) or stop at a layout-sensitive op (a Conv); the pass
// convert_layout takes them through some of those (Resize, global pools) when asked.
// Verification compares against the converted model, so its inputs are in the new layout.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <absl/status/status.h>

#include "core/ir/model.h"

namespace graft {

// The most entries PipelineConfig::io_layout may hold.
inline constexpr size_t kMaxIoLayouts = 4096;

// The layouts a name may be given, each with its counterpart (the layout the model is taken to
// compute in): NCHW <-> NHWC, NCW <-> NWC, NCDHW <-> NDHWC.
const std::vector<std::string>& io_layout_names();

// The checks that need no model: names not empty, each layout one of io_layout_names(), at
// most kMaxIoLayouts entries. InvalidArgument naming the entry ("io_layout: ...").
absl::Status check_io_layout_config(const std::map<std::string, std::string>& layouts);

// The permutation that takes a tensor in layout `from` to layout `to` (same letters), as
// Transpose's perm: result dim i is input dim perm[i].
std::vector<int64_t> layout_perm(const std::string& from, const std::string& to);

// Changes the layout of the main graph's inputs and outputs named in `layouts` (name -> the
// layout to serve; the model is taken to compute in its counterpart). An input: its declared
// dims are permuted and every reader reads Transpose(input) instead. An output: the value is
// computed as before and the output becomes its Transpose, under the same name with permuted
// declared dims. Names, element types and metadata stay. InvalidArgument, with the model
// unchanged, when: check_io_layout_config fails; a name is neither an input nor an output
// (listing them); an input with an initializer (a default); a value without a tensor type or
// declared rank, or of another rank than the layout's letters; a name both input and output;
// an output that is a graph input, an initializer, or another output's value too. `changed`
// (may be null) receives one line per converted value, "input 'x': NCHW [1,3,224,224] -> NHWC
// [1,224,224,3]", with a note when the declared dims suggest the value is already in the
// requested layout (a last dim of at most 4 where channels are moved from a larger one). Shape
// facts are recomputed.
absl::Status convert_io_layout(ir::Model& model, const std::map<std::string, std::string>& layouts,
                               std::vector<std::string>* changed);

// Transpose nodes in every graph of the model (the report's before and after of a layout
// change).
int64_t count_transposes(const ir::Model& model);

}  // namespace graft
