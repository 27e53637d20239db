#!/usr/bin/env bash
# A Python loop calling Session.step per batch (bench/python_loop.py) against `pejit train` on
# the same data and options, both on one core (taskset -c 0), alternated PAIRS times. Reports
# per pair the steady trees/s of each (the last epoch's, over the steps' time as the CLI
# measures it), the Python loop's trees/s over its whole loop (encoding and Python included),
# each process's CPU time (startup, reading and Python's imports included), and the medians of
# the ratios (above 1: the Python loop is faster).
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
# Each process's CPU seconds (user + sys, its threads included) as well: on a shared machine
# they move less with other load than elapsed time does.
TIMEFORMAT="%U %S"
for i in $(seq 1 "$PAIRS"); do
  { time taskset -c 0 build/pejit train "$MODEL" --data "$tmp/train.txt" "${opts[@]}" --json \
    --no-train-eval --progress 0 2>/dev/null | grep '^{' | tail -1 >"$tmp/cli.$i"; } 2>"$tmp/cli.cpu.$i"
  { time taskset -c 0 "$PY" bench/python_loop.py "$MODEL" "$tmp/train.txt" "${opts[@]}" \
    2>/dev/null | tail -1 >"$tmp/py.$i"; } 2>"$tmp/py.cpu.$i"
done
"$PY" - "$tmp" "$PAIRS" <<'PYEOF'
import json, statistics, sys
tmp, pairs = sys.argv[1], int(sys.argv[2])
steps, loops, cpus = [], [], []
cpu = lambda f: sum(float(x) for x in open(f).read().split())
print("pair  cli trees/s  python trees/s (steps)  python trees/s (whole loop)  "
      "cpu s cli  cpu s python  ratio steps  ratio loop  ratio cpu")
for i in range(1, pairs + 1):
    c = json.load(open(f"{tmp}/cli.{i}"))
    p = json.load(open(f"{tmp}/py.{i}"))
    cc, pc = cpu(f"{tmp}/cli.cpu.{i}"), cpu(f"{tmp}/py.cpu.{i}")
    rs, rl = p["trees_per_s"] / c["trees_per_s"], p["loop_trees_per_s"] / c["trees_per_s"]
    steps.append(rs)
    loops.append(rl)
    cpus.append(cc / pc)
    print(f"{i:4d}  {c['trees_per_s']:11.1f}  {p['trees_per_s']:22.1f}  {p['loop_trees_per_s']:27.1f}  "
          f"{cc:9.2f}  {pc:12.2f}  {rs:11.3f}  {rl:10.3f}  {cc / pc:9.3f}")
print(f"median python/cli speed: steps {statistics.median(steps):.3f}, whole loop "
      f"{statistics.median(loops):.3f}, process CPU time (cli/python) {statistics.median(cpus):.3f}")
PYEOF
