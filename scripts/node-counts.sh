#!/usr/bin/env bash
# Node counts before and after O2, with and without the folding passes, for the shared models
# and the libonnx-testdata pytorch-* models; prints the Markdown table of
# docs/optimization-results.md. Usage: scripts/node-counts.sh [BUILD_DIR] (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."
graft="${1:-build}/client/graft"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

o2=$("$graft" passes | awk '$2 == "O1" || $2 == "O2" {print $1}' | paste -sd, -)
folding="fold_shapes,fold_constants,inline_constant_if,simplify_arithmetic"
no_fold=$(echo "$o2" | tr , '\n' | grep -vxF -f <(echo "$folding" | tr , '\n') | paste -sd, -)

# nodes_before nodes_after verification for one model and pass list.
count() {
  "$graft" optimize --local -q --passes "$2" --verify "$1" --report "$tmp/r.json" ||
    return 1
  /usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1]));
print(r["nodes_before"], r["nodes_after"], r["verification"]["status"])' "$tmp/r.json"
}

echo "| model | nodes | O2 without folding | O2 | verification (O2) |"
echo "|---|---:|---:|---:|---|"
for m in ../shared/models/*.onnx; do
  [ -e "$m" ] || continue
  read -r before plain _ < <(count "$m" "$no_fold")
  read -r _ folded status < <(count "$m" "$o2")
  echo "| $(basename "$m" .onnx) | $before | $plain | $folded | $status |"
done
for set in pytorch-converted pytorch-operator; do
  n=0 before=0 plain=0 folded=0 verified=0
  for m in /usr/share/libonnx-testdata/data/$set/*/model.onnx; do
    read -r b p _ < <(count "$m" "$no_fold")
    read -r _ f s < <(count "$m" "$o2")
    n=$((n + 1)) before=$((before + b)) plain=$((plain + p)) folded=$((folded + f))
    [ "$s" = verified ] && verified=$((verified + 1))
  done
  echo "| libonnx-testdata $set ($n models) | $before | $plain | $folded | $verified of $n verified |"
done
