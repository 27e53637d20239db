// See profile.h.
#include "runtime/profile.h"

#include "src/ops/op.h"

#include <algorithm>

namespace pejit::runtime {

using graph::Kind;
using graph::Node;
using graph::NodeId;
using ops::GradOp;
using ops::OpId;

const char* family_name(Family f) {
  switch (f) {
  case Family::GemmForward:
    return "gemm forward (x@W)";
  case Family::GemmInputGrad:
    return "gemm dX (dY@W^T)";
  case Family::GemmWeightGrad:
    return "gemm dW (X^T@dY)";
  case Family::PanelForward:
    return "panels x@W + epilogue";
  case Family::PanelInputGrad:
    return "panels chain + dY@W^T";
  case Family::ElementwiseJit:
    return "elementwise (JIT)";
  case Family::ElementwiseRef:
    return "elementwise (reference)";
  case Family::Layout:
    return "layout (concat/split/take)";
  case Family::Other:
    return "reductions and losses";
  case Family::Gathers:
    return "executor gathers and seeds";
  case Family::kCount:
    break;
  }
  return "?";
}

void record(Profile& p, Family f, ProfileClock::time_point t0, double flops) {
  auto& ft = p[static_cast<size_t>(f)];
  ft.calls++;
  ft.seconds += std::chrono::duration<double>(ProfileClock::now() - t0).count();
  ft.flops += flops;
}

void accumulate(Profile& into, const Profile& p) {
  for (size_t f = 0; f < p.size(); ++f) {
    into[f].calls += p[f].calls;
    into[f].seconds += p[f].seconds;
    into[f].flops += p[f].flops;
  }
}

std::pair<Family, double> family_of(const graph::Graph& g, NodeId id, std::span<const Tensor> vals,
                                    int64_t rows) {
  const Node& n = g.node(id);
  auto numel = [&](NodeId o) { return static_cast<double>(vals[static_cast<size_t>(o)].numel()); };
  auto last_dim = [&](NodeId o) {
    const Tensor& t = vals[static_cast<size_t>(o)];
    return t.rank() == 0 ? 1.0 : static_cast<double>(t.dim(-1));
  };
  if (n.kind == Kind::SumN)
    return {Family::ElementwiseRef, 0};
  if (n.kind == Kind::Op) {
    if (n.op() == OpId::MatMul) // [rows, K] @ [K, N]: 2 * rows * N * K
      return {Family::GemmForward, 2 * numel(id) * last_dim(n.operands[0])};
    if (ops::op_def(n.op()).elementwise)
      return {Family::ElementwiseRef, 0};
    switch (n.op()) {
    case OpId::Concat:
    case OpId::Split:
    case OpId::Slice:
    case OpId::Take:
    case OpId::Reshape:
    case OpId::Transpose:
      return {Family::Layout, 0};
    default:
      return {Family::Other, 0};
    }
  }
  if (n.kind == Kind::Grad) {
    switch (n.grad_op()) {
    case GradOp::MatMulGradA: // dY [rows, N] · W^T: 2 * rows * K * N
      return {Family::GemmInputGrad, 2 * numel(id) * last_dim(n.operands[0])};
    case GradOp::MatMulGradB: // X^T · dY summed over the rows
      return {Family::GemmWeightGrad,
              2 * numel(id) * static_cast<double>(std::max<int64_t>(rows, 1))};
    case GradOp::SigmoidBwd:
    case GradOp::TanhBwd:
    case GradOp::ReluBwd:
      return {Family::ElementwiseRef, 0};
    case GradOp::SumToShape:
    case GradOp::UnsumAxis:
    case GradOp::SoftmaxBwd: // losses' gradients are the losses' family, as the enum says
    case GradOp::LogSoftmaxBwd:
    case GradOp::CrossEntropyBwd:
      return {Family::Other, 0};
    default:
      return {Family::Layout, 0};
    }
  }
  return {Family::Layout, 0};
}

} // namespace pejit::runtime
