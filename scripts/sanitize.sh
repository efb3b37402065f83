#!/usr/bin/env bash
# Builds Graft with clang under sanitizers and runs the tests there (scripts/test.sh runs both):
#
#   scripts/sanitize.sh asan   unit, pass, pipeline, evaluator, cache, CLI and server tests under
#                              ASan+UBSan (build-asan, the build the fuzz targets use too)
#   scripts/sanitize.sh tsan   the server tests (graftd integration tests, config) and the client
#                              library's (lookup_first_test: its download thread) under TSan
#                              (build-tsan; only graftd, the CLI and those tests are built)
#
# Any sanitizer report fails the run, also one from a process a test starts (graftd, the CLI):
# reports are written to build-*/sanitizer-reports/ and printed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
# Symbolized sanitizer stacks need llvm-symbolizer; llvm-14 installs it outside PATH.
export PATH="$PATH:/usr/lib/llvm-14/bin"
root=$PWD

kind="${1:?usage: sanitize.sh asan|tsan}"
case "$kind" in
  asan)
    ./scripts/sanitizer-build.sh asan
    dir=build-asan
    # Every test except deploy_render_test (renders YAML with kubectl, no Graft code) and the
    # browser tests (Chromium on pages the gcc suite checks; report_html_test covers the renderer).
    ctest_args=(-LE "deploy|browser")
    # Leak checking stays on: a leak in a test or in graftd fails the run too.
    export ASAN_OPTIONS="detect_leaks=1:detect_stack_use_after_return=1:log_path=$root/$dir/sanitizer-reports/asan"
    export LSAN_OPTIONS="suppressions=$root/scripts/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$root/$dir/sanitizer-reports/ubsan"
    ;;
  tsan)
    ./scripts/sanitizer-build.sh tsan --target graftd graft graftd_test config_test \
      lookup_first_test
    dir=build-tsan
    ctest_args=(-L '^(server|client)$' -E '^(Cli|ExternalPaths|FileDigest)')
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$root/scripts/tsan.supp:log_path=$root/$dir/sanitizer-reports/tsan"
    ;;
  *) echo "sanitize.sh: unknown kind '$kind' (asan or tsan)" >&2; exit 2 ;;
esac

reports="$root/$dir/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
status=0
(cd "$dir" && ctest --output-on-failure -j "$(nproc)" "${ctest_args[@]}") || status=1
if compgen -G "$reports/*" >/dev/null; then
  echo "sanitize.sh: sanitizer reports ($kind):" >&2
  for f in "$reports"/*; do
    echo "---- $f" >&2
    cat "$f" >&2
  done
  status=1
fi
exit $status
