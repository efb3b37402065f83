// A constant-mode Pad in front of Conv, AveragePool or MaxPool becomes the consumer's own `pads`
// (ONNX Runtime's PadFusion does the same), in every graph. Part of fuse_conv_batchnorm.
//
// Exact, bit for bit: the consumer then pads with the value the Pad wrote, so every window sees
// the same numbers in the same order.
//  - Conv pads with zeros: the Pad's value must be 0.
//  - AveragePool pads with zeros that count in the average only with count_include_pad=1 (an
//    attribute from opset 7; before, padding never counted): the Pad's value must be 0.
//  - MaxPool pads with -inf: the Pad's value must be -inf, and the Indices output must be unread
//    (indices count positions of the tensor MaxPool sees, which the fusion shrinks).
// Only the spatial axes may be padded (axes 0 and 1, batch and channels, get no pads), never by a
// negative amount (that crops), and the consumer must use explicit pads (auto_pad NOTSET).
// Pools with ceil_mode=1 are left alone: a last window reaching past the padded input is clipped
// at its end, which is where the Pad's end padding moves to.
#include <limits>

#include "core/ir/op_params.h"
#include "core/passes/passes.h"
#include "core/passes/queries.h"
#include "core/passes/rewriter.h"
#include "core/passes/rules.h"

namespace graft {
namespace {

// The Pad's amounts if it is constant-mode, padding by `value` only the spatial axes, by
// non-negative amounts.
std::optional<std::vector<int64_t>> spatial_pads(const ir::Node& pad, double value) {
  const int64_t opset = pad.opset();
  if (opset < 2    ? !only_attributes(pad, {"mode", "paddings", "value"})
      : opset < 11 ? !only_attributes(pad, {"mode", "pads", "value"})
                   : !only_attributes(pad, {"mode"}) || pad.inputs().size() > 3)
    return std::nullopt;
  auto p = ir::pad_params(pad);
  if (!p || p->mode != "constant" || !p->value || p->axes) return std::nullopt;
  if (*p->value != value) return std::nullopt;  // -inf equals -inf
  const size_t rank = p->pads.size() / 2;
  if (p->pads.size() % 2 != 0 || rank < 3) return std::nullopt;
  for (int64_t v : p->pads)
    if (v < 0) return std::nullopt;
  if (p->pads[0] != 0 || p->pads[1] != 0 || p->pads[rank] != 0 || p->pads[rank + 1] != 0)
    return std::nullopt;
  return p->pads;
}

// The value the consumer pads with, if the fusion is exact for it.
std::optional<double> padding_value(const ir::Node& n) {
  if (n.attr_string("auto_pad", "NOTSET") != "NOTSET") return std::nullopt;
  if (n.is("Conv")) {
    if (!only_attributes(n, {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"}))
      return std::nullopt;
    return 0.0;
  }
  if (n.attr_int("ceil_mode", 0) != 0) return std::nullopt;
  if (n.is("AveragePool")) {
    if (n.opset() < 7 || n.attr_int("count_include_pad", 0) != 1 ||
        !only_attributes(
            n, {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"}))
      return std::nullopt;
    return 0.0;
  }
  if (n.is("MaxPool")) {
    if (n.outputs().size() > 1 && n.output(1) && n.output(1)->use_count() > 0) return std::nullopt;
    if (n.attr_int("storage_order", 0) != 0 ||
        !only_attributes(n, {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads",
                             "storage_order", "strides"}))
      return std::nullopt;
    return -std::numeric_limits<double>::infinity();
  }
  return std::nullopt;
}

bool pad_into_consumer(ir::Node& n, Rewriter& rw) {
  ir::Value* padded = n.input(0);
  ir::Node* pad = producer(padded, "Pad");
  if (!pad) return false;  // not fed by a Pad: most Conv and pool nodes
  if (!single_use(padded)) return no_match(*pad, "the Pad's result has other readers");
  if (!pad->input(0) || !is_ieee_float(padded->elem_type()))
    return no_match(*pad, "the padded data is not known to be a float type");
  auto value = padding_value(n);
  if (!value) return no_match(n, "an attribute or padding mode the node's own pads cannot express");
  auto pads = spatial_pads(*pad, *value);
  if (!pads)
    return no_match(*pad,
                    "not a constant pad of the value the node pads with, on spatial axes only, "
                    "non-negative");
  const size_t spatial = pads->size() / 2 - 2;
  std::vector<int64_t> fused(2 * spatial, 0);
  if (n.attr("pads")) {
    auto own = n.attr_ints("pads");
    if (!own || own->size() != fused.size()) return false;
    fused = *own;
  }
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t begin = (*pads)[2 + i], end = (*pads)[spatial + 4 + i];
    if (fused[i] < 0 || fused[spatial + i] < 0 ||
        __builtin_add_overflow(fused[i], begin, &fused[i]) ||
        __builtin_add_overflow(fused[spatial + i], end, &fused[spatial + i]))
      return false;
  }
  rw.set_input(&n, 0, pad->input(0));
  rw.set_attr(&n, ints_attr("pads", fused));
  rw.erase(pad);
  return true;
}

}  // namespace

std::vector<Rule> pad_fusion_rules() {
  return {{"pad_into_conv_or_pool", {"Conv", "AveragePool", "MaxPool"}, pad_into_consumer}};
}

}  // namespace graft
