// differentiate(): reverse sweep over the nodes on a path from wrt to loss (found with the
// Boost reachability of boost_adaptor.h). A node's gradient is final once every user has been
// visited, which decreasing-id order guarantees (users have larger ids). A multi-result op
// (split) is differentiated once, at its smallest relevant result, when the gradients of all
// its results are final; results the rule needs but the graph lacks are added (dead code).
#include "src/graph/graph_emitter.h"

#include "src/graph/boost_adaptor.h"
#include "src/util/check.h"

#include <fmt/format.h>

#include <algorithm>

namespace pejit::graph {

using ops::Handle;

ops::Handle GraphEmitter::op(ops::OpId id, std::span<const Handle> in, const ops::Attr& attr) {
  PEJIT_CHECK(ops::op_num_results(id, attr) == 1) << "emitter op with several results";
  return g_.op(id, in, attr);
}

ops::Handle GraphEmitter::grad_op(ops::GradOp id, std::span<const Handle> in,
                                  const ops::Attr& attr) {
  return g_.grad(id, in, attr);
}

ops::Handle GraphEmitter::scalar(float v) {
  return g_.constant(v);
}

std::vector<int64_t> GraphEmitter::shape(Handle h) {
  return g_.type(h).dims;
}

namespace {

class Differentiator {
public:
  Differentiator(Graph& g, NodeId loss, std::span<const NodeId> wrt) : g_(g), em_(g) {
    needs_ = reachable_from(g, wrt, Direction::Users);
    auto anc = reachable_from(g, std::span<const NodeId>(&loss, 1), Direction::Operands);
    for (size_t i = 0; i < needs_.size(); ++i)
      relevant_.push_back(needs_[i] && anc[i]);
    contrib_.resize(g.size());
  }

  std::vector<NodeId> run(NodeId loss, std::span<const NodeId> wrt) {
    ops::register_gradients();
    if (g_.type(loss).dtype != DType::F32)
      throw Error("differentiate: the loss must be f32, got " + g_.type(loss).str());
    size_t n = relevant_.size();
    if (relevant_[static_cast<size_t>(loss)])
      contrib_[static_cast<size_t>(loss)].push_back(g_.constant(1.0f, g_.type(loss).dims));
    for (size_t i = n; i-- > 0;) {
      if (!relevant_[i])
        continue;
      // Leaves and wrt nodes computed from no other wrt node end the sweep.
      const auto& ops = g_.nodes()[i].operands;
      if (std::none_of(ops.begin(), ops.end(),
                       [&](NodeId o) { return needs_[static_cast<size_t>(o)]; }))
        continue;
      visit(static_cast<NodeId>(i));
    }
    std::vector<NodeId> out;
    for (NodeId w : wrt) {
      NodeId gr = total(w);
      out.push_back(gr != kNoNode ? gr : g_.constant(0.0f, g_.type(w).dims));
    }
    return out;
  }

private:
  // The accumulated gradient of `id` (kNoNode if none); one SumN for fan-out.
  NodeId total(NodeId id) {
    if (static_cast<size_t>(id) >= contrib_.size())
      return kNoNode;
    auto& c = contrib_[static_cast<size_t>(id)];
    if (c.empty())
      return kNoNode;
    if (c.size() > 1)
      c = {g_.sum_n(c)};
    return c[0];
  }

  void add(NodeId to, NodeId grad) {
    if (grad == kNoNode || !needs_[static_cast<size_t>(to)])
      return;
    if (g_.type(to).dtype != DType::F32)
      return; // integer tensors take no gradient
    PEJIT_CHECK(g_.type(grad) == g_.type(to)) << "gradient " << g_.type(grad).str() << " for node %"
                                              << to << " of type " << g_.type(to).str();
    contrib_[static_cast<size_t>(to)].push_back(grad);
  }

  void visit(NodeId id) {
    const Node n = g_.node(id); // copy: the arena grows below
    switch (n.kind) {
    case Kind::Input:
    case Kind::Const:
      return;
    case Kind::Grad:
      throw Error(fmt::format("differentiate: %{} is {}, which has no gradient (second-order "
                              "derivatives are not supported)",
                              id, ops::grad_op_name(n.grad_op())));
    case Kind::SumN: {
      NodeId gy = total(id);
      for (NodeId o : n.operands)
        add(o, gy);
      return;
    }
    case Kind::Gather: {
      NodeId gy = total(id);
      if (gy != kNoNode)
        add(n.operands[0], g_.scatter(gy, n.index_map, g_.type(n.operands[0]).dims[0]));
      return;
    }
    case Kind::Scatter: {
      NodeId gy = total(id);
      if (gy != kNoNode)
        add(n.operands[0], g_.gather(gy, n.index_map));
      return;
    }
    case Kind::Op:
      visit_op(id, n);
      return;
    }
  }

  void visit_op(NodeId id, const Node& n) {
    int nres = ops::op_num_results(n.op(), n.attr);
    std::vector<Handle> outs, gouts;
    if (nres == 1) {
      outs = {id};
    } else {
      // Differentiate the application once, at its smallest relevant result.
      for (int j = 0; j < nres; ++j) {
        Node s = n;
        s.output_index = static_cast<uint32_t>(j);
        NodeId sid = g_.find(s);
        if (sid != kNoNode && sid < id && static_cast<size_t>(sid) < relevant_.size() &&
            relevant_[static_cast<size_t>(sid)])
          return;
        outs.push_back(sid);
      }
    }
    bool any = false;
    for (NodeId o : outs) {
      NodeId gy = o == kNoNode ? kNoNode : total(o);
      gouts.push_back(gy);
      any = any || gy != kNoNode;
    }
    if (!any)
      return;
    for (size_t j = 0; j < outs.size(); ++j)
      if (outs[j] == kNoNode)
        outs[j] = g_.op(n.op(), n.operands, n.attr, static_cast<uint32_t>(j));
    std::vector<Handle> gin;
    ops::op_def(n.op()).grad(em_, n.operands, outs, gouts, n.attr, gin);
    PEJIT_CHECK(gin.size() == n.operands.size())
        << "gradient rule of " << ops::op_name(n.op()) << " returned " << gin.size()
        << " gradients for " << n.operands.size() << " operands";
    for (size_t j = 0; j < gin.size(); ++j)
      add(n.operands[j], gin[j]);
  }

  Graph& g_;
  GraphEmitter em_;
  std::vector<bool> needs_;                  ///< by id: depends on some wrt node (or is one)
  std::vector<bool> relevant_;               ///< by id: needs_ and loss depends on it
  std::vector<std::vector<NodeId>> contrib_; ///< by id: gradient contributions so far
};

} // namespace

std::vector<NodeId> differentiate(Graph& g, NodeId loss, std::span<const NodeId> wrt) {
  (void)g.node(loss);
  for (NodeId w : wrt)
    (void)g.node(w);
  return Differentiator(g, loss, wrt).run(loss, wrt);
}

} // namespace pejit::graph
