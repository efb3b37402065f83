// Fixing a model's symbolic input dims to sizes the caller serves it at
// (PipelineConfig::fix_dims, fix_shapes): what onnx-simplifier's overwrite-input-shape, Olive's
// DynamicToFixedShape and ONNX Runtime's make_dynamic_shape_fixed do. It changes the model's
// interface (its input declarations), so it is not a pass: the pipeline applies it before
// anything else, and the passes are then held to the fixed interface and verified against the
// fixed model. Every shape fact follows from the inputs' declarations, so the shape arithmetic
// that follows from the fixed dims (Shape, Gather, Concat, Reshape targets) folds.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <absl/status/status.h>

#include "core/eval/verify.h"
#include "core/ir/model.h"

namespace graft {

// The largest size a dim may be fixed to, and the smallest.
inline constexpr int64_t kMaxFixedDim = int64_t{1} << 31;
inline constexpr int64_t kMinFixedDim = 1;
// The most entries fix_dims and fix_shapes may hold each, and the longest shape fix_shapes gives.
inline constexpr size_t kMaxFixEntries = 4096;
inline constexpr size_t kMaxFixRank = 1024;

// Names from a model or a client in messages are cut to this many bytes; a message lists at
// most kMaxListedNames of them.
inline constexpr size_t kMaxNameBytes = 200;
inline constexpr size_t kMaxListedNames = 20;

// "'name'", cut to kMaxNameBytes.
std::string quoted_name(const std::string& name);
// "'a', 'b', 'c'" of at most kMaxListedNames names, each quoted_name, with how many more.
std::string name_listing(const std::set<std::string>& names);

// A declared tensor type's dims as text: "[batch,3,?,224]" ("?" an unknown dim; dim names cut
// to 200 bytes, at most 64 dims shown), or "(no shape)".
std::string dims_text(const onnx::TypeProto& type);

// The checks that need no model: names not empty, every size in [1, 2^31], at most
// kMaxFixEntries entries each, shapes of at most kMaxFixRank dims. InvalidArgument naming the
// entry ("fix_dims: ...", "fix_shapes: ..."). resolve_pipeline calls it, so a bad request fails
// before any work.
absl::Status check_fix_config(const std::map<std::string, int64_t>& dims,
                              const std::map<std::string, std::vector<int64_t>>& shapes);

// Rewrites the declarations of the main graph's inputs that are not initializer-backed:
//  - dims: NAME=N makes every input dim whose dim_param is NAME the static N;
//  - shapes: INPUT=[d0, d1, ...] gives the input these dims (its rank must be the list's length;
//    a dim the model declares static must be equal; an input declared without a shape gets
//    this one). A symbolic dim it fixes binds its name everywhere, as if given in `dims` (the
//    same dim_param is the same size in every input).
// InvalidArgument, with the model unchanged, when: check_fix_config fails; a NAME no input dim
// carries (listing those the inputs carry); an INPUT that is not a graph input (listing them),
// has no tensor type, or has another rank; a static dim that differs; one name bound to two
// sizes (by dims and a shape, or by two shapes); an input with an initializer (a default the
// caller may override) that the request would change; `verify` (may be null: the run does not
// verify) contradicting the fixed sizes, by a verify shape giving a fixed dim another size or a
// verify dim giving a fixed dim_param another (its given input sets are not looked at: they
// are checked against the fixed declarations). Names from the model are cut to 200 bytes in
// messages. Graph output declarations are left as they are. `changed` (may be null) receives
// one line per input whose declaration changed, "'x': [batch,3,H,W] -> [1,3,224,224]", in
// input order. Shape facts are recomputed from the new declarations.
absl::Status fix_input_dims(ir::Model& model, const std::map<std::string, int64_t>& dims,
                            const std::map<std::string, std::vector<int64_t>>& shapes,
                            std::vector<std::string>* changed,
                            const eval::VerifyOptions* verify = nullptr);

}  // namespace graft
