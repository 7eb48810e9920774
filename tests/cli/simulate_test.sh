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
python3 - "$WORK/out.txt" "$(dirname "${BASH_SOURCE[0]}")/../../bench" <<'PY' ||
import json, math, re, sys
out, bench = open(sys.argv[1]).read(), sys.argv[2]
dev, held = json.load(open(f"{bench}/published_runs.json")), json.load(open(f"{bench}/published_heldout.json"))
# Both sets as (id, set, preset, gpus, tp, pp, parameters, scored seconds).
def params(l, h, V, S):
    return l * (12 * h * h + 13 * h) + (V + S) * h + 2 * h
runs = [(r["id"], "development", "dgx-a100", r["gpus"], r["tp"], r["pp"], params(r["layers"], r["embd"], 51200, 2048),
         r["scored"]["predicted_seconds"]) for r in dev["runs"]]
runs += [(r["id"], "held-out", r["cluster"], r["gpus"], r["tp"], r["pp"], params(r["layers"], r["embd"], r["vocab"], r["seq"]),
          held["scoring"]["predicted_seconds"][r["id"]]) for r in held["runs"]]
job = params(4, 64, 256, 64)  # the job's GPT, on dgx-a100: 8 GPUs, tp 2, pp 2
def distance(r):
    _, _, preset, gpus, tp, pp, n, _ = r
    return (abs(math.log(gpus / 8)) + abs(math.log(tp / 2)) + abs(math.log(pp / 2)) + abs(math.log(n / job))
            + (0 if preset == "dgx-a100" else 1))
nearest = sorted(runs, key=distance)[:3]
lines = re.findall(r"^  (\S+) \((development|held-out)\): .* predicted ([0-9.]+) s, published ([0-9.]+) s \(([+-][0-9.]+)%\)$",
                   out, re.M)
assert [(i, s) for i, s, *_ in lines] == [(r[0], r[1]) for r in nearest], (lines, [r[:2] for r in nearest])
for (i, s, predicted, published, e), r in zip(lines, nearest):
    assert abs(float(predicted) - r[7]) < 0.006, (i, predicted, r[7])  # the run's score
    # The error is the score's over the published seconds, which print rounded to 10 ms.
    assert abs(float(e) - 100 * (r[7] / float(published) - 1)) < 0.06 + 100 * r[7] * 0.005 / float(published) ** 2, (i, e)
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
