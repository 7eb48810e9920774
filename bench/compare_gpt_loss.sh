#!/usr/bin/env bash
# GPT validation loss, parallax vs PyTorch at equal steps (see compare_gpt_loss.py).
#   bench/compare_gpt_loss.sh [--quick] [--steps 1000] [--build build-bench] [...]
# Runs /usr/bin/python3 (Debian's, with torch) with PyTorch pinned to OpenBLAS;
# all options go to compare_gpt_loss.py (--help lists them).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp
exec /usr/bin/python3 "$HERE/compare_gpt_loss.py" "$@"
