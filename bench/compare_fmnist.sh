#!/usr/bin/env bash
# Fashion-MNIST accuracy, parallax vs PyTorch 1.13, same hyper-parameters.
#
#   bench/compare_fmnist.sh [--models "mlp cnn"] [--epochs 2] [--threads 2] [--no-defaults]
#                           [--build build-bench] [--peers DIR] [--results DIR]
#                           [--lock /tmp/px-build.lock]
#
# Same hyper-parameters in both: SGD momentum 0.9, batch 64, constant lr
# (MLP 784-256-256-10: 0.05; CNN conv-pool-conv-pool-fc-fc: 0.02), 2 epochs;
# prints both test accuracies and their difference (target: within 0.5 point).
# Then parallax with its own defaults (cosine schedule; targets >= 87% MLP,
# >= 90% CNN) unless --no-defaults. Each run's metrics and log stay in
# RESULTS (default BUILD/bench-results/fmnist-<time>); each run holds the
# shared lock alone.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$REPO/build-bench
PEERS=${PX_PEERS:-$REPO/../shared/peers}
MODELS="mlp cnn" EPOCHS=2 THREADS=2 DEFAULTS=1 RESULTS="" LOCK=/tmp/px-build.lock

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --models) MODELS=$2; shift 2 ;;
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
  echo "[$m] parallax, lr $lr constant" >&2
  rm -f "$RESULTS/parallax-$m.jsonl"
  locked "$PARALLAX" train --model "$m" --epochs "$EPOCHS" --batch 64 --optimizer sgd --momentum 0.9 \
    --lr "$lr" --schedule constant --threads "$THREADS" --progress lines \
    --metrics "$RESULTS/parallax-$m.jsonl" >"$RESULTS/parallax-$m.log" 2>&1
  tail -n 2 "$RESULTS/parallax-$m.log" >&2
  echo "[$m] torch, lr $lr" >&2
  rm -f "$RESULTS/torch-$m.jsonl"
  LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp locked "$PY" "$PEERS/torch/fmnist.py" --model "$m" \
    --epochs "$EPOCHS" --threads "$THREADS" --batch 64 --lr "$lr" --json "$RESULTS/torch-$m.jsonl" \
    >"$RESULTS/torch-$m.log" 2>&1
  grep '^\[fmnist\]' "$RESULTS/torch-$m.log" | tail -n 1 >&2
  if ((DEFAULTS)); then
    echo "[$m] parallax defaults" >&2
    rm -f "$RESULTS/parallax-default-$m.jsonl"
    locked "$PARALLAX" train --model "$m" --threads "$THREADS" --progress lines \
      --metrics "$RESULTS/parallax-default-$m.jsonl" >"$RESULTS/parallax-default-$m.log" 2>&1
    tail -n 2 "$RESULTS/parallax-default-$m.log" >&2
  fi
done

"$PY" - "$RESULTS" "$MODELS" "$DEFAULTS" <<'EOF' | tee "$RESULTS/summary.txt"
import json, os, sys
d, models, defaults = sys.argv[1], sys.argv[2].split(), sys.argv[3] == "1"

def px_acc(name):
    lines = [json.loads(l) for l in open(f"{d}/{name}.jsonl") if l.strip()]
    evals = [l for l in lines if "val_accuracy" in l]
    train = [l for l in lines if "train_loss" in l]
    return 100 * evals[-1]["val_accuracy"], train[-1]["time_s"] if train else float("nan")

def torch_acc(m):
    r = json.loads(open(f"{d}/torch-{m}.jsonl").read().splitlines()[-1])
    return 100 * r["epochs"][-1]["test_acc"], sum(e["train_s"] for e in r["epochs"])

target = {"mlp": 87.0, "cnn": 90.0}
print(f"{'model':<6}{'parallax %':>11}{'torch %':>9}{'diff':>7}{'<=0.5':>6}{'px train s':>11}{'pt train s':>11}"
      + (f"{'px default %':>14}{'target':>8}" if defaults else ""))
ok = True
for m in models:
    pa, ps = px_acc(f"parallax-{m}")
    ta, ts = torch_acc(m)
    diff = pa - ta
    ok &= abs(diff) <= 0.5
    row = f"{m:<6}{pa:>11.2f}{ta:>9.2f}{diff:>+7.2f}{'yes' if abs(diff) <= 0.5 else 'NO':>6}{ps:>11.1f}{ts:>11.1f}"
    if defaults and os.path.exists(f"{d}/parallax-default-{m}.jsonl"):
        da, _ = px_acc(f"parallax-default-{m}")
        ok &= da >= target[m]
        row += f"{da:>14.2f}{('>=' + str(target[m])) + (' ok' if da >= target[m] else ' NO'):>12}"
    print(row)
print("all targets met" if ok else "some targets NOT met")
EOF
