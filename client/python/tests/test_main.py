"""python3 -m graft_client: the command line for hooks without a shell, its outputs, its exit
codes (graft's) and its one-line, terminal-safe errors."""

import hashlib
import json
import socket
import subprocess
import sys
from concurrent import futures

import grpc
import onnx
import pytest

import graft_client
from graft_client import __main__ as cli
from graft_client._stubs import graft_pb2_grpc
from graft_client.errors import error_for
from models import conv_bn_bytes, conv_bn_model, conv_relu_bytes


def run_module(*args, stdin=None, cwd=None):
    """The real `python -m graft_client`, in a child process (PYTHONPATH as this one's)."""
    return subprocess.run([sys.executable, "-m", "graft_client", *map(str, args)],
                          input=stdin, capture_output=True, timeout=120, cwd=cwd)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def model(tmp_path):
    def make(seed):
        path = tmp_path / f"model_{seed}.onnx"
        onnx.save_model(conv_bn_model(seed), str(path))
        return path
    return make


def test_help_and_version():
    r = run_module("--help")
    assert r.returncode == 0 and b"optimize" in r.stdout and b"exit codes:" in r.stdout
    assert b"python3 -m graft_client" in r.stdout
    r = run_module("--version")
    assert r.returncode == 0
    assert r.stdout.decode().strip() == f"graft_client {graft_client.__version__}"

def test_subcommand_help_and_usage(capsys):
    code, out, _ = run_main(capsys, "optimize", "--help")
    assert code == 0 and "--report-html" in out and "--tls-ca" in out and "exit codes:" in out
    code, _, err = run_main(capsys)
    assert code == 2 and "usage:" in err


def test_optimize_writes_model_and_reports(graftd, model, tmp_path):
    source = model(8201)
    out, page, report = tmp_path / "out.onnx", tmp_path / "r.html", tmp_path / "r.json"
    r = run_module("optimize", source, "-o", out, "--server", graftd.address, "--level", "O2",
                   "--verify", "--report-json", report, "--report-html", page)
    assert r.returncode == 0, r.stderr
    line = r.stderr.decode()
    assert line.startswith("graft_client: ") and line.count("\n") == 1
    assert "verification VERIFIED" in line and "uploaded" in line
    optimized = out.read_bytes()
    onnx.checker.check_model(onnx.load_from_string(optimized))
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["output_sha256"] == hashlib.sha256(optimized).hexdigest()
    assert graft_client.embedded_report(page.read_text(encoding="utf-8")) == {
        "format": "graft.v1.OptimizeReport", "report": data}
    # Again: the server's cache answers the lookup, nothing is uploaded.
    r = run_module("optimize", source, "-o", out, "--server", graftd.address, "--verify", "-q")
    assert r.returncode == 0 and r.stderr == b""
    assert out.read_bytes() == optimized


def test_standard_input_and_output(graftd):
    data = conv_bn_bytes(8202)
    r = run_module("optimize", "-", "-o", "-", "--server", graftd.address, "-q", stdin=data)
    assert r.returncode == 0, r.stderr
    onnx.checker.check_model(onnx.load_from_string(r.stdout))
    assert len(r.stdout) < len(data)
    # A dry run: the report only.
    r = run_module("optimize", "-", "--report-json", "-", "--server", graftd.address, "-q",
                   stdin=data)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["output_bytes"] != "0"


def run_main(capsys, *args):
    """cli.main in this process (faster than a child): (exit code, stdout, stderr)."""
    try:
        code = cli.main([str(a) for a in args])
    except SystemExit as e:  # argparse
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def test_exit_codes(graftd, model, tmp_path, capsys):
    source = model(8203)
    out = tmp_path / "never.onnx"
    cases = [
        # (arguments, exit code, start of the message)
        (["--server", f"127.0.0.1:{free_port()}"], 6, "graft_client: UNAVAILABLE: "),
        (["--server", graftd.address, "--level", "O9"], 2, "graft_client: INVALID_ARGUMENT: "),
        (["--server", graftd.address, "--passes", "no_such_pass"], 2,
         "graft_client: INVALID_ARGUMENT: "),
        (["--server", graftd.address, "--passes", "fold_constants", "--level", "O1"], 2,
         "graft_client: --passes replaces --level"),
        (["--server", graftd.address, "--option", "nodot=1"], 2, "graft_client: --option must"),
        (["--server", graftd.address, "--fix-dim", "batch=x"], 2, "graft_client: --fix-dim: "),
        (["--server", ""], 2, "graft_client: say which server"),
        (["--server", graftd.address, "--tls-ca", tmp_path / "missing.pem"], 4,
         "graft_client: '"),
        (["--server", graftd.address, "--timeout", "0"], 2, "usage: "),
    ]
    for args, code, start in cases:
        got, _, err = run_main(capsys, "optimize", source, "-o", out, *args)
        assert got == code, (args, err)
        assert err.startswith(start), (args, err)
        assert not out.exists()
    code, _, err = run_main(capsys, "optimize", tmp_path / "missing.onnx", "--server",
                            graftd.address)
    assert code == 4 and "No such file or directory" in err
    code, _, err = run_main(capsys, "optimize", source, "-o", tmp_path / "no" / "such" / "f.onnx",
                            "--server", graftd.address)
    assert code == 4, err
    # The real module too: a bad model is exit 3, the server's message on one line.
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07not an ONNX model\xff")
    r = run_module("optimize", bad, "-o", out, "--server", graftd.address)
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith(b"graft_client: INVALID_ARGUMENT: invalid model")
    assert r.stderr.count(b"\n") == 1


def test_health(graftd):
    r = run_module("health", "--server", graftd.address)
    assert r.returncode == 0 and r.stdout == b"SERVING\n"
    r = run_module("health", "--server", f"127.0.0.1:{free_port()}", "--timeout", "5")
    assert r.returncode == 6 and r.stderr.startswith(b"graft_client: UNAVAILABLE: ")


def test_server_from_the_environment(graftd, model, capsys, monkeypatch):
    monkeypatch.setenv("GRAFT_SERVER", graftd.address)
    code, out, err = run_main(capsys, "health")
    assert (code, out, err) == (0, "SERVING\n", "")
    monkeypatch.delenv("GRAFT_SERVER")
    code, _, err = run_main(capsys, "optimize", model(8206))
    assert code == 2 and err.startswith("graft_client: say which server")


@pytest.mark.parametrize("code, expected", [
    ("INVALID_ARGUMENT", 2), ("UNAVAILABLE", 6), ("DEADLINE_EXCEEDED", 6),
    ("RESOURCE_EXHAUSTED", 6), ("CANCELLED", 6), ("INTERNAL", 5), ("DATA_LOSS", 5),
    ("FAILED_PRECONDITION", 5), ("UNAUTHENTICATED", 5), ("PERMISSION_DENIED", 5),
    ("NOT_FOUND", 5), ("UNIMPLEMENTED", 5), ("UNKNOWN", 5)])
def test_status_codes_map_as_graft_maps_them(code, expected):
    """client/cli/options.cc remote_exit_code."""
    assert cli.exit_code(error_for(grpc.StatusCode[code], "message")) == expected


def test_model_errors_are_exit_3():
    for details in ("invalid model: not a serialized ONNX ModelProto",
                    "invalid external data location '../x': leaves the folder"):
        assert cli.exit_code(error_for(grpc.StatusCode.INVALID_ARGUMENT, details)) == 3


def test_terminal_safe():
    assert cli.terminal_safe("plain text, é 中") == "plain text, é 中"
    assert (cli.terminal_safe("a\x1b[31mb\nc\rd\x7f\x9b\x00")
            == "a\\x1b[31mb\\x0ac\\x0dd\\x7f\\x9b\\x00")
    assert cli.terminal_safe("x\u2028y\u202ez\udcff") == "x\\u2028y\\u202ez\\udcff"


class _Hostile(graft_pb2_grpc.GraftServicer):
    """Fails every Lookup with a message full of terminal escapes."""

    def Lookup(self, request, context):
        context.abort(grpc.StatusCode.INTERNAL, "bad\x1b]0;title\x07\nsecond line\x1b[2J")


def test_a_servers_message_is_one_escaped_line(tmp_path):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    graft_pb2_grpc.add_GraftServicer_to_server(_Hostile(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        path = tmp_path / "m.onnx"
        path.write_bytes(conv_bn_bytes(8204))
        r = run_module("optimize", path, "--server", f"127.0.0.1:{port}")
    finally:
        server.stop(None)
    assert r.returncode == 5
    assert r.stderr == (b"graft_client: INTERNAL: bad\\x1b]0;title\\x07\\x0asecond "
                        b"line\\x1b[2J\n")


def test_main_returns_the_code_in_process(graftd, model, tmp_path, capsys):
    out = tmp_path / "o.onnx"
    assert run_main(capsys, "optimize", model(8205), "-o", out, "--server", graftd.address,
                    "-q") == (0, "", "")
    onnx.checker.check_model(onnx.load(str(out)))
    with pytest.raises(SystemExit) as e:
        cli.main(["optimize"])
    assert e.value.code == 2


def test_plain_options_are_flags_from_the_schema(graftd, model, tmp_path):
    """Every plain option (graft.proto's field specs) is a flag with its spec's help, and the
    flag reaches the server: --target-opset raises the opset of the result."""
    from graft_client.config import PLAIN_OPTIONS
    help_text = run_module("optimize", "--help").stdout.decode()
    flags = [spec.flag for _, spec in PLAIN_OPTIONS.values() if spec.flag]
    assert "target-opset" in flags and "accept-unmeasured-error" in flags
    for flag in flags:
        assert f"--{flag}" in help_text, flag
    out = tmp_path / "raised.onnx"
    done = run_module("optimize", model(61), "-o", out, "--server", graftd.address,
                      "--target-opset", "17", "--accept-unmeasured-error", "--max-error", "0.5")
    assert done.returncode == 0, done.stderr
    assert onnx.load(str(out)).opset_import[0].version == 17
    bad = run_module("optimize", model(62), "--server", graftd.address, "--min-cosine", "2")
    assert bad.returncode == 2
    assert b"min_cosine must be a number in [-1, 1]" in bad.stderr


def test_io_layout_flags_reach_the_server(fake_server, model, capsys):
    """--io-layout NAME=LAYOUT (repeatable, the layout upper-cased) and --layout-sensitive-ops
    (a plain option's flag) become the PipelineConfig's io_layout and layout_sensitive_ops;
    malformed or contradictory ones are usage errors before any call."""
    from fakes import chunk, report
    fake, target = fake_server(lambda: [chunk(b"out"), report(b"out")])
    source = model(8207)
    code, _, err = run_main(capsys, "optimize", source, "--server", target, "--io-layout",
                            "X=nhwc", "--io-layout", "Y=NHWC", "--io-layout", "X=NHWC",
                            "--layout-sensitive-ops", "-q")
    assert (code, err) == (0, "")
    for config in (fake.lookups[0].config, fake.starts[0].config):
        assert dict(config.io_layout) == {"X": "NHWC", "Y": "NHWC"}
        assert config.layout_sensitive_ops
    code, _, err = run_main(capsys, "optimize", source, "--server", target, "-q")
    assert code == 0 and not fake.lookups[-1].config.io_layout
    assert not fake.lookups[-1].config.layout_sensitive_ops
    calls = len(fake.lookups)
    for args, start in [
            (["--io-layout", "X"], "graft_client: --io-layout must look like NAME=VALUE, got 'X'"),
            (["--io-layout", "=NHWC"], "graft_client: --io-layout must look like NAME=VALUE"),
            (["--io-layout", "X=NHWC", "--io-layout", "X=nchw"],
             "graft_client: --io-layout: 'X' is given two layouts"),
            (["--io-layout", "X=HWCN"], "graft_client: INVALID_ARGUMENT: io_layout: 'X' is given "
                                        "'HWCN'; layouts: NHWC, NCHW, NWC, NCW, NDHWC, NCDHW")]:
        code, _, err = run_main(capsys, "optimize", source, "--server", target, *args)
        assert code == 2, (args, err)
        assert err.startswith(start), (args, err)
    assert len(fake.lookups) == calls  # none of them reached the server


def test_io_layout_end_to_end(graftd, tmp_path):
    """--io-layout against graftd: the written model reads x in NHWC and the JSON report lists
    the change and the Transpose counts."""
    source, out, report = tmp_path / "m.onnx", tmp_path / "out.onnx", tmp_path / "r.json"
    source.write_bytes(conv_relu_bytes(8208))
    r = run_module("optimize", source, "-o", out, "--server", graftd.address, "--io-layout",
                   "x=nhwc", "--report-json", report, "-q")
    assert r.returncode == 0, r.stderr
    optimized = onnx.load(str(out))
    assert [d.dim_value for d in optimized.graph.input[0].type.tensor_type.shape.dim] == \
        [1, 8, 8, 3]
    data = json.loads(report.read_text(encoding="utf-8"))
    assert len(data["layout_changes"]) == 1
    assert data["layout_changes"][0].startswith("input 'x': NCHW")
    assert data["transposes_before"] == "0"
    assert data["transposes_after"] == str(
        sum(n.op_type == "Transpose" for n in optimized.graph.node))
