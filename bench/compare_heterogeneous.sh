#!/usr/bin/env bash
# Synchronization on hosts of different speeds (issue 48's benchmark): 4
# network-namespace hosts with CPU quotas (default 50/50/50/12.5% of a
# core, scripts/hosts.sh --cpu), one OpenMPI rank of one thread each,
# gpt-mini (4 layers of 128, block 128, vocab 256) with SGD and momentum
# at a constant learning rate, batch 32, the validation loss on 20 fixed
# batches every 20 steps. Five ways to synchronize, each run under the
# lock, the order rotated every repetition:
#   uniform        bulk-synchronous allreduce, even rows
#   proportional   bulk-synchronous allreduce, rows by the calibrated speeds
#   partial        --sync partial-reduce
#   gossip         --sync gossip
#   ps             --ps ssp (staleness 4; a fifth rank serves, on host 0)
# The target is the validation loss uniform training reaches at step
# --target-step (400); each method runs to it or to --cap steps. Prints
# per run the wall time to the target and the validation loss at the
# target step's samples, then per method the median time against
# uniform's and the loss against uniform's (docs/heterogeneous.md quotes it).
# --change HOST:PERCENT@STEP (with --quotas 50,50,50,50, say) is the
# changing-speed scenario instead: host HOST's quota becomes PERCENT once
# a run passes STEP. It runs the split by the speeds calibrated at the
# start to --target-step, partial reduce to --cap and `launch
# --rebalance` to --target-step, each with the change, then a fresh run
# split by speeds calibrated at the new quota; it prints when the host is
# named a straggler, each method's time to the fixed split's loss, and
# the rebalanced throughput against the fresh run's.
# --predict instead runs uniform and proportional for 30 steps each and
# prints the simulator's step time against the measured one (the issue's
# prediction within 15%), from the calibrated spec the runs load.
#
#   bench/compare_heterogeneous.sh [--reps N] [--cap S] [--target-step S]
#                                  [--quotas 50,50,50,12.5] [--methods a,b,...]
#                                  [--model-flags "--layers 2 ..."] [--predict] [--change H:P@S]
#                                  [--build DIR] [--lock FILE]
# --model-flags replaces gpt-mini's shape flags (a quicker, smaller run).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
REPS=3 CAP=2000 TARGET_STEP=400 QUOTAS=50,50,50,12.5 METHODS=uniform,proportional,partial,gossip,ps PREDICT=0 CHANGE=""
MODEL_FLAGS="--vocab 256 --block 128 --layers 4 --heads 4 --embd 128 --batch 32"
while [[ $# -gt 0 ]]; do
  case $1 in
    --reps) REPS=$2; shift 2 ;;
    --cap) CAP=$2; shift 2 ;;
    --target-step) TARGET_STEP=$2; shift 2 ;;
    --quotas) QUOTAS=$2; shift 2 ;;
    --methods) METHODS=$2; shift 2 ;;
    --model-flags) MODEL_FLAGS=$2; shift 2 ;;
    --predict) PREDICT=1; shift ;;
    --change) CHANGE=$2; shift 2 ;;
    --build) BUILD=$(realpath "$2"); shift 2 ;;
    --lock) LOCK=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "error: network namespaces and CPU quotas need root" >&2; exit 1; }
require_parallax
make_results heterogeneous
HOSTS=$REPO/scripts/hosts.sh
export PXH_NAME=pxh$$ PXH_DISK=/mnt/pxh$$
trap '"$HOSTS" down > /dev/null; rm -rf "$PXH_DISK"' EXIT
IFS=, read -r -a quota <<< "$QUOTAS"
cpu=""
for h in "${!quota[@]}"; do cpu+="${cpu:+,}$h:${quota[$h]}"; done
"$HOSTS" up "${#quota[@]}" --cpu "$cpu" >&2
HOSTLIST=$(for h in "${!quota[@]}"; do printf '%s-%d:1,' "$PXH_NAME" "$h"; done)
HOSTLIST=${HOSTLIST%,}
NP=${#quota[@]}

read -r -a shape <<< "$MODEL_FLAGS"
MODEL=(--model gpt "${shape[@]}")
TRAIN=(train "${MODEL[@]}" --optimizer sgd --momentum 0.9 --lr 0.05 --lr-schedule constant --warmup 0
       --grad-clip 0 --weight-decay 0 --eval-every 20 --eval-batches 20 --sample-tokens 0 --threads 1
       --progress lines --no-predict)

# The hosts' speeds as calibrate measures them (one host at a time), for the proportional split.
locked "$HOSTS" mpirun --host "$HOSTLIST" -np "$NP" "$PX" calibrate "${MODEL[@]}" --threads 1 \
  > "$RESULTS/calibrate.log" 2>&1
shares_of() {  # CALIBRATE_LOG: row shares by the host speeds it names
  python3 - "$1" "$NP" << 'PY'
import re, sys
speeds = [float(s) for s in re.findall(r"host \d+: GEMM [0-9.]+ GFLOP/s, ([0-9.]+)% of host 0's", open(sys.argv[1]).read())]
n = int(sys.argv[2])
if len(speeds) < n:
    sys.exit(f"calibrate named {len(speeds)} host speeds, expected {n}: see {sys.argv[1]}")
print(",".join(str(max(1, round(10 * s))) for s in speeds[:n]))
PY
}
SHARES=$(shares_of "$RESULTS/calibrate.log")
echo "row shares by calibrated speed: $SHARES" >&2

run() {  # METHOD REP STEPS: one run, its metrics in $RESULTS/METHOD-REP.jsonl
  local method=$1 rep=$2 steps=$3 extra=() np=$NP hosts=$HOSTLIST
  case $method in
    uniform) ;;
    proportional) extra=(--row-shares "$SHARES") ;;
    partial) extra=(--sync partial-reduce) ;;
    gossip) extra=(--sync gossip) ;;
    ps) extra=(--ps ssp --staleness 4); np=$((NP + 1)); hosts="$PXH_NAME-0:2,${HOSTLIST#*,}" ;;
    *) echo "error: unknown method '$method'" >&2; exit 2 ;;
  esac
  locked "$HOSTS" mpirun --host "$hosts" -np "$np" "$PX" "${TRAIN[@]}" --steps "$steps" "${extra[@]}" \
    --metrics "$PXH_DISK/$method-$rep.jsonl" > "$RESULTS/$method-$rep.log" 2>&1 ||
    { echo "error: $method rep $rep failed: $RESULTS/$method-$rep.log" >&2; tail -5 "$RESULTS/$method-$rep.log" >&2; exit 1; }
  "$HOSTS" exec 0 cat "$PXH_DISK/$method-$rep.jsonl" > "$RESULTS/$method-$rep.jsonl"
}

if [[ -n $CHANGE ]]; then
  # A host slows down mid-run (--change HOST:PERCENT@STEP): the quota
  # changes once the run's metrics pass STEP, and goes back after it.
  [[ $CHANGE =~ ^([0-9]+):([0-9.]+)@([0-9]+)$ ]] || { echo "error: --change '$CHANGE': expected HOST:PERCENT@STEP" >&2; exit 2; }
  CH_HOST=${BASH_REMATCH[1]} CH_PCT=${BASH_REMATCH[2]} CH_STEP=${BASH_REMATCH[3]}
  CH_FROM=${quota[$CH_HOST]}
  watch_and_change() {  # METRICS NAME: in the background
    while sleep 0.2; do
      local step
      step=$(tail -c 400 "$1" 2> /dev/null | grep -o '"step":[0-9]*' | tail -1 | cut -d: -f2 || true)
      if [[ -n $step && $step -ge $CH_STEP ]]; then
        "$HOSTS" cpu "$CH_HOST" "$CH_PCT" > /dev/null
        echo "$step" > "$RESULTS/$2.changed"
        return
      fi
    done
  }
  change_run() {  # NAME STEPS ARGS...: one run with the change, metrics in $RESULTS/NAME.jsonl
    local name=$1 steps=$2
    shift 2
    watch_and_change "$RESULTS/$name.jsonl" "$name" &
    local watcher=$!
    locked "$HOSTS" mpirun --host "$HOSTLIST" -np "$NP" "$PX" "${TRAIN[@]}" --steps "$steps" "$@" \
      --metrics "$RESULTS/$name.jsonl" > "$RESULTS/$name.log" 2>&1 ||
      { kill $watcher 2> /dev/null; echo "error: $name failed: $RESULTS/$name.log" >&2; tail -5 "$RESULTS/$name.log" >&2; exit 1; }
    kill $watcher 2> /dev/null || true
    "$HOSTS" cpu "$CH_HOST" "$CH_FROM" > /dev/null
  }
  change_run proportional "$TARGET_STEP" --row-shares "$SHARES"
  change_run partial "$CAP" --sync partial-reduce
  # launch --rebalance: restarts from the checkpoint with rows by the measured rates.
  watch_and_change "$RESULTS/rebalance/metrics.jsonl" rebalance &
  watcher=$!
  locked "$PX" launch --rebalance --hosts "$HOSTLIST" --mpirun "$HOSTS mpirun" --run-dir "$RESULTS/rebalance" -- \
    "$PX" "${TRAIN[@]}" --steps "$TARGET_STEP" --row-shares "$SHARES" --save "$PXH_DISK/rebalance-ckpt" \
    > "$RESULTS/rebalance.log" 2>&1 || { kill $watcher 2> /dev/null; echo "error: rebalance failed: $RESULTS/rebalance.log" >&2; exit 1; }
  kill $watcher 2> /dev/null || true
  # A fresh run at the new speeds, rows by speeds calibrated at them.
  "$HOSTS" cpu "$CH_HOST" "$CH_PCT" > /dev/null
  locked "$HOSTS" mpirun --host "$HOSTLIST" -np "$NP" "$PX" calibrate "${MODEL[@]}" --threads 1 \
    > "$RESULTS/calibrate-after.log" 2>&1
  NEW_SHARES=$(shares_of "$RESULTS/calibrate-after.log")
  locked "$HOSTS" mpirun --host "$HOSTLIST" -np "$NP" "$PX" "${TRAIN[@]}" --steps 40 --row-shares "$NEW_SHARES" \
    --metrics "$RESULTS/fresh.jsonl" > "$RESULTS/fresh.log" 2>&1
  "$HOSTS" cpu "$CH_HOST" "$CH_FROM" > /dev/null
  python3 - "$RESULTS" "$TARGET_STEP" "$CH_HOST" "$CH_STEP" "$SHARES" "$NEW_SHARES" << 'PY'
import json, re, statistics, sys
results, target_step, host, change_step = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def lines(path):
    return [json.loads(l) for l in open(path)]
def changed(name):
    return int(open(f"{results}/{name}.changed").read())
def named(ls, after):
    return next((l["step"] for l in ls if l.get("straggler") == host and l.get("straggling") and l["step"] >= after), None)
print(f"rows at the start {sys.argv[5]}, calibrated at the new speeds {sys.argv[6]}")
prop, part, reb = lines(f"{results}/proportional.jsonl"), lines(f"{results}/partial.jsonl"), lines(f"{results}/rebalance/metrics.jsonl")
for name, ls in (("proportional", prop), ("partial", part), ("rebalance", reb)):
    at = changed(name)
    n = named(ls, at)
    print(f"{name:12s} quota changed after step {at}: host {host} named a straggler "
          + (f"at step {n} ({n - at} steps later)" if n is not None else "never"))
evals = lambda ls: [(l["step"], l["val_loss"], l["time_s"]) for l in ls if "val_loss" in l]
target = next(v for s, v, t in evals(prop) if s >= target_step)
for name, ls in (("proportional", prop), ("partial", part)):
    reached = next((t for s, v, t in evals(ls) if v <= target * (1 + 1e-5)), None)
    print(f"{name:12s} time to the fixed split's loss at step {target_step} ({target:.4f}): "
          + (f"{reached:.1f} s" if reached is not None else "not reached"))
restart = next((i for i, l in enumerate(reb) if "restart" in l or "rebalance" in l), None)
after = [l["step_s"] for l in reb[restart + 1:] if "step_s" in l][1:] if restart is not None else []
fresh = [l["step_s"] for l in lines(f"{results}/fresh.jsonl") if "step_s" in l][1:]
if after and fresh:
    print(f"rebalanced: median step {statistics.median(after) * 1e3:.0f} ms after the restart; fresh split at the new "
          f"speeds {statistics.median(fresh) * 1e3:.0f} ms: {statistics.median(fresh) / statistics.median(after):.0%} of its throughput")
else:
    print("rebalance: no restart found in its metrics")
PY
  exit 0
fi

if [[ $PREDICT == 1 ]]; then
  # The runs load the spec calibrate just saved (the local spec, its
  # hosts' speeds and quotas) and print their prediction at the end.
  for method in uniform proportional; do
    extra=()
    [[ $method == proportional ]] && extra=(--row-shares "$SHARES")
    locked "$HOSTS" mpirun --host "$HOSTLIST" -np "$NP" "$PX" train "${MODEL[@]}" --steps 30 --eval-every 0 \
      --eval-batches 1 --sample-tokens 0 --threads 1 --progress lines "${extra[@]}" > "$RESULTS/predict-$method.log" 2>&1 ||
      { echo "error: $method failed: $RESULTS/predict-$method.log" >&2; tail -5 "$RESULTS/predict-$method.log" >&2; exit 1; }
    echo "$method: $(grep -m1 'step time    predicted' "$RESULTS/predict-$method.log" | sed 's/^ *//')"
  done
  exit 0
fi

IFS=, read -r -a methods <<< "$METHODS"
for rep in $(seq 1 "$REPS"); do
  run uniform "$rep" "$TARGET_STEP"
  for ((i = 0; i < ${#methods[@]}; ++i)); do
    method=${methods[$(((i + rep) % ${#methods[@]}))]}
    [[ $method == uniform ]] && continue
    run "$method" "$rep" "$CAP"
  done
done
python3 - "$RESULTS" "$REPS" "$TARGET_STEP" "$METHODS" << 'PY'
import json, statistics, sys
results, reps, target_step, methods = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(",")
def evals(method, rep):
    lines = [json.loads(l) for l in open(f"{results}/{method}-{rep}.jsonl")]
    return [(l["step"], l["val_loss"], l["time_s"]) for l in lines if "val_loss" in l]
table = {}
for rep in range(1, reps + 1):
    uniform = evals("uniform", rep)
    target = next(v for s, v, t in uniform if s >= target_step)
    for method in methods:
        e = evals(method, rep)
        # Within float noise counts: the same training (rows split otherwise) reaches it at the same step.
        reached = next((t for s, v, t in e if v <= target * (1 + 1e-5)), None)
        at_samples = min(e, key=lambda x: abs(x[0] - target_step))[1]
        table.setdefault(method, []).append((reached, at_samples))
        print(f"{method:12s} rep {rep}: target {target:.4f} reached "
              + (f"at {reached:7.1f} s" if reached is not None else "never (cap)")
              + f"; val loss at step {target_step}'s samples {at_samples:.4f}")
base = statistics.median(t for t, _ in table["uniform"])
base_loss = statistics.median(l for _, l in table["uniform"])
for method, runs in table.items():
    times = [t for t, _ in runs if t is not None]
    time = f"{statistics.median(times) / base:.2f}x uniform" if len(times) == len(runs) else "not always reached"
    print(f"{method:12s} time to target: {time}; loss at equal samples {statistics.median(l for _, l in runs) / base_loss - 1:+.2%} vs uniform")
PY
