// Graph-wide analyses on a Boost.Graph view of a Graph: a topological order, reachability
// along or against the dataflow edges, and liveness (what a set of outputs needs). The Boost
// types stay inside boost_adaptor.cpp, so including this header costs nothing.
#pragma once

#include "src/graph/graph.h"

#include <span>
#include <vector>

namespace pejit::graph {

/// Which way reachability follows an edge operand -> user.
enum class Direction : uint8_t {
  Users,    ///< from a node to everything computed from it (descendants)
  Operands, ///< from a node to everything it is computed from (ancestors)
};

/// Every node, operands before users (Boost topological_sort over the edges operand -> user).
std::vector<NodeId> topological_order(const Graph& g);

/// by id: true for the roots and every node reachable from them in direction `dir`.
std::vector<bool> reachable_from(const Graph& g, std::span<const NodeId> roots, Direction dir);

/// by id: true for the nodes that `outputs` need (outputs included); the rest is dead code.
/// With no outputs given, the graph's own outputs() are used.
std::vector<bool> live(const Graph& g, std::span<const NodeId> outputs = {});

/// Number of edges (operand uses, counted with multiplicity) in the Boost view.
size_t num_edges(const Graph& g);

} // namespace pejit::graph
