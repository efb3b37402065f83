"""The pip-installable package (client/python/pyproject.toml): its in-tree build backend's wheel
and sdist, the checked-in generated modules against proto/, and the version against Graft's.
(client/python/install_test installs it into a venv and runs it against graftd.)"""

import base64
import csv
import filecmp
import hashlib
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import graft_client

SOURCE_DIR = Path(os.environ.get("GRAFT_SOURCE_DIR", Path(__file__).resolve().parents[3]))
PACKAGE_DIR = SOURCE_DIR / "client" / "python"
SHIPPED_GEN = PACKAGE_DIR / "graft_client" / "_gen"
TEMPLATE = SOURCE_DIR / "common" / "report_template.html"


def cmake_version():
    text = (SOURCE_DIR / "CMakeLists.txt").read_text(encoding="utf-8")
    return re.search(r"^project\(graft VERSION ([0-9.]+)", text, re.M).group(1)


@pytest.fixture(scope="module")
def backend():
    spec = importlib.util.spec_from_file_location(
        "graft_build", PACKAGE_DIR / "_build_backend" / "graft_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def wheel(backend, tmp_path_factory):
    folder = tmp_path_factory.mktemp("wheel")
    return folder / backend.build_wheel(str(folder))


def tree(folder):
    return sorted(str(p.relative_to(folder)) for p in Path(folder).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts)


def test_version_is_grafts():
    assert graft_client.__version__ == cmake_version(), (
        "graft_client/_version.py and project(graft VERSION ...) in CMakeLists.txt differ: "
        "update client/python/graft_client/_version.py")


def test_shipped_stubs_match_proto(tmp_path):
    """The checked-in graft_client/_gen is what scripts/gen-python-stubs.sh makes of proto/."""
    plugin = os.environ.get("GRPC_PYTHON_PLUGIN") or shutil.which("grpc_python_plugin")
    protoc = os.environ.get("PROTOC") or shutil.which("protoc")
    if not plugin or not protoc:
        pytest.skip("protoc or grpc_python_plugin not found (Debian: protobuf-compiler-grpc)")
    env = dict(os.environ, PROTOC=protoc, GRPC_PYTHON_PLUGIN=plugin,
               GRAFT_PYTHON=os.environ.get("GRAFT_PYTHON", sys.executable))
    r = subprocess.run(["bash", str(SOURCE_DIR / "scripts" / "gen-python-stubs.sh"),
                        str(tmp_path)], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    fresh = tmp_path / "graft_client" / "_gen"
    version = subprocess.run([protoc, "--version"], capture_output=True, text=True).stdout
    fix = ("client/python/graft_client/_gen is stale (proto/ changed?): run "
           f"scripts/gen-python-stubs.sh and commit the result ({version.strip()})")
    assert tree(fresh) == tree(SHIPPED_GEN), fix
    differ = [name for name in tree(fresh)
              if not filecmp.cmp(fresh / name, SHIPPED_GEN / name, shallow=False)]
    assert not differ, f"{', '.join(differ)} differ: {fix}"


def test_build_tree_stubs_equal_shipped_ones():
    """The CMake build generates its own _gen; it must be the checked-in one."""
    imported = Path(graft_client.__file__).resolve().parent / "_gen"
    if imported == SHIPPED_GEN.resolve():
        pytest.skip("graft_client is imported from the source tree")
    assert tree(imported) == tree(SHIPPED_GEN)
    differ = [name for name in tree(SHIPPED_GEN)
              if not filecmp.cmp(imported / name, SHIPPED_GEN / name, shallow=False)]
    assert not differ, (f"the build's {', '.join(differ)} differ from the checked-in ones: run "
                        "scripts/gen-python-stubs.sh")


def test_wheel_is_complete_and_its_record_is_right(backend, wheel):
    version = cmake_version()
    assert wheel.name == f"graft_client-{version}-py3-none-any.whl"
    info = f"graft_client-{version}.dist-info"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        files = {n: z.read(n) for n in names}
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
    assert len(names) == len(set(names))
    # The package: every source module, the generated ones, the template as a regular file.
    sources = sorted(str(p.relative_to(PACKAGE_DIR)) for p in
                     (PACKAGE_DIR / "graft_client").rglob("*.py")
                     if "__pycache__" not in p.parts)
    package = sorted(n for n in names if n.startswith("graft_client/"))
    assert package == sorted(sources + ["graft_client/report_template.html"])
    assert "graft_client/__main__.py" in package
    assert "graft_client/_gen/graft/v1/graft_pb2_grpc.py" in package
    assert files["graft_client/report_template.html"] == TEMPLATE.read_bytes()
    assert all(mode == 0o100644 for mode in modes.values())
    assert sorted(n for n in names if not n.startswith("graft_client/")) == sorted(
        f"{info}/{n}" for n in ["METADATA", "WHEEL", "entry_points.txt", "top_level.txt",
                                "RECORD"])
    assert names[-1] == f"{info}/RECORD"

    metadata = files[f"{info}/METADATA"].decode()
    assert "Metadata-Version: 2.1\nName: graft-client\n" in metadata
    assert f"\nVersion: {version}\n" in metadata
    assert "\nRequires-Dist: grpcio>=1.51\n" in metadata
    assert "\nRequires-Dist: protobuf>=3.20,<5.26\n" in metadata
    wheel_file = files[f"{info}/WHEEL"].decode()
    assert "Wheel-Version: 1.0\n" in wheel_file and "Root-Is-Purelib: true\n" in wheel_file
    assert "Tag: py3-none-any\n" in wheel_file
    assert files[f"{info}/entry_points.txt"].decode() == (
        "[console_scripts]\ngraft-client = graft_client.__main__:main\n")
    assert files[f"{info}/top_level.txt"] == b"graft_client\n"

    rows = list(csv.reader(io.StringIO(files[f"{info}/RECORD"].decode())))
    assert sorted(r[0] for r in rows) == sorted(names)
    for name, digest, size in rows:
        if name == f"{info}/RECORD":
            assert digest == size == ""
            continue
        expected = base64.urlsafe_b64encode(hashlib.sha256(files[name]).digest()).rstrip(b"=")
        assert digest == "sha256=" + expected.decode(), name
        assert int(size) == len(files[name]), name


def test_prepared_metadata_is_the_wheels(backend, wheel, tmp_path):
    info = backend.prepare_metadata_for_build_wheel(str(tmp_path))
    with zipfile.ZipFile(wheel) as z:
        for path in (tmp_path / info).iterdir():
            assert z.read(f"{info}/{path.name}") == path.read_bytes(), path.name
    assert backend.get_requires_for_build_wheel() == []
    assert backend.get_requires_for_build_sdist() == []


def test_sdist_builds_the_same_wheel(backend, wheel, tmp_path):
    """The sdist holds everything a build needs (the template as a file, not a link), and the
    wheel built from it is byte for byte the one built from the tree."""
    name = backend.build_sdist(str(tmp_path))
    assert name == f"graft_client-{cmake_version()}.tar.gz"
    with tarfile.open(tmp_path / name) as tar:
        members = tar.getmembers()
        assert all(m.isfile() for m in members)
        top = {m.name.split("/")[0] for m in members}
        assert top == {f"graft_client-{cmake_version()}"}
        tar.extractall(tmp_path / "unpacked")
    unpacked = tmp_path / "unpacked" / top.pop()
    for required in ["PKG-INFO", "pyproject.toml", "_build_backend/graft_build.py",
                     "graft_client/report_template.html", "examples/registry_hook.py"]:
        assert (unpacked / required).is_file(), required
    out = tmp_path / "from_sdist"
    out.mkdir()
    r = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, '_build_backend'); "
         "import graft_build; print(graft_build.build_wheel(sys.argv[1]))", str(out)],
        cwd=unpacked, capture_output=True, text=True, timeout=60,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert r.returncode == 0, r.stderr
    assert (out / r.stdout.strip()).read_bytes() == wheel.read_bytes()


def test_missing_template_is_a_clear_build_error(backend, tmp_path, monkeypatch):
    """A copy of client/python without the Graft tree around it: the link dangles."""
    copy = tmp_path / "python"
    shutil.copytree(PACKAGE_DIR / "graft_client", copy / "graft_client", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(backend, "ROOT", str(copy))
    with pytest.raises(RuntimeError, match="report_template.html.*symbolic link"):
        backend.build_wheel(str(tmp_path))


def test_pyproject_names_the_in_tree_backend():
    text = (PACKAGE_DIR / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r"^requires = \[\]$", text, re.M)
    assert re.search(r'^build-backend = "graft_build"$', text, re.M)
    assert re.search(r'^backend-path = \["_build_backend"\]$', text, re.M)
