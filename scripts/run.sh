#!/usr/bin/env bash
# The main job: set up, build, and train the GPT (gpt-mini: 4 layers, 4 heads,
# 128 wide, context 128) on the fortunes corpus for about five minutes on two
# cores, evaluating as it goes and printing a generated sample at the end.
# Extra arguments go to `parallax train` (see `parallax train --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh parallax
mkdir -p runs
exec ./build/src/cli/parallax train --model gpt --threads 2 --save runs/gpt-mini \
  --metrics runs/gpt-mini.jsonl "$@"
