#!/usr/bin/env bash
# Pipeline parallelism on the trainer's own path (`parallax train`), three
# measurements, each from runs in this invocation:
#
#  1. Throughput: gpt-small (6 layers, 6 heads, n_embd 384, block 256,
#     global batch 16, no dropout) at pp=2 (1F1B, M=8) on 2 in-process
#     ranks of one thread each, against dp=2 (same ranks) and one rank of
#     one thread, alternating order between repetitions; median step time
#     of the steps after the warmup (the metrics' time_s).
#  2. Bubble: gpt-mini (4 layers, 4 heads, 128 wide, block 128, batch 16),
#     balanced stages, 2 in-process stages of one thread: GPipe, 1F1B and
#     zero bubble at M = 4 and 8, the measured bubble (idle share of each
#     stage's pipelined span, the run's own report) beside (P-1)/(M+P-1).
#  3. Activation memory: the first stage's peak of forward activations
#     under GPipe and 1F1B (M=8) against the formula's ratio M/P; and
#     gpt-small on one rank without and with full recomputation.
#
#   bench/compare_pp.sh [--reps 2] [--steps 8] [--warmup 2] [--build build]
#
# Targets (issue: pipeline parallelism): pp=2 throughput >= 0.8x dp=2's
# and >= 1.6x one rank's; measured bubble within 5 points of the formula
# for GPipe and 1F1B, zero bubble's below 1F1B's; GPipe/1F1B activation
# ratio within 15% of M/P; full recomputation cuts activations >= 3x.
# Each run holds /tmp/px-build.lock.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
REPS=2 STEPS=8 WARMUP=2
while [[ $# -gt 0 ]]; do
  case $1 in
    --reps) REPS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
require_parallax
make_results pp

COMMON=(--dropout 0 --threads 1 --eval-every 0 --eval-batches 1 --sample-tokens 0 --progress lines)
SMALL=(--model gpt --layers 6 --heads 6 --embd 384 --block 256 --batch 16 "${COMMON[@]}")
MINI=(--model gpt --layers 4 --heads 4 --embd 128 --block 128 --batch 16 "${COMMON[@]}")
run() {  # run NAME ARGS...
  local name=$1
  shift
  flock /tmp/px-build.lock "$PX" train "$@" --metrics "$RESULTS/$name.jsonl" > "$RESULTS/$name.log" 2>&1 ||
    { echo "error: $name failed (see $RESULTS/$name.log)" >&2; exit 1; }
  echo "$name done" >&2
}

declare -A FLAGS=([one]="--ranks 1" [dp2]="--ranks 2" [pp2]="--mesh pp=2 --schedule 1f1b --micro-batches 8")
for rep in $(seq 1 "$REPS"); do
  order=(one dp2 pp2)
  (( rep % 2 == 0 )) && order=(pp2 dp2 one)
  for mode in "${order[@]}"; do
    # shellcheck disable=SC2086
    run "$mode-$rep" "${SMALL[@]}" --steps $((STEPS + WARMUP)) ${FLAGS[$mode]}
  done
done
for schedule in gpipe 1f1b zb-h1; do
  for m in 4 8; do run "bubble-$schedule-m$m" "${MINI[@]}" --steps $((STEPS + WARMUP)) --mesh pp=2 --schedule "$schedule" --micro-batches "$m"; done
done
for recompute in none full; do run "recompute-$recompute" "${SMALL[@]}" --steps 2 --recompute "$recompute"; done

python3 - "$RESULTS" "$REPS" "$WARMUP" <<'PY'
import json, re, statistics, sys
results, reps, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def step_time(name):
    steps = [json.loads(l) for l in open(f"{results}/{name}.jsonl") if '"train_loss"' in l]
    return statistics.median([b["time_s"] - a["time_s"] for a, b in zip(steps, steps[1:])][warmup - 1:])
tokens = 16 * 256
med = {m: statistics.median(step_time(f"{m}-{r}") for r in range(1, reps + 1)) for m in ("one", "dp2", "pp2")}
print("1. gpt-small, batch 16, 2 ranks of 1 thread (pp=2: 1F1B, M=8)")
print(f"{'mode':6} {'step ms':>9} {'tok/s':>8}")
for m in ("one", "dp2", "pp2"):
    print(f"{m:6} {med[m]*1e3:9.1f} {tokens/med[m]:8.0f}")
print(f"pp=2 throughput / dp=2: {med['dp2']/med['pp2']:.2f} (target >= 0.80)")
print(f"pp=2 throughput / one rank: {med['one']/med['pp2']:.2f} (target >= 1.60)")

print("\n2. gpt-mini, 2 stages of 1 thread: measured bubble vs analytical")
bubble = {}
for schedule in ("gpipe", "1f1b", "zb-h1"):
    for m in (4, 8):
        log = open(f"{results}/bubble-{schedule}-m{m}.log").read()
        got = re.search(r"pipeline bubble: measured ([\d.]+)% of the pipelined time, analytical ([\d.]+)%", log)
        measured, analytical = float(got.group(1)), float(got.group(2))
        formula = 100 * 1 / (m + 1)
        bubble[(schedule, m)] = measured
        print(f"{schedule:6} M={m}: measured {measured:5.1f}%, schedule's unit-cost value {analytical:5.1f}%, "
              f"(P-1)/(M+P-1) {formula:5.1f}%, off by {measured - formula:+5.1f} points")
for m in (4, 8):
    print(f"M={m}: zero bubble {bubble[('zb-h1', m)]:.1f}% vs 1F1B {bubble[('1f1b', m)]:.1f}% (target: below)")

print("\n3. activation memory")
def megabytes(name, pattern):
    return float(re.search(pattern, open(f"{results}/{name}.log").read()).group(1))
g = megabytes("bubble-gpipe-m8", r"stage 0: .*peak activations ([\d.]+) MiB")
o = megabytes("bubble-1f1b-m8", r"stage 0: .*peak activations ([\d.]+) MiB")
print(f"first stage, M=8: GPipe {g:.2f} MiB, 1F1B {o:.2f} MiB, ratio {g/o:.2f} (formula M/P = 4.00; "
      f"within 15%: {abs(g/o/4 - 1) <= 0.15})")
n = megabytes("recompute-none", r"of it forward activations ([\d.]+) MiB")
f = megabytes("recompute-full", r"of it forward activations ([\d.]+) MiB")
print(f"gpt-small, one rank: forward activations {n:.1f} MiB without recomputation, {f:.1f} MiB with full "
      f"({n/f:.1f}x fewer; target >= 3x)")
PY
