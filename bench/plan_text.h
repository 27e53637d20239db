// The text of a residual's instances and outputs and of its plan: every template id, argument
// and row, so that the plans two builds make can be compared byte for byte
// (pejit_plan_bench --dump, pejit_plan_ahead_bench --dump), and of the executor's layout of
// a plan: every offset and index map.
#pragma once

#include "runtime/exec_layout.h"
#include "specializer/plan.h"

#include <ostream>
#include <vector>

namespace pejit::bench {

/// `name` and the numbers of `xs`, each after a space.
template <class Range> void write_numbers(std::ostream& os, const char* name, const Range& xs) {
  os << name;
  for (const auto& x : xs)
    os << " " << x;
}

/// From the instances to the rows each group reads, without a final newline.
inline void write_residual_and_plan(std::ostream& os, const specializer::Residual& r,
                                    const specializer::Plan& p) {
  auto ref = [&](const specializer::Ref& a) {
    os << " " << static_cast<int>(a.kind) << ":" << a.index << "." << a.out;
  };
  auto row = [&](const specializer::RowRef& a) {
    os << " " << static_cast<int>(a.kind) << ":" << a.index << "." << a.out << "." << a.row;
  };
  for (size_t i = 0; i < r.instances.size(); ++i) {
    const auto& in = r.instances[i];
    os << "i " << in.tmpl;
    if (in.tmpl == specializer::Instance::kSumN)
      os << " " << r.sum_sigs[static_cast<size_t>(in.sum_sig)].str();
    for (const auto& a : r.args(i))
      ref(a);
    os << "\n";
  }
  os << "outputs";
  for (const auto& o : r.outputs)
    ref(o);
  os << "\nshape";
  for (auto s : r.result_shape)
    os << " " << s;
  os << "\nplan key " << p.key << " levels " << p.levels << "\n";
  for (const auto& g : p.groups) {
    os << "g " << g.tmpl << " level " << g.level << " rows";
    for (auto i : g.instances)
      os << " " << i;
    os << " results";
    for (const auto& s : g.results)
      os << " " << s.str();
    os << "\n";
    // Each argument's line, a per-row one with the rows the plan reads (each_arg_row; a sum's
    // terms are one argument each).
    std::vector<std::vector<specializer::RowRef>> rows(g.args.size());
    specializer::each_arg_row(r, g, [&](size_t a, size_t, const specializer::Ref& x) {
      rows[a].push_back(specializer::row_ref(p, x));
    });
    for (size_t a = 0; a < g.args.size(); ++a) {
      os << " a " << g.args[a].sig.str() << (g.args[a].shared ? " shared" : " rows");
      if (g.args[a].shared)
        ref(g.args[a].shared_ref);
      for (const auto& x : rows[a])
        row(x);
      os << "\n";
    }
  }
  os << "pout";
  for (const auto& o : p.outputs)
    row(o);
  write_numbers(os, "\ngroup_of", p.group_of);
  write_numbers(os, "\nrow_of", p.row_of);
}

/// Every offset and index map of a layout, without a final newline.
inline void write_layout(std::ostream& os, const runtime::ExecLayout& l) {
  auto src = [&](const runtime::RowSource& s) {
    os << " " << static_cast<int>(s.kind) << ":" << s.index << "@" << s.off;
  };
  for (const auto& g : l.groups) {
    os << "G " << g.rows;
    for (const auto& a : g.args)
      os << " a" << (a.shared ? "s" : "") << " " << a.off << " " << a.grad_off << " " << a.row_elems
         << " " << a.first_row << "+" << a.num_rows;
    for (const auto& r : g.results)
      os << " r " << r.off << " " << r.seed_off << " " << r.row_elems << " " << r.seed_first;
    os << "\n";
  }
  os << "sources";
  for (const auto& s : l.sources)
    src(s);
  os << "\nlouts";
  for (const auto& s : l.outputs)
    src(s);
  write_numbers(os, "\nseed_start", l.seed_start);
  write_numbers(os, "\nseed_src", l.seed_src);
  os << "\nelems " << l.forward_elems << " " << l.total_elems;
}

} // namespace pejit::bench
