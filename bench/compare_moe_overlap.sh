#!/usr/bin/env bash
# Expert exchanges overlapped with another micro-batch's compute: gpt-mini
# with 8 experts top-2 (bench/compare_moe.sh's model) at ep=2 on 2
# in-process ranks, 2 micro-batches a step, each rank's link limited to
# --gbps (0: unlimited), run (1) with the micro-batches one after the other,
# every routed exchange inline, and (2) with --overlap-experts: the two
# micro-batches interleaved, each one's exchanges on the expert axis'
# progress lane while the other computes. Each repetition runs both once,
# in alternating order, so neither a slow spell of this shared machine nor a
# warm cache favours one. Prints each run's median step time (the warmup
# left out), the median of the REPS medians of each, and their ratio
# (overlapped / sequential: below 1 is the overlap's gain; the exchanges'
# share of the sequential step is what it can hide). Each run holds
# /tmp/px-build.lock.
#
#   bench/compare_moe_overlap.sh [--build build] [--gbps 1] [--batch 16] [--steps 12] [--warmup 2] [--reps 3]
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
GBPS=1 BATCH=16 STEPS=12 WARMUP=2 REPS=3
while [[ $# -gt 0 ]]; do
  case $1 in
    --gbps) GBPS=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
require_parallax
make_results moe-overlap

JOB=(train --model gpt --layers 4 --heads 4 --embd 128 --block 128 --batch "$BATCH" --moe-experts 8 --moe-top-k 2
     --ranks 2 --ep 2 --micro-batches 2 --link-gbps "$GBPS" --steps $((STEPS + WARMUP)) --eval-every 0
     --eval-batches 1 --sample-tokens 0 --no-predict --progress lines)
median_step() {  # NAME: the run's median step time after the warmup
  python3 - "$RESULTS/$1.jsonl" "$WARMUP" <<'PY'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"train_loss"' in l][int(sys.argv[2]):]
print(statistics.median(s["step_s"] for s in steps))
PY
}
declare -A MEDIANS
for ((rep = 0; rep < REPS; ++rep)); do
  order=(sequential overlapped)
  ((rep % 2)) && order=(overlapped sequential)
  for mode in "${order[@]}"; do
    extra=(); [[ $mode == overlapped ]] && extra=(--overlap-experts)
    name=$mode-$rep
    locked "$PX" "${JOB[@]}" "${extra[@]}" --metrics "$RESULTS/$name.jsonl" > "$RESULTS/$name.log" 2>&1 ||
      { echo "error: $name failed (see $RESULTS/$name.log)" >&2; exit 1; }
    m=$(median_step "$name")
    echo "rep $((rep + 1)) $mode: median step $(printf %.1f "$(python3 -c "print($m * 1e3)")") ms" >&2
    MEDIANS[$mode]+="$m "
  done
done
python3 - "${MEDIANS[sequential]}" "${MEDIANS[overlapped]}" "$REPS" "$GBPS" "$BATCH" <<'PY'
import statistics, sys
sequential, overlapped = (statistics.median(map(float, x.split())) for x in sys.argv[1:3])
reps, gbps, batch = sys.argv[3:6]
link = "unlimited links" if float(gbps) == 0 else f"links {gbps} Gb/s"
print(f"gpt-mini, 8 experts top-2, batch {batch} in 2 micro-batches, ep=2 on 2 in-process ranks, {link} "
      f"(median of {reps} medians)")
print(f"  micro-batches in turn        {sequential * 1e3:8.1f} ms")
print(f"  interleaved, overlapped      {overlapped * 1e3:8.1f} ms   {overlapped / sequential:.2f}x")
PY
