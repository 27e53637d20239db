#!/usr/bin/env bash
# Installs pejit from a build tree into a temporary prefix, moves the prefix elsewhere, builds
# examples/embed against it with find_package(pejit) in its own build tree, and runs it (it
# exits non-zero unless training lowers the loss). Usage: embed_out_of_tree.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
# The installed tree is relocatable: it is used from another place than it was installed to.
mv "$work/prefix" "$work/moved"
if grep -rq "$build\|$work/prefix" "$work/moved/lib/cmake/pejit"; then
  echo "the installed CMake package names a path of the build or install tree" >&2
  exit 1
fi
cmake -S "$src/examples/embed" -B "$work/embed" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/moved" >/dev/null
cmake --build "$work/embed" >/dev/null
"$work/embed/embed_example" "$src/examples/treelstm/treelstm.pe"
