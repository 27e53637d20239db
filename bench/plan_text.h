// The text of a residual's instances and outputs and of its plan: every template id, argument
// and row, so that the plans two builds make can be compared byte for byte
// (pejit_plan_bench --dump, pejit_plan_ahead_bench --dump).
#pragma once

#include "specializer/plan.h"

#include <ostream>

namespace pejit::bench {

/// From the instances to the plan's row map, without a final newline.
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
    for (const auto& a : g.args) {
      os << " a " << a.sig.str() << (a.shared ? " shared" : " rows");
      if (a.shared)
        ref(a.shared_ref);
      for (const auto& x : a.rows)
        row(x);
      os << "\n";
    }
  }
  os << "pout";
  for (const auto& o : p.outputs)
    row(o);
  os << "\ngroup_of";
  for (auto g : p.group_of)
    os << " " << g;
  os << "\nrow_of";
  for (auto g : p.row_of)
    os << " " << g;
}

} // namespace pejit::bench
