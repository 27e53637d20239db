#!/usr/bin/env bash
# Training trees/s with and without a tuned schedule database, side by side:
# `pejit tune` on the data, then `pejit train --mode specialized` without and with `--tuned`,
# interleaved, REPS rounds, the whole process on one core (taskset -c 0).
#
#   bench/tuned.sh [-b BUILD] [-d FILE] [-l LIMIT] [-e EPOCHS] [-n REPS] [-o DIR]
#
# Defaults: build-bench, ../shared/data/sst/train.txt (generated SST-like trees if absent),
# the first 2000 trees, 2 epochs, 3 rounds. Per run it prints the median over the rounds of
# the last epoch's trees/s (steady state: every kernel compiled) and of its seconds on JIT
# kernels, with the min..max spread, and the ratio tuned / default of the medians.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-bench
data=../shared/data/sst/train.txt
limit=2000
epochs=2
reps=3
out=$(mktemp -d /tmp/pejit-tuned.XXXXXX)
usage='2,12p'
. bench/options.sh
bench_options "$@"
bench_data
model=examples/treelstm/treelstm.pe
echo "start $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)  data $data limit $limit"
taskset -c 0 "$build/pejit" tune "$model" --data "$data" --limit "$limit" --out "$out/db.json" \
  >"$out/tune.txt"
sed 's/^\(.\{90\}\).*: /\1...: /' "$out/tune.txt"
for rep in $(seq 1 "$reps"); do
  for run in default tuned; do
    extra=()
    [ "$run" = tuned ] && extra=(--tuned "$out/db.json")
    taskset -c 0 "$build/pejit" train "$model" --data "$data" --limit "$limit" \
      --epochs "$epochs" --mode specialized --no-train-eval --json "${extra[@]}" \
      >"$out/$run.$rep.json" 2>"$out/$run.$rep.err"
  done
done
echo "end   $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$out" "$reps" <<'EOF'
import json, os, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
med = statistics.median
def last(name, k):
    lines = [json.loads(l) for l in open(os.path.join(out, f"{name}.{k}.json")) if l.startswith("{")]
    return lines[-1]
res = {}
print(f"{reps} rounds, interleaved; last epoch; medians over the rounds (min..max)")
print(f"{'run':<8} {'trees/s':>9} {'spread':>15} {'JIT s':>7} {'epoch s':>8}  schedules")
for name in ("default", "tuned"):
    ls = [last(name, k) for k in range(1, reps + 1)]
    tps = [l["trees_per_s"] for l in ls]
    res[name] = med(tps)
    scheds = sorted({k["schedule"] + " (" + k["schedule_source"].split(" entry")[0] + ")"
                     for k in ls[0].get("kernels", [])})
    print(f"{name:<8} {med(tps):>9.1f} {min(tps):>7.1f}..{max(tps):<7.1f} "
          f"{med(l['jit_seconds'] for l in ls):>7.2f} {med(l['seconds'] for l in ls):>8.2f}  "
          + ", ".join(scheds))
print(f"tuned / default: {res['tuned'] / res['default']:.3f}")
print(f"files: {out}")
EOF
