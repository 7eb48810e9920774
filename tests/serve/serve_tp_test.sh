#!/usr/bin/env bash
# Tensor-parallel `parallax serve` as a user runs it: greedy completions of
# a tiny checkpoint at --tp 2 in process and under mpirun -np 2 equal the
# one-rank server's; the mpirun pair, left idle for more than twice its
# --timeout (the lead's idle ticks keep the follower inside it), then
# serves; SIGTERM drains the server (both ranks) and it exits 0.
#   serve_tp_test.sh PARALLAX MPIEXEC
set -euo pipefail
PARALLAX=$1 MPIEXEC=$2
work=$(mktemp -d)
server=""
cleanup() {
  [ -n "$server" ] && kill -9 "$server" 2> /dev/null
  pkill -9 -f "$work/ckpt" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../mpi_launch.sh"
source "$(dirname "${BASH_SOURCE[0]}")/serve_fixture.sh"
fail() { echo "FAIL: $*"; [ -f "$work/serve.log" ] && cat "$work/serve.log"; exit 1; }
SCALE=${PX_TEST_TIME_SCALE:-1}
TIMEOUT_MS=$((1000 * SCALE))

for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$work/text.txt"
# Trained tensor-parallel itself: a checkpoint of any strategy serves at any tp.
"$PARALLAX" train --data "$work/text.txt" --block 32 --layers 2 --heads 4 --embd 32 --batch 4 --threads 1 --steps 3 \
  --ranks 2 --tp 2 \
  --eval-batches 1 --sample-tokens 0 --progress lines --no-predict --save "$work/ckpt" > "$work/train.log"

# start LAUNCH...: the server in the background; sets $server and $url.
start() {
  start_server "$work/serve.log" "$@"
  url="http://127.0.0.1:$port"
}
# answers FILE: greedy completions of a few prompts, one JSON text a line.
answers() {
  for prompt in "the quick" "jumps over the" "lazy dog 1" "x"; do
    curl -s --max-time 60 "$url/v1/completions" \
      -d "{\"prompt\":\"$prompt\",\"max_tokens\":16,\"temperature\":0,\"logprobs\":0}" |
      python3 -c 'import json,sys; r=json.load(sys.stdin); print(json.dumps(r["choices"][0]["logprobs"]["tokens"]))'
  done > "$1" || fail "a completion failed: $(cat "$1")"
  [ "$(wc -l < "$1")" = 4 ] || fail "expected 4 answers: $(cat "$1")"
}
# stop WHAT [PIDS]: SIGTERM to PIDS (default the server) drains it; it must exit 0.
stop() {
  kill -TERM ${2:-$server}
  local status=0
  wait "$server" || status=$?
  server=""
  [ "$status" = 0 ] || fail "$1 exited $status on SIGTERM"
}
SERVE=(serve --checkpoint "$work/ckpt" --port 0 --threads 1 --block-tokens 4 --max-running 4)

start "$PARALLAX" "${SERVE[@]}"
answers "$work/tp1.txt"
stop "serve --tp 1"

start "$PARALLAX" "${SERVE[@]}" --tp 2 --timeout "$TIMEOUT_MS"
grep -q "tensor-parallel over 2 ranks" "$work/serve.log" || fail "no tp line"
answers "$work/tp2.txt"
stop "serve --tp 2"
diff "$work/tp1.txt" "$work/tp2.txt" || fail "--tp 2 in process answers otherwise than one rank"

start "${MPIRUN[@]}" -np 2 "$PARALLAX" "${SERVE[@]}" --timeout "$TIMEOUT_MS"
grep -q "tensor-parallel over 2 ranks" "$work/serve.log" || fail "under mpirun: no tp line"
# Idle past twice the timeout: the follower waits for the next batch all along.
sleep $((3 * TIMEOUT_MS / 1000))
[ "$(curl -s "$url/health")" = '{"status":"ok"}' ] || fail "/health after idling"
answers "$work/mpi.txt"
# The ranks themselves get the signal, as from mpirun's own forwarding
# (OpenMPI's mpirun exits 1 whenever it is signalled, whatever they do).
stop "mpirun -np 2 serve" "$(pgrep -f "^$PARALLAX serve" | tr '\n' ' ')"
diff "$work/tp1.txt" "$work/mpi.txt" || fail "tp 2 under mpirun answers otherwise than one rank"
grep -q "drained and stopped" "$work/serve.log" || fail "no drain line"
echo "ok: tp 2 in process and under mpirun equal one rank; idle $((3 * TIMEOUT_MS)) ms past a $TIMEOUT_MS ms timeout"
