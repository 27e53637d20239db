// Reverse-mode AD on the tensor graph. GraphEmitter implements ops::Emitter by adding nodes,
// so the registry's gradient rules (ops/grads.cpp), written once, build the backward graph
// here just as they compute eagerly on the generic path.
#pragma once

#include "src/graph/graph.h"
#include "src/ops/emitter.h"

#include <span>
#include <vector>

namespace pejit::graph {

/// An ops::Emitter whose handles are NodeIds of `g`: every call adds (or finds) a node.
class GraphEmitter final : public ops::Emitter {
public:
  explicit GraphEmitter(Graph& g) : g_(g) {}
  ops::Handle op(ops::OpId id, std::span<const ops::Handle> in, const ops::Attr& attr) override;
  ops::Handle grad_op(ops::GradOp id, std::span<const ops::Handle> in,
                      const ops::Attr& attr) override;
  ops::Handle scalar(float v) override;
  std::vector<int64_t> shape(ops::Handle h) override;
  using ops::Emitter::grad_op;
  using ops::Emitter::op;

private:
  Graph& g_;
};

/// Adds the gradient of `loss` (any f32 node; seeded with ones) with respect to each node of
/// `wrt` to `g` and returns their ids, in order. Walks the nodes between `wrt` and `loss` in
/// reverse topological (= decreasing id) order, calls each op's registry gradient rule through
/// a GraphEmitter, and sums fan-out with one SumN per node. Gather, Scatter and SumN nodes
/// have their own rules (scatter / gather by the same map, fan-out). A wrt node that `loss`
/// does not depend on gets a zero constant. Integer-valued nodes get no gradient.
/// Throws pejit::Error if the path from wrt to loss crosses a Grad node (no second order).
std::vector<NodeId> differentiate(Graph& g, NodeId loss, std::span<const NodeId> wrt);

} // namespace pejit::graph
