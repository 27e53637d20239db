#!/usr/bin/env bash
# Long-run stability of `pejit train --mode auto`: EPOCHS epochs (default 50) of SST with a dev
# pass after each, the process's resident memory (VmRSS of /proc/PID/status) sampled every
# second, and the plan and kernel caches from the per-epoch --json statistics. Reports the
# largest RSS of epochs 5-10 and of epochs 40-50 (of the first and last fifth with fewer
# epochs), the per-epoch peak's slope over the last ten epochs, and "plateau" when the late
# peak is within 5% of the early one (allocator slack), else "GROWS".
#
#   bench/rss.sh [-b BUILD] [-d FILE] [-l LIMIT] [-e EPOCHS] [-o DIR]
#
# FILE (default ../shared/data/sst/train.txt, its dev.txt beside it as --dev): without it,
# 8,544 + 1,101 generated SST-like trees. Timing does not matter here: the machine may be
# loaded. Samples: DIR/rss.tsv (seconds, epochs finished, VmRSS kB); epochs: DIR/train.json.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
data=../shared/data/sst/train.txt
limit=0
epochs=50
reps=1
out=$(mktemp -d /tmp/pejit-rss.XXXXXX)
usage='2,13p'
. bench/options.sh
bench_options "$@"
dev=$(dirname "$data")/dev.txt
bench_data
if [ ! -f "$dev" ]; then
  dev=$out/sst_like_dev.txt
  "$build/pejit" gen sst --trees 1101 --seed 2 -o "$dev" >/dev/null
fi
echo "start $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)  data $data dev $dev" \
  "limit $limit epochs $epochs"
"$build/pejit" train examples/treelstm/treelstm.pe --data "$data" --dev "$dev" --limit "$limit" \
  --epochs "$epochs" --mode auto --no-train-eval --json >"$out/train.json" 2>"$out/train.err" &
pid=$!
start=$(date +%s)
: >"$out/rss.tsv"
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || true)
  [ -n "$rss" ] || break
  done_epochs=$(grep -c '^{' "$out/train.json" || true)
  echo "$(($(date +%s) - start)) $done_epochs $rss" >>"$out/rss.tsv"
  sleep 1
done
rc=0
wait "$pid" || rc=$?
echo "end   $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)  exit $rc"
if [ "$rc" -ne 0 ]; then
  tail -5 "$out/train.err" >&2
  exit 1
fi
/usr/bin/python3 - "$out" "$epochs" <<'EOF'
import json, os, sys
out, epochs = sys.argv[1], int(sys.argv[2])
samples = [tuple(int(x) for x in l.split()) for l in open(os.path.join(out, "rss.tsv")) if l.strip()]
eps = [json.loads(l) for l in open(os.path.join(out, "train.json")) if l.startswith("{")]
peak = {}  # epoch (0-based, the one running when sampled) -> largest VmRSS kB
for _, done, rss in samples:
    e = min(done, epochs - 1)
    peak[e] = max(peak.get(e, 0), rss)
def window(lo, hi):  # 1-based epochs lo..hi, inclusive
    vals = [peak[e] for e in range(lo - 1, hi) if e in peak]
    return max(vals) if vals else float("nan")
if epochs >= 50:
    early, late = (5, 10), (40, 50)
else:
    f = max(1, epochs // 5)
    early, late = (1, f), (epochs - f + 1, epochs)
e_rss, l_rss = window(*early), window(*late)
tail = [(e, peak[e]) for e in range(max(0, epochs - 10), epochs) if e in peak]
slope = 0.0
if len(tail) > 1:
    mx = sum(e for e, _ in tail) / len(tail); my = sum(v for _, v in tail) / len(tail)
    den = sum((e - mx) ** 2 for e, _ in tail)
    slope = sum((e - mx) * (v - my) for e, v in tail) / den if den else 0.0
made = sum(e["plan_cache"]["misses"] + e["plan_cache"]["prefetched"] for e in eps)
evicted = sum(e["plan_cache"]["evictions"] for e in eps)
compiled = sum(e["kernels_compiled"] for e in eps)
held = len(eps[-1].get("kernels") or []) if eps else 0
print(f"{len(eps)} epochs, {len(samples)} samples; peak VmRSS per epoch (MiB):")
print(" ".join(f"{peak[e] / 1024:.0f}" for e in sorted(peak)))
print(f"max RSS epochs {early[0]}-{early[1]}: {e_rss / 1024:.1f} MiB; "
      f"epochs {late[0]}-{late[1]}: {l_rss / 1024:.1f} MiB "
      f"({100 * (l_rss / e_rss - 1):+.1f}%); last-10-epoch slope {slope / 1024:+.2f} MiB/epoch")
print(f"plans made {made}, evicted {evicted} (at most {made - evicted} held; "
      f"bound 2048 + 64 on probation); kernels compiled {compiled}, held at the end {held} "
      f"(bound 256)")
print(f"dev root accuracy, last epoch: {eps[-1]['dev_root_acc']}" if eps else "no epochs")
print("plateau" if l_rss <= 1.05 * e_rss else "GROWS")
EOF
