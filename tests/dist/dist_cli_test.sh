#!/usr/bin/env bash
# `mpirun -np N pejit train` (docs/distributed.md), checked against one process on the same
# global batches: losses and metrics within the tolerance of a reordered sum, every rank's
# parameters the same bits at every step (--check-replicas 1), gradient reductions overlapping
# the backward pass, seeded runs bitwise reproducible, resume bitwise; a killed rank or a rank
# that fails ends the whole job with an error and without a hang.
# Usage: dist_cli_test.sh MPIRUN PEJIT PEJIT_MPI. Exit 77 (Skipped) without MPI.
set -uo pipefail
mpirun=$1 pejit=$2 built=$3
if [[ "$built" != "ON" && "$built" != "1" ]]; then
  echo "skipped: this build has no MPI (PEJIT_MPI=OFF: install libopenmpi-dev)"
  exit 77
fi
if [[ -z "$mpirun" || ! -x "$mpirun" ]]; then
  echo "skipped: mpirun not found (install openmpi-bin)"
  exit 77
fi
python=/usr/bin/python3
[[ -x $python ]] || python=python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
here=$(cd "$(dirname "$0")" && pwd)
model=$here/../../examples/treelstm/treelstm.pe
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
fails=0
fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}
mpi() { # mpi NP ARGS...: a job that must end within its limit
  local np=$1
  shift
  timeout -k 5 120 "$mpirun" -np "$np" --oversubscribe "$@"
}

"$pejit" gen sst --trees 203 --seed 5 -o train.txt || exit 1
"$pejit" gen sst --trees 41 --seed 6 -o dev.txt || exit 1
base=("$model" --data train.txt --dev dev.txt --batch 25 --json --progress 0 --threads 1 --seed 7)
common=("${base[@]}" --epochs 2)

# 1. One process, and 2 and 3 ranks, on the same global batches.
"$pejit" train "${common[@]}" --mode specialized >one.json 2>one.err || fail "one process: $(tail -3 one.err)"
mpi 2 "$pejit" train "${common[@]}" --mode specialized --check-replicas 1 >two.json 2>two.err ||
  fail "2 ranks: $(tail -5 two.err)"
mpi 3 "$pejit" train "${common[@]}" --mode auto --check-replicas 1 >three.json 2>three.err ||
  fail "3 ranks: $(tail -5 three.err)"
$python - one.json two.json three.json <<'PY' || fail "2 and 3 ranks differ from one process"
import json, sys
def epochs(f):
    return [json.loads(l) for l in open(f) if l.startswith("{")]
one = epochs(sys.argv[1])
ok = len(one) == 2
for f, ranks in ((sys.argv[2], 2), (sys.argv[3], 3)):
    got = epochs(f)
    if len(got) != len(one):
        print(f, "has", len(got), "epochs"); ok = False; continue
    for a, b in zip(one, got):
        for k in ("loss", "dev_loss"):
            if abs(a[k] - b[k]) > 1e-4 * abs(a[k]):
                print(f, "epoch", a["epoch"], k, a[k], b[k]); ok = False
        for k in ("root_acc", "node_acc", "dev_root_acc", "dev_node_acc"):
            if abs(a[k] - b[k]) > 0.02:
                print(f, "epoch", a["epoch"], k, a[k], b[k]); ok = False
        if b["trees"] != a["trees"] or b["ranks"] != ranks or a["ranks"] != 1:
            print(f, "trees/ranks", a["trees"], b["trees"], b["ranks"]); ok = False
        if b["comm"]["dense_bytes"] <= 0 or b["comm"]["sparse_bytes"] <= 0:
            print(f, "no gradient bytes", b["comm"]); ok = False
    # Specialized plans start each weight's reduction when its GEMM is done.
    if ranks == 2 and got[-1]["comm"]["overlapped"] <= 0:
        print(f, "no reduction overlapped the backward pass", got[-1]["comm"]); ok = False
sys.exit(0 if ok else 1)
PY
[[ $(grep -c '^{' two.json) == 2 ]] || fail "rank 0 alone reports: $(grep -c '^{' two.json) JSON lines"

# 2. Seeded: the same bits again, and the checkpoints byte for byte.
mpi 2 "$pejit" train "${common[@]}" --save a.ckpt >a.json 2>a.err || fail "run a: $(tail -3 a.err)"
mpi 2 "$pejit" train "${common[@]}" --save b.ckpt >b.json 2>b.err || fail "run b: $(tail -3 b.err)"
$python - a.json b.json <<'PY' || fail "two seeded 2-rank runs differ"
import json, sys
a, b = ([json.loads(l) for l in open(f) if l.startswith("{")] for f in sys.argv[1:])
sys.exit(0 if [x["loss"] for x in a] == [x["loss"] for x in b] and
         [x["dev_loss"] for x in a] == [x["dev_loss"] for x in b] else 1)
PY
cmp -s a.ckpt b.ckpt || fail "two seeded 2-rank runs saved different checkpoints"

# 3. Resume: 1 epoch, then 1 more resumed, equals 2 straight (run a), bit for bit.
mpi 2 "$pejit" train "${base[@]}" --epochs 1 --save r.ckpt >/dev/null 2>r1.err || fail "resume part 1: $(tail -3 r1.err)"
mpi 2 "$pejit" train "${common[@]}" --resume r.ckpt --save r.ckpt >r2.json 2>r2.err || fail "resume part 2: $(tail -3 r2.err)"
cmp -s a.ckpt r.ckpt || fail "2 epochs on 2 ranks differ from 1 + 1 resumed"

# 4. A rank killed mid-run ends the job: an error, a non-zero exit, no hang; the checkpoint
#    of the last epoch is there to resume from.
start=$(date +%s)
# Rank 1 is killed once rank 0 has saved its first epoch (training is under way).
mpi 2 sh -c 'if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then
    (while [ ! -s k.ckpt ]; do sleep 0.2; done; kill -9 $$) &
  fi
  exec "$0" "$@"' "$pejit" train "$model" --data train.txt --epochs 1000 --progress 0 \
  --threads 1 --save k.ckpt --save-every 1 >k.out 2>k.err
rc=$?
took=$(($(date +%s) - start))
[[ $rc != 0 && $rc != 124 ]] || fail "killed rank: exit $rc"
((took < 60)) || fail "killed rank: the job took ${took}s to end"
grep -q "exited on signal 9" k.err || fail "killed rank: no message: $(tail -5 k.err)"
[[ -s k.ckpt ]] || fail "killed rank: no checkpoint"
"$pejit" eval "$model" --params k.ckpt --data dev.txt >/dev/null 2>ke.err || fail "killed rank: the checkpoint does not load: $(tail -2 ke.err)"

# 5. SIGTERM to one rank: every rank stops at the same batch, rank 0 saves, all exit 143; the
#    run resumes from there.
# The signal comes once rank 0 has saved its first epoch: both ranks handle signals by then.
mpi 2 sh -c 'if [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ]; then
    (while [ ! -s t.ckpt ]; do sleep 0.2; done; kill -TERM $$) &
  fi
  exec "$0" "$@"' "$pejit" train "$model" --data train.txt --epochs 1000 --progress 0 \
  --threads 1 --save t.ckpt --save-every 1 >t.out 2>t.err
rc=$?
[[ $rc == 143 ]] || fail "SIGTERM to rank 1: exit $rc, not 143: $(tail -5 t.err)"
# "at epoch N, batch B/M" (N in progress) or "after epoch N" (N done): resume to finish N + 1.
epoch=$(grep -o "interrupted by SIGTERM \(at\|after\) epoch [0-9]*" t.err | grep -o "[0-9]*$")
[[ -n "$epoch" ]] && epoch=$((epoch + 1))
if [[ -z "$epoch" ]]; then
  fail "SIGTERM to rank 1: no message from rank 0: $(head -3 t.err)"
else
  mpi 2 "$pejit" train "$model" --data train.txt --epochs "$epoch" --progress 0 --threads 1 \
    --resume t.ckpt --save t.ckpt >tr.out 2>tr.err || fail "resume after SIGTERM: $(tail -3 tr.err)"
  grep -q "^summary:" tr.out || fail "resume after SIGTERM: no summary"
fi

# 6. A rank that fails (its data file does not exist) ends the job with its message.
start=$(date +%s)
mpi 2 sh -c 'd=train.txt; [ "${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && d=missing.txt
  exec "$0" "$@" --data "$d"' "$pejit" train "$model" --epochs 2 --progress 0 --threads 1 \
  >f.out 2>f.err
rc=$?
took=$(($(date +%s) - start))
[[ $rc != 0 && $rc != 124 ]] || fail "failing rank: exit $rc"
((took < 60)) || fail "failing rank: the job took ${took}s to end"
grep -q "missing.txt" f.err || fail "failing rank: its message is not shown: $(tail -5 f.err)"

if ((fails > 0)); then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all data-parallel CLI checks passed"
