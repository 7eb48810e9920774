#!/usr/bin/env bash
# Imported ONNX models under mpirun against one rank: `mpirun -np N
# parallax train --model FILE.onnx` (MPI transport) gives the single rank's
# per-step losses over 50 steps (PX_TEST_STEPS: fewer under the sanitizers)
# within 1e-5 relative, for the CNN fixture (loss in the graph; also with
# ZeRO-3), the GPT-style one (fused attention, on a generated text), the
# autoencoder (its mse attached by --loss mse, against the images) and the
# regression (an RMS norm, the labels cast to float, its mse in the graph).
#
#   mpi_onnx_test.sh PARALLAX MPIEXEC RANKS FIXTURES_DIR
set -euo pipefail
PARALLAX=$1 MPIEXEC=$2 RANKS=$3 FIXTURES=$4
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../../mpi_launch.sh"
MPIRUN+=(-np "$RANKS")

STEPS=${PX_TEST_STEPS:-50}
for i in $(seq 1 400); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$WORK/text.txt"
COMMON=(--steps "$STEPS" --optimizer adamw --lr 1e-3 --eval-batches 1 --threads 1 --progress lines --no-predict)
CNN=(train --model "$FIXTURES/cnn.onnx" --batch 16 "${COMMON[@]}")
CNN_ZERO3=("${CNN[@]}" --zero 3)
GPT=(train --model "$FIXTURES/gpt.onnx" --data "$WORK/text.txt" --batch 8 "${COMMON[@]}")
AUTOENCODER=(train --model "$FIXTURES/autoencoder.onnx" --loss mse --batch 16 "${COMMON[@]}")
REGRESSION=(train --model "$FIXTURES/regression.onnx" --batch 16 "${COMMON[@]}")

for job in CNN CNN_ZERO3 GPT AUTOENCODER REGRESSION; do
  declare -n args=$job
  "$PARALLAX" "${args[@]}" --metrics "$WORK/$job-1.jsonl" > "$WORK/$job-1.log"
  "${MPIRUN[@]}" "$PARALLAX" "${args[@]}" --metrics "$WORK/$job-mpi.jsonl" > "$WORK/$job-mpi.log"
  grep -q "$RANKS ranks, mesh {dp:$RANKS} (mpi)" "$WORK/$job-mpi.log" ||
    { echo "FAIL: the MPI job did not run $RANKS MPI ranks:"; cat "$WORK/$job-mpi.log"; exit 1; }
  python3 "$(dirname "${BASH_SOURCE[0]}")/../../parallel/compare_losses.py" "$WORK/$job-1.jsonl" "$WORK/$job-mpi.jsonl" \
    "$job at $RANKS MPI ranks"
done
echo "imported ONNX models at $RANKS MPI ranks match one rank"
