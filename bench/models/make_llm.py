#!/usr/bin/python3
"""Writes an LLM-shaped ONNX model whose weights are external data, of a size you choose.

Usage: /usr/bin/python3 bench/models/make_llm.py OUT_DIR [--gib 4.0] [--hidden 2048]
           [--intermediate 5632] [--heads 16] [--vocab 32000] [--dtype float32|float16]
           [--files one|per-tensor] [--seed 1]

OUT_DIR/llm.onnx is a decoder-only transformer in the LLaMA style, as exporters write it:
a token Gather, then per block an RMSNorm written out (Pow, ReduceMean, Add, Sqrt, Div, Mul),
attention with separate q/k/v projections (MatMul), heads split and merged with
Reshape/Transpose, a causal mask added before Softmax, an output projection and a residual Add,
then an RMSNorm and a SiLU-gated MLP (Sigmoid, Mul, Mul) with a residual Add; a final RMSNorm and
an untied LM head. Blocks are added until the weights reach --gib GiB. Inputs: input_ids
int64[batch, seq]; output: logits float[batch, seq, vocab].

Every weight is stored as external data, written straight to disk in 64 MiB pieces of seeded
random numbers (so the generator's own memory stays small whatever the size): in one file,
OUT_DIR/llm.weights (default), or one file per tensor under OUT_DIR/weights/. The model file
itself holds only the graph. For a serving benchmark, not for accuracy: the weights are noise.
"""

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PIECE = 64 << 20  # bytes of random numbers generated and written at a time


class Weights:
    """Writes tensors as external data and makes the initializers that point at them."""

    def __init__(self, out_dir, dtype, per_tensor, seed):
        self.out_dir = Path(out_dir)
        self.dtype = np.dtype(dtype)
        self.onnx_type = TensorProto.FLOAT if self.dtype == np.float32 else TensorProto.FLOAT16
        self.per_tensor = per_tensor
        self.rng = np.random.default_rng(seed)
        self.initializers = []
        self.total = 0
        self.offset = 0
        self.single = None
        if per_tensor:
            (self.out_dir / "weights").mkdir(parents=True, exist_ok=True)
        else:
            self.single = open(self.out_dir / "llm.weights", "wb")

    def add(self, name, dims, scale=0.02):
        count = int(np.prod(dims))
        nbytes = count * self.dtype.itemsize
        if self.per_tensor:
            location = f"weights/{name}.bin"
            f = open(self.out_dir / location, "wb")
            offset = 0
        else:
            location = "llm.weights"
            f = self.single
            offset = self.offset
        left = count
        per_piece = max(1, PIECE // self.dtype.itemsize)
        while left > 0:
            n = min(left, per_piece)
            piece = (self.rng.standard_normal(n, dtype=np.float32) * scale).astype(self.dtype)
            f.write(piece.tobytes())
            left -= n
        if self.per_tensor:
            f.close()
        else:
            self.offset += nbytes
        t = TensorProto()
        t.name = name
        t.data_type = self.onnx_type
        t.dims.extend(dims)
        t.data_location = TensorProto.EXTERNAL
        for key, value in (("location", location), ("offset", str(offset)), ("length", str(nbytes))):
            entry = t.external_data.add()
            entry.key = key
            entry.value = value
        self.initializers.append(t)
        self.total += nbytes
        return name

    def close(self):
        if self.single:
            self.single.close()


class Graph:
    def __init__(self, weights, elem):
        self.w = weights
        self.elem = elem
        self.nodes = []
        self.consts = []
        self.n = 0

    def name(self, hint):
        self.n += 1
        return f"{hint}_{self.n}"

    def op(self, op_type, inputs, hint=None, **attrs):
        out = self.name(hint or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def const(self, hint, array):
        name = self.name(hint)
        self.consts.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def rms_norm(self, x, hidden, prefix):
        gamma = self.w.add(f"{prefix}.weight", [hidden], scale=1.0)
        two = self.const("two", np.array(2.0, dtype=self.elem))
        eps = self.const("eps", np.array(1e-6, dtype=self.elem))
        sq = self.op("Pow", [x, two])
        mean = self.op("ReduceMean", [sq], axes=[-1], keepdims=1)
        root = self.op("Sqrt", [self.op("Add", [mean, eps])])
        return self.op("Mul", [self.op("Div", [x, root]), gamma])

    def linear(self, x, rows, cols, prefix):
        return self.op("MatMul", [x, self.w.add(f"{prefix}.weight", [rows, cols])])


def build(args):
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    elem = np.float32 if args.dtype == "float32" else np.float16
    weights = Weights(out, elem, args.files == "per-tensor", args.seed)
    g = Graph(weights, elem)
    hidden, heads, inter, vocab = args.hidden, args.heads, args.intermediate, args.vocab
    if hidden % heads:
        sys.exit("make_llm: --hidden must be a multiple of --heads")
    head_dim = hidden // heads
    elem_size = np.dtype(elem).itemsize
    per_block = (4 * hidden * hidden + 3 * hidden * inter + 2 * hidden) * elem_size
    fixed = (2 * vocab * hidden + hidden) * elem_size
    target = int(args.gib * (1 << 30))
    blocks = max(1, -(-(target - fixed) // per_block))

    ids = "input_ids"
    x = g.op("Gather", [weights.add("embed_tokens.weight", [vocab, hidden]), ids], "embed")
    # Shapes from the input: [batch, seq] and the causal mask [seq, seq] (0 below, -1e4 above).
    shape = g.op("Shape", [ids])
    batch = g.op("Gather", [shape, g.const("zero", np.array([0], np.int64))], axis=0)
    seq = g.op("Gather", [shape, g.const("one", np.array([1], np.int64))], axis=0)
    split = g.op("Concat", [batch, seq, g.const("heads", np.array([heads, head_dim], np.int64))], axis=0)
    merge = g.op("Concat", [batch, seq, g.const("hidden", np.array([hidden], np.int64))], axis=0)
    seq_scalar = g.op("Squeeze", [seq, g.const("axis0", np.array([0], np.int64))])
    pos = g.op("Range", [g.const("r0", np.array(0, np.int64)), seq_scalar, g.const("r1", np.array(1, np.int64))])
    above = g.op("Greater", [g.op("Unsqueeze", [pos, g.const("axis0b", np.array([0], np.int64))]),
                             g.op("Unsqueeze", [pos, g.const("axis1", np.array([1], np.int64))])])
    mask = g.op("Where", [above, g.const("neg", np.array(-1e4, elem)), g.const("zerof", np.array(0, elem))])
    scale = g.const("scale", np.array(1.0 / np.sqrt(head_dim), elem))

    for b in range(blocks):
        p = f"layers.{b}"
        h = g.rms_norm(x, hidden, f"{p}.input_layernorm")
        heads_of = lambda v: g.op("Transpose", [g.op("Reshape", [v, split])], perm=[0, 2, 1, 3])
        q = heads_of(g.linear(h, hidden, hidden, f"{p}.self_attn.q_proj"))
        k = heads_of(g.linear(h, hidden, hidden, f"{p}.self_attn.k_proj"))
        v = heads_of(g.linear(h, hidden, hidden, f"{p}.self_attn.v_proj"))
        kt = g.op("Transpose", [k], perm=[0, 1, 3, 2])
        scores = g.op("Add", [g.op("Mul", [g.op("MatMul", [q, kt]), scale]), mask])
        attn = g.op("MatMul", [g.op("Softmax", [scores], axis=-1), v])
        merged = g.op("Reshape", [g.op("Transpose", [attn], perm=[0, 2, 1, 3]), merge])
        x = g.op("Add", [x, g.linear(merged, hidden, hidden, f"{p}.self_attn.o_proj")])
        h = g.rms_norm(x, hidden, f"{p}.post_attention_layernorm")
        gate = g.linear(h, hidden, inter, f"{p}.mlp.gate_proj")
        up = g.linear(h, hidden, inter, f"{p}.mlp.up_proj")
        act = g.op("Mul", [g.op("Mul", [gate, g.op("Sigmoid", [gate])]), up])
        x = g.op("Add", [x, g.linear(act, inter, hidden, f"{p}.mlp.down_proj")])
        print(f"make_llm: block {b + 1}/{blocks}, {weights.total / (1 << 30):.2f} GiB", file=sys.stderr)

    h = g.rms_norm(x, hidden, "norm")
    logits = g.linear(h, hidden, vocab, "lm_head")
    g.nodes.append(helper.make_node("Identity", [logits], ["logits"], name="logits"))
    weights.close()

    elem_type = weights.onnx_type
    graph = helper.make_graph(
        g.nodes, "llm",
        [helper.make_tensor_value_info(ids, TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", elem_type, ["batch", "seq", vocab])],
        initializer=weights.initializers + g.consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="graft bench/models/make_llm.py")
    model.ir_version = 8
    path = out / "llm.onnx"
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    onnx.checker.check_model(str(path))  # by path: external data resolves beside the model
    print(f"make_llm: wrote {path} ({os.path.getsize(path)} bytes, {len(g.nodes)} nodes, "
          f"{blocks} blocks) and {weights.total / (1 << 30):.2f} GiB of external data", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--gib", type=float, default=4.0, help="weights to reach, GiB (default 4)")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=5632)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    ap.add_argument("--files", choices=["one", "per-tensor"], default="one")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    for v in (args.hidden, args.intermediate, args.heads, args.vocab):
        if v <= 0:
            sys.exit("make_llm: sizes must be positive")
    if args.gib <= 0:
        sys.exit("make_llm: --gib must be positive")
    build(args)


if __name__ == "__main__":
    main()
