#!/bin/sh
# The paper reproduction's checks (bench/repro.sh, bench/torch/treelstm_paper.py).
#   repro_check.sh peer PEJIT_DIR: the PyTorch peer's paper setup (binary labels, dropout,
#     weight decay, best epoch) and its scores against `pejit eval`; 77 (skipped) without torch.
#   repro_check.sh table PEJIT_DIR WORKDIR: bench/repro.sh on generated trees (2 seeds, 2
#     epochs, 40 trees) prints a complete row per task and system (the peer's only with torch).
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
has_torch() { /usr/bin/python3 -c "import torch" 2>/dev/null; }
case $1 in
peer)
  has_torch || { echo "skipped: no PyTorch for /usr/bin/python3"; exit 77; }
  exec /usr/bin/python3 "$src/bench/torch/treelstm_torch.py" --paper-check --pejit "$2/pejit" \
    --model-dir "$src/examples/treelstm" ;;
table)
  work=$3
  rm -rf "$work"
  mkdir -p "$work"
  "$src/bench/repro.sh" --build "$2" --data "$work/no-sst" --epochs 2 --seeds 2 --limit 40 \
    --out "$work/out" >"$work/table.md"
  cat "$work/table.md"
  want=2
  if has_torch; then want=4; else echo "note: no PyTorch: pejit's rows only"; fi
  rows=$(grep -cE '^\| (fine|binary) \| (pejit|peer) \| 2 \| [0-9.]+ ± [0-9.]+ \| [12] [12] \| [0-9.]+ ± [0-9.]+ \| [0-9.]+ ± [0-9.]+ \|$' "$work/table.md" || true)
  [ "$rows" = "$want" ] || { echo "FAIL: $rows complete rows, expected $want"; exit 1; }
  echo "PASS: $rows complete rows" ;;
*) echo "usage: repro_check.sh peer PEJIT_DIR | table PEJIT_DIR WORKDIR" >&2; exit 2 ;;
esac
