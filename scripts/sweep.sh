#!/usr/bin/env bash
# The wide differential sweep, on demand: random programs on random trees
# (tests/specializer/random_programs*.h, random_batches.h), generic path == residual == plans on
# the batching interpreter, reference kernels and JIT kernels (loss and every gradient), over a
# seed range far wider than CI's, in parallel chunks. Prints every failing seed (an assertion,
# an exception or a crash) with the command that reproduces it; exit 1 if any.
#
#   scripts/sweep.sh [-b BUILD] [-j JOBS] [-c CHUNK] [-o DIR] [--no-sums] FIRST COUNT
#   e.g. scripts/sweep.sh 1000 20000     (seeds 1000..20999, one job per core)
#   scripts/sweep.sh --report DIR        (the summary of a sweep's logs, an interrupted one too)
#
# BUILD (default build/) must hold pejit_specializer_tests. Chunks of CHUNK seeds (default 250)
# run as `pejit_specializer_tests --no-skip -tc="random programs: wide sweep"` with
# PEJIT_SWEEP_SEEDS=FIRST:COUNT; a chunk that crashes is resumed after the seed that crashed.
# --no-sums: programs whose symbolic sums never flow into a template call. Logs go to DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
jobs=$(nproc)
chunk=250
out=
sums=1
report=0
args=()
while [ $# -gt 0 ]; do
  case $1 in
  -b) build=$2; shift 2 ;;
  -j) jobs=$2; shift 2 ;;
  -c) chunk=$2; shift 2 ;;
  -o) out=$2; shift 2 ;;
  --no-sums) sums=0; shift ;;
  --report) report=1; out=$2; shift 2 ;;
  -h | --help) sed -n '2,15p' "$0"; exit 0 ;;
  *) args+=("$1"); shift ;;
  esac
done
if [ $report = 0 ] && { [ ${#args[@]} -ne 2 ] || ! [[ ${args[0]} =~ ^[0-9]+$ && ${args[1]} =~ ^[0-9]+$ ]]; }; then
  sed -n '2,15p' "$0" >&2
  exit 2
fi
first=${args[0]:-0}
count=${args[1]:-0}
bin=$build/tests/pejit_specializer_tests
if [ $report = 0 ] && [ ! -x "$bin" ]; then
  echo "sweep: $bin not found (cmake --build $build --target pejit_specializer_tests)" >&2
  exit 2
fi
out=${out:-$(mktemp -d /tmp/pejit-sweep.XXXXXX)}
mkdir -p "$out"
[ $report = 1 ] && sums=$(cat "$out/sums" 2>/dev/null || echo 1)
echo "$sums" >"$out/sums"
export PEJIT_SWEEP_NO_SUMS=$((1 - sums))

# One chunk: seeds [$1, $1 + $2). A run that dies (a signal, not a failed check) is resumed
# after the last seed it started, which is recorded as a crash.
run_chunk() {
  local from=$1 n=$2 end=$(($1 + $2)) log rc last
  while [ "$from" -lt "$end" ]; do
    log=$out/chunk-$from.log
    rc=0
    PEJIT_SWEEP_SEEDS=$from:$((end - from)) "$bin" --no-skip -tc="random programs: wide sweep" \
      >"$log" 2>&1 || rc=$?
    if [ "$rc" -le 1 ]; then # 0: clean; 1: failed checks, named in the log
      return 0
    fi
    last=$(grep -o '^sweep: seed [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
    last=${last:-$from}
    echo "crash $last rc=$rc" >>"$out/crashes"
    from=$((last + 1))
  done
}
export -f run_chunk
export bin out

start=$(date +%s)
if [ $report = 0 ]; then
  kind=$([ $sums = 1 ] && echo 'sums into templates' || echo 'no sums into templates')
  echo "sweep: seeds $first..$((first + count - 1)) ($kind), jobs $jobs, chunks of $chunk," \
    "logs in $out"
  for ((s = first; s < first + count; s += chunk)); do
    echo "$s $((first + count - s < chunk ? first + count - s : chunk))"
  done | xargs -P "$jobs" -n 2 bash -c 'run_chunk "$0" "$1"'
fi

# Failing seeds: doctest prints the captured `seed := N` with every failed check, and the
# catch in run_seeds "seed N threw".
failed=$(cat "$out"/chunk-*.log | grep -oE 'seed := [0-9]+|seed [0-9]+ threw' |
  grep -oE '[0-9]+' | sort -un || true)
crashed=$(cut -d' ' -f2 "$out/crashes" 2>/dev/null | sort -un || true)
ran=$(cat "$out"/chunk-*.log | grep -c '^sweep: seed ' || true)
other=$(grep -lE '^\[doctest\] Status: FAILURE' "$out"/chunk-*.log 2>/dev/null || true)
echo "sweep: $ran programs run$([ $report = 0 ] && echo " in $(($(date +%s) - start)) s")"
for s in $failed; do
  echo "FAIL seed $s: PEJIT_SWEEP_NO_SUMS=$PEJIT_SWEEP_NO_SUMS PEJIT_SWEEP_SEEDS=$s:1 $bin --no-skip -tc='random programs: wide sweep'"
done
for s in $crashed; do
  echo "CRASH seed $s: PEJIT_SWEEP_NO_SUMS=$PEJIT_SWEEP_NO_SUMS PEJIT_SWEEP_SEEDS=$s:1 $bin --no-skip -tc='random programs: wide sweep'"
done
if [ -z "$failed" ] && [ -n "$other" ]; then
  echo "FAIL without a seed (the sweep's totals) in: $other"
fi
if [ -n "$failed$crashed$other" ]; then
  exit 1
fi
echo "sweep: clean"
