# Sourced by the MPI test scripts, with MPIEXEC set to the launcher:
# MPIRUN, that launcher with the flags its flavour needs. OpenMPI's refuses
# root and more ranks than cores without --allow-run-as-root and
# --oversubscribe; MPICH's (hydra) allows both and knows neither flag.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=("$MPIEXEC")
if "$MPIEXEC" --version 2>&1 | grep -qE "Open MPI|OpenRTE"; then
  MPIRUN+=(--allow-run-as-root --oversubscribe)
fi
