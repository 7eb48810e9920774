#!/usr/bin/env bash
# Restarts under `parallax launch` with `mpirun -np 4` (docs/fault_tolerance.md):
#  1. kill -9 of rank 2 at step 21: the job finishes; every step's loss
#     equals a fault-free run's within 1e-5; the job ended at most the
#     timeout + 2 s after the dead rank's last heartbeat; the time lost is
#     printed.
#  2. SIGSTOP of rank 1 at step 12: every other rank's watchdog names it
#     within the timeout (and its periods), and `parallax doctor` names the
#     frozen rank and where it was.
#  3. Elastic: rank 2 lost for good at step 21 of a 4-rank job: it goes on
#     at 3 ranks, and its losses equal a 3-rank run resumed from the same
#     checkpoint within 1e-5.
#
# The kills come at step 21: the save at step 20 first waited for the
# checkpoint of step 10 to be in place, so a restart resumes from it (or,
# if its background write landed before the kill, from step 20's). At
# step 17 the checkpoint of step 10, written in the background while
# steps 11.. run, was still being written about one launch in two.
#
#   mpi_restart_test.sh PARALLAX MPIEXEC
set -euo pipefail
PARALLAX=$1 MPIEXEC=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../mpi_launch.sh"

# PX_TEST_TIME_SCALE (scripts/test.sh sets it under the sanitizers, whose
# 3-10x slowdown on oversubscribed cores stretches every phase) scales the
# timeout and the detection bound alike.
SCALE=${PX_TEST_TIME_SCALE:-1}
TIMEOUT=$((3 * SCALE))
GPT=(train --model gpt --layers 2 --heads 2 --embd 32 --block 32 --batch 12 --steps 30 --dropout 0
     --eval-every 0 --eval-batches 2 --sample-tokens 0 --threads 1 --progress lines --no-predict
     --timeout $TIMEOUT --save-every 10)

fail() { echo "FAIL: $1"; shift; for f in "$@"; do echo "--- $f"; cat "$f"; done; exit 1; }

# The last loss of every step (a restart runs some steps twice) against the reference's.
compare() {  # compare REFERENCE CANDIDATE WHAT [FIRST_STEP]
  python3 - "$@" <<'PY'
import json, sys
def rows(p):
    out = {}
    for line in open(p):
        j = json.loads(line)
        if "train_loss" in j: out[j["step"]] = j["train_loss"]
    return out
ref, got, what = rows(sys.argv[1]), rows(sys.argv[2]), sys.argv[3]
first = int(sys.argv[4]) if len(sys.argv) > 4 else 1
steps = [s for s in sorted(ref) if s >= first]
if sorted(s for s in got if s >= first) != steps:
    sys.exit(f"FAIL {what}: steps {sorted(got)} vs {steps}")
worst = max(abs(ref[s] - got[s]) / abs(ref[s]) for s in steps)
print(f"{what}: steps {steps[0]}..{steps[-1]}, worst relative difference {worst:.2e}")
if worst > 1e-5: sys.exit(f"FAIL {what}: {worst:.2e} > 1e-5")
PY
}

# Detection: the job ended at most TIMEOUT + 2 s after the silent rank's last heartbeat.
check_detection() {  # check_detection LAUNCH_LOG RANK
  local line seconds
  line=$(grep "detected: the job ended" "$1") || fail "no detection time reported" "$1"
  grep -q "after rank $2's last heartbeat" <<< "$line" || fail "detection names the wrong rank: $line" "$1"
  seconds=$(sed -E 's/.*ended ([0-9.]+) s.*/\1/' <<< "$line")
  python3 -c "import sys; sys.exit(0 if $seconds <= $TIMEOUT + 2 * $SCALE else 1)" ||
    fail "detection took $seconds s, more than the timeout $TIMEOUT s + $((2 * SCALE)) s" "$1"
  echo "detection: $seconds s after rank $2's last heartbeat (timeout $TIMEOUT s)"
}

"${MPIRUN[@]}" -np 4 "$PARALLAX" "${GPT[@]}" --metrics "$WORK/ref.jsonl" > "$WORK/ref.log"
grep -q "4 ranks, mesh {dp:4} (mpi)" "$WORK/ref.log" || fail "the reference did not run 4 MPI ranks" "$WORK/ref.log"

# 1. kill -9.
"$PARALLAX" launch --max-restarts 1 --run-dir "$WORK/kill" -- "${MPIRUN[@]}" -np 4 "$PARALLAX" "${GPT[@]}" \
  --save "$WORK/kill/ckpt" --inject-fault 2:21:kill --metrics "$WORK/kill.jsonl" > "$WORK/kill.log" 2>&1 ||
  fail "the job did not finish after a restart" "$WORK/kill.log"
grep -q "attempt 1 failed" "$WORK/kill.log" || fail "the injected kill did not fail the first attempt" "$WORK/kill.log"
grep -qE "resumed from '$WORK/kill/ckpt' at step (10|20) " "$WORK/kill.log" ||
  fail "no resume from step 10 or 20" "$WORK/kill.log"
grep -q "restarts: 1; time lost to failures: [0-9.]* s" "$WORK/kill.log" || fail "no time lost printed" "$WORK/kill.log"
check_detection "$WORK/kill.log" 2
compare "$WORK/ref.jsonl" "$WORK/kill.jsonl" "kill -9 of rank 2 at step 21, restarted"

# 2. SIGSTOP: the others name the frozen rank; the doctor finds it.
"$PARALLAX" launch --max-restarts 1 --run-dir "$WORK/stop" -- "${MPIRUN[@]}" -np 4 "$PARALLAX" "${GPT[@]}" \
  --save "$WORK/stop/ckpt" --inject-fault 1:12:hang --metrics "$WORK/stop.jsonl" > "$WORK/stop.log" 2>&1 ||
  fail "the job did not finish after a restart" "$WORK/stop.log"
# By the watchdogs (its heartbeat stopped): the waits' own timeout, 3 x
# --timeout by default, is a backstop past the detection bound. Under MPICH
# the launcher ends every rank at the first error, so only one is printed.
grep -qE "rank 1 is silent: no heartbeat for" "$WORK/stop.log" ||
  fail "no rank's watchdog named the frozen rank 1" "$WORK/stop.log"
check_detection "$WORK/stop.log" 1
"$PARALLAX" doctor "$WORK/stop/attempt-1" > "$WORK/doctor.log"
grep -q "rank 1 fell behind: .* at the start of step 12" "$WORK/doctor.log" ||
  fail "the doctor did not name the frozen rank 1 at step 12" "$WORK/doctor.log"
grep -q "its last event: .* at step 11, instruction #" "$WORK/doctor.log" ||
  fail "the doctor did not give the frozen rank's last instruction" "$WORK/doctor.log"
compare "$WORK/ref.jsonl" "$WORK/stop.jsonl" "SIGSTOP of rank 1 at step 12, restarted"

# 3. Elastic: 4 ranks lose rank 2 for good and go on at 3.
"$PARALLAX" launch --ranks 4 --min-ranks 3 --max-restarts 1 --run-dir "$WORK/lost" -- \
  "${MPIRUN[@]}" -np '{ranks}' "$PARALLAX" "${GPT[@]}" --save "$WORK/lost/ckpt" --keep-last 3 \
  --inject-fault 2:21:lost --metrics "$WORK/lost.jsonl" > "$WORK/lost.log" 2>&1 ||
  fail "the elastic job did not finish" "$WORK/lost.log"
grep -q "1 rank lost for good: continuing at 3 ranks" "$WORK/lost.log" || fail "no shrink to 3 ranks" "$WORK/lost.log"
grep -q "continuing at 3 ranks, mesh {dp:3}" "$WORK/lost.log" || fail "the restart did not run 3 ranks" "$WORK/lost.log"
RESUMED=$(grep -oE "resumed from '$WORK/lost/ckpt' at step (10|20) " "$WORK/lost.log" | grep -oE "[0-9]+ $" | tr -d " ") ||
  fail "no resume from step 10 or 20" "$WORK/lost.log"
"${MPIRUN[@]}" -np 3 "$PARALLAX" "${GPT[@]}" --resume "$WORK/lost/ckpt.step-$(printf %06d "$RESUMED")" \
  --metrics "$WORK/three.jsonl" > "$WORK/three.log"
compare "$WORK/three.jsonl" "$WORK/lost.jsonl" "elastic 4 -> 3 ranks against a 3-rank resume" $((RESUMED + 1))
echo "PASS"
