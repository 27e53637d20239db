// eliminate_dead_code: one sweep in id order over graph::live's answer.
#include "specializer/passes/eliminate_dead_code.h"

#include "src/graph/boost_adaptor.h"
#include "specializer/passes/rebuild.h"

namespace pejit::specializer::passes {

graph::Graph eliminate_dead_code(const graph::Graph& g) {
  std::vector<bool> keep = graph::live(g);
  graph::Graph out;
  std::vector<graph::NodeId> map(g.size(), graph::kNoNode);
  std::vector<graph::NodeId> ops;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!keep[i])
      continue;
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
