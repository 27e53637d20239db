#!/usr/bin/env bash
# A Python loop calling Session.step per batch (bench/python_loop.py) against `pejit train` on
# the same data and options, both on one core (taskset -c 0), alternated PAIRS times. Reports
# per pair the steady trees/s of each (the last epoch's, over the steps' time as the CLI
# measures it), the Python loop's trees/s over its whole loop (encoding and Python included),
# and the medians of the ratios python/cli.
# Usage: bench/python_loop.sh [PAIRS=5] [EPOCHS=2] [TREES=2000]   (after building pejit and
#        the Python package into build/)
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${1:-5}
EPOCHS=${2:-2}
TREES=${3:-2000}
PY=/usr/bin/python3
MODEL=examples/treelstm/treelstm.pe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
build/pejit gen sst --trees "$TREES" --seed 1 -o "$tmp/train.txt"
opts=(--epochs "$EPOCHS" --batch 25 --seed 1 --lr 0.05 --mode auto --lookahead 8)
for i in $(seq 1 "$PAIRS"); do
  taskset -c 0 build/pejit train "$MODEL" --data "$tmp/train.txt" "${opts[@]}" --json \
    --no-train-eval --progress 0 2>/dev/null | grep '^{' | tail -1 >"$tmp/cli.$i"
  taskset -c 0 "$PY" bench/python_loop.py "$MODEL" "$tmp/train.txt" "${opts[@]}" \
    2>/dev/null | tail -1 >"$tmp/py.$i"
done
"$PY" - "$tmp" "$PAIRS" <<'PYEOF'
import json, statistics, sys
tmp, pairs = sys.argv[1], int(sys.argv[2])
steps, loops = [], []
print("pair  cli trees/s  python trees/s (steps)  python trees/s (whole loop)  ratio steps  ratio loop")
for i in range(1, pairs + 1):
    c = json.load(open(f"{tmp}/cli.{i}"))
    p = json.load(open(f"{tmp}/py.{i}"))
    rs, rl = p["trees_per_s"] / c["trees_per_s"], p["loop_trees_per_s"] / c["trees_per_s"]
    steps.append(rs)
    loops.append(rl)
    print(f"{i:4d}  {c['trees_per_s']:11.1f}  {p['trees_per_s']:22.1f}  {p['loop_trees_per_s']:27.1f}  {rs:11.3f}  {rl:10.3f}")
print(f"median python/cli: steps {statistics.median(steps):.3f}, whole loop {statistics.median(loops):.3f}")
PYEOF
