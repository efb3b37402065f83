#!/usr/bin/env bash
# Builds Graft's libFuzzer targets (fuzz/*_fuzzer.cc; clang, ASan+UBSan, in ./build-asan) and runs
# each for SECONDS (default 60), then prints executions per target and in total.
#
#   scripts/fuzz.sh [--all-testdata] [--jobs N] [--seed N] [SECONDS] [TARGET...]
#
# TARGET: a fuzzer's name with or without "_fuzzer" (model, verify, kernel...); default: all.
# --all-testdata  also seed the ONNX targets with every model of libonnx-testdata (1,072 models;
#                 the committed corpus holds a coverage-selected subset)
# --jobs N        run N targets at once (default 1; each uses one core)
# --seed N        libFuzzer's random seed (default: a new one each run). With a fixed seed a target
#                 tries the same inputs in the same order from the same corpus, so a run of a given
#                 length finds the same things: CI uses one (scripts/test.sh) so that what it
#                 reports is reproducible; long runs by hand should leave it out to explore.
#
# Before fuzzing, each target replays its saved reproducers (fuzz/regressions/<target>/): a fixed
# bug must stay fixed. Scratch state lives outside git, under $GRAFT_FUZZ_WORK (default
# build-asan/fuzz): corpus/<target>/ (grows across runs, seeded from fuzz/corpus/ and the
# generated models in fuzz/seeds/), artifacts/<target>/ (every finding's input: crash-*, leak-*,
# timeout-*, oom-*; replay with `build-asan/fuzz/<target> FILE`), logs/<target>.log.
#
# Exit status: 0 no finding, 1 a finding (crash, sanitizer report, leak, timeout, out-of-memory,
# failed property), 2 bad usage or build failure.
set -euo pipefail
cd "$(dirname "$0")/.."
# Symbolized sanitizer stacks need llvm-symbolizer; llvm-14 installs it outside PATH.
export PATH="$PATH:/usr/lib/llvm-14/bin"
root=$PWD

seconds=60 jobs=1 all_testdata=0 seed="" targets=()
while (($#)); do
  case "$1" in
    --all-testdata) all_testdata=1 ;;
    --jobs) jobs="${2:?--jobs needs a number}"; shift ;;
    --seed) seed="${2:?--seed needs a number}"; shift ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    [0-9]*) seconds="$1" ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("${1%_fuzzer}") ;;
  esac
  shift
done
if ((${#targets[@]} == 0)); then
  for src in fuzz/*_fuzzer.cc; do
    name=$(basename "$src" .cc)
    targets+=("${name%_fuzzer}")
  done
fi
for t in "${targets[@]}"; do
  [[ -f fuzz/${t}_fuzzer.cc ]] || { echo "fuzz.sh: no target fuzz/${t}_fuzzer.cc" >&2; exit 2; }
done

build_targets=(onnx_from_text)
for t in "${targets[@]}"; do build_targets+=("${t}_fuzzer"); done
./scripts/sanitizer-build.sh asan --target "${build_targets[@]}" || exit 2

work="${GRAFT_FUZZ_WORK:-$root/build-asan/fuzz}"
mkdir -p "$work/logs" "$work/seeds"
bin="$root/build-asan/fuzz"

# Targets that read serialized ONNX models share their seeds and dictionary.
reads_onnx() { [[ "$1" == model || "$1" == verify ]]; }
onnx_seeds=("$root/fuzz/corpus/onnx" "$work/seeds/text")
"$root/build-asan/fuzz/onnx_from_text" "$work/seeds/text" "$root"/fuzz/seeds/*.onnxtxt || exit 2
if ((all_testdata)); then
  testdata=/usr/share/libonnx-testdata/data
  [[ -d $testdata ]] || { echo "fuzz.sh: $testdata is missing (apt-get install libonnx-testdata)" >&2; exit 2; }
  mkdir -p "$work/seeds/testdata"
  # Flattened, one file per model path (many tests have a model.onnx).
  (cd "$testdata" && find . -name '*.onnx' -print0) | while IFS= read -r -d '' f; do
    cp "$testdata/$f" "$work/seeds/testdata/$(echo "${f#./}" | tr / _)"
  done
  onnx_seeds+=("$work/seeds/testdata")
fi

# Sanitizer settings: any report ends the run with a stack; libFuzzer's own -rss_limit_mb and
# -malloc_limit_mb (the same by default) turn unbounded memory into an "oom" finding.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1}"
export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$(cd "$(dirname "$0")/.." && pwd)/scripts/lsan.supp:print_suppressions=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

run_target() {
  local t=$1 exe="$bin/${t}_fuzzer" log="$work/logs/$1.log"
  local corpus="$work/corpus/$t" artifacts="$work/artifacts/$t/"
  mkdir -p "$corpus" "$artifacts"
  local args=(-rss_limit_mb=2048 -timeout=30 -print_final_stats=1 -artifact_prefix="$artifacts")
  [[ -n $seed ]] && args+=(-seed="$seed")
  local seeds=()
  if reads_onnx "$t"; then
    args+=(-max_len=8192 -dict="$root/fuzz/onnx.dict")
    seeds+=("${onnx_seeds[@]}")
  else
    for name in "$t" "${t}_fuzzer"; do
      [[ -f $root/fuzz/$name.dict ]] && args+=(-dict="$root/fuzz/$name.dict")
      [[ -f $root/fuzz/$name.options ]] && read -r -a extra <"$root/fuzz/$name.options" &&
        args+=("${extra[@]}")
    done
  fi
  for name in "$t" "${t}_fuzzer"; do
    [[ -d $root/fuzz/corpus/$name ]] && seeds+=("$root/fuzz/corpus/$name")
  done

  : >"$log"
  local regressions=()
  if [[ -d $root/fuzz/regressions/$t ]]; then
    while IFS= read -r -d '' f; do regressions+=("$f"); done \
      < <(find "$root/fuzz/regressions/$t" -type f ! -name '*.md' -print0 | sort -z)
  fi
  if ((${#regressions[@]})); then
    echo "== replaying ${#regressions[@]} saved reproducers" >>"$log"
    if ! "$exe" "${args[@]}" "${regressions[@]}" >>"$log" 2>&1; then
      echo "finding: a saved reproducer in fuzz/regressions/$t fails again" >>"$log"
      return 1
    fi
  fi
  echo "== fuzzing for ${seconds}s" >>"$log"
  # The scratch corpus comes first: libFuzzer adds new inputs to the first directory only.
  "$exe" "${args[@]}" -max_total_time="$seconds" "$corpus" "${seeds[@]}" >>"$log" 2>&1
}

declare -A status
pids=()
for t in "${targets[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n || true; done
  rm -f "$work/logs/$t.status"
  (
    set +e  # the status of a finding is recorded, not fatal here
    run_target "$t"
    echo $? >"$work/logs/$t.status"
  ) &
  pids+=($!)
done
wait "${pids[@]}" || true

total=0 failed=0
printf '%-10s %12s %10s  %s\n' target executions exec/s result
for t in "${targets[@]}"; do
  log="$work/logs/$t.log"
  rc=$(cat "$work/logs/$t.status" 2>/dev/null || echo 2)
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{s += $2} END {print s + 0}')
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | awk '{print $2 + 0}')
  total=$((total + execs))
  if [[ $rc == 0 ]]; then
    result=ok
  else
    failed=1
    result="FINDING (exit $rc): see $log and $work/artifacts/$t/"
  fi
  printf '%-10s %12s %10s  %s\n' "$t" "$execs" "${rate:-0}" "$result"
done
printf '%-10s %12s\n' total "$total"
if ((failed)); then
  for t in "${targets[@]}"; do
    [[ $(cat "$work/logs/$t.status" 2>/dev/null) == 0 ]] && continue
    echo "---- $t: end of $work/logs/$t.log" >&2
    tail -n 60 "$work/logs/$t.log" >&2
  done
  exit 1
fi
