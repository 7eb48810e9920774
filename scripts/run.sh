#!/usr/bin/env bash
# The main job, about five minutes on two cores: set up and build; time
# this host into the planner's `local` cluster spec (once); plan the GPT
# (gpt-mini: 4 layers, 4 heads, 128 wide, context 128) for two in-process
# ranks and say what the planner chose and why (where the CPU has
# AVX512_BF16 the plan compares fp32 with bf16 mixed precision and keeps
# the faster; the strategy file records the precision, and the script
# says which); train it with that strategy, in that precision, on the
# fortunes corpus, evaluating as it goes, ending with predicted vs
# measured step time and memory and a generated sample; then write the
# run's HTML report (runs/gpt-mini/report.html); then serve the checkpoint
# in process under a short Poisson load (`parallax bench serve`), with
# iteration-level and with request-level batching, and print one line of
# TTFT, TPOT and the ratio of their latencies.
#
# Extra arguments go to `parallax train` (see `parallax train --help`);
# those that define the model or the ranks (--model, --ranks, --layers,
# --heads, --embd, --block, --batch, ...) go to `parallax plan` as well,
# so the plan is for the model that is trained; --precision fp32|bf16
# fixes the precision instead of letting the plan choose.
# PX_CALIBRATE_ARGS: extra flags for the calibration (the documentation
# test gives "--kernel-ms 2", as it does every documented calibrate).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh parallax
P=./build/src/cli/parallax
RUN=runs/gpt-mini
RANKS=2
STEPS=1500

# The flags `parallax plan` shares with train: the model's and the ranks'.
plan_args=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --model | --batch | --accumulation | --seed | --block | --layers | --heads | --embd | --vocab | --dropout | \
      --cnn-channels | --cnn-hidden | --hidden | --ranks | --precision)
      [ "${args[i]}" = --ranks ] && RANKS="${args[i + 1]}"
      plan_args+=("${args[i]}" "${args[i + 1]}"); i=$((i + 1)) ;;
    --model=* | --batch=* | --accumulation=* | --seed=* | --block=* | --layers=* | --heads=* | --embd=* | \
      --vocab=* | --dropout=* | --cnn-channels=* | --cnn-hidden=* | --hidden=* | --ranks=* | --precision=*)
      [[ "${args[i]}" == --ranks=* ]] && RANKS="${args[i]#--ranks=}"
      plan_args+=("${args[i]}") ;;
  esac
done

echo "== 1. this host, timed into the planner's local cluster spec"
spec="${XDG_CACHE_HOME:-$HOME/.cache}/parallax/local-cluster.json"
if [ -f "$spec" ]; then
  echo "using '$spec' (delete it, or run 'parallax calibrate', to measure again)"
else
  read -r -a calibrate_args <<< "${PX_CALIBRATE_ARGS:-}"
  "$P" calibrate --model gpt --max-ranks "$RANKS" "${calibrate_args[@]}"
  # Where the CPU runs bf16 GEMMs, their own timings, so the plan compares the precisions on measured kernels.
  if grep -q '^flags.* avx512_bf16' /proc/cpuinfo; then
    "$P" calibrate --model gpt --max-ranks "$RANKS" --precision bf16 --comm keep "${calibrate_args[@]}"
  fi
fi

echo; echo "== 2. the plan: the fastest strategy for $RANKS ranks of this host that fits its memory"
rm -rf "$RUN"
mkdir -p "$RUN"
"$P" plan --model gpt --cluster local --ranks "$RANKS" "${plan_args[@]}" --out "$RUN/plan-strategy.json" \
  --explain "$RUN/plan.json" --top 6

precision=$(grep -o '"precision": *"[a-z0-9]*"' "$RUN/plan-strategy.json" | grep -o '[a-z0-9]*"$' | tr -d '"')
if [ "$precision" = bf16 ]; then
  why="bf16 mixed precision: GEMMs on bf16 operands with fp32 accumulation, weights and optimizer fp32"
elif grep -q '^flags.* avx512_bf16' /proc/cpuinfo; then
  why="the plan predicted fp32 faster, or --precision fp32 asked for it"
else
  why="this CPU has no AVX512_BF16"
fi
echo "precision: ${precision:-fp32} ($why)"

echo; echo "== 3. training with it on $RANKS in-process ranks, in ${precision:-fp32}"
"$P" train --model gpt --ranks "$RANKS" --steps "$STEPS" --strategy "$RUN/plan-strategy.json" --save "$RUN/checkpoint" \
  --run-dir "$RUN" "$@"

echo; echo "== 4. the report"
"$P" report "$RUN"

echo; echo "== 5. serving it: parallax bench serve, the checkpoint served in process under Poisson load"
for scheduler in iteration request; do
  "$P" bench serve --checkpoint "$RUN/checkpoint" --requests 64 --rate 400 --seed 1 --prompt-bytes 16:64 \
    --output-tokens 8:60 --scheduler "$scheduler" --out "$RUN/serve-$scheduler.json" > "$RUN/serve-$scheduler.log" 2>&1
done
python3 - "$RUN" <<'PY'
import json, sys
runs = {s: json.load(open(f"{sys.argv[1]}/serve-{s}.json"))["summary"] for s in ("iteration", "request")}
it, rq = runs["iteration"], runs["request"]
print(f"serving (64 requests at 400/s): TTFT p50 {it['ttft']['p50_ms']:.1f} ms, TPOT p50 {it['tpot']['p50_ms']:.2f} ms; "
      f"request-level batching's mean latency is {rq['e2e']['mean_ms'] / it['e2e']['mean_ms']:.2f}x iteration-level's "
      f"(TTFT p99 {rq['ttft']['p99_ms'] / it['ttft']['p99_ms']:.2f}x)")
PY
