#!/usr/bin/env bash
# examples/README.md's multi-rank step: this host calibrated, the GPT
# planned for 2 ranks, that plan trained by 2 MPI processes under the
# launcher (the world size checked: a launcher of another MPI would run
# singletons), and the run reported.
#
#   mpi_walkthrough_test.sh PARALLAX MPIEXEC [LAUNCHER_FLAGS...]
set -euo pipefail
PX=$1
MPIEXEC=$2
shift 2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export XDG_CACHE_HOME=$WORK/cache
fail() { echo "FAIL: $*"; exit 1; }
SMALL=(--model gpt --layers 2 --batch 8)

"$PX" calibrate "${SMALL[@]}" --max-ranks 2 > /dev/null
"$PX" plan "${SMALL[@]}" --cluster local --ranks 2 --budget-s 5 --out "$WORK/plan.json" > "$WORK/plan.txt"
"$MPIEXEC" "$@" -np 2 "$PX" train "${SMALL[@]}" --threads 1 --strategy "$WORK/plan.json" --steps 5 \
  --eval-batches 1 --sample-tokens 0 --progress lines --run-dir "$WORK/runs/mpi" > "$WORK/train.txt" 2>&1 \
  || { cat "$WORK/train.txt"; fail "the planned strategy did not train under $MPIEXEC"; }
grep -q "trained 5 steps" "$WORK/train.txt" || { cat "$WORK/train.txt"; fail "no 'trained 5 steps'"; }
python3 - "$WORK/runs/mpi/run.json" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
assert summary["ranks"] == 2, f"ran on {summary['ranks']} ranks, not the 2 MPI processes"
assert len(summary["memory"]["measured_peak_bytes"]) == 2, summary["memory"]
PY
"$PX" report "$WORK/runs/mpi" > "$WORK/report.txt"
grep -q "rank 1 peak" "$WORK/report.txt" || { cat "$WORK/report.txt"; fail "the report lacks rank 1"; }
echo "the walkthrough's MPI step ran"
