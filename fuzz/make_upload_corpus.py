#!/usr/bin/env python3
"""Writes the seed corpus of fuzz/upload_fuzzer.cc into fuzz/corpus/upload_fuzzer/.

Each seed is a sequence of graft.v1.OptimizeRequest messages, each preceded by its length as
2 little-endian bytes (the fuzzer's input format). The messages are encoded here by hand in the
protobuf wire format (field numbers from proto/graft/v1/graft.proto), so the script needs
nothing beyond Python. Usage: fuzz/make_upload_corpus.py [OUT_DIR]
"""

import hashlib
import struct
import sys
from pathlib import Path


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field_varint(number, value):
    return varint(number << 3) + varint(value)


def field_bytes(number, value):
    if isinstance(value, str):
        value = value.encode()
    return varint((number << 3) | 2) + varint(len(value)) + value


# graft.v1 messages, only the fields the seeds use.
def pipeline_config(level="O2", input_sets=(), calibration_sets=()):
    body = field_bytes(1, level)
    if input_sets:
        verify = b"".join(field_bytes(10, input_set(s)) for s in input_sets)
        body += field_bytes(7, verify)  # PipelineConfig.verify: VerifyConfig.input_sets
    for s in calibration_sets:
        body += field_bytes(14, input_set(s))  # PipelineConfig.calibration_sets
    return body


def input_set(tensors):
    # InputSet.tensors: map<string, bytes>, entries as messages {key = 1, value = 2}.
    return b"".join(field_bytes(1, field_bytes(1, name) + field_bytes(2, data))
                    for name, data in tensors.items())


# onnx messages (onnx.proto field numbers), as small as a valid model gets.
def float_tensor(dims, values, name=""):
    body = b"".join(field_varint(1, d) for d in dims) + field_varint(2, 1)  # FLOAT
    body += field_bytes(4, b"".join(struct.pack("<f", v) for v in values))  # float_data, packed
    if name:
        body += field_bytes(8, name)
    return body


def value_info(name, dims):
    shape = b"".join(field_bytes(1, field_varint(1, d) if isinstance(d, int) else field_bytes(2, d))
                     for d in dims)
    tensor_type = field_varint(1, 1) + field_bytes(2, shape)
    return field_bytes(1, name) + field_bytes(2, field_bytes(1, tensor_type))


def relu_model():
    """x: float[N, 2] -> Relu -> y, IR 8, opset 13."""
    node = field_bytes(1, "x") + field_bytes(2, "y") + field_bytes(4, "Relu")
    graph = (field_bytes(1, node) + field_bytes(2, "g") + field_bytes(11, value_info("x", ["N", 2]))
             + field_bytes(12, value_info("y", ["N", 2])))
    return field_varint(1, 8) + field_bytes(8, field_varint(2, 13)) + field_bytes(7, graph)


def external_file(name, size):
    return field_bytes(1, name) + field_varint(2, size)


def start(model_size, files=(), sha256=None, deadline_hint_ms=None, level="O2", input_sets=(),
          calibration_sets=()):
    body = field_bytes(1, pipeline_config(level, input_sets, calibration_sets))
    body += field_varint(2, model_size)
    if sha256 is not None:
        body += field_bytes(3, sha256)
    if deadline_hint_ms is not None:
        body += field_varint(4, deadline_hint_ms)
    for name, size in files:
        body += field_bytes(5, external_file(name, size))
    return field_bytes(1, body)  # OptimizeRequest.start


def chunk(data, file=None):
    body = field_bytes(1, data)
    if file is not None:
        body += field_bytes(2, file)
    return field_bytes(2, body)  # OptimizeRequest.chunk


def sequence(*messages):
    return b"".join(struct.pack("<H", len(m)) + m for m in messages)


MODEL = b"a model's bytes"
RELU = relu_model()

SEEDS = {
    "model_in_one_chunk": sequence(start(len(MODEL)), chunk(MODEL)),
    "model_with_sha256": sequence(
        start(len(MODEL), sha256=hashlib.sha256(MODEL).hexdigest()), chunk(MODEL[:5]),
        chunk(MODEL[5:])),
    "sha256_mismatch": sequence(start(len(MODEL), sha256="0" * 64), chunk(MODEL)),
    "external_files": sequence(
        start(4, files=[("w.bin", 3), ("weights/x.bin", 2)]), chunk(b"abcd"),
        chunk(b"xyz", "w.bin"), chunk(b"12", "weights/x.bin")),
    "growing_buffers": sequence(start(300), *[chunk(bytes([i]) * 30) for i in range(10)]),
    "near_the_budget": sequence(start(2900), chunk(b"m" * 1500), chunk(b"m" * 1400)),
    "over_the_budget": sequence(start(2000, files=[("f", 1500)]), chunk(b"m" * 2000)),
    "over_max_model_bytes": sequence(start(5000)),
    "wrapping_file_size": sequence(start(100, files=[("a", 2**64 - 100)]), chunk(b"x" * 100)),
    "wrapping_file_sizes": sequence(start(1, files=[("a", 2**63), ("b", 2**63)])),
    "escaping_name": sequence(start(1, files=[("../evil", 1)]), chunk(b"x"),
                              chunk(b"y", "../evil")),
    "empty_model": sequence(start(0)),
    "huge_deadline_hint": sequence(start(3, deadline_hint_ms=2**64 - 1), chunk(b"abc")),
    "chunk_before_start": sequence(chunk(b"abc"), start(3)),
    "undeclared_file": sequence(start(1), chunk(b"x"), chunk(b"y", "nope")),
    # Verify input sets, checked by api::from_proto and then against the model.
    "verify_input_set": sequence(
        start(len(RELU), input_sets=[{"x": float_tensor([1, 2], [0.5, -1])},
                                     {"x": float_tensor([3, 2], [1, 2, 3, 4, 5, 6])}]),
        chunk(RELU)),
    "verify_input_set_wrong_dim": sequence(
        start(len(RELU), input_sets=[{"x": float_tensor([1, 3], [1, 2, 3])}]), chunk(RELU)),
    "verify_input_set_unknown_name": sequence(
        start(len(RELU), input_sets=[{"q": float_tensor([1, 2], [1, 2])}]), chunk(RELU)),
    "verify_input_set_huge_dims": sequence(
        start(len(RELU), input_sets=[{"x": float_tensor([10**6, 10**6], [])}]), chunk(RELU)),
    # Calibration sets (PipelineConfig.calibration_sets): the same checks, their own label.
    "calibration_set": sequence(
        start(len(RELU), level="O3",
              calibration_sets=[{"x": float_tensor([1, 2], [0.5, -1])},
                                {"x": float_tensor([2, 2], [1, 2, 3, 4])}]),
        chunk(RELU)),
    "calibration_set_wrong_dim": sequence(
        start(len(RELU), calibration_sets=[{"x": float_tensor([1, 3], [1, 2, 3])}]),
        chunk(RELU)),
    "calibration_and_verify_sets": sequence(
        start(len(RELU), input_sets=[{"x": float_tensor([1, 2], [1, 2])}],
              calibration_sets=[{"x": float_tensor([10**6, 10**6], [])}]), chunk(RELU)),
}


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "corpus" / "upload_fuzzer"
    out.mkdir(parents=True, exist_ok=True)
    for name, data in SEEDS.items():
        (out / name).write_bytes(data)
    print(f"wrote {len(SEEDS)} seeds to {out}")


if __name__ == "__main__":
    main()
