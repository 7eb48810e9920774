#!/usr/bin/env bash
# Data parallelism under mpirun against one rank: `mpirun -np N parallax
# train` (MPI transport, chosen automatically) must give the single rank's
# per-step losses over 50 steps (PX_TEST_STEPS: fewer under the sanitizers,
# which run the same code 3-10x slower), within 1e-5 relative, for GPT (with dropout,
# also with ZeRO-1, -2 and -3; at 4 ranks also dp=2 x tp=2, with sequence
# parallelism and with ZeRO-1; context parallelism at cp=N and at 4 ranks
# also dp=2 x cp=2 with ZeRO-2; a mixture of experts with a capacity), the CNN (also with ZeRO-3) and the MLP
# over epochs with a partial last batch; and a
# checkpoint every MPI process wrote its shards of halfway must resume
# in-process at another rank count and strategy with the same losses.
# Every run passes --no-predict: the prediction at a run's end is tested
# elsewhere (tests/cli/calibrate_test.sh, tests/hosts/), and its host probe
# took about 7 s a run under ASan.
#
#   mpi_equivalence_test.sh PARALLAX MPIEXEC RANKS
set -euo pipefail
PARALLAX=$1 MPIEXEC=$2 RANKS=$3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
source "$(dirname "${BASH_SOURCE[0]}")/../mpi_launch.sh"
MPIRUN+=(-np "$RANKS")


STEPS=${PX_TEST_STEPS:-50}
HALF=$((STEPS / 2))
GPT=(train --model gpt --layers 2 --heads 2 --embd 32 --block 32 --batch 8 --steps $STEPS --dropout 0.1
     --eval-every 0 --eval-batches 2 --sample-tokens 0 --threads 1 --progress lines --no-predict)
CNN=(train --model cnn --batch 16 --steps $STEPS --eval-batches 1 --threads 1 --progress lines --no-predict)

compare() {  # compare REFERENCE CANDIDATE WHAT
  python3 "$(dirname "${BASH_SOURCE[0]}")/compare_losses.py" "$@"
}

for job in GPT CNN; do
  declare -n args=$job
  "$PARALLAX" "${args[@]}" --metrics "$WORK/$job-1.jsonl" > "$WORK/$job-1.log"
  "${MPIRUN[@]}" "$PARALLAX" "${args[@]}" --metrics "$WORK/$job-mpi.jsonl" > "$WORK/$job-mpi.log"
  grep -q "$RANKS ranks, mesh {dp:$RANKS} (mpi)" "$WORK/$job-mpi.log" ||
    { echo "FAIL: the MPI job did not run $RANKS MPI ranks:"; cat "$WORK/$job-mpi.log"; exit 1; }
  compare "$WORK/$job-1.jsonl" "$WORK/$job-mpi.jsonl" "$job at $RANKS MPI ranks"
done

# A mixture of experts routed with a capacity: every MPI rank gathers the
# router logits and drops what one rank drops (uneven rows: the in-process
# tests/parallel/moe_test.cc at 3 ranks).
MOE=("${GPT[@]}" --moe-experts 4 --moe-top-k 2 --capacity-factor 1.0)
"$PARALLAX" "${MOE[@]}" --metrics "$WORK/MOE-1.jsonl" > "$WORK/MOE-1.log"
"${MPIRUN[@]}" "$PARALLAX" "${MOE[@]}" --metrics "$WORK/MOE-mpi.jsonl" > "$WORK/MOE-mpi.log"
compare "$WORK/MOE-1.jsonl" "$WORK/MOE-mpi.jsonl" "an MoE GPT with a capacity at $RANKS MPI ranks"

# Expert parallelism: the 4 experts spread over every MPI rank (at 3 ranks
# blocks of 2, 1 and 1), each rank's tokens routed to them by the routed
# all-to-all-v and back, against one rank's dropless run.
DROPLESS=("${GPT[@]}" --moe-experts 4 --moe-top-k 2)
"$PARALLAX" "${DROPLESS[@]}" --metrics "$WORK/EP-1.jsonl" > "$WORK/EP-1.log"
"${MPIRUN[@]}" "$PARALLAX" "${DROPLESS[@]}" --ep "$RANKS" --metrics "$WORK/EP-mpi.jsonl" > "$WORK/EP-mpi.log"
grep -q "ep:$RANKS" "$WORK/EP-mpi.log" ||
  { echo "FAIL: the MPI job did not run an expert axis of $RANKS ranks:"; cat "$WORK/EP-mpi.log"; exit 1; }
compare "$WORK/EP-1.jsonl" "$WORK/EP-mpi.jsonl" "an MoE GPT at --ep $RANKS over $RANKS MPI ranks"
# With ZeRO-3: the other weights sharded over every rank, each expert rank's own whole.
"${MPIRUN[@]}" "$PARALLAX" "${DROPLESS[@]}" --ep "$RANKS" --zero 3 --metrics "$WORK/EPZ-mpi.jsonl" > "$WORK/EPZ-mpi.log"
compare "$WORK/EP-1.jsonl" "$WORK/EPZ-mpi.jsonl" "an MoE GPT at --ep $RANKS with ZeRO-3 over $RANKS MPI ranks"
# Two micro-batches interleaved, each one's exchanges on the expert axis'
# progress thread (its own MPI communicator) while the other computes.
OVERLAP=("${DROPLESS[@]}" --moe-balance bias --micro-batches 2)
"$PARALLAX" "${OVERLAP[@]}" --metrics "$WORK/EPO-1.jsonl" > "$WORK/EPO-1.log"
"${MPIRUN[@]}" "$PARALLAX" "${OVERLAP[@]}" --ep "$RANKS" --overlap-experts --metrics "$WORK/EPO-mpi.jsonl" \
  > "$WORK/EPO-mpi.log"
compare "$WORK/EPO-1.jsonl" "$WORK/EPO-mpi.jsonl" "an MoE GPT at --ep $RANKS, exchanges overlapped, over $RANKS MPI ranks"

# An epoch's partial last batch: the MLP over 100 images in batches of 7
# (14 batches and one of 2 rows an epoch), 2 epochs, as one rank does.
python3 "$(dirname "${BASH_SOURCE[0]}")/../testing/fashion_subset.py" "$WORK/fashion" 100 50
MLP=(train --model mlp --data "$WORK/fashion" --batch 7 --epochs 2 --eval-batches 1 --threads 1 --progress lines
     --no-predict)
"$PARALLAX" "${MLP[@]}" --metrics "$WORK/MLP-1.jsonl" > "$WORK/MLP-1.log"
"${MPIRUN[@]}" "$PARALLAX" "${MLP[@]}" --metrics "$WORK/MLP-mpi.jsonl" > "$WORK/MLP-mpi.log"
grep -q "30 steps of batch 7" "$WORK/MLP-mpi.log" ||
  { echo "FAIL: the MLP did not run 2 epochs of 15 batches:"; cat "$WORK/MLP-mpi.log"; exit 1; }
compare "$WORK/MLP-1.jsonl" "$WORK/MLP-mpi.jsonl" "MLP with a partial last batch at $RANKS MPI ranks"

# ZeRO-1, -2 and -3 under mpirun: reduce-scatter, sharded optimizer state
# (and sharded gradients), parameter allgather (ZeRO-3: before each use, the
# parameters stored sharded).
for stage in 1 2 3; do
  "${MPIRUN[@]}" "$PARALLAX" "${GPT[@]}" --zero $stage --metrics "$WORK/GPT-zero$stage.jsonl" > "$WORK/GPT-zero$stage.log"
  grep -q "memory per rank (ZeRO-$stage" "$WORK/GPT-zero$stage.log" ||
    { echo "FAIL: ZeRO-$stage was not on:"; cat "$WORK/GPT-zero$stage.log"; exit 1; }
  compare "$WORK/GPT-1.jsonl" "$WORK/GPT-zero$stage.jsonl" "GPT with ZeRO-$stage at $RANKS MPI ranks"
done

# Megatron tensor parallelism across MPI processes: dp=2 x tp=2 (tp groups
# consecutive ranks), with sequence parallelism and with ZeRO-1 over dp.
if [ "$RANKS" = 4 ]; then
  for extra in "" "--sequence-parallel" "--zero 1"; do
    "${MPIRUN[@]}" "$PARALLAX" "${GPT[@]}" --mesh dp=2,tp=2 $extra --metrics "$WORK/GPT-tp.jsonl" > "$WORK/GPT-tp.log"
    grep -q "4 ranks, mesh {dp:2, tp:2} (mpi)" "$WORK/GPT-tp.log" ||
      { echo "FAIL: the MPI job did not run mesh dp=2 x tp=2:"; cat "$WORK/GPT-tp.log"; exit 1; }
    compare "$WORK/GPT-1.jsonl" "$WORK/GPT-tp.jsonl" "GPT at dp=2 x tp=2 $extra under MPI"
  done
fi

# Context parallelism across MPI processes: each sequence split over the
# cp ranks by the balanced ring (key/value blocks sent between the
# processes); at 4 ranks also dp=2 x cp=2 with ZeRO-2 sharded over the
# data x context ranks.
cp_case() {  # NAME MESH FLAGS...
  local name=$1 mesh=$2
  shift 2
  "${MPIRUN[@]}" "$PARALLAX" "${GPT[@]}" "$@" --metrics "$WORK/GPT-$name.jsonl" > "$WORK/GPT-$name.log"
  grep -q "$RANKS ranks, mesh $mesh (mpi)" "$WORK/GPT-$name.log" ||
    { echo "FAIL: the MPI job did not run mesh $mesh:"; cat "$WORK/GPT-$name.log"; exit 1; }
  compare "$WORK/GPT-1.jsonl" "$WORK/GPT-$name.jsonl" "GPT at $mesh under MPI"
}
cp_case cp "{dp:1, cp:$RANKS}" --cp "$RANKS"
if [ "$RANKS" = 4 ]; then cp_case dpcp "{dp:2, cp:2}" --mesh dp=2,cp=2 --zero 2; fi

# ZeRO-3 on the CNN: convolution weights gathered before use and freed.
"${MPIRUN[@]}" "$PARALLAX" "${CNN[@]}" --zero 3 --metrics "$WORK/CNN-zero3.jsonl" > "$WORK/CNN-zero3.log"
compare "$WORK/CNN-1.jsonl" "$WORK/CNN-zero3.jsonl" "CNN with ZeRO-3 at $RANKS MPI ranks"

# Saved at N MPI ranks (ZeRO-1, and at 4 ranks dp=2 x tp=2: every process
# writes its own shard file into the directory the lead staged), resumed
# at 3 in-process ranks: the resumed steps match the uninterrupted
# single-rank run.
SAVE=(--zero 1) SAVE_MESH="{dp:$RANKS}"
if [ "$RANKS" = 4 ]; then SAVE=(--zero 1 --mesh dp=2,tp=2) SAVE_MESH="{dp:2, tp:2}"; fi
"${MPIRUN[@]}" "$PARALLAX" "${GPT[@]}" "${SAVE[@]}" --stop-after $HALF --save "$WORK/ckpt" > /dev/null
shards=$(ls "$WORK/ckpt/shards" | wc -l)
[ "$shards" = "$RANKS" ] || { echo "FAIL: $shards shard files, expected one per rank:"; ls -R "$WORK"; exit 1; }
! ls -d "$WORK"/ckpt.tmp.* 2> /dev/null || { echo "FAIL: a staging directory was left behind"; exit 1; }
"$PARALLAX" "${GPT[@]}" --resume "$WORK/ckpt" --ranks 3 --metrics "$WORK/resumed.jsonl" > "$WORK/resumed.log"
grep -qF "saved at $RANKS ranks, mesh $SAVE_MESH; continuing at 3 ranks" "$WORK/resumed.log" ||
  { echo "FAIL: resume did not report the rank change:"; cat "$WORK/resumed.log"; exit 1; }
python3 - "$WORK/GPT-1.jsonl" "$WORK/resumed.jsonl" "$HALF" "$STEPS" <<'PY'
import json, sys
rows = lambda p: {j["step"]: j["train_loss"] for j in map(json.loads, open(p)) if "train_loss" in j}
ref, got = rows(sys.argv[1]), rows(sys.argv[2])
half, total = int(sys.argv[3]), int(sys.argv[4])
steps = sorted(got)
if steps != list(range(half + 1, total + 1)):
    sys.exit(f"FAIL resume: resumed steps {steps[:3]}..{steps[-3:]}, expected {half + 1}..{total}")
worst = max(abs(ref[s] - got[s]) / abs(ref[s]) for s in steps)
print(f"resume at 3 ranks from an MPI checkpoint: worst relative difference {worst:.2e}")
if worst > 1e-5:
    sys.exit(f"FAIL resume: {worst:.2e} > 1e-5")
PY
echo PASS
