#!/usr/bin/env bash
# How long `parallax plan` takes at scale: a 96-layer, 16384-wide GPT
# (128 heads, block 2048, vocabulary 51200, global batch 1536) on 128 DGX
# A100 nodes (1024 GPUs), --reps times; prints each run's wall time, the
# search's own time, candidates screened and replayed, and the plan.
#
#   bench/plan_speed.sh [--reps 3] [--build build]
#
# Target (issue: the planner): under 10 s on this machine. Each run holds
# /tmp/px-build.lock.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
REPS=3
while [[ $# -gt 0 ]]; do
  case $1 in
    --reps) REPS=$2; shift 2 ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
require_parallax
make_results plan-speed

MODEL=(--model gpt --layers 96 --heads 128 --embd 16384 --block 2048 --vocab 51200 --batch 1536)
for rep in $(seq 1 "$REPS"); do
  start=$(date +%s.%N)
  flock /tmp/px-build.lock "$PX" plan "${MODEL[@]}" --cluster dgx-a100:128 --top 3 > "$RESULTS/plan-$rep.txt"
  end=$(date +%s.%N)
  wall=$(python3 -c "print(f'{$end - $start:.2f}')")
  echo "run $rep: ${wall} s wall; $(head -1 "$RESULTS/plan-$rep.txt" | sed 's/.* in /search /')"
done
grep "^chose" "$RESULTS/plan-1.txt"
echo "target: under 10 s"
