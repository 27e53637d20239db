#!/usr/bin/env bash
# The zoo on one core (issue 19): for each model of examples/, its useful GEMM FLOPs per tree
# (or sentence) and the step's rate against the SGEMM peak measured in the same process
# (pejit_profile_bench --model: the roofline line), and for the models with a PyTorch peer
# (TreeLSTM, child-sum TreeLSTM, Tree-GRU) pejit's steady training trees/s against the peer's
# level-batched style, paired (pejit, then the peer, on the same core, per round).
# The roofline runs ROUNDS rounds, each of every model in turn (so that the host's drift
# reaches every model alike), and gives each model's median and range over the rounds.
#
#   bench/zoo.sh [-b BUILD] [-d FILE] [-s FILE] [-l LIMIT] [-n ROUNDS] [-a ARITY]
#     -b BUILD   the build (default build-bench, else build)
#     -d FILE    binary training trees (default ../shared/data/sst/train.txt, else generated)
#     -s FILE    sentences for the LSTM language model (default ../shared/data/ptb/valid.txt,
#                else `pejit gen sst --sentences`)
#     -l LIMIT   trees (sentences) per run (default 2000)
#     -n ROUNDS  rounds of the roofline runs and of the paired peer runs (default 3)
#     -a ARITY   the child-sum model's n-ary trees: `pejit gen sst --arity ARITY` (default 4)
# ListOps trains on `pejit gen listops` expressions, the BiLSTM tagger on the -d trees (a label
# per leaf).
# Timing needs a quiet host.
set -euo pipefail
cd "$(dirname "$0")/.."
build="" data=../shared/data/sst/train.txt sents=../shared/data/ptb/valid.txt limit=2000
rounds=3 arity=4
while getopts "b:d:s:l:n:a:h" o; do
  case $o in
  b) build=$OPTARG ;;
  d) data=$OPTARG ;;
  s) sents=$OPTARG ;;
  l) limit=$OPTARG ;;
  n) rounds=$OPTARG ;;
  a) arity=$OPTARG ;;
  *) sed -n 2,18p "$0"; exit 2 ;;
  esac
done
# shellcheck source=bench/options.sh
. bench/options.sh
pejit=""
bench_pejit "$build"
build=$(dirname "$pejit") # pejit_profile_bench's too
out=$(mktemp -d /tmp/pejit-zoo.XXXXXX)
bench_gen_data "$pejit" "$out"
nary=$out/nary.txt
"$pejit" gen sst --trees "$limit" --arity "$arity" --seed 1 -o "$nary" >/dev/null
listops=$out/listops.txt
"$pejit" gen listops --trees "$limit" --seed 1 -o "$listops" >/dev/null
if [ ! -f "$sents" ]; then
  echo "zoo.sh: $sents not found; using $limit generated sentences" >&2
  sents=$out/sentences.txt
  "$pejit" gen sst --sentences --trees "$limit" --seed 1 -o "$sents" >/dev/null
fi
py=/usr/bin/python3
echo "start $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)  pejit=$pejit data=$data sentences=$sents limit=$limit"

echo "== roofline (one core; useful GEMM FLOPs; the step's rate over the SGEMM peak)"
models="treelstm/treelstm treegru/treegru recnn/recnn nary_treelstm/nary_treelstm
  childsum/childsum listops/listops rnn/rnn tagger/tagger"
for i in $(seq 1 "$rounds"); do
  for m in $models; do
    case $m in
    childsum/childsum) d=$nary ;;
    listops/listops) d=$listops ;;
    rnn/rnn) d=$sents ;;
    *) d=$data ;;
    esac
    line=$(taskset -c 0 "$build/pejit_profile_bench" "$d" "$limit" 3 --model "examples/$m.pe" |
      tail -1)
    echo "round $i: $line"
    echo "$line" >>"$out/roofline.$(basename "$m")"
  done
done
for m in $models; do
  name=$(basename "$m")
  # The step's share of the peak, with and without the inline planning, per round.
  $py -c '
import re, statistics, sys
name, path = sys.argv[1], sys.argv[2]
rows = [re.search(r"= (\d+)% of the SGEMM peak \((\d+)% without", l) for l in open(path)]
if not rows or any(r is None for r in rows):
    sys.exit(f"zoo: {name}: a roofline run gave no roofline line")
a = [int(r.group(1)) for r in rows]
b = [int(r.group(2)) for r in rows]
print(f"{name}: median {statistics.median(a):g}% of the SGEMM peak (range {min(a)}-{max(a)}), "
      f"{statistics.median(b):g}% without the inline planning (range {min(b)}-{max(b)}), "
      f"{len(a)} rounds")' "$name" "$out/roofline.$name"
done

steady() { # median over epochs 1.. of pejit's --json trees_per_s
  $py -c '
import json, statistics, sys
xs = [json.loads(l)["trees_per_s"] for l in open(sys.argv[1]) if l.startswith("{")]
print(f"{statistics.median(xs[1:]):.1f}")' "$1"
}
peer() { # the peer's last epoch's train_trees_per_s
  $py -c '
import json, sys
js = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print("%.1f" % js[-1]["train_trees_per_s"])' "$1"
}

echo "== pejit --mode specialized --threads 1 against the level-batched peer (one core)"
for spec in treelstm:treelstm_torch.py:$data treegru:treegru_torch.py:$data \
  childsum:childsum_torch.py:$nary; do
  IFS=: read -r name script d <<<"$spec"
  ratios=""
  for i in $(seq 1 "$rounds"); do
    taskset -c 0 "$pejit" train "examples/$name/$name.pe" --data "$d" --limit "$limit" \
      --epochs 3 --mode specialized --threads 1 --json --no-train-eval --progress 0 \
      >"$out/$name.$i.json" 2>/dev/null
    OMP_NUM_THREADS=1 taskset -c 0 $py "bench/torch/$script" --style batched --train "$d" \
      --limit "$limit" --epochs 2 --threads 1 --json >"$out/$name.peer.$i.json" 2>/dev/null
    p=$(steady "$out/$name.$i.json")
    q=$(peer "$out/$name.peer.$i.json")
    r=$($py -c "print(f'{$p / $q:.2f}')")
    ratios="$ratios $r"
    echo "$name round $i: pejit $p trees/s, peer $q trees/s, x$r"
  done
  # shellcheck disable=SC2086
  $py -c 'import statistics, sys; r = [float(x) for x in sys.argv[2:]]; print(f"{sys.argv[1]}: median x{statistics.median(r):.2f} (min {min(r):.2f}, max {max(r):.2f})")' "$name" $ratios
done
echo "raw outputs: $out"
