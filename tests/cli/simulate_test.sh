#!/usr/bin/env bash
# `parallax simulate` end to end: a GPT under pp x dp x tp on a DGX preset
# prints its step time, bubble, memory and link bytes; its Chrome trace has
# one process per rank and every event's instruction id names an
# instruction of the Program `parallax lower` prints for that rank; a
# mesh larger than the cluster is a named error.
#
#   simulate_test.sh PARALLAX
set -euo pipefail
PX=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
JOB=(--model gpt --layers 4 --heads 4 --embd 64 --block 64 --batch 16 --mesh pp=2,dp=2,tp=2 --micro-batches 4 --zero 1)

"$PX" simulate "${JOB[@]}" --cluster dgx-a100 --all-ranks --trace "$WORK/sim.json" > "$WORK/out.txt"
# One rank per stage predicts the same step as every rank.
"$PX" simulate "${JOB[@]}" --cluster dgx-a100 > "$WORK/few.txt"
[ "$(grep '^step ' "$WORK/out.txt")" = "$(grep '^step ' "$WORK/few.txt")" ] || { echo "FAIL: the symmetric replay differs"; cat "$WORK/out.txt" "$WORK/few.txt"; exit 1; }
for line in "simulated mesh {pp:2, dp:2, tp:2} on dgx-a100" "step " "bubble " "peak memory " "bytes sent per step, intra-node" \
            "assumed for the step's largest pieces" "  GEMM " "  attention " "  collective "; do
  grep -q "$line" "$WORK/out.txt" || { echo "FAIL: no '$line' in:"; cat "$WORK/out.txt"; exit 1; }
done
# On a preset, --precision auto is bf16, and what is simulated is the bf16
# Program itself (its casts and bf16 storage), the one lower prints for it.
"$PX" lower "${JOB[@]}" --precision bf16 --rank 5 > "$WORK/rank5.program"
python3 - "$WORK/sim.json" "$WORK/rank5.program" <<'PY'
import json, re, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
ranks = {e["pid"] for e in events}
assert ranks == set(range(8)), f"trace has ranks {sorted(ranks)}, expected 0..7"
program = {int(m.group(1)): line for line in open(sys.argv[2]) if (m := re.match(r"#(\d+) ", line))}
mine = [e for e in events if e["pid"] == 5]
assert mine, "rank 5 has no events"
for e in mine:
    i = e["args"]["instr"]
    assert i in program, f"event {e['name']} names instruction #{i}, which rank 5's program does not have"
    if e["cat"] == "compute":
        # The instruction's name (a collective's), or a node's compute or
        # reshard: "NODE (op)" names what the line names; or a local pass:
        # "KIND [NAME]" is the line's "compute KIND".
        name = e["name"]
        what = name if f'"{name}"' in program[i] else name.split(" (")[0] if " (" in name else "compute " + name.split()[0]
        assert what in program[i], f"event {name} is #{i}, but the program says: {program[i]}"
print(f"trace: {len(events)} events over 8 ranks; rank 5's {len(mine)} events match its program")
PY
if "$PX" simulate "${JOB[@]}" --mesh pp=2,dp=8,tp=2 --cluster dgx-a100:1 > "$WORK/err.txt" 2>&1; then
  echo "FAIL: 32 ranks on one 8-GPU node simulated"; exit 1
fi
grep -q "has 32 ranks, cluster 'dgx-a100' has 8 devices" "$WORK/err.txt" || { echo "FAIL:"; cat "$WORK/err.txt"; exit 1; }
