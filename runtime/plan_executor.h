// The plan executor: runs a plan's groups as batched template calls and, for training, their
// backward in reverse group order, inside an arena it owns and reuses.
//
// Design note.
// - Layout (ExecLayout, made once per plan and cached with it; linear in the rows): every
//   group result is a contiguous [rows, ...] block of the arena; every per-row argument of a
//   template group is gathered into its own [rows, ...] block by an index map (one copy per
//   run of consecutive source rows); for training, every result has a seed block (its rows'
//   incoming gradients) and every per-row f32 argument a gradient block. The arena holds
//   4-byte elements (f32 and i32); offsets are in elements.
// - Backward: groups in reverse order. A result's seed rows are *read* from the gradient
//   blocks of the rows that consumed it (the "child reads its gradient from its parent" of
//   the schedule: a gather-sum in a fixed order, no scatter-add, deterministic); a term of an
//   n-ary sum reads the sum's seed directly. The entry's scalar output is seeded with 1.
// - Kernels: a group's template runs on all its rows at once, by default on its template graph
//   (GraphRunner: the forward and backward fused kernels made once per template, their
//   elementwise runs on JIT code when a kernel cache is given, the rest on reference
//   kernels). A template whose graph has a node without a batched rule runs through the
//   shared evaluator with a batching backend and a tape instead (and a group whose template
//   has an op without a batching rule there runs row by row). Either way the argument
//   gradients are written to their blocks and the parameter gradients are summed over the
//   rows: on template graphs, each weight's gradient is one GEMM over the rows of every group
//   that uses it, after the backward sweep (the interpreter path: one per group); the
//   embedding's stays row-sparse.
// - Memory: the arena grows to the largest plan run and is then reused; results and gathered
//   arguments are arena views. The reference kernels still allocate their intermediate tensors
//   (from the tensor pool, not malloc).
#pragma once

#include "runtime/exec_layout.h"
#include "runtime/graph_runner.h"
#include "specializer/plan.h"
#include "src/interp/interpreter.h"

#include <memory>
#include <string>
#include <vector>

namespace pejit::jit {
class KernelCache;
}

namespace pejit::runtime {

class GradReady;

class RunnerCache;
class Workers;

struct PlanStats {
  int64_t groups_batched = 0;    ///< groups run as one batched call
  int64_t groups_row_by_row = 0; ///< groups whose template has an op without a batching rule
  std::vector<std::string> row_by_row_reasons; ///< "template: why", one per such group
  int64_t groups_on_graphs = 0;                ///< groups run on their template graph's kernels
  int64_t jit_launches = 0;                    ///< compiled elementwise runs launched
  int64_t ref_nodes = 0;                       ///< template-graph nodes run on reference kernels
  int64_t jit_reductions = 0; ///< row sums and cross-entropy (and backward) on JIT kernels
  int64_t ce_from_stats = 0;  ///< GraphRunStats::ce_from_stats
  int64_t in_place = 0; ///< splits, concats and result copies saved: runs read / wrote in place
  /// Slices that are an argument's gradient or a result, copied straight into its block
  /// (not run on reference kernels and copied there after; GraphRunStats::direct_slices).
  int64_t direct_slices = 0;
  /// dY·W^T products that are an argument's gradient, computed straight into its block
  /// (GraphRunStats::direct_gemms).
  int64_t direct_gemms = 0;
  int64_t panel_launches = 0; ///< runs launched fused with their GEMM per row panel
  int64_t jit_gemm_cores = 0; ///< of those, whose GEMM rows ran on the kernel's generated core
  /// Arguments not gathered by the executor: their panel cores gathered the rows themselves.
  int64_t lazy_gathers = 0;
  /// Groups that asked the shared template-graph cache for their graph; a group whose
  /// template's compiled graph this executor already holds asks nothing.
  int64_t runner_lookups = 0;
  int64_t weight_grad_gemms = 0; ///< one per weight per training run (every group's rows)
  /// Column blocks those GEMMs were cut into for the workers (0: each ran whole).
  int64_t weight_grad_blocks = 0;
  int64_t jit_weight_grads = 0; ///< of those, run on a generated TN kernel
  /// Buffers allocated for the packed weights (W and W^T in the GEMM cores' panels): the
  /// forms are packed anew each run, into the last run's buffers when the shapes match.
  int64_t packed_buffers = 0;
  /// Buffers allocated for the template graphs' intermediates (ScratchArena): a run reuses
  /// the last run's when nothing of it is held any more.
  int64_t scratch_buffers = 0;
  /// The most elements of that buffer the last run held at once (ScratchArena::peak): a
  /// training run keeps its groups' intermediates for the backward, an inference run only
  /// one group's at a time.
  int64_t scratch_elems = 0;
  /// Templates that run through the batching interpreter instead of their graph, and why.
  std::vector<std::string> graph_fallbacks;
  /// Groups run through the batching interpreter (not on a template graph: the cases above),
  /// one per group per run, and the seconds of their forward and backward there. Only these
  /// groups are timed, so the graph path pays no clock reads.
  int64_t groups_interpreted = 0;
  double interpreted_seconds = 0;
  /// Their templates and why, each once ("template: why"): graph_fallbacks, and the templates
  /// never offered to a graph (an argument shared by every row, or graphs off).
  std::vector<std::string> interpreted_templates;
  /// With ExecOptions::profile: time (and GEMM flops) per kernel family, over all runs.
  Profile profile{};
};

/// How a plan's template groups are run.
struct ExecOptions {
  /// Run each template's graph (traced, differentiated, optimized and fused once per
  /// template); false: every group through the batching interpreter and its tape.
  bool graphs = true;
  /// With `graphs`: compile the kernels' elementwise runs here (null: reference kernels only).
  jit::KernelCache* kernels = nullptr;
  /// With `graphs`: a template-graph cache shared with others (the engine's pipeline); null:
  /// the executor keeps its own (over `kernels`).
  RunnerCache* runners = nullptr;
  /// Compile a template's runs before its first use (waiting for LLVM); false: run on
  /// reference kernels until someone else (the pipeline) has compiled them.
  bool compile = true;
  /// Time every kernel launch, gather and weight-gradient GEMM into PlanStats::profile (two
  /// clock reads each; for benchmarks).
  bool profile = false;
  /// With compiled kernels: runs fused with a GEMM compute it per row panel (JIT panel
  /// kernels); false: the GEMM whole, then the run (the same results; for comparisons).
  bool panels = true;
  /// Panel kernels run their generated GEMM core; false: the C++ GEMM kernels do (the same
  /// bits; for comparisons).
  bool jit_gemm = true;
  /// With compiled kernels: weight gradients run on their generated TN kernels; false: on
  /// kernels::sgemm_tn_stretches (the same bits on AVX-512 builds; for comparisons).
  bool jit_weight_grads = true;
  /// The threads a run's work is split across (row blocks of compiled runs, per-row
  /// reductions, gathers; weight gradients by weight), the same bits for any count; null: the
  /// calling thread alone. Not owned: it outlives the executor.
  const Workers* workers = nullptr;
};

class PlanExecutor {
public:
  PlanExecutor(std::shared_ptr<const ir::Module> m, interp::DimBindings dims,
               ExecOptions options = {});
  ~PlanExecutor();

  /// The entry's outputs (Residual::outputs order). `layout` is the plan's (made here when
  /// null). Reads only the plan, the layout and `r`'s inputs and constants.
  std::vector<Tensor> run(const specializer::Plan& plan, const specializer::Residual& r,
                          const specializer::TemplateTable& templates, const interp::Params& params,
                          const ExecLayout* layout = nullptr);

  /// Value of a scalar entry and the gradient of every parameter. The gradients may view this
  /// executor's arena (the embedding's row-sparse ids and rows do): they are valid until its
  /// next run; a caller that keeps them longer (accumulating over batches) copies them first.
  /// `ready` (null: nobody) is told of each parameter's gradient as it becomes final: the
  /// ones the backward pass made first, then each weight after its deferred GEMM.
  interp::Interpreter::Gradients
  value_and_grad(const specializer::Plan& plan, const specializer::Residual& r,
                 const specializer::TemplateTable& templates, const interp::Params& params,
                 const ExecLayout* layout = nullptr, GradReady* ready = nullptr);

  const PlanStats& stats() const { return stats_; }

  PlanExecutor(const PlanExecutor&) = delete;
  PlanExecutor& operator=(const PlanExecutor&) = delete;

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  PlanStats stats_;
};

} // namespace pejit::runtime
