// Raising a model's default-domain opset: what a pass that writes ops of a newer opset (the
// 4-bit DequantizeLinear of opset 21) needs first, and what a convert_opset pass will expose.
//
// ONNX keeps old semantics reachable by opset: an op whose schema changed between the model's
// opset and the target is converted to the new form with the same meaning, or the raise is
// refused, naming the node and why. Changes handled (from ONNX's Changelog.md and the adapters of
// onnx/version_converter), for nodes below the version that changed them:
//
//   14  BatchNormalization: the training outputs (mean, var, saved mean/var) no longer exist in
//       inference mode: a node whose extra outputs nobody reads keeps Y only; one whose extra
//       outputs are read is refused.
//   16  RoiAlign: coordinate_transformation_mode appears with default half_pixel; the old
//       behaviour is output_half_pixel, which is set.
//   18  ReduceL1/L2/LogSum/LogSumExp/Max/Mean/Min/Prod/SumSquare: `axes` moves from an attribute
//       to an input (a new int64 constant). Split: without a `split` input, num_outputs is set
//       to the number of outputs (opset 18 requires one of them).
//   20  GridSample: modes bilinear and bicubic are renamed linear and cubic. DFT: `axis` moves
//       to input 2, and its default changes from 1 to -2, so the old value (default 1) is
//       written.
//   21  GroupNormalization: scale and bias are per channel instead of per group: constant ones
//       are repeated C / num_groups times (C known from x's shape), anything else is refused;
//       stash_type is set to x's type when it is not float.
//
// From below 13 (opset 7 on; exporters such as Paddle, tf2onnx and old PyTorch write 9..12):
//
//    9  BatchNormalization: `spatial` is gone; spatial = 1 (the default) is dropped, 0 refused.
//       Scan: the opset-8 form (a batch axis) is refused.
//   10  Slice: starts/ends/axes, TopK: k move from attributes to inputs.
//   11  Clip: min/max, Pad: pads/value move to inputs. Resize-10 gets opset 11's inputs (an
//       absent roi) and its old coordinate mapping: asymmetric, nearest rounded down (floor).
//   12  Dropout: ratio moves to an input; its mask (a float before 10, a bool after) must be
//       unread, and is dropped.
//   13  Squeeze/Unsqueeze/ReduceSum axes and Split's split move to inputs. Softmax, LogSoftmax
//       and Hardmax normalized over every axis from `axis` (default 1) on: with one axis after
//       it, the axis is written out (the default becomes -1); otherwise Flatten, the op over
//       axis 1, and a Reshape to the input's shape. Their input rank must be known. Resize's
//       tf_half_pixel_for_nn (gone at 13) is refused. Upsample (deprecated at 10) becomes
//       Resize with asymmetric coordinates (nearest: floor), and Scatter (deprecated at 11)
//       ScatterElements, as ONNX's version converter writes them.
//
// Every other change from opset 13 to 23 only adds types, attributes or inputs whose defaults
// keep the old meaning (Reshape's allowzero, the RNNs' layout, LpPool's ceil_mode, Resize's
// antialias, Pad's axes, Cast's saturate, ...; 22 and 23 add only types, bfloat16 and the
// 4-bit floats, to ops that exist before them), so those nodes stay as they are; so do the
// changes from 7 to 13 not listed above (new attributes and inputs with the old meaning as
// their default, negative axes, added types). Models below opset 7 are refused.
// Other domains are left alone (ai.onnx.ml has its own versions); model-local functions that
// import the default domain are raised with the model. The IR version is raised to the one the
// target opset needs (10 for opset 21, 11 for 23).
//
// The node conversions are rules run by the rule driver (rules.h) through the Rewriter, in every
// graph; the checks run first and read shape facts before anything changes, so a refused raise
// changes nothing, and facts are never read while some nodes are converted and the imports are
// not raised yet.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <absl/status/statusor.h>

#include "core/ir/model.h"
#include "core/passes/rules.h"

namespace graft {

// The opsets raise_opset converts from (kMinSourceOpset on) and to (kMinRaisableOpset ..
// kMaxRaisableOpset).
inline constexpr int64_t kMinSourceOpset = 7;
inline constexpr int64_t kMinRaisableOpset = 13;
inline constexpr int64_t kMaxRaisableOpset = 23;

// Why a model cannot be raised: the node (empty for a model-level reason) and the reason.
struct OpsetRefusal {
  std::string node;   // the node's name, else its first output's name
  std::string op;     // its op type
  std::string graph;  // the name of the graph holding it ("" for the main graph's)
  std::string reason;
  // "GroupNormalization 'gn': ..." or the reason alone.
  std::string message() const;
};

struct OpsetRaise {
  int64_t from = 0;  // the model's default-domain opset before (0: not imported)
  int64_t to = 0;    // after (`from` when nothing changed)
  bool changed = false;
  std::map<std::string, int64_t> conversions;  // nodes converted, per rule name
  std::optional<OpsetRefusal> refused;         // set when the raise was refused
  // "the default-domain opset was raised from 13 to 21[ for WHY][; nodes converted: RULE N, ...]",
  // for reports.
  std::string summary(std::string_view why = "") const;
};

// The names of the conversion rules (their RuleRunOptions::explain names).
std::vector<std::string> opset_conversion_rules();

// The first reason (graphs in Model::all_graphs() order, nodes in order) `model` cannot be raised
// to `target`; nullopt when it can. Changes nothing (it may compute shape facts).
std::optional<OpsetRefusal> check_raise_opset(const ir::Model& model, int64_t target);

// Raises the model's default-domain import (and that of every model-local function importing
// the default domain) to `target`, converting the nodes whose schema changed; a model without a
// default-domain import gets one. Nothing changes when the opset already is `target` or newer,
// or when the raise is refused (OpsetRaise::refused says why). InvalidArgument for a target
// outside [kMinRaisableOpset, kMaxRaisableOpset]; an Internal error (everything undone) when a
// conversion rule misbehaves under `options.check_transactions`.
absl::StatusOr<OpsetRaise> raise_opset(ir::Model& model, int64_t target,
                                       const RuleRunOptions& options = {});

// For a pass that writes ops of opset `target` (quantize_weights_int4: 21, quantize_static_int8
// and quantize_dynamic_int8: 13): runs `body` on the model raised to `target` (when below), all
// inside one checkpoint. A refused raise changes nothing and returns a result whose finding says
// why ("nothing quantized: the opset cannot be raised to T (why): reason"). A body that fails or
// rewrites nothing is undone with the raise (its result kept, `changed` false). Otherwise the
// raise's summary, when it changed the model, is added to the body's findings. `why` names what
// needs the opset.
absl::StatusOr<PassResult> run_at_opset(ir::Model& model, int64_t target, std::string_view why,
                                        bool check_transactions,
                                        const std::function<absl::StatusOr<PassResult>()>& body);

// For a pass that writes ops of another domain (com.microsoft): runs `body` with `domain`
// imported at `version` into the model (graphs of the main graph's scope); the import is taken
// back when `body` fails or changes nothing. A model importing another version of the domain is
// left alone (an empty result: the rules were not written for it).
absl::StatusOr<PassResult> run_with_import(ir::Model& model, std::string_view domain,
                                           int64_t version,
                                           const std::function<absl::StatusOr<PassResult>()>& body);

}  // namespace graft
