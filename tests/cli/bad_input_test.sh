#!/usr/bin/env bash
# Bad input through the `parallax` command: each case must print exactly one
# line starting with "error:" that names the bad thing, exit non-zero, and
# leave no partial checkpoint. --help on every subcommand exits 0.
# usage: bad_input_test.sh PATH/TO/parallax
set -u
px="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0

# assert_error NAME FRAGMENT -- ARGS...: runs parallax ARGS, wants exit != 0,
# one stderr line "error: ..." containing FRAGMENT.
assert_error() {
  local name="$1" fragment="$2"; shift 3
  local err status
  err=$("$px" "$@" 2>&1 >/dev/null); status=$?
  if [ $status -ne 0 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && [[ "$err" == error:* ]] && [[ "$err" == *"$fragment"* ]]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); echo "FAIL $name: status $status, stderr: $err"
  fi
}
assert_true() {  # assert_true NAME CONDITION-COMMAND...
  local name="$1"; shift
  if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL $name"; fi
}

text="$work/text.txt"
for i in $(seq 1 400); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$text"
tiny=(--data "$text" --block 16 --layers 1 --heads 2 --embd 16 --batch 4 --threads 1 --progress lines --eval-batches 1 --sample-tokens 0)

assert_error unknown-model "resnet" -- train --model resnet
assert_error heads-divide "n_head=3" -- train "${tiny[@]}" --heads 3
assert_error zero-batch "batch size 0" -- train "${tiny[@]}" --batch 0
assert_error keep-last-zero "--keep-last 0" -- train "${tiny[@]}" --steps 2 --keep-last 0
assert_error inject-fault-mode "expected kill, hang, lost, moe-capacity or moe-expert" -- train "${tiny[@]}" --steps 2 --inject-fault 0:1:boom
assert_error min-ranks-above "--min-ranks 3" -- train "${tiny[@]}" --steps 2 --ranks 2 --min-ranks 3
# A wait's own timeout is the backstop after the watchdog's verdict (--timeout 2: by 2.4 s), never before it.
assert_error wait-timeout-races-verdict "--wait-timeout 2 s must be longer than 2.4 s" -- train "${tiny[@]}" --steps 2 --ranks 2 --timeout 2 --wait-timeout 2
assert_error wait-timeout-negative "--wait-timeout -1 s" -- train "${tiny[@]}" --steps 2 --ranks 2 --wait-timeout -1
# Found by fuzz/cli_numbers_fuzzer.cc: a flag given a value, numbers past their type.
assert_error flag-with-value "no-overlap" -- train "${tiny[@]}" --no-overlap=:24
assert_error mesh-size-overflow "from 1 to 2^20" -- train "${tiny[@]}" --mesh dp=99999999999
assert_error mesh-ranks-overflow "expected at most 2^20" -- train "${tiny[@]}" --mesh pp=1048576,dp=1048576
assert_error fault-step-overflow "RANK:STEP" -- train "${tiny[@]}" --inject-fault 1:99999999999999999999
assert_error launch-without-placeholder "{ranks}" -- launch --ranks 4 -- parallax train
assert_error launch-unrunnable "cannot run 'no-such-program'" -- launch --max-restarts 0 --run-dir "$work/launch" -- no-such-program
assert_error negative-lr "learning rate -0.1" -- train "${tiny[@]}" --lr -0.1
# A strategy whose parts do not combine is the job's error, not a rank's.
assert_error p3-with-clipping "error: P3 updates each layer" -- train "${tiny[@]}" --steps 2 --ranks 2 --p3-slice-kb 4 --grad-clip 1
assert_error compress-with-tp "error: strategy: gradient compression" -- train "${tiny[@]}" --steps 2 --ranks 2 --tp 2 --compress topk:0.1
assert_error missing-text "$work/nope.txt" -- train --data "$work/nope.txt" --steps 1
# ONNX models (docs/onnx.md): the loader's and the binding's named errors;
# in a build without ONNX (PX_ONNX=OFF, set by CMake), the refusal.
fixtures="$(dirname "$0")/../fixtures/onnx"
if [ "${PX_ONNX:-ON}" = OFF ]; then
  assert_error onnx-disabled "model '$fixtures/mlp.onnx': this parallax was built without ONNX support (-DPX_ONNX=OFF)" \
    -- train --model "$fixtures/mlp.onnx" --steps 1
else
  head -c 3000 "$fixtures/mlp.onnx" > "$work/truncated.onnx"
  assert_error onnx-missing "cannot open '$work/none.onnx'" -- train --model "$work/none.onnx" --steps 1
  assert_error onnx-truncated "is not a valid ONNX model" -- train --model "$work/truncated.onnx" --steps 1
  assert_error onnx-input-unknown "the model has no input 'pixels'" -- train --model "$fixtures/mlp.onnx" --steps 1 --input pixels=images
  assert_error onnx-input-role "input role 'pictures' is unknown" -- train --model "$fixtures/mlp.onnx" --steps 1 --input x=pictures
  assert_error onnx-loss-twice "computes its loss already" -- train --model "$fixtures/cnn.onnx" --steps 1 --loss cross_entropy
  assert_error onnx-mse-classifier "--loss mse: the first output" -- train --model "$fixtures/mlp.onnx" --steps 1 --loss mse
  assert_error onnx-loss-unknown "--loss: hinge not in {cross_entropy,mse}" -- train --model "$fixtures/mlp.onnx" --steps 1 --loss hinge
fi
assert_error onnx-flags-without-onnx "give --model FILE.onnx" -- train "${tiny[@]}" --steps 1 --loss cross_entropy
assert_error eval-nothing "give --checkpoint DIR, or --model FILE.onnx" -- eval
assert_error missing-fmnist "$work/no-dir" -- train --model mlp --data "$work/no-dir"
mkdir -p "$work/fmnist"
cp /usr/share/datasets/fashion-mnist/* "$work/fmnist/"
head -c 100000 /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz > "$work/fmnist/train-images-idx3-ubyte.gz"
assert_error truncated-fmnist "train-images-idx3-ubyte.gz" -- train --model mlp --data "$work/fmnist"
assert_error bad-config-saves-nothing "n_head=3" -- train "${tiny[@]}" --heads 3 --save "$work/never"
assert_true no-partial-checkpoint test ! -e "$work/never"

"$px" train "${tiny[@]}" --steps 2 --save "$work/ckpt" > /dev/null 2>&1
assert_true checkpoint-written test -f "$work/ckpt/model.safetensors"
cp -r "$work/ckpt" "$work/trunc"
size=$(stat -c %s "$work/trunc/model.safetensors")
truncate -s $((size / 2)) "$work/trunc/model.safetensors"
assert_error truncated-checkpoint "model.safetensors" -- eval --checkpoint "$work/trunc" --threads 1
cp -r "$work/ckpt" "$work/garbage"
printf 'not a safetensors file at all' > "$work/garbage/model.safetensors"
assert_error corrupt-checkpoint "model.safetensors" -- sample --checkpoint "$work/garbage" --tokens 5
cp -r "$work/ckpt" "$work/wider"
sed -i 's/"n_embd": 16/"n_embd": 32/' "$work/wider/state.json"
assert_error shape-mismatch "[256,16]" -- sample --checkpoint "$work/wider" --tokens 5
assert_error missing-checkpoint "$work/none" -- eval --checkpoint "$work/none"
assert_error resume-truncated "model.safetensors" -- train "${tiny[@]}" --steps 4 --resume "$work/trunc"
assert_error bad-flag-value "abc" -- train --steps abc
assert_error export-builtin "holds the built-in model 'gpt'" -- export --checkpoint "$work/ckpt" --onnx "$work/out.onnx"

for sub in train eval sample export "bench comm"; do
  # shellcheck disable=SC2086
  assert_true "help-$sub" "$px" $sub --help > /dev/null
done

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
