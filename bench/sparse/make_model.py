#!/usr/bin/env python3
"""A model with sparse weights for bench/sparse: a float32 MLP (torch, seeded) whose Linear
weights are magnitude-pruned by hand to SPARSITY zeros (the smallest |w| of each weight), exported
to ONNX with its weights dense. graft's store_sparse then stores them sparse (./run).

Usage: make_model.py OUT.onnx [--sparsity 0.8] [--width 1024] [--layers 4]
"""
import argparse

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--sparsity", type=float, default=0.8)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(args.width, 10)).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Linear):
                w = m.weight
                k = int(args.sparsity * w.numel())
                if k:
                    cut = w.abs().flatten().kthvalue(k).values
                    w[w.abs() <= cut] = 0.0
    x = torch.randn(1, args.width)
    torch.onnx.export(model, x, args.out, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}}, opset_version=17)


if __name__ == "__main__":
    main()
