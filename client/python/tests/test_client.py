"""graft_client against a real graftd (see conftest.py)."""

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import grpc
import numpy
import onnx
import pytest

import graft_client
from graft_client import graft_pb2
from models import (conv_bn_bytes, conv_bn_model, conv_relu_bytes, external_model, node_count,
                    relu_pool_bytes, save_with_external_data, with_location)

UNREACHABLE = "127.0.0.1:1"  # nothing listens there: a call would fail UNAVAILABLE


def check_optimized(result, original):
    model = onnx.load_from_string(result.model_bytes)
    onnx.checker.check_model(model)
    assert len(result.model_bytes) < len(original)
    assert node_count(result.model_bytes) < node_count(original)
    assert result.report.input_sha256 == hashlib.sha256(original).hexdigest()
    assert result.report.output_sha256 == hashlib.sha256(result.model_bytes).hexdigest()
    assert result.report.nodes_before == 5
    assert result.report.nodes_after == len(model.graph.node)


def test_optimize_path_gives_a_valid_smaller_model(client, tmp_path):
    original = conv_bn_bytes(seed=101)
    path = tmp_path / "model.onnx"
    path.write_bytes(original)
    result = client.optimize(path)
    check_optimized(result, original)
    assert not result.cache_hit and not result.lookup_hit
    assert result.uploaded_bytes == len(original)
    assert result.input_sha256 == hashlib.sha256(original).hexdigest()
    assert [p.name for p in result.report.passes if p.changed_runs > 0]  # something ran
    assert result.report_dict()["input_sha256"] == result.input_sha256
    # proto3's JSON mapping: 64-bit integers are strings.
    assert json.loads(result.report_json())["nodes_before"] == "5"


def test_optimize_bytes_gives_a_valid_smaller_model(client):
    original = conv_bn_bytes(seed=102)
    result = client.optimize(original, level="O1")
    check_optimized(result, original)
    assert result.uploaded_bytes == len(original)


def test_second_identical_call_is_a_lookup_hit_without_upload(client):
    original = conv_bn_bytes(seed=103)
    first = client.optimize(original)
    assert not first.lookup_hit and first.uploaded_bytes == len(original)
    second = client.optimize(original)
    assert second.lookup_hit and second.cache_hit
    assert second.uploaded_bytes == 0
    assert second.model_bytes == first.model_bytes
    assert client.is_cached(original)
    assert client.lookup(sha256=first.input_sha256).model_bytes == first.model_bytes
    # Another configuration is another cache entry.
    assert not client.is_cached(original, level="O1")
    assert client.lookup(original, level="O1") is None


def test_options_spelt_differently_share_the_cache_entry(client):
    original = conv_bn_bytes(seed=104)
    client.optimize(original, pass_options={"fold_constants": {"max_bytes": "1KiB"}})
    again = client.optimize(original, pass_options={"fold_constants": {"max_bytes": 1024}})
    assert again.lookup_hit and again.uploaded_bytes == 0


def test_lookup_first_false_uploads(client):
    original = conv_bn_bytes(seed=105)
    client.optimize(original)
    result = client.optimize(original, lookup_first=False)
    assert not result.lookup_hit
    assert result.uploaded_bytes == len(original)
    assert result.cache_hit  # the server still answers from its cache


def test_model_larger_than_a_chunk_streams_both_ways(client, tmp_path):
    big = conv_bn_model(seed=106)
    # A large initializer no pass removes (a graph input reads it) makes several chunks.
    weights = onnx.numpy_helper.from_array(
        numpy.arange(3 * graft_client.CHUNK_BYTES // 4, dtype="float32"), "big")
    big.graph.initializer.append(weights)
    big.graph.output.append(onnx.helper.make_tensor_value_info("big", 1, [weights.dims[0]]))
    original = big.SerializeToString()
    assert len(original) > 2 * graft_client.CHUNK_BYTES
    seen = []
    result = client.optimize(original, lookup_first=False,
                             progress=lambda up, done, total: seen.append((up, done, total)))
    onnx.checker.check_model(onnx.load_from_string(result.model_bytes))
    uploads = [s for s in seen if s[0]]
    chunks = -(-len(original) // graft_client.CHUNK_BYTES)
    assert [s[1] for s in uploads] == [min(len(original), (i + 1) * graft_client.CHUNK_BYTES)
                                       for i in range(chunks)]
    assert uploads[-1][1] == result.uploaded_bytes
    # The server sends 1 MiB chunks too: several messages, reassembled.
    assert len([s for s in seen if not s[0]]) == -(-len(result.model_bytes) // (1 << 20))


def test_bad_model_bytes_are_invalid_argument(client):
    with pytest.raises(graft_client.InvalidModelError) as e:
        client.optimize(b"this is not an onnx model")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "invalid model" in e.value.details
    with pytest.raises(graft_client.InvalidArgumentError) as e:
        client.optimize(b"")
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    # Bytes that mention external data are scanned here, and refused before any call.
    with graft_client.Client(UNREACHABLE) as nowhere:
        with pytest.raises(graft_client.InvalidModelError):
            nowhere.optimize(b"\x3a\x10location\xff\xff")


def test_unknown_pass_and_option_are_clear_errors(client):
    model = conv_bn_bytes(seed=107)
    with pytest.raises(graft_client.InvalidArgumentError) as e:
        client.optimize(model, passes=["eliminate_identity", "no_such_pass"])
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown pass 'no_such_pass'" in e.value.details
    assert "fuse_conv_batchnorm" in e.value.details  # lists the valid ones
    with pytest.raises(graft_client.InvalidArgumentError) as e:
        client.optimize(model, pass_options={"fold_constants": {"no_such_option": "1"}})
    assert "no_such_option" in e.value.details
    with pytest.raises(graft_client.InvalidArgumentError) as e:
        client.optimize(model, lookup_first=False, pass_options={"fold_constants": {"max_bytes": "x"}})
    assert "fold_constants.max_bytes" in e.value.details
    # Checked here, before any call: a ValueError too.
    with graft_client.Client(UNREACHABLE) as nowhere:
        with pytest.raises(ValueError, match="level must be"):
            nowhere.optimize(model, level="O9")


def test_target_reaches_the_server_and_its_report(client):
    """target and target_opset travel in the config; the report names the target; bad values
    are the server's INVALID_ARGUMENT (or refused here, before any call, for wrong types)."""
    model = conv_bn_bytes(seed=109)
    result = client.optimize(model, target="onnxruntime:1.17", lookup_first=False)
    assert result.report.target == "onnxruntime:1.17"
    assert client.optimize(model, lookup_first=False).report.target == "onnx"
    with pytest.raises(graft_client.InvalidArgumentError) as e:
        client.optimize(model, target="tensorrt", lookup_first=False)
    assert "unknown target 'tensorrt'" in e.value.details
    with pytest.raises(graft_client.InvalidArgumentError) as e:
        client.optimize(model, target_opset=99, lookup_first=False)
    assert "target_opset must be 13..23" in e.value.details
    with graft_client.Client(UNREACHABLE) as nowhere:
        with pytest.raises(ValueError, match="target must be"):
            nowhere.optimize(model, target=17)
        with pytest.raises(ValueError, match="target_opset must be"):
            nowhere.optimize(model, target_opset="17")


def test_deadline_exceeded_maps_to_its_exception(client):
    model = conv_bn_bytes(seed=108)

    def stall(upload, done, total):
        if upload:
            time.sleep(3)  # the upload stops past the deadline

    with pytest.raises(graft_client.DeadlineExceededError) as e:
        client.optimize(model, lookup_first=False, timeout=0.5, progress=stall)
    assert e.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert isinstance(e.value, TimeoutError)


def test_unreachable_server_is_unavailable():
    with graft_client.Client(UNREACHABLE, timeout=10) as nowhere:
        with pytest.raises(graft_client.UnavailableError) as e:
            nowhere.health()
    assert e.value.code == grpc.StatusCode.UNAVAILABLE


def test_external_data_round_trip(client, tmp_path):
    # Pinned: an initializer that is also a graph output keeps the optimized model referring to
    # the file (the passes read and fold the other external weights).
    src = tmp_path / "src"
    src.mkdir()
    model = conv_bn_model(seed=109)
    _, original, weights = external_model(src, seed=109, location="data/weights.bin", pinned=True)
    assert graft_client.external_locations(original) == ["data/weights.bin"]

    result = client.optimize(src / "model.onnx")
    assert not result.lookup_hit  # a new model: the lookup missed
    assert result.uploaded_bytes == len(original) + len(weights)
    assert result.input_sha256 == graft_client.input_digest(
        hashlib.sha256(original).hexdigest(),
        [("data/weights.bin", len(weights), hashlib.sha256(weights).hexdigest())])
    assert result.input_sha256 == graft_client.model_digest(src / "model.onnx")
    # The weights are the input's, unchanged: the report says so (or, from a server that sends
    # every file back, the client sees the bytes are the same).
    [file] = result.external_files
    assert (file.name, file.size, file.from_input) == ("data/weights.bin", len(weights), True)
    assert file.sha256 == hashlib.sha256(weights).hexdigest()
    assert file.read() == weights
    assert [(f.name, f.size) for f in result.report.external_files] == [
        ("data/weights.bin", len(weights))]
    assert node_count(result.model_bytes) < node_count(original)

    out = tmp_path / "out" / "model.onnx"
    out.parent.mkdir()
    result.save(out)
    assert (out.parent / "data" / "weights.bin").read_bytes() == weights
    onnx.checker.check_model(str(out))
    loaded = onnx.load(str(out))  # reads the external data back
    assert len(loaded.graph.node) < len(model.graph.node)

    # Bytes need the folder their locations are relative to.
    with pytest.raises(graft_client.InvalidArgumentError, match="external_data_dir"):
        client.optimize(original)
    again = client.optimize(original, external_data_dir=src, keep_external_files=False)
    assert again.model_bytes == result.model_bytes
    assert [(f.name, f.from_input, f.kept) for f in again.external_files] == [
        ("data/weights.bin", True, True)]  # the input's file: copied from src on save


@pytest.mark.parametrize("location, why", [
    ("../outside.bin", "may not leave the folder"),
    ("/etc/passwd", "absolute path"),
    ("a/./b.bin", "'.' component"),
    ("a\\b.bin", "backslash"),
])
def test_external_locations_escaping_the_folder_are_refused(tmp_path, location, why):
    path = tmp_path / "model.onnx"
    path.write_bytes(with_location(conv_bn_model(seed=110), location).SerializeToString())
    with graft_client.Client(UNREACHABLE) as nowhere:  # refused before any call
        with pytest.raises(graft_client.ExternalDataError, match=why) as e:
            nowhere.optimize(path)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_external_data_symlink_is_refused(tmp_path):
    model = conv_bn_model(seed=111)
    save_with_external_data(model, tmp_path / "model.onnx", "weights.bin")
    (tmp_path / "weights.bin").rename(tmp_path / "real.bin")
    (tmp_path / "weights.bin").symlink_to(tmp_path / "real.bin")
    with graft_client.Client(UNREACHABLE) as nowhere:
        with pytest.raises(graft_client.ExternalDataError, match="symbolic link"):
            nowhere.optimize(tmp_path / "model.onnx")
    (tmp_path / "weights.bin").unlink()
    with graft_client.Client(UNREACHABLE) as nowhere:
        with pytest.raises(FileNotFoundError, match="weights.bin"):
            nowhere.optimize(tmp_path / "model.onnx")


def test_explain_says_why_a_rule_did_not_rewrite(client):
    from models import near_miss_layer_norm_bytes
    result = client.optimize(near_miss_layer_norm_bytes(31), passes=["fuse_blocks"],
                             explain="fuse_blocks/layer_norm", lookup_first=False)
    explained = result.explanations()
    assert len(explained) == 1, explained
    assert explained[0]["pass"] == "fuse_blocks"
    assert explained[0]["rule"] == "layer_norm"
    assert explained[0]["node"] == "/ln/Div"
    assert "epsilon is not a constant" in explained[0]["reason"]
    assert "/ln/Add" in explained[0]["reason"]
    # An unknown rule is refused before any work, naming the valid ones.
    with pytest.raises(graft_client.InvalidArgumentError, match="its rules: layer_norm"):
        client.optimize(near_miss_layer_norm_bytes(32), passes=["fuse_blocks"],
                        explain=["fuse_blocks/nope"], lookup_first=False)


def test_lossy_passes_are_held_to_their_gate(client):
    from models import conv_bn_bytes
    result = client.optimize(conv_bn_bytes(41), passes=["convert_fp16"], lookup_first=False)
    trials = result.lossy_trials()
    assert len(trials) == 1, trials
    assert trials[0]["pass"] == "convert_fp16"
    assert trials[0]["measured"] and trials[0]["kept"], trials
    assert trials[0]["gate"] == {"max_rel": 0.01, "min_cosine": 0.9995}
    assert trials[0]["verdict"].startswith("accepted (error rel ")
    assert trials[0]["errors"] and trials[0]["errors"][0]["rel"] < 0.01
    # A bound float16 cannot meet rolls the pass back.
    strict = client.optimize(conv_bn_bytes(41), passes=["convert_fp16"], max_error=0,
                             lookup_first=False)
    assert not strict.lossy_trials()[0]["kept"]
    assert strict.lossy_trials()[0]["verdict"].startswith("rolled back (error rel ")
    for bad in ({"max_error": -1}, {"max_error": float("nan")}, {"min_cosine": 1.5},
                {"min_cosine": True}):
        with pytest.raises(graft_client.InvalidArgumentError):
            client.optimize(conv_bn_bytes(41), passes=["convert_fp16"], lookup_first=False, **bad)
    passes = {p.name: p for p in client.passes()}
    assert passes["convert_fp16"].gate_max_rel == 0.01
    assert passes["quantize_dynamic_int8"].gate_min_cosine == 0.995


def test_health_and_passes(client):
    assert client.health() == "SERVING"
    passes = {p.name: p for p in client.passes()}
    assert "fuse_conv_batchnorm" in passes and "eliminate_identity" in passes
    assert passes["fuse_conv_batchnorm"].level in (1, 2, 3)
    options = {o.name: o for o in passes["fold_constants"].options}
    assert options["max_bytes"].type == graft_pb2.PassOption.BYTES


def test_results_match_the_cpp_cli_cache_keys(client, tmp_path):
    """The C++ CLI's configs and this client's are the same cache keys, both ways."""
    cli = os.environ.get("GRAFT_CLI", str(Path(__file__).resolve().parents[3] / "build" / "client" / "graft"))
    if not os.access(cli, os.X_OK):
        pytest.fail(f"the graft CLI is not at {cli}: build it or set GRAFT_CLI")
    server = ["--server", client.target]
    a = tmp_path / "a.onnx"
    a.write_bytes(conv_bn_bytes(seed=112))
    run = subprocess.run([cli, "optimize", str(a), "-q", "--level", "O1", "--verify",
                          "--option", "fold_constants.max_bytes=2KiB", *server],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    hit = client.optimize(a, level="O1", verify=True,
                          pass_options={"fold_constants": {"max_bytes": "2KiB"}})
    assert hit.lookup_hit and hit.uploaded_bytes == 0
    assert hit.report.verification.status == graft_pb2.Verification.VERIFIED

    b = tmp_path / "b.onnx"
    b.write_bytes(conv_bn_bytes(seed=113))
    client.optimize(b, passes=["eliminate_identity", "fuse_conv_batchnorm"])
    run = subprocess.run([cli, "lookup", str(b), "--passes", "eliminate_identity,fuse_conv_batchnorm",
                          *server], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "cached" in run.stdout and "not cached" not in run.stdout


def test_verify_runs_on_recorded_input_sets(client, tmp_path):
    """Recorded inputs go as serialized TensorProtos (numpy arrays, TensorProtos or bytes); the
    C++ CLI's --verify-data with the same tensor is the same cache key; a tensor that does not
    fit the model is InvalidArgumentError naming the set and the input."""
    a = tmp_path / "a.onnx"
    a.write_bytes(conv_bn_bytes(seed=114))
    x = numpy.random.default_rng(1).uniform(-1, 1, size=(1, 3, 16, 16)).astype(numpy.float32)
    result = client.optimize(a, verify={"input_sets": [{"X": x}]})
    v = result.report.verification
    assert v.status == graft_pb2.Verification.VERIFIED, v.message
    assert v.message.startswith("1 input set,"), v.message
    again = client.optimize(a, verify={"input_sets": [{"X": onnx.numpy_helper.from_array(x)}]})
    assert again.lookup_hit
    cli = os.environ.get("GRAFT_CLI", str(Path(__file__).resolve().parents[3] / "build" / "client" / "graft"))
    if os.access(cli, os.X_OK):
        data = tmp_path / "input_0.pb"
        data.write_bytes(onnx.numpy_helper.from_array(x, "X").SerializeToString())
        run = subprocess.run([cli, "lookup", str(a), "--verify-data", str(data),
                              "--server", client.target], capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr
    with pytest.raises(graft_client.InvalidArgumentError, match="verify input set 2, input 'X'"):
        client.optimize(a, verify={"input_sets": [{"X": x}, {"X": x[:, :2]}]})
    with pytest.raises(graft_client.InvalidArgumentError, match="at most 16 input sets"):
        client.optimize(a, verify={"input_sets": [{"X": x}] * 17})


def test_calibration_data_sets_the_ranges_and_the_report_says_so(client, tmp_path):
    """calibration_data reaches the lossy passes (the report's calibration line names the
    sets, random inputs otherwise); it is part of the cache key; a set that does not fit the
    model is InvalidArgumentError naming the calibration set and the input."""
    a = tmp_path / "a.onnx"
    a.write_bytes(conv_bn_bytes(seed=115))
    x = numpy.random.default_rng(2).uniform(-1, 1, size=(1, 3, 16, 16)).astype(numpy.float32)
    options = dict(passes=["quantize_static_int8"], accept_unmeasured_error=True,
                   max_error=10, min_cosine=-1)
    given = client.optimize(a, calibration_data=[{"X": x}, {"X": -x}], **options)
    row = [p for p in given.report.passes if p.name == "quantize_static_int8"][0]
    assert row.calibration == "2 calibration sets", row.calibration
    random = client.optimize(a, **options)
    assert not random.lookup_hit
    row = [p for p in random.report.passes if p.name == "quantize_static_int8"][0]
    assert row.calibration.startswith("random inputs"), row.calibration
    with pytest.raises(graft_client.InvalidArgumentError, match="calibration set 2, input 'X'"):
        client.optimize(a, calibration_data=[{"X": x}, {"X": x[:, :2]}], **options)
    with pytest.raises(graft_client.InvalidArgumentError, match="calibration: at most 16"):
        client.optimize(a, calibration_data=[{"X": x}] * 17, **options)


def symbolic_conv_bn_bytes(seed):
    """conv_bn_model with X declared [batch, 3, H, W] and Y [batch, 8, H, W]."""
    model = conv_bn_model(seed)
    for value in (model.graph.input[0], model.graph.output[0]):
        dims = value.type.tensor_type.shape.dim
        for k, name in ((0, "batch"), (2, "H"), (3, "W")):
            dims[k].dim_param = name
    return model.SerializeToString()


def test_fix_dims_make_inputs_static_and_are_part_of_the_key(client, tmp_path):
    """fix_dims and fix_shapes reach the server (the result's input is static, the report lists
    it), they key the cache as the C++ CLI's --fix-dim does, and a name the model does not have
    is InvalidArgumentError from the server."""
    a = tmp_path / "a.onnx"
    a.write_bytes(symbolic_conv_bn_bytes(seed=116))
    result = client.optimize(a, fix_dims={"batch": 1}, fix_shapes={"X": [1, 3, 16, 16]},
                             verify=True)
    assert result.fixed_inputs() == ["'X': [batch,3,H,W] -> [1,3,16,16]"]
    assert result.report.verification.status == graft_pb2.Verification.VERIFIED
    dims = onnx.load_from_string(result.model_bytes).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [1, 3, 16, 16]
    # The same request is a hit; without fixing it is another entry.
    assert client.is_cached(a, fix_dims={"batch": 1}, fix_shapes={"X": [1, 3, 16, 16]},
                            verify=True)
    assert not client.is_cached(a, verify=True)
    plain = client.optimize(a, fix_dims={"batch": numpy.int64(1)})
    assert not plain.lookup_hit
    assert plain.fixed_inputs() == ["'X': [batch,3,H,W] -> [1,3,H,W]"]
    assert client.lookup(a, fix_dims={"batch": 1}) is not None
    cli = os.environ.get("GRAFT_CLI", str(Path(__file__).resolve().parents[3] / "build" / "client" / "graft"))
    if os.access(cli, os.X_OK):
        run = subprocess.run([cli, "lookup", str(a), "--fix-dim", "batch=1", "--server",
                              client.target], capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr
    with pytest.raises(graft_client.InvalidArgumentError,
                       match="no input dim is named 'seq'; the inputs' dim names: 'H', 'W', "
                             "'batch'"):
        client.optimize(a, fix_dims={"seq": 1}, lookup_first=False)
    with pytest.raises(graft_client.InvalidArgumentError, match="dim 1 is 4, the model declares 3"):
        client.optimize(a, fix_shapes={"X": [1, 4, 16, 16]})


@pytest.mark.parametrize("kwargs, text", [
    ({"fix_dims": {"batch": 0}}, "fix_dims: the size of 'batch' must be 1..2147483648, got 0"),
    ({"fix_dims": {"batch": 2**31 + 1}}, "must be 1..2147483648"),
    ({"fix_dims": {"batch": "1"}}, "fix_dims: the size of 'batch' must be an int"),
    ({"fix_dims": {"batch": True}}, "must be an int"),
    ({"fix_dims": {"batch": 1.0}}, "must be an int"),
    ({"fix_dims": {"": 1}}, "names must be non-empty strings"),
    ({"fix_dims": [("batch", 1)]}, "fix_dims must be a dict"),
    ({"fix_shapes": {"X": "1,3"}}, "the shape of 'X' must be a list of ints"),
    ({"fix_shapes": {"X": 3}}, "the shape of 'X' must be a list of ints"),
    ({"fix_shapes": {"X": [1, -3]}}, "fix_shapes: dim 1 of 'X' must be 1..2147483648"),
    ({"fix_shapes": {"X": [1] * 1025}}, "at most 1024"),
    ({"fix_shapes": [1, 3]}, "fix_shapes must be a dict"),
])
def test_fixed_sizes_are_checked_before_any_call(kwargs, text):
    """Bad fix_dims/fix_shapes are InvalidArgumentError from the client itself: the server
    (unreachable here) is never asked."""
    with graft_client.Client(UNREACHABLE, timeout=10) as nowhere:
        for call in (nowhere.optimize, nowhere.lookup, nowhere.is_cached):
            with pytest.raises(graft_client.InvalidArgumentError) as error:
                call(conv_bn_bytes(seed=117), **kwargs)
            assert text in str(error.value), str(error.value)


def graft_cli():
    """The C++ CLI of this build (GRAFT_CLI), or None when it is not built."""
    cli = os.environ.get("GRAFT_CLI",
                         str(Path(__file__).resolve().parents[3] / "build" / "client" / "graft"))
    return cli if os.access(cli, os.X_OK) else None


def declared_dims(value):
    return [d.dim_value for d in value.type.tensor_type.shape.dim]


def test_io_layout_serves_an_input_in_another_layout(client, tmp_path):
    """io_layout reaches the server: the result reads x in NHWC (its declaration permuted, the
    output's kept), the report says so and counts the Transposes; it keys the cache as the C++
    CLI's --io-layout does (a lower-case layout is the same entry), and a name the model does
    not have is InvalidArgumentError from the server."""
    a = tmp_path / "a.onnx"
    a.write_bytes(conv_relu_bytes(seed=130))
    result = client.optimize(a, io_layout={"x": "NHWC"}, verify=True)
    model = onnx.load_from_string(result.model_bytes)
    onnx.checker.check_model(model)
    assert [v.name for v in model.graph.input] == ["x"]
    assert declared_dims(model.graph.input[0]) == [1, 8, 8, 3]
    assert declared_dims(model.graph.output[0]) == [1, 4, 8, 8]
    changes = result.layout_changes()
    assert len(changes) == 1 and changes[0].startswith("input 'x': NCHW"), changes
    assert changes == list(result.report.layout_changes)
    transposes = sum(n.op_type == "Transpose" for n in model.graph.node)
    assert result.transposes() == (0, transposes) and transposes >= 1
    assert (result.report.transposes_before, result.report.transposes_after) == (0, transposes)
    assert result.report.verification.status == graft_pb2.Verification.VERIFIED
    report = result.report_dict()
    assert report["layout_changes"] == changes
    assert report["transposes_after"] == str(transposes)  # proto3 JSON: int64 as a string
    # The same request is a hit, spelt in lower case too; without the layout another entry.
    assert client.is_cached(a, io_layout={"x": "nhwc"}, verify=True)
    assert not client.is_cached(a, verify=True)
    assert not client.is_cached(a, io_layout={"x": "NHWC"})
    found = client.lookup(a, io_layout={"x": "nhwc"}, verify=True)
    assert found is not None and found.model_bytes == result.model_bytes
    assert found.layout_changes() == changes and found.transposes() == result.transposes()
    plain = client.optimize(a, io_layout={"x": "nhwc"})
    assert not plain.lookup_hit and plain.layout_changes() == changes
    cli = graft_cli()
    if cli:
        run = subprocess.run([cli, "lookup", str(a), "--io-layout", "x=nhwc", "--server",
                              client.target], capture_output=True, text=True)
        assert run.returncode == 0, run.stdout + run.stderr
    # Without io_layout nothing changes, and the counts stay 0.
    unchanged = client.optimize(a)
    assert unchanged.layout_changes() == [] and unchanged.transposes() == (0, 0)
    assert declared_dims(onnx.load_from_string(unchanged.model_bytes).graph.input[0]) == \
        [1, 3, 8, 8]
    with pytest.raises(graft_client.InvalidArgumentError, match="'nope'"):
        client.optimize(a, io_layout={"nope": "NHWC"}, lookup_first=False)
    with pytest.raises(graft_client.InvalidArgumentError, match="'x'"):
        client.optimize(a, io_layout={"x": "NWC"}, lookup_first=False)  # rank 4, not 3


def test_layout_sensitive_ops_take_transposes_through_a_pool(client):
    """layout_sensitive_ops=True (a plain option) adds the pass convert_layout, which takes the
    input's Transpose through GlobalAveragePool so that it cancels the output's: 2 Transposes
    left without it, none with it. An input and an output are both reported, inputs first; the
    option is part of the cache key."""
    model = relu_pool_bytes(seed=131)
    layouts = {"y": "NHWC", "x": "NHWC"}
    default = client.optimize(model, io_layout=layouts, verify=True)
    assert "convert_layout" not in [p.name for p in default.report.passes]
    assert default.transposes() == (0, 2)
    sensitive = client.optimize(model, io_layout=layouts, layout_sensitive_ops=True, verify=True)
    assert not sensitive.lookup_hit
    assert "convert_layout" in [p.name for p in sensitive.report.passes if p.changed_runs]
    assert sensitive.transposes() == (0, 0)
    for result in (default, sensitive):
        assert result.report.verification.status == graft_pb2.Verification.VERIFIED
        changes = result.layout_changes()
        assert len(changes) == 2, changes
        assert changes[0].startswith("input 'x': NCHW [1,4,8,8] -> NHWC [1,8,8,4]"), changes
        assert changes[1].startswith("output 'y': NCHW [1,4,1,1] -> NHWC [1,1,1,4]"), changes
        out = onnx.load_from_string(result.model_bytes)
        assert declared_dims(out.graph.input[0]) == [1, 8, 8, 4]
        assert declared_dims(out.graph.output[0]) == [1, 1, 1, 4]
        assert result.transposes()[1] == sum(n.op_type == "Transpose" for n in out.graph.node)
    assert client.is_cached(model, io_layout=layouts, layout_sensitive_ops=True, verify=True)
    assert client.lookup(model, io_layout=layouts, layout_sensitive_ops=False, verify=True) \
        .model_bytes == default.model_bytes


def test_io_layout_is_upper_cased_into_the_config():
    from graft_client.config import IO_LAYOUTS, MAX_IO_LAYOUTS, pipeline_config
    assert set(IO_LAYOUTS) == {"NHWC", "NCHW", "NWC", "NCW", "NDHWC", "NCDHW"}
    config = pipeline_config(io_layout={"x": "nhwc", "y": "NCdhw", "z": "NWC"})
    assert dict(config.io_layout) == {"x": "NHWC", "y": "NCDHW", "z": "NWC"}
    assert not config.layout_sensitive_ops
    for empty in (None, {}):
        assert len(pipeline_config(io_layout=empty).io_layout) == 0
    many = {f"v{k}": "NCHW" for k in range(MAX_IO_LAYOUTS)}
    assert len(pipeline_config(io_layout=many).io_layout) == MAX_IO_LAYOUTS
    assert pipeline_config(layout_sensitive_ops=True).layout_sensitive_ops
    with pytest.raises(graft_client.InvalidArgumentError, match="layout_sensitive_ops must be a bool"):
        pipeline_config(layout_sensitive_ops="yes")


@pytest.mark.parametrize("io_layout, text", [
    ([("x", "NHWC")], "io_layout must be a dict of input or output name -> layout, got list"),
    ("x=NHWC", "io_layout must be a dict"),
    ({"": "NHWC"}, "io_layout: names must be non-empty strings, got ''"),
    ({1: "NHWC"}, "io_layout: names must be non-empty strings, got 1"),
    ({"x": "HWCN"}, "io_layout: 'x' is given 'HWCN'; layouts: NHWC, NCHW, NWC, NCW, NDHWC, "
                    "NCDHW"),
    ({"x": ""}, "io_layout: 'x' is given ''"),
    ({"x": "nhwc "}, "io_layout: 'x' is given 'nhwc '"),
    ({"x": "\uff4ehwc"}, "layouts: NHWC"),  # a full-width n is not upper-cased to N
    ({"x": 4}, "io_layout: the layout of 'x' must be a string, one of NHWC, NCHW"),
    ({"x": None}, "the layout of 'x' must be a string"),
    ({f"v{k}": "NHWC" for k in range(4097)}, "io_layout: at most 4096 names, got 4097"),
])
def test_io_layout_is_checked_before_any_call(io_layout, text):
    """A bad io_layout is InvalidArgumentError from the client itself: the server (unreachable
    here) is never asked."""
    with graft_client.Client(UNREACHABLE, timeout=10) as nowhere:
        for call in (nowhere.optimize, nowhere.lookup, nowhere.is_cached):
            with pytest.raises(graft_client.InvalidArgumentError) as error:
                call(conv_bn_bytes(seed=117), io_layout=io_layout)
            assert text in str(error.value), str(error.value)


# --- A fake server (fakes.py): what the client sends, and what it does with a hostile answer -


from fakes import chunk, report  # noqa: E402


def test_every_model_call_carries_the_digest_header(fake_server):
    fake, target = fake_server(lambda: [chunk(b"out"), report(b"out")])
    model = conv_bn_bytes(seed=114)
    with graft_client.Client(target, timeout=10) as c:
        result = c.optimize(model)
    assert result.model_bytes == b"out"
    digest = hashlib.sha256(model).hexdigest()
    assert fake.metadata["Lookup"][graft_client.SHA256_METADATA] == digest
    assert fake.metadata["Optimize"][graft_client.SHA256_METADATA] == digest


def test_io_layout_is_sent_and_the_report_read(fake_server):
    """io_layout and layout_sensitive_ops reach Lookup and Optimize as PipelineConfig fields;
    the report's layout_changes and Transpose counts are the Result's, in its JSON and HTML."""
    lines = ["input 'x': NCHW [1,3,8,8] -> NHWC [1,8,8,3]",
             "output 'y': NCHW [1,4,8,8] -> NHWC [1,8,8,4]"]
    fake, target = fake_server(lambda: [chunk(b"out"), report(
        b"out", layout_changes=lines, transposes_before=1, transposes_after=2)])
    with graft_client.Client(target, timeout=10) as c:
        result = c.optimize(conv_bn_bytes(seed=118), io_layout={"x": "nhwc", "y": "NHWC"},
                            layout_sensitive_ops=True)
    for config in (fake.lookups[0].config, fake.starts[0].config):
        assert dict(config.io_layout) == {"x": "NHWC", "y": "NHWC"}
        assert config.layout_sensitive_ops
    assert result.layout_changes() == lines
    assert result.transposes() == (1, 2)
    data = result.report_dict()
    assert (data["layout_changes"], data["transposes_before"], data["transposes_after"]) == \
        (lines, "1", "2")
    assert graft_client.embedded_report(result.report_html())["report"] == data


@pytest.mark.parametrize("answer, error, text", [
    (lambda: [chunk(b"out")], graft_client.DataLossError, "no report"),
    (lambda: [chunk(b"ou"), report(b"out")], graft_client.DataLossError, "announces"),
    (lambda: [chunk(b"out"), graft_pb2.OptimizeResponse(report=graft_pb2.OptimizeReport(
        output_bytes=3, output_sha256="0" * 64))], graft_client.DataLossError, "sha256"),
    (lambda: [chunk(b"out"), chunk(b"x", "../evil"), report(b"out")],
     graft_client.ExternalDataError, "may not leave"),
    (lambda: [chunk(b"out"), chunk(b"x", "other.bin"), report(b"out")],
     graft_client.DataLossError, "does not list"),
])
def test_a_hostile_answer_is_refused(fake_server, answer, error, text):
    _, target = fake_server(answer)
    with graft_client.Client(target, timeout=10) as c:
        with pytest.raises(error, match=text):
            c.optimize(conv_bn_bytes(seed=115))


def test_errors_while_uploading_are_raised_as_themselves(client, tmp_path):
    save_with_external_data(conv_bn_model(seed=116), tmp_path / "model.onnx", "weights.bin")
    weights = tmp_path / "weights.bin"

    def truncate_after_the_model(upload, done, total):
        if upload and done < total:  # the model is sent, its file not yet
            weights.write_bytes(b"")

    with pytest.raises(graft_client.DataLossError, match="ended after 0 of its"):
        client.optimize(tmp_path / "model.onnx", progress=truncate_after_the_model)

    class Stop(Exception):
        pass

    def stop(upload, done, total):
        raise Stop()

    with pytest.raises(Stop):
        client.optimize(conv_bn_bytes(seed=117), progress=stop)


def test_plain_options_follow_their_specs():
    """The plain options are keyword arguments checked as graft.proto's specs say: by type, by
    bounds (as graftd's messages put them), and an unknown name is a TypeError, as for any
    function. lookup and is_cached take them too, so they name the same cache entry."""
    from graft_client.config import PLAIN_OPTIONS, pipeline_config
    assert set(PLAIN_OPTIONS) >= {"max_error", "min_cosine", "accept_unmeasured_error",
                                  "target_opset"}
    config = pipeline_config(target_opset=17, max_error=0.5, accept_unmeasured_error=True)
    assert (config.target_opset, config.max_error, config.accept_unmeasured_error) == \
        (17, 0.5, True)
    assert not config.HasField("min_cosine")
    assert not pipeline_config(max_error=None).HasField("max_error")
    for bad, message in [({"max_error": -1}, "max_error must be a number in [0, 1e+300]"),
                         ({"min_cosine": float("nan")}, "min_cosine must be a number in [-1, 1]"),
                         ({"target_opset": 2**31}, "target_opset must be an int in [0, 2147483647]"),
                         ({"target_opset": 17.0}, "target_opset must be an int"),
                         ({"accept_unmeasured_error": 1}, "accept_unmeasured_error must be a bool")]:
        with pytest.raises(graft_client.InvalidArgumentError) as e:
            pipeline_config(**bad)
        assert message in str(e.value), (bad, str(e.value))
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_erorr'"):
        pipeline_config(max_erorr=0.1)
    for name, (_, spec) in PLAIN_OPTIONS.items():
        assert f"`{name}`" in graft_client.Client.optimize.__doc__, name
    with graft_client.Client(UNREACHABLE) as nowhere:
        with pytest.raises(TypeError):
            nowhere.lookup(b"x", max_erorr=0.1)
        with pytest.raises(ValueError, match="target_opset must be"):
            nowhere.is_cached(b"x", target_opset="17")


def test_gates_are_checked_and_sent():
    """gates={output: "KIND[:THRESHOLD]"} becomes PipelineConfig.output_gates, checked as graftd
    checks them (kind, threshold in [0, 1])."""
    from graft_client.config import pipeline_config
    config = pipeline_config(gates={"boxes": "detection:0.8", "logits": "top1"})
    got = {g.output: (g.kind, g.threshold if g.HasField("threshold") else None)
           for g in config.output_gates}
    assert got == {"boxes": ("detection", 0.8), "logits": ("top1", None)}
    for bad, message in [({"y": "top7"}, "unknown kind 'top7'"),
                         ({"y": "mask:1.5"}, "threshold 1.5 is not in [0, 1]"),
                         ({"y": "mask:x"}, "threshold 'x' is not a number"),
                         ({"": "mask"}, "1..4096 bytes")]:
        with pytest.raises(graft_client.InvalidArgumentError) as e:
            pipeline_config(gates=bad)
        assert message in str(e.value), (bad, str(e.value))


def test_lookup_names_a_result_optimized_with_plain_options(client):
    """A result optimized with target_opset is found by lookup with the same option (the
    option is part of the key), and not without it."""
    model = conv_bn_bytes(seed=113)
    client.optimize(model, target_opset=17, lookup_first=False)
    assert client.is_cached(model, target_opset=17)
    assert not client.is_cached(model)
    found = client.lookup(model, target_opset=17)
    assert found is not None and found.report.input_sha256


def test_verify_ranges_are_checked_and_sent():
    """verify={"ranges": {input: (low, high)}} becomes VerifyConfig.ranges, checked as graftd
    checks them (finite, low <= high)."""
    from graft_client.config import pipeline_config
    config = pipeline_config(verify={"ranges": {"audio": (-0.5, 0.5), "ids": [0, 31999]}})
    got = {name: (r.low, r.high) for name, r in config.verify.ranges.items()}
    assert got == {"audio": (-0.5, 0.5), "ids": (0.0, 31999.0)}
    assert config.verify.enabled
    for bad, message in [({"x": (1, -1)}, "must be LOW <= HIGH"),
                         ({"x": (0, float("inf"))}, "must be LOW <= HIGH"),
                         ({"x": (0,)}, "must be (low, high)"),
                         ({"x": "ab"}, "must be (low, high)")]:
        with pytest.raises(graft_client.InvalidArgumentError) as e:
            pipeline_config(verify={"ranges": bad})
        assert message in str(e.value), (bad, str(e.value))
