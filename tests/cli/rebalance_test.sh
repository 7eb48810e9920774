#!/usr/bin/env bash
# `parallax launch --rebalance` (docs/heterogeneous.md): three in-process
# ranks, rank 2 a straggler (--inject-delay 2:25: its steps 25 ms longer
# per even share of rows). Its straggler score is named while the job
# runs; the scores stay skewed, so the job ends with a checkpoint and exit
# status 75; the launcher restarts it from that checkpoint with
# --row-shares by the measured rates, giving rank 2 fewer rows; the job
# then finishes, and its log says so; `parallax doctor` names the
# straggler from the run directory.
#
#   rebalance_test.sh PARALLAX
set -euo pipefail
PARALLAX=$1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $1"; shift; for f in "$@"; do echo "--- $f"; cat "$f"; done; exit 1; }

JOB=(train --model mlp --hidden 64 --ranks 3 --batch 48 --steps 60 --eval-every 0 --eval-batches 1
     --progress lines --no-predict --inject-delay 2:25 --save "$WORK/ckpt")
"$PARALLAX" launch --rebalance --max-restarts 0 --run-dir "$WORK/run" -- "$PARALLAX" "${JOB[@]}" \
  > "$WORK/launch.log" 2>&1 || fail "the rebalanced job did not finish" "$WORK/launch.log"
grep -qE "straggler: rank 2 computes [0-9.]+x as long as the fastest rank" "$WORK/launch.log" ||
  fail "rank 2 was not named a straggler" "$WORK/launch.log"
grep -qE "rebalance: the scores stayed skewed; ending at step [0-9]+" "$WORK/launch.log" ||
  fail "the job did not end to be rebalanced" "$WORK/launch.log"
line=$(grep -E "parallax launch: rebalancing after .* --row-shares [0-9,]+" "$WORK/launch.log") ||
  fail "the launcher did not rebalance" "$WORK/launch.log"
shares=$(sed -E 's/.*--row-shares ([0-9,]+).*/\1/' <<< "$line")
IFS=, read -r s0 s1 s2 <<< "$shares"
(( s2 < s0 && s2 < s1 )) || fail "rank 2's share $s2 is not below the others' ($s0, $s1)" "$WORK/launch.log"
grep -q "attempt 2: .*--row-shares $shares" "$WORK/launch.log" || fail "the restart ran without the new rows" "$WORK/launch.log"
grep -qE "resumed from '$WORK/ckpt' at step [0-9]+" "$WORK/launch.log" || fail "the restart did not resume" "$WORK/launch.log"
grep -q "parallax launch: done" "$WORK/launch.log" || fail "the launch did not end done" "$WORK/launch.log"
# The doctor reads the scores from the run directory's metrics.
"$PARALLAX" doctor "$WORK/run" > "$WORK/doctor.log" 2>&1 || true
grep -qE "step [0-9]+: rank 2 named a straggler \(score [0-9.]+" "$WORK/doctor.log" ||
  fail "the doctor did not name the straggler" "$WORK/doctor.log"
echo "PASS: rows $shares after the rebalance"
