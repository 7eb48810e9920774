#!/usr/bin/env bash
# Attention forward + backward: parallax's tiled kernels (px_bench_attention,
# kernels/attention.h: only out and lse kept, scores made again in backward)
# against PyTorch's explicit attention (bench/peers/torch_attention.py, the
# attention of gpt_model.py: the (B, H, T, T) probabilities kept), fp32 and
# bf16 (parallax: bf16 operands, fp32 accumulation; PyTorch: CPU autocast),
# at T = 128, 256, 512, 1024, 2048 with B = 8, H = 6, D = 64, one thread
# by default. Per row: each side's forward and backward ms, the rate
# counting only unmasked FLOPs, parallax's rate as a fraction of the GEMM
# rate of its precision measured in the same process (sgemm; oneDNN bf16),
# peak resident growth of each process over its timed runs, parallax's
# time over PyTorch's, and parallax's error against the double reference.
# PyTorch runs on OpenBLAS (peers/torch/blas_env.sh) with the kernel set
# parallax runs (OPENBLAS_CORETYPE; kernels/blas_core.h).
#
#   bench/compare_attention.sh [--threads 1] [--lengths "128 256 512 1024 2048"] [--precisions "fp32 bf16"]
#                              [--batch 8] [--build build] [--peers DIR]
#
# Each run holds /tmp/px-build.lock. JSON lines in BUILD/bench-results/attention-<time>.
set -euo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
PEERS=${PX_PEERS:-$REPO/../shared/peers}
THREADS=1 LENGTHS="128 256 512 1024 2048" PRECISIONS="fp32 bf16" BATCH=8
while [[ $# -gt 0 ]]; do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --lengths) LENGTHS=$2; shift 2 ;;
    --precisions) PRECISIONS=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --peers) PEERS=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "error: unknown option $1" >&2; usage 2 ;;
  esac
done
BENCH=$BUILD/bench/px_bench_attention
[[ -x $BENCH ]] || { echo "error: $BENCH not built" >&2; exit 1; }
[[ -f $PEERS/torch/blas_env.sh ]] || { echo "error: $PEERS/torch/blas_env.sh not found" >&2; exit 1; }
make_results attention
# The OpenBLAS kernel set parallax runs (the benchmark programs choose it
# as the command line does), for PyTorch's OpenBLAS too.
CORE=$(locked "$BENCH" --T 1 --B 1 --H 1 --D 8 --reps 0 | python3 -c 'import json, sys; print(json.load(sys.stdin)["blas_core"])')
echo "OpenBLAS kernels: $CORE (parallax and PyTorch)" | tee "$RESULTS/blas.txt"

printf '%-5s %-5s | %9s %9s %7s %6s %8s | %9s %9s %7s %8s | %6s %8s\n' T prec \
  "px fwd" "px bwd" GF/s "of GEMM" "px MiB" "pt fwd" "pt bwd" GF/s "pt MiB" "px/pt" "px err"
for precision in $PRECISIONS; do
  for T in $LENGTHS; do
    args=(--T "$T" --B "$BATCH" --H 6 --D 64 --precision "$precision" --threads "$THREADS" --reps 3)
    px=$(locked "$BENCH" "${args[@]}")
    echo "$px" >> "$RESULTS/parallax.jsonl"
    pt=$( (source "$PEERS/torch/blas_env.sh"; export OPENBLAS_CORETYPE=$CORE; locked "$PY" "$REPO/bench/peers/torch_attention.py" "${args[@]}") )
    echo "$pt" >> "$RESULTS/torch.jsonl"
    python3 - "$px" "$pt" <<'PY'
import json, sys
px, pt = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print("%-5d %-5s | %9.1f %9.1f %7.1f %6.2f %8.0f | %9.1f %9.1f %7.1f %8.0f | %6.2f %8.1e" % (
    px["T"], px["precision"], px["forward_ms"], px["backward_ms"], px["fwd_bwd_gflops"], px["fwd_bwd_of_gemm"],
    px["peak_rss_growth_mib"], pt["forward_ms"], pt["backward_ms"], pt["fwd_bwd_gflops"], pt["peak_rss_growth_mib"],
    (px["forward_ms"] + px["backward_ms"]) / (pt["forward_ms"] + pt["backward_ms"]),
    max(px["out_rel_error"], px["grad_rel_error"])))
PY
  done
done
echo "(GF/s: unmasked FLOPs, 12·D per score entry; of GEMM: over the GEMM rate of the precision, same process)"
