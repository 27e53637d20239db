// Dead-code elimination: keeps what the graph's outputs need (graph::live), nothing else.
#pragma once

#include "src/graph/graph.h"

namespace pejit::specializer::passes {

/// A copy of `g` with only the nodes its outputs need, in the same relative order, outputs
/// kept in order. Input slots keep their numbers (an unread input simply disappears).
graph::Graph eliminate_dead_code(const graph::Graph& g);

} // namespace pejit::specializer::passes
