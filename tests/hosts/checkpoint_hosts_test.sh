#!/usr/bin/env bash
# Checkpoints with no shared filesystem (scripts/hosts.sh): 2 hosts x 2
# MPI ranks (OpenMPI's mpirun or MPICH's mpiexec) save to a directory on each host's private disk. The save
# must commit over the transport (not wait for the other host's files),
# each host's directory must hold its own ranks' shard files and a commit
# record naming them with their checksums (host 0's also the model), a run
# stopped after a save must resume on the same hosts, each rank reading its
# own host's disk, and its losses equal an uninterrupted run's (1e-5).
#
# Needs root and `ip netns`: otherwise it says why and exits 77.
#
#   checkpoint_hosts_test.sh PARALLAX [openmpi|mpich]   (PARALLAX built for that MPI)
set -euo pipefail
PARALLAX=$(realpath "$1")
case ${2:-openmpi} in
  openmpi) LAUNCH=(mpirun --host) ;;
  mpich) LAUNCH=(mpiexec -hosts) ;;
  *) echo "FAIL: MPI '$2'; expected openmpi or mpich"; exit 1 ;;
esac
HERE=$(dirname "${BASH_SOURCE[0]}")
source "$HERE/hosts_fixture.sh" pxc

STEPS=${PX_TEST_STEPS:-16}
HALF=$((STEPS / 2))
GPT=(train --model gpt --layers 2 --heads 2 --embd 32 --block 32 --batch 8 --steps "$STEPS" --dropout 0.1
     --eval-every 0 --eval-batches 2 --sample-tokens 0 --threads 1 --progress lines --no-predict --timeout 20)
on_hosts() { "$HOSTS" "${LAUNCH[@]}" "$PXH_NAME-0:2,$PXH_NAME-1:2" -np 4 "$PARALLAX" "${GPT[@]}" "$@"; }

on_hosts --metrics "$PXH_DISK/whole.jsonl" > "$WORK/whole.log" 2>&1 ||
  { echo "FAIL: the uninterrupted run:"; cat "$WORK/whole.log"; exit 1; }
"$HOSTS" exec 0 cat "$PXH_DISK/whole.jsonl" > "$WORK/whole.jsonl"

# Stopped after step HALF (as if preempted), saving every 2 steps to each host's disk.
start=$(date +%s.%N)
on_hosts --save "$PXH_DISK/ckpt" --save-every 2 --stop-after "$HALF" --metrics "$PXH_DISK/first.jsonl" \
  > "$WORK/first.log" 2>&1 || { echo "FAIL: the run that saves:"; cat "$WORK/first.log"; exit 1; }
seconds=$(echo "$(date +%s.%N) - $start" | bc)
echo "the run that saves ended after ${seconds} s"
(( $(echo "$seconds < 45" | bc) )) || { echo "FAIL: saving took ${seconds} s (a commit waiting out a timeout?)"; exit 1; }

# Each host: its own ranks' shards, listed with checksums in its state.json.
for host in 0 1; do
  "$HOSTS" exec "$host" bash -c "cd $PXH_DISK/ckpt && ls shards && cat state.json" > "$WORK/host$host.txt" ||
    { echo "FAIL: host $host has no checkpoint"; exit 1; }
  python3 - "$WORK/host$host.txt" "$host" "$HALF" <<'PY'
import json, sys
text, host, step = open(sys.argv[1]).read(), int(sys.argv[2]), int(sys.argv[3])
shards = sorted(l for l in text.splitlines() if l.startswith("rank"))
state = json.loads(text[text.index("{"):])
mine = [f"rank{r}.safetensors" for r in (2 * host, 2 * host + 1)]
assert shards == mine, f"host {host} holds shards {shards}, expected {mine}"
assert state["step"] == step, f"host {host}'s checkpoint is of step {state['step']}, expected {step}"
assert sorted(state["checksums"]) == [f"shards/{m}" for m in mine], f"host {host}'s checksums: {state['checksums']}"
assert ("model.safetensors" in state["files"]) == (host == 0), f"host {host}'s files: {sorted(state['files'])}"
print(f"host {host}: step {step}, shards {', '.join(shards)} with checksums")
PY
done
[[ ! -e $PXH_DISK/ckpt ]] || { echo "FAIL: a host's checkpoint is visible outside it"; exit 1; }

# Resumed on the same hosts: each rank reads its own host's disk.
on_hosts --save "$PXH_DISK/ckpt" --save-every 2 --resume "$PXH_DISK/ckpt" --metrics "$PXH_DISK/second.jsonl" \
  > "$WORK/second.log" 2>&1 || { echo "FAIL: the resumed run:"; cat "$WORK/second.log"; exit 1; }
grep -q "resumed from '$PXH_DISK/ckpt' at step $HALF" "$WORK/second.log" ||
  { echo "FAIL: the second run did not resume at step $HALF:"; cat "$WORK/second.log"; exit 1; }
"$HOSTS" exec 0 cat "$PXH_DISK/first.jsonl" "$PXH_DISK/second.jsonl" > "$WORK/resumed.jsonl"
python3 "$HERE/../parallel/compare_losses.py" "$WORK/whole.jsonl" "$WORK/resumed.jsonl" \
  "stopped at step $HALF and resumed from each host's disk"
echo PASS
