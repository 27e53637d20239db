#!/usr/bin/env bash
# Installs the Debian packages pejit builds and tests with. Idempotent: when every package
# is already present it only checks (well under a second) and installs nothing.
# Usage: scripts/setup.sh [--bench] [--fuzz]   (--bench adds PyTorch for the peer baselines;
# --fuzz adds clang and its libFuzzer runtime for scripts/fuzz.sh)
set -euo pipefail

pkgs=(
  build-essential cmake ninja-build ccache pkg-config
  llvm-19-dev libzstd-dev          # JIT: ORC LLJIT (jit/ only)
  libtbb-dev                       # background specialization pipeline
  libboost-dev                     # Boost.Graph (call graph, tensor graph adaptors)
  doctest-dev                      # unit tests
  libxsmm-dev libopenblas-dev      # small GEMMs (libxsmm), BLAS fallback it links against
  libcli11-dev                     # command-line parsing of the pejit CLI
  nlohmann-json3-dev               # JSON output, checkpoints' metadata, schedule DBs
  libfmt-dev                       # formatting
  zlib1g-dev                       # gzip word vectors (pejit train --embeddings)
  libbenchmark-dev                 # Google Benchmark micro-benchmarks
  python3-dev pybind11-dev         # the Python package's extension (python/), for /usr/bin/python3
  python3-numpy                    # parameters as numpy arrays in the Python package
  python3-pytest                   # the Python package's tests (ctest runs them)
  python3-tqdm                     # pejit.train()'s progress bar (a plain line without it)
  openmpi-bin libopenmpi-dev       # data-parallel training across processes (mpirun; docs/distributed.md)
)
for arg in "$@"; do
  case "$arg" in
  --bench) pkgs+=(python3-torch python3-numpy) ;;
  --fuzz) pkgs+=(clang-19 libclang-rt-19-dev) ;;
  *) echo "setup: unknown option $arg" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "setup: installing ${missing[*]}" >&2
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
