#!/usr/bin/env bash
# `parallax calibrate` end to end, in a private cache directory: it saves
# the local spec with kernel timings; a second model adds its kernels to
# it; `simulate --cluster local` reads it; `train` ends with predicted vs
# measured step time and memory from it and writes both into the metrics
# (and, before any calibration, from probed rates, saying so); --cluster
# local without a calibration is a named error. --precision bf16 on the
# local spec costs the bf16 graph train runs (a named error on a CPU
# without AVX512_BF16), and a bf16 run predicts its own step.
#
#   calibrate_test.sh PARALLAX
set -euo pipefail
PX=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export XDG_CACHE_HOME=$WORK/cache
SPEC=$XDG_CACHE_HOME/parallax/local-cluster.json
TINY=(--model gpt --layers 2 --heads 2 --embd 32 --block 32 --batch 8)
fail() { echo "FAIL: $*"; exit 1; }

# Before calibrating: local is a named error, train still predicts (uncalibrated).
if "$PX" simulate "${TINY[@]}" --cluster local > "$WORK/err.txt" 2>&1; then fail "--cluster local without a calibration ran"; fi
grep -q "run 'parallax calibrate' first" "$WORK/err.txt" || { cat "$WORK/err.txt"; fail "no named error"; }
"$PX" train "${TINY[@]}" --steps 4 --sample-tokens 0 --eval-batches 1 --progress lines > "$WORK/uncal.txt"
grep -q "run 'parallax calibrate' for a calibrated prediction" "$WORK/uncal.txt" || { cat "$WORK/uncal.txt"; fail "uncalibrated prediction not labelled"; }

# --kernel-ms 5 (the default 20): rougher timings, a quarter of the time; this checks the path, not the figures.
"$PX" calibrate "${TINY[@]}" --max-ranks 2 --kernel-ms 5 > "$WORK/cal1.txt"
[ -f "$SPEC" ] || fail "no spec at $SPEC"
first=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['profile']['kernels']))" "$SPEC")
"$PX" calibrate --model mlp --batch 16 --max-ranks 1 --comm keep --kernel-ms 5 > "$WORK/cal2.txt"
python3 - "$SPEC" "$first" <<'PY'
import json, sys
spec = json.load(open(sys.argv[1]))
kernels = spec["profile"]["kernels"]
assert len(kernels) > int(sys.argv[2]), f"the mlp added no kernels ({len(kernels)})"
ops = {k["op"] for k in kernels.values()}
assert {"attention", "linear", "layernorm"} <= ops, ops
assert {k["threads"] for k in kernels.values()} == {1, 2}, "lone ranks time at 2 threads, in-process ranks at 1"
assert spec["devices_share_memory"] is True and spec["profile"]["contention_compute"][0] == 1
bf16_cpu = any(l.startswith("flags") and " avx512_bf16" in l for l in open("/proc/cpuinfo"))
assert (spec["profile"]["flops_bf16"] > 0) == bf16_cpu, spec["profile"]["flops_bf16"]
assert spec["device"]["flops_bf16"] == spec["profile"]["flops_bf16"], "the local device offers the measured bf16 rate"
print(f"profile: {len(kernels)} kernels of {len(ops)} ops")
PY

"$PX" simulate "${TINY[@]}" --ranks 2 --cluster local > "$WORK/sim.txt"
grep -q "simulated mesh {dp:2} on local" "$WORK/sim.txt" || { cat "$WORK/sim.txt"; fail "simulate on local"; }

"$PX" train "${TINY[@]}" --ranks 2 --steps 6 --sample-tokens 0 --eval-batches 1 --progress lines \
  --metrics "$WORK/m.jsonl" > "$WORK/train.txt"
grep -q "predicted vs measured (from the local spec '$SPEC')" "$WORK/train.txt" || { cat "$WORK/train.txt"; fail "no prediction"; }
python3 - "$WORK/m.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
p = [l for l in lines if "predicted_step_s" in l]
assert len(p) == 1, p
p = p[0]
assert p["prediction_calibrated"] is True
assert p["predicted_step_s"] > 0 and p["measured_step_s"] > 0, p
# Memory comes from liveness and the executor's own allocation order: close on any host.
ratio = p["predicted_peak_bytes"] / p["measured_peak_bytes"]
assert 0.9 < ratio < 1.1, f"predicted/measured peak memory {ratio:.3f}"
print(f"step: predicted {p['predicted_step_s']*1e3:.2f} ms, measured {p['measured_step_s']*1e3:.2f} ms; memory ratio {ratio:.3f}")
PY
step_of() { sed -n 's/^step \([0-9.]*\) s;.*/\1/p' "$1"; }
if grep -q '^flags.* avx512_bf16' /proc/cpuinfo; then
  "$PX" simulate "${TINY[@]}" --ranks 2 --cluster local --precision bf16 > "$WORK/sim-bf16.txt"
  grep -q "on local .*, bf16 mixed precision" "$WORK/sim-bf16.txt" || { cat "$WORK/sim-bf16.txt"; fail "simulate bf16 on local"; }
  [ "$(step_of "$WORK/sim.txt")" != "$(step_of "$WORK/sim-bf16.txt")" ] ||
    fail "bf16 on local predicted the fp32 step: $(step_of "$WORK/sim.txt") s"
  "$PX" train "${TINY[@]}" --steps 4 --sample-tokens 0 --eval-batches 1 --progress lines --precision bf16 \
    > "$WORK/train-bf16.txt"
  grep -q "predicted vs measured (from the local spec '$SPEC')" "$WORK/train-bf16.txt" ||
    { cat "$WORK/train-bf16.txt"; fail "no prediction for a bf16 run"; }
  echo "bf16 on local: simulate $(step_of "$WORK/sim-bf16.txt") s against fp32 $(step_of "$WORK/sim.txt") s"
else
  if "$PX" simulate "${TINY[@]}" --ranks 2 --cluster local --precision bf16 > "$WORK/err.txt" 2>&1; then
    fail "--precision bf16 on local ran on a CPU without AVX512_BF16"
  fi
  grep -q "no bf16 GEMM rate" "$WORK/err.txt" || { cat "$WORK/err.txt"; fail "no named error for bf16 on local"; }
fi

"$PX" train "${TINY[@]}" --steps 2 --sample-tokens 0 --eval-batches 1 --progress lines --no-predict > "$WORK/quiet.txt"
if grep -q "predicted vs measured" "$WORK/quiet.txt"; then fail "--no-predict still predicted"; fi
echo "calibrate: ok"
