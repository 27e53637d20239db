#!/usr/bin/env bash
# Paired speed of two builds of pejit (a change against the commit before it): training runs
# alternate A, B, A, B, ... on the same cores and data, so that the host's drift hits both
# alike; each pair gives a ratio B/A of the runs' steady trees/s (the median over epochs 1..,
# epoch 0 compiles) and a ratio B/A of the runs' wall seconds (the whole process: loading,
# compiling, making the batches and the steps), and the script prints every pair and the
# median ratios. The trees/s time the steps alone; the wall time also sees the work between
# them.
#
#   bench/paired.sh -a BUILD_A -b BUILD_B [options]
#     -d FILE     training data (default ../shared/data/sst/train.txt, else 8,544 generated trees)
#     -n PAIRS    number of A/B pairs (default 5)
#     -e EPOCHS   epochs per run (default 3)
#     -m MODE     --mode of pejit train (default specialized)
#     -c CPUS     taskset CPU list (default 0: one core)
#     -M MODEL    the model (default examples/treelstm/treelstm.pe)
#     -x "FLAGS"  more flags for pejit train
#     -y "FLAGS"  more flags for B's runs only: with -a and -b the same build, two ways of
#                 running it (-y "--shuffle batches")
#     -s          score the training set after each epoch, as `pejit train` does by default
#                 (without it the runs pass --no-train-eval)
set -euo pipefail
cd "$(dirname "$0")/.."
a="" b="" data=../shared/data/sst/train.txt pairs=5 epochs=3 mode=specialized cpus=0 extra=""
extra_b=""
train_eval=--no-train-eval
model=examples/treelstm/treelstm.pe
while getopts "a:b:d:n:e:m:c:M:x:y:sh" o; do
  case $o in
  a) a=$OPTARG ;;
  b) b=$OPTARG ;;
  d) data=$OPTARG ;;
  n) pairs=$OPTARG ;;
  e) epochs=$OPTARG ;;
  m) mode=$OPTARG ;;
  c) cpus=$OPTARG ;;
  M) model=$OPTARG ;;
  x) extra=$OPTARG ;;
  y) extra_b=$OPTARG ;;
  s) train_eval="" ;;
  *) sed -n 2,21p "$0"; exit 2 ;;
  esac
done
if [ -z "$a" ] || [ -z "$b" ]; then sed -n 2,21p "$0"; exit 2; fi
out=$(mktemp -d /tmp/pejit-paired.XXXXXX)
# shellcheck source=bench/options.sh
. bench/options.sh
bench_gen_data "$a/pejit" "$out"

# The median over epochs 1.. of one run's trees_per_s (its --json lines on stdout).
steady() {
  /usr/bin/python3 -c '
import json, statistics, sys
xs = [json.loads(l)["trees_per_s"] for l in open(sys.argv[1]) if l.startswith("{")]
print(statistics.median(xs[1:] if len(xs) > 1 else xs))' "$1"
}

run() { # BUILD OUTFILE [FLAGS]: the run's --json lines in OUTFILE, its wall seconds in OUTFILE.wall
  local t0 t1
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  taskset -c "$cpus" "$1/pejit" train "$model" --data "$data" --epochs "$epochs" --mode "$mode" \
    --json $train_eval --progress 0 $extra ${3:-} >"$2" 2>/dev/null
  t1=$(date +%s.%N)
  /usr/bin/python3 -c "print(f'{$t1 - $t0:.2f}')" >"$2.wall"
}

echo "start $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)  A=$a B=$b${extra_b:+ (B: $extra_b)} data=$data mode=$mode cpus=$cpus model=$model"
ratios=() walls=()
for i in $(seq 1 "$pairs"); do
  run "$a" "$out/a.$i.json"
  run "$b" "$out/b.$i.json" "$extra_b"
  ta=$(steady "$out/a.$i.json")
  tb=$(steady "$out/b.$i.json")
  wa=$(cat "$out/a.$i.json.wall")
  wb=$(cat "$out/b.$i.json.wall")
  r=$(/usr/bin/python3 -c "print(f'{$tb / $ta:.3f}')")
  w=$(/usr/bin/python3 -c "print(f'{$wb / $wa:.3f}')")
  ratios+=("$r")
  walls+=("$w")
  echo "pair $i: trees/s A $ta  B $tb  B/A $r;  wall s A $wa  B $wb  B/A $w"
done
/usr/bin/python3 -c '
import statistics, sys
n = len(sys.argv) // 2
for name, r in (("trees/s", sys.argv[1:n + 1]), ("wall s", sys.argv[n + 1:])):
    r = [float(x) for x in r]
    print(f"median B/A of {name} {statistics.median(r):.3f}  (min {min(r):.3f}, max {max(r):.3f}, {len(r)} pairs)")' "${ratios[@]}" "${walls[@]}"
echo "raw outputs: $out"
