#!/usr/bin/env bash
# Training quality of bf16 mixed precision against fp32, same seed, same
# data order, side by side (issue targets: gpt-mini's final validation loss
# within 1% relative; the CNN's Fashion-MNIST test accuracy within 0.5
# point), with each run's step time.
#
#   bench/compare_precision.sh [--steps 3000] [--epochs 2] [--models "gpt cnn"] [--threads 2]
#                              [--seed 1] [--build build-bench] [--results DIR] [--lock /tmp/px-build.lock]
#
# gpt: parallax's defaults (gpt-mini: 4 layers, 4 heads, 128 wide, block
# 128, batch 16, AdamW, cosine schedule) on the fortunes corpus for
# --steps, validated at the end on 100 batches. cnn: the defaults for
# --epochs, validated on the whole test set. Needs a CPU with AVX512_BF16.
# Each run's metrics and log stay in RESULTS (default
# BUILD/bench-results/precision-<time>); each run holds the lock alone.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$REPO/build-bench
STEPS=3000 EPOCHS=2 MODELS="gpt cnn" THREADS=2 SEED=1 RESULTS="" LOCK=/tmp/px-build.lock

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) STEPS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --build) BUILD=$2; shift 2 ;;
    --results) RESULTS=$2; shift 2 ;;
    --lock) LOCK=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

PARALLAX=$BUILD/src/cli/parallax
[[ -x $PARALLAX ]] || { echo "error: $PARALLAX not built: ninja -C $BUILD parallax" >&2; exit 1; }
grep -qw avx512_bf16 /proc/cpuinfo || { echo "error: this CPU has no AVX512_BF16: bf16 cannot run here" >&2; exit 1; }
RESULTS=${RESULTS:-$BUILD/bench-results/precision-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS"
echo "results in $RESULTS" >&2

locked() { if [[ -n $LOCK ]]; then flock "$LOCK" "$@"; else "$@"; fi; }

for m in $MODELS; do
  for precision in fp32 bf16; do
    name=$m-$precision
    echo "[$name]" >&2
    rm -f "$RESULTS/$name.jsonl"
    if [[ $m == gpt ]]; then
      length=(--steps "$STEPS" --eval-every 0 --eval-batches 100 --sample-tokens 0)
    else
      length=(--epochs "$EPOCHS")
    fi
    locked "$PARALLAX" train --model "$m" "${length[@]}" --seed "$SEED" --threads "$THREADS" --precision "$precision" \
      --progress lines --no-predict --metrics "$RESULTS/$name.jsonl" > "$RESULTS/$name.log" 2>&1 ||
      { tail -n 5 "$RESULTS/$name.log" >&2; exit 1; }
    tail -n 2 "$RESULTS/$name.log" >&2
  done
done

/usr/bin/python3 - "$RESULTS" "$MODELS" <<'PY' | tee "$RESULTS/summary.txt"
import json, statistics, sys
d, models = sys.argv[1], sys.argv[2].split()

def run(name):
    lines = [json.loads(l) for l in open(f"{d}/{name}.jsonl") if l.strip()]
    final = [l for l in lines if "val_loss" in l][-1]
    steps = [l["step_s"] for l in lines if "step_s" in l][1:]
    return final, statistics.median(steps) * 1e3

ok = True
print(f"{'model':<6}{'precision':>10}{'val loss':>10}{'accuracy':>10}{'step ms':>9}")
for m in models:
    fp32, fp32_ms = run(f"{m}-fp32")
    bf16, bf16_ms = run(f"{m}-bf16")
    for p, r, ms in (("fp32", fp32, fp32_ms), ("bf16", bf16, bf16_ms)):
        acc = f"{100 * r['val_accuracy']:.2f}%" if "val_accuracy" in r else "-"
        print(f"{m:<6}{p:>10}{r['val_loss']:>10.4f}{acc:>10}{ms:>9.1f}")
    loss_gap = abs(bf16["val_loss"] - fp32["val_loss"]) / fp32["val_loss"]
    line = f"{m}: bf16 val loss {100 * loss_gap:.2f}% from fp32's (target <= 1%)"
    good = loss_gap <= 0.01 if m == "gpt" else True
    if "val_accuracy" in fp32:
        points = 100 * abs(bf16["val_accuracy"] - fp32["val_accuracy"])
        line += f"; accuracy {points:.2f} points apart (target <= 0.5)"
        good = points <= 0.5
    line += f"; step {bf16_ms / fp32_ms:.2f}x fp32's"
    print(line + ("" if good else "  <-- MISSED"))
    ok = ok and good
sys.exit(0 if ok else 1)
PY
