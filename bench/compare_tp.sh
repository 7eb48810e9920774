#!/usr/bin/env bash
# Megatron tensor parallelism against data parallelism and one rank, on the
# trainer's own path (`parallax train`): gpt-small (6 layers, 6 heads,
# n_embd 384, block 256, global batch 8, no dropout) on 2 in-process ranks
# of one thread each, as tp=2, tp=2 with sequence parallelism and dp=2,
# against one rank of one thread. Per mode: median step time (steps after
# the warmup, from the metrics' time_s), tokens/s, the per-rank memory of
# parameters + gradients + optimizer state, and the peak tensor memory
# (activations on top). Ratios are against dp=2 and the one rank measured
# in the same repetition; the modes alternate order between repetitions.
#
#   bench/compare_tp.sh [--reps 2] [--steps 12] [--warmup 3] [--build build]
#
# Targets (issue: tensor parallelism): tp=2 step time <= 1.1x dp=2's;
# tp=2 throughput >= 1.7x one rank; tp=2 parameters + optimizer state per
# rank <= 0.55x dp=2's. Each run holds /tmp/px-build.lock.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
REPS=2 STEPS=12 WARMUP=3
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
make_results tp

MODEL=(--model gpt --layers 6 --heads 6 --embd 384 --block 256 --batch 8 --dropout 0 --threads 1
       --steps $((STEPS + WARMUP)) --eval-every 0 --eval-batches 1 --sample-tokens 0 --progress lines)
declare -A FLAGS=([one]="--ranks 1" [dp2]="--ranks 2" [tp2]="--ranks 2 --tp 2" [tp2sp]="--ranks 2 --tp 2 --sequence-parallel")
MODES=(one dp2 tp2 tp2sp)

for rep in $(seq 1 "$REPS"); do
  order=("${MODES[@]}")
  (( rep % 2 == 0 )) && order=(tp2sp tp2 dp2 one)
  for mode in "${order[@]}"; do
    # shellcheck disable=SC2086
    flock /tmp/px-build.lock "$PX" train "${MODEL[@]}" ${FLAGS[$mode]} --metrics "$RESULTS/$mode-$rep.jsonl" \
      > "$RESULTS/$mode-$rep.log" 2>&1 || { echo "error: $mode failed (see $RESULTS/$mode-$rep.log)" >&2; exit 1; }
    echo "rep $rep: $mode done" >&2
  done
done

python3 - "$RESULTS" "$REPS" "$WARMUP" <<'PY'
import json, re, statistics, sys
results, reps, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tokens = 8 * 256
def run(mode, rep):
    steps = [json.loads(l) for l in open(f"{results}/{mode}-{rep}.jsonl") if '"train_loss"' in l]
    times = [b["time_s"] - a["time_s"] for a, b in zip(steps, steps[1:])][warmup - 1:]
    log = open(f"{results}/{mode}-{rep}.log").read()
    m = re.search(r"parameters ([\d.]+) MiB.*gradients ([\d.]+) MiB.*optimizer state ([\d.]+) MiB", log)
    peak = float(re.search(r"peak tensor memory ([\d.]+) MiB", log).group(1))
    if m:
        params, grads, state = map(float, m.groups())
    else:  # one rank prints no per-rank line: everything whole
        params = grads = None; state = None
    return statistics.median(times), params, grads, state, peak
modes = ["one", "dp2", "tp2", "tp2sp"]
data = {m: [run(m, r) for r in range(1, reps + 1)] for m in modes}
med = {m: statistics.median(x[0] for x in data[m]) for m in modes}
first = {m: data[m][0] for m in modes}
print(f"{'mode':8} {'step ms':>9} {'tok/s':>8} {'vs dp2':>7} {'vs one':>7} {'params+opt MiB':>15} {'peak MiB':>9}")
for m in modes:
    t, params, grads, state, peak = first[m]
    po = f"{params + state:.2f}" if params is not None else "-"
    print(f"{m:8} {med[m]*1e3:9.1f} {tokens/med[m]:8.0f} {med[m]/med['dp2']:7.2f} {med['one']/med[m]:7.2f} {po:>15} {peak:9.1f}")
ratio_mem = (first["tp2"][1] + first["tp2"][3]) / (first["dp2"][1] + first["dp2"][3])
print(f"tp=2 step time / dp=2: {med['tp2']/med['dp2']:.2f} (target <= 1.10)")
print(f"tp=2 throughput / one rank: {med['one']/med['tp2']:.2f} (target >= 1.70)")
print(f"tp=2 parameters + optimizer state per rank / dp=2: {ratio_mem:.3f} (target <= 0.55)")
print(f"peak tensor memory, tp=2 with / without sequence parallelism: {first['tp2sp'][4]/first['tp2'][4]:.2f}")
PY
