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

# A save never deletes what it did not write: metrics and a trace kept in the
# checkpoint's own directory survive every save and its rotation, and the
# directory then reads as a run. An output a save would replace is refused
# before step 1.
"$PX" train "${TINY[@]}" --steps 40 --eval-batches 1 --sample-tokens 0 --progress lines --no-predict \
  --save R --save-every 10 --keep-last 2 --metrics R/metrics.jsonl --trace R/trace.json > rotate.txt 2>&1 \
  || { cat rotate.txt; fail "train with --metrics and --trace inside --save"; }
for file in R/metrics.jsonl R/trace.json R/state.json R/model.safetensors; do
  [ -s "$file" ] || { cat rotate.txt; ls -R R*; fail "$file is gone after the saves"; }
done
[ "$(grep -c '"train_loss"' R/metrics.jsonl)" -eq 40 ] || { cat R/metrics.jsonl; fail "R/metrics.jsonl lost lines"; }
kept=$(ls -d R.step-* | wc -l)
[ "$kept" -eq 1 ] || { ls -d R*; fail "--keep-last 2 kept $kept older checkpoints beside R, expected 1"; }
ls R.step-*/ | grep -q -e metrics -e trace && fail "a kept checkpoint took a copy of the metrics or the trace"
"$PX" report R > report-R.txt 2>&1 || { cat report-R.txt; fail "report R after the saves"; }
[ -s R/report.html ] || { cat report-R.txt; fail "report R wrote no R/report.html"; }
before=$(md5sum R/state.json R/metrics.jsonl)
for bad in "--metrics R/state.json" "--trace R/shards/trace.json" "--metrics R" "--trace R.step-000010/trace.json"; do
  # shellcheck disable=SC2086 # the flag and its value are two words
  if "$PX" train "${TINY[@]}" "${QUICK[@]}" --save R $bad > refused.txt 2>&1; then
    fail "train --save R $bad ran; expected a refusal before step 1"
  fi
  grep -q "error: .*a save to --save 'R' would replace it" refused.txt || { cat refused.txt; fail "$bad: no named refusal"; }
  [ "$(md5sum R/state.json R/metrics.jsonl)" == "$before" ] || fail "$bad: refused only after it trained and saved"
done
echo "train: a save keeps the metrics and trace beside it and refuses outputs it would replace"

"$PX" plan "${TINY[@]}" --cluster dgx-a100:1 --ranks 2 --budget-s 2 --out p/a/strategy.json \
  --explain p/b/plan.json > plan.txt 2>&1 || { cat plan.txt; fail "plan with its outputs in new directories"; }
[ -s p/a/strategy.json ] && [ -s p/b/plan.json ] || { cat plan.txt; fail "plan wrote no --out or --explain"; }
echo "plan: --out and --explain made their directories"

"$PX" report r/a/run --out c/a/report.html > report.txt 2>&1 || { cat report.txt; fail "report --out in a new directory"; }
[ -s c/a/report.html ] || fail "report wrote no c/a/report.html"
echo "report: --out made its directory"
