#!/usr/bin/python3
"""Measures a fusion before it is built: rewrites ONNX Runtime's own optimized graph of a model
(the files bench/serving_sizes/run saves as OUT/MODEL.CASE.ort/VARIANT.ort.onnx: what ONNX
Runtime runs after its own fusions) by hand, so that the rewritten graph and the unrewritten one can be
timed against each other with bench/lossy_coverage/ort_cells.js (`latency`, base = the input)
and compared (`errors`: the outputs must be equal).

Usage: /usr/bin/python3 bench/serving_sizes/fusion_probe.py IN.ort.onnx OUT.onnx MODE

MODE:
  skip_simplified  Add followed by com.microsoft/ONNX SimplifiedLayerNormalization (RMSNorm, as
                   ONNX Runtime fuses a LLaMA's decomposed norm) becomes one
                   com.microsoft.SkipSimplifiedLayerNormalization, the sum kept as its 4th
                   output when something else reads it (the residual stream).
  fused_projection MatMuls (float, constant 2-D weights) or MatMulNBits nodes (same K, bits,
                   block size, accuracy level; no zero points) sharing their input become one
                   product over the concatenated weights and a Split: LLaMA's q/k/v projections,
                   and its gate/up pair.

The script touches nothing else; it prints how many rewrites it made. Used for the measurement in
docs/performance.md ("Serving sizes", fusions measured before they were built).
"""

import sys
from collections import defaultdict

import numpy as np
import onnx
from onnx import helper, numpy_helper


def skip_simplified(graph):
    consumers = defaultdict(list)
    for n in graph.node:
        for i in n.input:
            consumers[i].append(n)
    producer = {o: n for n in graph.node for o in n.output}
    outputs = {o.name for o in graph.output}
    replaced, count = {}, 0
    for n in graph.node:
        if n.op_type != "SimplifiedLayerNormalization":
            continue
        add = producer.get(n.input[0])
        if add is None or add.op_type != "Add" or add.domain or id(add) in replaced:
            continue
        eps = next((a.f for a in n.attribute if a.name == "epsilon"), 1e-5)
        total = add.output[0]
        others = [c for c in consumers[total] if c is not n]
        fused = helper.make_node(
            "SkipSimplifiedLayerNormalization", [add.input[0], add.input[1], n.input[1]],
            [n.output[0], "", "", total if others or total in outputs else ""],
            domain="com.microsoft", epsilon=eps, name=n.name + "_skip")
        replaced[id(add)] = None
        replaced[id(n)] = fused
        count += 1
    nodes = [replaced.get(id(n), n) for n in graph.node]
    return [n for n in nodes if n is not None], count


def fused_projection(graph):
    inits = {i.name: i for i in graph.initializer}
    groups = defaultdict(list)
    for n in graph.node:
        if (n.op_type == "MatMul" and not n.domain and n.input[1] in inits
                and len(inits[n.input[1]].dims) == 2):
            groups[("MatMul", n.input[0], inits[n.input[1]].dims[0])].append(n)
        elif n.op_type == "MatMulNBits" and len(n.input) == 3:
            attrs = tuple(sorted((a.name, helper.get_attribute_value(a))
                                 for a in n.attribute if a.name != "N"))
            groups[("MatMulNBits", n.input[0], attrs)].append(n)
    replaced, count = {}, 0
    for key, members in groups.items():
        if len(members) < 2:
            continue
        first = members[0]
        out = first.output[0] + "_fused"
        if key[0] == "MatMul":
            weights = [numpy_helper.to_array(inits[n.input[1]]) for n in members]
            name = first.input[1] + "_fused"
            graph.initializer.append(numpy_helper.from_array(np.concatenate(weights, 1), name))
            sizes = [w.shape[1] for w in weights]
            product = helper.make_node("MatMul", [first.input[0], name], [out],
                                       name=first.name + "_fused")
        else:
            packed = [numpy_helper.to_array(inits[n.input[1]]) for n in members]
            scales = [numpy_helper.to_array(inits[n.input[2]]).reshape(-1) for n in members]
            b, s = first.input[1] + "_fused", first.input[2] + "_fused"
            graph.initializer.append(numpy_helper.from_array(np.concatenate(packed, 0), b))
            graph.initializer.append(numpy_helper.from_array(np.concatenate(scales), s))
            sizes = [p.shape[0] for p in packed]
            attrs = {a.name: helper.get_attribute_value(a) for a in first.attribute}
            attrs["N"] = sum(sizes)
            product = helper.make_node("MatMulNBits", [first.input[0], b, s], [out],
                                       domain="com.microsoft", name=first.name + "_fused", **attrs)
        split_sizes = first.name + "_split_sizes"
        graph.initializer.append(helper.make_tensor(split_sizes, onnx.TensorProto.INT64,
                                                    [len(sizes)], sizes))
        split = helper.make_node("Split", [out, split_sizes], [n.output[0] for n in members],
                                 axis=-1, name=first.name + "_split")
        replaced[id(first)] = [product, split]
        for n in members[1:]:
            replaced[id(n)] = []
        count += 1
    nodes = []
    for n in graph.node:
        nodes.extend(replaced.get(id(n), [n]))
    return nodes, count


def main():
    if len(sys.argv) != 4 or sys.argv[3] not in ("skip_simplified", "fused_projection"):
        sys.exit(__doc__)
    model = onnx.load(sys.argv[1])
    graph = model.graph
    nodes, count = (skip_simplified if sys.argv[3] == "skip_simplified" else fused_projection)(graph)
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in graph.node for i in n.input}
    kept = [i for i in graph.initializer if i.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    onnx.save(model, sys.argv[2])
    print(f"{sys.argv[3]}: {count} rewrites -> {sys.argv[2]}")


if __name__ == "__main__":
    main()
