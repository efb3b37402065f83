#!/usr/bin/python3
"""Python side of bench/ort_precision (needs onnx + numpy; Debian's /usr/bin/python3).

Subcommands, each printing one JSON object on stdout:

  inputs MODEL NAME OUTDIR [--spec FILE]... [--sets N] [--seed S]
      Writes N input sets for MODEL in ONNX test-data layout:
      OUTDIR/test_data_set_K/input_I.pb (onnx.TensorProto with its name set).
      Shapes, fixed values and ranges come from the first spec file naming NAME
      (inputs.json format of ../shared/models); otherwise declared static dims,
      symbolic dims 1, floats uniform in [lo, hi) = [-1, 1), integers in [0, 100),
      bools fair. Set K uses numpy's default_rng(seed + K).

  inspect MODEL [--fp16-check]
      Node counts (all graphs), weight bytes (initializers, Constant values and
      ConstantOfShape values; external data counted by its length), opset and IR
      version; with --fp16-check also the structural check of a convert_fp16 output.

  external MODEL OUTDIR
      Re-saves MODEL with all initializers as external data (one file beside it).

  probability-outputs MODEL
      The main graph outputs graft compares on their own scale (rel = min(rel, max_abs)):
      computed by Sigmoid, HardSigmoid or Softmax through at most 8 ops that only move values
      (core/pipeline/pipeline.cc probability_outputs, ir::moves_values).

  selftest
      Checks that the structural check flags a hand-made float32 island and Cast pair.
"""
import argparse
import json
import collections
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Ops convert_fp16 keeps in float32 by design (core/passes/convert_fp16.cc,
# default_block_list): a Cast to float in front of them is expected.
BLOCKED = {
    "Resize", "Upsample", "Range", "NonMaxSuppression", "RoiAlign", "TopK", "CumSum",
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
    "Bernoulli", "ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceProd", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceL1", "ReduceL2", "Pow", "Exp", "QuantizeLinear",
    "DequantizeLinear", "DynamicQuantizeLinear", "STFT", "DFT", "MelWeightMatrix",
    "HannWindow", "HammingWindow", "BlackmanWindow", "SoftmaxCrossEntropyLoss",
    "NegativeLogLikelihoodLoss"}

F32 = TensorProto.FLOAT
F16 = TensorProto.FLOAT16


def elem_size(data_type):
    if data_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return 0
    return np.dtype(helper.tensor_dtype_to_np_dtype(data_type)).itemsize if hasattr(
        helper, "tensor_dtype_to_np_dtype") else np.dtype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[data_type]).itemsize


def tensor_bytes(t, model_dir):
    """Bytes of a tensor's data, external data by its length (or its file's size)."""
    if t.data_location == TensorProto.EXTERNAL:
        info = {e.key: e.value for e in t.external_data}
        if "length" in info:
            return int(info["length"])
        f = os.path.join(model_dir, info.get("location", ""))
        return max(0, os.path.getsize(f) - int(info.get("offset", 0))) if os.path.isfile(f) else 0
    if t.raw_data:
        return len(t.raw_data)
    n = int(np.prod(t.dims)) if len(t.dims) else 1
    return n * elem_size(t.data_type)


def graphs_of(model):
    """Every graph: main, nested subgraphs at any depth, function bodies (as node lists)."""
    out = []

    def walk(nodes, where):
        out.append((where, nodes))
        for n in nodes:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk_graph(a.g, f"{where}/{n.name or n.op_type}.{a.name}")
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for i, g in enumerate(a.graphs):
                        walk_graph(g, f"{where}/{n.name or n.op_type}.{a.name}[{i}]")

    def walk_graph(g, where):
        walk(list(g.node), where)
        subgraphs.append(g)

    subgraphs = []
    walk_graph(model.graph, "main")
    for f in model.functions:
        walk(list(f.node), f"function {f.domain}.{f.name}")
    return out, subgraphs


def cmd_inspect(args):
    model_dir = os.path.dirname(os.path.abspath(args.model))
    model = onnx.load(args.model, load_external_data=False)
    node_lists, graphs = graphs_of(model)
    weight = 0
    for g in graphs:
        for t in g.initializer:
            weight += tensor_bytes(t, model_dir)
    for _, nodes in node_lists:
        for n in nodes:
            if n.op_type in ("Constant", "ConstantOfShape") and n.domain in ("", "ai.onnx"):
                for a in n.attribute:
                    if a.type == onnx.AttributeProto.TENSOR:
                        weight += tensor_bytes(a.t, model_dir)
    res = {
        "nodes": sum(len(n) for _, n in node_lists),
        "weight_bytes": weight,
        "ir_version": model.ir_version,
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "file_bytes": os.path.getsize(args.model),
        # Node counts per "domain:op" over all graphs (what ONNX Runtime fused a model into).
        "ops": dict(sorted(collections.Counter(
            f"{n.domain or 'ai.onnx'}:{n.op_type}" for _, nodes in node_lists
            for n in nodes).items())),
    }
    # On disk: the model file and every external data file it references (whole files, as
    # they are shipped), and how many bytes of those files the model actually references.
    files, referenced = set(), 0
    for g in graphs:
        for t in g.initializer:
            if t.data_location == TensorProto.EXTERNAL:
                info = {e.key: e.value for e in t.external_data}
                files.add(info.get("location", ""))
                referenced += tensor_bytes(t, model_dir)
    res["external_files"] = {f: (os.path.getsize(os.path.join(model_dir, f))
                                 if os.path.isfile(os.path.join(model_dir, f)) else None)
                             for f in sorted(files)}
    res["external_referenced_bytes"] = referenced
    res["disk_bytes"] = res["file_bytes"] + sum(x or 0 for x in res["external_files"].values())
    if args.fp16_check:
        res["fp16_check"] = fp16_check(model, args.model, set(args.kept))
    print(json.dumps(res))


def value_types(model, path):
    """Element type of every value name we can learn: declared, inferred, Cast outputs."""
    types = {}
    notes = []
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception as e:  # onnx 1.12 knows opsets <= 17, IR <= 8
        notes.append(f"onnx {onnx.__version__} shape inference failed ({str(e).splitlines()[0][:200]}); "
                     "types from declarations and Casts only")
        inferred = model

    def take(g):
        for vi in list(g.input) + list(g.output) + list(g.value_info):
            if vi.type.HasField("tensor_type"):
                types[vi.name] = vi.type.tensor_type.elem_type
        for t in g.initializer:
            types[t.name] = t.data_type
        for n in g.node:
            if n.op_type == "Cast":
                for a in n.attribute:
                    if a.name == "to":
                        types[n.output[0]] = a.i
            if n.op_type == "Constant":
                for a in n.attribute:
                    if a.name == "value":
                        types[n.output[0]] = a.t.data_type
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    take(a.g)
                for sg in a.graphs:
                    take(sg)

    take(inferred.graph)
    return types, notes


def fp16_check(model, path, kept=frozenset()):
    """Structural check of a convert_fp16 output (main graph and subgraphs).

    island: Cast(to=FLOAT) of a float16 value read by a node that is not kept in float32 by
      design (block list, other domains, ops with a dtype attribute, the nodes graft's report
      names as kept_float32: `kept`, by node name or first output) and that touches float16
      otherwise (a float16 input or output, or an output read by a Cast to float16): a float32
      computation inside a float16 region.
    noop_cast: a Cast to its input's own type, or float16 -> float -> float16 (exact round trip).
    """
    types, notes = value_types(model, path)
    islands, noops = [], []
    counts = {"casts_to_float": 0, "casts_to_float16": 0, "float16_values": 0, "float_values": 0}
    counts["float16_values"] = sum(1 for t in types.values() if t == F16)
    counts["float_values"] = sum(1 for t in types.values() if t == F32)

    def cast_to(n):
        for a in n.attribute:
            if a.name == "to":
                return a.i
        return None

    def check_graph(g, where):
        readers = {}
        producer = {}
        for n in g.node:
            for i in n.input:
                if i:
                    readers.setdefault(i, []).append(n)
            for o in n.output:
                producer[o] = n
        outputs = {o.name for o in g.output}

        def label(n):
            return f"{where}:{n.name or '(unnamed)'}({n.op_type})"

        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    check_graph(a.g, f"{where}/{n.name}.{a.name}")
                for k, sg in enumerate(a.graphs):
                    check_graph(sg, f"{where}/{n.name}.{a.name}[{k}]")
            if n.op_type != "Cast" or n.domain not in ("", "ai.onnx"):
                continue
            to = cast_to(n)
            src = types.get(n.input[0])
            counts["casts_to_float" if to == F32 else "casts_to_float16" if to == F16 else "other"] = \
                counts.get("casts_to_float" if to == F32 else "casts_to_float16" if to == F16 else "other", 0) + 1
            if src is not None and src == to:
                noops.append(f"{label(n)} casts {onnx.TensorProto.DataType.Name(to)} to itself")
            p = producer.get(n.input[0])
            if to == F16 and p is not None and p.op_type == "Cast" and cast_to(p) == F32 \
                    and types.get(p.input[0]) == F16:
                noops.append(f"{label(p)} -> {label(n)}: float16 -> float -> float16")
            if to != F32 or src != F16:
                continue
            for r in readers.get(n.output[0], []):
                if r.op_type == "Cast" or r.domain not in ("", "ai.onnx") or r.op_type in BLOCKED:
                    continue
                if (r.name and r.name in kept) or (r.output and r.output[0] in kept):
                    continue
                if any(a.name in ("dtype", "output_datatype") for a in r.attribute):
                    continue
                touches16 = any(types.get(v) == F16 for v in list(r.input) + list(r.output) if v)
                to16 = any(rr.op_type == "Cast" and cast_to(rr) == F16
                           for o in r.output for rr in readers.get(o, []))
                if touches16 or to16:
                    islands.append(f"{label(n)} (float16 -> float) feeds {label(r)}"
                                   + (" whose output is cast back to float16" if to16 else " next to float16 values"))
        del outputs

    check_graph(model.graph, "main")
    if model.functions:
        notes.append(f"{len(model.functions)} model-local function(s) not checked (float32 inside by design)")
    return {"islands": islands, "noop_casts": noops, "counts": counts, "notes": notes}


def spec_for(name, spec_files):
    for f in spec_files:
        if os.path.isfile(f):
            with open(f) as fh:
                spec = json.load(fh)
            if name in spec:
                return spec[name], f
    return {}, None


def cmd_inputs(args):
    model = onnx.load(args.model, load_external_data=False)
    init = {t.name for t in model.graph.initializer}
    spec, spec_file = spec_for(args.name, args.spec)
    shapes, values, ranges = spec.get("shapes", {}), spec.get("values", {}), spec.get("range", {})
    notes = []
    inputs = [vi for vi in model.graph.input if vi.name not in init]
    names = {vi.name for vi in inputs}
    for k in set(shapes) | set(values) | set(ranges):
        if k not in names:
            notes.append(f"{spec_file} names '{k}', which is not a model input")
    described = []
    for k in range(args.sets):
        rng = np.random.default_rng(args.seed + k)
        d = os.path.join(args.outdir, f"test_data_set_{k}")
        os.makedirs(d, exist_ok=True)
        for i, vi in enumerate(inputs):
            tt = vi.type.tensor_type
            if not vi.type.HasField("tensor_type"):
                raise SystemExit(f"input '{vi.name}' is not a tensor")
            dtype = np.dtype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[tt.elem_type])
            given = values.get(vi.name)
            if vi.name in shapes:
                dims = [int(x) for x in shapes[vi.name]]
            elif isinstance(given, list) and len(tt.shape.dim) == 1:
                dims = [len(given)]
            else:
                dims = []
                for j, dim in enumerate(tt.shape.dim):
                    if dim.HasField("dim_value") and dim.dim_value >= 0:
                        dims.append(dim.dim_value)
                    else:
                        if k == 0:
                            notes.append(f"input '{vi.name}' dim {j} ('{dim.dim_param}') is symbolic: using 1")
                        dims.append(1)
            if isinstance(given, list):
                arr = np.array(given, dtype=dtype).reshape(dims)
            elif given is not None:
                arr = np.full(dims, given, dtype=dtype)
            elif dtype == np.bool_:
                arr = rng.random(dims) < 0.5
            elif dtype.kind == "f":
                lo, hi = ranges.get(vi.name, [-1, 1])
                arr = rng.uniform(lo, hi, size=dims).astype(dtype)
            else:
                lo, hi = ranges.get(vi.name, [0, 100])
                arr = np.floor(rng.uniform(lo, hi, size=dims)).astype(dtype)
            t = numpy_helper.from_array(np.asarray(arr, dtype=dtype), vi.name)
            with open(os.path.join(d, f"input_{i}.pb"), "wb") as fh:
                fh.write(t.SerializeToString())
            if k == 0:
                described.append({"name": vi.name, "dims": dims, "type": str(dtype)})
    print(json.dumps({"inputs": described, "sets": args.sets, "spec": spec_file, "notes": notes}))


# ir::moves_values (core/ir/op_params.cc): ops whose output holds input 0's values rearranged.
MOVES_VALUES = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand", "Transpose", "Slice"}


def cmd_probability_outputs(args):
    model = onnx.load(args.model, load_external_data=False)
    producer = {o: n for n in model.graph.node for o in n.output}
    out = []
    for o in model.graph.output:
        name = o.name
        for _ in range(8):
            n = producer.get(name)
            if n is None or n.domain not in ("", "ai.onnx"):
                break
            if n.op_type in ("Sigmoid", "HardSigmoid", "Softmax"):
                out.append(o.name)
                break
            if n.op_type not in MOVES_VALUES or not n.input:
                break
            name = n.input[0]
    print(json.dumps({"probability": out}))


def cmd_external(args):
    model = onnx.load(args.model)
    os.makedirs(args.outdir, exist_ok=True)
    out = os.path.join(args.outdir, os.path.basename(args.model))
    onnx.save_model(model, out, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=os.path.basename(args.model) + ".data", size_threshold=1024)
    print(json.dumps({"model": out, "model_bytes": os.path.getsize(out),
                      "data_bytes": os.path.getsize(out + ".data")}))


def cmd_selftest(args):
    """The structural check must flag what it is meant to: a hand-made float16 model with one
    float32 island (Relu between Casts), one float16 -> float -> float16 pair, and an Exp (block
    list) behind a Cast that must not be flagged."""
    T = TensorProto
    nodes = [helper.make_node("Cast", ["x"], ["xf"], to=T.FLOAT, name="c_up"),
             helper.make_node("Relu", ["xf"], ["r"], name="relu32"),
             helper.make_node("Cast", ["r"], ["r16"], to=T.FLOAT16, name="c_down"),
             helper.make_node("Cast", ["x"], ["y32"], to=T.FLOAT, name="p1"),
             helper.make_node("Cast", ["y32"], ["y16"], to=T.FLOAT16, name="p2"),
             helper.make_node("Add", ["r16", "y16"], ["o"], name="add16"),
             helper.make_node("Cast", ["x"], ["e"], to=T.FLOAT, name="c_exp"),
             helper.make_node("Exp", ["e"], ["o2"], name="exp_blocked")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT16, [2])],
                          [helper.make_tensor_value_info("o", T.FLOAT16, [2]),
                           helper.make_tensor_value_info("o2", T.FLOAT, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    c = fp16_check(model, None)
    ok = (len(c["islands"]) == 1 and "relu32" in c["islands"][0] and len(c["noop_casts"]) == 1
          and "p1" in c["noop_casts"][0] and not any("exp_blocked" in x for x in c["islands"]))
    print(json.dumps({"ok": ok, "check": c}))
    sys.exit(0 if ok else 1)


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("inputs")
    a.add_argument("model")
    a.add_argument("name")
    a.add_argument("outdir")
    a.add_argument("--spec", action="append", default=[])
    a.add_argument("--sets", type=int, default=2)
    a.add_argument("--seed", type=int, default=1)
    b = sub.add_parser("inspect")
    b.add_argument("model")
    b.add_argument("--fp16-check", action="store_true")
    b.add_argument("--kept", action="append", default=[],
                   help="a node graft kept float32 on purpose (its kept_float32 findings)")
    c = sub.add_parser("external")
    c.add_argument("model")
    c.add_argument("outdir")
    d = sub.add_parser("probability-outputs")
    d.add_argument("model")
    sub.add_parser("selftest")
    args = p.parse_args()
    {"inputs": cmd_inputs, "inspect": cmd_inspect, "external": cmd_external,
     "probability-outputs": cmd_probability_outputs, "selftest": cmd_selftest}[args.cmd](args)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception as e:  # one JSON line either way: the caller reports it per model
        print(json.dumps({"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:600]}))
        sys.exit(1)
