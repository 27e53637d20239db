#!/usr/bin/env bash
# The unity build's name check. The libraries compile in batches of files (PEJIT_UNITY_BUILD,
# the top-level CMakeLists.txt), where a file-local function can be found, without an error, by
# another file's call to a function of that name. Builds the four libraries one file at a time
# without inlining (build-names/, -O0, no warnings: only its symbols are read) and runs
# scripts/unity_names.py on build/'s batches, which fails on any such name. The test files are
# batched too, each with its code in a namespace of its own (tests/CMakeLists.txt); the first
# check is that every test file has it. A separate stage of .ci/run, after scripts/test.sh has
# configured build/.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=0
checked=0
while IFS= read -r f; do
  checked=$((checked + 1))
  ns="tests_$(basename "$(dirname "$f")")_$(basename "$f" .cpp)"
  if ! grep -q "^namespace $ns {" "$f" || ! grep -q "^} // namespace $ns\$" "$f"; then
    echo "$f: its code must be in 'namespace $ns { ... } // namespace $ns' after its #includes"
    missing=1
  fi
done < <(find tests -name '*_test.cpp' -not -path 'tests/fuzz/*' | sort)
if [ "$missing" != 0 ] || [ "$checked" = 0 ]; then exit 1; fi
echo "unity_check: each of the $checked test files has its own namespace"
bash scripts/setup.sh
if [ ! -d build ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake -S . -B build-names -G Ninja -DCMAKE_BUILD_TYPE=None \
  -DCMAKE_CXX_FLAGS="-O0 -fno-inline -w" -DPEJIT_UNITY_BUILD=OFF -DPEJIT_TESTS=OFF \
  -DPEJIT_BENCH=OFF -DPEJIT_PYTHON=OFF >/dev/null
cmake --build build-names --target pejit_core pejit_specializer pejit_jit pejit_runtime
python3 scripts/unity_names.py build build-names
