#!/usr/bin/env bash
# Liveness under mpirun without --run-dir (docs/fault_tolerance.md): the
# watchdogs' heartbeats travel over MPI itself, so with no shared files
#  1. a 2-rank job lasting many times --timeout finishes;
#  2. rank 1 killed with `kill -9` from outside mid-run is named, and the
#     job ends within the timeout + 2 s of the kill;
#  3. rank 1 stopped with SIGSTOP from outside, likewise (no launcher sees
#     a stopped process: only the heartbeats can name it).
#
#   mpi_liveness_test.sh PARALLAX MPIEXEC
set -euo pipefail
PARALLAX=$1 MPIEXEC=$2
WORK=$(mktemp -d)
JOB=
cleanup() {
  if [[ -n $JOB ]]; then kill -9 "$JOB" 2> /dev/null || true; fi
  for pid in $(rank_pids); do kill -9 "$pid" 2> /dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../mpi_launch.sh"

# PX_TEST_TIME_SCALE (scripts/test.sh sets it under the sanitizers) scales
# the timeout and the detection bound; the step counts scale with the
# slowdown by themselves.
SCALE=${PX_TEST_TIME_SCALE:-1}
TIMEOUT=$((1 * SCALE))
BOUND=$((TIMEOUT + 2 * SCALE))
GPT=(train --model gpt --layers 1 --heads 2 --embd 32 --block 32 --batch 8 --dropout 0 --eval-every 0
     --eval-batches 1 --sample-tokens 0 --threads 1 --progress lines --no-predict --timeout "$TIMEOUT")
# Marks this test's ranks, to find their pids (a launcher passes its environment on).
export PX_LIVENESS_TEST_RUN=$WORK

fail() { echo "FAIL: $1"; shift; for f in "$@"; do echo "--- $f"; cat "$f"; done; exit 1; }

# The pids of this test's ranks, "rank pid" a line.
rank_pids_by_rank() {
  local environ variables rank
  for environ in /proc/[0-9]*/environ; do
    variables=$( (tr '\0' '\n' < "$environ") 2> /dev/null) || continue
    grep -qx "PX_LIVENESS_TEST_RUN=$WORK" <<< "$variables" || continue
    rank=$(grep -m1 -E "^(OMPI_COMM_WORLD_RANK|PMI_RANK)=" <<< "$variables" | cut -d= -f2) || continue
    [[ -n $rank ]] && echo "$rank $(basename "$(dirname "$environ")")"
  done
  return 0
}
rank_pids() { rank_pids_by_rank | cut -d' ' -f2; }

# 1. Many times the timeout, no run directory: it finishes.
began=$(date +%s.%N)
"${MPIRUN[@]}" -np 2 "$PARALLAX" "${GPT[@]}" --steps 10000 --metrics "$WORK/long.jsonl" > "$WORK/long.log" 2>&1 ||
  fail "a job longer than --timeout without --run-dir failed" "$WORK/long.log"
seconds=$(python3 -c "print(f'{$(date +%s.%N) - $began:.1f}')")
grep -q '"step":10000' "$WORK/long.jsonl" || fail "the job did not run its 10000 steps" "$WORK/long.log"
python3 -c "import sys; sys.exit(0 if $seconds >= 5 * $TIMEOUT else 1)" ||
  fail "the job lasted $seconds s, not many times the $TIMEOUT s timeout: give it more steps" "$WORK/long.log"
echo "no run directory: 10000 steps in $seconds s with --timeout $TIMEOUT: finished"

# 2, 3. SIGNAL to rank 1 once the job is at step 50: it is named, within the bound.
named_within_bound() {  # named_within_bound SIGNAL WHAT
  local log="$WORK/$1.log" metrics="$WORK/$1.jsonl" pid="" sent ended waited
  "${MPIRUN[@]}" -np 2 "$PARALLAX" "${GPT[@]}" --steps 100000 --metrics "$metrics" > "$log" 2>&1 &
  JOB=$!
  for _ in $(seq 600); do
    grep -q '"step":50,' "$metrics" 2> /dev/null && break
    sleep 0.1
  done
  grep -q '"step":50,' "$metrics" || fail "the job did not reach step 50" "$log"
  pid=$(rank_pids_by_rank | awk '$1 == 1 { print $2 }')
  [[ -n $pid ]] || fail "no process of rank 1 found" "$log"
  kill -"$1" "$pid"
  sent=$(date +%s.%N)
  local status=0
  wait "$JOB" || status=$?
  ((status != 0)) || fail "the job finished although rank 1 got SIG$1" "$log"
  ended=$(date +%s.%N)
  JOB=
  waited=$(python3 -c "print(f'{$ended - $sent:.2f}')")
  # By a survivor's watchdog (its heartbeats stopped) or by a wait on rank 1
  # ("peer rank 1 did not answer", "... publish its input": the timeouts are
  # equal), or, for a kill, by the launcher that saw it die.
  grep -qE "rank 1 is silent: no heartbeat for|peer rank 1 did not [a-z]+|process rank 1 .*exited on signal 9|EXIT STRING: Killed \(signal 9\)" "$log" ||
    fail "SIG$1 of rank 1: nobody named rank 1 (the job ended $waited s after it, exit $status)" "$log"
  python3 -c "import sys; sys.exit(0 if $waited <= $BOUND else 1)" ||
    fail "SIG$1 of rank 1: the job ended $waited s after it, more than the timeout $TIMEOUT s + $((2 * SCALE)) s" "$log"
  echo "$2: rank 1 named, the job ended $waited s after the signal (timeout $TIMEOUT s): $(grep -m1 -oE "rank 1 is silent[^;]*|peer rank 1 did not [a-z]+|process rank 1 .*signal 9[^.]*|EXIT STRING: Killed \(signal 9\)" "$log")"
}
named_within_bound KILL "kill -9"
named_within_bound STOP "SIGSTOP"
# A stopped process leaves the launcher nothing to notice: a survivor names it.
grep -qE "rank 1 is silent: no heartbeat for|peer rank 1 did not [a-z]+" "$WORK/STOP.log" ||
  fail "SIGSTOP of rank 1 was not named by a survivor" "$WORK/STOP.log"
echo "PASS"
