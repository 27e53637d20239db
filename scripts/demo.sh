#!/usr/bin/env bash
# The main job: sets up, builds, generates the built-in SST-like data set and trains the
# TreeLSTM on it, printing a progress line and a per-epoch summary.
# Usage: scripts/demo.sh [extra `pejit train` flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target pejit
# The Python package too when pybind11 is there (build/python, on /usr/bin/python3's path).
if cmake --build build --target help | grep -q '^pejit_python'; then
  cmake --build build --target pejit_python
fi
mkdir -p data
[[ -f data/train.txt ]] || build/pejit gen sst --trees 3000 --seed 1 -o data/train.txt
[[ -f data/dev.txt ]] || build/pejit gen sst --trees 500 --seed 2 -o data/dev.txt
exec build/pejit train examples/treelstm/treelstm.pe --data data/train.txt --dev data/dev.txt \
  --epochs 3 "$@"
