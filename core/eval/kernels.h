// Registration entry points of the kernel groups, one per file in core/eval/kernels/.
// kernel.cc calls each once, before the first lookup (explicit calls, not static initializers,
// so that linking the static library never drops a group).
#pragma once

namespace graft::eval {

void register_elementwise_kernels();  // kernels/elementwise.cc: math, logic, activations, Cast
void register_shape_kernels();        // kernels/shape.cc: Shape..Pad, gather/scatter, NonZero
void register_reduce_kernels();       // kernels/reduce.cc: Reduce*, ArgMax/ArgMin, TopK
void register_nn_kernels();           // kernels/nn.cc: MatMul, Gemm, Conv, pools, norms, ...
void register_rnn_kernels();          // kernels/rnn.cc: RNN, GRU, LSTM, Dropout
void register_extra_kernels();        // kernels/extra.cc: older opsets, simple activations, norms
void register_quantize_dynamic_kernels();  // kernels/quantize_dynamic.cc: DynamicQuantizeLinear,
                                           // MatMulInteger
void register_detection_kernels();         // kernels/detection.cc: NonMaxSuppression, RoiAlign,
                                           // GridSample
void register_contrib_kernels();    // kernels/contrib.cc: ONNX Runtime's com.microsoft fused ops
void register_attention_kernels();  // kernels/attention.cc: Attention (opset 23)
void register_rotary_kernels();     // kernels/rotary.cc: RotaryEmbedding (standard, com.microsoft)

}  // namespace graft::eval
