#!/usr/bin/env bash
# Configures and builds Graft with clang under sanitizers; extra args go to `cmake --build`
# (e.g. --target X). Used by scripts/sanitize.sh and scripts/fuzz.sh.
#
#   scripts/sanitizer-build.sh asan [--target ...]   ASan+UBSan into ./build-asan; also the fuzz
#                                                    targets (one build serves tests and fuzzing)
#   scripts/sanitizer-build.sh tsan [--target ...]   TSan into ./build-tsan
#
# Uses ccache when it is installed (CCACHE_* variables are honoured).
set -euo pipefail
cd "$(dirname "$0")/.."

kind="${1:?usage: sanitizer-build.sh asan|tsan [cmake --build args...]}"
shift
case "$kind" in
  asan) dir=build-asan flags=(-DGRAFT_SANITIZE=address,undefined -DGRAFT_BUILD_FUZZ=ON) ;;
  tsan) dir=build-tsan flags=(-DGRAFT_SANITIZE=thread -DGRAFT_BUILD_FUZZ=OFF) ;;
  *) echo "sanitizer-build.sh: unknown kind '$kind' (asan or tsan)" >&2; exit 2 ;;
esac
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# RelWithDebInfo at -O2: sanitized tests and fuzzing run fastest. Line tables only
# (-gline-tables-only) keep every stack symbolized to file:line while the test executables stay
# about 40% smaller than with -g (each links the whole library statically; with -g the asan
# build took 7.5 GB and links ran out of disk).
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG" \
  -DGRAFT_BUILD_TESTS=ON -DGRAFT_BUILD_BENCH=OFF "${flags[@]}" "${launcher[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)" "$@"
