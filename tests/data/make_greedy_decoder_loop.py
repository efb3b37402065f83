#!/usr/bin/python3
"""Writes tests/data/greedy_decoder_loop.onnx, the optimize_loops test's fixture: bench/models/
make.py's GreedyDecoder at toy size (vocab 64, hidden 32: one Loop whose trip count is the
max_length input, projecting the encoder's memory to keys and values inside its body), exported by make.py's driver (torch.onnx.export, opset 17,
seeded weights).

Usage: /usr/bin/python3 tests/data/make_greedy_decoder_loop.py
"""

import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("make", HERE.parent.parent / "bench" / "models" / "make.py")
make = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make)

make.MODELS["greedy_decoder_loop_tiny"] = make.greedy_loop_export
with tempfile.TemporaryDirectory() as tmp:
    make.build("greedy_decoder_loop_tiny", Path(tmp))
    shutil.copy(Path(tmp) / "greedy_decoder_loop_tiny.onnx", HERE / "greedy_decoder_loop.onnx")
print(f"wrote {HERE / 'greedy_decoder_loop.onnx'}", file=sys.stderr)
