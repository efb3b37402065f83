#!/usr/bin/env bash
# Installs dependencies (with the ONNX backend test data and clang), builds everything and runs
# every test, in phases:
#   build          warnings are errors (-DGRAFT_WERROR=ON)
#   format         every tracked C++ file is formatted as .clang-format says (scripts/check-format.sh)
#   build, tests   the gcc build (./build) and its whole suite
#   image          the Dockerfile's image, built with podman around ./build's graftd and graft, and
#                  smoke-tested (scripts/image-check.sh --prebuilt build); skipped where podman
#                  cannot run a container
#   asan           the unit, pass, pipeline, evaluator, cache, CLI and server tests under
#                  ASan+UBSan (clang, ./build-asan; scripts/sanitize.sh)
#   tsan           the server tests under TSan (clang, ./build-tsan)
#   fuzz           each fuzz target for GRAFT_FUZZ_SECONDS (default 60) from the committed
#                  corpus, after replaying its saved reproducers (scripts/fuzz.sh; reuses build-asan),
#                  with libFuzzer seed GRAFT_FUZZ_SEED (default 1) so that a result reproduces
# Every phase runs even if an earlier one failed; the summary gives each phase's time and result
# (ok, FAILED, or skipped: a phase that exits 77 could not run here and said why), and the exit
# status is non-zero if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-deps.sh --test

names=() times=() results=()
phase() {  # phase NAME COMMAND...
  local name=$1 start=$SECONDS result=ok
  shift
  echo "==== $name: $*"
  "$@" || { [[ $? == 77 ]] && result=skipped || result=FAILED; }
  names+=("$name") times+=($((SECONDS - start))) results+=("$result")
  echo "==== $name: $result in $((SECONDS - start)) s"
}
run_ctest() { (cd build && ctest --output-on-failure -j "$(nproc)"); }
image_check() {  # skipped (77) where podman cannot run a container: no privileges, no runtime
  local why
  if ! why=$(./scripts/image-check.sh --probe 2>&1); then
    echo "image: skipped: $why"
    return 77
  fi
  ./scripts/image-check.sh --prebuilt build
}

phase format ./scripts/check-format.sh
# -g1 (line tables and function names, enough for a backtrace): full debug info makes gcc take
# half as long again over the whole build.
phase build ./scripts/build.sh -DGRAFT_BUILD_TESTS=ON -DGRAFT_BUILD_BENCH=ON -DGRAFT_WERROR=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
phase tests run_ctest
phase image image_check
phase asan ./scripts/sanitize.sh asan
phase tsan ./scripts/sanitize.sh tsan
phase fuzz ./scripts/fuzz.sh --jobs "$(nproc)" --seed "${GRAFT_FUZZ_SEED:-1}" "${GRAFT_FUZZ_SECONDS:-60}"

failed=0
echo "==== summary"
for i in "${!names[@]}"; do
  printf '%-6s %6d s  %s\n' "${names[$i]}" "${times[$i]}" "${results[$i]}"
  [[ ${results[$i]} != FAILED ]] || failed=1
done
printf '%-6s %6d s\n' total "$SECONDS"
exit $failed
