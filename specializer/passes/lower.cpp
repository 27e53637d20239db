// The lowering pass (lower.h): the row classes, the deferrable weight gradients, then the
// kernel steps of every fused kernel, from the runs, panel cores and reductions that
// lower_runs.cpp, lower_panels.cpp and lower_reductions.cpp find.
#include "specializer/passes/lower.h"

#include "specializer/passes/lower_internal.h"
#include "src/ops/emitter.h"

#include <algorithm>

namespace pejit::specializer::passes {

namespace lowering {

using graph::Kind;
using graph::Node;
using graph::NodeId;
using ops::GradOp;
using ops::OpId;

void classify_rows(const TemplateGraph& tg, std::vector<RowClass>& cls, std::string& why) {
  const graph::Graph& g = tg.g;
  cls.assign(g.size(), RowClass::Shared);
  auto fail = [&](NodeId id, const std::string& what) {
    if (why.empty()) // appended piece by piece: GCC 12 -O3 warns (-Wrestrict) on "%" + s
      why.append("%")
          .append(std::to_string(id))
          .append(" ")
          .append(what)
          .append(": ")
          .append(graph::print_node(tg.g, id));
  };
  std::vector<RowClass> operand_cls;
  std::vector<size_t> operand_rank;
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& n = g.node(id);
    bool rows = false, summed = false;
    for (NodeId o : n.operands) {
      rows = rows || cls[static_cast<size_t>(o)] == RowClass::Rows;
      summed = summed || cls[static_cast<size_t>(o)] == RowClass::Summed;
    }
    RowClass& out = cls[static_cast<size_t>(id)];
    switch (n.kind) {
    case Kind::Input: {
      auto role = tg.slots[n.slot].role;
      out = role == InputSlot::Role::Arg || role == InputSlot::Role::Seed ? RowClass::Rows
                                                                          : RowClass::Shared;
      continue;
    }
    case Kind::Const:
      continue;
    case Kind::Gather:
    case Kind::Scatter:
      if (rows || summed)
        fail(id, "gather/scatter of per-row values");
      continue;
    default:
      break;
    }
    if (!rows && !summed)
      continue; // Shared
    // Every op, gradient helper and sum: the registry's batching rule decides.
    operand_cls.clear();
    operand_rank.clear();
    for (NodeId o : n.operands) {
      operand_cls.push_back(cls[static_cast<size_t>(o)]);
      operand_rank.push_back(rank_of(g.node(o)));
    }
    ops::RowNode rn = n.kind == Kind::SumN ? ops::RowNode::sum_n()
                      : n.kind == Kind::Op ? ops::RowNode::op(n.op())
                                           : ops::RowNode::grad(n.grad_op());
    ops::RowRuleResult r = ops::batched_row_class(rn, operand_cls, operand_rank);
    out = r.cls;
    if (!r.ok())
      fail(id, r.refusal);
  }
  // Argument gradients are per row; one summed over the rows would be a batched rule this
  // runner does not have (the interpreter takes such a template).
  for (NodeId o : tg.bwd_arg_grads)
    if (o != graph::kNoNode && cls[static_cast<size_t>(o)] == RowClass::Summed)
      fail(o, "an argument gradient summed over the rows");
}

namespace {

// The parts of each split: nodes with the same operand and attribute.
std::vector<std::vector<NodeId>> split_parts(const graph::Graph& g) {
  std::vector<std::vector<NodeId>> parts(g.size());
  for (NodeId a = 0; a < static_cast<NodeId>(g.size()); ++a) {
    const Node& na = g.node(a);
    if (na.kind != Kind::Op || na.op() != OpId::Split)
      continue;
    for (NodeId b = 0; b < static_cast<NodeId>(g.size()); ++b) {
      const Node& nb = g.node(b);
      if (b != a && nb.kind == Kind::Op && nb.op() == OpId::Split && nb.operands == na.operands &&
          nb.attr.ints == na.attr.ints)
        parts[static_cast<size_t>(a)].push_back(b);
    }
  }
  return parts;
}

// Weight gradients x^T·gy that are a parameter's whole gradient and read by nothing else.
std::vector<bool> deferrable_weight_grads(const TemplateGraph& tg,
                                          const std::vector<RowClass>& cls) {
  const graph::Graph& g = tg.g;
  std::vector<bool> deferrable(g.size(), false);
  std::vector<int> users(g.size(), 0);
  for (const Node& n : g.nodes())
    for (NodeId o : n.operands)
      ++users[static_cast<size_t>(o)];
  for (NodeId o : tg.bwd_param_grads) {
    if (o == graph::kNoNode || users[static_cast<size_t>(o)] != 0)
      continue;
    const Node& n = g.node(o);
    if (n.kind == Kind::Grad && n.grad_op() == GradOp::MatMulGradB &&
        cls[static_cast<size_t>(o)] == RowClass::Summed && rank_of(g.node(n.operands[1])) == 1 &&
        rank_of(g.node(n.operands[0])) == 1 && rank_of(g.node(n.operands[2])) == 2 &&
        std::count(tg.bwd_param_grads.begin(), tg.bwd_param_grads.end(), o) == 1)
      deferrable[static_cast<size_t>(o)] = true;
  }
  return deferrable;
}

bool is_rows_gemm(const Lowering& l, NodeId id) {
  const Node& n = l.g.node(id);
  return l.cls(id) == RowClass::Rows &&
         ((n.kind == Kind::Op && n.op() == OpId::MatMul) ||
          (n.kind == Kind::Grad && n.grad_op() == GradOp::MatMulGradA));
}

// The step of one node, as an executor meets it outside a compiled run: the first that
// applies of a view, a fused GEMM or gather, a deferrable weight gradient, a reduction.
KernelStep node_step(const Lowering& l, NodeId id, const std::vector<int64_t>& core_run,
                     const std::vector<int64_t>& gather_run, bool sparse, bool alone) {
  const size_t i = static_cast<size_t>(id);
  const Node& n = l.g.node(id);
  if (sparse)
    return SparseEmbeddingGrad{id, !alone};
  if (!l.skip.empty() && l.skip[i])
    return InPlaceView{id};
  if (!l.fused.empty() && l.fused[i] && gather_run[i] >= 0)
    return GatherConcat{id, gather_run[i]};
  if (l.deferrable[i]) {
    int64_t w = -1;
    for (size_t k = 0; k < l.p.weight_grads.size(); ++k)
      if (l.p.weight_grads[k].node == id)
        w = static_cast<int64_t>(k);
    int param = -1;
    for (size_t j = 0; j < l.tg.bwd_param_grads.size(); ++j)
      if (l.tg.bwd_param_grads[j] == id)
        param = l.tg.param_index[j];
    return DeferredWeightGrad{id, param, w};
  }
  if (!l.reduction_of.empty() && l.reduction_of[i] >= 0) {
    const auto index = static_cast<size_t>(l.reduction_of[i]);
    const jit::ReduceKind kind = l.p.reductions[index].spec.kind;
    if (kind == jit::ReduceKind::CrossEntropy || kind == jit::ReduceKind::CrossEntropyBwd)
      return Loss{id, index};
    return RowReduction{id, index};
  }
  if (is_rows_gemm(l, id))
    return RowGemm{id, n.kind == Kind::Grad, core_run[i]};
  if (n.kind == Kind::Op && n.op() == OpId::Take && l.cls(id) == RowClass::Rows &&
      l.cls(n.operands[0]) == RowClass::Shared) {
    // The lookup's rows go straight into the caller's block when they are one result.
    const auto& outs = l.tg.fwd_outputs;
    int64_t result = -1;
    if (std::count(outs.begin(), outs.end(), id) == 1)
      result = std::find(outs.begin(), outs.end(), id) - outs.begin();
    return RowGather{id, result};
  }
  return ReferenceNode{id};
}

} // namespace

} // namespace lowering

KernelProgram lower(const TemplateGraph& tg, const LowerOptions& opt) {
  using namespace lowering;
  ops::register_kernels();
  const graph::Graph& g = tg.g;
  KernelProgram p;
  p.lowered = true;
  Lowering l{tg, g, p, {}, {}, {}, {}, {}, {}};
  p.split_parts = split_parts(g);
  classify_rows(tg, p.row_class, p.why);
  l.deferrable = deferrable_weight_grads(tg, p.row_class);
  p.kernels = p.supported() && opt.kernels;
  if (p.kernels) {
    plan_runs(l);
    plan_reductions(l);
    plan_weight_grads(l);
  }
  if (!p.supported())
    return p;
  // Which run each fused GEMM or gathered concat belongs to, numbering the runs in order.
  std::vector<int64_t> core_run(g.size(), -1), gather_run(g.size(), -1);
  size_t index = 0;
  for (auto* runs : {&l.fwd_runs, &l.bwd_runs})
    for (auto& k : *runs)
      for (ElementwiseRun& r : k) {
        r.index = index++;
        if (r.core != graph::kNoNode)
          core_run[static_cast<size_t>(r.core)] = static_cast<int64_t>(r.index);
        if (r.gather != graph::kNoNode)
          gather_run[static_cast<size_t>(r.gather)] = static_cast<int64_t>(r.index);
      }
  p.run_count = index;
  std::vector<bool> sparse(g.size(), false);
  for (NodeId o : tg.bwd_param_grads)
    if (o != graph::kNoNode && g.node(o).kind == Kind::Grad &&
        g.node(o).grad_op() == GradOp::TakeGrad)
      sparse[static_cast<size_t>(o)] = true;
  for (int pass = 0; pass < 2; ++pass) {
    const auto& ks = pass == 0 ? tg.fwd_kernels : tg.bwd_kernels;
    auto& runs = pass == 0 ? l.fwd_runs : l.bwd_runs;
    auto& out = pass == 0 ? p.fwd : p.bwd;
    out.assign(ks.size(), {});
    for (size_t ki = 0; ki < ks.size(); ++ki) {
      const auto& nodes = ks[ki].nodes;
      size_t next = 0;
      for (size_t i = 0; i < nodes.size(); ++i) {
        if (ki < runs.size() && next < runs[ki].size() && runs[ki][next].first == i)
          out[ki].steps.emplace_back(std::move(runs[ki][next++]));
        const size_t id = static_cast<size_t>(nodes[i]);
        out[ki].steps.push_back(node_step(l, nodes[i], core_run, gather_run,
                                          pass == 1 && sparse[id], nodes.size() == 1));
      }
    }
  }
  // How each parameter's gradient is finished.
  for (size_t j = 0; j < tg.bwd_param_grads.size(); ++j) {
    ParamGradStep s;
    s.node = tg.bwd_param_grads[j];
    s.param = tg.param_index[j];
    if (s.node == graph::kNoNode) {
      p.param_grads.push_back(s);
      continue;
    }
    const size_t o = static_cast<size_t>(s.node);
    using How = ParamGradStep::How;
    if (l.deferrable[o]) {
      s.how = How::Deferred;
      for (size_t k = 0; k < p.weight_grads.size(); ++k)
        if (p.weight_grads[k].node == s.node && s.weight_grad < 0)
          s.weight_grad = static_cast<int64_t>(k);
    } else if (sparse[o]) {
      s.how = How::Sparse;
    } else if (p.row_class[o] == RowClass::Rows) {
      s.how = How::SumRows;
      for (size_t k = 0; k < p.reductions.size(); ++k)
        if (p.reductions[k].param_sum && p.reductions[k].node == s.node && s.reduction < 0)
          s.reduction = static_cast<int64_t>(k);
    } else {
      s.how = p.row_class[o] == RowClass::Shared ? How::TimesRows : How::AsIs;
    }
    p.param_grads.push_back(s);
  }
  return p;
}

} // namespace pejit::specializer::passes
