// GraphRunner's elementwise runs and row reductions (internal to runtime/): their
// descriptions, shared by the code that finds and compiles them (graph_runs.cpp,
// graph_reductions.cpp, graph_panels.cpp for the GEMM cores) and the code that launches them
// (graph_runner.cpp, graph_panels.cpp).
#pragma once

#include "runtime/graph_runner.h"

#include "jit/kernel_cache.h"

#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace pejit::runtime {

namespace detail {
/// [rows, dims...].
inline Shape with_rows(int64_t rows, std::span<const int64_t> dims) {
  Shape s{rows};
  for (auto d : dims)
    s.push_back(d);
  return s;
}
/// The most parts of a concat that a panel core assembles (Run::gather).
inline constexpr size_t kMaxGatherParts = 8;
/// A per-row value's rank (its type's rank: node types are per instance).
size_t rank_of(const graph::Node& n);
/// The JIT's op for an elementwise node; nullopt for any other node.
std::optional<jit::ElementwiseOp> jit_op(const graph::Node& n);
} // namespace detail

// A maximal run of f32 elementwise nodes over rows of one width inside a kernel, compiled.
struct GraphRunner::Run {
  size_t first = 0, count = 0;        ///< positions in the kernel's node list
  std::vector<graph::NodeId> inputs;  ///< values read from outside the run
  std::vector<graph::NodeId> outputs; ///< run nodes read outside it
  /// Per input / output: where it is read or written in place instead (kNoNode: its own
  /// value). An input that is a split's part is read as columns [offset, offset + width) of
  /// the split's operand; an output read only by a concat is written into the concat's value.
  std::vector<std::pair<graph::NodeId, int64_t>> in_view, out_view;
  int64_t width = 0;
  /// A GEMM fused with the run per row panel (spec.panel_rows > 0), or kNoNode. Forward
  /// (spec.core_first): the x·W whose rows the run reads; backward: the dY·W^T (MatMulGradA)
  /// that reads the rows the run writes into a concat. Its value is made by the run.
  graph::NodeId core = graph::kNoNode;
  /// Forward: the concat of row vectors that makes the core's x, or x itself when it is an
  /// argument the caller may leave ungathered, assembled panel by panel by the core just
  /// before its GEMM reads the rows (kNoNode: x is computed before the run).
  graph::NodeId gather = graph::kNoNode;
  /// Forward: arguments the chain reads (not the GEMM) that the core gathers per panel into
  /// their blocks, before the chain reads those rows, when the caller left them ungathered.
  std::vector<graph::NodeId> fills;
  jit::KernelSpec spec;
  std::shared_ptr<const jit::CachedKernel> kernel; ///< null until compile()
};

// A node run on a row-reduction kernel once compiled (graph_reductions.cpp).
struct GraphRunner::Reduction {
  graph::NodeId node = graph::kNoNode;
  jit::ReduceSpec spec;
  /// The backward pass's sum over the rows of this per-row parameter gradient (sum_rows()),
  /// not the node itself.
  bool param_sum = false;
  /// The kernel's rows per plan row: a reduction along rows of a per-row matrix (softmax over
  /// the last axis of a [a, w] value) runs a rows of w floats for each.
  int64_t per_row = 1;
  std::shared_ptr<const jit::CachedKernel> kernel; ///< null until compile()
};

// A deferrable weight gradient's TN GEMM (graph_weight_grads.cpp).
struct GraphRunner::WeightGrad {
  graph::NodeId node = graph::kNoNode;
  int param = -1;
  jit::GemmSpec spec;
  std::shared_ptr<const jit::CachedKernel> kernel; ///< null until compile()
};

} // namespace pejit::runtime
