#!/usr/bin/env bash
# Whether `parallax plan`'s strategies hold up when run, on this host
# (in-process ranks, a private calibration):
#
#  1. The CNN with a large fully-connected layer (fc1 2048 wide) on 4 ranks
#     with each link limited to 1 Gb/s: the layer-wise plan (--method
#     layerwise) and the auto plan against plain data parallelism, each
#     measured (median executor step) and predicted.
#  2. The models of bench/ (the GPT 4 x 128, the MLP, the CNN) on 2 and 4
#     ranks, unlimited: the auto plan's measured throughput against data
#     parallelism's on the same ranks.
#
#   bench/plan_quality.sh [--steps 30] [--build build]
#
# Targets (issue: the planner): 1. the layer-wise plan >= 1.3x data
# parallelism's speed, predicted within 15%; 2. never below 0.95x data
# parallelism. Each run holds /tmp/px-build.lock.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
STEPS=30
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) STEPS=$2; shift 2 ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
require_parallax
make_results plan-quality
export XDG_CACHE_HOME=$RESULTS/cache

run() {  # name, flags...: train and keep the metrics
  local name=$1; shift
  flock /tmp/px-build.lock "$PX" train "$@" --steps "$STEPS" --eval-every 0 --eval-batches 1 --sample-tokens 0 \
    --progress lines --metrics "$RESULTS/$name.jsonl" > "$RESULTS/$name.log" 2>&1 \
    || { echo "error: $name failed (see $RESULTS/$name.log)" >&2; exit 1; }
  echo "ran $name" >&2
}
plan() {  # name, flags...: plan into name.json
  local name=$1; shift
  flock /tmp/px-build.lock "$PX" plan "$@" --out "$RESULTS/$name.json" > "$RESULTS/$name.plan.txt" 2>&1 \
    || { echo "error: planning $name failed (see $RESULTS/$name.plan.txt)" >&2; exit 1; }
  echo "planned $name: $(grep '^chose' "$RESULTS/$name.plan.txt")" >&2
}

# 1. The CNN with a large fully-connected layer at 1 Gb/s.
CNN=(--model cnn --cnn-hidden 2048)
flock /tmp/px-build.lock "$PX" calibrate "${CNN[@]}" --max-ranks 4 > "$RESULTS/calibrate-cnn.log" 2>&1
plan cnn-layerwise "${CNN[@]}" --cluster local --ranks 4 --link-gbps 1 --method layerwise
plan cnn-auto "${CNN[@]}" --cluster local --ranks 4 --link-gbps 1
run cnn-dp "${CNN[@]}" --ranks 4 --link-gbps 1
run cnn-layerwise "${CNN[@]}" --ranks 4 --link-gbps 1 --strategy "$RESULTS/cnn-layerwise.json"
run cnn-auto "${CNN[@]}" --ranks 4 --link-gbps 1 --strategy "$RESULTS/cnn-auto.json"

# 2. The bench models, unlimited links.
declare -A MODEL=([gpt]="--model gpt --dropout 0" [mlp]="--model mlp" [cnn]="--model cnn")
PAIRS=()
for model in gpt mlp cnn; do
  # shellcheck disable=SC2086
  flock /tmp/px-build.lock "$PX" calibrate ${MODEL[$model]} --max-ranks 4 --comm keep > "$RESULTS/calibrate-$model.log" 2>&1
  for ranks in 2 4; do
    # shellcheck disable=SC2086
    plan "$model-$ranks-plan" ${MODEL[$model]} --cluster local --ranks "$ranks"
    # shellcheck disable=SC2086
    run "$model-$ranks-dp" ${MODEL[$model]} --ranks "$ranks"
    # shellcheck disable=SC2086
    run "$model-$ranks-plan" ${MODEL[$model]} --ranks "$ranks" --strategy "$RESULTS/$model-$ranks-plan.json"
    PAIRS+=("$model-$ranks")
  done
done

python3 - "$RESULTS" "${PAIRS[@]}" <<'PY'
import json, sys
results, pairs = sys.argv[1], sys.argv[2:]
def figures(name):
    line = [json.loads(l) for l in open(f"{results}/{name}.jsonl") if "predicted_step_s" in l][-1]
    return line["measured_step_s"], line["predicted_step_s"]
def chose(name):
    return [l for l in open(f"{results}/{name}.plan.txt") if l.startswith("chose")][0].split(":")[0][6:]
dp, _ = figures("cnn-dp")
print("1. CNN (fc1 2048 wide), 4 ranks, 1 Gb/s links")
print(f"{'strategy':52} {'measured':>9} {'predicted':>9} {'error':>7} {'vs dp':>6}")
print(f"{'data parallelism':52} {dp*1e3:7.1f}ms")
for name in ("cnn-layerwise", "cnn-auto"):
    m, p = figures(name)
    print(f"{chose(name):52} {m*1e3:7.1f}ms {p*1e3:7.1f}ms {100*(p/m-1):+6.1f}% {dp/m:5.2f}x")
print("targets: the layer-wise plan >= 1.3x data parallelism, predicted within 15%")
print()
print("2. plan against data parallelism on the same ranks (throughput ratio, target >= 0.95)")
worst = None
for pair in pairs:
    d, _ = figures(f"{pair}-dp")
    m, _ = figures(f"{pair}-plan")
    ratio = d / m
    worst = ratio if worst is None else min(worst, ratio)
    print(f"{pair:8} {chose(pair + '-plan'):52} dp {d*1e3:8.2f}ms plan {m*1e3:8.2f}ms  {ratio:5.2f}x")
print(f"worst {worst:.2f}x")
PY
