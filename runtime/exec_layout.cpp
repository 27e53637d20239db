// The plan executor's layout (exec_layout.h): linear in the plan's rows.
#include "runtime/exec_layout.h"

#include "src/util/check.h"

namespace pejit::runtime {

using specializer::Group;
using specializer::Instance;
using specializer::Ref;
using specializer::RowRef;

namespace {

int64_t numel_of(std::span<const int64_t> dims) {
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
  size_t b = sizeof(*this) + outputs.size() * sizeof(RowSource) +
             sources.size() * sizeof(RowSource) + seed_start.size() * sizeof(int32_t) +
             seed_src.size() * sizeof(int64_t);
  for (const auto& g : groups)
    b += sizeof(g) + g.args.size() * sizeof(Arg) + g.results.size() * sizeof(Result);
  return b;
}

ExecLayout make_layout(const specializer::Plan& plan, const specializer::Residual& r) {
  PEJIT_CHECK(plan.group_of.size() == r.instances.size())
      << "make_layout: a plan of " << plan.group_of.size() << " instances for a residual of "
      << r.instances.size();
  const Instance* const insts = r.instances.data();
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
    G.rows = static_cast<int64_t>(g.instances.size());
    G.results.resize(g.results.size());
    for (size_t k = 0; k < g.results.size(); ++k) {
      G.results[k].row_elems = numel_of(g.results[k].dims);
      G.results[k].off = take(G.rows * G.results[k].row_elems);
    }
  }
  auto source = [&L](const RowRef& rr, int64_t row_elems) {
    RowSource s{rr.kind, rr.index, 0};
    if (rr.kind == Ref::Kind::Inst)
      s.off = L.groups[static_cast<size_t>(rr.index)].results[static_cast<size_t>(rr.out)].off +
              rr.row * row_elems;
    return s;
  };
  size_t num_sources = 0; // sized once: a batch's plan has thousands of rows
  for (const Group& g : plan.groups)
    for (const auto& ga : g.args)
      num_sources += ga.shared ? 0 : g.tmpl == Instance::kSumN ? 1 : g.instances.size();
  L.sources.reserve(num_sources);
  L.outputs.reserve(plan.outputs.size());
  for (size_t gi = 0; gi < plan.groups.size(); ++gi) {
    const Group& g = plan.groups[gi];
    auto& G = L.groups[gi];
    G.args.resize(g.args.size());
    const bool sum = g.tmpl == Instance::kSumN;
    // The residual is the plan's: every row's instance is of its group's template and takes
    // its arguments (a sum group: one argument per term), so each_arg_row reads inside both.
    size_t terms = 0;
    for (int32_t i : g.instances) {
      const Instance& in = insts[static_cast<size_t>(i)];
      PEJIT_CHECK(in.tmpl == g.tmpl && (sum || in.num_args == g.args.size()))
          << "make_layout: instance " << i << " is not of its group's template and arity";
      terms += in.num_args;
    }
    PEJIT_CHECK(!sum || terms == g.args.size()) << "make_layout: a sum group's terms differ";
    for (size_t a = 0; a < g.args.size(); ++a) {
      const auto& ga = g.args[a];
      auto& A = G.args[a];
      A.shared = ga.shared;
      A.row_elems = numel_of(ga.sig.dims);
      if (ga.shared)
        continue;
      A.num_rows = sum ? 1 : static_cast<uint32_t>(g.instances.size());
      if (!sum) // a sum reads its terms where they are
        A.off = take(static_cast<int64_t>(A.num_rows) * A.row_elems);
    }
    specializer::each_arg_row(r, g, [&](size_t a, size_t i, const Ref& ref) {
      auto& A = G.args[a];
      if (i == 0 || sum)
        A.first_row = static_cast<uint32_t>(L.sources.size());
      L.sources.push_back(source(specializer::row_ref(plan, ref), A.row_elems));
    });
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
      const bool sum = g.tmpl == Instance::kSumN;
      specializer::each_arg_row(r, g, [&](size_t a, size_t i, const Ref& ref) {
        if (ref.kind != Ref::Kind::Inst || g.args[a].sig.dtype != DType::F32)
          return;
        // A sum's term reads the seed of its row as it is.
        int64_t src = sum ? G.results[0].seed_off + static_cast<int64_t>(i) * G.results[0].row_elems
                          : G.args[a].grad_off + static_cast<int64_t>(i) * G.args[a].row_elems;
        const RowRef rr = specializer::row_ref(plan, ref);
        f(L.groups[static_cast<size_t>(rr.index)].results[static_cast<size_t>(rr.out)], rr.row,
          src);
      });
    }
  };
  // Each result with a seed block gets rows + 1 bounds in seed_start: counted, summed into
  // starts, then advanced while filling seed_src and moved back.
  size_t num_starts = 0;
  for (const auto& G : L.groups)
    for (const auto& R : G.results)
      num_starts += R.seed_off >= 0 ? static_cast<size_t>(G.rows) + 1 : 0;
  L.seed_start.reserve(num_starts);
  for (auto& G : L.groups)
    for (auto& R : G.results)
      if (R.seed_off >= 0) {
        R.seed_first = static_cast<uint32_t>(L.seed_start.size());
        L.seed_start.resize(L.seed_start.size() + static_cast<size_t>(G.rows) + 1, 0);
      }
  int32_t* start = L.seed_start.data();
  each_consumer([start](ExecLayout::Result& R, int32_t row, int64_t) {
    if (R.seed_off >= 0)
      start[R.seed_first + static_cast<uint32_t>(row) + 1]++;
  });
  int32_t total = 0;
  for (auto& G : L.groups)
    for (auto& R : G.results) {
      if (R.seed_off < 0)
        continue;
      int32_t* b = start + R.seed_first;
      b[0] = total;
      for (int64_t i = 1; i <= G.rows; ++i)
        b[i] += b[i - 1];
      total = b[G.rows];
    }
  L.seed_src.resize(static_cast<size_t>(total));
  int64_t* src_out = L.seed_src.data();
  each_consumer([start, src_out](ExecLayout::Result& R, int32_t row, int64_t src) {
    if (R.seed_off < 0)
      return;
    // start[row] is advanced while filling and restored below.
    src_out[start[R.seed_first + static_cast<uint32_t>(row)]++] = src;
  });
  int32_t base = 0; // each result's first entry, in the order of the starts above
  for (auto& G : L.groups)
    for (auto& R : G.results) {
      if (R.seed_off < 0)
        continue;
      int32_t* b = start + R.seed_first;
      for (int64_t i = G.rows; i > 0; --i)
        b[i] = b[i - 1];
      b[0] = base;
      base = b[G.rows];
    }
  return L;
}

} // namespace pejit::runtime
