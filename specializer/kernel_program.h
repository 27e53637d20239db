// KernelProgram: a template's kernels as the lowering pass decides them (passes/lower.h), for
// any executor: how each node's rows line up (its row class), and per fused kernel of the
// template graph the steps that compute it (elementwise chains, GEMMs with a fused epilogue,
// row reductions, the loss, views, deferred weight gradients, reference nodes). The runtime's
// GraphRunner executes it; `pejit dump --emit kernel-program` and `--dump-after lower` print it.
// Backend-neutral: the kernel specs are the JIT's plain-C++ descriptions (no LLVM type).
#pragma once

#include "src/ops/batch_rules.h"

#include "jit/gemm_codegen.h"
#include "jit/kernel_spec.h"
#include "jit/reduce_spec.h"
#include "src/graph/graph.h"

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace pejit::specializer {

struct TemplateGraph;

/// How a node's value relates to a group's rows: Shared (no row dimension: parameters,
/// constants and what depends only on them), Rows ([rows, ...]) or Summed (a parameter-shaped
/// gradient already summed over the rows); the registry's batching rules decide it.
using RowClass = ops::RowClass;
const char* row_class_name(RowClass c); ///< "shared", "rows", "summed"

/// Where a value is read or written in place: columns [offset, ...) of node `first`'s rows
/// (kNoNode: the value's own array).
using ColumnView = std::pair<graph::NodeId, int64_t>;

/// A maximal chain of f32 elementwise nodes over rows of one width inside a kernel, compiled
/// as one JIT kernel (`index`: its number in the program, the executor's kernel slot). With a
/// `core`, a GEMM fused with the chain per row panel: forward, the x·W whose rows the chain
/// reads (its epilogue); backward, the dY·W^T that reads the rows the chain writes. The steps
/// of its `count` nodes follow it: an executor without the compiled kernel runs those instead.
struct ElementwiseRun {
  size_t index = 0;
  size_t first = 0, count = 0;        ///< positions in the kernel's node list
  std::vector<graph::NodeId> inputs;  ///< values read from outside the run
  std::vector<graph::NodeId> outputs; ///< run nodes read outside it
  /// Per input / output: where it is read or written in place instead. An input that is a
  /// split's part is read as columns of the split's operand; an output read only by a concat
  /// is written into the concat's value.
  std::vector<ColumnView> in_view, out_view;
  int64_t width = 0;
  /// The fused GEMM (spec.panel_rows > 0), or kNoNode. Its value is made by the run.
  graph::NodeId core = graph::kNoNode;
  /// Forward: the concat of row vectors that makes the core's x, or x itself when it is an
  /// argument the caller may leave ungathered, assembled panel by panel by the core just
  /// before its GEMM reads the rows (kNoNode: x is computed before the run).
  graph::NodeId gather = graph::kNoNode;
  /// Forward: arguments the chain reads (not the GEMM) that the core gathers per panel into
  /// their blocks, before the chain reads those rows, when the caller left them ungathered.
  std::vector<graph::NodeId> fills;
  jit::KernelSpec spec;
};

/// A GEMM of per-row vectors by a shared matrix: `x @ W` (forward) or `dY @ W^T` (MatMulGradA),
/// on the library GEMM; `fused_into_run` >= 0 when that run's panel core computes it instead.
struct RowGemm {
  graph::NodeId node = graph::kNoNode;
  bool transposed = false; ///< dY @ W^T
  int64_t fused_into_run = -1;
};

/// The concat of row vectors that a panel core assembles per panel (ElementwiseRun::gather),
/// not computed on its own when the core runs.
struct GatherConcat {
  graph::NodeId node = graph::kNoNode;
  int64_t run = -1;
};

/// A node that the runs read in place once every run has its kernel, not computed then: a
/// split's part or a slice read as columns of its operand, or a bias sum the runs add
/// themselves.
struct InPlaceView {
  graph::NodeId node = graph::kNoNode;
};

/// A node computed by a row-reduction kernel (KernelProgram::reductions[index]) once compiled:
/// a sum over the rows, a reduction along each row, softmax and their gradients.
struct RowReduction {
  graph::NodeId node = graph::kNoNode;
  size_t index = 0;
};

/// Cross-entropy over per-row logits and labels (or one of them shared by every row), or its
/// backward, on a reduction kernel.
struct Loss {
  graph::NodeId node = graph::kNoNode;
  size_t index = 0; ///< KernelProgram::reductions
};

/// A weight gradient x^T·gy that is a parameter's whole gradient: a caller that sums several
/// groups' rows in one GEMM per weight takes it (KernelProgram::weight_grads[index], -1: no
/// generated kernel, the reference GEMM); otherwise it is computed here.
struct DeferredWeightGrad {
  graph::NodeId node = graph::kNoNode;
  int param = -1;
  int64_t index = -1;
};

/// The row-sparse embedding gradient (a TakeGrad of per-row ids): returned as the rows and
/// their ids, never densified. `dense`: it shares its kernel with other nodes and is also
/// computed densely there.
struct SparseEmbeddingGrad {
  graph::NodeId node = graph::kNoNode;
  bool dense = false;
};

/// A take of per-row ids from a table shared by all rows (the embedding lookup): one row
/// copy per id, written straight into the caller's block of template result `result` when
/// the rows are that result (-1: into the node's own value). Its backward is the row-sparse
/// gradient (SparseEmbeddingGrad).
struct RowGather {
  graph::NodeId node = graph::kNoNode;
  int64_t result = -1;
};

/// Any other node: its reference kernel on all rows of the group.
struct ReferenceNode {
  graph::NodeId node = graph::kNoNode;
};

/// One step of a kernel. A closed set: a new family is a compile error wherever a visitor
/// does not handle it.
using KernelStep =
    std::variant<ElementwiseRun, RowGemm, GatherConcat, InPlaceView, RowReduction, Loss,
                 DeferredWeightGrad, SparseEmbeddingGrad, RowGather, ReferenceNode>;

/// The steps of one fused kernel of the template graph, in order.
struct KernelSteps {
  std::vector<KernelStep> steps;
};

/// A node on a row-reduction kernel (jit/reduce_spec.h).
struct ReductionSpec {
  graph::NodeId node = graph::kNoNode;
  jit::ReduceSpec spec;
  /// The backward pass's sum over the rows of this per-row parameter gradient, not the node
  /// itself.
  bool param_sum = false;
  /// The kernel's rows per plan row: a reduction along rows of a per-row matrix (softmax over
  /// the last axis of a [a, w] value) runs a rows of w floats for each.
  int64_t per_row = 1;
  /// A cross-entropy backward with spec.row_stats: the index of the forward reduction whose
  /// row statistics it reads (that forward's spec has row_stats too); else -1.
  int32_t stats_from = -1;
};

/// A deferrable weight gradient's TN GEMM over the groups' row stretches.
struct WeightGradSpec {
  graph::NodeId node = graph::kNoNode;
  int param = -1; ///< module parameter index
  jit::GemmSpec spec;
};

/// How the backward pass finishes a parameter's gradient.
struct ParamGradStep {
  enum class How : uint8_t {
    None,      ///< no gradient node
    Deferred,  ///< a DeferredWeightGrad (computed here when the caller does not take it)
    Sparse,    ///< the rows and their ids (SparseEmbeddingGrad)
    SumRows,   ///< a per-row value summed over the rows (`reduction` >= 0: on that kernel)
    TimesRows, ///< a shared value: the same gradient for every row
    AsIs,      ///< already summed
  };
  graph::NodeId node = graph::kNoNode;
  int param = -1;
  How how = How::None;
  int64_t reduction = -1;   ///< SumRows: index into reductions
  int64_t weight_grad = -1; ///< Deferred: index into weight_grads
};

struct LowerOptions {
  /// Plan the kernel steps (runs, panel cores, reductions, weight-gradient GEMMs); false: row
  /// classes and reference steps only (an executor without a JIT).
  bool kernels = true;
};

/// What the lowering decided for one template graph.
struct KernelProgram {
  bool lowered = false;            ///< made by passes::lower (a default one describes nothing)
  bool kernels = false;            ///< kernel steps were planned (LowerOptions::kernels, supported)
  std::string why;                 ///< non-empty: not supported (the first node no rule covers)
  std::vector<RowClass> row_class; ///< by node
  std::vector<std::vector<graph::NodeId>> split_parts; ///< per split node: its siblings
  std::vector<KernelSteps> fwd, bwd;                   ///< per fused kernel (empty: unsupported)
  std::vector<ReductionSpec> reductions;
  std::vector<WeightGradSpec> weight_grads;
  std::vector<ParamGradStep> param_grads; ///< per TemplateGraph::bwd_param_grads entry
  /// By node: a row output of a run that, once every run has its kernel, may be written
  /// straight into the caller's block.
  std::vector<bool> run_output;
  /// By argument: read only by a concat a panel core assembles (or gathered per panel): the
  /// caller may pass its rows' addresses instead of gathering them.
  std::vector<bool> lazy_args;
  size_t run_count = 0; ///< ElementwiseRun::index is below it

  bool supported() const { return why.empty(); }
  RowClass cls(graph::NodeId id) const { return row_class[static_cast<size_t>(id)]; }
};

/// The program as text: the row classes, then per kernel its steps, the reductions, weight
/// gradients and parameter gradients. Deterministic (golden files).
std::string print_kernel_program(const TemplateGraph& tg, const KernelProgram& p);

} // namespace pejit::specializer
