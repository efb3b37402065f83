"""scripts/check-layers.py on small source trees: what the picture allows passes, and each rule
(no higher layer, no peer, every source in a layer, a readable picture) fails when broken."""
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "check-layers.py"

PICTURE = """# Architecture

<!-- layers -->
```
  [server/]   [client/]
       \\        /
       [common/]
          |
  [core/pipeline]
          |
  [core/ir]   [core/build_info.h]
```
"""


def tree(tmp_path, files, picture=PICTURE):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "architecture.md").write_text(picture)
    for path, includes in files.items():
        f = tmp_path / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("".join(f'#include "{i}"\n' for i in includes) + "#include <vector>\n")
    return tmp_path


def run(root):
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root)],
                          capture_output=True, text=True)


GOOD = {
    "server/main.cc": ["server/main.h", "common/report.h", "core/ir/model.h",
                       "core/build_info.h"],
    "server/main.h": [],
    "client/main.cc": ["common/report.h", "core/pipeline/pipeline.h"],
    "common/report.h": ["core/pipeline/pipeline.h"],
    "core/pipeline/pipeline.h": ["core/ir/model.h", "core/ir/shapes/rules.h"],
    "core/ir/model.h": [],
    "core/ir/shapes/rules.h": ["core/ir/model.h"],
    "core/build_info.h": [],
    "tests/x_test.cc": ["server/main.h", "client/main.cc"],
}


def test_a_tree_that_follows_the_picture_passes(tmp_path):
    result = run(tree(tmp_path, GOOD))
    assert result.returncode == 0, result.stderr
    assert "follow the picture" in result.stdout


def test_an_include_of_a_higher_layer_fails(tmp_path):
    files = dict(GOOD)
    files["core/ir/model.h"] = ["core/pipeline/pipeline.h"]
    result = run(tree(tmp_path, files))
    assert result.returncode == 1
    assert "core/ir/model.h" in result.stderr and "higher layer core/pipeline" in result.stderr


def test_server_including_client_fails_as_peers(tmp_path):
    files = dict(GOOD)
    files["server/main.cc"] = ["client/tls.h"]
    result = run(tree(tmp_path, files))
    assert result.returncode == 1
    assert "peer client/" in result.stderr


def test_core_including_the_service_fails(tmp_path):
    files = dict(GOOD)
    files["core/pipeline/pipeline.h"] = ["server/main.h"]
    result = run(tree(tmp_path, files))
    assert result.returncode == 1
    assert "core/pipeline/pipeline.h" in result.stderr


def test_a_source_outside_every_layer_fails(tmp_path):
    files = dict(GOOD)
    files["core/newfolder/thing.h"] = []
    result = run(tree(tmp_path, files))
    assert result.returncode == 1
    assert "core/newfolder/thing.h: in no layer" in result.stderr


def test_an_include_of_an_unpictured_project_folder_fails(tmp_path):
    files = dict(GOOD)
    files["client/main.cc"] = ["tests/helpers.h"]
    result = run(tree(tmp_path, files))
    assert result.returncode == 1
    assert "in no layer" in result.stderr


def test_a_missing_or_unreadable_picture_is_exit_2(tmp_path):
    result = run(tree(tmp_path, GOOD, picture="# no picture here\n"))
    assert result.returncode == 2
    assert "layers" in result.stderr
