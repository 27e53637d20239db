// GraphRunner's row reductions: launching the program's row-reduction steps (the loss, the
// sums over the rows, the reductions along each row; which nodes get one is the lowering's,
// specializer/passes/lower_reductions.cpp) on their family-3 JIT kernels. Until compiled
// (and for a batch with a label out of range, which the reference kernel then reports) the
// reference kernels run. The sums and means give the reference's bits; the kinds with e^x
// agree with it to ~1e-6 relative, the reference being compiled with contracted multiply-adds
// (reduce_codegen.cpp).
#include "runtime/graph_runs.h"
#include "runtime/parallel.h"

#include "src/kernels/kernels.h"

#include <atomic>

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

bool GraphRunner::run_reduction(size_t index, NodeId id, State& st, GraphRunStats& stats) const {
  const specializer::ReductionSpec& r = program().reductions[index];
  const std::shared_ptr<const jit::CachedKernel>& kernel = reduce_kernels_[index];
  if (!kernel)
    return false;
  const Node& n = tg_.g.node(id);
  auto val = [&](size_t i) -> const Tensor& { return st.vals[static_cast<size_t>(n.operands[i])]; };
  const int64_t rows = st.rows, w = r.spec.width, krows = rows * r.per_row;
  const jit::ReduceKind kind = r.spec.kind;
  const bool ce = kind == jit::ReduceKind::CrossEntropy || kind == jit::ReduceKind::CrossEntropyBwd;
  // A shared logits row or label is one for every row (read with stride 0).
  const bool shared0 = r.spec.shared_logits, shared1 = r.spec.shared_label;
  // Operands as the kernel reads them (a caller's odd layout goes to the reference kernel).
  if (!dense(val(0), DType::F32, shared0 ? w : krows * w) ||
      (ce && !dense(val(1), DType::I32, shared1 ? 1 : rows)) ||
      (kind == jit::ReduceKind::CrossEntropyBwd && !dense(val(2), DType::F32, rows)) ||
      (!ce && jit::reduce_inputs(kind) == 2 && !dense(val(1), DType::F32, krows * w)))
    return false;
  auto t0 = stats.profile ? ProfileClock::now() : ProfileClock::time_point{};
  Tensor y = Tensor::empty(
      DType::F32, kind == jit::ReduceKind::SumRows ? n.type.shape() : with_rows(rows, n.type.dims));
  const int nin = jit::reduce_inputs(kind);
  const void* in[4] = {};
  for (int i = 0; i < nin; ++i)
    in[i] = val(static_cast<size_t>(i)).raw();
  void* out[2] = {y.raw(), nullptr};
  // Row statistics (ReduceSpec::row_stats): the forward writes them, its backward reads them
  // when this forward wrote them (else it computes them: the same bits).
  if (r.spec.row_stats && kind == jit::ReduceKind::CrossEntropy) {
    st.row_stats.resize(program().reductions.size());
    Tensor& t = st.row_stats[index];
    t = st.make(DType::F32, Shape{rows, 2});
    out[1] = t.raw();
  } else if (r.stats_from >= 0 && static_cast<size_t>(r.stats_from) < st.row_stats.size()) {
    const Tensor& t = st.row_stats[static_cast<size_t>(r.stats_from)];
    if (t.defined() && t.numel() == rows * 2)
      in[3] = t.raw();
  }
  // The kinds with a result per row split by rows (each row's result is its own: the same
  // bits in any block); a sum over the rows (SumRows) runs whole, in its one row order.
  const int64_t step =
      kind == jit::ReduceKind::SumRows || st.workers == nullptr
          ? rows
          : st.workers->block_rows(rows, r.per_row * w * 8, SplitPolicy::kRowGranule);
  if (step >= rows) {
    if (kernel->reduce().fn(in, out, krows) >= 0)
      return false; // a label out of range: the reference kernel says which
  } else {
    // Every array is dense with a fixed number of 4-byte elements per plan row.
    int64_t per[4] = {};
    for (int i = 0; i < nin; ++i)
      per[i] = (i == 0 && shared0) || (i == 1 && shared1)
                   ? 0 // every block reads the one shared row or label
                   : val(static_cast<size_t>(i)).numel() / rows;
    per[3] = y.numel() / rows;
    std::atomic<bool> bad{false};
    st.workers->for_blocks(
        (rows + step - 1) / step,
        [&](int64_t b) {
          const int64_t r0 = b * step, n = std::min(step, rows - r0);
          const void* bin[4] = {};
          for (int i = 0; i < nin; ++i)
            bin[i] = static_cast<const char*>(in[i]) + r0 * per[i] * 4;
          void* bout[2] = {static_cast<char*>(out[0]) + r0 * per[3] * 4, nullptr};
          if (out[1] != nullptr) // row statistics: two floats a row
            bout[1] = static_cast<float*>(out[1]) + r0 * 2;
          if (in[3] != nullptr)
            bin[3] = static_cast<const float*>(in[3]) + r0 * 2;
          if (kernel->reduce().fn(bin, bout, n * r.per_row) >= 0)
            bad = true;
        },
        static_cast<int>(Family::Other));
    if (bad)
      return false; // a label out of range: the reference kernel says which
  }
  st.vals[static_cast<size_t>(id)] = std::move(y);
  if (stats.profile)
    record(stats.time, Family::Other, t0);
  stats.jit_reductions++;
  if (in[3] != nullptr)
    stats.ce_from_stats++;
  return true;
}

Tensor GraphRunner::sum_rows(const specializer::ParamGradStep& pg, const Tensor& v, int64_t rows,
                             GraphRunStats& stats) const {
  auto t0 = stats.profile ? ProfileClock::now() : ProfileClock::time_point{};
  const auto index = static_cast<size_t>(pg.reduction);
  if (pg.reduction >= 0 && reduce_kernels_[index] &&
      dense(v, DType::F32, rows * program().reductions[index].spec.width) && v.rank() >= 1 &&
      v.dim(0) == rows) {
    Shape s;
    for (size_t d = 1; d < v.rank(); ++d)
      s.push_back(v.shape()[d]);
    Tensor y = Tensor::empty(DType::F32, s);
    const void* in[1] = {v.raw()};
    void* out[1] = {y.raw()};
    reduce_kernels_[index]->reduce().fn(in, out, rows);
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
