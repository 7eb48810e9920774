#!/usr/bin/env bash
# Set up, build everything, and run the whole test suite (unit tests, the
# generic gradient/placement/kernel harnesses, MPI tests under mpirun, and
# the PyTorch interop checks) through CTest; then build parallax and its
# MPI tests again against MPICH (build-mpich/) and run them under
# mpiexec.mpich, so both MPI families are held to the same tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
# OpenMPI refuses to run as root without these; tests oversubscribe the 2 cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
(cd build && ctest --output-on-failure --timeout 900 "$@")

# MPICH (the base of Intel MPI, Cray MPICH, MVAPICH): the MPI tests only.
cmake -S . -B build-mpich -G Ninja -DCMAKE_BUILD_TYPE=Release -DMPI_C_COMPILER=/usr/bin/mpicc.mpich \
  -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich > build-mpich.log 2>&1 || { cat build-mpich.log; exit 1; }
ninja -C build-mpich parallax px_comm_mpi_tests px_comm_mpi_failure_test
(cd build-mpich && ctest --output-on-failure --timeout 900 -R "[Mm]pi" -E "NativeOnInproc")
