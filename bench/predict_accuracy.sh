#!/usr/bin/env bash
# Predicted against measured on this host: `parallax calibrate` for the
# GPT (4 layers x 128), the MLP and the CNN into a private cache, then
# `parallax train` of each (model, strategy) pair below on in-process
# ranks, each ending with the simulator's prediction beside its measured
# median step and rank 0's peak tensor memory (the metrics' last line).
# Per pair: the step-time and memory errors; over all pairs: the median
# and worst |step error|, the worst |memory error|, and per model the
# Kendall tau between the strategies' ranking by predicted and by
# measured step time.
#
# No pair is calibrated on itself: calibration times kernels and the
# transport, and the one model-level correction (the in-situ factor,
# plan/profile.h) a model's predictions get is held out, the median of
# the OTHER calibrated models' one-rank steps (the GPT's from the MLP's
# and the CNN's runs, and so on).
#
# The host is shared: back-to-back runs of one pair measure steps up to
# 25% apart while a GEMM probe between them moves under 2%. So every pair
# runs --repeats times, in rounds over all the pairs (a slow spell then
# hits one run of each, not all runs of one), and its measured step is the
# median of its runs.
#
#   bench/predict_accuracy.sh [--steps 30] [--repeats 3] [--tune] [--build build]
#
#   --tune  calibrate the transport with every algorithm's fit (minutes)
#           instead of the quick link measurement
#
# The ZeRO-3, top-k and P3-at-1-Gb/s pairs are where the executor's timing
# used to be hidden from the simulator (gathers before use, bucket-buffer
# back-pressure, the codec's agreement round, deferred updates): each should
# sit within the median error of the rest.
#
# Targets (issue: the planner): median |step error| <= 10%, worst <= 25%,
# Kendall tau >= 0.8, memory within 10%. Each run holds /tmp/px-build.lock.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
STEPS=30 REPEATS=3 COMM=quick
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) STEPS=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --tune) COMM=tune; shift ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
require_parallax
make_results predict
export XDG_CACHE_HOME=$RESULTS/cache

declare -A MODEL=(
  [gpt]="--model gpt --dropout 0"
  [mlp]="--model mlp"
  [cnn]="--model cnn"
)
# name model flags
PAIRS=(
  "gpt-1 gpt --ranks 1"
  "gpt-dp2 gpt --ranks 2"
  "gpt-dp4 gpt --ranks 4"
  "gpt-dp2-zero2 gpt --ranks 2 --zero 2"
  "gpt-dp2-zero3 gpt --ranks 2 --zero 3"
  "gpt-dp2-int8 gpt --ranks 2 --compress int8"
  "gpt-dp2-topk gpt --ranks 2 --compress topk:0.01"
  "gpt-dp2-p3-1gbps gpt --ranks 2 --p3-slice-kb 64 --grad-clip 0 --link-gbps 1"
  "gpt-tp2 gpt --ranks 2 --tp 2"
  "gpt-tp2-sp gpt --ranks 2 --tp 2 --sequence-parallel"
  "gpt-pp2 gpt --ranks 2 --pp 2 --micro-batches 4"
  "gpt-pp2-dp2 gpt --ranks 4 --pp 2 --micro-batches 4"
  "gpt-dp2-tp2 gpt --ranks 4 --tp 2"
  "gpt-pp2-tp2 gpt --ranks 4 --pp 2 --tp 2 --micro-batches 4"
  "mlp-1 mlp --ranks 1"
  "mlp-dp2 mlp --ranks 2"
  "mlp-dp4 mlp --ranks 4"
  "cnn-1 cnn --ranks 1"
  "cnn-dp2 cnn --ranks 2"
  "cnn-dp4 cnn --ranks 4"
)

for model in gpt mlp cnn; do
  comm=$COMM
  [[ $model != gpt ]] && comm=keep
  # shellcheck disable=SC2086
  flock /tmp/px-build.lock "$PX" calibrate ${MODEL[$model]} --max-ranks 4 --comm "$comm" \
    > "$RESULTS/calibrate-$model.log" 2>&1 || { echo "error: calibrate $model failed" >&2; exit 1; }
  echo "calibrated $model" >&2
done

for ((round = 1; round <= REPEATS; round++)); do
  for pair in "${PAIRS[@]}"; do
    read -r name model flags <<< "$pair"
    # shellcheck disable=SC2086
    flock /tmp/px-build.lock "$PX" train ${MODEL[$model]} $flags --steps "$STEPS" --eval-every 0 --eval-batches 1 \
      --sample-tokens 0 --progress lines --metrics "$RESULTS/$name.$round.jsonl" > "$RESULTS/$name.$round.log" 2>&1 \
      || { echo "error: $name failed (see $RESULTS/$name.$round.log)" >&2; exit 1; }
  done
  echo "ran round $round of $REPEATS" >&2
done

python3 - "$RESULTS" "$REPEATS" "${PAIRS[@]}" <<'PY'
import itertools, json, statistics, sys
results, repeats, pairs = sys.argv[1], int(sys.argv[2]), [p.split()[:2] for p in sys.argv[3:]]
rows = []
for name, model in pairs:
    runs = []
    for r in range(1, repeats + 1):
        line = [json.loads(l) for l in open(f"{results}/{name}.{r}.jsonl") if "predicted_step_s" in l][-1]
        assert line["prediction_calibrated"], name
        runs.append(line)
    # The prediction comes from the same calibration each time; the measured step is the runs' median.
    rows.append((name, model, statistics.median(l["predicted_step_s"] for l in runs),
                 statistics.median(l["measured_step_s"] for l in runs),
                 statistics.median(l["predicted_peak_bytes"] for l in runs),
                 statistics.median(l["measured_peak_bytes"] for l in runs)))
print(f"{'pair':22} {'predicted':>10} {'measured':>10} {'error':>7}   {'memory pred':>11} {'measured':>9} {'error':>7}")
step_errors, memory_errors = [], []
for name, model, ps, ms, pm, mm in rows:
    e, em = ps / ms - 1, pm / mm - 1
    step_errors.append(abs(e))
    memory_errors.append(abs(em))
    print(f"{name:22} {ps*1e3:8.2f}ms {ms*1e3:8.2f}ms {100*e:+6.1f}%   {pm/2**20:9.1f}Mi {mm/2**20:7.1f}Mi {100*em:+6.1f}%")
def kendall(xs, ys):
    concordant = discordant = 0
    for (a, b), (c, d) in itertools.combinations(zip(xs, ys), 2):
        s = (a - c) * (b - d)
        concordant += s > 0
        discordant += s < 0
    n = concordant + discordant
    return (concordant - discordant) / n if n else 1.0
print()
print(f"step time: median |error| {100*statistics.median(step_errors):.1f}% (target <= 10%), "
      f"worst {100*max(step_errors):.1f}% (target <= 25%)")
print(f"peak memory: worst |error| {100*max(memory_errors):.1f}% (target <= 10%)")
for model in sorted({m for _, m in pairs}):
    mine = [r for r in rows if r[1] == model]
    tau = kendall([r[2] for r in mine], [r[3] for r in mine])
    print(f"Kendall tau, {model} ({len(mine)} strategies): {tau:.2f} (target >= 0.8)")
PY
