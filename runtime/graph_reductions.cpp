// GraphRunner's row reductions: the nodes of a template graph that run on a family-3 JIT kernel
// (jit/reduce_spec.h) once compiled: cross-entropy and its backward over per-row logits and
// labels, a gradient summed over the rows (GradOp::SumToShape of a per-row value to a shared
// one of the same size: a bias gradient), the backward pass's sum over the rows of a
// parameter gradient that is a per-row value, and the reductions along each row: a per-row
// value's `sum` and `mean` (no axis), `softmax` and `log_softmax` (over the last axis) and
// their gradients. Until compiled (and for a batch with a label out of range, which the
// reference kernel then reports) the reference kernels run. The sums and means give the
// reference's bits; the kinds with e^x agree with it to ~1e-6 relative, the reference being
// compiled with contracted multiply-adds (reduce_codegen.cpp). Not on kernels: sum and mean
// along an axis of a per-row matrix, and i32 sums.
#include "runtime/graph_runs.h"

#include "src/kernels/kernels.h"

namespace pejit::runtime {

using graph::Kind;
using graph::Node;
using graph::NodeId;
using ops::GradOp;
using ops::OpId;

using detail::with_rows;

namespace {

bool dense(const Tensor& t, DType dtype, int64_t numel) {
  return t.defined() && t.dtype() == dtype && t.numel() == numel;
}

} // namespace

void GraphRunner::plan_reductions() {
  const graph::Graph& g = tg_.g;
  reduction_of_.assign(g.size(), -1);
  auto rows_of = [&](NodeId o, DType dtype, size_t rank) {
    const Node& n = g.node(o);
    return cls_[static_cast<size_t>(o)] == RowClass::Rows && n.type.dtype == dtype &&
           n.type.dims.size() == rank;
  };
  auto add = [&](NodeId id, jit::ReduceKind kind, int64_t width, bool param_sum,
                 int64_t per_row = 1) {
    if (width < 1 || per_row < 1)
      return;
    if (!param_sum)
      reduction_of_[static_cast<size_t>(id)] = static_cast<int32_t>(reductions_.size());
    reductions_.push_back({id, {.kind = kind, .width = width}, param_sum, per_row, nullptr});
  };
  // A per-row f32 value of rank >= 1 as rows of its last axis: (width, rows per plan row).
  auto along = [&](NodeId o) -> std::pair<int64_t, int64_t> {
    const Node& x = g.node(o);
    if (cls_[static_cast<size_t>(o)] != RowClass::Rows || x.type.dtype != DType::F32 ||
        x.type.dims.empty() || x.type.dims.back() < 1)
      return {0, 0};
    return {x.type.dims.back(), x.type.numel() / x.type.dims.back()};
  };
  for (NodeId id = 0; id < static_cast<NodeId>(g.size()); ++id) {
    const Node& n = g.node(id);
    RowClass me = cls_[static_cast<size_t>(id)];
    if (n.kind == Kind::Op && n.op() == OpId::CrossEntropy && me == RowClass::Rows &&
        rows_of(n.operands[0], DType::F32, 1) && rows_of(n.operands[1], DType::I32, 0))
      add(id, jit::ReduceKind::CrossEntropy, g.node(n.operands[0]).type.dims[0], false);
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
    if (n.grad_op() == GradOp::CrossEntropyBwd && me == RowClass::Rows &&
        rows_of(n.operands[0], DType::F32, 1) && rows_of(n.operands[1], DType::I32, 0) &&
        rows_of(n.operands[2], DType::F32, 0))
      add(id, jit::ReduceKind::CrossEntropyBwd, g.node(n.operands[0]).type.dims[0], false);
    // A sum over the rows that sum_to_shape then leaves as it is.
    if (n.grad_op() == GradOp::SumToShape && me == RowClass::Summed && n.type.dtype == DType::F32 &&
        cls_[static_cast<size_t>(n.operands[0])] == RowClass::Rows &&
        g.node(n.operands[0]).type.dtype == DType::F32 &&
        g.node(n.operands[0]).type.dims == n.type.dims)
      add(id, jit::ReduceKind::SumRows, n.type.numel(), false);
  }
  for (NodeId o : tg_.bwd_param_grads)
    if (o != graph::kNoNode && cls_[static_cast<size_t>(o)] == RowClass::Rows &&
        g.node(o).type.dtype == DType::F32)
      add(o, jit::ReduceKind::SumRows, g.node(o).type.numel(), true);
}

std::vector<GraphRunner::ReduceRun> GraphRunner::reduce_runs() const {
  std::vector<ReduceRun> out;
  for (const auto& r : reductions_)
    out.push_back({r.node, r.spec, r.param_sum, r.kernel ? r.kernel->schedule : std::string(),
                   r.kernel ? r.kernel->schedule_source : std::string()});
  return out;
}

bool GraphRunner::run_reduction(NodeId id, State& st, GraphRunStats& stats) const {
  if (reduction_of_.empty() || reduction_of_[static_cast<size_t>(id)] < 0)
    return false;
  const Reduction& r = reductions_[static_cast<size_t>(reduction_of_[static_cast<size_t>(id)])];
  if (!r.kernel)
    return false;
  const Node& n = tg_.g.node(id);
  auto val = [&](size_t i) -> const Tensor& { return st.vals[static_cast<size_t>(n.operands[i])]; };
  const int64_t rows = st.rows, w = r.spec.width, krows = rows * r.per_row;
  const jit::ReduceKind kind = r.spec.kind;
  const bool ce = kind == jit::ReduceKind::CrossEntropy || kind == jit::ReduceKind::CrossEntropyBwd;
  // Operands as the kernel reads them (a caller's odd layout goes to the reference kernel).
  if (!dense(val(0), DType::F32, krows * w) || (ce && !dense(val(1), DType::I32, rows)) ||
      (kind == jit::ReduceKind::CrossEntropyBwd && !dense(val(2), DType::F32, rows)) ||
      (!ce && jit::reduce_inputs(kind) == 2 && !dense(val(1), DType::F32, krows * w)))
    return false;
  auto t0 = stats.profile ? ProfileClock::now() : ProfileClock::time_point{};
  Tensor y = Tensor::empty(
      DType::F32, kind == jit::ReduceKind::SumRows ? n.type.shape() : with_rows(rows, n.type.dims));
  const void* in[3] = {};
  for (int i = 0; i < jit::reduce_inputs(kind); ++i)
    in[i] = val(static_cast<size_t>(i)).raw();
  void* out[1] = {y.raw()};
  if (r.kernel->reduce.fn(in, out, krows) >= 0)
    return false; // a label out of range: the reference kernel says which
  st.vals[static_cast<size_t>(id)] = std::move(y);
  if (stats.profile)
    record(stats.time, Family::Other, t0);
  stats.jit_reductions++;
  return true;
}

Tensor GraphRunner::sum_rows(NodeId id, const Tensor& v, int64_t rows, GraphRunStats& stats) const {
  auto t0 = stats.profile ? ProfileClock::now() : ProfileClock::time_point{};
  for (const auto& r : reductions_) {
    if (!r.param_sum || r.node != id || !r.kernel || !dense(v, DType::F32, rows * r.spec.width) ||
        v.rank() < 1 || v.dim(0) != rows)
      continue;
    Shape s;
    for (size_t d = 1; d < v.rank(); ++d)
      s.push_back(v.shape()[d]);
    Tensor y = Tensor::empty(DType::F32, s);
    const void* in[1] = {v.raw()};
    void* out[1] = {y.raw()};
    r.kernel->reduce.fn(in, out, rows);
    stats.jit_reductions++;
    if (stats.profile)
      record(stats.time, Family::Other, t0);
    return y;
  }
  Tensor y = kernels::sum_axis(v, 0);
  if (stats.profile)
    record(stats.time, Family::Other, t0);
  return y;
}

} // namespace pejit::runtime
