#!/usr/bin/env bash
# ZeRO-2 overlaps as plain data parallelism does: the default GPT (gpt-mini)
# on 2 in-process ranks, one thread each, each rank's link limited, with and
# without overlap (--no-overlap), at ZeRO-0 and ZeRO-2. Each repetition runs
# the four once, in alternating order (odd repetitions ZeRO-0 overlap,
# ZeRO-0 no overlap, ZeRO-2 overlap, ZeRO-2 no overlap; even ones the
# reverse), so neither a slow spell of this shared machine nor a warm cache
# favours one. Prints each run's median step (the executor's, the first step
# left out), the mean of the REPS medians, and how much of plain data
# parallelism's gain from overlap ZeRO-2 keeps (target >= 0.8). Each run
# holds the shared benchmark lock.
#
#   bench/compare_zero_overlap.sh [--build build] [--gbps 1] [--steps 25] [--reps 3]
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$REPO/build GBPS=1 STEPS=25 REPS=3
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) BUILD=$2; shift 2 ;; --gbps) GBPS=$2; shift 2 ;; --steps) STEPS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
PARALLAX=$BUILD/src/cli/parallax
[[ -x $PARALLAX ]] || { echo "error: $PARALLAX not built" >&2; exit 1; }
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
JOB=(train --model gpt --ranks 2 --threads 1 --steps "$STEPS" --link-gbps "$GBPS" --eval-batches 1
     --sample-tokens 0 --progress lines)
median_step() {  # the executor's step time, median over the steps after the first
  python3 -c "
import json
t = sorted(j['step_s'] for j in map(json.loads, open('$1')) if 'step_s' in j and j['step'] > 1)
print(t[len(t) // 2])"
}
declare -A SUM
RUNS=(zero0-on zero0-off zero2-on zero2-off)
for ((rep = 0; rep < REPS; ++rep)); do
  order=("${RUNS[@]}")
  ((rep % 2)) && order=(zero2-off zero2-on zero0-off zero0-on)
  for run in "${order[@]}"; do
    zero=${run:4:1} overlap=${run#*-}
    extra=(--zero "$zero"); [[ $overlap == off ]] && extra+=(--no-overlap)
    flock /tmp/px-build.lock "$PARALLAX" "${JOB[@]}" "${extra[@]}" --metrics "$WORK/$run.jsonl" > "$WORK/$run.log"
    m=$(median_step "$WORK/$run.jsonl")
    echo "rep $((rep + 1)) ZeRO-$zero overlap $overlap: median step $(printf %.1f "$(python3 -c "print($m * 1e3)")") ms" >&2
    SUM[$run]=$(python3 -c "print(${SUM[$run]:-0} + $m)")
  done
done
python3 - "${SUM[zero0-on]}" "${SUM[zero0-off]}" "${SUM[zero2-on]}" "${SUM[zero2-off]}" "$REPS" "$GBPS" <<'PY'
import sys
on0, off0, on2, off2, reps = (float(x) / (float(sys.argv[5]) if i < 4 else 1) for i, x in enumerate(sys.argv[1:6]))
gbps = sys.argv[6]
print(f"gpt-mini, 2 in-process ranks, 1 thread each, links {gbps} Gb/s (mean of {int(reps)} medians)")
print(f"  ZeRO-0  overlap {on0*1e3:7.1f} ms   no overlap {off0*1e3:7.1f} ms   gain {(off0-on0)*1e3:6.1f} ms")
print(f"  ZeRO-2  overlap {on2*1e3:7.1f} ms   no overlap {off2*1e3:7.1f} ms   gain {(off2-on2)*1e3:6.1f} ms")
kept = (off2 - on2) / (off0 - on0) if off0 > on0 else float("nan")
print(f"  ZeRO-2 keeps {kept:.2f} of data parallelism's gain from overlap   (target >= 0.80)")
PY
