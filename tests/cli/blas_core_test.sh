#!/usr/bin/env bash
# The BLAS core a run uses, from the command line (kernels/blas_core.h):
#  1. when OpenBLAS picked kernels below this CPU's (PX_TEST_BLAS_PICKED
#     says it picked Prescott, as Debian's 0.3.21 does on a Xeon it does
#     not know), parallax runs again under the best core type for the CPU
#     and its log says so, naming the core that runs;
#  2. a user's OPENBLAS_CORETYPE is kept, and the log says that too.
#   blas_core_test.sh PARALLAX
set -euo pipefail
PX=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$work/text.txt"
RUN=(train --data "$work/text.txt" --block 16 --layers 1 --heads 1 --embd 8 --batch 2 --threads 1 --steps 1
     --eval-batches 1 --sample-tokens 0 --progress lines --no-predict)

env -u OPENBLAS_CORETYPE PX_TEST_BLAS_PICKED=Prescott "$PX" "${RUN[@]}" > "$work/picked.log" 2>&1 ||
  { cat "$work/picked.log"; fail "train after the re-run"; }
line=$(grep -o "BLAS .*" "$work/picked.log") || fail "no BLAS line"
echo "$line"
if grep -qE '^flags.* (avx|avx2|avx512f)( |$)' /proc/cpuinfo; then
  # "BLAS Cooperlake (OpenBLAS picked Prescott (SSE3) on a CPU with AVX-512 BF16; running Cooperlake's kernels)"
  chosen=$(sed -n "s/.*running \([A-Za-z]*\)'s kernels.*/\1/p" <<< "$line")
  [ -n "$chosen" ] || fail "the log does not say which kernels were chosen: $line"
  grep -q "OpenBLAS picked Prescott" <<< "$line" || fail "the log does not say what OpenBLAS picked: $line"
fi

OPENBLAS_CORETYPE=Haswell "$PX" "${RUN[@]}" > "$work/user.log" 2>&1 || { cat "$work/user.log"; fail "train"; }
grep -q "BLAS Haswell (OPENBLAS_CORETYPE=Haswell set in the environment, kept)" "$work/user.log" ||
  fail "the user's core type: $(grep -o 'BLAS .*' "$work/user.log")"
echo "ok"
