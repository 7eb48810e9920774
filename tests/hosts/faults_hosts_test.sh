#!/usr/bin/env bash
# Faults across hosts (scripts/hosts.sh), 2 hosts x 2 MPI ranks (OpenMPI's
# mpirun or MPICH's mpiexec), each host with its own disk:
#  - `parallax launch --hosts` starts the job under the launcher on the hosts; a
#    rank on host 1 killed with SIGKILL at a random step is restarted from
#    the last checkpoint on the hosts' own disks, and every step's loss
#    (the last run of each) equals a fault-free run's within 1e-5;
#  - a rank on host 1 stopped with SIGSTOP: the flight records, each on its
#    host's own disk, gathered and read by `parallax doctor DIR DIR` name it.
#
# Needs root and `ip netns`: otherwise it says why and exits 77.
#
#   faults_hosts_test.sh PARALLAX [openmpi|mpich]   (PARALLAX built for that MPI)
set -euo pipefail
PARALLAX=$(realpath "$1")
case ${2:-openmpi} in
  openmpi) LAUNCHER=mpirun HOSTS_FLAG=--host PASSED="-x PARALLAX_ATTEMPT" ;;
  mpich) LAUNCHER=mpiexec HOSTS_FLAG=-hosts PASSED="-envlist PARALLAX_ATTEMPT,PARALLAX_RUN_DIR" ;;
  *) echo "FAIL: MPI '$2'; expected openmpi or mpich"; exit 1 ;;
esac
source "$(dirname "${BASH_SOURCE[0]}")/hosts_fixture.sh" pxf
fail() { echo "FAIL: $1"; shift; for f in "$@"; do echo "--- $f"; cat "$f"; done; exit 1; }

SCALE=${PX_TEST_TIME_SCALE:-1}
TIMEOUT=$((3 * SCALE))
STEPS=${PX_TEST_STEPS:-16}
ON="$PXH_NAME-0:2,$PXH_NAME-1:2"
GPT=(train --model gpt --layers 2 --heads 2 --embd 32 --block 32 --batch 8 --steps "$STEPS" --dropout 0.1
     --eval-every 0 --eval-batches 2 --sample-tokens 0 --threads 1 --progress lines --no-predict
     --timeout "$TIMEOUT" --save-every 3)

"$HOSTS" $LAUNCHER $HOSTS_FLAG "$ON" -np 4 "$PARALLAX" "${GPT[@]}" --metrics "$PXH_DISK/ref.jsonl" > "$WORK/ref.log" 2>&1 ||
  fail "the fault-free run" "$WORK/ref.log"
"$HOSTS" exec 0 cat "$PXH_DISK/ref.jsonl" > "$WORK/ref.jsonl"

# Rank 3 (host 1) killed at a random step from 2 to STEPS - 1.
KILL_AT=$((2 + RANDOM % (STEPS - 2)))
"$PARALLAX" launch --hosts "$ON" --mpirun "$HOSTS $LAUNCHER" --max-restarts 1 --run-dir "$WORK/kill" -- \
  "$PARALLAX" "${GPT[@]}" --save "$PXH_DISK/ckpt" --inject-fault "3:$KILL_AT:kill" --metrics "$PXH_DISK/kill.jsonl" \
  > "$WORK/kill.log" 2>&1 || fail "the job did not finish after a restart" "$WORK/kill.log"
grep -q "attempt 1: .*$LAUNCHER $HOSTS_FLAG $ON -np 4 $PASSED" "$WORK/kill.log" ||
  fail "the launcher did not start mpirun on the hosts" "$WORK/kill.log"
grep -q "attempt 1 failed" "$WORK/kill.log" || fail "the kill at step $KILL_AT did not fail the first attempt" "$WORK/kill.log"
grep -q "rank 3 fell behind" "$WORK/kill.log" || fail "the launcher did not name rank 3" "$WORK/kill.log"
# A save is surely in place once the next one began (it waits for it);
# the one still being written when the rank died may or may not be.
if [[ $KILL_AT -gt 6 ]]; then
  grep -qE "resumed from '$PXH_DISK/ckpt(.step-[0-9]+)?' at step [0-9]+ " "$WORK/kill.log" ||
    fail "no resume from a checkpoint (killed at step $KILL_AT, saved every 3)" "$WORK/kill.log"
fi
"$HOSTS" exec 0 cat "$PXH_DISK/kill.jsonl" > "$WORK/kill.jsonl"
python3 - "$WORK/ref.jsonl" "$WORK/kill.jsonl" "SIGKILL of rank 3 on host 1 at step $KILL_AT, restarted" <<'PY'
import json, sys
def rows(p):
    out = {}
    for line in open(p):
        j = json.loads(line)
        if "train_loss" in j: out[j["step"]] = j["train_loss"]  # the last run of each step
    return out
ref, got, what = rows(sys.argv[1]), rows(sys.argv[2]), sys.argv[3]
if sorted(got) != sorted(ref): sys.exit(f"FAIL {what}: steps {sorted(got)} vs {sorted(ref)}")
worst = max(abs(ref[s] - got[s]) / abs(ref[s]) for s in ref)
print(f"{what}: steps 1..{max(ref)}, worst relative difference {worst:.2e}")
if worst > 1e-5: sys.exit(f"FAIL {what}: {worst:.2e} > 1e-5")
PY
grep -E "resumed from|done in" "$WORK/kill.log"

# Rank 2 (host 1) stopped with SIGSTOP; each host's records on its own disk.
STOP_AT=$((2 + RANDOM % (STEPS - 2)))
! "$HOSTS" $LAUNCHER $HOSTS_FLAG "$ON" -np 4 "$PARALLAX" "${GPT[@]}" --run-dir "$PXH_DISK/run" \
  --inject-fault "2:$STOP_AT:hang" > "$WORK/stop.log" 2>&1 || fail "the job with a stopped rank finished" "$WORK/stop.log"
for host in 0 1; do
  mkdir -p "$WORK/gathered/host$host"
  "$HOSTS" exec "$host" tar -C "$PXH_DISK/run" -cf - flight | tar -C "$WORK/gathered/host$host" -xf -
  ls "$WORK/gathered/host$host/flight" > "$WORK/ls$host"
  [[ $(cat "$WORK/ls$host" | tr '\n' ' ') == "rank$((2 * host)) rank$((2 * host + 1)) " ]] ||
    fail "host $host's run directory holds other ranks' records" "$WORK/ls$host"
done
"$PARALLAX" doctor "$WORK/gathered/host0" "$WORK/gathered/host1" > "$WORK/doctor.log" 2>&1 ||
  fail "doctor over the gathered records" "$WORK/doctor.log"
grep -q "rank 2 fell behind: .* at the start of step $STOP_AT" "$WORK/doctor.log" ||
  fail "the doctor did not name rank 2, stopped at step $STOP_AT" "$WORK/doctor.log"
grep "fell behind" "$WORK/doctor.log"
echo PASS
