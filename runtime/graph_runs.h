// GraphRunner's internals shared by its files (internal to runtime/): the row-shape helpers
// of the executor (graph_runner.cpp, graph_panels.cpp, graph_reductions.cpp).
#pragma once

#include "runtime/graph_runner.h"

#include "jit/kernel_cache.h"

#include <span>

namespace pejit::runtime::detail {

/// [rows, dims...].
inline Shape with_rows(int64_t rows, std::span<const int64_t> dims) {
  Shape s{rows};
  for (auto d : dims)
    s.push_back(d);
  return s;
}
/// A per-row value's rank (its type's rank: node types are per instance).
inline size_t rank_of(const graph::Node& n) {
  return n.type.dims.size();
}

} // namespace pejit::runtime::detail
