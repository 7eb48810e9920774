#!/usr/bin/env bash
# An imported ONNX GPT against the built-in one, on the trainer's own path
# (`parallax train`): a GPT of gpt-mini's size (vocabulary 256, block 128,
# 4 layers, 4 heads, width 128, tanh GELU, no dropout) written in PyTorch
# and exported at opset 13 by examples/onnx/export_gpt.py (its LayerNorms,
# GELUs and attention fused back to parallax's ops at import), trained
# with `--model FILE.onnx`, against `--model gpt` of the same size with
# dropout 0; batch 16, 2 threads, AdamW, one rank. Per run: tokens/s over
# the steps after the warmup (from the metrics' time_s); the two alternate
# order between repetitions. Prints each median and their ratio.
#
#   bench/compare_onnx_gpt.sh [--reps 3] [--steps 40] [--warmup 5] [--build build]
#
# Target (issue 31, bring your own model): imported >= 0.9x the built-in's
# throughput. The export needs python3-torch (/usr/bin/python3); each run
# holds /tmp/px-cpu.lock.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
REPS=3 STEPS=40 WARMUP=5
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
make_results onnx-gpt

ONNX=$RESULTS/gpt_mini_opset13.onnx
flock /tmp/px-cpu.lock /usr/bin/python3 "$REPO/examples/onnx/export_gpt.py" --out "$ONNX" --block 128 --embd 128 \
  --heads 4 --layers 4 --gelu tanh --opset 13 > "$RESULTS/export.log" 2>&1 \
  || { cat "$RESULTS/export.log" >&2; echo "error: the export failed (python3-torch installed?)" >&2; exit 1; }

COMMON=(--batch 16 --threads 2 --optimizer adamw --steps $((STEPS + WARMUP)) --eval-every 0 --eval-batches 1
        --sample-tokens 0 --progress lines --no-predict)
declare -A FLAGS=([onnx]="--model $ONNX" [builtin]="--model gpt --layers 4 --heads 4 --embd 128 --block 128 --dropout 0")
for rep in $(seq 1 "$REPS"); do
  order=(onnx builtin)
  (( rep % 2 == 0 )) && order=(builtin onnx)
  for mode in "${order[@]}"; do
    # shellcheck disable=SC2086
    flock /tmp/px-cpu.lock "$PX" train ${FLAGS[$mode]} "${COMMON[@]}" --metrics "$RESULTS/$mode-$rep.jsonl" \
      > "$RESULTS/$mode-$rep.log" 2>&1 || { echo "error: $mode failed (see $RESULTS/$mode-$rep.log)" >&2; exit 1; }
    echo "rep $rep: $mode done" >&2
  done
done

python3 - "$RESULTS" "$REPS" "$WARMUP" <<'PY'
import json, statistics, sys
results, reps, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tokens = 16 * 128
def rate(mode, rep):
    steps = [json.loads(l) for l in open(f"{results}/{mode}-{rep}.jsonl") if '"train_loss"' in l]
    t = [s["time_s"] for s in steps][warmup - 1:]
    return tokens * (len(t) - 1) / (t[-1] - t[0])
rates = {m: [rate(m, r) for r in range(1, reps + 1)] for m in ("onnx", "builtin")}
for m, name in (("onnx", "imported ONNX"), ("builtin", "built-in gpt")):
    print(f"{name:14s} " + ", ".join(f"{x / 1000:.1f}k" for x in rates[m]) +
          f" tokens/s; median {statistics.median(rates[m]) / 1000:.1f}k")
ratio = statistics.median(rates["onnx"]) / statistics.median(rates["builtin"])
print(f"ratio {ratio:.2f}x (target >= 0.9x): {'met' if ratio >= 0.9 else 'NOT met'}")
PY
