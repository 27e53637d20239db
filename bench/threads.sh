#!/usr/bin/env bash
# Trees/s of `pejit train` against --threads: for each batch size, rounds of runs that take the
# thread counts in turn (1, 2, ..., interleaved on the same cores and data, so that the host's
# drift hits every count alike); each round gives the ratio of each count's steady trees/s
# (the median over epochs 1..; epoch 0 compiles) to the 1-thread run of the same round. Prints
# every run, the median ratios, and whether the losses were the same bits across counts.
#
#   bench/threads.sh [options]
#     -p PEJIT    the pejit binary (default build-bench/pejit, else build/pejit)
#     -d FILE     training data (default ../shared/data/sst/train.txt, else 8,544 generated trees)
#     -t "1 2 4"  thread counts (default: 1 2 and the CPUs of the affinity mask)
#     -B "25 100" batch sizes (default 25)
#     -n ROUNDS   rounds (default 3)
#     -e EPOCHS   epochs per run (default 3)
#     -m MODE     --mode of pejit train (default specialized)
#     -c CPUS     taskset CPU list for every run (default: the whole affinity mask)
#     -M MODEL    the model (default examples/treelstm/treelstm.pe)
#     -x "FLAGS"  more flags for pejit train
set -euo pipefail
cd "$(dirname "$0")/.."
pejit="" data=../shared/data/sst/train.txt counts="" batches=25 rounds=3 epochs=3
mode=specialized cpus="" extra="" model=examples/treelstm/treelstm.pe
while getopts "p:d:t:B:n:e:m:c:M:x:h" o; do
  case $o in
  p) pejit=$OPTARG ;;
  d) data=$OPTARG ;;
  t) counts=$OPTARG ;;
  B) batches=$OPTARG ;;
  n) rounds=$OPTARG ;;
  e) epochs=$OPTARG ;;
  m) mode=$OPTARG ;;
  c) cpus=$OPTARG ;;
  M) model=$OPTARG ;;
  x) extra=$OPTARG ;;
  *) sed -n 2,18p "$0"; exit 2 ;;
  esac
done
# shellcheck source=bench/options.sh
. bench/options.sh
bench_pejit
ncpu=$(/usr/bin/python3 -c 'import os; print(len(os.sched_getaffinity(0)))')
if [ -z "$counts" ]; then
  counts="1 2"
  if [ "$ncpu" -gt 2 ]; then counts="$counts $ncpu"; fi
fi
case " $counts " in *" 1 "*) ;; *) counts="1 $counts" ;; esac # ratios are to 1 thread
if [ -z "$cpus" ]; then
  cpus=$(/usr/bin/python3 -c 'import os; print(",".join(map(str, sorted(os.sched_getaffinity(0)))))')
fi
out=$(mktemp -d /tmp/pejit-threads.XXXXXX)
bench_gen_data "$pejit" "$out"

# The median over epochs 1.. of one run's trees_per_s (its --json lines on stdout).
steady() {
  /usr/bin/python3 -c '
import json, statistics, sys
xs = [json.loads(l)["trees_per_s"] for l in open(sys.argv[1]) if l.startswith("{")]
print(f"{statistics.median(xs[1:] if len(xs) > 1 else xs):.1f}")' "$1"
}
# Every epoch's loss and the thread count the run reports, as one line.
losses() {
  /usr/bin/python3 -c '
import json, sys
js = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(js[0].get("threads"), " ".join(repr(j["loss"]) for j in js))' "$1"
}

run() { # THREADS BATCH OUTFILE
  # shellcheck disable=SC2086
  taskset -c "$cpus" "$pejit" train "$model" --data "$data" --epochs "$epochs" --mode "$mode" \
    --batch "$2" --threads "$1" --json --no-train-eval --progress 0 $extra >"$3" 2>/dev/null
}

echo "start $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)  pejit=$pejit"
echo "model=$model data=$data mode=$mode cpus=$cpus threads: $counts  batches: $batches  rounds=$rounds epochs=$epochs"
same=1
for b in $batches; do
  declare -A ratios=()
  for i in $(seq 1 "$rounds"); do
    line="batch $b round $i:"
    base="" ref=""
    for t in $counts; do
      f=$out/b$b.t$t.r$i.json
      run "$t" "$b" "$f"
      tps=$(steady "$f")
      l=$(losses "$f")
      reported=${l%% *}
      if [ "$reported" != "$t" ]; then
        echo "run with --threads $t reports threads=$reported" >&2
        exit 1
      fi
      if [ -z "$ref" ]; then ref=${l#* }; elif [ "${l#* }" != "$ref" ]; then same=0; fi
      if [ "$t" = 1 ]; then base=$tps; fi
      r=$(/usr/bin/python3 -c "print(f'{$tps / $base:.3f}')")
      ratios[$t]="${ratios[$t]:-} $r"
      line="$line  t=$t $tps trees/s (x$r)"
    done
    echo "$line"
  done
  for t in $counts; do
    # shellcheck disable=SC2086
    /usr/bin/python3 -c '
import statistics, sys
r = [float(x) for x in sys.argv[3:]]
print(f"batch {sys.argv[1]}  threads {sys.argv[2]}: median {statistics.median(r):.3f} x 1 thread  (min {min(r):.3f}, max {max(r):.3f}, {len(r)} rounds)")' "$b" "$t" ${ratios[$t]}
  done
  unset ratios
done
if [ "$same" = 1 ]; then
  echo "losses: the same bits for every thread count"
else
  echo "losses: DIFFER across thread counts (a bug: see $out)"
fi
echo "raw outputs: $out"
[ "$same" = 1 ]
