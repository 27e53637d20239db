#!/usr/bin/env bash
# The concurrency checks under ThreadSanitizer: builds build-tsan/ (-DPEJIT_TSAN=ON) and runs
# the engine's tests (dispatcher, plan cache, background TBB pipeline) and the parallel
# executor's (runtime/parallel.h: row blocks, weight gradients and optimizer updates on 2, 3 and
# 8 threads). A separate stage of .ci/run, outside the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPEJIT_TSAN=ON \
  -DPEJIT_BENCH=OFF >/dev/null
cmake --build build-tsan --target pejit_runtime_tests
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp"
build-tsan/tests/pejit_runtime_tests -ts=engine,threads
echo "tsan: engine and threads tests clean"
