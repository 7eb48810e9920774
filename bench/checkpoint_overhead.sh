#!/usr/bin/env bash
# What background checkpointing costs: gpt-mini (the main job's model) for
# --steps steps with --save-every 20 against the same run without saving,
# side by side in rounds whose order alternates (round 1 no-save then save,
# round 2 save then no-save, ...), so neither a slow spell of this shared
# machine nor a warm page cache favours one side. Each run holds the shared
# build/benchmark lock (--lock; '' for none). Throughput is tokens per second from step
# 2 to the last step (the metrics' time_s; the first step warms up), which
# covers every snapshot and every background write but not the final,
# waited-for save. Prints each run and the median ratio; the target is at
# least 0.95 (checkpointing costs at most 5%).
#
#   bench/checkpoint_overhead.sh [--steps N] [--repeats R] [--threads T] [--lock /tmp/px-build.lock]
set -euo pipefail
source "$(dirname "$0")/common.sh"
STEPS=100 REPEATS=3 THREADS=2
while [[ $# -gt 0 ]]; do
  case $1 in
    --steps) STEPS=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --lock) LOCK=$2; shift 2 ;;
    --help|-h) usage ;;
    *) echo "error: unknown option $1" >&2; usage 1 ;;
  esac
done
require_parallax
make_results checkpoint-overhead
JOB=(train --model gpt --steps "$STEPS" --threads "$THREADS" --eval-every 0 --eval-batches 1 --sample-tokens 0
     --progress lines --no-predict)

rate() {  # tokens/s between step 2 and the last step of a metrics file
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = {r["step"]: r["time_s"] for r in rows if "time_s" in r}
last = max(t)
print(f"{(last - 1) * 16 * 128 / (t[last] - t[1]):.0f}")
PY
}

run_plain() { locked "$PX" "${JOB[@]}" --metrics "$RESULTS/plain-$1.jsonl" > "$RESULTS/plain-$1.log"; }
run_saving() {
  rm -rf "$RESULTS/ckpt"*
  locked "$PX" "${JOB[@]}" --save "$RESULTS/ckpt" --save-every 20 --metrics "$RESULTS/save-$1.jsonl" \
    > "$RESULTS/save-$1.log"
}

ratios=()
for ((r = 1; r <= REPEATS; ++r)); do
  if ((r % 2)); then order="no-save first"; run_plain "$r"; run_saving "$r"
  else order="save first"; run_saving "$r"; run_plain "$r"; fi
  plain=$(rate "$RESULTS/plain-$r.jsonl") saved=$(rate "$RESULTS/save-$r.jsonl")
  ratio=$(python3 -c "print(f'{$saved / $plain:.3f}')")
  ratios+=("$ratio")
  echo "round $r ($order): no checkpoints $plain tok/s, --save-every 20 $saved tok/s: ratio $ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | sed -n "$(( (REPEATS + 1) / 2 ))p")
size=$(du -sh "$RESULTS/ckpt" | cut -f1)
echo "gpt-mini, $STEPS steps, checkpoint of $size every 20 steps: throughput ratio (median of $REPEATS) $median (target >= 0.95)"
