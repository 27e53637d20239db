// Shared plumbing of the graph passes: a pass rebuilds its input into a fresh Graph, node by
// node, through copy_node (which re-interns, so CSE comes for free), and carries the roots
// over in order with copy_outputs. Input slots are never renumbered by a pass.
#pragma once

#include "src/graph/graph.h"

#include <span>
#include <vector>

namespace pejit::specializer::passes {

/// Adds to `to` a node like `n` (kind, code, attr, index map, slot, value, output index) over
/// `operands` (ids in `to`) and returns its id: an existing one when an equal node exists.
graph::NodeId copy_node(graph::Graph& to, const graph::Node& n,
                        std::span<const graph::NodeId> operands);

/// Adds `from`'s outputs to `to` in order, each through `map` (old id -> new id); every
/// output must have been mapped.
void copy_outputs(const graph::Graph& from, graph::Graph& to,
                  const std::vector<graph::NodeId>& map);

/// The node of `g` that is input `slot`, or kNoNode when the graph no longer reads it.
graph::NodeId find_input(const graph::Graph& g, uint32_t slot);

} // namespace pejit::specializer::passes
