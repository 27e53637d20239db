#!/usr/bin/env bash
# Sets up, builds (release, build/) and runs the whole test suite with ctest.
# Usage: scripts/test.sh            (what .ci/run calls)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build
ctest --test-dir build --output-on-failure -j2 --timeout 300
