#!/usr/bin/env bash
# Configures and builds parallax in Release into build/ (after setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# -DPX_ALSO_MPICH=ON: the MPI executables are linked against MPICH too
# (parallax-mpich, ...), from the same objects; the tests run under both.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DPX_ALSO_MPICH=ON > build.log 2>&1 || { cat build.log; exit 1; }
ninja -C build -j"$(nproc)" "$@"
