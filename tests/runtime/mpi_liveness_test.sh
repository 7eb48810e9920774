#!/usr/bin/env bash
# Liveness under mpirun without --run-dir (docs/fault_tolerance.md): the
# watchdogs' heartbeats travel over MPI itself, so with no shared files
#  1. a 2-rank job lasting many times --timeout finishes;
#  2. rank 1 killed with `kill -9` from outside mid-run is named, by the
#     launcher or the transport (which see it die) or by the survivor's
#     watchdog, and the job ends within BOUND of the kill;
#  3. rank 1 stopped with SIGSTOP from outside is named by the survivor's
#     watchdog ("rank 1 is silent: no heartbeat for ..."), and the job ends
#     within BOUND of the signal. No launcher sees a stopped process, and
#     the waits' own timeout (--wait-timeout) is set past BOUND: only the
#     heartbeats can name it in time, so without the watchdog's verdict
#     this case fails.
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
# the timeouts and the detection bound; the step counts scale with the
# slowdown by themselves. BOUND: the watchdog names a rank silent for
# --timeout within two of its periods more (0.2 s at 1 s), and the abort
# that ends the job takes a fraction of a second. WAIT_TIMEOUT, every
# wait's own timeout in cases 2 and 3, lies past BOUND (case 1 keeps the
# default, 3 x --timeout).
SCALE=${PX_TEST_TIME_SCALE:-1}
TIMEOUT=$((1 * SCALE))
BOUND=$((TIMEOUT + 2 * SCALE))
WAIT_TIMEOUT=$((BOUND + 3 * SCALE))
GPT=(train --model gpt --layers 1 --heads 2 --embd 32 --block 32 --batch 8 --dropout 0 --eval-every 0
     --eval-batches 1 --sample-tokens 0 --threads 1 --progress lines --no-predict --timeout "$TIMEOUT")
# The watchdog's verdict, as runtime/fault/watchdog.cc words it, with this job's --timeout.
VERDICT="rank 1 is silent: no heartbeat for [0-9.]+ s \(timeout $TIMEOUT\.0 s\)"
# A wait that gave up by itself (comm/communicator.cc, comm/engine/agreement.cc).
WAIT_GAVE_UP="within the [0-9]+ ms timeout"
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

# 2, 3. SIGNAL to rank 1 once the job is at step 50; the job must end
# within BOUND of it. Sets WAITED (seconds from the signal to the job's end).
signal_rank_1() {  # signal_rank_1 SIGNAL
  local log="$WORK/$1.log" metrics="$WORK/$1.jsonl" pid="" sent ended status=0
  "${MPIRUN[@]}" -np 2 "$PARALLAX" "${GPT[@]}" --wait-timeout "$WAIT_TIMEOUT" --steps 100000 --metrics "$metrics" \
    > "$log" 2>&1 &
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
  wait "$JOB" || status=$?
  ((status != 0)) || fail "the job finished although rank 1 got SIG$1" "$log"
  ended=$(date +%s.%N)
  JOB=
  WAITED=$(python3 -c "print(f'{$ended - $sent:.2f}')")
  python3 -c "import sys; sys.exit(0 if $WAITED <= $BOUND else 1)" ||
    fail "SIG$1 of rank 1: the job ended $WAITED s after it (exit $status), more than the bound $BOUND s (timeout $TIMEOUT s + $((2 * SCALE)) s; waits time out at $WAIT_TIMEOUT s)" "$log"
}

# 2. kill -9: the launcher or the transport sees rank 1 die, or the
# survivor's watchdog hears its heartbeats stop, whichever comes first.
signal_rank_1 KILL
KILLED="$VERDICT|process rank 1 .*exited on signal 9|EXIT STRING: Killed \(signal 9\)|peer rank 1: MPI_[A-Za-z_]+ failed"
grep -qE "$KILLED" "$WORK/KILL.log" ||
  fail "kill -9 of rank 1: nobody named rank 1 (the job ended $WAITED s after it)" "$WORK/KILL.log"
echo "kill -9: rank 1 named, the job ended $WAITED s after the signal (timeout $TIMEOUT s): $(grep -m1 -oE "$KILLED" "$WORK/KILL.log")"

# 3. SIGSTOP: a stopped process leaves the launcher and the transport
# nothing to notice, and no wait gives up before WAIT_TIMEOUT: the
# survivor's watchdog must name it, from its heartbeats.
signal_rank_1 STOP
grep -qE "$VERDICT" "$WORK/STOP.log" ||
  fail "SIGSTOP of rank 1: the survivor's watchdog did not name it ('$VERDICT'; the job ended $WAITED s after the signal)" "$WORK/STOP.log"
if grep -qE "$WAIT_GAVE_UP" "$WORK/STOP.log"; then
  fail "SIGSTOP of rank 1: a wait gave up by itself instead of hearing the watchdog's verdict" "$WORK/STOP.log"
fi
echo "SIGSTOP: rank 1 named by the watchdog, the job ended $WAITED s after the signal (timeout $TIMEOUT s, waits $WAIT_TIMEOUT s): $(grep -m1 -oE "rank 1 is silent[^;]*" "$WORK/STOP.log")"
echo "PASS"
