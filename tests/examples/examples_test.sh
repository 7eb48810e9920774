#!/usr/bin/env bash
# Every file in examples/ runs as examples/README.md says: each strategy
# trains the GPT it was written for (gpt-mini) on the ranks its mesh
# names, each cluster spec is planned for and simulated on, and the
# walkthrough's first steps (a run, its report, two runs compared) work;
# the ONNX export is planned by every search and its plan trains.
#
#   examples_test.sh PARALLAX EXAMPLES_DIR
set -euo pipefail
PX=$1
EX=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export XDG_CACHE_HOME=$WORK/cache
fail() { echo "FAIL: $*"; exit 1; }
QUICK=(--steps 3 --eval-batches 1 --sample-tokens 0 --progress lines --no-predict)

ranks_of() {  # the ranks a strategy's mesh names
  python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["mesh"]; import math; print(math.prod(a["size"] for a in m))' "$1"
}

count=0
for strategy in "$EX"/strategies/*.json; do
  name=$(basename "$strategy" .json)
  ranks=$(ranks_of "$strategy")
  echo "== strategy $name on $ranks ranks"
  "$PX" train --model gpt --ranks "$ranks" --strategy "$strategy" "${QUICK[@]}" --run-dir "$WORK/runs/$name" \
    > "$WORK/$name.txt" 2>&1 || { cat "$WORK/$name.txt"; fail "examples/strategies/$name.json did not train"; }
  grep -q "trained 3 steps" "$WORK/$name.txt" || { cat "$WORK/$name.txt"; fail "$name: no 'trained 3 steps'"; }
  python3 - "$WORK/runs/$name/run.json" "$strategy" <<'PY'
import json, sys
summary, strategy = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
# An example records no precision: it runs in the run's (--precision, fp32 here), which run.json records.
assert summary["strategy"] == {"precision": "fp32", **strategy}, \
    f"{sys.argv[2]}: the run ran another strategy: {summary['strategy']}"
# Sequence parallelism is read off the strategy's seeds (the GPT's residual
# stream, "embed" and each block's "*.c_proj.add_bias", split along the
# sequence), not off a flag: megatron_tp.json has it.
splits = any(s["placement"] == "S(1)" and (s["value"] == "embed" or s["value"].endswith(".c_proj.add_bias"))
             for s in strategy.get("seeds", []))
shown = summary["strategy_summary"]["sequence_parallel"]
assert shown == splits, f"{sys.argv[2]}: run.json says sequence_parallel={shown}, its seeds say {splits}"
PY
  count=$((count + 1))
done
[ "$count" -ge 5 ] || fail "expected at least 5 example strategies, found $count"

for cluster in "$EX"/clusters/*.json; do
  name=$(basename "$cluster" .json)
  echo "== cluster $name"
  "$PX" plan --model gpt --batch 64 --cluster "$cluster" --budget-s 5 --out "$WORK/$name-plan.json" > "$WORK/$name.txt" \
    || { cat "$WORK/$name.txt"; fail "plan on examples/clusters/$name.json"; }
  grep -q "^chose " "$WORK/$name.txt" || { cat "$WORK/$name.txt"; fail "$name: no choice"; }
  "$PX" simulate --model gpt --batch 64 --cluster "$cluster" --ranks "$(ranks_of "$WORK/$name-plan.json")" \
    --strategy "$WORK/$name-plan.json" > "$WORK/$name-sim.txt" \
    || { cat "$WORK/$name-sim.txt"; fail "simulate on examples/clusters/$name.json"; }
done

if [ "${PX_ONNX:-ON}" = OFF ]; then
  echo "SKIP: examples/onnx: this build has no ONNX (-DPX_ONNX=OFF)"
else
  echo "== onnx: a torch.onnx.export planned by every search, the plan trained on its ranks"
  ONNX=$EX/onnx/gpt.onnx
  CPU=$EX/clusters/cpu-4nodes-10gbe.json
  for method in auto grid layerwise mcmc alpa; do
    "$PX" plan --model "$ONNX" --batch 16 --ranks 4 --cluster "$CPU" --method "$method" --budget-s 10 \
      --out "$WORK/onnx-$method.json" > "$WORK/onnx-$method.txt" 2>&1 \
      || { cat "$WORK/onnx-$method.txt"; fail "plan --method $method on examples/onnx/gpt.onnx"; }
    grep -q "^chose " "$WORK/onnx-$method.txt" || { cat "$WORK/onnx-$method.txt"; fail "onnx $method: no choice"; }
  done
  # The searches place the imported GEMMs themselves: a tensor-parallel candidate each.
  grep -q "tp=2 layer-wise .*h.0.attn=" "$WORK/onnx-layerwise.txt" \
    || { cat "$WORK/onnx-layerwise.txt"; fail "the layer-wise search placed no block of the ONNX GPT"; }
  grep -q "tp=2 mcmc" "$WORK/onnx-mcmc.txt" || { cat "$WORK/onnx-mcmc.txt"; fail "the MCMC search placed nothing"; }
  grep -q "alpa search" "$WORK/onnx-alpa.txt" || { cat "$WORK/onnx-alpa.txt"; fail "alpa did not search the ONNX GPT"; }
  "$PX" train --model "$ONNX" --batch 16 --strategy "$WORK/onnx-mcmc.json" "${QUICK[@]}" > "$WORK/onnx-train.txt" 2>&1 \
    || { cat "$WORK/onnx-train.txt"; fail "the MCMC plan of examples/onnx/gpt.onnx did not train"; }
  grep -q "trained 3 steps" "$WORK/onnx-train.txt" || { cat "$WORK/onnx-train.txt"; fail "onnx: no 'trained 3 steps'"; }
fi

echo "== the walkthrough: two runs, one report each and their comparison"
"$PX" report "$WORK/runs/data_parallel" > /dev/null
[ -s "$WORK/runs/data_parallel/report.html" ] || fail "no report of the data-parallel run"
"$PX" report "$WORK/runs/data_parallel" "$WORK/runs/zero3" --out "$WORK/compare.html" > /dev/null
[ -s "$WORK/compare.html" ] || fail "no comparison"
echo "every example ran"
