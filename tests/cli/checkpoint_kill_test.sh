#!/usr/bin/env bash
# A process killed (kill -9) in the middle of writing a checkpoint leaves
# the previous checkpoint loadable: `parallax train --save-every 1` writes
# one in the background after every step; once one is in place and the
# next one's staging directory exists, the process is killed. The
# checkpoint directory must then load (eval) and resume, and the staging
# directory left behind proves the kill landed mid-write (else retry).
#
#   checkpoint_kill_test.sh PARALLAX
set -euo pipefail
PARALLAX=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# gpt-mini's shape: a checkpoint of about 13 MB, long enough to catch mid-write.
JOB=(train --model gpt --steps 200 --threads 1 --eval-every 0 --eval-batches 1 --sample-tokens 0
     --progress lines --no-predict --save-every 1)

for try in 1 2 3 4 5; do
  rm -rf "$WORK"/ckpt*
  "$PARALLAX" "${JOB[@]}" --save "$WORK/ckpt" > "$WORK/train.log" 2>&1 &
  pid=$!
  # Wait for a checkpoint in place, then for the next write's staging directory.
  for _ in $(seq 2000); do [ -f "$WORK/ckpt/state.json" ] && break; sleep 0.01; done
  for _ in $(seq 2000); do compgen -G "$WORK/ckpt.tmp.*/shards/*" > /dev/null && break; sleep 0.002; done
  kill -9 "$pid"
  wait "$pid" 2> /dev/null || true
  if compgen -G "$WORK/ckpt.tmp.*" > /dev/null; then
    echo "try $try: killed mid-write ($(ls -d "$WORK"/ckpt.tmp.* | head -1 | xargs basename) left behind)"
    step=$(python3 -c "import json; print(json.load(open('$WORK/ckpt/state.json'))['step'])")
    "$PARALLAX" eval --checkpoint "$WORK/ckpt" --eval-batches 1 > "$WORK/eval.log" ||
      { echo "FAIL: the previous checkpoint (step $step) does not load:"; cat "$WORK/eval.log"; exit 1; }
    "$PARALLAX" "${JOB[@]}" --resume "$WORK/ckpt" --steps $((step + 1)) --save-every 0 > "$WORK/resume.log" ||
      { echo "FAIL: resuming from the previous checkpoint failed:"; cat "$WORK/resume.log"; exit 1; }
    grep -q "resumed from '$WORK/ckpt' at step $step" "$WORK/resume.log" ||
      { echo "FAIL: resume did not continue at step $step:"; cat "$WORK/resume.log"; exit 1; }
    echo "PASS: checkpoint of step $step loads and resumes"
    exit 0
  fi
  echo "try $try: the kill missed the write window; again"
done
echo "FAIL: no kill landed in the middle of a write in 5 tries"
exit 1
