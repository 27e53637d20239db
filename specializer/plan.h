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

#include <algorithm>
#include <cstdint>
#include <memory>
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

/// A row map: a vector of RowRef that holds one row inline. A batch's loss sum has one
/// argument of one row per term (hundreds), which would otherwise cost an allocation each.
class RowList {
public:
  RowList() = default;
  RowList(const RowList& o) { assign(o.begin(), o.end()); }
  RowList(RowList&& o) noexcept { take(o); }
  RowList& operator=(const RowList& o) {
    if (this != &o)
      assign(o.begin(), o.end());
    return *this;
  }
  RowList& operator=(RowList&& o) noexcept {
    if (this != &o) {
      heap_.reset();
      take(o);
    }
    return *this;
  }

  size_t size() const { return size_; }
  RowRef* data() { return heap_ ? heap_.get() : &one_; }
  const RowRef* data() const { return heap_ ? heap_.get() : &one_; }
  RowRef& operator[](size_t i) { return data()[i]; }
  const RowRef& operator[](size_t i) const { return data()[i]; }
  const RowRef* begin() const { return data(); }
  const RowRef* end() const { return data() + size_; }
  RowRef* begin() { return data(); }
  RowRef* end() { return data() + size_; }
  /// n default rows (what was there is lost).
  void resize(size_t n) {
    heap_.reset();
    size_ = n;
    if (n > 1)
      heap_ = std::make_unique<RowRef[]>(n);
    else
      one_ = RowRef{};
  }
  void assign(size_t n, const RowRef& r) {
    resize(n);
    std::fill(begin(), end(), r);
  }
  void assign(const RowRef* first, const RowRef* last) {
    resize(static_cast<size_t>(last - first));
    std::copy(first, last, begin());
  }

private:
  std::unique_ptr<RowRef[]> heap_; ///< null: at most one row, in one_
  RowRef one_;
  size_t size_ = 0;

  void take(RowList& o) {
    heap_ = std::move(o.heap_);
    one_ = o.one_;
    size_ = o.size_;
    o.size_ = 0;
  }
};

struct GroupArg {
  bool shared = false;
  Ref shared_ref; ///< shared: the same tensor for every row
  RowList rows;   ///< not shared: row i comes from rows[i]
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

} // namespace pejit::specializer
