#!/usr/bin/env bash
# Runs every libFuzzer harness (fuzz/*_fuzzer.cc, built by `scripts/test.sh
# --fuzz` in build-asan/ with ASan+UBSan) from its checked-in corpus:
#   scripts/fuzz.sh [--seconds S | --runs N] [--jobs J] [NAME...]
# --seconds S: each harness for S seconds (default 30, what CI runs);
# --runs N:    each for N executions (docs/hardening.md records 1,000,000);
# --jobs J:    J harnesses at once (default 1; each is one process on one
#              core, so CI runs one per core).
# New inputs go to a scratch corpus, not into fuzz/corpus/; a crash, leak,
# timeout or out-of-memory stops with the input saved as
# fuzz-artifacts/<name>/crash-... (add it to fuzz/corpus/<name>/ with the fix:
# every build's tests replay it). Prints each harness's executions and rate.
set -euo pipefail
cd "$(dirname "$0")/.."
limit=(-max_total_time=30)
jobs=1
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) limit=(-max_total_time="$2"); shift ;;
    --runs) limit=(-runs="$2"); shift ;;
    --jobs) jobs="$2"; shift ;;
    *) names+=("$1") ;;
  esac
  shift
done
[ ${#names[@]} -gt 0 ] || names=(safetensors idx checkpoint_state strategy_json cluster_json text_corpus cli_numbers completion_request onnx)
export ASAN_OPTIONS="detect_leaks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
fuzz_one() {  # NAME: runs the harness; its one-line result goes to $scratch/NAME.result
  local name=$1 program="build-asan/fuzz/$1_fuzzer" dict=() start=$SECONDS runs
  mkdir -p "$scratch/$name" "fuzz-artifacts/$name"
  [ -f "fuzz/dict/$name.dict" ] && dict=(-dict="fuzz/dict/$name.dict")
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb: 2 GiB is a runaway allocation.
  if ! "$program" "${limit[@]}" "${dict[@]}" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
       -artifact_prefix="fuzz-artifacts/$name/" "$scratch/$name" "fuzz/corpus/$name" > "$scratch/$name.log" 2>&1; then
    { tail -60 "$scratch/$name.log"; echo "fuzz.sh: $name failed; the input is in fuzz-artifacts/$name/"; } \
      > "$scratch/$name.result"
    return 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$scratch/$name.log" | grep -o '[0-9]*$')
  echo "fuzz.sh: $name: $runs executions in $((SECONDS - start)) s ($(( runs / (SECONDS - start > 0 ? SECONDS - start : 1) )) /s), no crash, leak or hang" \
    > "$scratch/$name.result"
}
for name in "${names[@]}"; do
  [ -x "build-asan/fuzz/${name}_fuzzer" ] ||
    { echo "fuzz.sh: build-asan/fuzz/${name}_fuzzer is not built (run scripts/test.sh --fuzz)" >&2; exit 1; }
done
failed=0
running=0
for name in "${names[@]}"; do
  if [ "$running" -ge "$jobs" ]; then wait -n || failed=1; running=$((running - 1)); fi
  fuzz_one "$name" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do wait -n || failed=1; running=$((running - 1)); done
for name in "${names[@]}"; do cat "$scratch/$name.result"; done
[ "$failed" = 0 ] || { echo "fuzz.sh: a harness failed (above)" >&2; exit 1; }
