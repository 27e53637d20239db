#!/usr/bin/env bash
# Evaluation speed on one core: `pejit eval` (the loss, root and all-node accuracy, one pass per
# batch) against the PyTorch level-batched peer's inference (`infer_trees_per_s`: forward of
# every node, classifier and argmax at the roots, no grad) on the same trees and weights, in
# paired rounds (pejit, then the peer, on the same core), so that the host's drift hits both.
#
#   bench/eval.sh [-b BUILD] [-d FILE] [-l LIMIT] [-n REPS] [-o DIR] [-k CKPT] [-x "FLAGS"]
#
#   -b BUILD  the build whose pejit runs (default build-bench)
#   -d FILE   the trees evaluated (default ../shared/data/sst/train.txt, else 8,544 generated)
#   -l LIMIT  the first N trees only (default 0: all)
#   -n REPS   paired rounds (default 5)
#   -k CKPT   the weights (default: one epoch of `pejit train` on the data, made once)
#   -x FLAGS  more flags for pejit eval (e.g. "--batch 250", "--two-pass")
# Per round and per side, trees/s:
#   pejit e2e      trees / the wall time of the whole `pejit eval` process (reading the model,
#                  data and checkpoint, planning, compiling and scoring)
#   pejit first    trees / the first round's scoring seconds (planning and compiling included)
#   pejit steady   trees / the median of rounds 2..4 of one `--rounds 4` run: plans and kernels
#                  made, as the dev set's evaluation after each training epoch finds them
#   pejit warm-k   the first round of a run whose kernels come from a warm --kernel-cache: new
#                  data, planning included, compiling not
#   peer           infer_trees_per_s of the peer's second epoch (after a warm-up epoch of
#                  training on 25 trees; --infer-on dev with the data as its dev set)
#   peer e2e       trees / the peer's process age at the end of its first inference (its
#                  process_age_at_train_end_s plus infer_seconds of epoch 1: Python and torch
#                  start-up, reading the data and weights, the warm-up training on 25 trees and
#                  the cold inference), what "pejit e2e" counts on pejit's side
# and the medians over the rounds of each ratio to the peer. Timing needs a quiet host.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-bench
data=../shared/data/sst/train.txt
limit=0
reps=5
ckpt=""
extra=""
out=$(mktemp -d /tmp/pejit-eval.XXXXXX)
while getopts "b:d:l:n:o:k:x:h" o; do
  case $o in
  b) build=$OPTARG ;;
  d) data=$OPTARG ;;
  l) limit=$OPTARG ;;
  n) reps=$OPTARG ;;
  o) out=$OPTARG; mkdir -p "$out" ;;
  k) ckpt=$OPTARG ;;
  x) extra=$OPTARG ;;
  *) sed -n 2,27p "$0"; exit 2 ;;
  esac
done
if [ ! -f "$data" ]; then
  data=$out/sst_like.txt
  "$build/pejit" gen sst --trees 8544 --seed 1 -o "$data" >/dev/null
fi
if [ "$limit" -gt 0 ]; then
  head -n "$limit" "$data" >"$out/data.txt"
  data=$out/data.txt
fi
model=examples/treelstm/treelstm.pe
if [ -z "$ckpt" ]; then
  ckpt=$out/model.ckpt
  taskset -c 0 "$build/pejit" train "$model" --data "$data" --epochs 1 --no-train-eval \
    --progress 0 --save "$ckpt" >/dev/null 2>&1
fi
have_torch=0
if /usr/bin/python3 -c "import torch" 2>/dev/null; then have_torch=1; fi

pejit_eval() { # OUTFILE [more flags]
  local f=$1
  shift
  # shellcheck disable=SC2086
  taskset -c 0 "$build/pejit" eval "$model" --params "$ckpt" --data "$data" --json $extra "$@" \
    >"$f" 2>/dev/null
}

echo "start $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)  data $data  build $build  flags '$extra'"
# The warm kernel cache: filled once, before the rounds.
pejit_eval "$out/fill-kc.json" --kernel-cache "$out/kc"
for rep in $(seq 1 "$reps"); do
  t0=$(date +%s.%N)
  pejit_eval "$out/e2e.$rep.json"
  t1=$(date +%s.%N)
  echo "{\"wall_s\": $(/usr/bin/python3 -c "print($t1 - $t0)")}" >"$out/wall.$rep.json"
  pejit_eval "$out/steady.$rep.json" --rounds 4
  pejit_eval "$out/warmk.$rep.json" --kernel-cache "$out/kc"
  if [ $have_torch = 1 ]; then
    bench/torch/run_peer.sh 1 batched "$data" 2 25 --dev "$data" --infer-on dev \
      --checkpoint "$ckpt" >"$out/peer.$rep.json" 2>/dev/null || true
  fi
done
echo "end   $(date -u +%FT%TZ)  load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$out" "$reps" <<'EOF'
import json, os, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
med = statistics.median
def lines(name):
    p = os.path.join(out, name)
    if not os.path.exists(p):
        return []
    return [json.loads(l) for l in open(p) if l.strip().startswith("{")]
def one(name):
    ls = lines(name)
    return ls[-1] if ls else None
def peer_e2e(name):
    ls = lines(name)
    if not ls or "process_age_at_train_end_s" not in ls[0]:
        return None
    f = ls[0]
    return f["infer_trees"] / (f["process_age_at_train_end_s"] + f["infer_seconds"])
keys = ("e2e", "first", "steady", "warm-k", "peer", "peer-e2e")
rows = {k: [] for k in keys}
print(f"{'round':>5} " + " ".join(f"{k:>9}" for k in keys) + "   trees/s")
for r in range(1, reps + 1):
    e, w, s, k, p = (one(f"{n}.{r}.json") for n in ("e2e", "wall", "steady", "warmk", "peer"))
    if not (e and w and s and k):
        print(f"{r:>5} (a pejit run failed: see {out})")
        continue
    n = e["trees"]
    vals = {"e2e": n / w["wall_s"], "first": e["trees_per_s"],
            "steady": n / med(s["round_seconds"][1:]), "warm-k": k["trees_per_s"],
            "peer": p["infer_trees_per_s"] if p else None,
            "peer-e2e": peer_e2e(f"peer.{r}.json")}
    for key, v in vals.items():
        if v is not None:
            rows[key].append(v)
    cells = " ".join(f"{v:>9.0f}" if v is not None else f"{'-':>9}" for v in vals.values())
    print(f"{r:>5} {cells}")
    vals["round"] = r
    rows.setdefault("pairs", []).append(vals)
pairs = rows.get("pairs", [])
print(f"{'median':>5} " + " ".join(f"{med(rows[k]):>9.0f}" if rows[k] else f"{'-':>9}"
                                 for k in keys))
with_peer = [p for p in pairs if p["peer"]]
if with_peer:
    for key in ("steady", "warm-k", "first", "e2e"):
        rs = [p[key] / p["peer"] for p in with_peer]
        print(f"pejit {key:<6} / peer: median {med(rs):.2f}  (min {min(rs):.2f}, max {max(rs):.2f}, "
              f"{len(rs)} pairs)")
    with_e2e = [p for p in with_peer if p["peer-e2e"]]
    if with_e2e:
        rs = [p["e2e"] / p["peer-e2e"] for p in with_e2e]
        print(f"pejit e2e    / peer e2e: median {med(rs):.2f}  (min {min(rs):.2f}, "
              f"max {max(rs):.2f}, {len(rs)} pairs; whole processes, start to first scores)")
else:
    print("no peer figures (PyTorch missing, or its runs failed)")
EOF
echo "raw outputs: $out"
