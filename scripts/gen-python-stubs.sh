#!/usr/bin/env bash
# Regenerates the Python client's protobuf and gRPC modules, which are checked in under
# client/python/graft_client/_gen/ so that `pip install ./client/python` needs no protoc.
# Run it after changing proto/graft/v1/graft.proto (the python_client test
# test_packaging.py::test_shipped_stubs_match_proto fails until you do), and commit the result.
#
#   scripts/gen-python-stubs.sh [OUT]
#
# OUT (default client/python) receives graft_client/_gen/; the old _gen folder there is replaced.
# Uses $PROTOC (default protoc) and $GRPC_PYTHON_PLUGIN (default grpc_python_plugin), Debian's
# protobuf-compiler and protobuf-compiler-grpc: the checked-in modules are protoc 3.21's and
# grpc 1.51's output, which protobuf 3.20 and newer import. The layout is the CMake build's
# (client/python/CMakeLists.txt): the .proto files are staged under graft_client/_gen/ so the
# generated modules import each other as graft_client._gen.* and never shadow the top-level
# `grpc` package.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/client/python}
protoc=${PROTOC:-protoc}
plugin=${GRPC_PYTHON_PLUGIN:-$(command -v grpc_python_plugin || true)}
python=${GRAFT_PYTHON:-/usr/bin/python3}
if [[ -z $plugin || ! -x $plugin ]]; then
  echo "gen-python-stubs: grpc_python_plugin not found (Debian: protobuf-compiler-grpc)" >&2
  exit 1
fi
command -v "$protoc" >/dev/null || {
  echo "gen-python-stubs: $protoc not found (Debian: protobuf-compiler)" >&2
  exit 1
}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# source proto (below proto/) and the folder below graft_client/_gen/ it is staged in
protos=("graft/v1/graft.proto graft/v1" "grpc/health/v1/health.proto health/v1")
staged=()
for entry in "${protos[@]}"; do
  read -r source folder <<<"$entry"
  mkdir -p "$stage/graft_client/_gen/$folder"
  cp "$root/proto/$source" "$stage/graft_client/_gen/$folder/"
  staged+=("graft_client/_gen/$folder/$(basename "$source")")
done

mkdir -p "$stage/out"
(cd "$stage" && "$protoc" -I. --python_out=out --grpc_python_out=out \
  --plugin=protoc-gen-grpc_python="$plugin" "${staged[@]}")
"$python" "$root/client/python/make_init_files.py" "$stage/out/graft_client/_gen"

mkdir -p "$out/graft_client"
rm -rf "$out/graft_client/_gen"
cp -r "$stage/out/graft_client/_gen" "$out/graft_client/_gen"
echo "gen-python-stubs: wrote $out/graft_client/_gen ($("$protoc" --version))"
