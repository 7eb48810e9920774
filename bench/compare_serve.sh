#!/usr/bin/env bash
# `parallax serve` under load, measured with `parallax bench serve` (the
# server in the benchmark's process, on gpt-small: 6 layers, 6 heads,
# n_embd 384, and GPT-2's context of 1024, which the workload's longest
# prompt and output fit whole). Every figure comes from runs in this
# invocation:
#
#  0. Unloaded: requests one at a time. Their median TTFT and TPOT set the
#     joint SLO (TTFT and TPOT each <= 5x the unloaded value) and 1 / mean
#     E2E the single-stream request rate R0 the sweeps are multiples of.
#  a. Iteration- vs request-level scheduling (--scheduler) over Poisson
#     rates of R0 x RATES, each scheduler swept from the highest rate down
#     until one meets the SLO for >= 90% of its requests (the rates below
#     it are not run: request-level needs rates far below R0, whose runs
#     are long); a run sends rate x 16 s of requests, at least 24 and at
#     most REQUESTS. Goodput under the SLO, and per scheduler the highest
#     rate at which >= 90% meet it; their ratio.
#  b. At a fixed --kv-memory (8 whole contexts), every request at once,
#     each asking for the rest of the context and ending at its drawn
#     output length (--ask-whole-context: a client that cannot know its
#     answer's length; a byte model has no end-of-text token): the peak of
#     sequences running together (/metrics' gauge parallax_requests_running,
#     polled every 20 ms) with paging against --reserve-max-tokens (blocks
#     for the whole max_tokens on admission, Orca's reservation); their
#     ratio.
#  c. Single-stream decode tokens/s (1 / median TPOT; a 16-byte prompt, 200
#     tokens): parallax against PyTorch (peers/torch/gpt_decode.py: the
#     explicit GPT of gpt_model.py with a preallocated KV cache, under
#     inference_mode, fp32, the same threads and the same weights); ratio.
#  d. At 2 x R0, 10% of requests carrying a prompt of the whole context
#     (less 8 bytes of output) against the same run without: p99 ITL of the
#     other requests, and p99 TTFT of the long prompts against the p99 TTFT
#     of the run without them.
#
# Workload (fixed): prompts uniform 16-200 bytes cut from the fortunes,
# outputs uniform 8-200 tokens, seed 1, --max-running 32, temperature 0.
#
#   bench/compare_serve.sh [--quick] [--checkpoint DIR] [--threads 2] [--build build] [--peers DIR]
#
# Without --checkpoint gpt-small is trained briefly first (16 steps; --quick
# 4): serving speed does not depend on what the weights learned. --quick:
# 16 requests per sweep point at R0 x (1, 4), fewer elsewhere. Each run
# holds /tmp/px-build.lock. Every run's --out JSON and log are kept in
# BUILD/bench-results/serve-<time>.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PEERS=${PX_PEERS:-$REPO/../shared/peers}
CHECKPOINT="" THREADS=2 QUICK=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --quick) QUICK=1; shift ;;
    --checkpoint) CHECKPOINT=$(cd "$2" && pwd); shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --peers) PEERS=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "error: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
require_parallax
[[ -f $PEERS/torch/gpt_decode.py ]] || { echo "error: peer not found at $PEERS/torch/gpt_decode.py (--peers DIR)" >&2; exit 1; }
TORCH_BLAS=/usr/lib/x86_64-linux-gnu/openblas-openmp
[[ -d $TORCH_BLAS ]] || { echo "error: $TORCH_BLAS missing: apt-get install libopenblas0-openmp" >&2; exit 1; }
make_results serve

if ((QUICK)); then
  TRAIN_STEPS=4 UNLOADED=4 REQUESTS=16 RATES="4 1 0.25" KV_REQUESTS=32 DECODE_REPS=2 LONG_REQUESTS=30
else
  TRAIN_STEPS=16 UNLOADED=8 REQUESTS=64 RATES="4 3 2 1.5 1 0.5 0.25 0.125 0.0625" KV_REQUESTS=64 DECODE_REPS=3 LONG_REQUESTS=80
fi

if [[ -z $CHECKPOINT ]]; then
  CHECKPOINT=$RESULTS/gpt-small
  echo "training gpt-small for $TRAIN_STEPS steps into $CHECKPOINT" >&2
  locked "$PX" train --model gpt --layers 6 --heads 6 --embd 384 --block 1024 --batch 2 --dropout 0 \
    --threads "$THREADS" --steps "$TRAIN_STEPS" --eval-every 0 --eval-batches 1 --sample-tokens 0 --progress lines \
    --no-predict --save "$CHECKPOINT" > "$RESULTS/train.log" 2>&1 ||
    { echo "error: training failed (see $RESULTS/train.log)" >&2; exit 1; }
fi
[[ -f $CHECKPOINT/state.json ]] || { echo "error: --checkpoint $CHECKPOINT has no state.json" >&2; exit 1; }
read -r LAYERS EMBD CONTEXT < <(jq -r '.config.gpt | "\(.n_layer) \(.n_embd) \(.block)"' "$CHECKPOINT/state.json")

WORKLOAD=(--prompt-bytes 16:200 --output-tokens 8:200 --seed 1 --max-running 32 --threads "$THREADS")
# One `bench serve` run: its JSON in $RESULTS/NAME.json (later flags win).
bench() {
  local name=$1; shift
  locked "$PX" bench serve --checkpoint "$CHECKPOINT" "${WORKLOAD[@]}" "$@" --out "$RESULTS/$name.json" \
    > "$RESULTS/$name.log" 2>&1 || { echo "error: bench serve ($name) failed (see $RESULTS/$name.log)" >&2; exit 1; }
  echo "$name: $(jq -r '.summary | "\(.successful_requests) ok, \(.failed_requests) failed, \(.duration_s * 100 | round / 100) s"' \
    "$RESULTS/$name.json")" >&2
}

bench unloaded --requests "$UNLOADED" --max-concurrency 1
read -r TTFT_SLO TPOT_SLO R0 < <(jq -r '.summary | "\(5 * .ttft.p50_ms) \(5 * .tpot.p50_ms) \(1000 / .e2e.mean_ms)"' \
  "$RESULTS/unloaded.json")
SLO="ttft:$TTFT_SLO,tpot:$TPOT_SLO"

for scheduler in iteration request; do
  for m in $RATES; do
    rate=$(jq -n "$m * $R0")
    requests=$(jq -n "[[($rate * 16 | round), 24] | max, $REQUESTS] | min")
    bench "a-$scheduler-$m" --scheduler "$scheduler" --rate "$rate" --requests "$requests" --slo "$SLO"
    met=$(jq -r '.summary.slo_fraction >= 0.9' "$RESULTS/a-$scheduler-$m.json")
    [[ $met == true ]] && break
  done
done

KV_BYTES=$((8 * CONTEXT * 2 * LAYERS * EMBD * 4))  # 8 whole contexts of fp32 keys and values
for mode in paging reserve; do
  flags=(--kv-memory "$KV_BYTES" --rate inf --requests "$KV_REQUESTS" --ask-whole-context --metrics-interval 0.02)
  [[ $mode == reserve ]] && flags+=(--reserve-max-tokens)
  bench "b-$mode" "${flags[@]}"
done

bench c-decode --requests "$DECODE_REPS" --max-concurrency 1 --prompt-bytes 16:16 --output-tokens 200:200
LD_LIBRARY_PATH=$TORCH_BLAS locked /usr/bin/python3 "$PEERS/torch/gpt_decode.py" --checkpoint "$CHECKPOINT" \
  --threads "$THREADS" --prompt-tokens 16 --tokens 200 --reps "$DECODE_REPS" --json "$RESULTS/c-torch.jsonl" \
  > "$RESULTS/c-torch.log" 2>&1 || { echo "error: the PyTorch peer failed (see $RESULTS/c-torch.log)" >&2; exit 1; }
echo "c-torch: done" >&2

# The long prompt alone: its TTFT's compute floor (a whole-context prefill).
bench d-floor --requests 3 --max-concurrency 1 --prompt-bytes $((CONTEXT - 8)):$((CONTEXT - 8)) --output-tokens 8:8
LONG_RATE=$(jq -n "2 * $R0")
bench d-long --rate "$LONG_RATE" --requests "$LONG_REQUESTS" --long-prompt-fraction 0.1
bench d-short --rate "$LONG_RATE" --requests "$LONG_REQUESTS"

python3 - "$RESULTS" "$RATES" "$R0" "$KV_BYTES" "$CONTEXT" <<'PY'
import json, sys
results, rates, r0, kv_bytes, context = sys.argv[1], sys.argv[2].split(), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
load = lambda name: json.load(open(f"{results}/{name}.json"))
unloaded = load("unloaded")["summary"]
print(f"unloaded ({unloaded['successful_requests']} requests one at a time): TTFT p50 {unloaded['ttft']['p50_ms']:.1f} ms, "
      f"TPOT p50 {unloaded['tpot']['p50_ms']:.2f} ms, E2E mean {unloaded['e2e']['mean_ms']:.0f} ms -> R0 {r0:.2f} req/s")
slo = load(f"a-iteration-{rates[0]}")["summary"]["slo"]
print(f"SLO: TTFT <= {slo['ttft_ms']:.1f} ms and TPOT <= {slo['tpot_ms']:.2f} ms (5x unloaded)\n")

print("(a) scheduling: goodput under the SLO (req/s) and the share of requests meeting it (-: not run, a")
print("    higher rate met the SLO already)")
print(f"{'rate':>14} {'iteration':>20} {'request':>20}")
import os
ran = lambda s, m: os.path.exists(f"{results}/a-{s}-{m}.json")
best = {}
for m in rates:
    cells = []
    for s in ("iteration", "request"):
        if not ran(s, m):
            cells.append("-")
            continue
        run = load(f"a-{s}-{m}")
        summary, rate = run["summary"], run["workload"]["rate"]
        cells.append(f"{summary['goodput']:6.2f} ({summary['slo_fraction'] * 100:3.0f}%, {summary['successful_requests']:2} req)")
        if summary["slo_fraction"] >= 0.9:
            best[s] = max(best.get(s, 0), rate)
    print(f"{float(m) * r0:6.2f} ({m:>6}xR0) {cells[0]:>20} {cells[1]:>20}")
for s in ("iteration", "request"):
    print(f"  highest rate with >= 90% meeting the SLO, {s}-level: "
          + (f"{best[s]:.2f} req/s" if s in best else "none of the swept rates"))
lowest = min(float(m) for m in rates) * r0
if "iteration" in best and "request" in best:
    print(f"  iteration / request: {best['iteration'] / best['request']:.2f}x")
elif "iteration" in best:  # request-level met it below the sweep, if at all: a lower bound
    print(f"  iteration / request: > {best['iteration'] / lowest:.2f}x (request-level met the SLO at none of the "
          f"swept rates, the lowest {lowest:.2f} req/s)")
else:
    print("  iteration / request: not defined (iteration-level met the SLO at none of the swept rates)")

paging, reserve = load("b-paging"), load("b-reserve")
peak = lambda r: r["server_peaks"]["running"]
print(f"\n(b) KV memory of {kv_bytes / 2**20:.1f} MiB (8 contexts of {context}), {paging['workload']['requests']} requests at once, "
      f"each asking for the rest of the context, --max-running 32: peak running sequences")
for name, r in (("paging", paging), ("--reserve-max-tokens", reserve)):
    p = r["server_peaks"]
    print(f"  {name:22} {p['running']:4}  (KV blocks used at most {p['kv_blocks_used']} of {p['kv_blocks_total']}, "
          f"{p['preemptions']} preemptions, {r['summary']['duration_s']:.1f} s)")
print(f"  paging / reservation: {peak(paging) / peak(reserve):.2f}x" if peak(reserve) else "  reservation ran none")

px = load("c-decode")["summary"]
torch = json.loads(open(f"{results}/c-torch.jsonl").read().splitlines()[-1])
px_rate = 1000 / px["tpot"]["p50_ms"]
print(f"\n(c) single-stream decode, 16-byte prompt, 200 tokens, {torch['threads']} threads, fp32 (1 / median TPOT)")
print(f"  parallax (through HTTP) {px_rate:7.1f} tok/s  (TTFT {px['ttft']['p50_ms']:.1f} ms)")
print(f"  PyTorch {torch['torch']:10} {torch['tokens_per_s']:7.1f} tok/s  (TTFT {torch['ttft_ms']:.1f} ms; "
      f"cached vs full forward logits within {torch['check_max_abs_diff']:.1e})")
print(f"  parallax / PyTorch: {px_rate / torch['tokens_per_s']:.2f}x")

long, short = load("d-long"), load("d-short")
lp, op, sp = long["long_prompts"], long["other_prompts"], short["summary"]
print(f"\n(d) {long['workload']['requests']} requests at {long['workload']['rate']:.2f} req/s, "
      f"{lp['successful_requests']} with a prompt of {context - 8} bytes, against the same run without")
print(f"  p99 ITL of the other requests: {op['itl']['p99_ms']:.1f} ms  (without long prompts {sp['itl']['p99_ms']:.1f} ms, "
      f"{op['itl']['p99_ms'] / sp['itl']['p99_ms']:.2f}x)")
print(f"  p99 TTFT of the long prompts:  {lp['ttft']['p99_ms']:.1f} ms  (p99 TTFT without long prompts "
      f"{sp['ttft']['p99_ms']:.1f} ms, {lp['ttft']['p99_ms'] / sp['ttft']['p99_ms']:.2f}x)")
floor = load("d-floor")["summary"]["ttft"]["p50_ms"]
print(f"  a long prompt alone (its prefill's floor): TTFT {floor:.1f} ms, {floor / sp['ttft']['p99_ms']:.2f}x the p99 "
      f"TTFT without long prompts; under load its p99 is {lp['ttft']['p99_ms'] / floor:.2f}x that floor")
failed = sum(load(n)["summary"]["failed_requests"] for n in
             ["unloaded", "b-paging", "b-reserve", "c-decode", "d-floor", "d-long", "d-short"]
             + [f"a-{s}-{m}" for s in ("iteration", "request") for m in rates if ran(s, m)])
print(f"\nfailed requests over every run: {failed}")
PY
