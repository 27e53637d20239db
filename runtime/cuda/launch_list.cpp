// The launch list of a plan on the GPU (launch_list.h): a walk over the plan's levels that
// enqueues, per group, its argument gathers and its template's kernels; cuBLAS GEMMs of one
// template at one level become one grouped call over that level's groups.
#include "runtime/cuda/launch_list.h"

#include "pejit/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>

namespace pejit::runtime::cuda {

uint32_t grid_for(int64_t elements, const LaunchOptions& o) {
  const int64_t blocks = (std::max<int64_t>(elements, 1) + o.block - 1) / o.block;
  return static_cast<uint32_t>(std::min<int64_t>(blocks, o.max_grid));
}

namespace {

std::string gather_name(int64_t w) {
  return fmt::format("rows_gather_w{}", w);
}
std::string seed_name(int64_t w) {
  return fmt::format("seed_sum_w{}", w);
}

// Elements a generated kernel's grid-stride loop covers for a group of `rows` rows.
int64_t elements(const GpuKernel& k, int64_t rows) {
  if (const auto* s = std::get_if<jit::KernelSpec>(&k.spec))
    return rows * s->width;
  if (const auto* s = std::get_if<jit::ReduceSpec>(&k.spec)) {
    if (s->kind == jit::ReduceKind::SumRows)
      return s->width == 1 ? 1 : s->width; // a thread per column (one for width 1)
    return rows * k.per_row;               // a thread per row
  }
  if (const auto* s = std::get_if<jit::RowGatherSpec>(&k.spec)) {
    int64_t w = 0;
    for (int64_t x : s->widths)
      w += x;
    return rows * w;
  }
  if (const auto* s = std::get_if<jit::SegmentSumSpec>(&k.spec))
    return rows * s->width; // at most: the segments are known per batch
  if (const auto* s = std::get_if<jit::OptimizerStepSpec>(&k.spec))
    return rows * s->width;
  return 0;
}

class Builder {
public:
  Builder(const specializer::Plan& plan, const ExecLayout& layout,
          const std::vector<std::vector<GpuKernel>>& kernels, const LaunchOptions& o)
      : plan_(plan), layout_(layout), kernels_(kernels), o_(o) {}

  void pass(bool forward) {
    std::map<int32_t, std::vector<int32_t>> by_level; // groups per level, in plan order
    for (size_t g = 0; g < plan_.groups.size(); ++g)
      by_level[plan_.groups[g].level].push_back(static_cast<int32_t>(g));
    std::vector<int32_t> levels;
    for (const auto& [l, gs] : by_level)
      levels.push_back(l);
    if (!forward)
      std::reverse(levels.begin(), levels.end());
    for (int32_t level : levels)
      run_level(forward, level, by_level[level]);
  }

  void param_grads() {
    std::map<int32_t, std::vector<int32_t>> by_tmpl;
    for (size_t g = 0; g < plan_.groups.size(); ++g)
      if (plan_.groups[g].tmpl >= 0)
        by_tmpl[plan_.groups[g].tmpl].push_back(static_cast<int32_t>(g));
    for (const auto& [t, groups] : by_tmpl)
      for (const GpuKernel& k : kernels_of(t)) {
        if (!k.param_grad)
          continue;
        if (const auto* gemm = std::get_if<CublasGemm>(&k.spec)) {
          Launch l = base(Launch::Pass::ParamGrads, -1, t, k.name);
          l.groups = groups;
          l.cublas = true;
          // x^T·gy summed over the groups: k is each group's rows.
          l.gemm_m.assign(groups.size(), gemm->m);
          l.gemm_n = gemm->n;
          l.gemm_k = -1;
          l.trans_a = true;
          l.accumulate = true;
          push(std::move(l));
          continue;
        }
        for (int32_t g : groups) { // into row g of a [groups, width] block
          Launch l = base(Launch::Pass::ParamGrads, -1, t, k.name);
          l.groups = {g};
          generated(l, k, rows(g));
          push(std::move(l));
        }
        if (groups.size() > 1) { // the rows of the block, summed (a SumRows of G rows)
          Launch l = base(Launch::Pass::ParamGrads, -1, t, k.name + "_fold");
          l.groups = groups;
          l.fold = true;
          generated(l, k, static_cast<int64_t>(groups.size()));
          push(std::move(l));
        }
      }
  }

  LaunchList take() { return std::move(list_); }

private:
  const std::vector<GpuKernel>& kernels_of(int32_t t) {
    const auto& ks = kernels_.at(static_cast<size_t>(t));
    if (ks.empty())
      throw Error(fmt::format("launch list: template {} has no GPU kernels listed", t));
    return ks;
  }

  int64_t rows(int32_t g) const {
    return static_cast<int64_t>(plan_.groups[static_cast<size_t>(g)].instances.size());
  }

  Launch base(Launch::Pass pass, int32_t level, int32_t tmpl, std::string kernel) const {
    Launch l;
    l.pass = pass;
    l.level = level;
    l.tmpl = tmpl;
    l.kernel = std::move(kernel);
    return l;
  }

  void generated(Launch& l, const GpuKernel& k, int64_t rows) {
    l.elements = elements(k, rows);
    l.block = o_.block;
    l.grid = grid_for(l.elements, o_);
  }

  void push(Launch l) {
    (l.cublas ? list_.cublas_calls : list_.kernel_launches)++;
    list_.launches.push_back(std::move(l));
  }

  void simple(Launch::Pass pass, int32_t level, int32_t g, std::string name, int64_t elems) {
    Launch l = base(pass, level, plan_.groups[static_cast<size_t>(g)].tmpl, std::move(name));
    l.groups = {g};
    l.elements = elems;
    l.block = o_.block;
    l.grid = grid_for(elems, o_);
    push(std::move(l));
  }

  void run_level(bool forward, int32_t level, const std::vector<int32_t>& groups) {
    const Launch::Pass pass = forward ? Launch::Pass::Forward : Launch::Pass::Backward;
    // The level's cuBLAS GEMMs, one call per (template, GEMM), placed where the template's
    // first group reaches them; later groups add their m.
    std::map<std::pair<int32_t, std::string>, size_t> gemm_at;
    for (int32_t g : groups) {
      const specializer::Group& grp = plan_.groups[static_cast<size_t>(g)];
      const ExecLayout::Group& lg = layout_.groups[static_cast<size_t>(g)];
      if (grp.tmpl < 0) { // a loss sum: its terms' elements, summed (forward only)
        if (forward)
          for (const auto& r : lg.results)
            simple(pass, level, g, "sumn_w1", lg.rows * r.row_elems);
        continue;
      }
      if (forward) {
        for (const auto& a : lg.args)
          if (!a.shared && a.num_rows > 0)
            simple(pass, level, g, gather_name(a.row_elems), rows(g) * a.row_elems);
      } else {
        for (const auto& r : lg.results)
          if (r.seed_off >= 0)
            simple(pass, level, g, seed_name(r.row_elems), rows(g) * r.row_elems);
      }
      for (const GpuKernel& k : kernels_of(grp.tmpl)) {
        if (k.forward != forward || k.param_grad)
          continue;
        if (std::holds_alternative<HostOnly>(k.spec)) {
          list_.host_only.push_back(
              fmt::format("template {}: {}", grp.tmpl, std::get<HostOnly>(k.spec).why));
          continue;
        }
        if (const auto* gemm = std::get_if<CublasGemm>(&k.spec)) {
          auto key = std::make_pair(grp.tmpl, k.name);
          auto it = gemm_at.find(key);
          if (it != gemm_at.end()) {
            Launch& l = list_.launches[it->second];
            l.groups.push_back(g);
            l.gemm_m.push_back(rows(g));
            continue;
          }
          Launch l = base(pass, level, grp.tmpl, k.name);
          l.groups = {g};
          l.cublas = true;
          l.gemm_m = {rows(g)};
          l.gemm_n = gemm->n;
          l.gemm_k = gemm->k;
          l.trans_a = gemm->trans_a;
          l.trans_b = gemm->trans_b;
          gemm_at[key] = list_.launches.size();
          push(std::move(l));
          continue;
        }
        Launch l = base(pass, level, grp.tmpl, k.name);
        l.groups = {g};
        generated(l, k, rows(g));
        push(std::move(l));
      }
    }
  }

  const specializer::Plan& plan_;
  const ExecLayout& layout_;
  const std::vector<std::vector<GpuKernel>>& kernels_;
  const LaunchOptions& o_;
  LaunchList list_;
};

} // namespace

LaunchList make_launch_list(const specializer::Plan& plan, const ExecLayout& layout,
                            const std::vector<std::vector<GpuKernel>>& kernels, bool training,
                            const LaunchOptions& options) {
  if (layout.groups.size() != plan.groups.size())
    throw Error("launch list: the layout is not the plan's");
  Builder b(plan, layout, kernels, options);
  b.pass(true);
  if (training) {
    b.pass(false);
    b.param_grads();
  }
  LaunchList list = b.take();
  std::sort(list.host_only.begin(), list.host_only.end());
  list.host_only.erase(std::unique(list.host_only.begin(), list.host_only.end()),
                       list.host_only.end());
  return list;
}

std::vector<GpuKernel> generic_kernels(const ExecLayout& layout) {
  std::set<int64_t> gathers, seeds;
  for (const auto& g : layout.groups) {
    for (const auto& a : g.args)
      if (!a.shared && a.num_rows > 0)
        gathers.insert(a.row_elems);
    for (const auto& r : g.results)
      if (r.seed_off >= 0)
        seeds.insert(r.row_elems);
  }
  std::vector<GpuKernel> out;
  for (int64_t w : gathers)
    out.push_back(GpuKernel{gather_name(w), "argument rows", jit::RowGatherSpec{.widths = {w}}});
  for (int64_t w : seeds)
    out.push_back(GpuKernel{seed_name(w), "seeds",
                            jit::SegmentSumSpec{.width = w, .element_offsets = true}, false});
  out.push_back(
      GpuKernel{"sumn_w1", "loss sum", jit::SegmentSumSpec{.width = 1, .element_offsets = true}});
  return out;
}

std::string LaunchList::describe() const {
  std::string s = fmt::format("launches={} kernels={} cublas={}\n", launches.size(),
                              kernel_launches, cublas_calls);
  for (const Launch& l : launches) {
    const char* pass = l.pass == Launch::Pass::Forward    ? "fwd"
                       : l.pass == Launch::Pass::Backward ? "bwd"
                                                          : "grads";
    s += l.level >= 0 ? fmt::format("{} L{} {}", pass, l.level, l.kernel)
                      : fmt::format("{} {}", pass, l.kernel);
    s += fmt::format(" groups={}", fmt::join(l.groups, ","));
    if (l.cublas) {
      std::vector<std::string> ms;
      for (int64_t m : l.gemm_m)
        ms.push_back(m < 0 ? "?" : std::to_string(m));
      s += fmt::format(" cublas m={} n={} k={} {}{}{}\n", fmt::join(ms, ","), l.gemm_n,
                       l.gemm_k < 0 ? std::string("rows") : std::to_string(l.gemm_k),
                       l.trans_a ? 't' : 'n', l.trans_b ? 't' : 'n',
                       l.accumulate ? " accumulate" : "");
    } else {
      s += fmt::format(" elements={} grid={} block={}{}\n", l.elements, l.grid, l.block,
                       l.fold ? " fold" : "");
    }
  }
  for (const std::string& h : host_only)
    s += "host only: " + h + "\n";
  return s;
}

} // namespace pejit::runtime::cuda
