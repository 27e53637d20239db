// GraphRunner: runs a template's graph (specializer::TemplateGraph: traced, differentiated, optimized,
// partitioned into fused kernels) on all rows of a plan group at once: the forward kernels,
// and for training the backward kernels, in their order.
//
// Design note.
// - Row classes, decided once per graph: a node is Shared (no row dimension: parameters,
//   constants and what depends only on them), Rows ([rows, ...]: arguments, seeds and what
//   depends on them) or Summed (a parameter-shaped gradient already summed over the rows: the
//   weight gradient of `x @ W` is one GEMM over all rows, a bias gradient one reduction).
//   Each op has a rule saying which classes it takes and how its operands line up (a per-row
//   value of lower rank is expanded after the row axis; axis attributes shift by one). A graph
//   with a node no rule covers is not supported: the executor runs that template through the
//   batching interpreter instead (supported() and why()).
// - Kernels: a fused kernel's maximal runs of f32 elementwise nodes over rows of one width
//   (the gate epilogue of a TreeLSTM cell, its backward chain) get a JIT kernel spec each;
//   once compile() has compiled them they run as one pass over the rows, until then on
//   reference kernels. Cross-entropy and its backward over per-row logits and labels, and
//   the sums over the rows (a bias gradient: a SumToShape summed over the rows, a parameter
//   gradient that is a per-row value) get a row-reduction kernel (jit/reduce_spec.h) each,
//   compiled and launched the same way (graph_reductions.cpp). Every other node (GEMMs
//   through the library, layout ops, other reductions) runs its reference kernel on all rows.
// - Panels: a run that reads the rows of an x·W (its gate epilogue), or whose output is the
//   dY of a dY·W^T (its gate-gradient chain), is compiled as a panel kernel: generated code
//   that walks the rows in panels of 48 and per panel gathers the rows the GEMM reads (and
//   the chain's ungathered argument rows), computes those rows of the product with the
//   kernel's own generated GEMM core (jit/gemm_panel_codegen.cpp, on W or W^T packed once per
//   plan run) and runs the chain on them, so a panel's GEMM rows are consumed while in cache,
//   all in one generated function (jit::PanelCore says what it is given). The GEMM
//   node is then not evaluated on its own. Row results do not depend on the panel split, and
//   the generated core gives the bits of src/kernels/gemm.cpp's kernels (State::jit_gemm).
// - Weight gradients x^T·gy that are a parameter's whole gradient can be left to the caller
//   (State::deferred), which sums every group's rows in one GEMM per weight: a generated TN
//   kernel over the groups' row stretches once compiled (graph_weight_grads.cpp), until then
//   the reference kernel (the same bits).
// - The embedding gradient stays row-sparse: a parameter gradient that is a TakeGrad of
//   per-row ids is returned as the rows and their ids, never densified.
// Not handled (falls back): arguments shared by all rows of a group, matmuls whose per-row
// operand is a matrix, take from a per-row table, gathers/scatters inside a template.
#pragma once

#include "src/interp/params.h"
#include "src/interp/tape.h"
#include "jit/gemm_codegen.h"
#include "jit/kernel_spec.h"
#include "jit/reduce_spec.h"
#include "runtime/profile.h"
#include "specializer/template_graph.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace pejit::jit {
class KernelCache;
struct CachedKernel;
} // namespace pejit::jit

namespace pejit::runtime {

enum class RowClass : uint8_t { Shared, Rows, Summed };

struct GraphRunStats {
  int64_t jit_launches = 0; ///< compiled elementwise runs launched
  int64_t ref_nodes = 0;    ///< nodes run on reference kernels
  int64_t in_place = 0;     ///< splits, concats and result copies saved: runs read / wrote in place
  int64_t panel_launches = 0; ///< runs launched fused with their GEMM per row panel
  int64_t jit_gemm_cores = 0; ///< of those, whose GEMM rows ran on the kernel's generated core
  int64_t jit_reductions = 0; ///< row sums and cross-entropy (and backward) run on JIT kernels
  bool profile = false;       ///< time every launch into `time` (two clock reads per launch)
  Profile time{};
};

class GraphRunner {
public:
  /// A weight gradient left to the caller: param += a^T · gy, summed with the other groups'
  /// (a: [rows, K], gy: [rows, M]), so that each weight gets one GEMM over all its rows.
  struct DeferredGemm {
    int param = -1;
    Tensor a, gy;
    /// The compiled TN kernel (GemmSpec::stretches) for this weight's shape; null until
    /// compiled (or without the JIT).
    std::shared_ptr<const jit::CachedKernel> kernel;
  };

  /// Node values of one group's forward, kept for its backward.
  struct State {
    std::vector<Tensor> vals;
    int64_t rows = 0;
    /// Where weight gradients go instead of being computed per group (null: computed here).
    std::vector<DeferredGemm>* deferred = nullptr;
    /// Transposed shared matrices by data address, valid while the parameters do not change
    /// (one run of a plan); null: transpose per use.
    std::unordered_map<const void*, Tensor>* transposed = nullptr;
    /// Every run has its kernel: the splits that the runs read in place are not computed.
    bool views = false;
    /// Runs that have a GEMM core compute it per row panel (false: the GEMM runs whole, on
    /// its own, and the run's kernel gets a core that does nothing; for comparisons).
    bool panels = true;
    /// Panel kernels compute their GEMM rows with their generated core (false: the C++
    /// kernels of src/kernels/gemm.cpp, called by the core's fn; the same bits, for A/B).
    bool jit_gemm = true;
    /// By argument: empty, or where its rows are (row i at arg_rows[a][i]) when the caller
    /// left the argument's block unfilled (lazy_arg(a)): a panel core then gathers the rows
    /// itself, straight into the concat that is the argument's only reader; any other path
    /// fills the block first.
    std::vector<std::vector<const float*>> arg_rows;
  };

  /// Classifies the nodes; with `jit_runs`, finds the elementwise runs and their kernel specs
  /// (compiled by compile(); until then they run on reference kernels).
  GraphRunner(specializer::TemplateGraph tg, bool jit_runs);
  GraphRunner(const GraphRunner&);
  ~GraphRunner();

  /// Compiles every elementwise run and row reduction through `cache` (a miss compiles; a hit
  /// reuses). Throws pejit::Error on a compile failure (`inject_failure`: a test's invalid IR),
  /// leaving the runs that did compile in place.
  void compile(jit::KernelCache& cache, bool inject_failure = false);
  bool compiled() const; ///< every run and row reduction has its kernel

  /// One elementwise run: which kernel it is part of, its spec, and the schedule it got.
  struct KernelRun {
    bool forward = true;
    size_t kernel = 0;
    jit::KernelSpec spec;
    std::string schedule, schedule_source; ///< empty until compiled
  };
  std::vector<KernelRun> jit_runs() const;

  /// One node run on a row-reduction kernel once compiled: cross-entropy (forward or
  /// backward), or a sum over the rows (a summed gradient, or a parameter gradient that the
  /// backward pass sums).
  struct ReduceRun {
    graph::NodeId node = graph::kNoNode;
    jit::ReduceSpec spec;
    bool param_sum = false; ///< the backward pass's sum of this per-row parameter gradient
    std::string schedule, schedule_source; ///< empty until compiled
  };
  std::vector<ReduceRun> reduce_runs() const;

  /// One weight gradient x^T·gy left to the caller (State::deferred), with the TN GEMM kernel
  /// it runs on once compiled.
  struct WeightGradRun {
    graph::NodeId node = graph::kNoNode;
    int param = -1; ///< module parameter index
    jit::GemmSpec spec;
    std::string schedule, schedule_source; ///< empty until compiled
  };
  std::vector<WeightGradRun> weight_grad_runs() const;

  /// Argument `a` is read only by a concat that a panel core assembles (Run::gather): the
  /// caller may pass its rows' addresses in State::arg_rows instead of gathering them.
  bool lazy_arg(size_t a) const { return a < lazy_arg_.size() && lazy_arg_[a]; }

  bool supported() const { return why_.empty(); }
  const std::string& why() const { return why_; }
  const specializer::TemplateGraph& graph() const { return tg_; }

  /// Forward on `rows` rows: args[i] is argument i as [rows, ...]; result k is copied into
  /// results[k] ([rows, ...], e.g. an arena block).
  void forward(int64_t rows, std::span<const Tensor> args, const interp::Params& params,
               std::span<Tensor> results, State& st, GraphRunStats& stats) const;

  /// Backward after forward: seeds[k] is result k's incoming gradient [rows, ...] (undefined:
  /// zero). Writes argument a's gradient into arg_grads[a] where defined; adds every
  /// parameter's gradient (summed over the rows) to param_grads[module parameter index].
  void backward(std::span<const Tensor> seeds, const interp::Params& params,
                std::span<Tensor> arg_grads, std::vector<interp::ParamGrad>& param_grads, State& st,
                GraphRunStats& stats) const;

private:
  struct Run;
  Tensor eval(graph::NodeId id, State& st) const;
  void run_kernel(const specializer::Kernel& k, const std::vector<Run>* runs, State& st,
                  GraphRunStats& stats) const;
  struct Reduction;
  void plan_reductions();
  /// Computes node `id` on its compiled row-reduction kernel into st.vals; false (nothing
  /// done) when it has none, it is not compiled yet, or the kernel reports a bad label (the
  /// reference kernel then runs and reports it).
  bool run_reduction(graph::NodeId id, State& st, GraphRunStats& stats) const;
  /// The sum over the rows of per-row value `v` of node `id` (a parameter gradient): on its
  /// kernel when compiled, else kernels::sum_axis(v, 0). The same bits either way. Timed as
  /// "reductions and losses" (Family::Other) when profiling.
  Tensor sum_rows(graph::NodeId id, const Tensor& v, int64_t rows, GraphRunStats& stats) const;
  void classify();
  void plan_runs();
  struct WeightGrad;
  void plan_weight_grads(); ///< a TN GEMM spec per deferrable weight gradient
  /// The compiled kernel of deferrable weight gradient `id`, or null.
  std::shared_ptr<const jit::CachedKernel> weight_grad_kernel(graph::NodeId id) const;
  /// Once every run has its kernel: run outputs that are results (or argument gradients) are
  /// written by their run straight into the caller's blocks dest[k], not copied there after.
  void bind(std::span<const graph::NodeId> nodes, std::span<Tensor> dest, State& st) const;

  specializer::TemplateGraph tg_;
  std::vector<RowClass> cls_;
  std::vector<bool> deferrable_; ///< by node: a weight gradient a caller may take (DeferredGemm)
  std::vector<std::vector<graph::NodeId>> split_parts_; ///< per split node: its siblings
  /// By node: not computed once every run has its kernel (a split part the runs read in
  /// place; a bias sum whose columns the runs add themselves).
  std::vector<bool> skip_;
  std::vector<bool> run_output_; ///< by node: a row output of a run, written where bind() says
  /// By node: a forward GEMM that its run computes per panel (not evaluated on its own).
  std::vector<bool> fused_;
  std::vector<bool> lazy_arg_; ///< by argument index: see lazy_arg()
  /// Argument node `id`'s lazily passed rows (State::arg_rows), or null.
  const std::vector<const float*>* arg_rows(graph::NodeId id, const State& st) const;
  /// Gathers a lazily passed argument's rows into its block, once.
  void fill_arg(graph::NodeId id, State& st) const;
  /// The GEMM cores of runs: which runs get one (plan_runs), and launching a run with its core.
  void find_cores(const std::vector<std::vector<graph::NodeId>>& users,
                  const std::vector<bool>& kept);
  void launch(const Run& r, std::vector<float*>& ins, std::vector<float*>& outs, State& st,
              GraphRunStats& stats) const;
  std::string why_;
  std::vector<std::vector<Run>> fwd_runs_, bwd_runs_; ///< per kernel
  std::vector<Reduction> reductions_;
  std::vector<WeightGrad> weight_grads_;
  std::vector<int32_t> reduction_of_; ///< by node: its index in reductions_, or -1
};

} // namespace pejit::runtime
