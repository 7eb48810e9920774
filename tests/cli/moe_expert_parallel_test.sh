#!/usr/bin/env bash
# Expert parallelism from the command line (docs/moe.md): `parallax lower
# --ep 2` prints the routed exchanges; `parallax train --ep 2` gives one
# rank's losses (also with two micro-batches interleaved, whose exchanges
# run on the expert axis' progress lane) and writes the load, which `parallax simulate
# --expert-load` turns into the busiest rank's imbalance; and a rank that routes by another
# capacity factor, or to an expert that does not exist
# (--inject-fault RANK:STEP:moe-capacity | moe-expert), ends the job at
# that step with the named error on every rank, never a hang.
#
#   moe_expert_parallel_test.sh PARALLAX
set -euo pipefail
PARALLAX=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $1"; shift; for f in "$@"; do echo "--- $f"; cat "$f"; done; exit 1; }
MOE=(--model gpt --layers 2 --heads 2 --embd 32 --block 16 --batch 6 --moe-experts 4 --moe-top-k 2)
RUN=(--steps 8 --eval-every 0 --eval-batches 1 --sample-tokens 0 --no-predict --progress lines)

"$PARALLAX" lower "${MOE[@]}" --ranks 2 --ep 2 --cost > "$WORK/lower.txt" 2>&1 || fail "lower failed" "$WORK/lower.txt"
[[ $(grep -c "route ep to experts" "$WORK/lower.txt") -ge 4 && $(grep -c "route ep back to tokens" "$WORK/lower.txt") -ge 4 ]] ||
  fail "lower --ep 2 does not print a dispatch and a combine each way per layer" "$WORK/lower.txt"
grep -q "cost: bytes ep routed all_to_all_v" "$WORK/lower.txt" || fail "the cost footer lacks the routed bytes" "$WORK/lower.txt"

"$PARALLAX" train "${MOE[@]}" "${RUN[@]}" --metrics "$WORK/one.jsonl" > "$WORK/one.log" 2>&1 ||
  fail "one rank failed" "$WORK/one.log"
"$PARALLAX" train "${MOE[@]}" "${RUN[@]}" --ranks 2 --ep 2 --metrics "$WORK/ep.jsonl" > "$WORK/ep.log" 2>&1 ||
  fail "--ep 2 failed" "$WORK/ep.log"
python3 - "$WORK/one.jsonl" "$WORK/ep.jsonl" <<'PY' || fail "--ep 2 differs from one rank" "$WORK/one.jsonl" "$WORK/ep.jsonl"
import json, sys
def steps(path):
    return [json.loads(l) for l in open(path) if '"train_loss"' in l]
one, ep = steps(sys.argv[1]), steps(sys.argv[2])
assert len(one) == len(ep) == 8, (len(one), len(ep))
for a, b in zip(one, ep):
    assert abs(a["train_loss"] - b["train_loss"]) <= 1e-5 * abs(a["train_loss"]), (a["train_loss"], b["train_loss"])
    assert [l["load"] for l in a["moe"]] == [l["load"] for l in b["moe"]] or all(
        abs(x - y) < 1e-6 for la, lb in zip(a["moe"], b["moe"]) for x, y in zip(la["load"], lb["load"])), (a["moe"], b["moe"])
PY

# Two micro-batches interleaved: each one's exchanges on the expert axis'
# progress lane, behind the other's compute; still one rank's losses.
"$PARALLAX" lower "${MOE[@]}" --ranks 2 --ep 2 --micro-batches 2 --overlap-experts > "$WORK/lower2.txt" 2>&1 ||
  fail "lower --micro-batches 2 failed" "$WORK/lower2.txt"
[[ $(grep -c "progress:ep route ep" "$WORK/lower2.txt") -ge 16 ]] ||
  fail "lower --ep 2 --micro-batches 2 does not put the exchanges on the expert axis' progress lane" "$WORK/lower2.txt"
BIAS=(--moe-balance bias --micro-batches 2)
"$PARALLAX" train "${MOE[@]}" "${RUN[@]}" "${BIAS[@]}" --metrics "$WORK/one2.jsonl" > "$WORK/one2.log" 2>&1 ||
  fail "one rank with 2 micro-batches failed" "$WORK/one2.log"
"$PARALLAX" train "${MOE[@]}" "${RUN[@]}" "${BIAS[@]}" --ranks 2 --ep 2 --overlap-experts --metrics "$WORK/ep2.jsonl" > "$WORK/ep2.log" 2>&1 ||
  fail "--ep 2 --micro-batches 2 failed" "$WORK/ep2.log"
python3 - "$WORK/one2.jsonl" "$WORK/ep2.jsonl" <<'PY' || fail "--ep 2 --micro-batches 2 differs from one rank" "$WORK/one2.jsonl" "$WORK/ep2.jsonl"
import json, sys
one, ep = ([json.loads(l)["train_loss"] for l in open(p) if '"train_loss"' in l] for p in sys.argv[1:3])
assert len(one) == len(ep) == 8 and all(abs(a - b) <= 1e-5 * abs(a) for a, b in zip(one, ep)), (one, ep)
PY
# Every expert rank joins every micro-batch's exchanges: a batch that leaves one without rows is refused up front.
status=0
"$PARALLAX" train "${MOE[@]}" "${RUN[@]}" --ranks 2 --ep 2 --batch 3 --micro-batches 2 > "$WORK/small.log" 2>&1 || status=$?
[[ $status -ne 0 ]] && grep -q "batch size 3 leaves a micro-batch without rows" "$WORK/small.log" ||
  fail "a batch of 3 over 2 expert ranks x 2 micro-batches is not refused by name" "$WORK/small.log"
status=0
"$PARALLAX" train "${MOE[@]}" "${RUN[@]}" --ranks 2 --ep 2 --overlap-experts > "$WORK/one-micro.log" 2>&1 || status=$?
[[ $status -ne 0 ]] && grep -q "expected --micro-batches >= 2, got 1" "$WORK/one-micro.log" ||
  fail "--overlap-experts with one micro-batch is not refused by name" "$WORK/one-micro.log"

# The planner reads the run's measured load: its busiest expert rank's share over an even one.
"$PARALLAX" simulate "${MOE[@]}" --ranks 2 --ep 2 --cluster dgx-a100 --expert-load "$WORK/ep.jsonl" > "$WORK/sim.log" 2>&1 ||
  fail "simulate --expert-load failed" "$WORK/sim.log"
python3 - "$WORK/ep.jsonl" "$WORK/sim.log" <<'PY' || fail "simulate's measured imbalance is not the run's" "$WORK/sim.log"
import json, re, sys
last = [json.loads(l) for l in open(sys.argv[1]) if '"moe"' in l][-1]
worst = max(max(sum(l["load"][:2]), sum(l["load"][2:])) * 2 for l in last["moe"])
said = float(re.search(r"expert imbalance ([0-9.]+), measured by", open(sys.argv[2]).read()).group(1))
assert abs(said - max(worst, 1.0)) < 1e-3, (said, worst)
PY

# Inline, and (2 micro-batches) failing in the engine's job that another micro-batch's compute overlaps.
for fault in "1:3:moe-capacity|routes with capacity factor|1" "0:2:moe-expert|routes row 0 to expert 4, but the layer has 4 experts|1" \
             "1:3:moe-capacity|routes with capacity factor|2" "0:2:moe-expert|routes row 0 to expert 4, but the layer has 4 experts|2"; do
  spec=${fault%%|*} rest=${fault#*|} message=${rest%|*} micro=${rest##*|}
  status=0
  overlap=(); [[ $micro -gt 1 ]] && overlap=(--overlap-experts)
  timeout 120 "$PARALLAX" train "${MOE[@]}" "${RUN[@]}" --ranks 2 --ep 2 --micro-batches "$micro" "${overlap[@]}" \
    --inject-fault "$spec" \
    > "$WORK/fault.log" 2>&1 || status=$?
  [[ $status -ne 0 && $status -ne 124 ]] || fail "--inject-fault $spec: exit $status (124: it hung)" "$WORK/fault.log"
  grep -q "$message" "$WORK/fault.log" || fail "--inject-fault $spec: no '$message'" "$WORK/fault.log"
  grep -q "expert rank" "$WORK/fault.log" || fail "--inject-fault $spec: the error names no rank" "$WORK/fault.log"
done
echo "expert parallelism: lowered, trained as one rank, faults named"
