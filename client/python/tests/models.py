"""Small ONNX models built with the onnx package, each with its own weights (so its own digest:
tests that share one graftd never share cache entries by accident)."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def conv_bn_model(seed):
    """Identity -> Conv -> BatchNormalization -> Relu -> Identity: O2 removes the Identities and
    folds the BatchNormalization into the Conv, so the result has fewer nodes and bytes."""
    rng = np.random.default_rng(seed)
    channels = 8

    def init(name, shape, positive=False):
        values = rng.uniform(0.5 if positive else -1.0, 1.0, size=shape).astype(np.float32)
        return numpy_helper.from_array(values, name)

    initializers = [
        init("W", (channels, 3, 3, 3)),
        init("B", (channels,)),
        init("scale", (channels,)),
        init("bias", (channels,)),
        init("mean", (channels,)),
        init("var", (channels,), positive=True),
    ]
    nodes = [
        helper.make_node("Identity", ["X"], ["x1"], name="in_identity"),
        helper.make_node("Conv", ["x1", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"],
                         name="bn"),
        helper.make_node("Relu", ["bn"], ["r"], name="relu"),
        helper.make_node("Identity", ["r"], ["Y"], name="out_identity"),
    ]
    graph = helper.make_graph(
        nodes, f"conv_bn_{seed}",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, channels, 16, 16])],
        initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="graft_client tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def conv_bn_bytes(seed):
    return conv_bn_model(seed).SerializeToString()


def save_with_external_data(model, path, location):
    """Saves `model` with every initializer in one external-data file named `location`."""
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)


def with_location(model, location):
    """`model` with its first initializer marked as stored externally at `location` (the file
    need not exist: for tests of locations the client must refuse)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    tensor = model.graph.initializer[0]
    tensor.ClearField("raw_data")
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    entry = tensor.external_data.add()
    entry.key = "location"
    entry.value = location
    return model


def node_count(model_bytes):
    return len(onnx.load_from_string(model_bytes).graph.node)


def external_model(folder, seed, location="weights.bin", pinned=False):
    """A conv_bn model saved in `folder` with its initializers in `location`: (path, model
    bytes, weights bytes). `pinned` adds an initializer that is also a graph output, which no
    pass changes, so the optimized model still references the file."""
    model = conv_bn_model(seed=seed)
    if pinned:
        model.graph.initializer.append(numpy_helper.from_array(
            np.arange(16, dtype=np.float32) + seed, "pinned"))
        model.graph.output.append(helper.make_tensor_value_info("pinned", TensorProto.FLOAT,
                                                                [16]))
    (folder / location).parent.mkdir(parents=True, exist_ok=True)
    save_with_external_data(model, folder / "model.onnx", location)
    return (folder / "model.onnx", (folder / "model.onnx").read_bytes(),
            (folder / location).read_bytes())


def near_miss_layer_norm_bytes(seed):
    """A LayerNormalization written out as ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div whose
    epsilon is a graph input, not a constant: fuse_blocks cannot fuse it, and says why."""
    rng = np.random.default_rng(seed)
    two = numpy_helper.from_array(np.array(2.0 + rng.uniform(0, 1e-7), dtype=np.float32), "two")
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
        helper.make_node("Sub", ["x", "m"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["p"]),
        helper.make_node("ReduceMean", ["p"], ["v"], axes=[-1]),
        helper.make_node("Add", ["v", "eps"], ["a"], name="/ln/Add"),
        helper.make_node("Sqrt", ["a"], ["s"]),
        helper.make_node("Div", ["d", "s"], ["y"], name="/ln/Div"),
    ]
    graph = helper.make_graph(
        nodes, f"near_miss_{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
         helper.make_tensor_value_info("eps", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])], [two])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="graft_client tests")
    model.ir_version = 8
    return model.SerializeToString()


def conv_relu_bytes(seed):
    """Conv -> Relu on x [1,3,8,8] (NCHW) giving y [1,4,8,8]: for io_layout, the model computes
    in NCHW and a caller serves x in NHWC."""
    rng = np.random.default_rng(seed)
    w = numpy_helper.from_array(rng.uniform(-1, 1, size=(4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(
        nodes, f"conv_relu_{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="graft_client tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def relu_pool_bytes(seed):
    """Relu -> GlobalAveragePool on x [1,4,8,8] giving y [1,4,1,1] (no weights: the graph's
    name carries the seed). With x and y served in NHWC, the Transposes at both ends cancel only
    through the pool (layout_sensitive_ops)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["y"], name="pool")]
    graph = helper.make_graph(
        nodes, f"relu_pool_{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1, 1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="graft_client tests")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()
