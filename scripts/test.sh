#!/usr/bin/env bash
# Installs dependencies (with the ONNX backend test data), builds everything and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh --test
./scripts/build.sh -DGRAFT_BUILD_TESTS=ON -DGRAFT_BUILD_BENCH=ON
cd build
ctest --output-on-failure -j "$(nproc)"
