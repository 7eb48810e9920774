#!/usr/bin/env bash
# The GPU presets against published end-to-end training runs, two sets
# kept apart (docs/planner.md, "Published scale"):
#   development  bench/published_runs.json, the 19 runs the efficiency
#                model was revised against;
#   held-out     bench/published_heldout.json, frozen on 2026-11-30 before
#                any of it was simulated and scored once (its `scoring`
#                entry); from then on a regression check, not a claim.
# Each run is replayed by `parallax simulate` on its preset and node
# count and printed as predicted against published iteration time (and
# teraFLOP/s a GPU by its source's count), then per set the median and
# worst |error| and the signed median error per GPU type. The presets'
# efficiency constants name their sources in src/plan/presets.cc; none
# is fitted to either set.
#
#   bench/published_accuracy.sh [--set development|held-out|both] [--only ID] [--build build]
#   bench/published_accuracy.sh --held-out-commands
#   bench/published_accuracy.sh --set held-out --record-score
#
# --held-out-commands prints, without simulating anything, the `parallax
# simulate` command each held-out run maps to, with its published
# iteration seconds: the mapping, reviewable before scoring (issue 50).
# --record-score writes the held-out predictions into its `scoring` entry,
# once: a set already scored is refused (a later claim of accuracy needs
# another set frozen before scoring).
#
# tests/plan/published_scale_test.cc pins the development predictions as
# each run's `scored` entry (PX_UPDATE_GOLDEN=1 writes them);
# tests/plan/heldout_accuracy_test.sh holds the held-out set to its score.
#
# Simulation only, one core: each run holds /tmp/px-cpu.lock.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
SET=both
ONLY=
RECORD=
while [[ $# -gt 0 ]]; do
  case $1 in
    --set) SET=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --held-out-commands) HELD_OUT_COMMANDS=1; shift ;;
    --record-score) RECORD=1; shift ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $SET in development|held-out|both) ;; *) echo "error: --set '$SET': expected development, held-out or both" >&2; exit 2 ;; esac
if [[ -n $RECORD && $SET != held-out ]]; then echo "error: --record-score scores the held-out set: give --set held-out" >&2; exit 2; fi

# One line a run: set|id|simulate flags|published seconds|published TF/GPU or -|FLOPs by the source's count|GPUs|GPU.
runs() {
  python3 - "$REPO/bench/published_runs.json" "$REPO/bench/published_heldout.json" "$1" "$ONLY" <<'PY'
import json, sys
dev, held, which, only = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3], sys.argv[4]
def megatron_model_flops(r):  # training.py's num_floating_point_operations at f2e5db4, multi-head attention
    B, s, l, h, V = r["batch"], r["seq"], r["layers"], r["embd"], r["vocab"]
    return 12 * B * s * l * h * h * ((1 + 1 + s / h) + r["ffn"] / h + V / (2 * l * h))
def narayanan_hardware_flops(r):
    B, s, l, h, V = r["batch"], r["seq"], r["layers"], r["embd"], r["vocab"]
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
def foundry_model_flops(r):  # the benchmark README's mfu numerator: 3 x (6 N + attention) per sequence
    return r["batch"] * 3 * (2 * r["parameters"] * r["seq"] + r["layers"] * 4 * r["embd"] * r["seq"] ** 2)
GPU = {"dgx-a100": "A100", "dgx-h100": "H100"}
if which in ("development", "both"):
    S, V = 2048, 51200
    kernel = dev.get("attention_kernel", "flash")
    for r in dev["runs"]:
        if only and r["id"] != only:
            continue
        B, l, h = r["batch"], r["layers"], r["embd"]
        flops = narayanan_hardware_flops({"batch": B, "seq": S, "layers": l, "embd": h, "vocab": V})
        p = r["published"]
        seconds = p["iteration_seconds"] if "iteration_seconds" in p else flops / (p["tflops_per_gpu"] * 1e12 * r["gpus"])
        dp = r["gpus"] // (r["tp"] * r["pp"])
        flags = (f"--model gpt --layers {l} --heads {r['heads']} --embd {h} --block {S} --vocab {V} --batch {B} "
                 f"--mesh pp={r['pp']},dp={dp},tp={r['tp']} --micro-batches {B // dp} --recompute {r['recompute']} "
                 f"--cluster dgx-a100:{(r['gpus'] + 7) // 8} --attention-kernel {r.get('attention_kernel', kernel)}"
                 + (" --sequence-parallel" if r.get("sequence_parallel") else "")
                 + ("" if r.get("overlap", True) else " --no-overlap"))
        print(f"development|{r['id']}|{flags}|{seconds}|{p.get('tflops_per_gpu', '-')}|{flops}|{r['gpus']}|A100")
if which in ("held-out", "both"):
    count = {"megatron_model_flops": megatron_model_flops, "narayanan_hardware_flops": narayanan_hardware_flops}
    for r in held["runs"]:
        if only and r["id"] != only:
            continue
        assert r["ffn"] == 4 * r["embd"], f"{r['id']}: the simulator's GPT has an FFN of 4 x embd"
        p = r["published"]
        flops = count[p["flop_count"]](r) if "flop_count" in p else foundry_model_flops(r)
        seconds = p["iteration_seconds"] if "iteration_seconds" in p else flops / (p["tflops_per_gpu"] * 1e12 * r["gpus"])
        micro = r["batch"] // (r["dp"] * r["micro_batch"])
        # Gradient buckets as each framework cuts them (--bucket-mb counts
        # 4-byte elements): FSDP one flat parameter per wrapped transformer
        # block (llm-foundry wraps each block; its vectors are bucketed apart,
        # in fp32); Megatron-Core r0.8 max(40M, 1M x dp) parameters
        # (megatron/core/distributed/distributed_data_parallel.py at
        # core_r0.8.0); DeepSpeed's default reduce_bucket_size, 5e8 elements.
        bucket = {"llm_foundry": 12 * r["embd"] ** 2, "megatron_core_2024": max(40_000_000, 1_000_000 * r["dp"]),
                  "bigscience_bloom": 500_000_000}[r["source"]]
        # DeepSpeed's pipeline engine reduces gradients after the flush
        # (deepspeed/runtime/pipe/schedule.py, TrainSchedule: ReduceTiedGrads,
        # ReduceGrads, OptimizerStep after the last backward), not beside it.
        overlap = r.get("overlap", True) and r["source"] != "bigscience_bloom"
        # The attention kernel each framework ran: Megatron-Core r0.8's
        # TransformerEngine fused attention and llm-foundry's FlashAttention-2
        # (its README: "our models use Flash Attention"; flash-attn 2.4.2)
        # as flash; BLOOM's Megatron-DeepSpeed (2022) wrote the scores and ran
        # its fused scale-mask-softmax and dropout over them: standard.
        kernel = "standard" if r["source"] == "bigscience_bloom" else "flash"
        flags = (f"--model gpt --layers {r['layers']} --heads {r['heads']} --embd {r['embd']} --block {r['seq']} "
                 f"--vocab {r['vocab']} --batch {r['batch']} --mesh pp={r['pp']},dp={r['dp']},tp={r['tp']} "
                 f"--micro-batches {micro} --zero {r['zero']} --recompute {r['recompute']} "
                 f"--bucket-mb {bucket * 4 / 2**20:.2f} "
                 f"--cluster {r['cluster']}:{(r['gpus'] + 7) // 8} --attention-kernel {kernel}"
                 + (" --sequence-parallel" if r.get("sequence_parallel") else "")
                 + ("" if overlap else " --no-overlap"))
        tflops = p.get("tflops_per_gpu", "-")
        print(f"held-out|{r['id']}|{flags}|{seconds}|{tflops}|{flops}|{r['gpus']}|{GPU[r['cluster']]}")
PY
}

if [[ -n ${HELD_OUT_COMMANDS:-} ]]; then
  python3 -c "import json; h = json.load(open('$REPO/bench/published_heldout.json'))['frozen']; print(f\"# held-out set, frozen {h['date']}, scored: {h['scored']}\")"
  runs held-out | while IFS='|' read -r _ id flags published _; do
    printf '%s|parallax simulate %s|published %.3f s\n' "$id" "$flags" "$published"
  done
  exit 0
fi
if [[ -n $RECORD ]] && python3 -c "import json, sys; sys.exit(json.load(open('$REPO/bench/published_heldout.json'))['frozen']['scored'])"; then
  :
elif [[ -n $RECORD ]]; then
  echo "error: the held-out set is already scored (bench/published_heldout.json 'scoring'): it is scored once" >&2
  exit 1
fi
require_parallax
make_results published-accuracy

runs "$SET" > "$RESULTS/runs.txt"
printf '%-11s %-44s %5s %12s %12s %8s %10s %10s\n' set run gpus published_s predicted_s error pub_TF/GPU pred_TF/GPU
while IFS='|' read -r set id flags published tflops flops gpus gpu; do
  # shellcheck disable=SC2086
  flock /tmp/px-cpu.lock "$PX" simulate $flags > "$RESULTS/$id.txt"
  predicted=$(sed -n 's/^step \([0-9.]*\) s;.*/\1/p' "$RESULTS/$id.txt")
  python3 -c "
p, q, f, g = $published, $predicted, $flops, $gpus
print('%-11s %-44s %5d %12.3f %12.3f %+7.1f%% %10s %10.1f %s' % ('$set', '$id', g, p, q, 100 * (q / p - 1), '$tflops', f / (q * g) / 1e12, '$gpu'))"
done < "$RESULTS/runs.txt" | tee "$RESULTS/table.txt"

python3 - "$RESULTS/table.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
for name in ("development", "held-out"):
    of_set = [r for r in rows if r[0] == name]
    if not of_set:
        continue
    errors = [(abs(float(r[5].rstrip('%'))), r[1]) for r in of_set]
    worst = max(errors)
    by_gpu = {}
    for r in of_set:
        by_gpu.setdefault(r[8], []).append(float(r[5].rstrip('%')))
    signed = ", ".join(f"{gpu} {statistics.median(e):+.1f}% ({len(e)})" for gpu, e in sorted(by_gpu.items()))
    print(f"{name}: {len(errors)} runs: median |error| {statistics.median(e for e, _ in errors):.1f}%, "
          f"worst {worst[0]:.1f}% ({worst[1]}); signed median by GPU: {signed}")
PY

if [[ -n $RECORD ]]; then
  python3 - "$REPO/bench/published_heldout.json" "$RESULTS/table.txt" "$(git -C "$REPO" rev-parse --short HEAD)" <<'PY'
import datetime, json, sys
path, table, commit = sys.argv[1], sys.argv[2], sys.argv[3]
held = json.load(open(path))
predicted = {r[1]: float(r[4]) for r in (l.split() for l in open(table)) if r and r[0] == "held-out"}
missing = [r["id"] for r in held["runs"] if r["id"] not in predicted]
assert not missing, f"runs not scored: {missing}"
held["frozen"]["scored"] = True
held["scoring"] = {"date": datetime.date.today().isoformat(), "commit": commit,
                   "note": "scored once; from here on a regression check (issue 50)",
                   "predicted_seconds": {r["id"]: predicted[r["id"]] for r in held["runs"]}}
open(path, "w").write(json.dumps(held, indent=1) + "\n")
print(f"recorded the held-out score in {path}")
PY
fi
