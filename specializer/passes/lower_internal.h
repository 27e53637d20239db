// The lowering pass's working state and its parts (internal to passes/lower*.cpp): the row
// classes (lower.cpp), the elementwise runs and their in-place views (lower_runs.cpp), the
// GEMM cores of panel runs (lower_panels.cpp), the row reductions and the deferred weight
// gradients' GEMMs (lower_reductions.cpp).
#pragma once

#include "specializer/kernel_program.h"
#include "specializer/template_graph.h"

#include <optional>
#include <string>
#include <vector>

namespace pejit::specializer::passes::lowering {

/// A per-row value's rank (its type's rank: node types are per instance).
inline size_t rank_of(const graph::Node& n) {
  return n.type.dims.size();
}
/// The JIT's op for an elementwise node; nullopt for any other node.
std::optional<jit::ElementwiseOp> jit_op(const graph::Node& n);
/// The most parts of a concat that a panel core assembles (ElementwiseRun::gather).
inline constexpr size_t kMaxGatherParts = jit::PanelCore::kMaxParts;

struct Lowering {
  const TemplateGraph& tg;
  const graph::Graph& g;
  KernelProgram& p;
  std::vector<bool> deferrable; ///< by node: a weight gradient a caller may take
  /// By node: not computed once every run has its kernel (a split part the runs read in
  /// place; a bias sum whose columns the runs add themselves).
  std::vector<bool> skip;
  /// By node: a forward GEMM (or the concat of its x) that its run computes per panel.
  std::vector<bool> fused;
  std::vector<int32_t> reduction_of; ///< by node: its index in p.reductions, or -1
  std::vector<std::vector<ElementwiseRun>> fwd_runs, bwd_runs; ///< per kernel

  RowClass cls(graph::NodeId id) const { return p.row_class[static_cast<size_t>(id)]; }
};

/// Every node's row class; `why` gets the first node no batched rule covers (one place for
/// the per-op batching decisions).
void classify_rows(const TemplateGraph& tg, std::vector<RowClass>& cls, std::string& why);
/// The elementwise runs of every kernel, their specs and in-place views (then find_cores).
void plan_runs(Lowering& l);
/// The GEMM cores of the runs (panel kernels) and the arguments they gather.
void find_cores(Lowering& l, const std::vector<std::vector<graph::NodeId>>& users,
                const std::vector<bool>& kept);
/// The nodes on row-reduction kernels (and the parameter gradients summed over the rows).
void plan_reductions(Lowering& l);
/// A TN GEMM spec per deferrable weight gradient.
void plan_weight_grads(Lowering& l);

} // namespace pejit::specializer::passes::lowering
