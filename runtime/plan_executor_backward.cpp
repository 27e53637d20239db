// The plan executor's backward sweep (see plan_executor.h): the groups in reverse plan order,
// each result's seed gathered from its consumers' gradient rows, then the group's backward on
// its template graph or its tape, and the deferred weight-gradient GEMMs at the end.
#include "runtime/plan_executor_impl.h"

#include "runtime/parallel.h"
#include "src/kernels/kernels.h"
#include "src/util/check.h"

#include <cstring>

namespace pejit::runtime {

using specializer::Group;
using specializer::Instance;
using specializer::Ref;
using specializer::RowRef;

namespace {

// A seed row and its consumers' gradient rows never overlap (the arena's seed blocks are
// their own): restrict lets the loops vectorize without a runtime overlap check.
void sum_two(float* __restrict d, const float* __restrict a, const float* __restrict b, size_t n) {
  for (size_t j = 0; j < n; ++j)
    d[j] = a[j] + b[j];
}

void add_into(float* __restrict d, const float* __restrict s, size_t n) {
  for (size_t j = 0; j < n; ++j)
    d[j] += s[j];
}

} // namespace

// Row i of result R's seed: the sum of its consumers' gradient rows, in plan order.
// Returns false when no row of R has a consumer (its seed is zero).
bool PlanExecutor::Impl::gather_seed(const ExecLayout& L, const ExecLayout::Result& R,
                                     int64_t rows) {
  const int32_t* start = L.seed_start.data() + R.seed_first;
  if (start[rows] == start[0]) {
    std::memset(at(R.seed_off), 0, static_cast<size_t>(rows * R.row_elems) * 4);
    return false;
  }
  const size_t n = static_cast<size_t>(R.row_elems);
  // Each row's sum is its own, in its consumers' order: rows split across workers freely.
  auto sum = [&](int64_t r0, int64_t count) {
    for (int64_t i = r0; i < r0 + count; ++i) {
      float* d = reinterpret_cast<float*>(at(R.seed_off + i * R.row_elems));
      int32_t b = start[i], e = start[i + 1];
      if (b == e) {
        std::memset(d, 0, n * 4);
        continue;
      }
      const float* s0 = reinterpret_cast<const float*>(at(L.seed_src[static_cast<size_t>(b)]));
      if (e - b == 1) {
        std::memcpy(d, s0, n * 4);
        continue;
      }
      // The first two terms in one pass (not a copy, then an add over the copy): the same
      // sum, s0 + s1, with one write of the row instead of two.
      sum_two(d, s0, reinterpret_cast<const float*>(at(L.seed_src[static_cast<size_t>(b + 1)])), n);
      for (int32_t k = b + 2; k < e; ++k)
        add_into(d, reinterpret_cast<const float*>(at(L.seed_src[static_cast<size_t>(k)])), n);
    }
  };
  if (opt.workers == nullptr)
    sum(0, rows);
  else // per row: its consumers' rows, about two on a tree
    opt.workers->for_rows(rows, 2 * R.row_elems, 1, sum, static_cast<int>(Family::Gathers));
  return true;
}

interp::Interpreter::Gradients
PlanExecutor::value_and_grad(const specializer::Plan& plan, const specializer::Residual& r,
                             const specializer::TemplateTable& tt, const interp::Params& params,
                             const ExecLayout* layout, GradReady* ready) {
  ExecLayout own;
  layout = impl_->forward(plan, layout, own, r, tt, params, true, stats_);
  Impl& I = *impl_;
  auto scalar_entry = [] { return Error("value_and_grad needs an entry with one f32[] result"); };
  if (plan.outputs.size() != 1)
    throw scalar_entry();
  const RowRef& lo = plan.outputs[0];
  const RowSource& ls = layout->outputs[0];
  const Tensor* whole = nullptr;
  if (lo.kind == Ref::Kind::Input)
    whole = &r.inputs[static_cast<size_t>(lo.index)];
  else if (lo.kind == Ref::Kind::Param)
    whole = &params.values[static_cast<size_t>(lo.index)];
  else if (lo.kind == Ref::Kind::Const)
    whole = &r.consts[static_cast<size_t>(lo.index)];
  interp::Interpreter::Gradients out;
  out.grads.resize(params.values.size());
  if (whole != nullptr) {
    if (whole->dtype() != DType::F32 || whole->numel() != 1)
      throw scalar_entry();
    out.loss = whole->item_f32();
    return out; // a loss that does not depend on the parameters
  }
  const auto& lsig =
      plan.groups[static_cast<size_t>(lo.index)].results[static_cast<size_t>(lo.out)];
  if (lsig.dtype != DType::F32 || layout->groups[static_cast<size_t>(lo.index)]
                                          .results[static_cast<size_t>(lo.out)]
                                          .row_elems != 1)
    throw scalar_entry();
  out.loss = *reinterpret_cast<const float*>(I.at(ls.off));

  for (size_t gi = plan.groups.size(); gi-- > 0;) {
    const Group& g = plan.groups[gi];
    const auto& G = layout->groups[gi];
    bool any = false;
    for (size_t k = 0; k < G.results.size(); ++k) {
      const auto& R = G.results[k];
      if (R.seed_off < 0)
        continue;
      auto t0 = I.tick();
      any = I.gather_seed(*layout, R, G.rows) || any;
      I.tock(stats_, Family::Gathers, t0);
      if (static_cast<int32_t>(gi) == lo.index && static_cast<int32_t>(k) == lo.out) {
        reinterpret_cast<float*>(I.at(R.seed_off))[lo.row] += 1.0f;
        any = true;
      }
    }
    if (g.tmpl == Instance::kSumN)
      continue; // its terms read its seed directly
    auto zero_arg_grads = [&](size_t a) {
      const auto& A = G.args[a];
      if (A.grad_off >= 0)
        std::memset(I.at(A.grad_off), 0, static_cast<size_t>(G.rows * A.row_elems) * 4);
    };
    auto& gs = I.st[gi];
    if (!any) {
      for (size_t a = 0; a < G.args.size(); ++a)
        zero_arg_grads(a);
      continue;
    }
    if (gs.graph != nullptr) {
      std::vector<Tensor>&seeds = gs.outs, &arg_grads = gs.ins;
      seeds.assign(G.results.size(), Tensor());
      arg_grads.assign(G.args.size(), Tensor());
      for (size_t k = 0; k < G.results.size(); ++k)
        if (G.results[k].seed_off >= 0)
          seeds[k] = I.block(G.results[k].seed_off, g.results[k], G.rows);
      for (size_t a = 0; a < G.args.size(); ++a)
        if (G.args[a].grad_off >= 0)
          arg_grads[a] = I.block(G.args[a].grad_off, g.args[a].sig, G.rows);
      GraphRunStats rs;
      rs.profile = I.opt.profile;
      gs.graph->backward(seeds, params, arg_grads, out.grads, gs.gst, rs);
      seeds.clear();
      arg_grads.clear();
      Impl::merge(stats_, rs);
      continue;
    }
    std::vector<std::pair<int32_t, Tensor>> seeds;
    for (size_t k = 0; k < G.results.size(); ++k) {
      const auto& R = G.results[k];
      if (R.seed_off < 0)
        continue;
      if (!gs.per_row) {
        if (gs.result_ids[k] >= 0)
          seeds.emplace_back(gs.result_ids[k], I.block(R.seed_off, g.results[k], G.rows));
      } else {
        Shape one(std::span<const int64_t>(g.results[k].dims));
        for (int64_t i = 0; i < G.rows; ++i)
          if (gs.row_ids[static_cast<size_t>(i)][k] >= 0)
            seeds.emplace_back(gs.row_ids[static_cast<size_t>(i)][k],
                               I.arena.view(R.seed_off + i * R.row_elems, DType::F32, one));
      }
    }
    if (seeds.empty()) {
      for (size_t a = 0; a < G.args.size(); ++a)
        zero_arg_grads(a);
      continue;
    }
    Impl::InterpretedTimer timer(stats_, false);
    auto grads = gs.tape->backward(seeds);
    int32_t nleaves = static_cast<int32_t>(grads.size() - params.values.size());
    // Argument gradients go to their blocks, where the producers' seeds read them.
    for (size_t a = 0; a < G.args.size(); ++a) {
      const auto& A = G.args[a];
      if (A.grad_off < 0)
        continue;
      int32_t leaf = gs.arg_leaf[a];
      if (leaf < 0 || grads[static_cast<size_t>(leaf)].empty()) {
        zero_arg_grads(a);
        continue;
      }
      Tensor dx =
          grads[static_cast<size_t>(leaf)].to_dense(Impl::rows_shape(G.rows, g.args[a].sig.dims));
      std::memcpy(I.at(A.grad_off), dx.raw(), dx.nbytes());
    }
    for (size_t p = 0; p < params.values.size(); ++p) {
      auto& src = grads[static_cast<size_t>(nleaves) + p];
      auto& dst = out.grads[p];
      if (src.dense.defined()) {
        if (!dst.dense.defined())
          dst.dense = src.dense;
        else
          kernels::add_inplace(dst.dense, src.dense);
      }
      for (auto& s : src.sparse)
        dst.sparse.push_back(std::move(s));
    }
    gs.tape.reset(); // the gradients may share its buffers
  }
  I.weight_grads.run(out.grads, stats_, I.opt.jit_weight_grads, I.opt.profile, I.opt.workers,
                     ready);
  I.transposed.invalidate();
  stats_.packed_buffers = I.transposed.allocated();
  stats_.scratch_buffers = I.scratch.buffers();
  stats_.scratch_elems = I.scratch.peak();
  return out;
}

} // namespace pejit::runtime
