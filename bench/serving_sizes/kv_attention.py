#!/usr/bin/python3
"""Writes the two forms of one decoder attention layer with a KV cache that kv_attention.js
times under ONNX Runtime: as exporters write it (heads split by Reshape + Transpose, the cache
concatenated, scores scaled and masked, Softmax, heads merged) and as one com.microsoft
MultiHeadAttention with past_key/past_value and attention_bias. Q, K and V come in as
(B, S, N*H) inputs, so only the attention itself differs.

Usage: /usr/bin/python3 bench/serving_sizes/kv_attention.py OUT_DIR [--heads 12] [--head-size 64]
"""

import argparse
import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh


def decomposed(n, hs):
    d = n * hs
    nodes, inits = [], [nh.from_array(np.array([0, 0, n, hs], np.int64), "split"),
                        nh.from_array(np.array([0, 0, d], np.int64), "merge"),
                        nh.from_array(np.array(math.sqrt(hs), np.float32), "root")]
    for t in "qkv":
        nodes += [h.make_node("Reshape", [t, "split"], [t + "4"]),
                  h.make_node("Transpose", [t + "4"], [t + "h"], perm=[0, 2, 1, 3])]
    nodes += [h.make_node("Concat", ["past_key", "kh"], ["present_key"], axis=2),
              h.make_node("Concat", ["past_value", "vh"], ["present_value"], axis=2),
              h.make_node("Transpose", ["present_key"], ["kt"], perm=[0, 1, 3, 2]),
              h.make_node("MatMul", ["qh", "kt"], ["s"]),
              h.make_node("Div", ["s", "root"], ["s1"]),
              h.make_node("Add", ["s1", "mask"], ["s2"]),
              h.make_node("Softmax", ["s2"], ["p"], axis=-1),
              h.make_node("MatMul", ["p", "present_value"], ["o"]),
              h.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              h.make_node("Reshape", ["ot", "merge"], ["y"])]
    return nodes, inits


def fused(n, hs):
    return [h.make_node("MultiHeadAttention",
                        ["q", "k", "v", "", "", "mask", "past_key", "past_value"],
                        ["y", "present_key", "present_value"], domain="com.microsoft",
                        num_heads=n, scale=1 / math.sqrt(hs))], []


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out_dir", type=Path)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-size", type=int, default=64)
    a = p.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    n, hs = a.heads, a.head_size
    d = n * hs
    for name, build in (("decomposed", decomposed), ("mha", fused)):
        nodes, inits = build(n, hs)
        inputs = [h.make_tensor_value_info(t, T.FLOAT, [1, "S", d]) for t in "qkv"]
        inputs.append(h.make_tensor_value_info("mask", T.FLOAT, [1, 1, "S", "T"]))
        inputs += [h.make_tensor_value_info(t, T.FLOAT, [1, n, "P", hs]) for t in ("past_key", "past_value")]
        outputs = [h.make_tensor_value_info("y", T.FLOAT, [1, "S", d])]
        outputs += [h.make_tensor_value_info(t, T.FLOAT, [1, n, "T", hs]) for t in ("present_key", "present_value")]
        model = h.make_model(h.make_graph(nodes, name, inputs, outputs, inits),
                             opset_imports=[h.make_opsetid("", 17), h.make_opsetid("com.microsoft", 1)])
        model.ir_version = 8
        onnx.save(model, str(a.out_dir / f"{name}.onnx"))


if __name__ == "__main__":
    main()
