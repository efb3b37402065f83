"""examples/registry_hook.py against the real graftd: outputs, idempotence, exit codes."""

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import graft_client
from fakes import chunk, report, sha
from graft_client import graft_pb2
from models import conv_bn_bytes, conv_bn_model, external_model, save_with_external_data

HOOK = Path(__file__).resolve().parents[1] / "examples" / "registry_hook.py"


spec = importlib.util.spec_from_file_location("registry_hook", HOOK)
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)


class Run:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def run_hook(capsys, monkeypatch):
    """Runs the hook's main() in this process (a new interpreter per run would cost more than
    the runs): its exit code and output. argparse errors exit with 2."""
    monkeypatch.delenv("GRAFT_SERVER", raising=False)

    def run(*args):
        capsys.readouterr()
        try:
            code = hook.main([str(a) for a in args])
        except SystemExit as e:
            code = e.code
        out = capsys.readouterr()
        return Run(code, out.out, out.err)

    return run


def test_hook_runs_as_a_script(graftd, tmp_path):
    model = tmp_path / "model.onnx"
    model.write_bytes(conv_bn_bytes(seed=200))
    run = subprocess.run([sys.executable, str(HOOK), "--target", graftd.address, str(model)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith(f"optimized {model} -> model.optimized.onnx")
    assert (tmp_path / "model.optimized.onnx").exists()


def lines_of(run):
    return sorted(run.stdout.splitlines())


def test_hook_optimizes_a_folder_idempotently(graftd, tmp_path, run_hook):
    registry = tmp_path / "registry"
    (registry / "resnet" / "1").mkdir(parents=True)
    (registry / "resnet" / "2").mkdir(parents=True)
    v1 = registry / "resnet" / "1" / "model.onnx"
    v2 = registry / "resnet" / "2" / "model.onnx"
    v1.write_bytes(conv_bn_bytes(seed=201))
    v2.write_bytes(conv_bn_bytes(seed=202))

    first = run_hook("--target", graftd.address, registry)
    assert first.returncode == 0, first.stdout + first.stderr
    assert len(first.stdout.splitlines()) == 2
    assert all(line.startswith("optimized ") for line in first.stdout.splitlines())
    for model in (v1, v2):
        optimized = model.with_name("model.optimized.onnx")
        onnx.checker.check_model(onnx.load(str(optimized)))
        record = json.loads(model.with_name("model.graft.json").read_text())
        assert record["input_sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
        assert record["output_sha256"] == hashlib.sha256(optimized.read_bytes()).hexdigest()
        assert record["report"]["nodes_after"] < record["report"]["nodes_before"]
    stamps = {p: p.stat().st_mtime_ns for p in registry.rglob("*.optimized.onnx")}

    second = run_hook("--target", graftd.address, registry)
    assert second.returncode == 0, second.stdout + second.stderr
    assert [line.split()[0] for line in second.stdout.splitlines()] == ["up-to-date"] * 2
    assert {p: p.stat().st_mtime_ns for p in registry.rglob("*.optimized.onnx")} == stamps

    # A changed model is done again; the other stays as it was.
    v2.write_bytes(conv_bn_bytes(seed=203))
    third = run_hook("--target", graftd.address, registry)
    assert third.returncode == 0, third.stdout + third.stderr
    assert lines_of(third)[0].startswith(f"optimized {v2}")
    assert lines_of(third)[1].startswith(f"up-to-date {v1}")
    record = json.loads(v2.with_name("model.graft.json").read_text())
    assert record["input_sha256"] == hashlib.sha256(v2.read_bytes()).hexdigest()

    # So is a model whose optimized file was damaged, and one asked with another level.
    v1.with_name("model.optimized.onnx").write_bytes(b"damaged")
    fourth = run_hook("--target", graftd.address, v1)
    assert fourth.stdout.startswith(f"optimized {v1}"), fourth.stdout + fourth.stderr
    fifth = run_hook("--target", graftd.address, "--level", "O1", v1)
    assert fifth.stdout.startswith(f"optimized {v1}"), fifth.stdout + fifth.stderr
    assert json.loads(v1.with_name("model.graft.json").read_text())["config"]["level"] == "O1"


def test_hook_keeps_external_data_beside_the_model(graftd, tmp_path, run_hook):
    save_with_external_data(conv_bn_model(seed=204), tmp_path / "big.onnx", "big.weights")
    run = run_hook("--target", graftd.address, tmp_path / "big.onnx")
    assert run.returncode == 0, run.stdout + run.stderr
    optimized = tmp_path / "big.optimized.onnx"
    onnx.checker.check_model(str(optimized))
    assert len(onnx.load(str(optimized)).graph.initializer) > 0  # read from big.weights
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "big.graft.json", "big.onnx", "big.optimized.onnx", "big.weights"]


def test_hook_writes_the_files_the_server_wrote_and_redoes_them(tmp_path, run_hook,
                                                                 fake_server):
    """A result with a file the server wrote (new weights) beside the input's unchanged file:
    written beside the model, recorded, checked on the next run (fake server)."""
    save_with_external_data(conv_bn_model(seed=206), tmp_path / "big.onnx", "big.weights")
    model = (tmp_path / "big.onnx").read_bytes()
    weights = (tmp_path / "big.weights").read_bytes()
    digest = graft_client.input_digest(sha(model), [("big.weights", len(weights), sha(weights))])
    out, new = b"optimized model", b"folded weights"
    answer = [chunk(out), chunk(new, "big.folded"),
              report(out, input_sha256=digest, external_files=[
                  graft_pb2.ExternalFile(name="big.weights", size=len(weights),
                                         sha256=sha(weights), from_input=True),
                  graft_pb2.ExternalFile(name="big.folded", size=len(new), sha256=sha(new))])]
    fake, target = fake_server(lambda: answer)
    weights_stat = (tmp_path / "big.weights").stat()

    first = run_hook("--target", target, tmp_path / "big.onnx")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "wrote 1 external file" in first.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "big.folded", "big.graft.json", "big.onnx", "big.optimized.onnx", "big.weights"]
    assert (tmp_path / "big.folded").read_bytes() == new
    assert (tmp_path / "big.optimized.onnx").read_bytes() == out
    assert (tmp_path / "big.weights").stat().st_ino == weights_stat.st_ino  # left alone
    record = json.loads((tmp_path / "big.graft.json").read_text())
    assert record["input_sha256"] == digest
    assert record["written_files"] == [{"name": "big.folded", "size": len(new), "sha256": sha(new)}]

    second = run_hook("--target", target, tmp_path / "big.onnx")
    assert second.stdout.startswith("up-to-date"), second.stdout + second.stderr
    assert len(fake.starts) == 1

    (tmp_path / "big.folded").write_bytes(b"damaged")
    third = run_hook("--target", target, tmp_path / "big.onnx")
    assert third.stdout.startswith("optimized"), third.stdout + third.stderr
    assert (tmp_path / "big.folded").read_bytes() == new

    # Changed weights change the input digest: done again (and this fake, which answers for
    # the old digest, is caught at it).
    (tmp_path / "big.weights").write_bytes(bytes(len(weights)))
    fourth = run_hook("--target", target, tmp_path / "big.onnx")
    assert fourth.returncode == 1, fourth.stdout + fourth.stderr
    assert "DATA_LOSS: the server answered for another model" in fourth.stdout
    assert [r.model_sha256 == digest for r in fake.lookups] == [True, True, False]


def test_e2e_hook_external_data_is_a_lookup_hit_when_redone(input_digest_server, tmp_path,
                                                            run_hook):
    path, _, _ = external_model(tmp_path, seed=207, location="model.weights")
    first = run_hook("--target", input_digest_server.address, path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "uploaded" in first.stdout
    second = run_hook("--target", input_digest_server.address, "--force", path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "cached, no upload" in second.stdout
    optimized = tmp_path / "model.optimized.onnx"
    onnx.checker.check_model(str(optimized))
    assert len(onnx.load(str(optimized)).graph.initializer) > 0
    record = json.loads((tmp_path / "model.graft.json").read_text())
    assert record["input_sha256"] == graft_client.model_digest(path)
    third = run_hook("--target", input_digest_server.address, path)
    assert third.stdout.startswith("up-to-date"), third.stdout + third.stderr


def test_hook_exit_codes(graftd, tmp_path, run_hook):
    good = tmp_path / "good.onnx"
    good.write_bytes(conv_bn_bytes(seed=205))
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    run = run_hook("--target", graftd.address, tmp_path)
    assert run.returncode == 1  # one failed, the other was still done
    assert f"FAILED {bad}: INVALID_ARGUMENT: invalid model" in run.stdout
    assert f"optimized {good}" in run.stdout
    assert not (tmp_path / "bad.optimized.onnx").exists()

    assert run_hook("--target", graftd.address, tmp_path / "missing.onnx").returncode == 2
    assert run_hook("--target", graftd.address, "--level", "O7", good).returncode == 2
    assert run_hook(good).returncode == 2  # no --target, and GRAFT_SERVER unset
    unreachable = run_hook("--target", "127.0.0.1:1", "--force", good)
    assert unreachable.returncode == 3, unreachable.stdout + unreachable.stderr
    assert "UNAVAILABLE" in unreachable.stdout
