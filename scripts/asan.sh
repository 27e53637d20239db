#!/usr/bin/env bash
# A representative subset of the test suite under AddressSanitizer + UBSan, sized to keep CI
# within its time: builds build-asan/ (-DPEJIT_ASAN=ON: any UB aborts the test) with the core,
# runtime, specializer and JIT test executables and runs them: the parser and its fuzz test,
# the checker, the generic interpreter and its deep-value tests, every op's reference kernel
# and gradient, the graphs; the engine, plans on reference and JIT kernels, sessions, the data
# readers and their fuzz tests, checkpoints, the trainer and the CLI (deep inputs included);
# partial evaluation, planning, the golden dumps and the random programs; the code generators.
# `--all` builds everything and runs every ctest test but the out-of-tree install check, the
# Python package and the MPI jobs (they load uninstrumented code: Open MPI keeps memory to the
# end, which LeakSanitizer would report): the runtime, JIT and specializer executables too,
# several times longer. A separate stage of .ci/run, after scripts/tsan.sh.
# Usage: scripts/asan.sh [--all]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# -O1 -g1: the sanitizers' usual optimization (quicker to build, still fast enough to run the
# suite) and line tables for the reports' stacks. No NDEBUG: the assertions of header-only
# libraries (nlohmann-json's on a missing key) stay on.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DPEJIT_ASAN=ON -DPEJIT_BENCH=OFF -DPEJIT_PYTHON=OFF >/dev/null
if [[ "${1:-}" == "--all" ]]; then
  cmake --build build-asan
else
  cmake --build build-asan --target pejit_core_tests pejit_runtime_tests \
    pejit_specializer_tests pejit_jit_tests
fi

# Why each option:
# - halt_on_error / abort_on_error: the first report fails the test (ASan's default for
#   errors already; spelled out so that no report can scroll by in a passing test).
# - detect_leaks=1: leaks are checked (the default on Linux; spelled out because there is
#   no suppression list: a leak, ours or a library's, fails the test).
# - check_initialization_order=1: a static initializer that reads another file's
#   not-yet-initialized statics (the op registry's tables) is reported.
# - UBSAN print_stacktrace=1: a UB report shows where it came from.
export ASAN_OPTIONS="halt_on_error=1 abort_on_error=1 detect_leaks=1 check_initialization_order=1"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1"
# ASan's redzones (and -O1's lighter inlining) make each stack frame several times larger, so
# the interpreter's guard, sized from the thread's real stack, would stop the tests' deep
# recursions (1,000 calls) early: the main thread gets a larger stack instead.
ulimit -s 65536
# Left out: the one case that throws on a thread whose stack (sized from its deep input) is
# larger than ASan's bound for a stack it can unpoison on a throw (64 MiB): GCC 12's ASan then
# reports a stack-use-after-scope inside its own sigaltstack interceptor, a false positive it
# announces itself ("ASan is ignoring requested __asan_handle_no_return ... False positive
# error reports may follow"). The case runs in every other build.
big_stack_throw="recursion past the bound names the bound" # a prefix of its name
if [[ "${1:-}" == "--all" ]]; then
  ctest --test-dir build-asan --output-on-failure -j2 --timeout 900 -LE install \
    -E "python_|dist_|$big_stack_throw"
  echo "asan: test suite clean under AddressSanitizer and UBSan"
  exit 0
fi
build-asan/tests/pejit_core_tests
build-asan/tests/pejit_specializer_tests
build-asan/tests/jit/pejit_jit_tests
# The runtime cases one process each, two at a time (ctest's label for that executable).
ctest --test-dir build-asan --output-on-failure -j2 --timeout 900 -L runtime -E "$big_stack_throw"
echo "asan: core, specializer, JIT and runtime tests clean under AddressSanitizer and UBSan" \
  "(--all: the suite)"
