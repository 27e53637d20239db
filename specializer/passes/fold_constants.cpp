// fold_constants: one sweep in id order; see the design note in fold_constants.h.
#include "specializer/passes/fold_constants.h"

#include "specializer/passes/rebuild.h"
#include "src/graph/evaluate.h"
#include "src/ops/emitter.h"

#include <algorithm>
#include <cstring>

namespace pejit::specializer::passes {

using graph::Graph;
using graph::Kind;
using graph::kNoNode;
using graph::NodeId;

namespace {

class Folder {
public:
  Folder(const Graph& g, std::vector<Tensor>& known, const FoldOptions& opt)
      : g_(g), known_(known), opt_(opt) {
    if (known_.size() < g.num_inputs())
      known_.resize(g.num_inputs());
    eval_inputs_ = known_;
  }

  Graph run() {
    std::vector<NodeId> map(g_.size(), kNoNode);
    is_known_.assign(g_.size(), false);
    std::vector<NodeId> ops;
    for (size_t i = 0; i < g_.size(); ++i) {
      const graph::Node& n = g_.nodes()[i];
      ops.clear();
      bool all_known = true;
      for (NodeId o : n.operands) {
        ops.push_back(map[static_cast<size_t>(o)]);
        all_known = all_known && is_known_[static_cast<size_t>(o)];
      }
      switch (n.kind) {
      case Kind::Input:
        is_known_[i] = n.slot < eval_inputs_.size() && eval_inputs_[n.slot].defined();
        break;
      case Kind::Const:
        is_known_[i] = true;
        break;
      default:
        is_known_[i] = all_known;
        break;
      }
      NodeId s = simplify(n, ops);
      if (s == kNoNode && is_known_[i] && n.kind != Kind::Input && n.kind != Kind::Const)
        s = fold(static_cast<NodeId>(i), n, ops);
      map[i] = s != kNoNode ? s : copy_node(out_, n, ops);
    }
    copy_outputs(g_, out_, map);
    return std::move(out_);
  }

private:
  const Graph& g_;
  std::vector<Tensor>& known_;
  const FoldOptions& opt_;
  std::vector<Tensor> eval_inputs_; ///< known values by slot of g_ (for graph::evaluate)
  std::vector<bool> is_known_;      ///< by id of g_
  Graph out_;

  bool is_const(NodeId id, float v) const {
    const graph::Node& n = out_.node(id);
    return n.kind == Kind::Const && n.value == v;
  }
  bool same_type(NodeId id, const graph::ShapeType& t) const { return out_.type(id) == t; }

  // An existing node of out_ equal in value to `n` over `ops`, or kNoNode.
  NodeId simplify(const graph::Node& n, const std::vector<NodeId>& ops) {
    if (n.kind == Kind::Op && n.op() == ops::OpId::MatMul && n.type.dtype == DType::F32 &&
        (is_const(ops[0], 0.0f) || is_const(ops[1], 0.0f)))
      return out_.constant(0.0f, n.type.dims); // a zero state @ W (see the design note)
    if (n.kind == Kind::Op && ops.size() == 2) {
      // x op e = x, e op x = x for the op's identity element e (the registry's Identity).
      NodeId a = ops[0], b = ops[1];
      if (auto e = ops::right_identity(n.op()); e && is_const(b, *e) && same_type(a, n.type))
        return a;
      if (auto e = ops::left_identity(n.op()); e && is_const(a, *e) && same_type(b, n.type))
        return b;
    }
    if (n.kind == Kind::Grad && ops.size() == 2) {
      ops::GradOp k = n.grad_op();
      if (ops::grad_op_def(k).shape_only && same_type(ops[0], n.type))
        return ops[0];
      const graph::Node& src = out_.node(ops[0]);
      if (k == ops::GradOp::BroadcastTo && src.kind == Kind::Const && n.type.dtype == DType::F32)
        return out_.constant(src.value, n.type.dims);
    }
    if (n.kind == Kind::SumN) {
      std::vector<NodeId> terms;
      for (NodeId o : ops)
        if (!is_const(o, 0.0f))
          terms.push_back(o);
      if (terms.size() == ops.size())
        return kNoNode;
      if (terms.empty())
        return out_.constant(0.0f, n.type.dims);
      return out_.sum_n(terms);
    }
    return kNoNode;
  }

  NodeId fold(NodeId id, const graph::Node& n, const std::vector<NodeId>& ops) {
    if (n.type.numel() > opt_.max_elements)
      return kNoNode;
    for (NodeId o : ops)
      if (out_.type(o).numel() > opt_.max_elements)
        return kNoNode;
    Tensor v = graph::evaluate(g_, eval_inputs_, std::span<const NodeId>(&id, 1))[0];
    if (v.dtype() == DType::F32 && v.numel() > 0) {
      const float* p = v.f32();
      bool uniform = std::all_of(p, p + v.numel(),
                                 [&](float x) { return std::memcmp(&x, p, sizeof(float)) == 0; });
      if (uniform)
        return out_.constant(p[0], n.type.dims);
    }
    if (v.numel() > opt_.max_const_input)
      return kNoNode;
    auto slot = static_cast<uint32_t>(std::max<size_t>(known_.size(), g_.num_inputs()));
    known_.resize(slot + 1);
    known_[slot] = v;
    return out_.input(slot, n.type);
  }
};

} // namespace

Graph fold_constants(const Graph& g, std::vector<Tensor>& known, const FoldOptions& opt) {
  return Folder(g, known, opt).run();
}

} // namespace pejit::specializer::passes
