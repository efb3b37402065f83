"""`pip install ./client/python` into a fresh venv, offline, and the installed package at work.

The venv is made with --system-site-packages (Debian's python3-grpcio and python3-protobuf) and
pip may not reach an index (--no-index, PIP_NO_INDEX=1, a short --timeout, no pip config): the
package must build with its in-tree backend alone. Then, with the venv's python, from a folder
outside the source tree and without PYTHONPATH, so that only the installed copy can be imported,
against a real graftd (GRAFTD, as client/python/tests/conftest.py starts it): the registry-hook
example, `python -m graft_client optimize` with --report-html, and its exit codes for an
unreachable server and a bad model. ctest runs this as python_client_install.
"""

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import onnx
import pytest

HERE = Path(__file__).resolve().parent
SOURCE_DIR = Path(os.environ.get("GRAFT_SOURCE_DIR", HERE.parents[2]))
PACKAGE_DIR = SOURCE_DIR / "client" / "python"
sys.path.insert(0, str(PACKAGE_DIR / "tests"))  # the models helper (numpy and onnx only)

from graftd_process import GraftdProcess  # noqa: E402
from models import conv_bn_model  # noqa: E402

RUN_TIMEOUT = 60


def venv_env(**extra):
    """The environment of every command run in the venv: nothing from the caller's Python or pip
    settings, no index, no network waits."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update(PYTHONNOUSERSITE="1", PYTHONDONTWRITEBYTECODE="1", PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_CONFIG_FILE=os.devnull, PIP_NO_INPUT="1",
               PIP_TIMEOUT="3", PIP_RETRIES="0", **extra)
    return env


def source_files():
    """Every file below client/python, to check that building there writes nothing into it
    (build/, dist/, *.egg-info; bytecode caches, which other runs may write, aside)."""
    return sorted(str(p.relative_to(PACKAGE_DIR)) for p in PACKAGE_DIR.rglob("*")
                  if not {"__pycache__", ".pytest_cache"} & set(p.parts))


def cmake_version():
    text = (SOURCE_DIR / "CMakeLists.txt").read_text(encoding="utf-8")
    return re.search(r"project\(graft VERSION ([0-9.]+)", text).group(1)


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("venv")
    work = tmp_path_factory.mktemp("work")  # the current folder of every run: outside the tree
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(root)],
                   env=venv_env(), check=True, timeout=RUN_TIMEOUT)
    python = root / "bin" / "python"
    before = source_files()
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", "--timeout", "3", "--no-cache-dir",
         str(PACKAGE_DIR)],
        cwd=work, env=venv_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert pip.returncode == 0, f"pip install failed:\n{pip.stdout}\n{pip.stderr}"
    assert source_files() == before, "building the package wrote into client/python"
    return root, python, work


def run(venv, *args, cwd=None, stdin=None):
    _, python, work = venv
    return subprocess.run([str(python), *map(str, args)], cwd=cwd or work, env=venv_env(),
                          capture_output=True, text=True, timeout=RUN_TIMEOUT, stdin=stdin)


class Graftd(GraftdProcess):
    def __init__(self, venv):
        super().__init__(SOURCE_DIR, "--workers", "2")
        # The installed CLI's health command: exit 0 once the server is serving.
        for _ in range(50):
            if run(venv, "-m", "graft_client", "health", "--server", self.address,
                   "--timeout", "2").returncode == 0:
                return
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"graftd never reported SERVING:\n{self.log_text()}")


@pytest.fixture(scope="module")
def graftd(venv):
    server = Graftd(venv)
    yield server
    server.stop()


def test_installed_package_is_imported_from_the_venv(venv):
    root, _, work = venv
    r = run(venv, "-c", "import graft_client, graft_client._stubs as s, graft_client.__main__; "
                        "print(graft_client.__file__); print(s.graft_pb2.__file__); "
                        "print(graft_client.__version__)")
    assert r.returncode == 0, r.stderr
    package_file, stub_file, version = r.stdout.split("\n")[:3]
    site = root.resolve()
    assert Path(package_file).resolve().is_relative_to(site), package_file
    assert Path(stub_file).resolve().is_relative_to(site), stub_file
    assert version == cmake_version()
    installed = Path(package_file).parent
    template = installed / "report_template.html"
    assert template.is_file() and not template.is_symlink()
    assert template.read_bytes() == (SOURCE_DIR / "common" / "report_template.html").read_bytes()
    # The console script, installed by the wheel's entry point.
    script = subprocess.run([str(root / "bin" / "graft-client"), "--version"], cwd=work,
                            env=venv_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert script.returncode == 0 and script.stdout.strip() == f"graft_client {cmake_version()}"


def test_registry_hook_example(venv, graftd):
    _, _, work = venv
    models = work / "registry" / "conv_bn" / "3"
    models.mkdir(parents=True)
    onnx.save_model(conv_bn_model(7001), str(models / "model.onnx"))
    hook = PACKAGE_DIR / "examples" / "registry_hook.py"
    r = run(venv, hook, "--target", graftd.address, "--level", "O2", work / "registry")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("optimized "), r.stdout
    optimized = models / "model.optimized.onnx"
    onnx.checker.check_model(onnx.load(str(optimized)))
    record = json.loads((models / "model.graft.json").read_text(encoding="utf-8"))
    assert record["output_sha256"] == hashlib.sha256(optimized.read_bytes()).hexdigest()
    again = run(venv, hook, "--target", graftd.address, "--level", "O2", work / "registry")
    assert again.returncode == 0 and again.stdout.startswith("up-to-date "), again.stdout


def test_cli_optimize_writes_a_valid_model_and_reports(venv, graftd):
    _, _, work = venv
    model = work / "cli_model.onnx"
    onnx.save_model(conv_bn_model(7002), str(model))
    out, page, report = work / "cli_out.onnx", work / "report.html", work / "report.json"
    r = run(venv, "-m", "graft_client", "optimize", model, "-o", out, "--server",
            graftd.address, "--level", "O2", "--verify", "--report-html", page,
            "--report-json", report)
    assert r.returncode == 0, r.stderr
    assert r.stderr.startswith("graft_client: ") and r.stderr.count("\n") == 1, r.stderr
    optimized = onnx.load(str(out))
    onnx.checker.check_model(optimized)
    assert len(optimized.graph.node) < len(onnx.load(str(model)).graph.node)

    html = page.read_text(encoding="utf-8")
    assert "@GRAFT_REPORT_JSON@" not in html
    start = html.index('<script id="graft-report" type="application/json">')
    start = html.index(">", start) + 1
    embedded = json.loads(html[start:html.index("</script>", start)])
    assert embedded["format"] == "graft.v1.OptimizeReport"
    assert embedded["report"]["output_sha256"] == hashlib.sha256(out.read_bytes()).hexdigest()
    assert embedded["report"]["verification"]["status"] == "VERIFIED"
    assert embedded["report"] == json.loads(report.read_text(encoding="utf-8"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_cli_exit_codes(venv, graftd):
    _, _, work = venv
    model = work / "codes.onnx"
    onnx.save_model(conv_bn_model(7003), str(model))
    unreachable = run(venv, "-m", "graft_client", "optimize", model, "-o", work / "x.onnx",
                      "--server", f"127.0.0.1:{free_port()}", "--timeout", "10")
    assert unreachable.returncode == 6, unreachable.stderr
    assert unreachable.stderr.startswith("graft_client: UNAVAILABLE: ")
    assert unreachable.stderr.count("\n") == 1
    assert not (work / "x.onnx").exists()

    bad = work / "bad.onnx"
    bad.write_bytes(b"\x08\x07this is not an ONNX model\xff\xff")
    r = run(venv, "-m", "graft_client", "optimize", bad, "-o", work / "y.onnx", "--server",
            graftd.address)
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("graft_client: INVALID_ARGUMENT: ") and "invalid model" in r.stderr
    assert not (work / "y.onnx").exists()

    usage = run(venv, "-m", "graft_client", "optimize", model, "--server", graftd.address,
                "--level", "O7")
    assert usage.returncode == 2, usage.stderr
