// ops::batched_row_class, the registry's batching decision: which operand mixes each op and
// gradient helper runs on all of a group's rows at once, the class of its result, and the exact
// refusal text (what row-by-row reasons and unsupported-template messages show).
#include "src/ops/batch_rules.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace tests_ops_batch_rules_test {

using namespace pejit;
using ops::GradOp;
using ops::OpId;
using ops::RowClass;
using ops::RowNode;

namespace {

constexpr RowClass S = RowClass::Shared, R = RowClass::Rows, M = RowClass::Summed;

// Per-row ranks default to 1 (row vectors), the common case in templates.
ops::RowRuleResult classify(RowNode node, std::vector<RowClass> cls,
                            std::vector<size_t> ranks = {}) {
  if (ranks.empty())
    ranks.assign(cls.size(), 1);
  return ops::batched_row_class(node, cls, ranks);
}

std::string refusal(const ops::RowRuleResult& r) {
  return r.ok() ? "" : r.refusal;
}

void check_ok(const ops::RowRuleResult& r, RowClass want) {
  CHECK_MESSAGE(r.ok(), refusal(r));
  CHECK(r.cls == want);
}

void check_refused(const ops::RowRuleResult& r, RowClass cls, const std::string& why) {
  CHECK(refusal(r) == why);
  CHECK(r.cls == cls);
}

} // namespace

TEST_SUITE("ops") {
  TEST_CASE("batching rules: no per-row or summed operand is shared, whatever the op") {
    check_ok(classify(RowNode::op(OpId::MatMul), {S, S}, {2, 2}), S);
    check_ok(classify(RowNode::op(OpId::Transpose), {S}, {2}), S);
    check_ok(classify(RowNode::op(OpId::Zeros), {}), S);
    check_ok(classify(RowNode::grad(GradOp::TakeGrad), {S, S, S}), S);
    check_ok(classify(RowNode::sum_n(), {S, S}), S);
  }

  TEST_CASE("batching rules of the registry ops") {
    // Elementwise: operands broadcast after the row axis, in any mix.
    check_ok(classify(RowNode::op(OpId::Add), {R, S}, {1, 0}), R);
    check_ok(classify(RowNode::op(OpId::Lt), {S, R}), R);
    check_ok(classify(RowNode::op(OpId::Tanh), {R}), R);
    check_ok(classify(RowNode::op(OpId::ToI32), {R}), R);
    // Last-axis ops, reductions and reshape act on each row.
    check_ok(classify(RowNode::op(OpId::Concat), {R, S, R}), R);
    for (OpId id : {OpId::Split, OpId::Slice, OpId::Softmax, OpId::LogSoftmax, OpId::Argmax,
                    OpId::Sum, OpId::Mean, OpId::Reshape}) {
      CAPTURE(ops::op_name(id));
      check_ok(classify(RowNode::op(id), {R}), R);
    }
    // matmul: only a per-row vector times a shared matrix is one GEMM.
    check_ok(classify(RowNode::op(OpId::MatMul), {R, S}, {1, 2}), R);
    const std::string mm = "matmul other than per-row vector @ shared matrix";
    check_refused(classify(RowNode::op(OpId::MatMul), {R, S}, {2, 2}), R, mm);
    check_refused(classify(RowNode::op(OpId::MatMul), {R, S}, {1, 1}), R, mm);
    check_refused(classify(RowNode::op(OpId::MatMul), {S, R}, {1, 2}), R, mm);
    check_refused(classify(RowNode::op(OpId::MatMul), {R, R}, {1, 2}), R, mm);
    // take: per-row ids into a shared table.
    check_ok(classify(RowNode::op(OpId::Take), {S, R}, {2, 0}), R);
    check_refused(classify(RowNode::op(OpId::Take), {R, S}, {2, 0}), R,
                  "take from a per-row table");
    check_refused(classify(RowNode::op(OpId::Take), {R, R}, {2, 0}), R,
                  "take from a per-row table");
    // cross_entropy: logits and labels per row, or one of them shared by every row.
    check_ok(classify(RowNode::op(OpId::CrossEntropy), {R, R}, {1, 0}), R);
    check_ok(classify(RowNode::op(OpId::CrossEntropy), {R, S}, {1, 0}), R);
    check_ok(classify(RowNode::op(OpId::CrossEntropy), {S, R}, {1, 0}), R);
    // Random ops: the value and the key both per row (each row draws with its own key).
    check_ok(classify(RowNode::op(OpId::Dropout), {R, R}, {1, 1}), R);
    check_ok(classify(RowNode::op(OpId::Uniform), {R}, {1}), R);
    check_refused(classify(RowNode::op(OpId::Dropout), {S, R}, {1, 1}), R,
                  "random op on a shared operand");
    check_refused(classify(RowNode::op(OpId::Dropout), {R, S}, {1, 1}), R,
                  "random op on a shared operand");
    // No batched form.
    check_refused(classify(RowNode::op(OpId::Transpose), {R}, {2}), R, "no batched rule");
    check_refused(classify(RowNode::op(OpId::Full), {R}, {0}), R, "no batched rule");
  }

  TEST_CASE("batching rules of the gradient helpers") {
    // Elementwise backward ops and broadcasts: any mix.
    for (GradOp g : {GradOp::SigmoidBwd, GradOp::TanhBwd, GradOp::ReluBwd, GradOp::BroadcastTo,
                     GradOp::UnsumAxis}) {
      CAPTURE(ops::grad_op_name(g));
      check_ok(classify(RowNode::grad(g), {R, S}), R);
      check_ok(classify(RowNode::grad(g), {S, R}), R);
    }
    // Per-row only.
    const std::string per_row = "per-row gradient op with a shared operand";
    for (GradOp g :
         {GradOp::SoftmaxBwd, GradOp::LogSoftmaxBwd, GradOp::PadSlice, GradOp::ReshapeLike}) {
      CAPTURE(ops::grad_op_name(g));
      check_ok(classify(RowNode::grad(g), {R, R}), R);
      check_refused(classify(RowNode::grad(g), {R, S}), R, per_row);
      check_refused(classify(RowNode::grad(g), {S, R}), R, per_row);
    }
    // cross_entropy's gradient: a per-row gradient, also of shared logits or labels (then
    // summed over the rows where a shared value needs it); the loss's gradient per row.
    check_ok(classify(RowNode::grad(GradOp::CrossEntropyBwd), {R, R, R}), R);
    check_ok(classify(RowNode::grad(GradOp::CrossEntropyBwd), {S, R, R}), R);
    check_ok(classify(RowNode::grad(GradOp::CrossEntropyBwd), {R, S, R}), R);
    check_refused(classify(RowNode::grad(GradOp::CrossEntropyBwd), {R, R, S}), R,
                  "cross_entropy gradient of a shared loss");
    // sum_to_shape: to a shared target it sums over the rows.
    check_ok(classify(RowNode::grad(GradOp::SumToShape), {R, S}), M);
    check_ok(classify(RowNode::grad(GradOp::SumToShape), {R, R}), R);
    check_ok(classify(RowNode::grad(GradOp::SumToShape), {S, R}), R);
    // matmul gradients: dX per row, dW summed over the rows (per-row vectors only).
    check_ok(classify(RowNode::grad(GradOp::MatMulGradA), {R, R, S}, {1, 1, 2}), R);
    check_refused(classify(RowNode::grad(GradOp::MatMulGradA), {R, S, R}, {1, 1, 2}), R,
                  "matmul gradient of a shared left operand");
    check_ok(classify(RowNode::grad(GradOp::MatMulGradB), {R, R, S}, {1, 1, 2}), M);
    const std::string mmb = "matmul gradient other than of a shared matrix";
    check_refused(classify(RowNode::grad(GradOp::MatMulGradB), {R, R, S}, {2, 2, 2}), R, mmb);
    check_refused(classify(RowNode::grad(GradOp::MatMulGradB), {R, S, R}, {1, 1, 2}), R, mmb);
    // take's gradient: a shared table's, summed over the rows.
    check_ok(classify(RowNode::grad(GradOp::TakeGrad), {R, R, S}, {0, 1, 2}), M);
    check_refused(classify(RowNode::grad(GradOp::TakeGrad), {R, R, R}, {0, 1, 2}), R,
                  "gradient of a per-row table");
  }

  TEST_CASE("batching rules: a row-summed gradient passes only through linear nodes") {
    const std::string nonlinear = "non-linear use of a row-summed gradient";
    check_ok(classify(RowNode::op(OpId::Add), {M, M}), M);
    check_ok(classify(RowNode::op(OpId::Add), {M, R}), M); // the per-row term is summed first
    check_ok(classify(RowNode::op(OpId::Sub), {R, M}), M);
    check_ok(classify(RowNode::op(OpId::Neg), {M}), M);
    check_ok(classify(RowNode::sum_n(), {M, R, M}), M);
    check_refused(classify(RowNode::op(OpId::Add), {M, S}), M, nonlinear);
    check_refused(classify(RowNode::sum_n(), {M, S}), M, nonlinear);
    check_refused(classify(RowNode::op(OpId::Mul), {M, R}), M, nonlinear);
    check_refused(classify(RowNode::op(OpId::Tanh), {M}), M, nonlinear);
    check_refused(classify(RowNode::grad(GradOp::SumToShape), {M, S}), M, nonlinear);
    check_refused(classify(RowNode::grad(GradOp::BroadcastTo), {M, R}), M, nonlinear);
  }

  TEST_CASE("batching rules: a sum of per-row and shared terms is per row") {
    check_ok(classify(RowNode::sum_n(), {R, S}), R);
    check_ok(classify(RowNode::sum_n(), {S, R, R}), R);
  }
}

} // namespace tests_ops_batch_rules_test
