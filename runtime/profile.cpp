// See profile.h.
#include "runtime/profile.h"

#include "src/ops/emitter.h"

#include <algorithm>

namespace pejit::runtime {

using graph::Kind;
using graph::Node;
using graph::NodeId;

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
  case Family::Packing:
    return "weight packing (W, W^T)";
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
  if (n.kind != Kind::Op && n.kind != Kind::Grad)
    return {Family::Layout, 0};
  ops::KernelClass k =
      n.kind == Kind::Op ? ops::op_def(n.op()).kernel : ops::grad_op_def(n.grad_op()).kernel;
  switch (k) {
  case ops::KernelClass::GemmForward: // [rows, K] @ [K, N]: 2 * rows * N * K
    return {Family::GemmForward, 2 * numel(id) * last_dim(n.operands[0])};
  case ops::KernelClass::GemmInputGrad: // dY [rows, N] · W^T: 2 * rows * K * N
    return {Family::GemmInputGrad, 2 * numel(id) * last_dim(n.operands[0])};
  case ops::KernelClass::GemmWeightGrad: // X^T · dY summed over the rows
    return {Family::GemmWeightGrad,
            2 * numel(id) * static_cast<double>(std::max<int64_t>(rows, 1))};
  case ops::KernelClass::Elementwise:
    return {Family::ElementwiseRef, 0};
  case ops::KernelClass::Layout:
  case ops::KernelClass::Expand:
  case ops::KernelClass::Rearrange:
    return {Family::Layout, 0};
  case ops::KernelClass::Fill:
  case ops::KernelClass::Reduction: // losses' gradients are the losses' family, as the enum says
  case ops::KernelClass::ReduceToShape:
    return {Family::Other, 0};
  }
  return {Family::Other, 0};
}

} // namespace pejit::runtime
