#!/usr/bin/env bash
# Paired speed of two builds of pejit (a change against the commit before it): training runs
# alternate A, B, A, B, ... on the same cores and data, so that the host's drift hits both
# alike; each pair gives a ratio B/A of the runs' steady trees/s (the median over epochs 1..,
# epoch 0 compiles), and the script prints every pair and the median ratio.
#
#   bench/paired.sh -a BUILD_A -b BUILD_B [options]
#     -d FILE     training data (default ../shared/data/sst/train.txt, else 8,544 generated trees)
#     -n PAIRS    number of A/B pairs (default 5)
#     -e EPOCHS   epochs per run (default 3)
#     -m MODE     --mode of pejit train (default specialized)
#     -c CPUS     taskset CPU list (default 0: one core)
#     -x "FLAGS"  more flags for pejit train
set -euo pipefail
cd "$(dirname "$0")/.."
a="" b="" data=../shared/data/sst/train.txt pairs=5 epochs=3 mode=specialized cpus=0 extra=""
while getopts "a:b:d:n:e:m:c:x:h" o; do
  case $o in
  a) a=$OPTARG ;;
  b) b=$OPTARG ;;
  d) data=$OPTARG ;;
  n) pairs=$OPTARG ;;
  e) epochs=$OPTARG ;;
  m) mode=$OPTARG ;;
  c) cpus=$OPTARG ;;
  x) extra=$OPTARG ;;
  *) sed -n 2,13p "$0"; exit 2 ;;
  esac
done
if [ -z "$a" ] || [ -z "$b" ]; then sed -n 2,13p "$0"; exit 2; fi
out=$(mktemp -d /tmp/pejit-paired.XXXXXX)
# shellcheck source=bench/options.sh
. bench/options.sh
bench_gen_data "$a/pejit" "$out"
model=examples/treelstm/treelstm.pe

# The median over epochs 1.. of one run's trees_per_s (its --json lines on stdout).
steady() {
  /usr/bin/python3 -c '
import json, statistics, sys
xs = [json.loads(l)["trees_per_s"] for l in open(sys.argv[1]) if l.startswith("{")]
print(statistics.median(xs[1:] if len(xs) > 1 else xs))' "$1"
}

run() { # BUILD OUTFILE
  # shellcheck disable=SC2086
  taskset -c "$cpus" "$1/pejit" train "$model" --data "$data" --epochs "$epochs" --mode "$mode" \
    --json --no-train-eval --progress 0 $extra >"$2" 2>/dev/null
}

echo "start $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)  A=$a B=$b data=$data mode=$mode cpus=$cpus"
ratios=()
for i in $(seq 1 "$pairs"); do
  run "$a" "$out/a.$i.json"
  run "$b" "$out/b.$i.json"
  ta=$(steady "$out/a.$i.json")
  tb=$(steady "$out/b.$i.json")
  r=$(/usr/bin/python3 -c "print(f'{$tb / $ta:.3f}')")
  ratios+=("$r")
  echo "pair $i: A $ta  B $tb  B/A $r"
done
/usr/bin/python3 -c '
import statistics, sys
r = [float(x) for x in sys.argv[1:]]
print(f"median B/A {statistics.median(r):.3f}  (min {min(r):.3f}, max {max(r):.3f}, {len(r)} pairs)")' "${ratios[@]}"
echo "raw outputs: $out"
