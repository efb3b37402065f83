#!/usr/bin/python3
"""Writes tests/data/scored_decoder_loop.onnx, an optimize_loops test fixture: bench/models/
make.py's ScoringGreedyDecoder at toy size (vocab 64, hidden 32). Its Loop carries a running score
and a step count that no output reads, as TorchScript exports them, besides the tokens; exported
by make.py's driver (torch.onnx.export, opset 17, seeded weights).

Usage: /usr/bin/python3 tests/data/make_scored_decoder_loop.py
"""

import functools
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("make", HERE.parent.parent / "bench" / "models" / "make.py")
make = importlib.util.module_from_spec(spec)
spec.loader.exec_module(make)

make.MODELS["scored_decoder_loop_tiny"] = functools.partial(make.greedy_loop_export, scored=True)
with tempfile.TemporaryDirectory() as tmp:
    make.build("scored_decoder_loop_tiny", Path(tmp))
    shutil.copy(Path(tmp) / "scored_decoder_loop_tiny.onnx", HERE / "scored_decoder_loop.onnx")
print(f"wrote {HERE / 'scored_decoder_loop.onnx'}", file=sys.stderr)
