// eliminate_common_subexpressions: a rebuild through the hash-consing Graph::add functions.
#include "specializer/passes/eliminate_common_subexpressions.h"

#include "specializer/passes/rebuild.h"

namespace pejit::specializer::passes {

graph::Graph eliminate_common_subexpressions(const graph::Graph& g) {
  graph::Graph out;
  std::vector<graph::NodeId> map(g.size(), graph::kNoNode);
  std::vector<graph::NodeId> ops;
  for (size_t i = 0; i < g.size(); ++i) {
    const graph::Node& n = g.nodes()[i];
    ops.clear();
    for (graph::NodeId o : n.operands)
      ops.push_back(map[static_cast<size_t>(o)]);
    map[i] = copy_node(out, n, ops);
  }
  copy_outputs(g, out, map);
  return out;
}

} // namespace pejit::specializer::passes
