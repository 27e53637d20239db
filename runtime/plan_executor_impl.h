// PlanExecutor's internals, shared by its files (internal to runtime/): the arena, the
// per-group state kept across runs, and the forward (plan_executor.cpp) and backward
// (plan_executor_backward.cpp) sweeps' helpers.
#pragma once

#include "runtime/batch_backend.h"
#include "runtime/graph_runner.h"
#include "runtime/plan_executor.h"
#include "runtime/runner_cache.h"
#include "runtime/weight_grads.h"

#include "runtime/profile.h"
#include "src/interp/tape.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

namespace pejit::runtime {

struct PlanExecutor::Impl {
  static Shape rows_shape(int64_t rows, std::span<const int64_t> dims) {
    Shape s{rows};
    for (auto d : dims)
      s.push_back(d);
    return s;
  }

  // Times a group's forward or backward in the batching interpreter into PlanStats, to the end
  // of its scope (and counts the group once, at its forward).
  struct InterpretedTimer {
    PlanStats& st;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    explicit InterpretedTimer(PlanStats& s, bool forward = true) : st(s) {
      st.groups_interpreted += forward;
    }
    ~InterpretedTimer() {
      st.interpreted_seconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  };

  std::shared_ptr<const ir::Module> m;
  interp::DimBindings dims;
  ExecOptions opt;
  Tensor arena; ///< f32 [elements]; i32 blocks are viewed as i32
  /// The template graphs' intermediates of one run (GraphRunner::State::scratch).
  ScratchArena scratch;

  // Template graphs: the engine's shared cache, or this executor's own.
  std::unique_ptr<RunnerCache> own_runners;
  RunnerCache* runners = nullptr;
  std::unordered_set<std::string> reported; // templates whose fallback is in PlanStats
  PackedWeights transposed;                 // W and W^T packed per weight, for one run
  DeferredWeightGrads weight_grads;         // weight gradients of one run

  // ExecOptions::profile: the time since t0 (and GEMM flops) go to family f.
  ProfileClock::time_point tick() const {
    return opt.profile ? ProfileClock::now() : ProfileClock::time_point{};
  }
  void tock(PlanStats& stats, Family f, ProfileClock::time_point t0, double flops = 0) const {
    if (opt.profile)
      record(stats.profile, f, t0, flops);
  }
  static void merge(PlanStats& stats, const GraphRunStats& rs) {
    stats.jit_launches += rs.jit_launches;
    stats.in_place += rs.in_place;
    stats.panel_launches += rs.panel_launches;
    stats.jit_gemm_cores += rs.jit_gemm_cores;
    stats.ref_nodes += rs.ref_nodes;
    stats.direct_slices += rs.direct_slices;
    stats.direct_gemms += rs.direct_gemms;
    stats.jit_reductions += rs.jit_reductions;
    stats.ce_from_stats += rs.ce_from_stats;
    accumulate(stats.profile, rs.time);
  }

  std::shared_ptr<const GraphRunner> runner(const specializer::Template& t, PlanStats& stats);

  // The graph each template id resolved to, once it can no longer change (compiled, or on
  // reference kernels where there is no JIT): a group of a template met before then skips
  // the shared cache's lookup (a key string with the constant arguments' bytes, a lock and a
  // hash). Valid for one template table and module state; the copy of the template tells a
  // table that reuses a freed one's address apart.
  struct KnownRunner {
    const specializer::TemplateTable* tt = nullptr;
    uint64_t generation = 0;
    specializer::Template tmpl;
    std::shared_ptr<const GraphRunner> graph;
  };
  std::vector<KnownRunner> known;

  std::shared_ptr<const GraphRunner> known_runner(int32_t id, const specializer::Template& t,
                                                  const specializer::TemplateTable& tt,
                                                  PlanStats& stats);

  // Per group, kept across runs (their tapes keep their buffers).
  struct GroupState {
    std::shared_ptr<const GraphRunner> graph; ///< ran on its template graph
    GraphRunner::State gst;
    bool per_row = false;
    std::unique_ptr<interp::Tape> tape;
    std::vector<int32_t> result_ids;           ///< batched: per result
    std::vector<std::vector<int32_t>> row_ids; ///< per row, per result
    std::vector<int32_t> arg_leaf;             ///< per arg: leaf id or -1
    /// A graph call's blocks (arguments and results, or seeds and argument gradients), kept
    /// for the next call's (no allocation per group); emptied after each call.
    std::vector<Tensor> ins, outs;
  };
  std::vector<GroupState> st;

  void reserve(int64_t elems) {
    if (arena.defined() && arena.numel() >= elems)
      return;
    // An eighth more, as the scratch buffer: the next plan may be a little larger, and every
    // new arena is memory touched for the first time (the old one goes back to the pool).
    arena = Tensor::empty(DType::F32, Shape{std::max<int64_t>(elems + elems / 8, 16)});
  }

  char* at(int64_t off) { return static_cast<char*>(arena.raw()) + off * 4; }
  /// Under AddressSanitizer: leaves only the blocks of `L` (its training blocks too when
  /// `train`) addressable in the arena; nothing elsewhere.
  void poison_gaps(const ExecLayout& L, bool train);

  const char* ptr(const RowSource& s, const specializer::Residual& r, const interp::Params& params);

  // Gathers the rows of `a` into its block: one copy per run of consecutive source rows.
  void gather(const ExecLayout& L, const ExecLayout::Arg& a, const specializer::Residual& r,
              const interp::Params& params);

  Tensor block(int64_t off, const specializer::TensorSig& sig, int64_t rows) {
    return arena.view(off, sig.dtype, rows_shape(rows, sig.dims));
  }

  // One template call on `args` (its tensor arguments): the op, or the function's body with
  // its static Int/Bool arguments in place; the results flattened.
  std::vector<interp::Value> call_template(const specializer::Template& t, detail::BatchBackend& be,
                                           const interp::Values& args);

  // A segment sum: row k of the result is the sum of its terms, in order (each a row anywhere).
  void run_sum(const ExecLayout& L, const ExecLayout::Group& G, const specializer::Group& g,
               const specializer::Residual& r, const interp::Params& params);

  void run_group(size_t gi, const specializer::Group& g, const ExecLayout& L,
                 const specializer::Residual& r, const specializer::TemplateTable& tt,
                 const interp::Params& params, bool train, PlanStats& stats);

  // The forward of every group, in plan order, with the arena sized for it (and for the
  // backward when `train`); returns the layout used (`own`, made here, when none was given).
  const ExecLayout* forward(const specializer::Plan& plan, const ExecLayout* layout,
                            ExecLayout& own, const specializer::Residual& r,
                            const specializer::TemplateTable& tt, const interp::Params& params,
                            bool train, PlanStats& stats);

  // Row i of result R's seed: the sum of its consumers' gradient rows, in plan order.
  // Returns false when no row of R has a consumer (its seed is zero).
  bool gather_seed(const ExecLayout& L, const ExecLayout::Result& R, int64_t rows);
};

} // namespace pejit::runtime
