#!/usr/bin/env bash
# Configures and builds Graft into ./build (Release with debug info). Extra args go to cmake.
# Uses ccache when it is installed (CCACHE_* variables are honoured).
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" "$@" >/dev/null
cmake --build build -j "$(nproc)"
