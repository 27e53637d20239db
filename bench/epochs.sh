#!/usr/bin/env bash
# Epoch by epoch on one core (issue 7): trees/s and the share of each epoch's batch time that
# ran on each tier, for `pejit train --mode auto|specialized|generic`, next to the PyTorch
# level-batched peer's epochs on the same data (same batch 25, Adagrad 0.05, shuffled).
#
#   bench/epochs.sh [-b BUILD] [-d FILE] [-l LIMIT] [-e EPOCHS] [-o DIR]
#
# Shares are of the batches' time (specialized_seconds + generic_seconds; the optimizer step is
# on neither path): "planned" = specialized_seconds / that, "on JIT" = jit_seconds / that.
# Each side runs once, in order auto, specialized, generic, torch (one core: taskset -c 0).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-bench
data=../shared/data/sst/train.txt
limit=0
epochs=3
out=$(mktemp -d /tmp/pejit-epochs.XXXXXX)
while getopts "b:d:l:e:o:h" o; do
  case $o in
  b) build=$OPTARG ;;
  d) data=$OPTARG ;;
  l) limit=$OPTARG ;;
  e) epochs=$OPTARG ;;
  o) out=$OPTARG; mkdir -p "$out" ;;
  *) sed -n '2,10p' "$0"; exit 2 ;;
  esac
done
if [ ! -f "$data" ]; then
  data=$out/sst_like.txt
  "$build/pejit" gen sst --trees 8544 --seed 1 -o "$data" >/dev/null
fi
echo "start $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)  data $data limit $limit"
for mode in auto specialized generic; do
  taskset -c 0 "$build/pejit" train examples/treelstm/treelstm.pe --data "$data" \
    --limit "$limit" --epochs "$epochs" --mode "$mode" --no-train-eval --json \
    >"$out/$mode.json" 2>/dev/null
done
if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  bench/torch/run_peer.sh 1 batched "$data" "$epochs" "$limit" >"$out/torch.json" 2>/dev/null
fi
echo "end   $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
def lines(name):
    p = os.path.join(out, name)
    return [json.loads(l) for l in open(p) if l.strip().startswith("{")] if os.path.exists(p) else []
print(f"{'run':<12} {'epoch':>5} {'trees/s':>9} {'seconds':>8} {'planned':>8} {'on JIT':>7} "
      f"{'generic':>8} {'kernels':>7} {'compile ms':>10}")
for mode in ("auto", "specialized", "generic"):
    for e in lines(mode + ".json"):
        t = e["specialized_seconds"] + e["generic_seconds"]
        share = lambda x: f"{100 * x / t:.1f}%" if t > 0 else "n/a"
        print(f"{mode:<12} {e['epoch']:>5} {e['trees_per_s']:>9.1f} {e['seconds']:>8.2f} "
              f"{share(e['specialized_seconds']):>8} {share(e['jit_seconds']):>7} "
              f"{share(e['generic_seconds']):>8} {e['kernels_compiled']:>7} {e['compile_ms']:>10.1f}")
for i, e in enumerate(lines("torch.json")):
    tps = e.get("train_trees_per_s")
    print(f"{'torch batch':<12} {i:>5} {tps:>9.1f}")
print(f"raw JSON in {out}")
EOF
