#!/usr/bin/env bash
# Data-parallel training speed, parallax vs PyTorch DDP (gloo, 1.13 on
# OpenBLAS), side by side at 1 and 2 ranks of one kernel thread each.
#
#   bench/compare_ddp.sh [--quick] [--reps 2] [--retries 1] [--configs "A B"] [--steps 10]
#                        [--warmup 3] [--max-time 60] [--build build-bench] [--peers DIR]
#                        [--results DIR] [--lock /tmp/px-build.lock] [--mpirun "mpirun -np 2"]
#
# For every repetition and config (A = gpt-mini, global batch 16; B =
# gpt-small, global batch 8) it runs, back to back, one process tree each:
#   parallax 1 rank        px_bench_dp_step --ranks 1
#   parallax 2 in-process  px_bench_dp_step --ranks 2
#   parallax 2 MPI         $MPIRUN px_bench_dp_step
#   torch DDP 2 ranks      peers/torch/ddp.py train --world 2
#   torch DDP 1 rank       peers/torch/ddp.py train --world 1
# in that order on odd repetitions and reversed on even ones. Each invocation
# holds the shared build/benchmark lock alone. Every program times only clean
# steps (bench/contention.h = peers/torch/contention.py) and prints one JSON
# line, collected in RESULTS/{parallax,torch}.jsonl; a run without enough
# clean steps is repeated (--retries). The table shows per config the median
# over repetitions of each run's median step time, the throughput ratio
# parallax 2 ranks / torch DDP 2 ranks (same global batch, so the inverse
# ratio of step times; target >= 1.2) and parallax's scaling from 1 to 2 ranks
# (target >= 1.7). --quick: 1 repetition, no retry, 2 warmup + 5 timed steps.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$REPO/build-bench
PEERS=${PX_PEERS:-$REPO/../shared/peers}
REPS=2 RETRIES=1 CONFIGS="A B" STEPS=10 WARMUP=3 MAX_TIME=60 RESULTS="" LOCK=/tmp/px-build.lock
# OpenMPI's defaults at -np 2 (each rank bound to a core, busy-polling): with
# --bind-to none or --oversubscribe gpt-mini was no faster (docs/benchmarks.md).
MPIRUN="mpirun -np 2"

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) REPS=1 RETRIES=0 STEPS=5 WARMUP=2 MAX_TIME=30; shift ;;
    --reps) REPS=$2; shift 2 ;;
    --retries) RETRIES=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --max-time) MAX_TIME=$2; shift 2 ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --peers) PEERS=$2; shift 2 ;;
    --results) RESULTS=$2; shift 2 ;;
    --lock) LOCK=$2; shift 2 ;;
    --mpirun) MPIRUN=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done

PX_DP=$BUILD/bench/px_bench_dp_step
[[ -x $PX_DP ]] || { echo "error: $PX_DP not built: ninja -C $BUILD px_bench_dp_step" >&2; exit 1; }
[[ -f $PEERS/torch/ddp.py ]] || { echo "error: peer not found at $PEERS/torch/ddp.py (--peers DIR)" >&2; exit 1; }
PY=/usr/bin/python3
TORCH_BLAS=/usr/lib/x86_64-linux-gnu/openblas-openmp
[[ -d $TORCH_BLAS ]] || { echo "error: $TORCH_BLAS missing: apt-get install libopenblas0-openmp" >&2; exit 1; }
# OpenMPI refuses to start as root without these (this VM runs everything as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

RESULTS=${RESULTS:-$BUILD/bench-results/ddp-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$RESULTS"
echo "results in $RESULTS" >&2

locked() { if [[ -n $LOCK ]]; then flock "$LOCK" "$@"; else "$@"; fi; }
timing=(--warmup "$WARMUP" --steps "$STEPS" --max-time "$MAX_TIME")

# Each run_* prints its program's JSON line; the program's log goes to SYSTEM.log.
run_px_1() { locked "$PX_DP" --config "$1" --ranks 1 "${timing[@]}" 2>>"$RESULTS/parallax.log" | tail -n 1; }
run_px_inproc() { locked "$PX_DP" --config "$1" --ranks 2 "${timing[@]}" 2>>"$RESULTS/parallax.log" | tail -n 1; }
# shellcheck disable=SC2086  # MPIRUN is a command line
run_px_mpi() { locked $MPIRUN "$PX_DP" --config "$1" "${timing[@]}" 2>>"$RESULTS/parallax.log" | grep '^{' | tail -n 1; }
run_torch() {  # config world
  LD_LIBRARY_PATH=$TORCH_BLAS locked "$PY" "$PEERS/torch/ddp.py" train --world "$2" --config "$1" "${timing[@]}" \
    2>>"$RESULTS/torch.log" | grep '^{' | tail -n 1
}
run_torch_2() { run_torch "$1" 2; }
run_torch_1() { run_torch "$1" 1; }

# One run, repeated up to RETRIES times while it could not get enough clean
# steps (another job kept the machine busy). Every attempt goes to
# SYSTEM.all.jsonl, the last one to SYSTEM.jsonl.
measure() {  # run config
  local system=${1%%_*} line
  system=${system/px/parallax}
  for ((try = 0; try <= RETRIES; try++)); do
    # A program that printed its result but exited non-zero (torch's gloo
    # teardown now and then) still counts; no result at all is retried.
    line=$("run_$1" "$2") || true
    if [[ -z $line ]]; then
      echo "  run_$1 $2 printed no result (see $RESULTS/$system.log)" >&2
      if ((try < RETRIES)); then continue; fi
      echo "error: run_$1 $2 printed no result in $((RETRIES + 1)) attempts" >&2
      exit 1
    fi
    echo "$line" >>"$RESULTS/$system.all.jsonl"
    grep '^\[' "$RESULTS/$system.log" | tail -n 1 >&2
    grep -Eq '"median_is_over": ?"clean"' <<<"$line" && break
    if ((try < RETRIES)); then echo "  too few clean steps (foreign load); again" >&2; fi
  done
  echo "$line" >>"$RESULTS/$system.jsonl"
}

RUNS=(px_1 px_inproc px_mpi torch_2 torch_1)
for ((rep = 1; rep <= REPS; rep++)); do
  for cfg in $CONFIGS; do
    echo "[rep $rep/$REPS] config $cfg" >&2
    order=("${RUNS[@]}")
    if ((rep % 2 == 0)); then order=(torch_1 torch_2 px_mpi px_inproc px_1); fi
    for run in "${order[@]}"; do measure "$run" "$cfg"; done
  done
done

"$PY" - "$RESULTS" <<'EOF' | tee "$RESULTS/summary.txt"
import json, statistics, sys
d = sys.argv[1]
load = lambda f: [json.loads(l) for l in open(f"{d}/{f}") if l.strip()]
px, pt = load("parallax.jsonl"), load("torch.jsonl")
def ms(rows, cfg, world, backend=None):
    sel = [r for r in rows if r["config"] == cfg and r["world"] == world and backend in (None, r.get("backend"))]
    return statistics.median(r["median_ms"] for r in sel) if sel else float("nan"), sel
print(f"{'config':<16}{'px 1r':>8}{'px 2r in':>10}{'px 2r mpi':>11}{'ddp 1r':>8}{'ddp 2r':>8}"
      f"{'px/ddp in':>11}{'px/ddp mpi':>12}{'scale in':>10}{'scale mpi':>11}{'ddp scale':>11}  dirty runs")
ok_all = True
for cfg in sorted({r["config"] for r in px}):
    p1, a = ms(px, cfg, 1, "none")
    pi, b = ms(px, cfg, 2, "inproc")
    pm, c = ms(px, cfg, 2, "mpi")
    t1, e = ms(pt, cfg, 1)
    t2, f = ms(pt, cfg, 2)
    best = min(pi, pm)
    ratio, scale = t2 / best, p1 / best
    ok_all &= ratio >= 1.2 and scale >= 1.7
    mark = lambda x, t: f"{x:.2f}" + ("" if x >= t else "!")
    dirty = sum(r["median_is_over"] != "clean" for r in a + b + c + e + f)
    name = (a or b or c)[0]["name"] + f" ({cfg})"
    print(f"{name:<16}{p1:>8.1f}{pi:>10.1f}{pm:>11.1f}{t1:>8.1f}{t2:>8.1f}{mark(t2 / pi, 1.2):>11}"
          f"{mark(t2 / pm, 1.2):>12}{mark(p1 / pi, 1.7):>10}{mark(p1 / pm, 1.7):>11}{t1 / t2:>11.2f}  {dirty}")
print("ms = median step time (global batch) over repetitions; px/ddp = throughput ratio (target >= 1.2); "
      "scale = parallax 1-rank / 2-rank (target >= 1.7); ! = below target")
print("all targets met (best 2-rank launch)" if ok_all else "some targets NOT met")
EOF
