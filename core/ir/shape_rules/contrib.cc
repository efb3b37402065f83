// Shape rules of ONNX Runtime's com.microsoft ops that Graft emits for `--target onnxruntime`
// (kernels in core/eval/kernels/contrib.cc). libonnx has no schemas for them, so these rules are
// all that is known of their outputs; each says "partial" where its inputs leave a dim open.
#include "core/ir/shape_rules.h"

namespace graft::ir::shape_rules {

namespace {

using onnx::TensorProto;

// Output 0 has input 0's type and dims (the GELUs, RotaryEmbedding, and the normalizations'
// output and input_skip_bias_sum).
TensorFact same_as_input(const Node& n, size_t, bool*) { return input_fact(n, 0); }

// SkipLayerNormalization / SkipSimplifiedLayerNormalization: output and input_skip_bias_sum
// (outputs 0 and 3) as input; mean and inv_std_var (1, 2) float with the last dim 1.
TensorFact skip_norm(const Node& n, size_t output, bool*) {
  const TensorFact& x = input_fact(n, 0);
  if (output == 0 || output == 3) return x;
  if (!x.has_rank || x.dims.empty()) return TensorFact{TensorProto::FLOAT, false, {}};
  TensorFact stat = x;
  stat.elem_type = TensorProto::FLOAT;
  stat.dims.back() = Dim::of(1);
  return stat;
}

// FusedMatMul: MatMul's fact of the operands with their last two axes swapped where transA /
// transB say; transBatch forms are left unknown.
TensorFact fused_matmul(const Node& n, size_t, bool* partial) {
  TensorFact a = input_fact(n, 0), b = input_fact(n, 1);
  if (n.attr_int("transBatchA", 0) != 0 || n.attr_int("transBatchB", 0) != 0)
    return with_type(unknown(partial), a.elem_type);
  auto swap_last = [](TensorFact& f) {
    if (f.has_rank && f.dims.size() >= 2)
      std::swap(f.dims[f.dims.size() - 1], f.dims[f.dims.size() - 2]);
  };
  if (n.attr_int("transA", 0) != 0) swap_last(a);
  if (n.attr_int("transB", 0) != 0) swap_last(b);
  if ((a.has_rank && a.dims.size() < 2) || (b.has_rank && b.dims.size() < 2))
    return with_type(unknown(partial), a.elem_type);
  return matmul_fact(a, b);
}

// Attention: output (B, S, Dv) with Dv from qkv_hidden_sizes or a third of the weights'
// columns; present (2, B, N, P + S, H).
TensorFact attention(const Node& n, size_t output, bool* partial) {
  const TensorFact& x = input_fact(n, 0);
  const TensorFact& w = input_fact(n, 1);
  const int32_t type = x.elem_type;
  if (!x.has_rank || x.dims.size() != 3) return with_type(unknown(partial), type);
  const int64_t heads = n.attr_int("num_heads", 0);
  std::optional<int64_t> dq, dv;
  if (auto sizes = n.attr_ints("qkv_hidden_sizes"); sizes && sizes->size() == 3) {
    dq = (*sizes)[0];
    dv = (*sizes)[2];
  } else if (auto cols = w.dim(1); cols && *cols % 3 == 0) {
    dq = dv = *cols / 3;
  }
  if (output == 0)
    return TensorFact::of_rank(type, {x.dims[0], x.dims[1], dv ? Dim::of(*dv) : Dim{}});
  if (output != 1 || heads <= 0) return with_type(unknown(partial), type);
  Dim total;
  const TensorFact& past = input_fact(n, 4);
  if (n.input(4) == nullptr) {
    total = x.dims[1];
  } else if (past.has_rank && past.dims.size() == 5 && past.dims[3].known() && x.dims[1].known()) {
    total = checked_add(past.dims[3].value, x.dims[1].value);
  } else {
    *partial = true;
  }
  return TensorFact::of_rank(type, {Dim::of(2), x.dims[0], Dim::of(heads), total,
                                    dq && *dq % heads == 0 ? Dim::of(*dq / heads) : Dim{}});
}

// MultiHeadAttention (query, key, value 3-D): output (B, S, Dv) with value's Dv; present_key and
// present_value (B, N, P + L, H or Hv) with P the past's length (0 without past) and L key's.
TensorFact multi_head_attention(const Node& n, size_t output, bool* partial) {
  const TensorFact& query = input_fact(n, 0);
  const TensorFact& key = input_fact(n, 1);
  const TensorFact& value = input_fact(n, 2);
  const int32_t type = query.elem_type;
  const int64_t heads = n.attr_int("num_heads", 0);
  if (!query.has_rank || query.dims.size() != 3 || !key.has_rank || key.dims.size() != 3 ||
      !value.has_rank || value.dims.size() != 3 || heads <= 0)
    return with_type(unknown(partial), type);
  if (output == 0) return TensorFact::of_rank(type, {query.dims[0], query.dims[1], value.dims[2]});
  if (output > 2) return with_type(unknown(partial), type);
  const Dim& width = output == 1 ? key.dims[2] : value.dims[2];
  Dim total;
  const TensorFact& past = input_fact(n, output == 1 ? 6 : 7);
  if (n.input(6) == nullptr) {
    total = key.dims[1];
  } else if (past.has_rank && past.dims.size() == 4 && past.dims[2].known() &&
             key.dims[1].known()) {
    total = checked_add(past.dims[2].value, key.dims[1].value);
  } else {
    *partial = true;
  }
  return TensorFact::of_rank(
      type, {query.dims[0], Dim::of(heads), total,
             width.known() && width.value % heads == 0 ? Dim::of(width.value / heads) : Dim{}});
}

// GatherBlockQuantized: Gather's dims (the data's, the gather_axis one replaced by the indices'
// dims) with the scales' element type. Packed uint8 data (two 4-bit values a byte along the last
// axis) is left unknown.
TensorFact gather_block_quantized(const Node& n, size_t, bool* partial) {
  const TensorFact& data = input_fact(n, 0);
  const TensorFact& ids = input_fact(n, 1);
  const int32_t type = input_fact(n, 2).elem_type;
  if (!data.has_rank || !ids.has_rank || data.dims.empty() || data.elem_type == TensorProto::UINT8)
    return with_type(unknown(partial), type);
  const auto r = static_cast<int64_t>(data.dims.size());
  int64_t axis = n.attr_int("gather_axis", 0);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) return with_type(unknown(partial), type);
  std::vector<Dim> dims(data.dims.begin(), data.dims.begin() + axis);
  dims.insert(dims.end(), ids.dims.begin(), ids.dims.end());
  dims.insert(dims.end(), data.dims.begin() + axis + 1, data.dims.end());
  return TensorFact::of_rank(type, std::move(dims));
}

// MatMulNBits: A's dims with the last one N (the attribute), A's element type.
TensorFact matmul_nbits(const Node& n, size_t, bool* partial) {
  const TensorFact& a = input_fact(n, 0);
  const int64_t cols = n.attr_int("N", -1);
  if (!a.has_rank || a.dims.empty() || cols < 1) return with_type(unknown(partial), a.elem_type);
  std::vector<Dim> dims = a.dims;
  dims.back() = Dim::of(cols);
  return TensorFact::of_rank(a.elem_type, std::move(dims));
}

}  // namespace

void add_contrib_rules(Table& t) {
  t.add({"com.microsoft:Gelu", "com.microsoft:BiasGelu", "com.microsoft:FastGelu",
         "com.microsoft:QuickGelu"},
        same_as_input);
  t.add({"com.microsoft:SkipLayerNormalization", "com.microsoft:SkipSimplifiedLayerNormalization"},
        skip_norm);
  t.add({"com.microsoft:FusedMatMul"}, fused_matmul);
  t.add({"com.microsoft:Attention"}, attention);
  t.add({"com.microsoft:MultiHeadAttention"}, multi_head_attention);
  t.add({"com.microsoft:RotaryEmbedding"}, same_as_input);
  t.add({"com.microsoft:GatherBlockQuantized"}, gather_block_quantized);
  t.add({"com.microsoft:MatMulNBits"}, matmul_nbits);
}

}  // namespace graft::ir::shape_rules
