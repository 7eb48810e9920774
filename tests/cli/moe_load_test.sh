#!/usr/bin/env bash
# A mixture of experts' load from the command line (docs/moe.md): a run on
# two data-parallel ranks with a capacity writes each step's "moe" entry
# (every layer, shares summing to 1, a dropped share), the report renders
# it, and `parallax doctor` passes an even load and names an expert that
# takes too much (steps appended with expert 2 of layer 1 at 70%).
#
#   moe_load_test.sh PARALLAX
set -euo pipefail
PARALLAX=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $1"; shift; for f in "$@"; do echo "--- $f"; cat "$f"; done; exit 1; }

"$PARALLAX" train --model gpt --layers 2 --heads 2 --embd 32 --block 16 --batch 8 --moe-experts 4 --moe-top-k 1 \
  --capacity-factor 1.0 --ranks 2 --steps 12 --eval-every 0 --eval-batches 1 --sample-tokens 0 --no-predict \
  --run-dir "$WORK/run" > "$WORK/train.log" 2>&1 || fail "training failed" "$WORK/train.log"
python3 - "$WORK/run/metrics.jsonl" <<'PY' || fail "the metrics' moe entries are wrong" "$WORK/run/metrics.jsonl"
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"train_loss"' in l]
assert len(steps) == 12, len(steps)
for s in steps:
    layers = s["moe"]
    assert [l["layer"] for l in layers] == [0, 1], layers
    for l in layers:
        assert len(l["load"]) == 4 and abs(sum(l["load"]) - 1) < 1e-5, l
        assert 0 <= l["dropped"] < 1 and l["aux_loss"] > 0 and l["z_loss"] > 0, l
assert any(l["dropped"] > 0 for s in steps for l in s["moe"]), "a capacity of 1.0 at top-1 dropped nothing"
PY
"$PARALLAX" report "$WORK/run" --out "$WORK/report.html" > "$WORK/report.log" 2>&1 || fail "report failed" "$WORK/report.log"
grep -q '"moe"' "$WORK/report.html" || fail "the report holds no routing data" "$WORK/report.log"
"$PARALLAX" doctor --expert-share 0.99 "$WORK/run" > "$WORK/doctor.log" 2>&1 || true
grep -q "expert load in $WORK/run over steps 1-12: every expert within its threshold" "$WORK/doctor.log" ||
  fail "the doctor did not pass the load" "$WORK/doctor.log"
for step in $(seq 13 32); do
  echo "{\"step\": $step, \"train_loss\": 1.0, \"moe\": [{\"layer\": 1, \"load\": [0.1, 0.1, 0.7, 0.1], \"dropped\": 0.3}]}"
done >> "$WORK/run/metrics.jsonl"
"$PARALLAX" doctor "$WORK/run" > "$WORK/doctor.log" 2>&1 || true
grep -q "layer 1 expert 2 took 70.0% of the choices (even share 25.0%, threshold 50.0%)" "$WORK/doctor.log" ||
  fail "the doctor did not name the hot expert" "$WORK/doctor.log"
echo "PASS"
