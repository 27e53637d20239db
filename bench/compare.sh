#!/bin/bash
# pejit (generic path) vs the PyTorch TreeLSTM peers (naive recursive, level-batched) on the
# same data, same model and hyper-parameters (batch 25, Adagrad lr 0.05, shuffled per epoch),
# on the same cores, interleaved: pejit, naive, batched, pejit, naive, batched, ...
# Rules: docs/benchmarks.md. What each figure means: bench/README.md.
#
#   bench/compare.sh [options]
#     -b BUILD      build dir holding pejit and pejit_generic_bench (default build-bench)
#     -d FILE       training data (default ../shared/data/sst/train.txt, else generated SST-like)
#     -n REPS       repetitions of the interleaved round (default 3)
#     -c "1 2"      core counts to run (default "1"; 1 = taskset -c 0, 2 = taskset -c 0,1)
#     -l N          first N trees for pejit and the batched peer (default 2000; 0 = all)
#     -L N          first N trees for the naive peer (default: same as -l)
#     -e E          epochs for pejit and the batched peer (default 3)
#     -E E          epochs for the naive peer (default 2)
#     -o DIR        keep raw outputs here (default: a new dir under /tmp)
#     -s PEERS      which peers (default "naive batched")
#     -m MODE       pejit's --mode for training: generic (default), specialized or auto
#     -x "FLAGS"    more flags for `pejit train` (e.g. "--no-jit": plans on reference kernels)
#
# Per run it records the median over the run's epochs; per figure it prints the median over
# REPS runs, the min..max spread, and the ratio pejit / peer of the medians.
#
# pejit's figures:
#   train      `pejit train --json --no-train-eval` trees_per_s (value_and_grad + optimizer step
#              only; batch encoding, loading and evaluation excluded)
#   infer      pejit_generic_bench --infer, entry bench_infer_roots on the checkpoint saved by
#              that training run: forward of every node, classifier + argmax at the roots, the
#              same work as the peer's inference pass (batch encoding excluded); on the path of
#              -m: the interpreter for generic, else plans on JIT kernels made as each batch
#              comes (the ratio's figure), and again on the cached plans ("(cached plans)")
#   eval       `pejit eval` trees_per_s as shipped: a `loss` pass plus an `infer_nodes` pass
#              (classifier + argmax at every node) per batch, encoding included: ~2x the work
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

build=build-bench
data=""
reps=3
cores_list="1"
limit=2000
nlimit=""
epochs=3
nepochs=2
outdir=""
peers="naive batched"
mode=generic
extra=""
while getopts "b:d:n:c:l:L:e:E:o:s:m:x:h" opt; do
    case $opt in
        b) build=$OPTARG ;;
        d) data=$OPTARG ;;
        n) reps=$OPTARG ;;
        c) cores_list=$OPTARG ;;
        l) limit=$OPTARG ;;
        L) nlimit=$OPTARG ;;
        e) epochs=$OPTARG ;;
        E) nepochs=$OPTARG ;;
        o) outdir=$OPTARG ;;
        s) peers=$OPTARG ;;
        m) mode=$OPTARG ;;
        x) extra=$OPTARG ;;
        *) sed -n '2,33p' "$0"; exit 2 ;;
    esac
done
[ -n "$nlimit" ] || nlimit=$limit
pejit=$build/pejit
gbench=$build/pejit_generic_bench
for b in "$pejit" "$gbench"; do
    [ -x "$b" ] || { echo "compare.sh: $b not built (ninja -C $build pejit pejit_generic_bench)" >&2; exit 2; }
done
[ -n "$outdir" ] || outdir=$(mktemp -d /tmp/pejit-compare.XXXXXX)
mkdir -p "$outdir"
if [ -z "$data" ]; then
    if [ -f ../shared/data/sst/train.txt ]; then
        data=../shared/data/sst/train.txt
    else
        data=$outdir/gen-sst.txt
        "$pejit" gen sst --trees 8544 --seed 1 --shape sst -o "$data"
    fi
fi
model=examples/treelstm/treelstm.pe
log=$outdir/runs.jsonl
: > "$log"

cpus_of() { if [ "$1" -eq 1 ]; then echo 0; else echo "0-$(($1 - 1))"; fi; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# record TAG CORES REP FILE: appends the run's JSON lines, tagged, to the log.
record() {
    local tag=$1 cores=$2 rep=$3 file=$4 ld=$5
    /usr/bin/python3 - "$tag" "$cores" "$rep" "$file" "$ld" >> "$log" <<'EOF'
import json, sys
tag, cores, rep, path, ld = sys.argv[1:]
for line in open(path):
    line = line.strip()
    if line.startswith("{"):
        j = json.loads(line)
        print(json.dumps({"tag": tag, "cores": int(cores), "rep": int(rep), "load": ld, "rec": j}))
EOF
}

echo "compare.sh: data $data; pejit/batched first $limit trees x $epochs epochs; naive first $nlimit x $nepochs; reps $reps; cores $cores_list; pejit --mode $mode $extra; raw output in $outdir" >&2
echo "start $(date -Is)  load $(load)  ($(nproc) cpus)" >&2
for rep in $(seq 1 "$reps"); do
    for cores in $cores_list; do
        cpus=$(cpus_of "$cores")
        ck=$outdir/ck-$cores-$rep.bin
        ld=$(load)
        echo "[rep $rep, $cores core(s), load $ld] pejit train" >&2
        taskset -c "$cpus" "$pejit" train "$model" --data "$data" --limit "$limit" --epochs "$epochs" \
            --batch 25 --optimizer adagrad --lr 0.05 --seed "$rep" --json --no-train-eval --mode "$mode" $extra \
            --save "$ck" > "$outdir/pejit-train-$cores-$rep.json" 2> "$outdir/pejit-train-$cores-$rep.err" \
            || { cat "$outdir/pejit-train-$cores-$rep.err" >&2; exit 1; }
        record pejit_train "$cores" "$rep" "$outdir/pejit-train-$cores-$rep.json" "$ld"
        ld=$(load)
        echo "[rep $rep, $cores core(s), load $ld] pejit infer (bench_infer_roots) + pejit eval" >&2
        infer_mode=generic
        [ "$mode" = generic ] || infer_mode=specialized
        taskset -c "$cpus" "$gbench" --data "$data" --trees "$limit" --init "$ck" --epochs 0 --infer --json \
            --infer-mode "$infer_mode" \
            > "$outdir/pejit-infer-$cores-$rep.json" 2> "$outdir/pejit-infer-$cores-$rep.err" \
            || { cat "$outdir/pejit-infer-$cores-$rep.err" >&2; exit 1; }
        record pejit_infer "$cores" "$rep" "$outdir/pejit-infer-$cores-$rep.json" "$ld"
        taskset -c "$cpus" "$pejit" eval "$model" --params "$ck" --data "$data" --limit "$limit" \
            --batch 25 --json > "$outdir/pejit-eval-$cores-$rep.json" 2> "$outdir/pejit-eval-$cores-$rep.err" \
            || { cat "$outdir/pejit-eval-$cores-$rep.err" >&2; exit 1; }
        record pejit_eval "$cores" "$rep" "$outdir/pejit-eval-$cores-$rep.json" "$ld"
        for style in $peers; do
            if [ "$style" = naive ]; then e=$nepochs; l=$nlimit; else e=$epochs; l=$limit; fi
            ld=$(load)
            echo "[rep $rep, $cores core(s), load $ld] torch $style" >&2
            bench/torch/run_peer.sh "$cores" "$style" "$data" "$e" "$l" --seed "$rep" \
                > "$outdir/torch-$style-$cores-$rep.json" 2> "$outdir/torch-$style-$cores-$rep.err" \
                || { cat "$outdir/torch-$style-$cores-$rep.err" >&2; exit 1; }
            record "torch_$style" "$cores" "$rep" "$outdir/torch-$style-$cores-$rep.json" "$ld"
        done
    done
done
echo "end   $(date -Is)  load $(load)" >&2

/usr/bin/python3 - "$log" <<'EOF'
import json, statistics, sys
from collections import defaultdict
runs = defaultdict(lambda: defaultdict(list))   # (figure, cores) -> rep -> [values]
loads = defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    t, c, rep, j = r["tag"], r["cores"], r["rep"], r["rec"]
    loads[c].append(float(r["load"].split()[0]))
    if t == "pejit_train":
        runs[("pejit train", c)][rep].append(j["trees_per_s"])
    elif t == "pejit_infer" and j.get("kind") == "infer":
        m = j.get("mode", "generic")
        key = "pejit infer " + j["entry"] + ("" if m in ("generic", "specialized, planned inline")
                                             else " (cached plans)")
        runs[(key, c)][rep].append(j["trees_per_s"])
    elif t == "pejit_eval":
        runs[("pejit eval (loss+infer_nodes)", c)][rep].append(j["trees_per_s"])
    elif t.startswith("torch_"):
        s = t[6:]
        runs[("torch %s train" % s, c)][rep].append(j["train_trees_per_s"])
        runs[("torch %s infer" % s, c)][rep].append(j["infer_trees_per_s"])

def summary(key):
    per_rep = [statistics.median(v) for _, v in sorted(runs[key].items())]
    if not per_rep:
        return None
    return statistics.median(per_rep), min(per_rep), max(per_rep), per_rep

for c in sorted({c for _, c in runs}):
    print("== %d core(s); 1-min load during runs: %.1f..%.1f" % (c, min(loads[c]), max(loads[c])))
    print("%-34s %10s %18s   %s" % ("figure", "median", "spread (min..max)", "per rep (median of epochs)"))
    for key in sorted(k for k in runs if k[1] == c):
        m, lo, hi, pr = summary(key)
        print("%-34s %10.1f %8.1f..%-8.1f   %s" % (key[0], m, lo, hi, " ".join("%.1f" % x for x in pr)))
    print("ratios (pejit / peer, medians of the same run):")
    pairs = [("pejit train", "train"), ("pejit infer bench_infer_roots", "infer")]
    for pk, what in pairs:
        p = summary((pk, c))
        for style in ("naive", "batched"):
            q = summary(("torch %s %s" % (style, what), c))
            if p and q:
                print("  %-6s pejit %.1f / torch %-7s %.1f = %.3fx" % (what, p[0], style, q[0], p[0] / q[0]))
    p = summary(("pejit eval (loss+infer_nodes)", c))
    for style in ("naive", "batched"):
        q = summary(("torch %s infer" % style, c))
        if p and q:
            print("  eval   pejit eval %.1f / torch %-7s infer %.1f = %.3fx (not like for like: eval does ~2x the work)"
                  % (p[0], style, q[0], p[0] / q[0]))
EOF
