#!/usr/bin/env bash
# Every output path makes the directories it names when they do not exist
# yet: train's --metrics, --trace, --save and --run-dir, plan's --out and
# --explain, report's --out (a user names runs/today/metrics.jsonl before
# runs/today exists).
#
#   output_paths_test.sh PARALLAX
set -euo pipefail
PX=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
fail() { echo "FAIL: $*"; exit 1; }
TINY=(--model gpt --layers 1 --heads 2 --embd 16 --block 16 --batch 8)

QUICK=(--steps 5 --eval-batches 1 --sample-tokens 0 --progress lines --no-predict)
"$PX" train "${TINY[@]}" "${QUICK[@]}" --metrics m/a/metrics.jsonl --trace t/a/trace.json --save s/a/ckpt \
  > train.txt 2>&1 || { cat train.txt; fail "train with its outputs in directories that did not exist"; }
"$PX" train "${TINY[@]}" "${QUICK[@]}" --run-dir r/a/run >> train.txt 2>&1 \
  || { cat train.txt; fail "train --run-dir in a directory that did not exist"; }
for file in m/a/metrics.jsonl t/a/trace.json s/a/ckpt/state.json r/a/run/run.json; do
  [ -s "$file" ] || { cat train.txt; fail "train wrote no $file"; }
done
echo "train: --metrics, --trace, --save and --run-dir made their directories"

"$PX" plan "${TINY[@]}" --cluster dgx-a100:1 --ranks 2 --budget-s 2 --out p/a/strategy.json \
  --explain p/b/plan.json > plan.txt 2>&1 || { cat plan.txt; fail "plan with its outputs in new directories"; }
[ -s p/a/strategy.json ] && [ -s p/b/plan.json ] || { cat plan.txt; fail "plan wrote no --out or --explain"; }
echo "plan: --out and --explain made their directories"

"$PX" report r/a/run --out c/a/report.html > report.txt 2>&1 || { cat report.txt; fail "report --out in a new directory"; }
[ -s c/a/report.html ] || fail "report wrote no c/a/report.html"
echo "report: --out made its directory"
