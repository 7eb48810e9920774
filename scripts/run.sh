#!/usr/bin/env bash
# The main job, about five minutes on two cores: set up and build; time
# this host into the planner's `local` cluster spec (once); plan the GPT
# (gpt-mini: 4 layers, 4 heads, 128 wide, context 128) for two in-process
# ranks and say what the planner chose and why; train it with that
# strategy on the fortunes corpus, evaluating as it goes, ending with
# predicted vs measured step time and memory and a generated sample; then
# write the run's HTML report (runs/gpt-mini/report.html).
#
# Extra arguments go to `parallax train` (see `parallax train --help`);
# those that define the model or the ranks (--model, --ranks, --layers,
# --heads, --embd, --block, --batch, ...) go to `parallax plan` as well,
# so the plan is for the model that is trained.
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
      --cnn-channels | --cnn-hidden | --hidden | --ranks)
      [ "${args[i]}" = --ranks ] && RANKS="${args[i + 1]}"
      plan_args+=("${args[i]}" "${args[i + 1]}"); i=$((i + 1)) ;;
    --model=* | --batch=* | --accumulation=* | --seed=* | --block=* | --layers=* | --heads=* | --embd=* | \
      --vocab=* | --dropout=* | --cnn-channels=* | --cnn-hidden=* | --hidden=* | --ranks=*)
      [[ "${args[i]}" == --ranks=* ]] && RANKS="${args[i]#--ranks=}"
      plan_args+=("${args[i]}") ;;
  esac
done

echo "== 1. this host, timed into the planner's local cluster spec"
spec="${XDG_CACHE_HOME:-$HOME/.cache}/parallax/local-cluster.json"
if [ -f "$spec" ]; then
  echo "using '$spec' (delete it, or run 'parallax calibrate', to measure again)"
else
  "$P" calibrate --model gpt --max-ranks "$RANKS"
fi

echo; echo "== 2. the plan: the fastest strategy for $RANKS ranks of this host that fits its memory"
rm -rf "$RUN"
mkdir -p "$RUN"
"$P" plan --model gpt --cluster local --ranks "$RANKS" "${plan_args[@]}" --out "$RUN/plan-strategy.json" \
  --explain "$RUN/plan.json" --top 6

echo; echo "== 3. training with it on $RANKS in-process ranks"
"$P" train --model gpt --ranks "$RANKS" --steps "$STEPS" --strategy "$RUN/plan-strategy.json" --save "$RUN/checkpoint" \
  --run-dir "$RUN" "$@"

echo; echo "== 4. the report"
"$P" report "$RUN"
