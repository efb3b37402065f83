// Shape rules of the neural-network ops: MatMul, Gemm, Conv (ConvInteger, ConvTranspose) and the
// pools, Resize/Upsample, RNN/GRU/LSTM.
#include <cmath>

#include "core/ir/op_params.h"
#include "core/ir/shape_rules.h"

namespace graft::ir::shape_rules {

namespace {

using onnx::TensorProto;

TensorFact matmul(const Node& n, size_t, bool*) {
  return matmul_fact(input_fact(n, 0), input_fact(n, 1));
}

TensorFact gemm(const Node& n, size_t, bool*) {
  const TensorFact& a = input_fact(n, 0);
  const TensorFact& b = input_fact(n, 1);
  Dim m, k;
  if (a.has_rank && a.dims.size() == 2) m = a.dims[n.attr_int("transA", 0) ? 1 : 0];
  if (b.has_rank && b.dims.size() == 2) k = b.dims[n.attr_int("transB", 0) ? 0 : 1];
  return TensorFact::of_rank(a.elem_type, {m, k});
}

// The spatial dims (2..) of `out` for a Conv or a pool without ceil_mode, from the known dims of
// `x`; ConvTranspose's and the rest are left to libonnx (partial), which only knows them from
// known input dims too.
void window_dims(const Node& n, const TensorFact& x, const TensorFact& w, bool conv,
                 TensorFact* out, bool* partial) {
  const std::string& op = n.op_type();
  bool any_known = false;
  for (size_t i = 2; i < x.dims.size(); ++i) any_known = any_known || x.dims[i].known();
  if (!any_known) return;
  const size_t spatial = x.dims.size() - 2;
  std::optional<std::vector<int64_t>> kernel = n.attr_ints("kernel_shape");
  if (!kernel && conv && w.has_rank && w.dims.size() == x.dims.size()) {
    kernel.emplace();
    for (size_t i = 2; i < w.dims.size(); ++i) kernel->push_back(w.dims[i].value);
  }
  auto ints = [&](const char* name, int64_t def, size_t count) {
    auto v = n.attr_ints(name);
    return v ? *v : std::vector<int64_t>(count, def);
  };
  const std::vector<int64_t> strides = ints("strides", 1, spatial);
  const std::vector<int64_t> dilations = ints("dilations", 1, spatial);
  const std::vector<int64_t> pads = ints("pads", 0, 2 * spatial);
  const bool dilated = conv || op == "MaxPool";  // the others' arrived after opset 17
  if (op == "ConvTranspose" || n.attr_int("ceil_mode", 0) != 0 || !kernel ||
      kernel->size() != spatial || strides.size() != spatial || dilations.size() != spatial ||
      pads.size() != 2 * spatial || (!dilated && n.attr("dilations"))) {
    *partial = true;
    return;
  }
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  for (size_t i = 0; i < spatial; ++i) {
    const Dim& in = x.dims[i + 2];
    if (!in.known()) continue;
    auto extent = window_extent(in.value, (*kernel)[i], strides[i], dilations[i], pads[i],
                                pads[i + spatial], auto_pad, false);
    if (extent)
      out->dims[i + 2] = Dim::of(*extent);
    else
      *partial = true;
  }
}

// Conv, ConvInteger (Conv on integers with an int32 result), ConvTranspose, and the pools with
// their Global forms: [N, C, spatial...].
TensorFact conv_or_pool(const Node& n, size_t output, bool* partial) {
  const std::string& op = n.op_type();
  const bool conv = op == "Conv" || op == "ConvInteger";
  const TensorFact& x = input_fact(n, 0);
  if (output > 0 && !(op == "MaxPool" && output == 1)) return unknown(partial);
  // MaxPool's Indices are int64.
  const int32_t type = output == 1           ? TensorProto::INT64
                       : op == "ConvInteger" ? TensorProto::INT32
                                             : x.elem_type;
  if (!x.has_rank || x.dims.size() < 2) return with_type(TensorFact{}, type);
  TensorFact out = rank_only(type, static_cast<int64_t>(x.dims.size()));
  if (!out.has_rank) return out;
  out.dims[0] = x.dims[0];
  const TensorFact& w = input_fact(n, 1);
  if (conv && w.has_rank && !w.dims.empty())
    out.dims[1] = w.dims[0];
  else if (op == "ConvTranspose" && w.has_rank && w.dims.size() > 1 && w.dims[1].known())
    out.dims[1] = checked_mul(w.dims[1].value, n.attr_int("group", 1));
  else if (!conv && op != "ConvTranspose")
    out.dims[1] = x.dims[1];
  if (op.rfind("Global", 0) == 0) {
    for (size_t i = 2; i < out.dims.size(); ++i) out.dims[i] = Dim::of(1);
    return out;
  }
  window_dims(n, x, w, conv, &out, partial);
  return out;
}

TensorFact resize(const Node& n, size_t, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  if (!x.has_rank) return with_type(TensorFact{}, x.elem_type);
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  auto p = resize_params(n);
  if (!p) may_know_more(n, partial);
  // Resize-18's axes and aspect-ratio policy, and crops, are not modelled.
  if (!p || n.attr("axes") || n.attr("keep_aspect_ratio_policy") ||
      n.attr_string("coordinate_transformation_mode", "") == "tf_crop_and_resize") {
    if (p) *partial = true;
    return rank_only(x.elem_type, rank);
  }
  std::vector<Dim> dims;
  if (p->sizes) {
    if (static_cast<int64_t>(p->sizes->size()) != rank) return unknown(partial);
    for (int64_t d : *p->sizes) dims.push_back(d >= 0 ? Dim::of(d) : Dim{});
    return TensorFact::of_rank(x.elem_type, std::move(dims));
  }
  if (static_cast<int64_t>(p->scales->size()) != rank) return unknown(partial);
  for (int64_t i = 0; i < rank; ++i) {
    const Dim& in = x.dims[static_cast<size_t>(i)];
    const double scale = (*p->scales)[static_cast<size_t>(i)];
    if (scale == 1.0) {
      dims.push_back(in);
      continue;
    }
    if (!in.known() || !(scale > 0) || !(scale < 1e9)) {
      if (in.known()) *partial = true;
      dims.push_back(Dim{});
      continue;
    }
    // floor(in * scale); runtimes compute it in float or double: where those disagree (a product
    // at an integer boundary), the dim is left unknown.
    const double wide = std::floor(static_cast<double>(in.value) * scale);
    const double narrow = std::floor(static_cast<float>(in.value) * static_cast<float>(scale));
    if (wide != narrow || wide > 4e18) {
      *partial = true;
      dims.push_back(Dim{});
    } else {
      dims.push_back(Dim::of(static_cast<int64_t>(wide)));
    }
  }
  return TensorFact::of_rank(x.elem_type, std::move(dims));
}

// X is [seq, batch, input] ([batch, seq, input] with layout 1); Y is [seq, directions, batch,
// hidden] ([batch, seq, directions, hidden]), Y_h and Y_c [directions, batch, hidden] ([batch,
// directions, hidden]).
TensorFact recurrent(const Node& n, size_t output, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  const int64_t hidden = n.attr_int("hidden_size", 0);
  const int64_t layout = n.opset() >= 14 ? n.attr_int("layout", 0) : 0;
  if (hidden <= 0 || (layout != 0 && layout != 1) || output > (n.op_type() == "LSTM" ? 2u : 1u))
    return unknown(partial);
  const Dim dirs = Dim::of(n.attr_string("direction", "forward") == "bidirectional" ? 2 : 1);
  Dim seq, batch;
  if (x.has_rank && x.dims.size() == 3) {
    seq = x.dims[layout == 0 ? 0 : 1];
    batch = x.dims[layout == 0 ? 1 : 0];
  }
  std::vector<Dim> dims;
  if (output == 0)
    dims = layout == 0 ? std::vector<Dim>{seq, dirs, batch, Dim::of(hidden)}
                       : std::vector<Dim>{batch, seq, dirs, Dim::of(hidden)};
  else
    dims = layout == 0 ? std::vector<Dim>{dirs, batch, Dim::of(hidden)}
                       : std::vector<Dim>{batch, dirs, Dim::of(hidden)};
  return TensorFact::of_rank(x.elem_type, std::move(dims));
}

// Attention (opset 23): Y (B, N, S, Hv) for 4-D Q, K, V, (B, S, N * Hv) for 3-D ones (N and Nkv
// from q_num_heads / kv_num_heads); present_key / present_value (B, Nkv, P + T, H / Hv).
TensorFact attention(const Node& n, size_t output, bool* partial) {
  const TensorFact &q = input_fact(n, 0), &k = input_fact(n, 1), &v = input_fact(n, 2);
  const int32_t type = q.elem_type;
  if (!q.has_rank || !k.has_rank || !v.has_rank || q.dims.size() != k.dims.size() ||
      q.dims.size() != v.dims.size() || (q.dims.size() != 3 && q.dims.size() != 4) || output > 2)
    return with_type(unknown(partial), type);
  const bool four = q.dims.size() == 4;
  const int64_t heads = n.attr_int("q_num_heads", 0), kv_heads = n.attr_int("kv_num_heads", 0);
  if (!four && (heads <= 0 || kv_heads <= 0)) return with_type(unknown(partial), type);
  // Per-head sizes of K (H) and V (Hv), and the key/value head count.
  auto per_head = [&](const Dim& d) {
    if (four) return d;
    return d.known() && d.value % kv_heads == 0 ? Dim::of(d.value / kv_heads) : Dim{};
  };
  const Dim head = per_head(k.dims.back()), vhead = per_head(v.dims.back());
  const Dim kvh = four ? k.dims[1] : Dim::of(kv_heads);
  if (output == 0) {
    if (four) return TensorFact::of_rank(type, {q.dims[0], q.dims[1], q.dims[2], vhead});
    return TensorFact::of_rank(
        type, {q.dims[0], q.dims[1], vhead.known() ? checked_mul(heads, vhead.value) : Dim{}});
  }
  // The total length: T, plus P with a past.
  const Dim len = k.dims[four ? 2 : 1];
  Dim total = len;
  if (n.input(4) != nullptr) {
    const TensorFact& past = input_fact(n, 4);
    total = past.has_rank && past.dims.size() == 4 && past.dims[2].known() && len.known()
                ? checked_add(past.dims[2].value, len.value)
                : Dim{};
    if (!total.known()) *partial = true;
  }
  return TensorFact::of_rank(type, {q.dims[0], kvh, total, output == 1 ? head : vhead});
}

}  // namespace

void add_nn_rules(Table& t) {
  t.add({"Attention"}, attention);
  t.add({"MatMul"}, matmul);
  t.add({"Gemm"}, gemm);
  t.add({"Conv", "ConvInteger", "ConvTranspose", "MaxPool", "AveragePool", "LpPool",
         "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"},
        conv_or_pool);
  t.add({"Resize", "Upsample"}, resize);
  t.add({"RNN", "GRU", "LSTM"}, recurrent);
}

}  // namespace graft::ir::shape_rules
