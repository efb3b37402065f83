#!/usr/bin/python3
"""Writes the two forms of one decoder attention layer with a KV cache that kv_attention.js
times under ONNX Runtime: as exporters write it (heads split by Reshape + Transpose, the cache
concatenated, scores scaled and masked, Softmax, heads merged) and as one com.microsoft
MultiHeadAttention with past_key/past_value and attention_bias. Q, K and V come in as
(B, S, N*H) inputs, so only the attention itself differs.

With --kv-heads G (fewer than --heads: grouped-query attention), K and V have G heads; the
exported form repeats them to N heads after the cache as transformers' repeat_kv does
(Unsqueeze, Expand, Reshape), and the fused form is com.microsoft GroupQueryAttention
(seqlens_k and total_sequence_length instead of a mask: causal, no padding), written to gqa.onnx.

Usage: /usr/bin/python3 bench/serving_sizes/kv_attention.py OUT_DIR [--heads 12] [--head-size 64]
           [--kv-heads G]
"""

import argparse
import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def decomposed(n, hs, g):
    d = n * hs
    nodes, inits = [], [nh.from_array(np.array([0, 0, n, hs], np.int64), "split"),
                        nh.from_array(np.array([0, 0, g, hs], np.int64), "split_kv"),
                        nh.from_array(np.array([0, 0, d], np.int64), "merge"),
                        nh.from_array(np.array(math.sqrt(hs), np.float32), "root")]
    for t in "qkv":
        nodes += [h.make_node("Reshape", [t, "split" if t == "q" else "split_kv"], [t + "4"]),
                  h.make_node("Transpose", [t + "4"], [t + "h"], perm=[0, 2, 1, 3])]
    nodes += [h.make_node("Concat", ["past_key", "kh"], ["present_key"], axis=2),
              h.make_node("Concat", ["past_value", "vh"], ["present_value"], axis=2)]
    keys, values = "present_key", "present_value"
    if g != n:  # transformers' repeat_kv: (B, G, T, H) -> (B, G, N/G, T, H) -> (B, N, T, H)
        inits += [nh.from_array(np.array([2], np.int64), "axis2"),
                  nh.from_array(np.array([1, 1, n // g, 1, 1], np.int64), "repeat")]
        for t in ("present_key", "present_value"):
            nodes += [h.make_node("Shape", [t], [t + "_shape"]),
                      h.make_node("Unsqueeze", [t, "axis2"], [t + "5"]),
                      h.make_node("Expand", [t + "5", "repeat"], [t + "_x"])]
        # (B, N, T, H) with T read at run time
        nodes += [h.make_node("Gather", ["present_key_shape", "two"], ["total"], axis=0),
                  h.make_node("Concat", ["bn", "total", "hs1"], ["rep_shape"], axis=0)]
        inits += [nh.from_array(np.array([2], np.int64), "two"),
                  nh.from_array(np.array([1, n], np.int64), "bn"),
                  nh.from_array(np.array([hs], np.int64), "hs1")]
        for t in ("present_key", "present_value"):
            nodes.append(h.make_node("Reshape", [t + "_x", "rep_shape"], [t + "_rep"]))
        keys, values = "present_key_rep", "present_value_rep"
    nodes += [h.make_node("Transpose", [keys], ["kt"], perm=[0, 1, 3, 2]),
              h.make_node("MatMul", ["qh", "kt"], ["s"]),
              h.make_node("Div", ["s", "root"], ["s1"]),
              h.make_node("Add", ["s1", "mask"], ["s2"]),
              h.make_node("Softmax", ["s2"], ["p"], axis=-1),
              h.make_node("MatMul", ["p", values], ["o"]),
              h.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              h.make_node("Reshape", ["ot", "merge"], ["y"])]
    return nodes, inits


def fused(n, hs, g):
    return [h.make_node("MultiHeadAttention",
                        ["q", "k", "v", "", "", "mask", "past_key", "past_value"],
                        ["y", "present_key", "present_value"], domain="com.microsoft",
                        num_heads=n, scale=1 / math.sqrt(hs))], []


def grouped(n, hs, g):
    return [h.make_node("GroupQueryAttention",
                        ["q", "k", "v", "past_key", "past_value", "seqlens_k",
                         "total_sequence_length"],
                        ["y", "present_key", "present_value"], domain="com.microsoft",
                        num_heads=n, kv_num_heads=g, scale=1 / math.sqrt(hs))], []


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", type=Path)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-size", type=int, default=64)
    p.add_argument("--kv-heads", type=int, default=None)
    a = p.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    n, hs = a.heads, a.head_size
    g = a.kv_heads or n
    if n % g:
        p.error("--heads must be a multiple of --kv-heads")
    d = n * hs
    forms = (("decomposed", decomposed), ("mha", fused) if g == n else ("gqa", grouped))
    for name, build in forms:
        nodes, inits = build(n, hs, g)
        inputs = [h.make_tensor_value_info(t, T.FLOAT, [1, "S", d if t == "q" else g * hs])
                  for t in "qkv"]
        if name == "gqa":
            inputs += [h.make_tensor_value_info("seqlens_k", T.INT32, [1]),
                       h.make_tensor_value_info("total_sequence_length", T.INT32, [])]
        else:
            inputs.append(h.make_tensor_value_info("mask", T.FLOAT, [1, 1, "S", "T"]))
        inputs += [h.make_tensor_value_info(t, T.FLOAT, [1, g, "P", hs]) for t in ("past_key", "past_value")]
        outputs = [h.make_tensor_value_info("y", T.FLOAT, [1, "S", d])]
        outputs += [h.make_tensor_value_info(t, T.FLOAT, [1, g, "T", hs]) for t in ("present_key", "present_value")]
        model = h.make_model(h.make_graph(nodes, name, inputs, outputs, inits),
                             opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
        model.ir_version = 8
        onnx.save(model, str(a.out_dir / f"{name}.onnx"))


if __name__ == "__main__":
    main()
