#!/usr/bin/env bash
# Configures and builds parallax in Release into build/ (after setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release > build.log 2>&1 || { cat build.log; exit 1; }
ninja -C build -j"$(nproc)" "$@"
