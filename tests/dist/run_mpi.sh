#!/usr/bin/env bash
# Runs a test executable on NP ranks under mpirun: run_mpi.sh MPIRUN NP EXE. Exit 77 (ctest:
# Skipped) when mpirun or the MPI build is missing. A job that has not ended after its time
# limit is killed (a hang is a failure, not a wait).
set -uo pipefail
mpirun=$1 np=$2 exe=$3
if [[ -z "$exe" ]]; then
  echo "skipped: this build has no MPI (PEJIT_MPI=OFF: install libopenmpi-dev)"
  exit 77
fi
if [[ -z "$mpirun" || ! -x "$mpirun" ]]; then
  echo "skipped: mpirun not found (install openmpi-bin)"
  exit 77
fi
# Open MPI refuses root unless told (CI containers run as root); more ranks than cores is fine.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
exec timeout -k 5 240 "$mpirun" -np "$np" --oversubscribe "$exe"
