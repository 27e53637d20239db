#!/usr/bin/env bash
# The paper reproduction (docs/benchmarks.md, "The paper reproduction"): Tai et al. 2015's
# constituency TreeLSTM setup (hidden 150, emb 300, dropout 0.5 on the word vectors and before
# the classifier, Adagrad lr 0.05, weight decay 1e-4, batch 25, random embeddings) trained by
# `pejit train` and by the PyTorch peer (bench/torch, the same flags), fine-grained and binary,
# over several seeds; prints the best-by-dev and final dev root accuracy, mean and spread.
#
#   bench/repro.sh [--epochs N] [--seeds N] [--data DIR] [--out DIR] [--tasks "fine binary"]
#                  [--limit N] [--build DIR] [--weight-decay WD] [--param-decay NAME=WD]...
#                  [--no-peer] [--dry]
#
# --data DIR holds train.txt and dev.txt (and test.txt, scored with the best-by-dev weights
# when present); default ../shared/data/sst. Without it, generated SST-like trees (a warning).
# --limit N: the first N training trees. --weight-decay (default 1e-4) and --param-decay
# (repeatable, e.g. emb=0) go to both sides as pejit train reads them. --dry prints the
# commands only. pejit runs on core 0 and the peer on core 1 at the same time (one thread
# each, whichever core is free takes the next run): the measure is accuracy, not time.
# A run whose output is complete in --out is not run again (rerun with the same --out to go
# on; a longer run found there counts by its first --epochs epochs).
# pejit's runs share a kernel cache in --out (the same results, less compiling).
set -euo pipefail
cd "$(dirname "$0")/.."
epochs=10 seeds=5 data=../shared/data/sst out="" tasks="fine binary" limit=0 build=build
peer=1 dry=0 wd=1e-4 pdecay=()
usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
  --epochs) epochs=$2; shift 2 ;;
  --seeds) seeds=$2; shift 2 ;;
  --data) data=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --tasks) tasks=$2; shift 2 ;;
  --limit) limit=$2; shift 2 ;;
  --build) build=$2; shift 2 ;;
  --weight-decay) wd=$2; shift 2 ;;
  --param-decay) pdecay+=(--param-decay "$2"); shift 2 ;;
  --no-peer) peer=0; shift ;;
  --dry) dry=1; shift ;;
  *) usage ;;
  esac
done
for n in "$epochs" "$seeds" "$limit"; do
  case $n in '' | *[!0-9]*) echo "repro.sh: --epochs, --seeds and --limit take a number" >&2; exit 2 ;; esac
done
[ "$epochs" -ge 1 ] && [ "$seeds" -ge 1 ] || { echo "repro.sh: --epochs and --seeds must be >= 1" >&2; exit 2; }
for t in $tasks; do
  case $t in fine | binary) ;; *) echo "repro.sh: unknown task '$t' (fine, binary)" >&2; exit 2 ;; esac
done
pejit=$build/pejit
[ -x "$pejit" ] || { echo "repro.sh: no $pejit (build the pejit target, or --build DIR)" >&2; exit 2; }
[ -n "$out" ] || out=$(mktemp -d /tmp/pejit-repro.XXXXXX)
mkdir -p "$out"

if [ ! -f "$data/train.txt" ] || [ ! -f "$data/dev.txt" ]; then
  echo "repro.sh: WARNING: no $data/train.txt and dev.txt: generated SST-like trees instead;" \
    "the accuracies say nothing about SST" >&2
  data=$out/generated
  mkdir -p "$data"
  # 2,000 training trees and 500 each for dev and test; fewer with a small --limit
  n=2000 m=500
  if [ "$limit" -gt 0 ] && [ "$limit" -lt "$n" ]; then n=$limit m=$(( limit < 100 ? 100 : limit )); fi
  [ -f "$data/test.txt" ] || {
    "$pejit" gen sst --trees "$n" --seed 1 -o "$data/train.txt" >/dev/null
    "$pejit" gen sst --trees "$m" --seed 2 -o "$data/dev.txt" >/dev/null
    "$pejit" gen sst --trees "$m" --seed 3 -o "$data/test.txt" >/dev/null
  }
fi
test_file=""
[ -f "$data/test.txt" ] && test_file=$data/test.txt
if [ "$peer" = 1 ] && ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "repro.sh: WARNING: no PyTorch for /usr/bin/python3: pejit only" >&2
  peer=0
fi

# The setup, the same on both sides.
common=(--epochs "$epochs" --batch 25 --lr 0.05 --weight-decay "$wd" ${pdecay[@]+"${pdecay[@]}"}
  --limit "$limit")
model() { case $1 in fine) echo examples/treelstm/treelstm_dropout.pe ;;
                     binary) echo examples/treelstm/treelstm_binary_dropout.pe ;; esac; }
run() { # run FILE CMD...: CMD's stdout to FILE (stderr to FILE.err), unless --dry
  local f=$1; shift
  if [ "$dry" = 1 ]; then
    echo "$* > $f"
  elif "$@" >"$f.tmp" 2>"$f.err"; then
    mv "$f.tmp" "$f"
  else
    echo "repro.sh: FAILED ($f.err): $*" >&2
  fi
}
pejit_job() { # pejit_job CORE TASK SEED
  local f=$out/$2-pejit-s$3
  if [ ! -s "$f.jsonl" ]; then
    run "$f.jsonl" taskset -c "$1" "$pejit" train "$(model "$2")" --data "$data/train.txt" \
      --dev "$data/dev.txt" --labels "$2" --seed "$3" "${common[@]}" --optimizer adagrad \
      --threads 1 --no-train-eval --json --save "$f.ckpt" --save-best dev_root_acc \
      --kernel-cache "$out/kernels"
  fi
  if [ -n "$test_file" ] && [ -s "$f.jsonl" ] && [ ! -s "$f.test.json" ]; then
    run "$f.test.json" taskset -c "$1" "$pejit" eval "$(model "$2")" --params "$f.ckpt" \
      --data "$test_file" --labels "$2" --threads 1 --json --kernel-cache "$out/kernels"
  fi
}
peer_job() { # peer_job CORE TASK SEED; the timed inference pass on dev (the smaller set)
  local f=$out/$2-peer-s$3
  [ -s "$f.jsonl" ] && return 0
  run "$f.jsonl" env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=1 \
    OMP_NUM_THREADS=1 taskset -c "$1" /usr/bin/python3 bench/torch/treelstm_torch.py \
    --style batched --threads 1 --train "$data/train.txt" --dev "$data/dev.txt" \
    ${test_file:+--test "$test_file"} --labels "$2" --seed "$3" "${common[@]}" \
    --dropout 0.5 --dev-scores --infer-on dev --json
}
# Two workers, one per core, take the next job not yet claimed (a lock directory per job), so
# a core that finishes its faster runs takes the slower side's.
systems="pejit"
[ "$peer" = 1 ] && systems="pejit peer"
worker() { # worker CORE
  local s t y
  for s in $(seq 1 "$seeds"); do
    for t in $tasks; do
      for y in $systems; do
        mkdir "$out/locks/$t-$y-s$s" 2>/dev/null || continue
        "${y}_job" "$1" "$t" "$s"
      done
    done
  done
}
echo "repro.sh: $(date -u +%FT%TZ) data $data, $epochs epochs, seeds 1..$seeds, tasks $tasks," \
  "weight decay $wd${pdecay[*]:+ ${pdecay[*]}}, out $out, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')" >&2
status=0
rm -rf "$out/locks"
mkdir -p "$out/locks"
if [ "$dry" = 1 ]; then
  worker 0
  rm -rf "$out/locks"
  exit 0
fi
worker 1 &
w1=$!
worker 0 || status=$?
wait "$w1" || status=$?
rm -rf "$out/locks"

/usr/bin/python3 - "$out" "$seeds" "$epochs" "$tasks" "$peer" <<'EOF' || status=1
# The table: per task and system, over seeds, the best-by-dev epoch's dev root accuracy (the
# first best, as --save-best keeps it), the final epoch's, and the test accuracy of the best.
import json, os, statistics, sys
out, seeds, epochs, tasks, peer = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(), sys.argv[5] == "1"
def records(path):
    if not os.path.exists(path):
        return []
    return [json.loads(l) for l in open(path) if l.strip().startswith("{")]
def fmt(xs):
    xs = [100 * x for x in xs if x is not None]
    if not xs:
        return "n/a"
    if len(xs) == 1:
        return "%.1f" % xs[0]
    return "%.1f ± %.1f" % (statistics.mean(xs), statistics.stdev(xs))
systems = ["pejit"] + (["peer"] if peer else [])
missing, rows, curves = [], [], []
for t in tasks:
    for sysname in systems:
        best, final, best_ep, test = [], [], [], []
        curve = [[] for _ in range(epochs)]
        for s in range(1, seeds + 1):
            f = os.path.join(out, "%s-%s-s%d" % (t, sysname, s))
            recs = records(f + ".jsonl")
            eps = [r for r in recs if "epoch" in r and "dev_root_acc" in r]
            if len(eps) < epochs:
                missing.append("%s (%d of %d epochs)" % (f + ".jsonl", len(eps), epochs))
                continue
            # A longer run kept in --out counts by its first epochs (the learning rate is
            # constant: epoch k is the same whatever the run's length); its saved best and
            # test score are of all its epochs, so they are left out.
            whole = len(eps) == epochs
            eps = eps[:epochs]
            accs = [r["dev_root_acc"] for r in eps]
            b = max(range(len(accs)), key=lambda k: (accs[k], -k))
            best.append(accs[b]); final.append(accs[-1]); best_ep.append(b + 1)
            for k, a in enumerate(accs):
                curve[k].append(a)
            if not whole:
                continue
            if sysname == "pejit":
                tr = records(f + ".test.json")
                test.append(tr[-1]["root_acc"] if tr else None)
            else:
                sm = [r for r in recs if r.get("summary")]
                if sm and sm[-1]["best_epoch"] != b + 1:
                    missing.append("%s: the peer's best epoch %s is not %d" % (f, sm[-1]["best_epoch"], b + 1))
                test.append(sm[-1].get("test_root_acc") if sm else None)
        rows.append((t, sysname, len(best), fmt(best), " ".join(map(str, best_ep)) or "-", fmt(final), fmt(test)))
        curves.append((t, sysname, [fmt(c) if c else "-" for c in curve]))
print("| task | system | seeds | best dev root acc (%) | best epoch per seed | final-epoch dev root acc (%) | test root acc of the best (%) |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    print("| %s | %s | %d | %s | %s | %s | %s |" % r)
print()
print("Dev root accuracy (%) by epoch, mean ± sample sd over seeds:")
print()
print("| task | system | " + " | ".join(str(k + 1) for k in range(epochs)) + " |")
print("|---|---|" + "---|" * epochs)
for t, sysname, c in curves:
    print("| %s | %s | %s |" % (t, sysname, " | ".join(c)))
if missing:
    print("\nincomplete: " + "; ".join(missing), file=sys.stderr)
    sys.exit(1)
EOF
exit "$status"
