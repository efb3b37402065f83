#!/usr/bin/env bash
# Renders deploy/base and every overlay with `kubectl kustomize` and checks that the manifests,
# the image's baked config and the Dockerfile agree with each other and with
# server/graftd.example.yaml (tests/deploy/check_manifests.py lists every check).
# Exit 77 (skipped) without kubectl or without a python3 that has PyYAML
# (scripts/install-deps.sh --test installs kubernetes-client and python3-yaml).
# KUBECTL=/path/to/kubectl picks another kubectl; the manifests target kubectl 1.20's built-in
# kustomize (v2.0.3) and later.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

kubectl="${KUBECTL:-kubectl}"
if ! command -v "$kubectl" >/dev/null 2>&1; then
  echo "SKIP: $kubectl not found (Debian package kubernetes-client)"
  exit 77
fi
python=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import yaml' 2>/dev/null; then
    python="$candidate"
    break
  fi
done
if [[ -z "$python" ]]; then
  echo "SKIP: no python3 with PyYAML (Debian package python3-yaml)"
  exit 77
fi
echo "kubectl: $("$kubectl" version --client 2>/dev/null | head -n 1)"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
renderings=()
for dir in "$repo/deploy/base" "$repo"/deploy/overlays/*/; do
  dir="${dir%/}"
  name="${dir#"$repo/deploy/"}"
  out="$tmp/${name//\//_}.yaml"
  # Newer kubectl warns on stderr about kustomize fields deprecated since v2.0.3; only a failed
  # render matters.
  if ! "$kubectl" kustomize "$dir" >"$out" 2>"$tmp/stderr"; then
    echo "FAIL [$name] kubectl kustomize failed:"
    cat "$tmp/stderr"
    exit 1
  fi
  renderings+=("$name=$out")
done
exec "$python" "$here/check_manifests.py" "$repo" "${renderings[@]}"
