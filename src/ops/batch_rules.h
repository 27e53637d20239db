// Which values a batched template node takes and makes, decided from the registry's batching
// rules (OpDef::row, GradOpDef::row) alone: the one decision that the plan executor's batching
// backend and the template-graph runner both apply, so that they refuse the same templates
// with the same words. Plain values in and out: src/graph depends on src/ops, not the reverse.
#pragma once

#include "src/ops/emitter.h"

#include <cstddef>
#include <cstdint>
#include <span>

namespace pejit::ops {

/// How a value of a batched template relates to the group's rows.
enum class RowClass : uint8_t {
  Shared, ///< one value for every row (parameters, constants, what only they feed)
  Rows,   ///< one value per row, the rows as the leading axis
  Summed, ///< a gradient of a shared value: the per-row contributions summed over the rows
};

/// The node asked about: a registry op, a gradient helper, or a sum of terms (graph::Kind::SumN).
struct RowNode {
  enum class Kind : uint8_t { Op, Grad, SumN };
  Kind kind = Kind::SumN;
  uint16_t code = 0; ///< the OpId (Op) or GradOp (Grad)

  static RowNode op(OpId id) { return {Kind::Op, static_cast<uint16_t>(id)}; }
  static RowNode grad(GradOp g) { return {Kind::Grad, static_cast<uint16_t>(g)}; }
  static RowNode sum_n() { return {Kind::SumN, 0}; }
};

/// The class of a node's result, and why it cannot run batched (null: it can). A refused node
/// still gets the class its rule gives, so later nodes classify as before.
struct RowRuleResult {
  RowClass cls = RowClass::Shared;
  const char* refusal = nullptr;
  bool ok() const { return refusal == nullptr; }
};

/// The batched class of `node` over operands of classes `operands`, whose per-row ranks
/// (a per-row value's rank without the row axis; a shared value's rank) are `ranks`. No per-row
/// or summed operand: Shared. A summed operand: Summed, refused unless the node is linear
/// (a sum, add, sub or neg) and reads no shared value. Otherwise the node's RowRule decides.
RowRuleResult batched_row_class(RowNode node, std::span<const RowClass> operands,
                                std::span<const size_t> ranks);

} // namespace pejit::ops
