#!/usr/bin/env bash
# Data-parallel `pejit train` on one machine (docs/distributed.md): rounds of interleaved runs
# on the same data and cores of
#   one process, 1 thread, global batch B        (the reference)
#   one process, T threads (T = the CPUs here)   (the best single process on these cores)
#   one process, 1 thread, batch ceil(B/N)       (a rank's compute alone, for the model)
#   mpirun -np N, 1 thread per rank              (N = 2, 3, ...)
# Each run's steady step time is the median over epochs 1.. (epoch 0 compiles) of seconds per
# batch; every ratio is against the reference of the same round. Writes one JSON line per run
# to OUT (for bench/dp_model.py) and prints the medians of the ratios.
#
#   bench/dp.sh [options]
#     -p PEJIT    the pejit binary (default build-bench/pejit, else build/pejit)
#     -d FILE     training data (default ../shared/data/sst/train.txt, else 8,544 generated trees)
#     -N "2 3"    rank counts (default "2 3")
#     -B BATCH    global batch (default 25)
#     -n ROUNDS   rounds (default 3)
#     -e EPOCHS   epochs per run (default 3)
#     -m MODE     --mode of pejit train (default specialized)
#     -o OUT      JSON lines written (default dp_runs.jsonl)
set -euo pipefail
cd "$(dirname "$0")/.."
pejit="" data=../shared/data/sst/train.txt ranks="2 3" batch=25 rounds=3 epochs=3
mode=specialized out=dp_runs.jsonl
while getopts "p:d:N:B:n:e:m:o:h" o; do
  case $o in
  p) pejit=$OPTARG ;;
  d) data=$OPTARG ;;
  N) ranks=$OPTARG ;;
  B) batch=$OPTARG ;;
  n) rounds=$OPTARG ;;
  e) epochs=$OPTARG ;;
  m) mode=$OPTARG ;;
  o) out=$OPTARG ;;
  *) sed -n 2,18p "$0"; exit 2 ;;
  esac
done
# shellcheck source=bench/options.sh
. bench/options.sh
bench_pejit
command -v mpirun >/dev/null || { echo "dp.sh: mpirun not found (scripts/setup.sh installs it)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bench_gen_data "$pejit" "$tmp"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cpus=$(nproc)
model=examples/treelstm/treelstm.pe
common=(--data "$data" --epochs "$epochs" --mode "$mode" --json --progress 0 --no-train-eval
  --seed 1)
: >"$out"

# run NAME RANKS THREADS BATCH: one run; appends {"name", "ranks", "threads", "batch",
# "step_s", "comm": rank 0's comm over the steady epochs, "bytes_per_step"} to OUT.
run() {
  local name=$1 np=$2 threads=$3 b=$4
  local cmd=("$pejit" train "$model" "${common[@]}" --batch "$b" --threads "$threads")
  if ((np > 1)); then
    local bind=core # one core per rank; more ranks than cores share them
    if ((np > cpus)); then bind=none; fi
    cmd=(mpirun -np "$np" --oversubscribe --bind-to "$bind" "${cmd[@]}")
  fi
  "${cmd[@]}" >"$tmp/run.json" 2>"$tmp/run.err" || { cat "$tmp/run.err" >&2; exit 1; }
  /usr/bin/python3 - "$tmp/run.json" "$name" "$np" "$threads" "$b" >>"$out" <<'PY'
import json, statistics, sys
f, name, np, threads, b = sys.argv[1:]
ep = [json.loads(l) for l in open(f) if l.startswith("{")]
steady = ep[1:] if len(ep) > 1 else ep
step = statistics.median(e["seconds"] / e["batches"] for e in steady)
comm = {}
if "comm" in ep[-1]:
    nb = sum(e["batches"] for e in steady)
    comm = {k: sum(e["comm"][k] for e in steady) / nb for k in
            ("wait_seconds", "dense_bytes", "sparse_bytes", "reductions", "overlapped")}
print(json.dumps({"name": name, "ranks": int(np), "threads": int(threads), "batch": int(b),
                  "step_s": step, "loss": ep[-1]["loss"], "per_step": comm}))
PY
  tail -1 "$out"
}

for ((r = 1; r <= rounds; ++r)); do
  echo "== round $r" >&2
  run ref 1 1 "$batch"
  if ((cpus > 1)); then run threads 1 "$cpus" "$batch"; fi
  for np in $ranks; do
    run "slice$np" 1 1 $(((batch + np - 1) / np))
    run "ranks$np" "$np" 1 "$batch"
  done
done
/usr/bin/python3 - "$out" "$batch" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
rounds, cur = [], None
for r in runs:
    if r["name"] == "ref":
        cur = {}; rounds.append(cur)
    cur[r["name"]] = r
print(f"{len(rounds)} rounds; steady step time, and global trees/s as a ratio to one process "
      f"on one thread (median over rounds, min..max):")
for name in rounds[0]:
    ratios = [rd["ref"]["step_s"] / rd[name]["step_s"] for rd in rounds if name in rd]
    steps = [rd[name]["step_s"] for rd in rounds if name in rd]
    r0 = rounds[0][name]
    b = int(sys.argv[2])
    note = "" if not name.startswith("slice") else " (its own batch, a rank's compute)"
    same = ""
    if not name.startswith("slice"):  # the same global batches as the reference
        rel = max(abs(rd[name]["loss"] - rd["ref"]["loss"]) / abs(rd["ref"]["loss"])
                  for rd in rounds if name in rd)
        same = f", last epoch's loss/node within {rel:.1e} of one process"
    print(f"  {name:8s} ranks {r0['ranks']} threads {r0['threads']} batch {r0['batch']:3d}: "
          f"{1e3 * statistics.median(steps):7.2f} ms/step, x{statistics.median(ratios):.3f} "
          f"({min(ratios):.3f}..{max(ratios):.3f}){note}{same}")
PY
