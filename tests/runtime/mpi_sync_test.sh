#!/usr/bin/env bash
# Partial reduce under mpirun -np 3 (docs/heterogeneous.md):
#  1. groups forced to every replica (--sync-group 3) give bulk data
#     parallelism's loss at every step, within 1e-5 (SGD with momentum, no
#     clipping), with row shares 3:2:1;
#  2. smaller groups train, one rank slowed down, and the slow rank is
#     named a straggler while the job runs;
#  3. kill -9 of rank 2 at its step 15: a named error, and `parallax launch`
#     restarts the job from the last checkpoint (saved every 5 global
#     steps), which finishes. A fast rank 2 may be up to the staleness
#     bound (8) of its steps ahead of the slowest, so at its step 15 the
#     global step (global batches of rows, whoever computed them; rank
#     2's own 14 steps are 4.7) is past 5 but may be short of 10 (seen
#     once in 8 runs): the checkpoint is of step 5 or 10;
#  4. replicas that are 2-stage pipelines (-np 4, rows 3:1, 2 micro-batches)
#     in groups of both give bulk pipeline x data parallelism's losses.
#
#   mpi_sync_test.sh PARALLAX MPIEXEC
set -euo pipefail
PARALLAX=$1 MPIEXEC=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../mpi_launch.sh"
SCALE=${PX_TEST_TIME_SCALE:-1}
MLP=(train --model mlp --hidden 64 32 --batch 12 --steps 30 --optimizer sgd --momentum 0.9 --lr 0.05 --grad-clip 0
     --eval-every 0 --eval-batches 1 --threads 1 --progress lines --no-predict --timeout $((3 * SCALE)))

fail() { echo "FAIL: $1"; shift; for f in "$@"; do echo "--- $f"; cat "$f"; done; exit 1; }

# BULK.jsonl FULL.jsonl WHAT: the same steps, every loss within 1e-5 (relative).
same_losses() {
  python3 - "$1" "$2" "$3" <<'PY'
import json, sys
def losses(p):
    return {j["step"]: j["train_loss"] for j in map(json.loads, open(p)) if "train_loss" in j}
bulk, full = losses(sys.argv[1]), losses(sys.argv[2])
if sorted(bulk) != sorted(full): sys.exit(f"steps {sorted(full)} vs {sorted(bulk)}")
worst = max(abs(bulk[s] - full[s]) / abs(bulk[s]) for s in bulk)
print(f"{sys.argv[3]}: {len(bulk)} steps, worst relative difference {worst:.2e}")
if worst > 1e-5: sys.exit(f"{worst:.2e} > 1e-5")
PY
}

# 1. Groups of every replica against the gradient allreduce.
"${MPIRUN[@]}" -np 3 "$PARALLAX" "${MLP[@]}" --row-shares 3,2,1 --metrics "$WORK/bulk.jsonl" > "$WORK/bulk.log" 2>&1 ||
  fail "the bulk run failed" "$WORK/bulk.log"
"${MPIRUN[@]}" -np 3 "$PARALLAX" "${MLP[@]}" --row-shares 3,2,1 --sync partial-reduce --sync-group 3 \
  --metrics "$WORK/full.jsonl" > "$WORK/full.log" 2>&1 || fail "the partial-reduce run failed" "$WORK/full.log"
grep -q "3 replicas (mpi), rows 3:2:1, partial reduce" "$WORK/full.log" || fail "not 3 MPI replicas" "$WORK/full.log"
same_losses "$WORK/bulk.jsonl" "$WORK/full.jsonl" "groups of every replica against the allreduce" ||
  fail "losses differ" "$WORK/full.log"

# 2. Groups of 2 with rank 2 slowed down: it is named, and the job trains.
"${MPIRUN[@]}" -np 3 "$PARALLAX" "${MLP[@]}" --sync partial-reduce --inject-delay 2:60 \
  --metrics "$WORK/slow.jsonl" > "$WORK/slow.log" 2>&1 || fail "the slowed run failed" "$WORK/slow.log"
grep -qE "straggler: rank 2 steps [0-9.]+x as long as the fastest rank" "$WORK/slow.log" ||
  fail "the slowed rank 2 was not named a straggler" "$WORK/slow.log"
grep -qE "rounds, [0-9.]+ replicas per round, largest staleness [0-9]+" "$WORK/slow.log" ||
  fail "no round summary" "$WORK/slow.log"

# 3. kill -9 of rank 2 under partial reduce: a named error, a restart from the checkpoint.
"$PARALLAX" launch --max-restarts 1 --run-dir "$WORK/kill" -- "${MPIRUN[@]}" -np 3 "$PARALLAX" "${MLP[@]}" \
  --sync partial-reduce --save "$WORK/kill/ckpt" --save-every 5 --inject-fault 2:15:kill \
  --metrics "$WORK/kill.jsonl" > "$WORK/kill.log" 2>&1 || fail "the job did not finish after a restart" "$WORK/kill.log"
grep -q "attempt 1 failed" "$WORK/kill.log" || fail "the kill did not fail the first attempt" "$WORK/kill.log"
grep -qE "rank 2" "$WORK/kill.log" || fail "the dead rank was not named" "$WORK/kill.log"
resumed=$(grep -oE "resumed from '$WORK/kill/ckpt' at step (5|10)\b" "$WORK/kill.log" | grep -oE "[0-9]+$") ||
  fail "no resume from step 5 or 10" "$WORK/kill.log"
grep -qE "trained $((30 - resumed)) steps in [0-9.]+ s \(partial-reduce\)" "$WORK/kill.log" ||
  fail "the restart did not finish the $((30 - resumed)) steps after step $resumed" "$WORK/kill.log"
# 4. Pipeline replicas in groups of every replica against bulk pipeline x data parallelism.
GPT=(train --model gpt --layers 2 --embd 32 --heads 2 --block 16 --batch 8 --steps 20 --optimizer sgd --momentum 0.9
     --lr 0.05 --grad-clip 0 --dropout 0 --eval-every 0 --eval-batches 1 --threads 1 --progress lines --no-predict
     --timeout $((3 * SCALE)) --pp 2 --micro-batches 2 --row-shares 3,1)
"${MPIRUN[@]}" -np 4 "$PARALLAX" "${GPT[@]}" --metrics "$WORK/pbulk.jsonl" > "$WORK/pbulk.log" 2>&1 ||
  fail "the bulk pipeline run failed" "$WORK/pbulk.log"
"${MPIRUN[@]}" -np 4 "$PARALLAX" "${GPT[@]}" --sync partial-reduce --sync-group 2 --metrics "$WORK/pfull.jsonl" \
  > "$WORK/pfull.log" 2>&1 || fail "the pipeline-replica run failed" "$WORK/pfull.log"
grep -q "2 replicas (mpi) of 2 ranks each (mesh {pp:2, dp:1}), rows 3:1" "$WORK/pfull.log" ||
  fail "not 2 MPI replicas of 2 stages" "$WORK/pfull.log"
same_losses "$WORK/pbulk.jsonl" "$WORK/pfull.jsonl" "pipeline replicas in groups of both against pp x dp" ||
  fail "pipeline losses differ" "$WORK/pfull.log"
echo "PASS"
