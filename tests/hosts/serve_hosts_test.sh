#!/usr/bin/env bash
# Tensor-parallel serving across two hosts (scripts/hosts.sh network
# namespaces): `parallax serve` under mpirun with one rank on each host,
# tp = 2 across the bridge; rank 0 serves HTTP inside host 0. Its greedy
# completions equal the one-rank server's; SIGTERM drains both ranks and
# they exit 0.
#
#   serve_hosts_test.sh PARALLAX [openmpi|mpich]   (PARALLAX built for that MPI)
set -euo pipefail
PARALLAX=$(realpath "$1")
FLAVOR=${2:-openmpi}
case $FLAVOR in
  openmpi) LAUNCH=(mpirun --host) ;;
  mpich) LAUNCH=(mpiexec -hosts) ;;
  *) echo "FAIL: MPI '$FLAVOR'; expected openmpi or mpich"; exit 1 ;;
esac
source "$(dirname "${BASH_SOURCE[0]}")/hosts_fixture.sh" pxs --gbps 1
source "$(dirname "${BASH_SOURCE[0]}")/../serve/serve_fixture.sh"
server=""
stop_server() { [ -n "$server" ] && kill -9 "$server" 2> /dev/null; pkill -9 -f "^$PARALLAX serve" 2> /dev/null || true; }
trap 'stop_server; cleanup' EXIT
fail() { echo "FAIL: $*"; [ -f "$WORK/serve.log" ] && cat "$WORK/serve.log"; exit 1; }

for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$WORK/text.txt"
"$PARALLAX" train --data "$WORK/text.txt" --block 32 --layers 2 --heads 2 --embd 32 --batch 4 --threads 1 --steps 3 \
  --eval-batches 1 --sample-tokens 0 --progress lines --no-predict --save "$WORK/ckpt" > "$WORK/train.log"
SERVE=(serve --checkpoint "$WORK/ckpt" --port 0 --threads 1 --block-tokens 4 --max-running 4)

# WHERE...: a server (in the background) and its port, read from its log.
start() { start_server "$WORK/serve.log" "$@"; }
# CLIENT... FILE: greedy completions of a few prompts, one line of tokens each.
answers() {
  local out=${*: -1}
  for prompt in "the quick" "jumps over the" "x"; do
    "${@:1:$#-1}" curl -s --max-time 60 "http://127.0.0.1:$port/v1/completions" \
      -d "{\"prompt\":\"$prompt\",\"max_tokens\":12,\"temperature\":0,\"logprobs\":0}" |
      python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"][0]["logprobs"]["tokens"]))'
  done > "$out" || fail "a completion failed: $(cat "$out")"
  [ "$(wc -l < "$out")" = 3 ] || fail "expected 3 answers: $(cat "$out")"
}

start "$PARALLAX" "${SERVE[@]}"
answers "$WORK/one.txt"
kill -TERM "$server"; wait "$server" || fail "serve exited $? on SIGTERM"; server=""

start "$HOSTS" "${LAUNCH[@]}" "$PXH_NAME-0:1,$PXH_NAME-1:1" -np 2 "$PARALLAX" "${SERVE[@]}"
grep -q "tensor-parallel over 2 ranks" "$WORK/serve.log" || fail "not tp 2"
answers "$HOSTS" exec 0 "$WORK/hosts.txt"  # the client on host 0, where rank 0 listens
diff "$WORK/one.txt" "$WORK/hosts.txt" || fail "tp 2 across two hosts answers otherwise than one rank"
kill -TERM $(pgrep -f "^$PARALLAX serve")
status=0
wait "$server" || status=$?
server=""
[ "$status" = 0 ] || fail "the ranks across hosts exited $status on SIGTERM"
grep -q "drained and stopped" "$WORK/serve.log" || fail "no drain line"
echo "ok: tp 2 across two hosts answers as one rank and drains"
