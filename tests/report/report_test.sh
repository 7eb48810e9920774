#!/usr/bin/env bash
# `parallax report` end to end: two short real runs (one planned by
# `parallax plan --explain` on data parallelism, one a 1F1B pipeline)
# written with --run-dir (the pipeline's GPT a mixture of experts, whose
# load the report draws as heat maps); the report of one and the comparison of both
# rendered in headless Chromium (check_rendered_report.py: no script
# errors, as many plotted loss points as logged steps, a screenshot);
# a directory that is not a run is a named error.
#
#   report_test.sh PARALLAX SCREENSHOT_DIR
set -euo pipefail
PX=$1
SHOTS=$2
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export XDG_CACHE_HOME=$WORK/cache
mkdir -p "$SHOTS" "$WORK/runs/planned"
TINY=(--model gpt --layers 2 --heads 2 --embd 32 --block 32 --batch 8)
RUN=(--eval-every 10 --eval-batches 2 --sample-tokens 0 --progress lines)
fail() { echo "FAIL: $*"; exit 1; }

"$PX" calibrate "${TINY[@]}" --max-ranks 2 --kernel-ms 5 > /dev/null
"$PX" plan "${TINY[@]}" --cluster local --ranks 2 --budget-s 5 --out "$WORK/runs/planned/plan-strategy.json" \
  --explain "$WORK/runs/planned/plan.json" > /dev/null
"$PX" train "${TINY[@]}" --ranks 2 --strategy "$WORK/runs/planned/plan-strategy.json" --steps 40 "${RUN[@]}" \
  --run-dir "$WORK/runs/planned" > "$WORK/planned.txt"
"$PX" train "${TINY[@]}" --moe-experts 4 --ranks 2 --mesh pp=2 --schedule 1f1b --micro-batches 4 --steps 30 "${RUN[@]}" \
  --run-dir "$WORK/runs/pipeline" > "$WORK/pipeline.txt"
# A plan on a GPU preset names the published runs nearest its choice
# (plan/published_checks.h); as the pipeline run's plan.json, the compare
# page below must show them (check_rendered_report.py reads plan.json).
"$PX" plan "${TINY[@]}" --cluster dgx-a100:2 --budget-s 5 --explain "$WORK/runs/pipeline/plan.json" \
  > "$WORK/gpu-plan.txt"
grep -q "checked against published runs of similar shape" "$WORK/gpu-plan.txt" ||
  { cat "$WORK/gpu-plan.txt"; fail "plan on a GPU preset named no published runs"; }
for f in metrics.jsonl run.json strategy.json trace.json; do
  [ -s "$WORK/runs/pipeline/$f" ] || fail "the run directory has no $f"
done

"$PX" report "$WORK/runs/planned" > "$WORK/report.txt"
cat "$WORK/report.txt"
[ -s "$WORK/runs/planned/report.html" ] || fail "no report.html in the run directory"
grep -q "step time    predicted" "$WORK/report.txt" || fail "the report printed no predicted vs measured step"
grep -q "rank 1 peak  predicted" "$WORK/report.txt" || fail "the report printed no peak of rank 1"
python3 "$HERE/check_rendered_report.py" "$WORK/runs/planned/report.html" "$SHOTS/report.png" "$WORK/runs/planned"

"$PX" report "$WORK/runs/planned" "$WORK/runs/pipeline" --out "$WORK/compare.html" > /dev/null
python3 "$HERE/check_rendered_report.py" "$WORK/compare.html" "$SHOTS/compare.png" "$WORK/runs/planned" \
  "$WORK/runs/pipeline"

mkdir -p "$WORK/not-a-run"
if "$PX" report "$WORK/not-a-run" > "$WORK/err.txt" 2>&1; then fail "a directory without metrics was reported"; fi
grep -q "^error: .*not-a-run.*--run-dir" "$WORK/err.txt" || { cat "$WORK/err.txt"; fail "no named error"; }
echo "report test passed (screenshots in $SHOTS)"
