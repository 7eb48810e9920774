#!/usr/bin/env bash
# FlexFlow-style MCMC with and without delta simulation: `parallax plan
# --method mcmc` for a 24-layer, 2048-wide GPT (16 heads, block 1024,
# vocabulary 51200, batch 64) on two DGX A100 nodes (16 GPUs), each for
# the same budget; prints proposals a second both ways, their ratio, and
# the best placement each found (replayed on its Programs).
#
#   bench/mcmc_delta.sh [--budget-s 4] [--build build]
#
# Target (issue: the planner): delta simulation evaluates >= 3x the
# proposals a second of full re-simulation. Each run holds /tmp/px-build.lock.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
BUDGET=4
while [[ $# -gt 0 ]]; do
  case $1 in
    --budget-s) BUDGET=$2; shift 2 ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
require_parallax
MODEL=(--model gpt --layers 24 --heads 16 --embd 2048 --block 1024 --vocab 51200 --batch 64 --cluster dgx-a100:2)
delta=$(flock /tmp/px-build.lock "$PX" plan "${MODEL[@]}" --method mcmc --budget-s "$BUDGET")
full=$(flock /tmp/px-build.lock "$PX" plan "${MODEL[@]}" --method mcmc --budget-s "$BUDGET" --full-simulation)
rate() { grep '^mcmc:' <<< "$1" | sed 's/.*, \([0-9]*\) a second.*/\1/'; }
echo "delta simulation: $(grep '^mcmc:' <<< "$delta")"
echo "  $(grep '^chose' <<< "$delta")"
echo "full simulation:  $(grep '^mcmc:' <<< "$full")"
echo "  $(grep '^chose' <<< "$full")"
python3 -c "print(f'delta / full: {$(rate "$delta") / $(rate "$full"):.1f}x (target >= 3x)')"
