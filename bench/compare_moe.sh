#!/usr/bin/env bash
# A mixture of experts against the dense GPT it grows from, on the
# trainer's own path (`parallax train`): gpt-mini (4 layers, 4 heads,
# n_embd 128, block 128, batch 16, the fortunes corpus) dense, and with 8
# experts top-2 in every block, each expert's width the dense MLP's / k
# (equal active FLOPs), the same steps, data and seeds.
#
# Quality: the median over the seeds of the final validation loss (20
# batches), MoE against dense. Speed: the median step time after the
# warmup of each on 2 in-process ranks, as active model FLOP/s (6 x
# active parameters x tokens a second; attention's T^2 terms are the same
# in both and left out): the dense model at dp=2 against the MoE at dp=2
# (every rank holds every expert) and at ep=2 (each rank half the
# experts, the tokens routed to them by all-to-all).
#
#   bench/compare_moe.sh [--steps 2000] [--seeds 1,2,3] [--speed-steps 30] [--warmup 5]
#                        [--experts 8] [--top-k 2] [--capacity-factor 0] [--build build]
#
# --steps 0 runs the speed half alone.
#
# Targets (issue: mixture of experts): the median MoE validation loss at
# least 1% below the dense one's; active FLOP/s at ep=2 at least 0.8x the
# dense model's at dp=2 on the same ranks. Each run holds
# /tmp/px-build.lock.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
STEPS=2000 SEEDS=1,2,3 SPEED_STEPS=30 WARMUP=5 EXPERTS=8 TOPK=2 CAPACITY=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) STEPS=$2; shift 2 ;;
    --seeds) SEEDS=$2; shift 2 ;;
    --speed-steps) SPEED_STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --experts) EXPERTS=$2; shift 2 ;;
    --top-k) TOPK=$2; shift 2 ;;
    --capacity-factor) CAPACITY=$2; shift 2 ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
require_parallax
make_results moe

MODEL=(--model gpt --layers 4 --heads 4 --embd 128 --block 128 --batch 16 --progress lines --sample-tokens 0)
MOE=(--moe-experts "$EXPERTS" --moe-top-k "$TOPK" --capacity-factor "$CAPACITY")

run() {  # NAME ARGS...: one training run, its metrics and log in $RESULTS
  local name=$1; shift
  locked "$PX" train "${MODEL[@]}" "$@" --metrics "$RESULTS/$name.jsonl" > "$RESULTS/$name.log" 2>&1 ||
    { echo "error: $name failed (see $RESULTS/$name.log)" >&2; exit 1; }
  echo "$name done" >&2
}

[[ $STEPS -gt 0 ]] || SEEDS=""
for seed in ${SEEDS//,/ }; do
  run "dense-seed$seed" --seed "$seed" --steps "$STEPS" --eval-every 0
  run "moe-seed$seed" --seed "$seed" --steps "$STEPS" --eval-every 0 "${MOE[@]}"
done
SPEED=(--steps $((SPEED_STEPS + WARMUP)) --eval-every 0 --eval-batches 1 --ranks 2)
run dense-speed "${SPEED[@]}"
run moe-speed "${SPEED[@]}" "${MOE[@]}"
run moe-ep-speed "${SPEED[@]}" "${MOE[@]}" --ep 2

python3 - "$RESULTS" "$SEEDS" "$WARMUP" "$EXPERTS" "$TOPK" <<'PY'
import json, statistics, sys
results, warmup, experts, k = sys.argv[1], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
seeds = [s for s in sys.argv[2].split(",") if s]
C, L, V, T, B = 128, 4, 256, 128, 16
def lines(name): return [json.loads(l) for l in open(f"{results}/{name}.jsonl")]
def final_val(name): return [m["val_loss"] for m in lines(name) if "val_loss" in m][-1]
def step_s(name):
    steps = [m for m in lines(name) if "train_loss" in m][warmup:]
    return statistics.median(m["step_s"] for m in steps)
# Active parameters a token passes through (nn/gpt.cc's count with k experts):
# attention 4C^2 + 4C, LayerNorms 4C, and the dense MLP 8C^2 + 5C or, per
# mixture, the router C*E and k experts of 2*C*F + F + C, F = 4C/k.
F = 4 * C // k
dense_layer = 4 * C * C + 4 * C + 4 * C + 8 * C * C + 5 * C
moe_layer = 4 * C * C + 4 * C + 4 * C + C * experts + k * (2 * C * F + F + C)
embed = (V + T) * C + 2 * C
active = {"dense": embed + L * dense_layer, "moe": embed + L * moe_layer}
if seeds:
    dense = [final_val(f"dense-seed{s}") for s in seeds]
    moe = [final_val(f"moe-seed{s}") for s in seeds]
    for s, d, m in zip(seeds, dense, moe):
        print(f"seed {s}: validation loss dense {d:.4f}, moe {m:.4f} ({100 * (m / d - 1):+.2f}%)")
    ratio = statistics.median(moe) / statistics.median(dense)
    print(f"median validation loss: dense {statistics.median(dense):.4f}, moe {statistics.median(moe):.4f}: "
          f"{100 * (1 - ratio):.2f}% lower (target >= 1%)")
tokens = B * T
runs = {"dense": "dense-speed", "moe dp=2": "moe-speed", "moe ep=2": "moe-ep-speed"}
rate = {name: 6 * active["dense" if name == "dense" else "moe"] * tokens / step_s(run) for name, run in runs.items()}
print(f"2 ranks: dense at dp=2 {rate['dense'] / 1e9:.2f} GFLOP/s (step {step_s('dense-speed') * 1e3:.0f} ms)")
for name in ("moe dp=2", "moe ep=2"):
    print(f"  {name}: {rate[name] / 1e9:.2f} active GFLOP/s (step {step_s(runs[name]) * 1e3:.0f} ms): "
          f"ratio {rate[name] / rate['dense']:.2f}" + (" (target >= 0.8)" if name == "moe ep=2" else ""))
PY
