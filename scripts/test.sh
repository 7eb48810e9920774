#!/usr/bin/env bash
# Set up, build everything, and run the whole test suite (unit tests, the
# generic gradient/placement/kernel harnesses, MPI tests under mpirun, and
# the PyTorch interop checks) through CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# OpenMPI refuses to run as root without these; tests oversubscribe the 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cd build
ctest --output-on-failure --timeout 900 "$@"
