#!/usr/bin/python3
"""The serving bench's models: transformers at the sizes users serve, generated at bench time.

Usage: /usr/bin/python3 bench/serving_sizes/models.py OUT_DIR [--only NAME ...] [--small]

Written with bench/models/make.py's Hugging Face-style modules (its export driver too:
torch.onnx.export at opset 17 with its default settings, onnx.checker, the runtime check
when onnxruntime is importable), at these sizes:

| name | shape | parameters |
|---|---|---|
| bert_base | BERT-base: 12 post-LN layers, hidden 768, 12 heads, FFN 3072, vocab 30522 | 110M |
| gpt2_124m | GPT-2 small: 12 pre-LN layers, hidden 768, 12 heads, 1024 positions, vocab 50257, LM head tied to the token embedding | 124M |
| llama_gqa | LLaMA-shaped: 8 layers, hidden 1024, 16 query heads sharing 4 key/value heads (grouped-query attention, transformers' repeat_kv), SiLU-gated FFN 2816, vocab 32000, untied head, rotary cache sliced to the total length, Optimum's input names | 155M |
| whisper_base_decoder | Whisper-base's decoder as Optimum exports it with past: 6 layers, hidden 512, 8 heads, self-attention cache and the cross-attention keys/values of 1500 encoder positions as inputs, vocab 51865 tied head | 52M |

--small builds the same graphs at toy sizes (2 layers, hidden 128), for checking the bench
itself in seconds. Weights are random and seeded; nothing is downloaded. The models are not
committed (1.8 GB at full size).

--weights trained-like draws them with the statistics that make trained transformers hard to
quantize, instead of make.py's Gaussians: every projection and embedding from Student's t with
4 degrees of freedom (heavy tails: kurtosis far above the Gaussian's 3), rescaled to the
Gaussian's standard deviation, and the same 0.5% of hidden channels 8x larger in every norm's
weight, so that the residual stream carries outlier features into every projection, as in
trained LLMs (LLM.int8()'s emergent features). A proxy for trained weights, not a substitute.
"""

import argparse
import importlib.util
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("make", HERE.parent / "models" / "make.py")
make = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make)

FULL = {
    "bert_base": dict(vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072),
    "gpt2_124m": dict(vocab=50257, hidden=768, layers=12, heads=12),
    "llama_gqa": dict(vocab=32000, hidden=1024, layers=8, heads=16, kv_heads=4,
                      intermediate=2816),
    "whisper_base_decoder": dict(vocab=51865, hidden=512, layers=6, heads=8, intermediate=2048,
                                 frames=1500),
}
SMALL = {
    "bert_base": dict(vocab=1000, hidden=128, layers=2, heads=2, intermediate=512),
    "gpt2_124m": dict(vocab=2000, hidden=128, layers=2, heads=2),  # more rows than its 1024 positions
    "llama_gqa": dict(vocab=1000, hidden=128, layers=2, heads=4, kv_heads=2, intermediate=352),
    "whisper_base_decoder": dict(vocab=1000, hidden=128, layers=2, heads=2, intermediate=512,
                                 frames=64),
}


OUTLIER_SHARE = 0.005  # of hidden channels, in every norm's weight
OUTLIER_SCALE = 8.0


def trained_like(module, seed=0):
    """Redraws `module`'s weights as --weights trained-like describes (after make.py's
    perturb_norms, which it runs first)."""
    make_perturb(module)
    gen = torch.Generator().manual_seed(seed)
    t = torch.distributions.StudentT(4.0)
    outliers = {}
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.Linear, nn.Embedding, make.Conv1D)):
                w = m.weight
                draw = t.sample(w.shape) / math.sqrt(2.0)  # t(4) has variance 2
                w.copy_(draw * w.std())
            elif isinstance(m, (nn.LayerNorm, make.RMSNorm)) and m.weight is not None:
                n = m.weight.numel()
                if n not in outliers:
                    count = max(2, int(n * OUTLIER_SHARE))
                    outliers[n] = torch.randperm(n, generator=gen)[:count]
                m.weight[outliers[n]] *= OUTLIER_SCALE
    return module


make_perturb = make.perturb_norms


def decoder_axes(inputs, outputs, cache_prefix, past_name, total_name, batch="batch_size",
                 seq="sequence_length"):
    axes = {"input_ids": {0: batch, 1: seq}, "logits": {0: batch, 1: seq}}
    for name in inputs:
        if name.startswith(cache_prefix):
            axes[name] = {0: batch, 2: past_name}
    for name in outputs[1:]:
        axes[name] = {0: batch, 2: total_name}
    return axes


def bert_base(c):
    net = make.BertEncoder(vocab=c["vocab"], hidden=c["hidden"], layers=c["layers"],
                           heads=c["heads"], intermediate=c["intermediate"])
    return make.bert_export(net, c["vocab"], batch=1, seq=16)


def gpt2_124m(c):
    layers, heads, hidden = c["layers"], c["heads"], c["hidden"]
    net = make.GPT2Decoder(vocab=c["vocab"], hidden=hidden, layers=layers, heads=heads)
    batch, seq, past = 1, 4, 8
    inputs = {"input_ids": torch.randint(0, c["vocab"], (batch, seq)),
              "attention_mask": torch.ones(batch, past + seq, dtype=torch.long)}
    cache, nested = make.kv_cache_inputs(layers, batch, heads, past, hidden // heads)
    inputs.update(cache)
    outputs = ["logits"] + [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    axes = decoder_axes(inputs, outputs, "past_key_values.", "past_sequence_length",
                        "past_sequence_length + sequence_length")
    axes["attention_mask"] = {0: "batch_size", 1: "past_sequence_length + sequence_length"}
    return make.Export(net, inputs=inputs, outputs=outputs, dynamic_axes=axes,
                       args=(inputs["input_ids"], inputs["attention_mask"], tuple(nested)),
                       ranges={"input_ids": (0, c["vocab"] - 1)}, values={"attention_mask": 1},
                       post=make.retie_lm_head)


def llama_gqa(c):
    layers, heads, kv_heads, hidden = c["layers"], c["heads"], c["kv_heads"], c["hidden"]
    net = make.HFLlamaDecoder(vocab=c["vocab"], hidden=hidden, heads=heads, layers=layers,
                              intermediate=c["intermediate"], kv_heads=kv_heads)
    batch, seq, past = 1, 4, 8
    inputs = {"input_ids": torch.randint(0, c["vocab"], (batch, seq)),
              "attention_mask": torch.ones(batch, past + seq, dtype=torch.long),
              "position_ids": torch.arange(past, past + seq).expand(batch, seq)}
    cache, nested = make.kv_cache_inputs(layers, batch, kv_heads, past, hidden // heads)
    inputs.update(cache)
    outputs = ["logits"] + [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    axes = decoder_axes(inputs, outputs, "past_key_values.", "past_sequence_length",
                        "past_sequence_length + 1")
    axes["attention_mask"] = {0: "batch_size", 1: "past_sequence_length + 1"}
    axes["position_ids"] = {0: "batch_size", 1: "sequence_length"}
    return make.Export(net, inputs=inputs, outputs=outputs, dynamic_axes=axes,
                       args=(inputs["input_ids"], inputs["attention_mask"],
                             inputs["position_ids"], tuple(nested)),
                       ranges={"input_ids": (0, c["vocab"] - 1)}, values={"attention_mask": 1})


class CrossAttentionWithPast(make.WhisperDecoderAttention):
    """Cross-attention reading the encoder's keys and values from the cache inputs, as
    Optimum's decoder_with_past does: they are computed once per utterance, not per token."""

    def forward(self, x, past):
        bsz, tgt, hidden = x.size()
        q = self.shape(self.q_proj(x) * self.scaling, bsz)
        w = torch.matmul(q, past[0].transpose(2, 3))
        out = torch.matmul(F.softmax(w, dim=-1), past[1]).transpose(1, 2).reshape(bsz, tgt, hidden)
        return self.out_proj(out)


class WhisperDecoderWithPastLayer(make.WhisperDecoderLayer):
    def __init__(self, hidden, heads, intermediate):
        super().__init__(hidden, heads, intermediate)
        self.encoder_attn = CrossAttentionWithPast(hidden, heads)

    def forward(self, x, past, cross, mask):
        h = self.self_attn_layer_norm(x)
        a, k, v = self.self_attn(h, h, past, mask)
        x = x + a
        x = x + self.encoder_attn(self.encoder_attn_layer_norm(x), cross)
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x)))), k, v


class WhisperDecoderWithPast(make.WhisperDecoder):
    def __init__(self, vocab, hidden, heads, layers, intermediate):
        super().__init__(vocab=vocab, hidden=hidden, heads=heads, layers=layers,
                         intermediate=intermediate)
        self.layers = nn.ModuleList(WhisperDecoderWithPastLayer(hidden, heads, intermediate)
                                    for _ in range(layers))

    def forward(self, input_ids, past_key_values):
        x, mask = self.embed(input_ids, past_key_values[0][0].shape[2])
        presents = []
        for layer, (sk, sv, ck, cv) in zip(self.layers, past_key_values):
            x, k, v = layer(x, (sk, sv), (ck, cv), mask)
            presents.append((k, v))
        return self.layer_norm(x) @ self.embed_tokens.weight.T, tuple(presents)


def whisper_base_decoder(c):
    layers, heads, hidden = c["layers"], c["heads"], c["hidden"]
    head_dim = hidden // heads
    batch, seq, past = 1, 1, 8
    inputs, nested = {"input_ids": torch.randint(0, c["vocab"], (batch, seq))}, []
    for i in range(layers):
        layer = []
        for kind, length in (("decoder", past), ("encoder", c["frames"])):
            for kv in ("key", "value"):
                t = torch.randn(batch, heads, length, head_dim)
                inputs[f"past_key_values.{i}.{kind}.{kv}"] = t
                layer.append(t)
        nested.append(tuple(layer))
    outputs = ["logits"] + [f"present.{i}.decoder.{kv}" for i in range(layers)
                            for kv in ("key", "value")]
    axes = {"input_ids": {0: "batch_size", 1: "decoder_sequence_length"},
            "logits": {0: "batch_size", 1: "decoder_sequence_length"}}
    for name in inputs:
        if ".decoder." in name:
            axes[name] = {0: "batch_size", 2: "past_decoder_sequence_length"}
        elif ".encoder." in name:
            axes[name] = {0: "batch_size", 2: "encoder_sequence_length_out"}
    for name in outputs[1:]:
        axes[name] = {0: "batch_size", 2: "past_decoder_sequence_length + 1"}
    net = WhisperDecoderWithPast(c["vocab"], hidden, heads, layers, c["intermediate"])
    return make.Export(net, inputs=inputs, outputs=outputs, dynamic_axes=axes,
                       args=(inputs["input_ids"], tuple(nested)),
                       ranges={"input_ids": (0, c["vocab"] - 1)}, post=make.retie_lm_head)


BUILDERS = {"bert_base": bert_base, "gpt2_124m": gpt2_124m, "llama_gqa": llama_gqa,
            "whisper_base_decoder": whisper_base_decoder}


def config(name, small):
    return (SMALL if small else FULL)[name]


def build(names, out_dir, small, weights="gaussian"):
    """Exports each model to OUT_DIR/NAME.onnx; returns the names that failed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    make.perturb_norms = trained_like if weights == "trained-like" else make_perturb
    make.warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    make.warnings.filterwarnings("ignore", category=UserWarning, module=r"torch(vision)?\.")
    failed = []
    for name in names:
        make.MODELS[name] = lambda n=name: BUILDERS[n](config(n, small))
        try:
            make.build(name, out_dir)
        except Exception as e:  # reported; the bench goes on with the others
            (out_dir / f"{name}.onnx").unlink(missing_ok=True)
            print(f"{name}: FAILED: {type(e).__name__}: {e}", file=sys.stderr)
            failed.append(name)
    return failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--only", nargs="+", choices=list(BUILDERS), default=list(BUILDERS))
    parser.add_argument("--small", action="store_true", help="toy sizes, to check the bench")
    parser.add_argument("--weights", choices=["gaussian", "trained-like"], default="gaussian")
    args = parser.parse_args()
    return 1 if build(args.only, args.out_dir.resolve(), args.small, args.weights) else 0


if __name__ == "__main__":
    sys.exit(main())
