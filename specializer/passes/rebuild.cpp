// copy_node and copy_outputs: the one place that knows how to re-add each node kind.
#include "specializer/passes/rebuild.h"

#include "src/util/check.h"

namespace pejit::specializer::passes {

using graph::Kind;
using graph::NodeId;

NodeId copy_node(graph::Graph& to, const graph::Node& n, std::span<const NodeId> operands) {
  switch (n.kind) {
  case Kind::Input:
    return to.input(n.slot, n.type);
  case Kind::Const:
    return to.constant(n.value, n.type.dims);
  case Kind::Op:
    return to.op(n.op(), operands, n.attr, n.output_index);
  case Kind::Grad:
    return to.grad(n.grad_op(), operands, n.attr);
  case Kind::Gather:
    return to.gather(operands[0], n.index_map);
  case Kind::Scatter:
    return to.scatter(operands[0], n.index_map, n.type.dims.at(0));
  case Kind::SumN:
    return to.sum_n(operands);
  }
  PEJIT_CHECK(false) << "unknown node kind";
  return graph::kNoNode;
}

void copy_outputs(const graph::Graph& from, graph::Graph& to, const std::vector<NodeId>& map) {
  for (NodeId o : from.outputs()) {
    NodeId m = map[static_cast<size_t>(o)];
    PEJIT_CHECK(m != graph::kNoNode) << "output %" << o << " was not carried over";
    to.add_output(m);
  }
}

NodeId find_input(const graph::Graph& g, uint32_t slot) {
  graph::Node n;
  n.kind = Kind::Input;
  n.slot = slot;
  return g.find(n);
}

} // namespace pejit::specializer::passes
