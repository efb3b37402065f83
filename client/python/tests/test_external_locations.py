"""The client's scan for external-data locations (no server needed)."""

import onnx
import pytest
from onnx import TensorProto, helper

import graft_client
from models import conv_bn_model, with_location


def external_tensor(name, location):
    t = helper.make_tensor(name, TensorProto.FLOAT, [1], [0.0])
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value=location)
    t.external_data.add(key="offset", value="0")
    return t


def test_locations_are_found_in_subgraphs_and_functions():
    branch = helper.make_graph(
        [helper.make_node("Constant", [], ["c"], value=external_tensor("c", "then/deep.bin"))],
        "then", [], [helper.make_tensor_value_info("c", TensorProto.FLOAT, [1])])
    model = conv_bn_model(seed=401)
    model.graph.node.append(helper.make_node("If", ["cond"], ["z"], then_branch=branch,
                                             else_branch=branch))
    model.graph.initializer.append(external_tensor("cond", "cond.bin"))
    function = helper.make_function(
        "local", "f", [], ["o"],
        [helper.make_node("Constant", [], ["o"], value=external_tensor("o", "fn.bin"))],
        [helper.make_opsetid("", 13)])
    model.functions.append(function)
    # A location on a tensor that is not stored externally does not count.
    stray = helper.make_tensor("stray", TensorProto.FLOAT, [1], [1.0])
    stray.external_data.add(key="location", value="not-external.bin")
    model.graph.initializer.append(stray)
    found = graft_client.external_locations(model.SerializeToString())
    assert found == ["cond.bin", "fn.bin", "then/deep.bin"]


def test_models_without_locations_are_not_scanned():
    assert graft_client.external_locations(conv_bn_model(seed=402).SerializeToString()) == []
    assert graft_client.external_locations(b"\xff\xff not a model at all") == []


def test_malformed_or_too_deep_bytes_are_invalid_models():
    with pytest.raises(graft_client.InvalidModelError):
        graft_client.external_locations(b"\x3a\x7flocation")  # a length past the end

    def field(number, payload):
        key = bytes([(number << 3) | 2])
        n, length = len(payload), b""
        while True:
            length += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
            n >>= 7
            if not n:
                break
        return key + length + payload

    graph = field(5, field(8, b"location"))  # graph { initializer { name: "location" } }
    for _ in range(200):  # node { attribute { g { ... } } }, far deeper than protobuf parses
        graph = field(1, field(5, field(6, graph)))
    with pytest.raises(graft_client.InvalidModelError):
        graft_client.external_locations(field(7, graph))
    graph = field(5, field(8, b"location"))
    for _ in range(20):
        graph = field(1, field(5, field(6, graph)))
    assert graft_client.external_locations(field(7, graph)) == []


def test_check_location():
    assert graft_client.check_location("a/b.bin") == "a/b.bin"
    for bad in ["", "/abs", "a//b", "a/", "./a", "a/../b", "..", "a\\b", "a\nb", "x" * 256,
                "a/" * 2048 + "b", b"\xff.bin"]:
        with pytest.raises(graft_client.ExternalDataError):
            graft_client.check_location(bad)
    assert graft_client.external_locations(
        with_location(conv_bn_model(seed=403), "w.bin").SerializeToString()) == ["w.bin"]
    with pytest.raises(graft_client.ExternalDataError, match="may not leave"):
        graft_client.external_locations(
            with_location(conv_bn_model(seed=403), "../w.bin").SerializeToString())
    onnx.checker.check_model(conv_bn_model(seed=403))
