#!/usr/bin/env bash
# Pipeline parallelism under mpirun against one rank: per-step losses over
# 50 steps (PX_TEST_STEPS: fewer under the sanitizers) of the GPT with
# dropout within 1e-5 relative. At 4 ranks
# pp=2 x dp=2 (1F1B, ZeRO-1) and pp=4 (zero bubble); at 8 ranks the 3-D
# hybrid pp=2 x dp=2 x tp=2 with sequence parallelism and ZeRO-1. Each
# stage's sends and receives cross MPI processes.
#
#   mpi_pipeline_test.sh PARALLAX MPIEXEC RANKS
set -euo pipefail
PARALLAX=$1 MPIEXEC=$2 RANKS=$3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../mpi_launch.sh"
MPIRUN+=(-np "$RANKS")


# PX_TEST_TIME_SCALE (set by scripts/test.sh under the sanitizers): eight
# sanitized processes on two cores may take minutes to start. --no-predict:
# the ranks then end together, the case where a rank's last heartbeat once
# went missing and another waited out its whole --timeout before leaving
# (the watchdog now says so, and this fails on it).
GPT=(train --model gpt --layers 4 --heads 2 --embd 32 --block 32 --batch 8 --steps "${PX_TEST_STEPS:-50}" --dropout 0.1
     --micro-batches 4 --eval-every 0 --eval-batches 2 --sample-tokens 0 --threads 1 --progress lines --no-predict
     --timeout $((60 * ${PX_TEST_TIME_SCALE:-1})))

compare() {  # compare REFERENCE CANDIDATE WHAT
  python3 "$(dirname "${BASH_SOURCE[0]}")/compare_losses.py" "$@"
}

"$PARALLAX" "${GPT[@]}" --metrics "$WORK/one.jsonl" > "$WORK/one.log"
run() {  # run MESH-FLAG MESH-TEXT WHAT EXTRA...
  local mesh=$1 shown=$2 what=$3
  shift 3
  "${MPIRUN[@]}" "$PARALLAX" "${GPT[@]}" --mesh "$mesh" "$@" --metrics "$WORK/run.jsonl" > "$WORK/run.log" 2>&1 ||
    { echo "FAIL: the MPI job at mesh $shown failed:"; cat "$WORK/run.log"; exit 1; }
  if grep -q "waited the whole --timeout" "$WORK/run.log"; then
    echo "FAIL: a rank waited out its --timeout at the end of the run:"; cat "$WORK/run.log"; exit 1
  fi
  grep -q "$RANKS ranks, mesh $shown (mpi)" "$WORK/run.log" ||
    { echo "FAIL: the MPI job did not run mesh $shown:"; cat "$WORK/run.log"; exit 1; }
  grep -q "pipeline bubble: measured" "$WORK/run.log" ||
    { echo "FAIL: no pipeline measurements:"; cat "$WORK/run.log"; exit 1; }
  compare "$WORK/one.jsonl" "$WORK/run.jsonl" "$what under MPI"
}
if [ "$RANKS" = 4 ]; then
  run pp=2,dp=2 "{pp:2, dp:2}" "GPT at pp=2 x dp=2, 1F1B, ZeRO-1" --schedule 1f1b --zero 1
  run pp=4 "{pp:4, dp:1}" "GPT at pp=4, zero bubble" --schedule zb-h1
fi
if [ "$RANKS" = 8 ]; then
  run pp=2,dp=2,tp=2 "{pp:2, dp:2, tp:2}" "GPT at pp=2 x dp=2 x tp=2, sequence parallel, ZeRO-1" \
    --schedule 1f1b --sequence-parallel --zero 1
fi
