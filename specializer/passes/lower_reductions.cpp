// The lowering's row reductions and weight-gradient GEMMs. Row reductions: the nodes that
// run on a family-3 JIT kernel (jit/reduce_spec.h) once compiled: cross-entropy and its
// backward over per-row logits and labels (or one of them shared by every row), a gradient summed
// over the rows (GradOp::SumToShape of a per-row value to a shared one of the same size: a bias
// gradient), the backward pass's sum over the rows of a parameter gradient that is a per-row value,
// and the reductions along each row: a per-row value's `sum` and `mean` (no axis), `softmax` and
// `log_softmax` (over the last axis) and their gradients. Not on kernels: sum and mean along an
// axis of a per-row matrix, and i32 sums. Weight gradients: every weight gradient x^T·gy that a
// caller may take (summed over all groups' rows in one GEMM per weight) gets a TN GEMM kernel spec
// (jit/gemm_codegen.h: m = x's width, n = gy's width, K the rows at run time, given as the
// groups' row stretches).
#include "specializer/passes/lower_internal.h"

namespace pejit::specializer::passes::lowering {

using graph::Kind;
using graph::Node;
using graph::NodeId;
using ops::GradOp;
using ops::OpId;

namespace {

// A cross-entropy backward over wide per-row logits reads the row statistics of the forward on
// the same logits and labels (jit::ReduceSpec::row_stats): one pass over each row instead of
// three (its max, its exponentials, their scaling). Narrow rows (a few classes, a vector or
// two) keep the kernels they had.
void link_row_stats(Lowering& l) {
  constexpr int64_t kStatsWidth = 256;
  auto& rs = l.p.reductions;
  for (ReductionSpec& b : rs) {
    if (b.spec.kind != jit::ReduceKind::CrossEntropyBwd || b.spec.shared_logits ||
        b.spec.width < kStatsWidth)
      continue;
    const Node& bn = l.g.node(b.node);
    for (size_t f = 0; f < rs.size(); ++f) {
      const Node& fn = l.g.node(rs[f].node);
      if (rs[f].spec.kind == jit::ReduceKind::CrossEntropy && rs[f].spec.width == b.spec.width &&
          !rs[f].spec.shared_logits && fn.operands[0] == bn.operands[0] &&
          fn.operands[1] == bn.operands[1]) {
        rs[f].spec.row_stats = b.spec.row_stats = true;
        b.stats_from = static_cast<int32_t>(f);
        break;
      }
    }
  }
}

} // namespace

void plan_reductions(Lowering& l) {
  const graph::Graph& g = l.g;
  l.reduction_of.assign(g.size(), -1);
  auto rows_of = [&](NodeId o, DType dtype, size_t rank) {
    const Node& n = g.node(o);
    return l.cls(o) == RowClass::Rows && n.type.dtype == dtype && n.type.dims.size() == rank;
  };
  auto add = [&](NodeId id, jit::ReduceKind kind, int64_t width, bool param_sum,
                 int64_t per_row = 1) {
    if (width < 1 || per_row < 1)
      return;
    if (!param_sum)
      l.reduction_of[static_cast<size_t>(id)] = static_cast<int32_t>(l.p.reductions.size());
    l.p.reductions.push_back({id, {.kind = kind, .width = width}, param_sum, per_row});
  };
  // Cross-entropy's logits and labels: per row, or one logits row or label shared by every
  // row (not both: the node is per row); the kernel reads a shared one with stride 0.
  auto loss = [&](NodeId id, jit::ReduceKind kind) {
    const Node& n = g.node(id);
    const NodeId x = n.operands[0], y = n.operands[1];
    const bool x_shared = l.cls(x) == RowClass::Shared, y_shared = l.cls(y) == RowClass::Shared;
    const Node &xn = g.node(x), &yn = g.node(y);
    if (!(rows_of(x, DType::F32, 1) ||
          (x_shared && xn.type.dtype == DType::F32 && xn.type.dims.size() == 1)) ||
        !(rows_of(y, DType::I32, 0) ||
          (y_shared && yn.type.dtype == DType::I32 && yn.type.dims.empty())) ||
        (x_shared && y_shared))
      return;
    if (kind == jit::ReduceKind::CrossEntropyBwd && !rows_of(n.operands[2], DType::F32, 0))
      return;
    add(id, kind, xn.type.dims[0], false);
    if (l.reduction_of[static_cast<size_t>(id)] >= 0) {
      jit::ReduceSpec& spec = l.p.reductions.back().spec;
      spec.shared_logits = x_shared;
      spec.shared_label = y_shared;
    }
  };
  // A per-row f32 value of rank >= 1 as rows of its last axis: (width, rows per plan row).
  auto along = [&](NodeId o) -> std::pair<int64_t, int64_t> {
    const Node& x = g.node(o);
    if (l.cls(o) != RowClass::Rows || x.type.dtype != DType::F32 || x.type.dims.empty() ||
        x.type.dims.back() < 1)
      return {0, 0};
    return {x.type.dims.back(), x.type.numel() / x.type.dims.back()};
  };
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& n = g.node(id);
    RowClass me = l.cls(id);
    if (n.kind == Kind::Op && n.op() == OpId::CrossEntropy && me == RowClass::Rows)
      loss(id, jit::ReduceKind::CrossEntropy);
    if (n.kind == Kind::Op && me == RowClass::Rows && n.type.dtype == DType::F32) {
      const OpId op = n.op();
      if (op == OpId::Softmax || op == OpId::LogSoftmax) {
        auto [w, per] = along(n.operands[0]);
        add(id, op == OpId::Softmax ? jit::ReduceKind::Softmax : jit::ReduceKind::LogSoftmax, w,
            false, per);
      }
      // A per-row value's sum or mean of all its elements: one row of its numel floats.
      if ((op == OpId::Sum || op == OpId::Mean) && n.attr.ints.empty() && n.type.dims.empty()) {
        auto [w, per] = along(n.operands[0]);
        add(id, op == OpId::Sum ? jit::ReduceKind::SumCols : jit::ReduceKind::MeanCols, w * per,
            false);
      }
    }
    if (n.kind != Kind::Grad)
      continue;
    if ((n.grad_op() == GradOp::SoftmaxBwd || n.grad_op() == GradOp::LogSoftmaxBwd) &&
        me == RowClass::Rows &&
        g.node(n.operands[0]).type.dims == g.node(n.operands[1]).type.dims &&
        along(n.operands[1]).first > 0) {
      auto [w, per] = along(n.operands[0]);
      add(id,
          n.grad_op() == GradOp::SoftmaxBwd ? jit::ReduceKind::SoftmaxBwd
                                            : jit::ReduceKind::LogSoftmaxBwd,
          w, false, per);
    }
    if (n.grad_op() == GradOp::CrossEntropyBwd && me == RowClass::Rows)
      loss(id, jit::ReduceKind::CrossEntropyBwd);
    // A sum over the rows that sum_to_shape then leaves as it is.
    if (n.grad_op() == GradOp::SumToShape && me == RowClass::Summed && n.type.dtype == DType::F32 &&
        l.cls(n.operands[0]) == RowClass::Rows && g.node(n.operands[0]).type.dtype == DType::F32 &&
        g.node(n.operands[0]).type.dims == n.type.dims)
      add(id, jit::ReduceKind::SumRows, n.type.numel(), false);
  }
  for (NodeId o : l.tg.bwd_param_grads)
    if (o != graph::kNoNode && l.cls(o) == RowClass::Rows && g.node(o).type.dtype == DType::F32)
      add(o, jit::ReduceKind::SumRows, g.node(o).type.numel(), true);
  link_row_stats(l);
}

void plan_weight_grads(Lowering& l) {
  const graph::Graph& g = l.g;
  for (size_t j = 0; j < l.tg.bwd_param_grads.size(); ++j) {
    NodeId o = l.tg.bwd_param_grads[j];
    if (o == graph::kNoNode || !l.deferrable[static_cast<size_t>(o)])
      continue;
    const Node& n = g.node(o);
    const Node& gy = g.node(n.operands[0]);
    const Node& x = g.node(n.operands[1]);
    if (gy.type.dtype != DType::F32 || x.type.dtype != DType::F32 || gy.type.dims.size() != 1 ||
        x.type.dims.size() != 1 || gy.type.dims[0] < 1 || x.type.dims[0] < 1)
      continue; // runs on the reference kernel
    jit::GemmSpec spec{.layout = jit::GemmLayout::TN,
                       .m = x.type.dims[0],
                       .n = gy.type.dims[0],
                       .stretches = true};
    l.p.weight_grads.push_back({o, l.tg.param_index[j], spec});
  }
}

} // namespace pejit::specializer::passes::lowering
