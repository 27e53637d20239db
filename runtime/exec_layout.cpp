// The plan executor's layout (exec_layout.h): linear in the plan's rows.
#include "exec_layout.h"

namespace pejit::runtime {

using spec::Group;
using spec::Instance;
using spec::Ref;
using spec::RowRef;

namespace {

int64_t numel_of(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (auto d : dims)
    n *= d;
  return n;
}

// Blocks start on 64-byte boundaries.
int64_t aligned(int64_t elems) {
  return (elems + 15) & ~int64_t{15};
}

} // namespace

size_t ExecLayout::bytes() const {
  size_t b = sizeof(*this) + outputs.size() * sizeof(RowSource);
  for (const auto& g : groups) {
    b += sizeof(g);
    for (const auto& a : g.args)
      b += sizeof(a) + a.rows.size() * sizeof(RowSource);
    for (const auto& r : g.results)
      b += sizeof(r) + r.seed_start.size() * sizeof(int32_t) + r.seed_src.size() * sizeof(int64_t);
  }
  return b;
}

ExecLayout make_layout(const spec::Plan& plan) {
  ExecLayout L;
  L.groups.resize(plan.groups.size());
  int64_t top = 0;
  auto take = [&top](int64_t elems) {
    int64_t at = top;
    top += aligned(elems);
    return at;
  };
  // Forward: every result block, then the gathered arguments.
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const Group& g = plan.groups[gi];
    auto& G = L.groups[gi];
    G.rows = g.tmpl == Instance::kSumN ? 1 : static_cast<int64_t>(g.instances.size());
    G.results.resize(g.results.size());
    for (size_t k = 0; k < g.results.size(); ++k) {
      G.results[k].row_elems = numel_of(g.results[k].dims);
      G.results[k].off = take(G.rows * G.results[k].row_elems);
    }
  }
  auto source = [&L](const RowRef& rr, int64_t row_elems) {
    RowSource s{rr.kind, rr.index, 0};
    if (rr.kind == Ref::Kind::Inst) {
      const auto& res =
          L.groups[static_cast<size_t>(rr.index)].results[static_cast<size_t>(rr.out)];
      s.off = res.off + rr.row * row_elems;
    }
    return s;
  };
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const Group& g = plan.groups[gi];
    auto& G = L.groups[gi];
    G.args.resize(g.args.size());
    for (size_t a = 0; a < g.args.size(); ++a) {
      const auto& ga = g.args[a];
      auto& A = G.args[a];
      A.shared = ga.shared;
      A.row_elems = numel_of(ga.sig.dims);
      if (ga.shared)
        continue;
      A.rows.reserve(ga.rows.size());
      for (const auto& rr : ga.rows)
        A.rows.push_back(source(rr, A.row_elems));
      if (g.tmpl != Instance::kSumN) // a sum reads its terms where they are
        A.off = take(static_cast<int64_t>(ga.rows.size()) * A.row_elems);
    }
  }
  for (const auto& o : plan.outputs) {
    int64_t row_elems =
        o.kind == Ref::Kind::Inst
            ? L.groups[static_cast<size_t>(o.index)].results[static_cast<size_t>(o.out)].row_elems
            : 0;
    L.outputs.push_back(source(o, row_elems));
  }
  L.forward_elems = top;

  // Training: seed blocks of the f32 results, gradient blocks of the per-row f32 arguments.
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const Group& g = plan.groups[gi];
    auto& G = L.groups[gi];
    for (size_t k = 0; k < g.results.size(); ++k)
      if (g.results[k].dtype == DType::F32)
        G.results[k].seed_off = take(G.rows * G.results[k].row_elems);
    if (g.tmpl == Instance::kSumN)
      continue;
    for (size_t a = 0; a < g.args.size(); ++a)
      if (!g.args[a].shared && g.args[a].sig.dtype == DType::F32)
        G.args[a].grad_off = take(G.rows * G.args[a].row_elems);
  }
  L.total_elems = top;

  // Who reads each result row: its consumers' gradient rows, in plan order (two passes: count,
  // then fill, so the index arrays are flat).
  auto each_consumer = [&](auto&& f) {
    for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
      const Group& g = plan.groups[gi];
      const auto& G = L.groups[gi];
      for (size_t a = 0; a < g.args.size(); ++a) {
        const auto& ga = g.args[a];
        if (ga.shared || ga.sig.dtype != DType::F32)
          continue;
        for (size_t i = 0; i < ga.rows.size(); ++i) {
          const RowRef& rr = ga.rows[i];
          if (rr.kind != Ref::Kind::Inst)
            continue;
          int64_t src = g.tmpl == Instance::kSumN
                            ? G.results[0].seed_off
                            : G.args[a].grad_off + static_cast<int64_t>(i) * G.args[a].row_elems;
          f(L.groups[static_cast<size_t>(rr.index)].results[static_cast<size_t>(rr.out)], rr.row,
            src);
        }
      }
    }
  };
  for (auto& G : L.groups)
    for (auto& R : G.results)
      if (R.seed_off >= 0)
        R.seed_start.assign(static_cast<size_t>(G.rows) + 1, 0);
  each_consumer([](ExecLayout::Result& R, int32_t row, int64_t) {
    if (R.seed_off >= 0)
      R.seed_start[static_cast<size_t>(row) + 1]++;
  });
  for (auto& G : L.groups)
    for (auto& R : G.results) {
      if (R.seed_off < 0)
        continue;
      for (size_t i = 1; i < R.seed_start.size(); ++i)
        R.seed_start[i] += R.seed_start[i - 1];
      R.seed_src.resize(static_cast<size_t>(R.seed_start.back()));
    }
  each_consumer([](ExecLayout::Result& R, int32_t row, int64_t src) {
    if (R.seed_off < 0)
      return;
    // seed_start[row] is advanced while filling and restored below.
    R.seed_src[static_cast<size_t>(R.seed_start[static_cast<size_t>(row)]++)] = src;
  });
  for (auto& G : L.groups)
    for (auto& R : G.results) {
      if (R.seed_off < 0)
        continue;
      for (size_t i = R.seed_start.size() - 1; i > 0; --i)
        R.seed_start[i] = R.seed_start[i - 1];
      R.seed_start[0] = 0;
    }
  return L;
}

} // namespace pejit::runtime
