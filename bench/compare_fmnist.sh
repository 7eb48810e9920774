#!/usr/bin/env bash
# Fashion-MNIST accuracy, parallax vs PyTorch 1.13, same hyper-parameters.
#
#   bench/compare_fmnist.sh [--models "mlp cnn"] [--seeds "0 1 2 3 4"] [--epochs 2] [--threads 2]
#                           [--no-defaults] [--build build-bench] [--peers DIR] [--results DIR]
#                           [--lock /tmp/px-build.lock]
#
# Same hyper-parameters in both: SGD momentum 0.9, batch 64, constant lr
# (MLP 784-256-256-10: 0.05; CNN conv-pool-conv-pool-fc-fc: 0.02), 2 epochs,
# once per seed (initialization and shuffling differ between the systems even
# at equal seeds, so single runs differ by seed noise: compare the means).
# The five seeds are fixed before any run is scored: single runs spread by
# about +-0.5 point, so three seeds could not tell a 0.5-point difference,
# and adding seeds after a miss would pick the verdict. Each system's
# spread (sample standard deviation) is printed beside its mean.
# Prints each system's test accuracy per seed, the means and their difference
# (target: within 0.5 point). Then parallax with its own defaults (cosine
# schedule; targets >= 87% MLP, >= 90% CNN) for the first seed, unless
# --no-defaults. Each run's metrics and log stay in RESULTS (default
# BUILD/bench-results/fmnist-<time>); each run holds the shared lock alone.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$REPO/build-bench
PEERS=${PX_PEERS:-$REPO/../shared/peers}
MODELS="mlp cnn" SEEDS="0 1 2 3 4" EPOCHS=2 THREADS=2 DEFAULTS=1 RESULTS="" LOCK=/tmp/px-build.lock

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --models) MODELS=$2; shift 2 ;;
    --seeds) SEEDS=$2; shift 2 ;;
    --epochs) EPOCHS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --no-defaults) DEFAULTS=0; shift ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --peers) PEERS=$2; shift 2 ;;
    --results) RESULTS=$2; shift 2 ;;
    --lock) LOCK=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

PARALLAX=$BUILD/src/cli/parallax
[[ -x $PARALLAX ]] || { echo "error: $PARALLAX not built: ninja -C $BUILD parallax" >&2; exit 1; }
[[ -f $PEERS/torch/fmnist.py ]] || { echo "error: peer not found at $PEERS/torch/fmnist.py (--peers DIR)" >&2; exit 1; }
PY=/usr/bin/python3
RESULTS=${RESULTS:-$BUILD/bench-results/fmnist-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS"
echo "results in $RESULTS" >&2

locked() { if [[ -n $LOCK ]]; then flock "$LOCK" "$@"; else "$@"; fi; }
lr_of() { [[ $1 == mlp ]] && echo 0.05 || echo 0.02; }

for m in $MODELS; do
  lr=$(lr_of "$m")
  for seed in $SEEDS; do
    echo "[$m seed $seed] parallax, lr $lr constant" >&2
    rm -f "$RESULTS/parallax-$m-$seed.jsonl" "$RESULTS/torch-$m-$seed.jsonl"
    locked "$PARALLAX" train --model "$m" --epochs "$EPOCHS" --batch 64 --optimizer sgd --momentum 0.9 \
      --lr "$lr" --lr-schedule constant --weight-decay 0 --seed "$seed" --threads "$THREADS" --progress lines \
      --metrics "$RESULTS/parallax-$m-$seed.jsonl" >"$RESULTS/parallax-$m-$seed.log" 2>&1
    tail -n 2 "$RESULTS/parallax-$m-$seed.log" >&2
    echo "[$m seed $seed] torch, lr $lr" >&2
    LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp locked "$PY" "$PEERS/torch/fmnist.py" --model "$m" \
      --epochs "$EPOCHS" --threads "$THREADS" --batch 64 --lr "$lr" --seed "$seed" \
      --json "$RESULTS/torch-$m-$seed.jsonl" >"$RESULTS/torch-$m-$seed.log" 2>&1
    grep '^\[fmnist\]' "$RESULTS/torch-$m-$seed.log" | tail -n 1 >&2
  done
  if ((DEFAULTS)); then
    seed=${SEEDS%% *}
    echo "[$m] parallax defaults, seed $seed" >&2
    rm -f "$RESULTS/parallax-default-$m.jsonl"
    locked "$PARALLAX" train --model "$m" --seed "$seed" --threads "$THREADS" --progress lines \
      --metrics "$RESULTS/parallax-default-$m.jsonl" >"$RESULTS/parallax-default-$m.log" 2>&1
    tail -n 2 "$RESULTS/parallax-default-$m.log" >&2
  fi
done

"$PY" - "$RESULTS" "$MODELS" "$SEEDS" "$DEFAULTS" <<'EOF2' | tee "$RESULTS/summary.txt"
import json, os, statistics, sys
d, models, seeds, defaults = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4] == "1"

def px_run(name):
    lines = [json.loads(l) for l in open(f"{d}/{name}.jsonl") if l.strip()]
    evals = [l for l in lines if "val_accuracy" in l]
    train = [l for l in lines if "train_loss" in l]
    return 100 * evals[-1]["val_accuracy"], train[-1]["time_s"] if train else float("nan")

def torch_run(name):
    r = json.loads(open(f"{d}/{name}.jsonl").read().splitlines()[-1])
    return 100 * r["epochs"][-1]["test_acc"], sum(e["train_s"] for e in r["epochs"])

sd = lambda xs: statistics.stdev(xs) if len(xs) > 1 else 0.0
target = {"mlp": 87.0, "cnn": 90.0}
ok = True
for m in models:
    px = [px_run(f"parallax-{m}-{s}") for s in seeds]
    pt = [torch_run(f"torch-{m}-{s}") for s in seeds]
    pa, ta = [a for a, _ in px], [a for a, _ in pt]
    diff = statistics.mean(pa) - statistics.mean(ta)
    ok &= abs(diff) <= 0.5
    print(f"{m}: test accuracy % per seed {seeds} (2 epochs, train s per run)")
    print(f"  parallax {' '.join(f'{a:.2f}' for a in pa)}  mean {statistics.mean(pa):.2f} +- {sd(pa):.2f}"
          f"  ({statistics.mean(t for _, t in px):.1f} s)")
    print(f"  torch    {' '.join(f'{a:.2f}' for a in ta)}  mean {statistics.mean(ta):.2f} +- {sd(ta):.2f}"
          f"  ({statistics.mean(t for _, t in pt):.1f} s)")
    print(f"  difference of means {diff:+.2f} point (target within 0.5): {'ok' if abs(diff) <= 0.5 else 'NOT met'}")
    if defaults and os.path.exists(f"{d}/parallax-default-{m}.jsonl"):
        da, dt = px_run(f"parallax-default-{m}")
        ok &= da >= target[m]
        print(f"  parallax defaults: {da:.2f}% ({dt:.1f} s; target >= {target[m]}): "
              f"{'ok' if da >= target[m] else 'NOT met'}")
print("all targets met" if ok else "some targets NOT met")
EOF2
