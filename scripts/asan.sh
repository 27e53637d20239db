#!/usr/bin/env bash
# The test suite under AddressSanitizer + UBSan: builds build-asan/ (-DPEJIT_ASAN=ON: any UB
# aborts the test) and runs every ctest test but the out-of-tree install check (it links an
# installed, uninstrumented consumer) and the Python package (its extension would need the ASan
# runtime preloaded into python3). A separate stage of .ci/run, after scripts/tsan.sh.
# Usage: scripts/asan.sh [ctest arguments...]   (e.g. -R fuzz to run a subset)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# -O1 -g1: the sanitizers' usual optimization (quicker to build, still fast enough to run the
# suite) and line tables for the reports' stacks. No NDEBUG: the assertions of header-only
# libraries (nlohmann-json's on a missing key) stay on.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DPEJIT_ASAN=ON -DPEJIT_BENCH=OFF -DPEJIT_PYTHON=OFF >/dev/null
cmake --build build-asan

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
ctest --test-dir build-asan --output-on-failure -j2 --timeout 900 -LE install "$@"
echo "asan: test suite clean under AddressSanitizer and UBSan"
