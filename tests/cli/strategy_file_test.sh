#!/usr/bin/env bash
# A strategy is a value a user can save and run: `parallax lower
# --print-strategy` writes the strategy the flags describe as JSON, and
# `parallax train --strategy FILE` runs it. The file must lower to the very
# Program the flags lower to, and train to the same per-step losses, bitwise
# (ZeRO-2 with micro-batches, and top-k compression whose SGD momentum moves
# into the ranks). A file names its ranks: train and lower start them
# without --ranks. `parallax lower` shows every collective of ZeRO-3. A
# file records its precision: train runs in it (a --precision that says
# otherwise is a named error), and eval and sample take --precision too.
# usage: strategy_file_test.sh PATH/TO/parallax
set -euo pipefail
px="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

text="$work/text.txt"
for i in $(seq 1 400); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$text"
gpt=(--model gpt --block 16 --layers 1 --heads 2 --embd 16 --batch 8 --dropout 0.1)
cnn=(--model cnn --batch 16)
run=(--steps 6 --threads 1 --progress lines --eval-every 0 --eval-batches 1)

check() {  # check NAME MODEL-AND-STRATEGY-FLAGS... -- TRAIN-ONLY-FLAGS...
  local name=$1; shift
  local flags=() extra=()
  while [[ $1 != -- ]]; do flags+=("$1"); shift; done
  shift
  extra=("$@")
  "$px" lower "${flags[@]}" --print-strategy > "$work/$name.json"
  "$px" lower "${flags[@]}" --rank 1 > "$work/$name.flags.program"
  "$px" lower "${flags[@]}" --strategy "$work/$name.json" --rank 1 > "$work/$name.file.program"
  cmp -s "$work/$name.flags.program" "$work/$name.file.program" ||
    fail "$name: the strategy file lowers to another Program than its flags: $(diff "$work/$name.flags.program" "$work/$name.file.program" | head -5)"
  "$px" train "${flags[@]}" "${run[@]}" "${extra[@]}" --metrics "$work/$name.flags.jsonl" > /dev/null
  "$px" train "${flags[@]}" "${run[@]}" "${extra[@]}" --strategy "$work/$name.json" --metrics "$work/$name.file.jsonl" > /dev/null
  grep -o '"train_loss":[^,}]*' "$work/$name.flags.jsonl" > "$work/$name.flags.losses"
  grep -o '"train_loss":[^,}]*' "$work/$name.file.jsonl" > "$work/$name.file.losses"
  [[ $(wc -l < "$work/$name.flags.losses") -eq 6 ]] || fail "$name: expected 6 losses, got $(cat "$work/$name.flags.losses")"
  cmp -s "$work/$name.flags.losses" "$work/$name.file.losses" ||
    fail "$name: --strategy FILE trained to other losses than the flags: $(paste "$work/$name.flags.losses" "$work/$name.file.losses" | head -3)"
  echo "$name: the strategy file lowers and trains as its flags"
}

check zero2 "${gpt[@]}" --ranks 2 --zero 2 --accumulation 2 --bucket-mb 0.01 -- --data "$text"
check topk-momentum "${cnn[@]}" --ranks 2 --compress topk:0.1 -- --optimizer sgd --momentum 0.9
grep -q '"local_momentum": 0.9' "$work/topk-momentum.json" ||
  fail "the printed top-k strategy does not carry SGD's momentum into the ranks: $(cat "$work/topk-momentum.json")"

# ZeRO-3's Program names its collectives: gathers before use, reduce-scatters, the loss and norm.
"$px" lower "${gpt[@]}" --ranks 2 --zero 3 --rank 1 > "$work/zero3.program"
for want in "allgather dp param.shard" "reduce_scatter dp sum grad.bucket" "allreduce dp sum loss" "allreduce dp sum norm"; do
  grep -q "$want" "$work/zero3.program" || fail "parallax lower --zero 3 shows no '$want'"
done
echo "parallax lower --zero 3 shows its collectives"

# --cost ends the Program with what the golden files end with: bytes per axis and kind, the peak, a step time.
"$px" lower "${gpt[@]}" --ranks 2 --zero 3 --rank 1 --cost > "$work/zero3.cost"
cmp -s <(head -n "$(wc -l < "$work/zero3.program")" "$work/zero3.cost") "$work/zero3.program" ||
  fail "parallax lower --cost changed the Program it prints"
for want in "cost: rank 1 of mesh {dp:2}" "cost: bytes dp allgather" "cost: bytes dp reduce_scatter" "cost: liveness peak" "cost: step"; do
  grep -q "^$want" "$work/zero3.cost" || fail "parallax lower --cost shows no '$want': $(tail -6 "$work/zero3.cost")"
done
echo "parallax lower --cost ends with the rank's cost"

# A strategy file names its ranks: without --ranks, train starts them as
# in-process ranks, to the same losses as the flags' run (zero2 above), and
# lower prints any of them; a --ranks that disagrees is a named error.
two=("${gpt[@]}" --zero 2 --accumulation 2 --bucket-mb 0.01)
"$px" train "${two[@]}" "${run[@]}" --data "$text" --strategy "$work/zero2.json" --metrics "$work/named.jsonl" \
  > "$work/named.txt" || { cat "$work/named.txt"; fail "--strategy FILE without --ranks did not train"; }
grep -o '"train_loss":[^,}]*' "$work/named.jsonl" > "$work/named.losses"
cmp -s "$work/zero2.flags.losses" "$work/named.losses" ||
  fail "--strategy FILE without --ranks trained to other losses than --ranks 2: $(paste "$work/zero2.flags.losses" "$work/named.losses" | head -3)"
"$px" lower "${two[@]}" --strategy "$work/zero2.json" --rank 1 | cmp -s - "$work/zero2.file.program" ||
  fail "lower --strategy FILE --rank 1 without --ranks printed another Program"
if "$px" train "${two[@]}" "${run[@]}" --data "$text" --strategy "$work/zero2.json" --ranks 1 > "$work/one.txt" 2>&1; then
  fail "--ranks 1 ran a strategy of 2 ranks"
fi
grep -q "has mesh {dp:2} of 2 ranks; this job has 1" "$work/one.txt" || { cat "$work/one.txt"; fail "no named error for --ranks 1"; }
echo "a strategy file starts its ranks without --ranks; --ranks 1 against it is refused"

# The precision a strategy file records is the run's.
"$px" lower "${gpt[@]}" --ranks 2 --print-strategy > "$work/fp32.json"
grep -q '"precision": "fp32"' "$work/fp32.json" || fail "lower --print-strategy records no fp32: $(cat "$work/fp32.json")"
if grep -q '^flags.* avx512_bf16' /proc/cpuinfo; then
  "$px" lower "${gpt[@]}" --ranks 2 --precision bf16 --print-strategy > "$work/bf16.json"
  grep -q '"precision": "bf16"' "$work/bf16.json" || fail "lower --precision bf16 records no bf16"
  "$px" train "${gpt[@]}" "${run[@]}" --data "$text" --strategy "$work/bf16.json" --metrics "$work/bf16.file.jsonl" \
    --save "$work/bf16.ckpt" > /dev/null
  "$px" train "${gpt[@]}" "${run[@]}" --data "$text" --ranks 2 --precision bf16 --metrics "$work/bf16.flags.jsonl" \
    > /dev/null
  grep -o '"train_loss":[^,}]*' "$work/bf16.file.jsonl" > "$work/bf16.file.losses"
  grep -o '"train_loss":[^,}]*' "$work/bf16.flags.jsonl" > "$work/bf16.flags.losses"
  cmp -s "$work/bf16.file.losses" "$work/bf16.flags.losses" ||
    fail "a bf16 strategy file trained to other losses than --precision bf16: $(paste "$work/bf16.file.losses" "$work/bf16.flags.losses" | head -3)"
  "$px" train "${gpt[@]}" "${run[@]}" --data "$text" --strategy "$work/fp32.json" --metrics "$work/fp32.file.jsonl" > /dev/null
  grep -o '"train_loss":[^,}]*' "$work/fp32.file.jsonl" > "$work/fp32.file.losses"
  if cmp -s "$work/bf16.file.losses" "$work/fp32.file.losses"; then fail "the bf16 strategy file trained in fp32"; fi
  if "$px" train "${gpt[@]}" "${run[@]}" --data "$text" --strategy "$work/bf16.json" --precision fp32 > "$work/clash.txt" 2>&1; then
    fail "--precision fp32 ran a bf16 strategy file"
  fi
  grep -q "precision fp32 and strategy '$work/bf16.json' (precision bf16) disagree" "$work/clash.txt" ||
    { cat "$work/clash.txt"; fail "no named error for --precision against the file's"; }
  "$px" eval --checkpoint "$work/bf16.ckpt" --precision bf16 --batch 8 --eval-batches 1 | grep -q "^val_loss" ||
    fail "eval --precision bf16"
  "$px" sample --checkpoint "$work/bf16.ckpt" --precision bf16 --tokens 5 > /dev/null || fail "sample --precision bf16"
  echo "a strategy file's precision is the run's; --precision against it is refused; eval and sample take it"
else
  if "$px" train "${gpt[@]}" "${run[@]}" --data "$text" --precision bf16 > "$work/nobf16.txt" 2>&1; then fail "--precision bf16 trained without AVX512_BF16"; fi
  grep -q "AVX512_BF16" "$work/nobf16.txt" || { cat "$work/nobf16.txt"; fail "no named error for bf16"; }
fi
