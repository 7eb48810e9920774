#!/usr/bin/env bash
# Overlap and P3 over a slow link: the same data-parallel GPT job on N
# in-process ranks with each rank's link limited, gradients reduced (1) after
# backward, (2) in buckets during backward, (3) by P3 (per-weight slices by
# forward priority, updates just before the next forward reads each weight).
# Each repetition runs the three once, in alternating order (odd repetitions
# none, buckets, P3; even ones P3, buckets, none), so neither a slow spell of
# this shared machine nor a warm cache favours one. Prints each run's median
# step time (step to step, the first step left out), the median of the REPS
# medians of each, and their ratios (targets: overlap <= 0.75x no overlap;
# P3 < buckets). Each run holds the shared benchmark lock.
#
#   bench/compare_overlap.sh [--build build] [--ranks 4] [--gbps 1] [--batch 4] [--steps 9]
#                            [--p3-slice-kb 1024] [--reps 3]
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$REPO/build RANKS=4 GBPS=1 BATCH=4 STEPS=9 SLICE=1024 REPS=3
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;; --ranks) RANKS=$2; shift 2 ;; --gbps) GBPS=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;; --steps) STEPS=$2; shift 2 ;; --p3-slice-kb) SLICE=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
PARALLAX=$BUILD/src/cli/parallax
[[ -x $PARALLAX ]] || { echo "error: $PARALLAX not built" >&2; exit 1; }
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
# gpt-small's shape (6 layers, 384 wide, block 256: 43 MB of gradients a step).
JOB=(train --model gpt --block 256 --layers 6 --heads 6 --embd 384 --batch "$BATCH" --steps "$STEPS"
     --eval-batches 1 --sample-tokens 0 --ranks "$RANKS" --link-gbps "$GBPS" --allreduce ring --grad-clip 0
     --progress lines)
median_step() {  # median of step-to-step times, the first step left out
  python3 -c "
import json, sys
t = [j['time_s'] for j in map(json.loads, open('$1')) if 'time_s' in j]
d = sorted(b - a for a, b in zip(t, t[1:]))
print(d[len(d) // 2])"
}
declare -A MEDIANS  # per mode, the runs' median steps, space-separated
for ((rep = 0; rep < REPS; ++rep)); do
  order=(none buckets p3)
  ((rep % 2)) && order=(p3 buckets none)
  for mode in "${order[@]}"; do
    case $mode in none) extra=(--no-overlap) ;; buckets) extra=() ;; p3) extra=(--p3-slice-kb "$SLICE") ;; esac
    flock /tmp/px-build.lock "$PARALLAX" "${JOB[@]}" "${extra[@]}" --metrics "$WORK/$mode.jsonl" > "$WORK/$mode.log"
    m=$(median_step "$WORK/$mode.jsonl")
    echo "rep $((rep + 1)) $mode: median step $(printf %.3f "$m") s" >&2
    MEDIANS[$mode]+="$m "
  done
done
python3 - "${MEDIANS[none]}" "${MEDIANS[buckets]}" "${MEDIANS[p3]}" "$REPS" "$RANKS" "$GBPS" "$BATCH" <<'PY'
import statistics, sys
none, buckets, p3 = (statistics.median(map(float, x.split())) for x in sys.argv[1:4])
reps, (ranks, gbps, batch) = int(sys.argv[4]), sys.argv[5:8]
print(f"gpt-small shape, batch {batch}, {ranks} in-process ranks, links {gbps} Gb/s (median of {reps} medians)")
print(f"  no overlap   {none*1e3:8.1f} ms")
print(f"  buckets      {buckets*1e3:8.1f} ms   {buckets/none:.2f}x no overlap   (target <= 0.75)")
print(f"  P3           {p3*1e3:8.1f} ms   {p3/none:.2f}x no overlap, {p3/buckets:.2f}x buckets   (target < 1)")
PY
