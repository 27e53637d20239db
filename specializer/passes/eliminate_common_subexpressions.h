// Common-subexpression elimination. The graph is hash-consed, so a graph built in one go has
// no duplicates; they appear after a rewrite makes two operand lists equal (folding `x * 1`
// to `x`, say) while the rewritten graph kept both users. Rebuilding re-interns every node
// over its operands' new ids, and equal nodes collapse, to a fixed point in one sweep (id
// order is topological, so operands are final before their users).
#pragma once

#include "src/graph/graph.h"

namespace pejit::specializer::passes {

/// A copy of `g` in which structurally equal nodes are one node. Outputs kept in order (two
/// outputs may now be the same id); input slots unchanged; dead nodes are kept.
graph::Graph eliminate_common_subexpressions(const graph::Graph& g);

} // namespace pejit::specializer::passes
