#!/usr/bin/env bash
# `parallax plan` end to end: on a calibrated local spec it writes the
# chosen strategy, with its precision (auto: fp32 and bf16 compared where
# the CPU has bf16), which `parallax train --strategy` runs unchanged; its
# table ranks by predicted step; on a DGX preset a large GPT goes through
# the stage search with pipeline stages; an impossible memory budget is a
# named error naming the closest candidate; an imported ONNX graph goes
# through the stage search too; a sequence too long for one
# rank's memory gets context parallelism; --cluster local without
# --ranks is a named error. (plan_budget_test.sh: --budget-s bounds a
# search at scale.)
#
#   plan_test.sh PARALLAX
set -euo pipefail
PX=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export XDG_CACHE_HOME=$WORK/cache
TINY=(--model gpt --layers 2 --heads 2 --embd 32 --block 32 --batch 8)
fail() { echo "FAIL: $*"; exit 1; }

"$PX" calibrate "${TINY[@]}" --max-ranks 2 --kernel-ms 5 > /dev/null
"$PX" plan "${TINY[@]}" --cluster local --ranks 2 --out "$WORK/plan.json" > "$WORK/plan.txt"
cat "$WORK/plan.txt"
grep -q "grid search" "$WORK/plan.txt" || fail "a small model is planned by the grid"
python3 - "$WORK/plan.txt" "$WORK/plan.json" <<'PY'
import json, re, sys
rows = [l for l in open(sys.argv[1]) if re.match(r"\s+\d+\s+pp=", l)]
def seconds(l):
    m = re.search(r"(\d+\.\d+) (m?s) ", l)
    return float(m.group(1)) * (1e-3 if m.group(2) == "ms" else 1)
steps = [seconds(l) for l in rows]
assert steps == sorted(steps), f"not ranked by step: {steps}"
strategy = json.load(open(sys.argv[2]))
assert "mesh" in strategy, strategy
bf16_cpu = any(l.startswith("flags") and " avx512_bf16" in l for l in open("/proc/cpuinfo"))
text = open(sys.argv[1]).read()
# auto on local: both precisions searched where the CPU has bf16, the faster written into the strategy.
assert ("precision: compared the best steps, fp32" in text) == bf16_cpu, text
assert strategy["precision"] in (("fp32", "bf16") if bf16_cpu else ("fp32",)), strategy
assert f"planned in {strategy['precision']}" in text or not bf16_cpu, text
PY
"$PX" plan "${TINY[@]}" --cluster local --ranks 2 --precision fp32 --out "$WORK/plan-fp32.json" > /dev/null
grep -q '"precision": "fp32"' "$WORK/plan-fp32.json" || fail "plan --precision fp32 did not record fp32"
"$PX" plan "${TINY[@]}" --cluster dgx-a100 --ranks 8 --budget-s 3 --out "$WORK/plan-dgx.json" > "$WORK/plan-dgx.txt"
grep -q '"precision": "bf16"' "$WORK/plan-dgx.json" || fail "a DGX plan (bf16 by default) did not record bf16"
grep -q "bf16 mixed precision" "$WORK/plan-dgx.txt" || fail "a DGX plan does not say bf16"
"$PX" train "${TINY[@]}" --ranks 2 --strategy "$WORK/plan.json" --steps 3 --sample-tokens 0 --eval-batches 1 \
  --progress lines > "$WORK/train.txt"
grep -q "trained 3 steps" "$WORK/train.txt" || { cat "$WORK/train.txt"; fail "the plan did not train"; }

if "$PX" plan "${TINY[@]}" --cluster local > "$WORK/err.txt" 2>&1; then fail "local without --ranks planned"; fi
grep -q "give --ranks" "$WORK/err.txt" || { cat "$WORK/err.txt"; fail "no named error for --ranks"; }

BIG=(--model gpt --layers 16 --heads 16 --embd 2048 --block 1024 --vocab 51200 --batch 64)
"$PX" plan "${BIG[@]}" --cluster dgx-a100:2 --method alpa --top 3 > "$WORK/big.txt"
grep -q "alpa search" "$WORK/big.txt" || { cat "$WORK/big.txt"; fail "no stage search"; }
grep -q "replayed on their Programs" "$WORK/big.txt" || fail "no verification count"
grep -q "^chose pp=" "$WORK/big.txt" || { cat "$WORK/big.txt"; fail "no choice"; }

# An imported graph has no blocks to probe: the stage search cuts each
# layout's stages by cost at node boundaries and replays it, and the plan
# it writes trains.
FIXTURES="$(dirname "$0")/../fixtures/onnx"
models=(cnn gpt)
if [ "${PX_ONNX:-ON}" = OFF ]; then
  echo "SKIP: planning the ONNX fixtures: this build has no ONNX (-DPX_ONNX=OFF)"
  models=()
fi
for model in "${models[@]}"; do
  # fp32: the plan trains on this CPU, which may have no bf16 (a DGX plan's default).
  "$PX" plan --model "$FIXTURES/$model.onnx" --batch 8 --cluster dgx-a100 --ranks 4 --method alpa --budget-s 5 \
    --precision fp32 --out "$WORK/onnx-$model.json" > "$WORK/onnx-$model.txt"
  grep -q "alpa search" "$WORK/onnx-$model.txt" || { cat "$WORK/onnx-$model.txt"; fail "$model.onnx: no stage search"; }
  grep -q "^chose pp=" "$WORK/onnx-$model.txt" || { cat "$WORK/onnx-$model.txt"; fail "$model.onnx: no choice"; }
  "$PX" train --model "$FIXTURES/$model.onnx" --batch 8 --ranks 4 --strategy "$WORK/onnx-$model.json" --steps 3 \
    --eval-batches 1 --progress lines > "$WORK/onnx-$model-train.txt"
  grep -q "trained 3 steps" "$WORK/onnx-$model-train.txt" \
    || { cat "$WORK/onnx-$model-train.txt"; fail "the alpa plan of $model.onnx did not train"; }
done

echo '{"name": "tiny-gpus", "nodes": 1, "devices_per_node": 8,
  "device": {"name": "tiny", "flops_f32": 1e13, "flops_bf16": 1e14, "memory_bytes": 1e8, "memory_bandwidth": 1e12},
  "intra_node": {"name": "nv", "bandwidth": 1e11, "latency": 3e-6},
  "inter_node": {"name": "ib", "bandwidth": 1e10, "latency": 6e-6}}' > "$WORK/tiny.json"
if "$PX" plan "${BIG[@]}" --cluster "$WORK/tiny.json" --budget-s 2 > "$WORK/oom.txt" 2>&1; then fail "a 1-GB model fitted in 100 MB"; fi
grep -q "no strategy fits; the closest" "$WORK/oom.txt" || { cat "$WORK/oom.txt"; fail "no named error"; }
grep -q "a device, the device has 0.09 GiB" "$WORK/oom.txt" || { cat "$WORK/oom.txt"; fail "no memory reason"; }
# A long sequence on devices of 1 GB: 16384 tokens. Attention keeps no
# T x T matrix (kernels/attention.h), so tensor parallelism alone fits it
# too, but splitting the sequence through attention is faster: the plan
# picks context parallelism, and without it chooses a slower step.
echo '{"name": "small-gpus", "nodes": 1, "devices_per_node": 4,
  "device": {"name": "small", "flops_f32": 1e12, "flops_bf16": 1e12, "memory_bytes": 1e9, "memory_bandwidth": 1e11},
  "intra_node": {"name": "link", "bandwidth": 1e10, "latency": 5e-6},
  "inter_node": {"name": "link", "bandwidth": 1e10, "latency": 5e-6}}' > "$WORK/small.json"
LONG=(--model gpt --block 16384 --batch 1 --cluster "$WORK/small.json" --precision fp32 --method grid)
"$PX" plan "${LONG[@]}" --out "$WORK/long.json" > "$WORK/long.txt"
grep -q "^chose pp=1 dp=1 cp=" "$WORK/long.txt" || { cat "$WORK/long.txt"; fail "a long sequence did not get --cp"; }
grep -q '"context"' "$WORK/long.json" || fail "the written strategy has no context axis"
"$PX" plan "${LONG[@]}" --no-context > "$WORK/long-nocp.txt" 2>&1 || { cat "$WORK/long-nocp.txt"; fail "16384 tokens did not fit 1 GB without context parallelism"; }
if grep -q "^chose.* cp=" "$WORK/long-nocp.txt"; then cat "$WORK/long-nocp.txt"; fail "--no-context chose cp"; fi
# The chosen steps in ms ("chose ...: 269.575 ms a step" or "1.012 s a step").
step_ms() { sed -n 's/^chose[^:]*: \([0-9.]*\) \(m\{0,1\}s\) a step.*/\1 \2/p' "$1" | awk '{print $2 == "s" ? $1 * 1000 : $1}'; }
WITH=$(step_ms "$WORK/long.txt") WITHOUT=$(step_ms "$WORK/long-nocp.txt")
awk -v a="$WITH" -v b="$WITHOUT" 'BEGIN { exit !(a > 0 && a < b) }' || fail "cp's step $WITH ms is not faster than $WITHOUT ms without"

echo "plan: ok"
