#!/usr/bin/env bash
# The gradient bucket size on the trainer's own code path: 2-rank data-parallel
# GPT steps (px_bench_dp_step: the lowered Program run by the ProgramExecutor,
# as `parallax train` runs it) at several --bucket-mb values, in-process and
# under mpirun, side by side. The table shows each size's median step time and
# its ratio to the default size (parallel::kDefaultBucketBytes, 0.25 MiB)
# measured in the same repetitions; below 1 is faster than the default.
#
#   bench/sweep_buckets.sh [--quick] [--reps 2] [--configs "A B"] [--sizes "0 0.0625 0.25 1 4"]
#                          [--steps 10] [--build build-bench]
#
# Every repetition runs every size once per transport, in rising order on odd
# repetitions and falling on even ones (drift cancels), 3 warmup steps, at
# most 60 s a run. Each run holds the shared build/benchmark lock
# (/tmp/px-build.lock) alone. Results go to BUILD/bench-results/buckets-TIME/.
# --quick: 1 repetition of gpt-mini, 5 timed steps.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$REPO/build-bench
REPS=2 CONFIGS="A B" SIZES="0 0.0625 0.25 1 4" STEPS=10
DEFAULT=0.25

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) REPS=1 CONFIGS=A STEPS=5; shift ;;
    --reps) REPS=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --sizes) SIZES=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ " $SIZES " == *" $DEFAULT "* ]] || { echo "error: --sizes must include the default $DEFAULT (the baseline)" >&2; exit 2; }

PX_DP=$BUILD/bench/px_bench_dp_step
[[ -x $PX_DP ]] || { echo "error: $PX_DP not built: ninja -C $BUILD px_bench_dp_step" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RESULTS=$BUILD/bench-results/buckets-$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS"
echo "results in $RESULTS" >&2

locked() { flock /tmp/px-build.lock "$@"; }
timing=(--warmup 3 --steps "$STEPS" --max-time 60)

run() {  # transport config size: appends the JSON line, tagged with the size
  local line
  if [[ $1 == inproc ]]; then
    line=$(locked "$PX_DP" --config "$2" --ranks 2 --bucket-mb "$3" "${timing[@]}" 2>>"$RESULTS/log" | grep '^{' | tail -n 1) || true
  else
    line=$(locked mpirun -np 2 "$PX_DP" --config "$2" --bucket-mb "$3" "${timing[@]}" 2>>"$RESULTS/log" | grep '^{' | tail -n 1) || true
  fi
  [[ -n $line ]] || { echo "error: $1 config $2 --bucket-mb $3 printed no result (see $RESULTS/log)" >&2; exit 1; }
  echo "$line" >>"$RESULTS/runs.jsonl"
  grep '^\[' "$RESULTS/log" | tail -n 1 >&2
}

for ((rep = 1; rep <= REPS; rep++)); do
  order=$SIZES
  if ((rep % 2 == 0)); then order=$(tr ' ' '\n' <<<"$SIZES" | tac | tr '\n' ' '); fi
  for cfg in $CONFIGS; do
    for transport in inproc mpi; do
      echo "[rep $rep/$REPS] config $cfg $transport, sizes $order" >&2
      for size in $order; do run "$transport" "$cfg" "$size"; done
    done
  done
done

python3 - "$RESULTS" "$DEFAULT" <<'EOF' | tee "$RESULTS/summary.txt"
import json, statistics, sys
d, default = sys.argv[1], float(sys.argv[2])
rows = [json.loads(l) for l in open(f"{d}/runs.jsonl") if l.strip()]
cells = {}
for r in rows:
    cells.setdefault((r["config"], r["backend"], r["bucket_mb"]), []).append(r["median_ms"])
sizes = sorted({k[2] for k in cells})
print(f"{'config':<8}{'ranks':<14}" + "".join(f"{('%g MiB' % s) if s else 'per tensor':>16}" for s in sizes))
for cfg, backend in sorted({(k[0], k[1]) for k in cells}):
    base = statistics.median(cells[(cfg, backend, default)])
    line = f"{cfg:<8}{'2 ' + backend:<14}"
    for s in sizes:
        ms = statistics.median(cells.get((cfg, backend, s), [float("nan")]))
        line += f"{ms:>8.1f} ({ms / base:.2f})"
    print(line)
print("median ms per step over repetitions (ratio to the default %g MiB measured in the same runs)" % default)
EOF
