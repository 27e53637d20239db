// GraphRunner: runs a template's graph (specializer::TemplateGraph: traced, differentiated,
// optimized, partitioned into fused kernels) on all rows of a plan group at once: the forward
// kernels, and for training the backward kernels, in their order.
//
// What runs where is the template's KernelProgram (specializer/kernel_program.h), made by the
// lowering pass (specializer/passes/lower.h, whose design note says how it decides): the
// runner holds the program and its compiled kernels (one per elementwise run, row reduction
// and weight-gradient GEMM) and walks the program's steps. Until compile() has compiled them,
// or when a step's operands are not laid out as its kernel reads them, its nodes run on
// reference kernels (the same results: a panel kernel's generated GEMM core gives the bits of
// src/kernels/gemm.cpp's kernels, State::jit_gemm).
// - Panel kernels (graph_panels.cpp): a run with a GEMM core walks the rows in panels and per
//   panel gathers the rows the GEMM reads, computes those rows of the product (on W or W^T
//   packed once per plan run) and runs the chain on them (jit::PanelCore says what it is
//   given).
// - Weight gradients x^T·gy that are a parameter's whole gradient can be left to the caller
//   (State::deferred), which sums every group's rows in one GEMM per weight: a generated TN
//   kernel over the groups' row stretches once compiled, until then the reference kernel.
// - The embedding gradient stays row-sparse: returned as the rows and their ids.
#pragma once

#include "jit/gemm_codegen.h"
#include "jit/kernel_spec.h"
#include "jit/reduce_spec.h"
#include "runtime/profile.h"
#include "specializer/template_graph.h"
#include "src/interp/params.h"
#include "src/interp/tape.h"

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

class Workers;
using specializer::RowClass;

struct GraphRunStats {
  int64_t jit_launches = 0; ///< compiled elementwise runs launched
  int64_t ref_nodes = 0;    ///< nodes run on reference kernels
  int64_t in_place = 0;     ///< splits, concats and result copies saved: runs read / wrote in place
  int64_t panel_launches = 0; ///< runs launched fused with their GEMM per row panel
  int64_t jit_gemm_cores = 0; ///< of those, whose GEMM rows ran on the kernel's generated core
  int64_t jit_reductions = 0; ///< row sums and cross-entropy (and backward) run on JIT kernels
  /// Of those, cross-entropy backwards that read their forward's row statistics (one pass).
  int64_t ce_from_stats = 0;
  int64_t row_gathers = 0; ///< lookups of per-row ids in a shared table (RowGather)
  /// Last-axis slices that are a caller's block (an argument's gradient, a result), copied
  /// straight into it instead of running on reference kernels and being copied there after.
  int64_t direct_slices = 0;
  /// dY·W^T products that are an argument's gradient, computed straight into its block.
  int64_t direct_gemms = 0;
  bool profile = false; ///< time every launch into `time` (two clock reads per launch)
  Profile time{};
};

/// What GraphRunner::compile compiles besides the kernels every run needs.
struct CompileScope {
  /// The forward kernels' runs and reductions alone (inference; a backward then runs on
  /// reference kernels).
  bool forward_only = false;
  /// Also the column-block kernels of each weight gradient at least two blocks wide
  /// (GraphRunner::WeightGradBlocks), for runs that split them across workers.
  bool weight_grad_blocks = false;
};

/// The shared matrices of one plan run in the forms its GEMMs read (packed, transposed), by
/// the weight's data address plus a tag byte. The weights change between runs, so each run
/// packs again; the buffers are kept for the next run, which packs into the same memory
/// instead of fresh pages.
class PackedWeights {
public:
  /// The form under `key` for this run (undefined until made this run).
  Tensor& at(const void* key) { return now_[key]; }
  /// A buffer of `floats` floats for `key`: the last run's under the same key, when it fits.
  Tensor buffer(const void* key, int64_t floats);
  /// The parameters may change: nothing made so far is valid; its buffers stay for reuse.
  /// Nothing made since the last call: the buffers kept then stay kept.
  void invalidate();
  /// Buffers allocated so far (not reused from the last run).
  int64_t allocated() const { return allocated_; }

private:
  std::unordered_map<const void*, Tensor> now_, spare_;
  int64_t allocated_ = 0;
};

/// The intermediates of one plan run's groups (GraphRunner::State::scratch): the values its
/// kernels write that are no caller's block (a GEMM's product, a run's outputs kept for the
/// backward, an assembled concat) as 64-byte aligned views of one buffer, handed out in order,
/// instead of a storage block each. Calling thread only.
/// A run's buffer serves the next run only when no view of it is left (else the next run gets
/// a fresh one, and the views keep theirs); past its end a request gets a block of its own,
/// and the next run's buffer holds what this run asked for in all, and an eighth more.
class ScratchArena {
public:
  /// Uninitialized elements of a 4-byte type `dt`, as Tensor::empty gives.
  Tensor take(DType dt, const Shape& shape);
  /// Starts a run: what take() handed out before belongs to whoever still holds it.
  void reset();
  /// Where the next take() starts.
  struct Mark {
    int64_t top = 0, asked = 0;
  };
  Mark mark() const { return {top_, asked_}; }
  /// Gives back every view taken since `m`, which no one may hold any more: the next take()
  /// reuses their elements, and the next run's buffer is sized for the most this run held at
  /// once (an inference run gives back each group's intermediates after the group).
  void release_to(Mark m);
  /// Buffers allocated so far (not reused from the run before).
  int64_t buffers() const { return buffers_; }
  /// Requests this run that got a block of their own (past the buffer's end).
  int64_t overflows() const { return overflows_; }
  /// The most elements this run held at once (aligned): the next run's buffer holds them.
  int64_t peak() const { return need_; }

private:
  Tensor buf_;
  int64_t top_ = 0;   ///< elements handed out of buf_ this run
  int64_t asked_ = 0; ///< elements this run holds, aligned, in buf_ or past its end
  int64_t need_ = 0;  ///< the most asked_ was this run (the next buffer's size)
  int64_t buffers_ = 0, overflows_ = 0;
};

class GraphRunner {
public:
  /// A weight gradient left to the caller: param += a^T · gy, summed with the other groups'
  /// (a: [rows, K], gy: [rows, M]), so that each weight gets one GEMM over all its rows.
  /// A weight gradient's TN kernel cut by columns of dW, for several workers: `block` computes
  /// kBlockCols columns of the whole gradient (its B and C rows are the whole width apart),
  /// `tail` the last n % kBlockCols (null when none). Every element is the same chain of FMAs
  /// over the rows as in the whole kernel, so the blocks give its bits.
  struct WeightGradBlocks {
    static constexpr int64_t kBlockCols = 128;
    std::shared_ptr<const jit::CachedKernel> block, tail;
  };

  struct DeferredGemm {
    int param = -1;
    Tensor a, gy;
    /// The compiled TN kernel (GemmSpec::stretches) for this weight's shape; null until
    /// compiled (or without the JIT).
    std::shared_ptr<const jit::CachedKernel> kernel;
    /// Its column blocks (compile(..., blocks)); null when not compiled.
    const WeightGradBlocks* blocks = nullptr;
  };

  /// Node values of one group's forward, kept for its backward.
  struct State {
    std::vector<Tensor> vals;
    int64_t rows = 0;
    /// Where weight gradients go instead of being computed per group (null: computed here).
    std::vector<DeferredGemm>* deferred = nullptr;
    /// Packed and transposed shared matrices by data address, valid while the parameters do
    /// not change (one run of a plan); null: transpose per use.
    PackedWeights* transposed = nullptr;
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
    /// The threads a compiled run or per-row reduction may split its rows across (in blocks
    /// of whole panels: the same bits for any thread count); null: the calling thread only.
    const Workers* workers = nullptr;
    /// No backward follows this forward (inference): its views need the forward kernels only.
    bool inference = false;
    /// A launch's input and output pointers, kept for the next launch (no allocation per run).
    std::vector<float*> ins, outs;
    /// Nodes whose value is a caller's block (bind_direct), with that block.
    std::vector<std::pair<graph::NodeId, Tensor>> direct_dests;
    /// By reduction index: the row statistics a cross-entropy forward kernel wrote in this
    /// forward (ReductionSpec::stats_from), f32 [rows, 2]; undefined where none were.
    std::vector<Tensor> row_stats;
    /// Where the kernels' intermediates come from (null: a storage block each).
    ScratchArena* scratch = nullptr;
    /// An intermediate of `shape`: from `scratch` when there is one.
    Tensor make(DType dt, const Shape& shape) const {
      return scratch != nullptr ? scratch->take(dt, shape) : Tensor::empty(dt, shape);
    }
  };

  /// Executes `tg.program` (made by the template pipeline's lower pass); its kernel steps
  /// run on reference kernels until compile().
  explicit GraphRunner(specializer::TemplateGraph tg);
  GraphRunner(const GraphRunner&);
  ~GraphRunner();

  /// Compiles every elementwise run and row reduction through `cache` (a miss compiles; a hit
  /// reuses). Throws pejit::Error on a compile failure (`inject_failure`: a test's invalid IR),
  /// leaving the runs that did compile in place.
  using CompileScope = runtime::CompileScope;
  void compile(jit::KernelCache& cache, bool inject_failure = false, CompileScope scope = {});
  bool compiled() const;         ///< every run and row reduction has its kernel
  bool forward_compiled() const; ///< every run and reduction of the forward kernels has its kernel

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
  bool lazy_arg(size_t a) const { return a < program().lazy_args.size() && program().lazy_args[a]; }

  bool supported() const { return program().supported(); }
  const std::string& why() const { return program().why; }
  const specializer::TemplateGraph& graph() const { return tg_; }
  const specializer::KernelProgram& program() const { return tg_.program; }

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
  using Run = specializer::ElementwiseRun;
  Tensor eval(graph::NodeId id, State& st) const;
  void run_kernel(const specializer::KernelSteps& k, State& st, GraphRunStats& stats) const;
  /// A RowGather: take node `id`'s rows into its value (the caller's block when bound).
  void gather_rows(graph::NodeId id, State& st, GraphRunStats& stats) const;
  /// Computes node `id` on compiled row-reduction kernel `index` into st.vals; false (nothing
  /// done) when it is not compiled yet, or the kernel reports a bad label (the reference
  /// kernel then runs and reports it).
  bool run_reduction(size_t index, graph::NodeId id, State& st, GraphRunStats& stats) const;
  /// The sum over the rows of per-row value `v` (a parameter gradient): on its kernel when
  /// compiled, else kernels::sum_axis(v, 0). The same bits either way. Timed as "reductions
  /// and losses" (Family::Other) when profiling.
  Tensor sum_rows(const specializer::ParamGradStep& pg, const Tensor& v, int64_t rows,
                  GraphRunStats& stats) const;
  /// Once every run has its kernel: run outputs that are results (or argument gradients) are
  /// written by their run straight into the caller's blocks dest[k], not copied there after.
  void bind(std::span<const graph::NodeId> nodes, std::span<Tensor> dest, State& st) const;
  /// Of `nodes`, the per-row values that no run writes and that a reference node can write
  /// in place: last-axis slices (slice_into) and dY·W^T products (gemm_into). Their values go
  /// straight into dest[k] when their node runs, instead of being copied there after.
  void bind_direct(std::span<const graph::NodeId> nodes, std::span<Tensor> dest, State& st) const;
  /// The block bind_direct gave node `id`, or null.
  static Tensor* direct_dest(graph::NodeId id, State& st);
  /// Slice node `id`, bound by bind_direct to `dest`: its rows copied into that block, which
  /// becomes its value; false (nothing done) when it is no slice or its operand is not laid
  /// out as [rows, width] f32.
  bool slice_into(graph::NodeId id, Tensor& dest, State& st) const;
  /// dX = dY·W^T node `id`, bound by bind_direct to `dest`: computed into that block (the GEMM
  /// eval() runs, on W^T packed once per run), which becomes its value; false (nothing done)
  /// when it is no such node or its operands are not those of the packed GEMM.
  bool gemm_into(graph::NodeId id, Tensor& dest, State& st) const;
  /// Argument node `id`'s lazily passed rows (State::arg_rows), or null.
  const std::vector<const float*>* arg_rows(graph::NodeId id, const State& st) const;
  /// Gathers a lazily passed argument's rows into its block, once.
  void fill_arg(graph::NodeId id, State& st) const;
  /// Launches run `r` on its compiled kernel, with its GEMM core (graph_panels.cpp).
  void launch(const Run& r, const jit::CachedKernel& kernel, std::vector<float*>& ins,
              std::vector<float*>& outs, State& st, GraphRunStats& stats) const;
  /// The rows per block that `r`'s launch splits into on st.workers (st.rows: one block).
  int64_t run_block_rows(const Run& r, const State& st) const;

  specializer::TemplateGraph tg_;
  /// The compiled kernels: by ElementwiseRun::index, by KernelProgram::reductions and
  /// weight_grads entry; null until compile().
  std::vector<std::shared_ptr<const jit::CachedKernel>> run_kernels_, reduce_kernels_,
      weight_grad_kernels_;
  std::vector<WeightGradBlocks> weight_grad_blocks_; ///< by weight_grads entry
  /// The program's forward RowGathers whose rows are a result (written into its block).
  std::vector<specializer::RowGather> result_gathers_;
  /// The graph's Input and Const nodes, in id order: what forward binds before the kernels.
  std::vector<graph::NodeId> leaves_;
};

} // namespace pejit::runtime
