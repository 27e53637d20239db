#!/usr/bin/env bash
# Epoch by epoch on one core: trees/s and the share of each epoch's batch time that
# ran on each tier, for `pejit train --mode auto|specialized|generic`, next to the PyTorch
# level-batched peer's epochs on the same data (same batch 25, Adagrad 0.05, shuffled).
#
#   bench/epochs.sh [-b BUILD] [-d FILE] [-l LIMIT] [-e EPOCHS] [-n REPS] [-o DIR]
#
# Shares are of the batches' time (specialized_seconds + generic_seconds; the optimizer step is
# on neither path): "planned" = specialized_seconds / that, "on JIT" = jit_seconds / that.
# REPS rounds (default 3), each running auto, specialized, generic, torch in that order (one
# core: taskset -c 0); per run and epoch it prints the median over the rounds and the min..max
# of trees/s, and "e0/steady" = epoch 0's trees/s over the median of the later epochs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-bench
data=../shared/data/sst/train.txt
limit=0
epochs=3
reps=3
out=$(mktemp -d /tmp/pejit-epochs.XXXXXX)
usage='2,13p'
. bench/options.sh
bench_options "$@"
bench_data
echo "start $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)  data $data limit $limit"
for rep in $(seq 1 "$reps"); do
  for mode in auto specialized generic; do
    taskset -c 0 "$build/pejit" train examples/treelstm/treelstm.pe --data "$data" \
      --limit "$limit" --epochs "$epochs" --mode "$mode" --no-train-eval --json \
      >"$out/$mode.$rep.json" 2>/dev/null
  done
  if /usr/bin/python3 -c "import torch" 2>/dev/null; then
    bench/torch/run_peer.sh 1 batched "$data" "$epochs" "$limit" >"$out/torch.$rep.json" 2>/dev/null
  fi
done
echo "end   $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$out" "$reps" <<'EOF'
import json, os, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def lines(name):
    p = os.path.join(out, name)
    return [json.loads(l) for l in open(p) if l.strip().startswith("{")] if os.path.exists(p) else []
def runs(name):  # per round: its epochs
    return [r for r in (lines(f"{name}.{k}.json") for k in range(1, reps + 1)) if r]
med = statistics.median
print(f"{reps} rounds; medians over the rounds, trees/s spread min..max")
print(f"{'run':<12} {'epoch':>5} {'trees/s':>9} {'spread':>13} {'planned':>8} {'on JIT':>7} "
      f"{'generic':>8} {'kernels':>7} {'compile ms':>10}")
def row(name, epoch, tps, extra=""):
    print(f"{name:<12} {epoch:>5} {med(tps):>9.1f} {min(tps):>6.0f}..{max(tps):<6.0f}{extra}")
summary = {}
for mode in ("auto", "specialized", "generic"):
    rs = runs(mode)
    if not rs:
        continue
    for ep in range(min(len(r) for r in rs)):
        es = [r[ep] for r in rs]
        tps = [e["trees_per_s"] for e in es]
        def share(key):
            v = [100 * e[key] / (e["specialized_seconds"] + e["generic_seconds"]) for e in es
                 if e["specialized_seconds"] + e["generic_seconds"] > 0]
            return f"{med(v):.1f}%" if v else "n/a"
        row(mode, ep, tps, f" {share('specialized_seconds'):>8} {share('jit_seconds'):>7} "
            f"{share('generic_seconds'):>8} {med([e['kernels_compiled'] for e in es]):>7.0f} "
            f"{med([e['compile_ms'] for e in es]):>10.1f}")
        summary.setdefault(mode, []).append(med(tps))
rs = runs("torch")
for ep in range(min((len(r) for r in rs), default=0)):
    tps = [r[ep]["train_trees_per_s"] for r in rs]
    row("torch batch", ep, tps)
    summary.setdefault("torch", []).append(med(tps))
for mode, tps in summary.items():
    if len(tps) > 1:
        print(f"{mode}: e0/steady {tps[0] / med(tps[1:]):.2f}, epochs 1+ median {med(tps[1:]):.1f} trees/s")
print(f"raw JSON in {out}")
EOF
