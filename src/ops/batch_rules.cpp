// The batched classification of template nodes from the registry's batching rules (see
// batch_rules.h). The refusal texts are what users see in row-by-row reasons and unsupported
// template messages; tests/ops/batch_rules_test.cpp pins them.
#include "src/ops/batch_rules.h"

#include "src/util/check.h"

namespace pejit::ops {

RowRuleResult batched_row_class(RowNode node, std::span<const RowClass> operands,
                                std::span<const size_t> ranks) {
  PEJIT_CHECK(ranks.size() == operands.size()) << "one per-row rank per operand";
  bool rows = false, summed = false;
  for (RowClass c : operands) {
    rows = rows || c == RowClass::Rows;
    summed = summed || c == RowClass::Summed;
  }
  if (!rows && !summed)
    return {RowClass::Shared};
  if (summed) {
    // Linear combinations of summed gradients (a parameter read twice); a per-row term is
    // summed over the rows first.
    bool linear = node.kind == RowNode::Kind::SumN ||
                  (node.kind == RowNode::Kind::Op && op_def(static_cast<OpId>(node.code)).linear);
    for (RowClass c : operands)
      linear = linear && c != RowClass::Shared;
    return {RowClass::Summed, linear ? nullptr : "non-linear use of a row-summed gradient"};
  }
  if (node.kind == RowNode::Kind::SumN)
    return {RowClass::Rows};
  const RowRule rule = node.kind == RowNode::Kind::Op
                           ? op_def(static_cast<OpId>(node.code)).row
                           : grad_op_def(static_cast<GradOp>(node.code)).row;
  auto c = [&](size_t i) { return operands[i]; };
  auto refuse = [](const char* why) { return RowRuleResult{RowClass::Rows, why}; };
  switch (rule) {
  case RowRule::Elementwise:
  case RowRule::LastAxis:
  case RowRule::Reduce:
  case RowRule::Reshape:
  case RowRule::Broadcast:
  case RowRule::BroadcastAxis:
    return {RowClass::Rows};
  case RowRule::MatMul:
    if (c(0) == RowClass::Rows && c(1) == RowClass::Shared && ranks[0] == 1 && ranks[1] == 2)
      return {RowClass::Rows};
    return refuse("matmul other than per-row vector @ shared matrix");
  case RowRule::Take:
    if (c(0) != RowClass::Shared)
      return refuse("take from a per-row table");
    return {RowClass::Rows};
  case RowRule::Loss:
    // cross_entropy (logits, labels) and its backward (logits, labels, gy): one logits row or
    // one label may be shared by every row (a template specialized to a constant state); the
    // backward's gy is the per-row loss's gradient. Its result is per row either way: the
    // gradient of shared logits is then summed over the rows like any shared value's.
    if (operands.size() > 2 && c(2) != RowClass::Rows)
      return refuse("cross_entropy gradient of a shared loss");
    return {RowClass::Rows};
  case RowRule::None:
    return refuse("no batched rule");
  case RowRule::Random:
    for (RowClass o : operands)
      if (o != RowClass::Rows)
        return refuse("random op on a shared operand");
    return {RowClass::Rows};
  case RowRule::PerRow:
    for (RowClass o : operands)
      if (o != RowClass::Rows)
        return refuse("per-row gradient op with a shared operand");
    return {RowClass::Rows};
  case RowRule::SumToShape:
    // The gradient of a shared value: summed over the rows.
    return {c(1) == RowClass::Shared ? RowClass::Summed : RowClass::Rows};
  case RowRule::MatMulGradA:
    if (!(c(1) == RowClass::Rows && c(2) == RowClass::Shared))
      return refuse("matmul gradient of a shared left operand");
    return {RowClass::Rows};
  case RowRule::MatMulGradB:
    if (c(1) == RowClass::Rows && c(2) == RowClass::Shared && ranks[1] == 1)
      return {RowClass::Summed}; // one GEMM over all rows: a^T gy
    return refuse("matmul gradient other than of a shared matrix");
  case RowRule::TakeGrad:
    if (c(2) == RowClass::Shared)
      return {RowClass::Summed};
    return refuse("gradient of a per-row table");
  }
  return refuse("no batched rule");
}

} // namespace pejit::ops
