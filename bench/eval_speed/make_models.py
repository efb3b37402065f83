#!/usr/bin/python3
"""Writes the models of the evaluator-speed bench (bench/eval_speed/README.md).

Usage: /usr/bin/python3 bench/eval_speed/make_models.py OUT_DIR [--only NAME ...]

torchvision's resnet18 and vit_b_16 on a 1x3x224x224 image and r3d_18 on a 1x3x16x112x112 clip,
random seeded weights (nothing is downloaded), exported in eval mode at opset 17 with a fixed
batch of 1. The files (45 to 330 MB) go to OUT_DIR, a temporary or build folder: they are never
committed. Needs Debian 12's python3-torch, python3-torchvision and python3-onnx.
"""

import argparse
import sys
import time
from pathlib import Path

import onnx
import torch
import torchvision

OPSET = 17
SEED = 0

MODELS = {
    # name: (constructor, input shape)
    "resnet18": (lambda: torchvision.models.resnet18(weights=None), (1, 3, 224, 224)),
    "vit_b_16": (lambda: torchvision.models.vit_b_16(weights=None), (1, 3, 224, 224)),
    "r3d_18": (lambda: torchvision.models.video.r3d_18(weights=None), (1, 3, 16, 112, 112)),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--only", nargs="+", choices=sorted(MODELS), default=sorted(MODELS))
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name in args.only:
        make, shape = MODELS[name]
        torch.manual_seed(SEED)
        module = make().eval()
        x = torch.randn(shape)
        path = args.out_dir / f"{name}.onnx"
        start = time.time()
        # Not under torch.no_grad(): there nn.MultiheadAttention (vit_b_16) takes its fused
        # fast path, which torch 1.13 cannot export.
        torch.onnx.export(module, (x,), str(path), opset_version=OPSET,
                          input_names=["input"], output_names=["output"])
        onnx.checker.check_model(str(path))
        print(f"{path}: {path.stat().st_size / 1e6:.1f} MB, {time.time() - start:.1f} s",
              file=sys.stderr)


if __name__ == "__main__":
    main()
