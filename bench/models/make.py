#!/usr/bin/python3
"""Generates a development corpus of realistic ONNX models with PyTorch.

Usage: /usr/bin/python3 bench/models/make.py [OUT_DIR] [--only NAME ...]

For each model writes OUT_DIR/NAME.onnx, exported with torch.onnx.export's default settings
(constant folding on, eval mode) at opset 17 (or the older opset a model stands for), the way
a user would export it, and records in
OUT_DIR/inputs.json what a runner needs to feed it seeded random inputs: a concrete shape for
every input, a value range where the runner's default [-1, 1] does not fit (token ids) and a
fixed value for attention masks, in the format of ../shared/models/inputs.json. OUT_DIR
defaults to /tmp/graft-corpus (about 350 MB).

The transformers are small stand-ins written here in the style of the Hugging Face
implementations (the graph patterns, not the code, are the point); the CNNs, the detector and
the optical-flow network come from torchvision. Weights are random and seeded; nothing is downloaded. Each model is
checked with onnx.checker and, when onnxruntime is importable, run and compared with PyTorch.
A model that fails is reported and skipped; the exit status is non-zero only if all fail.
"""

import argparse
import collections
import contextlib
import io
import json
import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

try:
    import onnxruntime
except ImportError:
    onnxruntime = None

REPO = Path(__file__).resolve().parents[2]
# Not under ../shared: the corpus is ~350 MB of random weights and is regenerated in ~40 s.
DEFAULT_OUT = Path("/tmp/graft-corpus")
OPSET = 17
SEED = 0


@dataclass
class Export:
    """What to export: the module, its example inputs by ONNX input name, and how to call it."""

    module: nn.Module
    inputs: dict  # input name -> example tensor, in the order the flattened arguments have
    outputs: list  # output names
    args: tuple = None  # arguments for module(*args); default: the inputs in order
    dynamic_axes: dict = field(default_factory=dict)
    ranges: dict = field(default_factory=dict)  # inputs.json "range": name -> (low, high)
    values: dict = field(default_factory=dict)  # inputs.json "values": name -> the one value
    post: object = None  # a function editing the exported ModelProto in place, or None
    opset: int = OPSET  # older exporters' opsets for models that stand for them
    shapes: dict = field(default_factory=dict)  # inputs.json shapes where serving differs from export

    def call_args(self):
        return self.args if self.args is not None else tuple(self.inputs.values())

    def input_spec(self):
        spec = {"shapes": {name: list(self.shapes.get(name, t.shape))
                           for name, t in self.inputs.items()}}
        if self.values:
            spec["values"] = self.values
        if self.ranges:
            spec["range"] = {name: list(r) for name, r in self.ranges.items()}
        return spec


MODELS = {}


def model(name):
    """Registers a function returning an Export under a model name."""

    def register(make):
        MODELS[name] = make
        return make

    return register


def perturb_norms(module):
    """Gives normalization layers non-trivial parameters and statistics.

    Freshly constructed norms are identities (weight 1, bias 0, BatchNorm mean 0 and variance
    1), which an optimizer could fold away in ways trained weights never allow.
    """
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._BatchNorm, RMSNorm)):
                if getattr(m, "weight", None) is not None:
                    m.weight.uniform_(0.8, 1.2)
                if getattr(m, "bias", None) is not None:
                    m.bias.uniform_(-0.1, 0.1)
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return module


def additive_mask(attention_mask, dtype=torch.float32):
    """[batch, keys] 0/1 mask -> [batch, 1, 1, keys], 0 where attended, very negative elsewhere."""
    mask = attention_mask[:, None, None, :].to(dtype)
    return (1.0 - mask) * torch.finfo(dtype).min


# --- BERT-style encoder: post-LayerNorm, erf GELU, heads split with view/permute on x.size() ---


class BertEmbeddings(nn.Module):
    def __init__(self, vocab, hidden, max_positions, type_vocab):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden, padding_idx=0)
        self.position = nn.Embedding(max_positions, hidden)
        self.token_type = nn.Embedding(type_vocab, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        # Like BERT, positions and (absent) token types come from buffers sliced to the input.
        self.register_buffer("position_ids", torch.arange(max_positions)[None], persistent=False)
        self.register_buffer(
            "token_type_ids", torch.zeros(1, max_positions, dtype=torch.long), persistent=False)

    def forward(self, input_ids):
        batch, seq = input_ids.size()
        positions = self.position_ids[:, :seq]
        token_types = self.token_type_ids[:, :seq].expand(batch, seq)
        x = self.word(input_ids) + self.token_type(token_types) + self.position(positions)
        return self.dropout(self.norm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)

    def split_heads(self, x):
        # [batch, seq, hidden] -> [batch, heads, seq, head_dim]; the shape is built from
        # x.size(), which exports as Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
        x = x.view(x.size()[:-1] + (self.heads, self.head_dim))
        return x.permute(0, 2, 1, 3)

    def forward(self, x, mask):
        q = self.split_heads(self.query(x))
        k = self.split_heads(self.key(x))
        v = self.split_heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = self.dropout(F.softmax(scores + mask, dim=-1))
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return context.view(context.size()[:-2] + (self.heads * self.head_dim,))


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads)
        self.attention_out = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.gelu = nn.GELU()
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x, mask):
        # Post-LayerNorm: normalize after each residual addition.
        x = self.attention_norm(x + self.dropout(self.attention_out(self.attention(x, mask))))
        h = self.output(self.gelu(self.intermediate(x)))
        return self.output_norm(x + self.dropout(h))


class BertEncoder(nn.Module):
    def __init__(self, vocab=8000, hidden=256, layers=4, heads=4, intermediate=1024,
                 max_positions=512, type_vocab=2):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, hidden, max_positions, type_vocab)
        self.layers = nn.ModuleList(BertLayer(hidden, heads, intermediate) for _ in range(layers))
        self.pooler = nn.Linear(hidden, hidden)

    def forward(self, input_ids, attention_mask):
        mask = additive_mask(attention_mask)
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x, mask)
        return x, torch.tanh(self.pooler(x[:, 0]))


def bert_export(net, vocab, batch=2, seq=16):
    """An encoder's export with int64 [batch, seq] token ids and an all-ones attention mask."""
    axes = {0: "batch", 1: "sequence"}
    return Export(
        net,
        inputs={
            "input_ids": torch.randint(0, vocab, (batch, seq)),
            "attention_mask": torch.ones(batch, seq, dtype=torch.long),
        },
        outputs=["last_hidden_state", "pooler_output"],
        dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes,
                      "pooler_output": {0: "batch"}},
        ranges={"input_ids": (0, vocab - 1)},
        values={"attention_mask": 1},
    )


@model("bert_encoder")
def bert_encoder():
    return bert_export(BertEncoder(vocab=8000), 8000)


@model("bert_medium")
def bert_medium():
    # The end-to-end benchmark's size (bench/graft_load --cli): hidden 512, 6 layers, 8 heads,
    # 94 MB of weights, the size of a distilled BERT.
    return bert_export(BertEncoder(vocab=8000, hidden=512, layers=6, heads=8, intermediate=2048),
                       8000)


# --- GPT-2-style decoder: pre-LayerNorm, tanh GELU, KV cache, LM head tied to the embedding ---


class Conv1D(nn.Module):
    """GPT-2's projection: a [in, out] weight applied with addmm to the flattened input.

    It exports as Reshape -> Gemm -> Reshape, with shapes taken from the input at run time.
    """

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_in, n_out) * 0.02)
        self.bias = nn.Parameter(torch.randn(n_out) * 0.02)

    def forward(self, x):
        out_shape = x.size()[:-1] + (self.weight.size(-1),)
        x = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        return x.view(out_shape)


class GPT2Attention(nn.Module):
    def __init__(self, hidden, heads, max_positions):
        super().__init__()
        self.hidden = hidden
        self.heads = heads
        self.head_dim = hidden // heads
        self.c_attn = Conv1D(hidden, 3 * hidden)
        self.c_proj = Conv1D(hidden, hidden)
        self.dropout = nn.Dropout(0.1)
        # Lower-triangular causal mask, sliced to [queries, keys] at run time.
        causal = torch.tril(torch.ones(max_positions, max_positions, dtype=torch.bool))
        self.register_buffer("bias", causal[None, None], persistent=False)

    def split_heads(self, x):
        x = x.view(x.size()[:-1] + (self.heads, self.head_dim))
        return x.permute(0, 2, 1, 3)

    def forward(self, x, past_key, past_value, mask):
        q, k, v = self.c_attn(x).split(self.hidden, dim=2)
        q = self.split_heads(q)
        k = torch.cat((past_key, self.split_heads(k)), dim=-2)
        v = torch.cat((past_value, self.split_heads(v)), dim=-2)

        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype)
        q_len, k_len = q.size(-2), k.size(-2)
        causal = self.bias[:, :, k_len - q_len:k_len, :k_len]
        w = torch.where(causal, w, torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype))
        w = self.dropout(F.softmax(w + mask, dim=-1))

        out = torch.matmul(w, v).permute(0, 2, 1, 3).contiguous()
        out = out.view(out.size()[:-2] + (self.hidden,))
        return self.dropout(self.c_proj(out)), k, v


class GPT2Block(nn.Module):
    def __init__(self, hidden, heads, max_positions):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.attn = GPT2Attention(hidden, heads, max_positions)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.mlp = nn.Sequential(
            Conv1D(hidden, 4 * hidden), nn.GELU(approximate="tanh"),
            Conv1D(4 * hidden, hidden), nn.Dropout(0.1))

    def forward(self, x, past_key, past_value, mask):
        # Pre-LayerNorm: normalize the input of each sublayer, add the residual unnormalized.
        a, key, value = self.attn(self.ln_1(x), past_key, past_value, mask)
        x = x + a
        return x + self.mlp(self.ln_2(x)), key, value


class GPT2Decoder(nn.Module):
    def __init__(self, vocab=50257, hidden=256, layers=2, heads=4, max_positions=1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(max_positions, hidden)
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.01)
        self.drop = nn.Dropout(0.1)
        self.blocks = nn.ModuleList(GPT2Block(hidden, heads, max_positions) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, input_ids, attention_mask, past_key_values):
        # attention_mask covers past and new tokens: [batch, past_len + seq].
        past_len = past_key_values[0][0].size(-2)
        positions = torch.arange(past_len, past_len + input_ids.size(-1), dtype=torch.long)
        x = self.drop(self.wte(input_ids) + self.wpe(positions[None]))
        mask = additive_mask(attention_mask)
        presents = []
        for block, (past_key, past_value) in zip(self.blocks, past_key_values):
            x, key, value = block(x, past_key, past_value, mask)
            presents.append((key, value))
        # The LM head reuses the input embedding (tied weights).
        logits = self.ln_f(x) @ self.wte.weight.T
        return logits, tuple(presents)


@model("gpt2_decoder")
def gpt2_decoder():
    vocab, hidden, heads, layers = 50257, 256, 4, 2
    batch, seq, past_len = 2, 8, 8
    net = GPT2Decoder(vocab=vocab, hidden=hidden, layers=layers, heads=heads)
    inputs = {
        "input_ids": torch.randint(0, vocab, (batch, seq)),
        "attention_mask": torch.ones(batch, past_len + seq, dtype=torch.long),
    }
    past = []
    for i in range(layers):
        kv = tuple(torch.randn(batch, heads, past_len, hidden // heads) for _ in range(2))
        inputs[f"past_key_values.{i}.key"], inputs[f"past_key_values.{i}.value"] = kv
        past.append(kv)
    outputs = ["logits"] + [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]

    axes = {"input_ids": {0: "batch", 1: "sequence"},
            "attention_mask": {0: "batch", 1: "total_sequence"},
            "logits": {0: "batch", 1: "sequence"}}
    for name in inputs:
        if name.startswith("past_key_values."):
            axes[name] = {0: "batch", 2: "past_sequence"}
    for name in outputs[1:]:
        axes[name] = {0: "batch", 2: "total_sequence"}
    return Export(
        net,
        inputs=inputs,
        args=(inputs["input_ids"], inputs["attention_mask"], tuple(past)),
        outputs=outputs,
        dynamic_axes=axes,
        ranges={"input_ids": (0, vocab - 1)},
        values={"attention_mask": 1},
        post=retie_lm_head,
    )


def retie_lm_head(proto):
    """Makes the LM head read the embedding matrix through a Transpose, as tied weights are.

    torch.onnx.export stores wte.weight.T as a second initializer (the weights are untied in the
    file); exporters that keep the tie (and hand-written graphs) compute MatMul(x, Transpose(wte))
    on the one [vocab, hidden] matrix the token Gather also reads.
    """
    from onnx import helper, numpy_helper

    inits = {t.name: t for t in proto.graph.initializer}
    gathers = [n for n in proto.graph.node if n.op_type == "Gather" and n.input[0] in inits]
    wte = max((inits[n.input[0]] for n in gathers), key=lambda t: t.dims[0])
    table = numpy_helper.to_array(wte)
    for i, node in enumerate(proto.graph.node):
        b = inits.get(node.input[1]) if node.op_type == "MatMul" else None
        if b is None or list(b.dims) != list(reversed(wte.dims)):
            continue
        if not (numpy_helper.to_array(b) == table.T).all():
            continue
        transposed = node.input[1] + "_tied"
        proto.graph.node.insert(i, helper.make_node("Transpose", [wte.name], [transposed],
                                                    name=transposed, perm=[1, 0]))
        node.input[1] = transposed
        proto.graph.initializer.remove(b)
        return
    raise RuntimeError("no LM head reading the transposed embedding")


# --- LLaMA-style decoder layers: RMSNorm, rotary position embedding, SiLU-gated MLP ---


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        # Normalizes in float32 whatever the input type (a no-op cast pair for float32 models).
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class RotaryEmbedding(nn.Module):
    """cos and sin tables for every position, precomputed and gathered by position id."""

    def __init__(self, dim, max_positions=2048, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / base ** (torch.arange(0, dim, 2).float() / dim)
        angles = torch.outer(torch.arange(max_positions).float(), inv_freq)
        angles = torch.cat((angles, angles), dim=-1)  # [max_positions, dim]
        self.register_buffer("cos_cached", angles.cos(), persistent=False)
        self.register_buffer("sin_cached", angles.sin(), persistent=False)

    def forward(self, position_ids):
        # [batch, seq] -> two [batch, 1, seq, dim] tables, broadcast over heads.
        return self.cos_cached[position_ids][:, None], self.sin_cached[position_ids][:, None]


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.hidden = hidden
        self.heads = heads
        self.head_dim = hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.rotary = RotaryEmbedding(self.head_dim)

    def forward(self, x, position_ids, mask):
        batch, seq, _ = x.size()
        q, k, v = (proj(x).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        cos, sin = self.rotary(position_ids)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin

        w = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim) + mask
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(w, v).transpose(1, 2).reshape(batch, seq, self.hidden)
        return self.o_proj(out)


class LlamaMLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = LlamaAttention(hidden, heads)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.mlp = LlamaMLP(hidden, intermediate)

    def forward(self, x, position_ids, mask):
        x = x + self.self_attn(self.input_layernorm(x), position_ids, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


def causal_mask(seq, dtype=torch.float32):
    """[1, 1, seq, seq]: 0 on and below the diagonal, the dtype's minimum above it."""
    mask = torch.full((seq, seq), torch.finfo(dtype).min)
    idx = torch.arange(seq)
    mask = mask.masked_fill(idx < (idx + 1).view(seq, 1), 0)
    return mask.to(dtype)[None, None]


class LlamaBlocks(nn.Module):
    def __init__(self, hidden=256, heads=4, intermediate=688, layers=2):
        super().__init__()
        self.layers = nn.ModuleList(LlamaLayer(hidden, heads, intermediate) for _ in range(layers))
        self.norm = RMSNorm(hidden)

    def forward(self, hidden_states, position_ids):
        mask = causal_mask(hidden_states.size(1), hidden_states.dtype)
        for layer in self.layers:
            hidden_states = layer(hidden_states, position_ids, mask)
        return self.norm(hidden_states)


@model("llama_block")
def llama_block():
    batch, seq, hidden = 2, 16, 256
    axes = {0: "batch", 1: "sequence"}
    return Export(
        LlamaBlocks(hidden=hidden),
        inputs={
            "hidden_states": torch.randn(batch, seq, hidden),
            "position_ids": torch.arange(seq).expand(batch, seq),
        },
        outputs=["last_hidden_state"],
        dynamic_axes={"hidden_states": axes, "position_ids": axes, "last_hidden_state": axes},
        ranges={"position_ids": (0, seq - 1)},
    )


# --- Whisper-style audio encoder: convolution stem, pre-LayerNorm blocks, scaled queries ---


class WhisperAttention(nn.Module):
    """Self-attention as Whisper's encoder writes it: the query projection scaled by
    head_dim^-0.5 right after it, a key projection without bias, heads split with view/transpose
    on the input's size."""

    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, hidden)

    def split_heads(self, x, batch, seq):
        return x.view(batch, seq, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x):
        batch, seq, hidden = x.size()
        q = self.split_heads(self.q_proj(x) * self.scaling, batch, seq)
        k = self.split_heads(self.k_proj(x), batch, seq)
        v = self.split_heads(self.v_proj(x), batch, seq)
        w = F.softmax(torch.matmul(q, k.transpose(2, 3)), dim=-1)
        out = torch.matmul(w, v).transpose(1, 2).reshape(batch, seq, hidden)
        return self.out_proj(out)


class WhisperLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.self_attn_layer_norm = nn.LayerNorm(hidden)
        self.self_attn = WhisperAttention(hidden, heads)
        self.final_layer_norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, intermediate)
        self.fc2 = nn.Linear(intermediate, hidden)

    def forward(self, x):
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class WhisperEncoder(nn.Module):
    """Log-mel frames [batch, mels, frames] -> [batch, frames / 2, hidden]."""

    def __init__(self, mels=80, hidden=256, heads=4, layers=4, intermediate=1024,
                 max_positions=1500):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, hidden, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(hidden, hidden, kernel_size=3, stride=2, padding=1)
        # Sinusoidal positions, sliced to the input's length.
        position = torch.arange(max_positions).float()[:, None]
        inv = torch.exp(-math.log(10000.0) * torch.arange(hidden // 2).float() / (hidden // 2 - 1))
        table = torch.cat((torch.sin(position * inv), torch.cos(position * inv)), dim=1)
        self.register_buffer("embed_positions", table, persistent=False)
        self.layers = nn.ModuleList(WhisperLayer(hidden, heads, intermediate)
                                    for _ in range(layers))
        self.layer_norm = nn.LayerNorm(hidden)

    def forward(self, features):
        x = F.gelu(self.conv1(features))
        x = F.gelu(self.conv2(x)).permute(0, 2, 1)
        x = x + self.embed_positions[: x.size(1)]
        for layer in self.layers:
            x = layer(x)
        return self.layer_norm(x)


@model("whisper_encoder")
def whisper_encoder():
    # 3 s of audio at Whisper's 100 frames per second: 300 frames, 150 positions after the stem.
    batch, mels, frames = 1, 80, 300
    return Export(
        perturb_norms(WhisperEncoder(mels=mels)),
        inputs={"input_features": torch.randn(batch, mels, frames)},
        outputs=["last_hidden_state"],
        dynamic_axes={"input_features": {0: "batch", 2: "frames"},
                      "last_hidden_state": {0: "batch", 1: "positions"}},
    )


# --- torchvision models ---


def classifier(name):
    """A torchvision ImageNet classifier with random weights and a dynamic batch."""

    def make():
        net = getattr(torchvision.models, name)(weights=None)
        return Export(
            net,
            inputs={"input": torch.randn(1, 3, 224, 224)},
            outputs=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        )

    return make


for _name in ("mobilenet_v3_small", "efficientnet_b0", "resnet18", "convnext_tiny"):
    model(_name)(classifier(_name))


@model("ssdlite320_mobilenet_v3_large")
def ssdlite320_mobilenet_v3_large():
    # The detector takes a list of images and returns one dict of boxes, scores and labels per
    # image; export flattens both. Preprocessing and postprocessing (NMS) are in the graph.
    net = torchvision.models.detection.ssdlite320_mobilenet_v3_large(
        weights=None, weights_backbone=None)
    image = torch.rand(3, 320, 320)
    return Export(
        net,
        inputs={"image": image},
        args=([image],),
        outputs=["boxes", "scores", "labels"],
        ranges={"image": (0, 1)},
    )


class FlowUpdates(nn.Module):
    """An optical-flow network called with a fixed number of refinement steps, since export
    traces the Python loop: returns the upsampled flow after each step."""

    def __init__(self, net, updates):
        super().__init__()
        self.net = net
        self.updates = updates

    def forward(self, image1, image2):
        return self.net(image1, image2, num_flow_updates=self.updates)


@model("raft_small")
def raft_small():
    # RAFT's coordinate arithmetic: a pixel grid built in the graph, shifted by the flow,
    # normalized to [-1, 1] and sampled with GridSample (opset 16 and later) from a pyramid of
    # correlation volumes. The first step starts from the constant grid, so its sampling
    # coordinates (and the flow encoder's input, zero) are constant subexpressions.
    updates = 2
    net = torchvision.models.optical_flow.raft_small(weights=None)
    images = {name: torch.rand(1, 3, 128, 128) * 2 - 1 for name in ("image1", "image2")}
    return Export(
        FlowUpdates(net, updates),
        inputs=images,
        outputs=[f"flow_{i + 1}" for i in range(updates)],
    )


# --- A decoding loop as TorchScript exports it ---


class GreedyDecoder(nn.Module):
    """Greedy decoding up to `max_length` steps (an input, as decoders are exported), written
    naively: the cross-attention's keys and values of the encoder's memory are projected inside
    the loop, every step. Scripted (torch.jit.script), so the loop is exported as an ONNX Loop
    whose trip count is the input."""

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.k = nn.Linear(hidden, hidden)
        self.v = nn.Linear(hidden, hidden)
        self.q = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, vocab)
        self.scale = 1.0 / math.sqrt(hidden)

    def forward(self, memory: torch.Tensor, start: torch.Tensor, max_length: torch.Tensor):
        token = start
        tokens = start
        for _ in range(int(max_length)):
            keys = self.k(memory)  # the same every step
            values = self.v(memory)
            q = self.q(self.embed(token))
            att = torch.softmax(torch.matmul(q, keys.transpose(1, 2)) * self.scale, dim=-1)
            token = torch.argmax(self.out(torch.matmul(att, values)), dim=-1)
            tokens = torch.cat([tokens, token], dim=1)
        return tokens


class ScoringGreedyDecoder(GreedyDecoder):
    """GreedyDecoder that also keeps a running score and a step count, as generation loops keep
    them for length penalties and stopping rules, but returns only the tokens: the export
    carries both through the Loop (TorchScript does not drop them), computed every step for no
    output."""

    def forward(self, memory: torch.Tensor, start: torch.Tensor, max_length: torch.Tensor):
        token = start
        tokens = start
        score = torch.zeros(1)
        steps = torch.zeros(1, dtype=torch.long)
        for _ in range(int(max_length)):
            keys = self.k(memory)
            values = self.v(memory)
            q = self.q(self.embed(token))
            att = torch.softmax(torch.matmul(q, keys.transpose(1, 2)) * self.scale, dim=-1)
            logits = self.out(torch.matmul(att, values))
            score = score + torch.log_softmax(logits, dim=-1).max()
            steps = steps + 1
            token = torch.argmax(logits, dim=-1)
            tokens = torch.cat([tokens, token], dim=1)
        return tokens


def greedy_loop_export(vocab=64, hidden=32, frames=10, steps=8, scored=False):
    net = torch.jit.script((ScoringGreedyDecoder if scored else GreedyDecoder)(vocab, hidden).eval())
    return Export(net, inputs={"memory": torch.randn(1, frames, hidden),
                               "start": torch.zeros(1, 1, dtype=torch.long),
                               "max_length": torch.tensor(steps)},
                  outputs=["tokens"],
                  dynamic_axes={"memory": {0: "batch", 1: "frames"}, "start": {0: "batch"},
                                "tokens": {0: "batch", 1: "length"}},
                  ranges={"start": (0, vocab)}, values={"max_length": steps})


@model("greedy_decoder_loop")
def greedy_decoder_loop():
    # Whisper-base-sized cross-attention (hidden 512 over 1500 encoder frames at serving size),
    # 64 steps: the projections optimize_loops moves out of the Loop dominate each step.
    ex = greedy_loop_export(vocab=1000, hidden=512, frames=16, steps=64)
    ex.shapes = {"memory": [1, 1500, 512]}
    return ex


@model("scored_decoder_loop")
def scored_decoder_loop():
    # The same loop also carrying a score and a step count that nothing returns
    # (optimize_loops' drop_unread_values).
    ex = greedy_loop_export(vocab=1000, hidden=512, frames=16, steps=64, scored=True)
    ex.shapes = {"memory": [1, 1500, 512]}
    return ex


# --- Hugging Face-style LLaMA decoder with a KV cache and a sliced rotary cache ---


class HFLlamaRotaryEmbedding(nn.Module):
    """As transformers' LlamaRotaryEmbedding (4.3x) writes it: cos/sin caches for
    max_position_embeddings positions, sliced to the total length `cos[:seq_len]` (past plus
    new tokens, taken from the inputs' shapes), later gathered by position_ids. The
    `seq_len > max_seq_len_cached` test is Python on a traced int, so the export has no If."""

    def __init__(self, dim, max_position_embeddings=2048, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._set_cos_sin_cache(max_position_embeddings)

    def _set_cos_sin_cache(self, seq_len):
        self.max_seq_len_cached = seq_len
        t = torch.arange(seq_len, dtype=self.inv_freq.dtype)
        freqs = torch.einsum("i,j->ij", t, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos(), persistent=False)
        self.register_buffer("sin_cached", emb.sin(), persistent=False)

    def forward(self, x, seq_len):
        if seq_len > self.max_seq_len_cached:
            self._set_cos_sin_cache(seq_len)
        return self.cos_cached[:seq_len].to(x.dtype), self.sin_cached[:seq_len].to(x.dtype)


def apply_rotary_pos_emb(q, k, cos, sin, position_ids):
    cos = cos[position_ids].unsqueeze(1)  # [batch, 1, seq, dim]: Gather by position id
    sin = sin[position_ids].unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def repeat_kv(x, n_rep):
    """transformers' repeat_kv: [batch, kv_heads, seq, dim] -> [batch, kv_heads * n_rep, seq, dim]
    by Expand and Reshape, each key/value head shared by n_rep query heads (grouped-query
    attention)."""
    if n_rep == 1:
        return x
    batch, kv_heads, seq, dim = x.shape
    x = x[:, :, None, :, :].expand(batch, kv_heads, n_rep, seq, dim)
    return x.reshape(batch, kv_heads * n_rep, seq, dim)


class HFLlamaAttention(nn.Module):
    def __init__(self, hidden, heads, max_positions, kv_heads=None):
        super().__init__()
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads
        self.kv_heads = kv_heads or heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.rotary_emb = HFLlamaRotaryEmbedding(self.head_dim, max_positions)

    def forward(self, x, mask, position_ids, past_key, past_value):
        bsz, q_len, _ = x.size()
        q = self.q_proj(x).view(bsz, q_len, self.heads, self.head_dim).transpose(1, 2)
        k, v = (p(x).view(bsz, q_len, self.kv_heads, self.head_dim).transpose(1, 2)
                for p in (self.k_proj, self.v_proj))
        kv_seq_len = k.shape[-2] + past_key.shape[-2]
        cos, sin = self.rotary_emb(v, seq_len=kv_seq_len)
        q, k = apply_rotary_pos_emb(q, k, cos, sin, position_ids)
        k = torch.cat([past_key, k], dim=2)  # the cache keeps kv_heads heads
        v = torch.cat([past_value, v], dim=2)
        n_rep = self.heads // self.kv_heads
        w = torch.matmul(q, repeat_kv(k, n_rep).transpose(2, 3)) / math.sqrt(self.head_dim) + mask
        w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(w, repeat_kv(v, n_rep)).transpose(1, 2).reshape(bsz, q_len, self.hidden)
        return self.o_proj(out), k, v


class HFLlamaLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate, max_positions, kv_heads=None):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = HFLlamaAttention(hidden, heads, max_positions, kv_heads)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.mlp = LlamaMLP(hidden, intermediate)

    def forward(self, x, mask, position_ids, past_key, past_value):
        a, k, v = self.self_attn(self.input_layernorm(x), mask, position_ids, past_key, past_value)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), k, v


def hf_decoder_mask(attention_mask, q_len, past_len, dtype=torch.float32):
    """transformers' _make_causal_mask + _expand_mask: [batch, 1, q_len, past_len + q_len]."""
    bsz = attention_mask.size(0)
    min_value = torch.finfo(dtype).min
    mask = torch.full((q_len, q_len), min_value)
    cond = torch.arange(mask.size(-1))
    mask = mask.masked_fill(cond < (cond + 1).view(mask.size(-1), 1), 0).to(dtype)
    mask = torch.cat([torch.zeros(q_len, past_len, dtype=dtype), mask], dim=-1)
    causal = mask[None, None].expand(bsz, 1, q_len, q_len + past_len)
    expanded = attention_mask[:, None, None, :].expand(bsz, 1, q_len, q_len + past_len).to(dtype)
    inverted = 1.0 - expanded
    padding = inverted.masked_fill(inverted.to(torch.bool), min_value)
    return causal + padding


class HFLlamaDecoder(nn.Module):
    def __init__(self, vocab=32000, hidden=256, heads=4, intermediate=688, layers=2,
                 max_positions=2048, kv_heads=None):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(
            HFLlamaLayer(hidden, heads, intermediate, max_positions, kv_heads)
            for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, input_ids, attention_mask, position_ids, past_key_values):
        past_len = past_key_values[0][0].shape[2]
        x = self.embed_tokens(input_ids)
        mask = hf_decoder_mask(attention_mask, input_ids.shape[1], past_len, x.dtype)
        presents = []
        for layer, (pk, pv) in zip(self.layers, past_key_values):
            x, k, v = layer(x, mask, position_ids, pk, pv)
            presents.append((k, v))
        return self.lm_head(self.norm(x)), tuple(presents)


def kv_cache_inputs(layers, batch, heads, past, head_dim, prefix="past_key_values", kinds=None):
    """past_key_values.N.{key,value} tensors (Optimum's names) and the nested tuple to call with."""
    inputs, nested = {}, []
    for i in range(layers):
        kv = tuple(torch.randn(batch, heads, past, head_dim) for _ in range(2))
        inputs[f"{prefix}.{i}.key"], inputs[f"{prefix}.{i}.value"] = kv
        nested.append(kv)
    return inputs, nested


@model("llama_decoder_hf")
def llama_decoder_hf():
    vocab, hidden, heads, layers = 32000, 256, 4, 2
    batch, seq, past = 2, 4, 8
    net = HFLlamaDecoder(vocab=vocab, hidden=hidden, heads=heads, layers=layers)
    inputs = {
        "input_ids": torch.randint(0, vocab, (batch, seq)),
        "attention_mask": torch.ones(batch, past + seq, dtype=torch.long),
        "position_ids": torch.arange(past, past + seq).expand(batch, seq),
    }
    cache, nested = kv_cache_inputs(layers, batch, heads, past, hidden // heads)
    inputs.update(cache)
    outputs = ["logits"] + [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    axes = {"input_ids": {0: "batch_size", 1: "sequence_length"},
            "attention_mask": {0: "batch_size", 1: "past_sequence_length + 1"},
            "position_ids": {0: "batch_size", 1: "sequence_length"},
            "logits": {0: "batch_size", 1: "sequence_length"}}
    for name in cache:
        axes[name] = {0: "batch_size", 2: "past_sequence_length"}
    for name in outputs[1:]:
        axes[name] = {0: "batch_size", 2: "past_sequence_length + 1"}
    # Serving: one new token after 256 cached ones, at position 256.
    serve_past = 256
    shapes = {"input_ids": [1, 1], "attention_mask": [1, serve_past + 1], "position_ids": [1, 1]}
    shapes.update({name: [1, heads, serve_past, hidden // heads] for name in cache})
    return Export(
        net, inputs=inputs,
        args=(inputs["input_ids"], inputs["attention_mask"], inputs["position_ids"], tuple(nested)),
        outputs=outputs, dynamic_axes=axes, shapes=shapes,
        ranges={"input_ids": (0, vocab - 1), "position_ids": (serve_past, serve_past)},
        values={"attention_mask": 1},
    )


# --- Whisper-style decoder: self-attention KV cache, cross-attention on the encoder's output ---


class WhisperDecoderAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.scaling = self.head_dim ** -0.5
        self.q_proj = nn.Linear(hidden, hidden)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden)
        self.out_proj = nn.Linear(hidden, hidden)

    def shape(self, x, bsz):
        return x.view(bsz, -1, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, kv_source, past=None, mask=None):
        bsz, tgt, hidden = x.size()
        q = self.shape(self.q_proj(x) * self.scaling, bsz)
        k = self.shape(self.k_proj(kv_source), bsz)
        v = self.shape(self.v_proj(kv_source), bsz)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        w = torch.matmul(q, k.transpose(2, 3))
        if mask is not None:
            w = w + mask
        out = torch.matmul(F.softmax(w, dim=-1), v).transpose(1, 2).reshape(bsz, tgt, hidden)
        return self.out_proj(out), k, v


class WhisperDecoderLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.self_attn_layer_norm = nn.LayerNorm(hidden)
        self.self_attn = WhisperDecoderAttention(hidden, heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(hidden)
        self.encoder_attn = WhisperDecoderAttention(hidden, heads)
        self.final_layer_norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, intermediate)
        self.fc2 = nn.Linear(intermediate, hidden)

    def forward(self, x, encoder_hidden_states, past, mask):
        h = self.self_attn_layer_norm(x)
        a, k, v = self.self_attn(h, h, past, mask)
        x = x + a
        h = self.encoder_attn_layer_norm(x)
        x = x + self.encoder_attn(h, encoder_hidden_states)[0]
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x)))), k, v


class WhisperDecoder(nn.Module):
    def __init__(self, vocab=51865, hidden=256, heads=4, layers=2, intermediate=1024,
                 max_target_positions=448):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.embed_positions = nn.Embedding(max_target_positions, hidden)
        self.layers = nn.ModuleList(WhisperDecoderLayer(hidden, heads, intermediate)
                                    for _ in range(layers))
        self.layer_norm = nn.LayerNorm(hidden)

    def embed(self, input_ids, past_len):
        """The tokens' embeddings with their positions, and the causal mask over past + new."""
        seq = input_ids.shape[1]
        # Learned positions sliced at the past length, as Whisper's embed_positions does.
        positions = self.embed_positions.weight[past_len:past_len + seq]
        x = self.embed_tokens(input_ids) + positions
        mask = torch.full((seq, seq), torch.finfo(x.dtype).min).triu(1)
        mask = torch.cat([torch.zeros(seq, past_len), mask], dim=-1)[None, None]
        return x, mask

    def forward(self, input_ids, encoder_hidden_states, past_key_values):
        x, mask = self.embed(input_ids, past_key_values[0][0].shape[2])
        presents = []
        for layer, past in zip(self.layers, past_key_values):
            x, k, v = layer(x, encoder_hidden_states, past, mask)
            presents.append((k, v))
        logits = self.layer_norm(x) @ self.embed_tokens.weight.T
        return logits, tuple(presents)


@model("whisper_decoder")
def whisper_decoder():
    vocab, hidden, heads, layers = 51865, 256, 4, 2
    batch, seq, past, frames = 2, 4, 8, 150
    inputs = {"input_ids": torch.randint(0, vocab, (batch, seq)),
              "encoder_hidden_states": torch.randn(batch, frames, hidden)}
    cache, nested = kv_cache_inputs(layers, batch, heads, past, hidden // heads,
                                    prefix="past_key_values")
    cache = {k.replace(".key", ".decoder.key").replace(".value", ".decoder.value"): v
             for k, v in cache.items()}
    inputs.update(cache)
    outputs = ["logits"] + [f"present.{i}.decoder.{kv}" for i in range(layers)
                            for kv in ("key", "value")]
    axes = {"input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
            "encoder_hidden_states": {0: "batch_size", 1: "encoder_sequence_length / 2"},
            "logits": {0: "batch_size", 1: "decoder_sequence_length"}}
    for name in cache:
        axes[name] = {0: "batch_size", 2: "past_decoder_sequence_length"}
    for name in outputs[1:]:
        axes[name] = {0: "batch_size", 2: "past_decoder_sequence_length + 1"}
    # Serving: one token after 256, cross-attending 30 s of audio (1500 encoder positions).
    serve_past = 256
    shapes = {"input_ids": [1, 1], "encoder_hidden_states": [1, 1500, hidden]}
    shapes.update({name: [1, heads, serve_past, hidden // heads] for name in cache})
    return Export(
        WhisperDecoder(vocab=vocab, hidden=hidden, heads=heads, layers=layers),
        inputs=inputs, args=(inputs["input_ids"], inputs["encoder_hidden_states"], tuple(nested)),
        outputs=outputs, dynamic_axes=axes, shapes=shapes, ranges={"input_ids": (0, vocab - 1)},
        post=retie_lm_head,  # the LM head is the token embedding, as in Whisper
    )


# --- audio front-ends on raw waveforms ---


def mel_filters(sample_rate=16000, n_fft=400, n_mels=80):
    """Slaney's triangular mel filterbank [n_fft // 2 + 1, n_mels], area-normalized, as
    librosa.filters.mel (and Whisper's mel_filters.npz) builds it."""

    def hz_to_mel(f):
        f = torch.as_tensor(f, dtype=torch.float64)
        linear = 3.0 * f / 200.0
        log = 15.0 + torch.log(torch.clamp(f, min=1e-10) / 1000.0) / (math.log(6.4) / 27.0)
        return torch.where(f >= 1000.0, log, linear)

    def mel_to_hz(m):
        linear = 200.0 * m / 3.0
        log = 1000.0 * torch.exp((math.log(6.4) / 27.0) * (m - 15.0))
        return torch.where(m >= 15.0, log, linear)

    freqs = torch.linspace(0, sample_rate / 2, n_fft // 2 + 1, dtype=torch.float64)
    mels = torch.linspace(float(hz_to_mel(0.0)), float(hz_to_mel(sample_rate / 2)), n_mels + 2,
                          dtype=torch.float64)
    edges = mel_to_hz(mels)
    lower = (freqs[:, None] - edges[None, :-2]) / (edges[1:-1] - edges[:-2])[None]
    upper = (edges[None, 2:] - freqs[:, None]) / (edges[2:] - edges[1:-1])[None]
    weights = torch.clamp(torch.minimum(lower, upper), min=0.0)
    weights *= (2.0 / (edges[2:] - edges[:-2]))[None]
    return weights.float()


class LogMel(nn.Module):
    """Whisper's log-mel spectrogram: centered STFT (reflect padding, Hann window 400, hop 160),
    power, mel filterbank, log10 clamped to 8 decades below the maximum, scaled.

    torch 1.13 cannot export aten::stft (at any opset), so the STFT is written as exporters'
    users write it then: reflect Pad, then a Conv1d with stride hop whose 2 x 201 filters are
    the windowed cosines and sines of the DFT (the framing and the DFT in one convolution)."""

    def __init__(self, n_fft=400, hop=160, n_mels=80):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        window = torch.hann_window(n_fft, dtype=torch.float64)
        n = torch.arange(n_fft, dtype=torch.float64)
        k = torch.arange(n_fft // 2 + 1, dtype=torch.float64)[:, None]
        angle = 2 * math.pi * k * n / n_fft
        basis = torch.cat((torch.cos(angle), -torch.sin(angle))) * window  # [2 * 201, 400]
        self.register_buffer("dft", basis.float()[:, None], persistent=False)
        self.register_buffer("filters", mel_filters(n_fft=n_fft, n_mels=n_mels), persistent=False)

    def forward(self, waveform):
        x = F.pad(waveform[:, None], (self.n_fft // 2, self.n_fft // 2), mode="reflect")
        spec = F.conv1d(x, self.dft, stride=self.hop)  # [batch, 2 * 201, frames]
        real, imag = spec.split(self.n_fft // 2 + 1, dim=1)
        power = (real * real + imag * imag)[..., :-1]
        mel = torch.matmul(power.transpose(1, 2), self.filters).transpose(1, 2)
        log_spec = torch.clamp(mel, min=1e-10).log10()
        log_spec = torch.maximum(log_spec, log_spec.amax(dim=(1, 2), keepdim=True) - 8.0)
        return (log_spec + 4.0) / 4.0


@model("mel_frontend")
def mel_frontend():
    return Export(
        LogMel(), inputs={"waveform": torch.randn(1, 16000) * 0.1},
        outputs=["log_mel"],
        dynamic_axes={"waveform": {0: "batch", 1: "samples"},
                      "log_mel": {0: "batch", 2: "frames"}},
        ranges={"waveform": (-0.5, 0.5)},
    )


class Wav2Vec2FeatureExtractor(nn.Module):
    """wav2vec2-base's conv stem: 7 Conv1d (kernels 10,3,3,3,3,2,2, strides 5,2,2,2,2,2,2;
    receptive field 400 samples, stride 320), GroupNorm after the first, GELU."""

    def __init__(self, channels=256):
        super().__init__()
        kernels, strides = (10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2)
        self.convs = nn.ModuleList(
            nn.Conv1d(1 if i == 0 else channels, channels, k, stride=s, bias=False)
            for i, (k, s) in enumerate(zip(kernels, strides)))
        self.norm = nn.GroupNorm(channels, channels)

    def forward(self, x):
        x = x[:, None]
        for i, conv in enumerate(self.convs):
            x = conv(x)
            if i == 0:
                x = self.norm(x)
            x = F.gelu(x)
        return x


class Wav2Vec2Encoder(nn.Module):
    def __init__(self, channels=256, hidden=256, heads=4, layers=2, intermediate=1024):
        super().__init__()
        self.feature_extractor = Wav2Vec2FeatureExtractor(channels)
        self.feature_norm = nn.LayerNorm(channels)
        self.feature_projection = nn.Linear(channels, hidden)
        # Convolutional relative positions: kernel 128, 16 groups, weight norm folded away.
        self.pos_conv = nn.Conv1d(hidden, hidden, 128, padding=64, groups=16)
        self.layer_norm = nn.LayerNorm(hidden)
        self.layers = nn.ModuleList(BertLayer(hidden, heads, intermediate) for _ in range(layers))

    def forward(self, input_values):
        x = self.feature_extractor(input_values).transpose(1, 2)
        x = self.feature_projection(self.feature_norm(x))
        pos = F.gelu(self.pos_conv(x.transpose(1, 2))[:, :, :-1]).transpose(1, 2)
        x = self.layer_norm(x + pos)
        zeros = torch.zeros(1, 1, 1, 1)
        for layer in self.layers:
            x = layer(x, zeros)
        return x


@model("wav2vec2_encoder")
def wav2vec2_encoder():
    return Export(
        Wav2Vec2Encoder(), inputs={"input_values": torch.randn(1, 16000) * 0.1},
        outputs=["last_hidden_state"],
        dynamic_axes={"input_values": {0: "batch_size", 1: "sequence_length"},
                      "last_hidden_state": {0: "batch_size", 1: "frames"}},
        ranges={"input_values": (-0.5, 0.5)},
    )


# --- Conformer: two inputs sharing the time dim ---


class ConformerConvModule(nn.Module):
    def __init__(self, hidden, kernel=31):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.pointwise1 = nn.Conv1d(hidden, 2 * hidden, 1)
        self.depthwise = nn.Conv1d(hidden, hidden, kernel, padding=kernel // 2, groups=hidden)
        self.batch_norm = nn.BatchNorm1d(hidden)
        self.pointwise2 = nn.Conv1d(hidden, hidden, 1)

    def forward(self, x, keep):
        x = self.norm(x) * keep  # padded frames zeroed before the convolution over time
        x = F.glu(self.pointwise1(x.transpose(1, 2)), dim=1)
        x = self.pointwise2(F.silu(self.batch_norm(self.depthwise(x))))
        return x.transpose(1, 2)


class ConformerBlock(nn.Module):
    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.ffn1 = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, ffn), nn.SiLU(),
                                  nn.Linear(ffn, hidden))
        self.attn_norm = nn.LayerNorm(hidden)
        self.attn = BertSelfAttention(hidden, heads)
        self.attn_out = nn.Linear(hidden, hidden)
        self.conv = ConformerConvModule(hidden)
        self.ffn2 = nn.Sequential(nn.LayerNorm(hidden), nn.Linear(hidden, ffn), nn.SiLU(),
                                  nn.Linear(ffn, hidden))
        self.final_norm = nn.LayerNorm(hidden)

    def forward(self, x, mask, keep):
        x = x + 0.5 * self.ffn1(x)
        x = x + self.attn_out(self.attn(self.attn_norm(x), mask))
        x = x + self.conv(x, keep)
        x = x + 0.5 * self.ffn2(x)
        return self.final_norm(x)


class Conformer(nn.Module):
    """features [batch, time, 80] and a 0/1 frame mask [batch, time] -> [batch, time, hidden]."""

    def __init__(self, n_mels=80, hidden=144, heads=4, ffn=576, layers=2):
        super().__init__()
        self.input_proj = nn.Linear(n_mels, hidden)
        self.blocks = nn.ModuleList(ConformerBlock(hidden, heads, ffn) for _ in range(layers))

    def forward(self, features, frame_mask):
        keep = frame_mask[:, :, None].to(features.dtype)
        mask = additive_mask(frame_mask, features.dtype)
        x = self.input_proj(features)
        for block in self.blocks:
            x = block(x, mask, keep)
        return x


@model("conformer")
def conformer():
    # Dynamic axes in the list form (torch names them itself: features_dynamic_axes_1,
    # frame_mask_dynamic_axes_1), as many export scripts declare them: the model does not say
    # that the two time axes are one.
    batch, time_ = 1, 100
    return Export(
        Conformer(), inputs={"features": torch.randn(batch, time_, 80),
                             "frame_mask": torch.ones(batch, time_, dtype=torch.long)},
        outputs=["encoded"],
        dynamic_axes={"features": [0, 1], "frame_mask": [0, 1], "encoded": [0, 1]},
        values={"frame_mask": 1},
    )


# --- a two-stage torchvision detector with NMS in the graph ---


@model("fasterrcnn_mobilenet_v3_large_320_fpn")
def fasterrcnn_mobilenet_v3_large_320_fpn():
    # With random weights the 91-class softmax scores every box about 1/91, under the default
    # box_score_thresh of 0.05: no detection would come out. 0.005 keeps boxes, as trained
    # weights do.
    net = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, box_score_thresh=0.005)
    image = torch.rand(3, 320, 320)
    return Export(net, inputs={"image": image}, args=([image],),
                  outputs=["boxes", "labels", "scores"], ranges={"image": (0, 1)})


# --- OCR recognizer in the style of Paddle / older PyTorch exports: opset 11 ---


class CRNN(nn.Module):
    """[batch, 3, 32, width] -> CTC class probabilities [batch, width / 4, classes]: a VGG-style
    conv stack (Conv+BatchNorm+ReLU, max pools that shrink height faster than width), a 2-layer
    bidirectional LSTM and a linear CTC head over 6625 classes (PaddleOCR's Chinese charset)."""

    def __init__(self, classes=6625, hidden=96):
        super().__init__()
        cfg = [(3, 32), "pool", (32, 64), "pool", (64, 128), (128, 128), "hpool",
               (128, 192), (192, 192), "hpool", (192, 192)]
        layers = []
        for item in cfg:
            if item == "pool":
                layers.append(nn.MaxPool2d(2, 2))
            elif item == "hpool":
                layers.append(nn.MaxPool2d((2, 1), (2, 1)))
            else:
                layers += [nn.Conv2d(item[0], item[1], 3, padding=1), nn.BatchNorm2d(item[1]),
                           nn.ReLU()]
        self.cnn = nn.Sequential(*layers)
        self.rnn = nn.LSTM(192 * 2, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.head = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        f = self.cnn(x)  # [batch, 192, 2, width / 4]
        b, c, h, w = f.shape
        f = f.reshape(b, c * h, w).permute(0, 2, 1)
        f, _ = self.rnn(f)
        return F.softmax(self.head(f), dim=2)


@model("ocr_rec_opset11")
def ocr_rec_opset11():
    return Export(CRNN(), inputs={"x": torch.randn(1, 3, 32, 320)}, outputs=["softmax"],
                  dynamic_axes={"x": {0: "batch", 3: "width"}, "softmax": {0: "batch", 1: "steps"}},
                  opset=11)


# --- driver ---


def op_counts(graph, counts=None):
    """Node count per op type, over the graph and every subgraph (If branches, Loop bodies)."""
    counts = collections.Counter() if counts is None else counts
    for node in graph.node:
        counts[node.op_type] += 1
        for attr in node.attribute:
            for subgraph in [attr.g] if attr.HasField("g") else attr.graphs:
                op_counts(subgraph, counts)
    return counts


def flatten(value):
    """Tensors of a nested output structure, in the order torch.onnx.export flattens them."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        value = value.values()
    return [t for v in value for t in flatten(v)]


def run_check(path, ex):
    """Runs the model with onnxruntime on the example inputs; returns a description of the
    largest difference from PyTorch's outputs."""
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {i.name: ex.inputs[i.name].numpy() for i in session.get_inputs()}
    got = session.run(None, feeds)
    with torch.no_grad():
        expected = flatten(ex.module(*ex.call_args()))
    worst = 0.0
    for name, a, b in zip(ex.outputs, got, expected):
        b = b.numpy()
        if a.shape != b.shape:
            return f"output {name}: shape {list(a.shape)}, PyTorch {list(b.shape)}"
        if a.size:
            diff = abs(a.astype("float64") - b.astype("float64")) / (1 + abs(b.astype("float64")))
            worst = max(worst, float(diff.max()))
    return f"max relative difference {worst:.1e}"


def build(name, out_dir):
    """Exports one model; returns (its inputs.json entry, a summary row)."""
    torch.manual_seed(SEED)
    start = time.monotonic()
    ex = MODELS[name]()
    ex.module.eval()
    perturb_norms(ex.module)
    path = out_dir / f"{name}.onnx"
    # torch prints a diagnostics summary on stdout; keep it off the output.
    with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(
            ex.module, ex.call_args(), str(path),
            input_names=list(ex.inputs), output_names=ex.outputs,
            dynamic_axes=ex.dynamic_axes or None, opset_version=ex.opset)
    seconds = time.monotonic() - start

    proto = onnx.load(str(path))
    if ex.post is not None:
        ex.post(proto)
        onnx.save(proto, str(path))
    counts = op_counts(proto.graph)
    total, top = sum(counts.values()), len(proto.graph.node)
    control = [op for op in ("If", "Loop", "Scan", "NonMaxSuppression") if counts[op]]
    row = {"name": name, "nodes": total, "top_level": top, "seconds": seconds,
           "mb": path.stat().st_size / 1e6}
    extra = "".join(f", {counts[op]} {op}" for op in control)
    print(f"{name}: {total} nodes ({top} top-level{extra}), {row['mb']:.1f} MB, "
          f"built and exported in {seconds:.1f} s", file=sys.stderr)

    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as e:
        raise RuntimeError(f"onnx.checker rejects {path.name}: {e}") from None
    if onnxruntime is not None:
        # Reported, not fatal: the model is valid ONNX either way. Detectors with random weights
        # score many boxes alike, so their kept boxes may legitimately differ.
        try:
            result = run_check(path, ex)
        except Exception as e:
            result = f"FAILED: {type(e).__name__}: {e}"
        print(f"{name}: onnxruntime: {result}", file=sys.stderr)
    return ex.input_spec(), row


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", type=Path, default=DEFAULT_OUT,
                        help=f"output directory (default: {DEFAULT_OUT})")
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=list(MODELS),
                        help="build only these models: " + ", ".join(MODELS))
    args = parser.parse_args()
    out_dir = args.out_dir.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    # Tracing warns about every Python int taken from a tensor shape, and torch and torchvision
    # about details of their own code; expected, and they would drown the progress lines.
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module=r"torch(vision)?\.")

    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"onnx {onnx.__version__}, opset {OPSET} -> {out_dir}", file=sys.stderr)
    if onnxruntime is None:
        print("onnxruntime is not installed: skipping the runtime check", file=sys.stderr)

    # inputs.json is merged, so that --only keeps the entries of models built earlier.
    spec_path = out_dir / "inputs.json"
    specs = json.loads(spec_path.read_text()) if spec_path.exists() else {}
    rows, failed = [], []
    for name in args.only or MODELS:
        try:
            specs[name], row = build(name, out_dir)
            rows.append(row)
        except Exception as e:  # report and go on with the other models
            failed.append(name)
            specs.pop(name, None)  # no stale or invalid model left behind
            (out_dir / f"{name}.onnx").unlink(missing_ok=True)
            print(f"{name}: FAILED, skipped: {type(e).__name__}: {e}", file=sys.stderr)
    spec_path.write_text(json.dumps(dict(sorted(specs.items())), indent=1) + "\n")

    print(f"\n{'model':32} {'nodes':>6} {'top':>6} {'MB':>6} {'s':>6}", file=sys.stderr)
    for r in rows:
        print(f"{r['name']:32} {r['nodes']:6} {r['top_level']:6} {r['mb']:6.1f} "
              f"{r['seconds']:6.1f}", file=sys.stderr)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed and not rows else 0


if __name__ == "__main__":
    sys.exit(main())
