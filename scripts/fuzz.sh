#!/usr/bin/env bash
# Long fuzzing of one reader under libFuzzer, AddressSanitizer and UBSan (the targets and what
# they check: tests/fuzz/targets.h). Builds build-fuzz/ with clang-19 (-DPEJIT_LIBFUZZER=ON),
# then fuzzes for SECONDS from the target's seeds and the corpus kept in
# build-fuzz/corpus/TARGET; an input that breaks a promise is saved under
# build-fuzz/crashes/TARGET/ and the script fails. The seeded fuzz tests of the normal suite run
# the same checks on a fixed number of mutants.
# Usage: scripts/fuzz.sh TARGET SECONDS [libFuzzer flags...]
#        TARGET: trees, sentences, checkpoint or schedules
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/fuzz.sh trees|sentences|checkpoint|schedules SECONDS [libFuzzer flags...]"
if (($# < 2)); then
  echo "$usage" >&2
  exit 2
fi
target=$1
seconds=$2
shift 2
case "$target" in
trees | sentences | checkpoint | schedules) ;;
*)
  echo "fuzz: unknown target '$target'; $usage" >&2
  exit 2
  ;;
esac
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || ((seconds == 0)); then
  echo "fuzz: SECONDS must be a positive number, not '$seconds'" >&2
  exit 2
fi

bash scripts/setup.sh --fuzz
if [[ ! -f build-fuzz/CMakeCache.txt ]]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPEJIT_LIBFUZZER=ON -DPEJIT_BENCH=OFF -DPEJIT_PYTHON=OFF \
    >/dev/null
fi
cmake --build build-fuzz --target "pejit_fuzz_$target"

corpus=build-fuzz/corpus/$target
crashes=build-fuzz/crashes/$target
mkdir -p "$corpus" "$crashes"
log=build-fuzz/fuzz-$target.log
# Leaks are checked (libFuzzer's default): an input whose reading leaks is a failing input.
export ASAN_OPTIONS="abort_on_error=1"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1"
# -max_len: room for the mutator's deep nesting; -timeout: an input taking seconds is a hang.
set +e
PEJIT_FUZZ_SEED_DIR=$corpus "build-fuzz/tests/fuzz/pejit_fuzz_$target" \
  -max_total_time="$seconds" -max_len=131072 -timeout=20 -rss_limit_mb=4096 \
  -artifact_prefix="$crashes/" -print_final_stats=1 "$@" "$corpus" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
if ((rc != 0)); then
  echo "fuzz $target: FAILED after ${runs:-?} executions (exit $rc); inputs in $crashes/" >&2
  exit 1
fi
echo "fuzz $target: ${runs:-?} executions in ${seconds} s, clean"
