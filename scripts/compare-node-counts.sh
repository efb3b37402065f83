#!/usr/bin/env bash
# Node counts after O2 (with verification) of two builds, model by model, over every
# libonnx-testdata model and ../shared/models: how many got fewer, the same or more nodes, and
# any verification mismatch. Used to check that a change to the passes never makes the result
# worse. Usage: scripts/compare-node-counts.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR [OUT.tsv]
set -euo pipefail
cd "$(dirname "$0")/.."
before="$1/client/graft"
after="$2/client/graft"
out="${3:-/dev/null}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# nodes_after and verification status of one model, or "error <exit code>".
run() {
  local code=0
  "$1" optimize --local -q --level O2 --verify "$2" --report "$tmp/r.json" >/dev/null 2>&1 ||
    code=$?
  if [ "$code" != 0 ]; then
    echo "error $code"
    return
  fi
  /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1]));
print(r["nodes_after"], r["verification"]["status"])' "$tmp/r.json"
}

fewer=0 same=0 more=0 total=0 mismatches=0 sum_before=0 sum_after=0
printf 'model\tbefore\tafter\tstatus_before\tstatus_after\n' >"$out"
for m in /usr/share/libonnx-testdata/data/*/*/model.onnx ../shared/models/*.onnx; do
  [ -e "$m" ] || continue
  read -r b sb < <(run "$before" "$m")
  read -r a sa < <(run "$after" "$m")
  printf '%s\t%s\t%s\t%s\t%s\n' "$m" "$b" "$a" "$sb" "$sa" >>"$out"
  total=$((total + 1))
  [ "$sa" = mismatch ] && mismatches=$((mismatches + 1)) && echo "MISMATCH $m"
  if [ "$b" = error ] || [ "$a" = error ]; then
    [ "$b" != "$a" ] && echo "ERROR CHANGE $m: before $b $sb, after $a $sa"
    continue
  fi
  sum_before=$((sum_before + b)) sum_after=$((sum_after + a))
  if [ "$a" -lt "$b" ]; then
    fewer=$((fewer + 1))
  elif [ "$a" -eq "$b" ]; then
    same=$((same + 1))
  else
    more=$((more + 1))
    echo "MORE $m: $b -> $a"
  fi
done
echo "models $total: fewer nodes $fewer, same $same, more $more; verification mismatches $mismatches"
echo "total nodes after O2: before $sum_before, after $sum_after"
