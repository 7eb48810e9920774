#!/usr/bin/env bash
# `parallax simulate` end to end: a GPT under pp x dp x tp on a DGX preset
# prints its step time, bubble, memory and link bytes; its Chrome trace has
# one process per rank and every event's instruction id names an
# instruction of the Program `parallax lower` prints for that rank; it
# names the published runs nearest the job's shape and how far off the
# model was on them; a mesh larger than the cluster is a named error.
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
# Beside a prediction on a preset, the published runs nearest its shape
# that the model was checked against, with their errors as last scored
# (plan/published_checks.h): for the job above, on 8 GPUs with tp 2 and pp 2.
grep -q "checked against published runs of similar shape" "$WORK/out.txt" ||
  { echo "FAIL: simulate names no checked published runs:"; cat "$WORK/out.txt"; exit 1; }
python3 - "$WORK/out.txt" "$(dirname "${BASH_SOURCE[0]}")/../../bench/published_runs.json" <<'PY' ||
import json, math, re, sys
out, runs = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))["runs"]
S, V = 2048.0, 51200.0
def published(r):
    p = r["published"]
    if "iteration_seconds" in p:
        return p["iteration_seconds"]
    B, l, h = r["batch"], r["layers"], r["embd"]
    return 96 * B * S * l * h * h * (1 + S / (6 * h) + V / (16 * l * h)) / (p["tflops_per_gpu"] * 1e12 * r["gpus"])
def params(r):
    l, h = r["layers"], r["embd"]
    return l * (12 * h * h + 13 * h) + (V + S) * h + 2 * h
job = 4 * (12 * 64 * 64 + 13 * 64) + (256 + 64) * 64 + 2 * 64  # the job's GPT
distance = lambda r: abs(math.log(r["gpus"] / 8)) + abs(math.log(r["tp"] / 2)) + abs(math.log(r["pp"] / 2)) + abs(math.log(params(r) / job))
nearest = sorted(runs, key=distance)[:3]
lines = re.findall(r"^  (\S+): .* \(([+-][0-9.]+)%\)$", out, re.M)
assert [i for i, _ in lines] == [r["id"] for r in nearest], (lines, [r["id"] for r in nearest])
for (i, e), r in zip(lines, nearest):
    want = 100 * (r["scored"]["predicted_seconds"] / published(r) - 1)
    assert abs(float(e) - want) < 0.06, (i, e, want)
PY
  { echo "FAIL: the checked runs simulate names are not the nearest, or not at their scores:"; cat "$WORK/out.txt"; exit 1; }
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
