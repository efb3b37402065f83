#!/usr/bin/python3
"""Image-like inputs for the PaddleOCR models: printed text on a light page, rendered with PIL
(DejaVu fonts), preprocessed as PaddleOCR does, in ONNX test-data layout
(OUT/test_data_set_K/input_0.pb, an onnx.TensorProto named after the model's input).

  text_images.py det OUT --sets N --seed S [--size H,W] [--name x]
      a page of H x W (default 640 x 640) with 6-14 lines of words in several sizes, colours and
      positions, light background with mild noise; normalized like PaddleOCR's detector
      (x / 255 - ImageNet mean) / ImageNet std, CHW, batch 1.
  text_images.py rec OUT --sets N --seed S [--size 48,320]
      one text line filling a 48-pixel-high crop, padded right to W; (x / 255 - 0.5) / 0.5
      (PaddleOCR's recognizer and classifier, also for cls with --size 48,192).

Random uniform inputs are noise to a trained detector: its probability map stays near 0
everywhere, so errors measured on them say little about text. These are not real photos either:
clean rendered text, no perspective, no clutter.
"""
import argparse
import os
import sys

import numpy as np
from onnx import numpy_helper
from PIL import Image, ImageDraw, ImageFont

FONTS = "/usr/share/fonts/truetype/dejavu"
WORDS = ("invoice total amount date paid number order customer address street city phone "
         "graft onnx runtime model tensor receipt 2026 11 29 $42.50 No. 7731 ITEM QTY PRICE "
         "Hello World OCR text detection recognition page line 0123456789").split()
MEAN, STD = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])


def font(rng, size):
    names = [f for f in sorted(os.listdir(FONTS)) if f.endswith(".ttf")]
    return ImageFont.truetype(os.path.join(FONTS, names[rng.integers(len(names))]), int(size))


def phrase(rng, n):
    return " ".join(WORDS[i] for i in rng.integers(len(WORDS), size=n))


def page(rng, h, w):
    bg = tuple(int(v) for v in rng.integers(200, 256, size=3))
    img = Image.new("RGB", (w, h), bg)
    d = ImageDraw.Draw(img)
    y = int(rng.integers(5, 30))
    while y < h - 20:
        size = int(rng.integers(14, 40))
        ink = tuple(int(v) for v in rng.integers(0, 90, size=3))
        d.text((int(rng.integers(5, max(6, w // 3))), y), phrase(rng, int(rng.integers(2, 7))), fill=ink,
               font=font(rng, size))
        y += size + int(rng.integers(6, 40))
    a = np.asarray(img, dtype=np.float32) + rng.normal(0, 4, size=(h, w, 3))
    return np.clip(a, 0, 255)


def line(rng, h, w):
    bg = tuple(int(v) for v in rng.integers(190, 256, size=3))
    text = phrase(rng, int(rng.integers(1, 5)))
    f = font(rng, h * 0.7)
    tw = int(ImageDraw.Draw(Image.new("RGB", (1, 1))).textlength(text, font=f)) + 8
    img = Image.new("RGB", (max(tw, 8), h), bg)
    ImageDraw.Draw(img).text((4, int(h * 0.1)), text, fill=tuple(int(v) for v in rng.integers(0, 90, size=3)), font=f)
    if img.width > w:  # PaddleOCR resizes the crop to height h keeping the ratio, capped at w
        img = img.resize((w, h))
    a = np.full((h, w, 3), bg, dtype=np.float32)
    a[:, : img.width] = np.asarray(img, dtype=np.float32)
    return np.clip(a + rng.normal(0, 4, size=a.shape), 0, 255)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=["det", "rec"])
    p.add_argument("out")
    p.add_argument("--sets", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--size", default=None, help="H,W")
    p.add_argument("--name", default="x", help="the model's input name")
    a = p.parse_args()
    h, w = (int(v) for v in (a.size or ("640,640" if a.kind == "det" else "48,320")).split(","))
    for k in range(a.sets):
        rng = np.random.default_rng(a.seed + k)
        if a.kind == "det":
            x = (page(rng, h, w) / 255 - MEAN) / STD
        else:
            x = (line(rng, h, w) / 255 - 0.5) / 0.5
        x = x.transpose(2, 0, 1)[None].astype(np.float32)
        d = os.path.join(a.out, f"test_data_set_{k}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "input_0.pb"), "wb") as fh:
            fh.write(numpy_helper.from_array(x, a.name).SerializeToString())
        if k == 0:
            Image.fromarray(((x[0].transpose(1, 2, 0) * (STD if a.kind == "det" else 0.5) + (MEAN if a.kind == "det" else 0.5))
                             * 255).clip(0, 255).astype(np.uint8)).save(os.path.join(a.out, "sample.png"))
    print(f"{a.sets} sets of [1, 3, {h}, {w}] in {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
