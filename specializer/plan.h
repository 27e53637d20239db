// Plans: the batching schedule of a residual program. Instances of one template are grouped
// by level so that each group is one batched call: all leaves in one group, one group per
// tree level, and instances whose results only feed the final sums (the per-node classifier
// and loss) moved to the last level, so that they form one group per batch. Every instance's
// results are rows of its group's result tensors; a group's arguments are either shared by
// all its instances (a parameter, a constant) or gathered row by row.
//
// Algorithm (linear in the instances): levels are ASAP (1 + the highest level of a producer);
// an instance none of whose results feeds another template call (only SumN instances or the
// entry's outputs) is then placed at the last level, the end of its [earliest, latest]
// window. Groups are keyed by (level, template, which arguments are shared and by what), in
// level order; SumN instances are grouped by (level, signature), one row per sum whatever its
// number of terms (a segment sum), after their terms.
#pragma once

#include "specializer/residual.h"

#include <cstdint>
#include <string>
#include <vector>

namespace pejit::specializer {

/// Where one row comes from: a group's result (group, out, row), or an input slot, a
/// parameter or a constant (Ref kinds other than Inst; row unused).
struct RowRef {
  Ref::Kind kind = Ref::Kind::Inst;
  int32_t index = -1; ///< Inst: group; else the input slot, param or const index
  int32_t out = 0;
  int32_t row = 0;
};

/// A group's argument: shared by every row, or read row by row. A per-row argument's rows are
/// not copied into the plan: row i of argument a is what the residual's instance
/// `instances[i]` takes as its argument a (for a SumN group, the terms of row k are instance
/// `instances[k]`'s arguments, in order), as a RowRef through the plan's group_of and row_of
/// (row_ref below).
struct GroupArg {
  bool shared = false;
  Ref shared_ref; ///< shared: the same tensor for every row
  TensorSig sig;  ///< per-row signature
};

struct Group {
  int32_t tmpl = Instance::kSumN;
  int32_t level = 0;
  std::vector<int32_t> instances; ///< row i computes instances[i]
  std::vector<GroupArg> args;     ///< template arguments; for SumN: one arg per term (1 row)
  std::vector<TensorSig> results; ///< per-row result signatures
  /// SumN: row i is the sum of the terms args[segments[i], segments[i + 1]) (a segment sum
  /// over the level's sums of one signature: a node's children's states, each node a row);
  /// empty: one row, the sum of every argument.
  std::vector<int32_t> segments;
};

struct Plan {
  std::vector<Group> groups;             ///< in execution order
  std::vector<RowRef> outputs;           ///< the entry's outputs
  std::vector<int32_t> group_of, row_of; ///< per instance
  int32_t levels = 0;
  uint64_t key = 0;

  /// One line per launch: `launch fwd|bwd TEMPLATE KERNEL rows=N` (forward in order, then
  /// backward in reverse), after a header with counts.
  std::string describe(const TemplateTable& t) const;
};

/// Builds the plan of a residual program.
Plan make_plan(const Residual& r, const TemplateTable& templates);

/// Where the plan made from a residual reads `a`, one of that residual's references: an
/// instance's result as (its group, out, its row), anything else as itself.
inline RowRef row_ref(const Plan& p, const Ref& a) {
  RowRef rr;
  rr.kind = a.kind;
  rr.index = a.index;
  if (a.kind == Ref::Kind::Inst) {
    rr.index = p.group_of[static_cast<size_t>(a.index)];
    rr.out = a.out;
    rr.row = p.row_of[static_cast<size_t>(a.index)];
  }
  return rr;
}

/// The rows group `g` of a plan made from `r` reads (GroupArg): f(a, i, ref) for row i of each
/// per-row argument a, argument after argument; for a SumN group, f(a, k, ref) for each term
/// a in order, k the row (the sum) it is a term of.
template <class F> void each_arg_row(const Residual& r, const Group& g, F&& f) {
  const Instance* const insts = r.instances.data();
  const Ref* const pool = r.arg_pool.data();
  if (g.tmpl == Instance::kSumN) {
    size_t a = 0;
    for (size_t k = 0; k < g.instances.size(); ++k) {
      const Instance& in = insts[static_cast<size_t>(g.instances[k])];
      for (uint32_t j = 0; j < in.num_args; ++j, ++a)
        f(a, k, pool[in.first_arg + j]);
    }
    return;
  }
  for (size_t a = 0; a < g.args.size(); ++a) {
    if (g.args[a].shared)
      continue;
    for (size_t i = 0; i < g.instances.size(); ++i)
      f(a, i, pool[insts[static_cast<size_t>(g.instances[i])].first_arg + a]);
  }
}

} // namespace pejit::specializer
