// The weight gradients a plan run defers (GraphRunner::DeferredGemm): each group leaves its
// x^T·gy of a weight where its rows lie, and after the backward pass each weight gets one GEMM
// over the rows of every group that had one, on its generated TN kernel when every such group
// has it compiled, else on kernels::sgemm_tn_stretches (the same bits on AVX-512 builds).
#pragma once

#include "runtime/grad_ready.h"
#include "runtime/graph_runner.h"
#include "runtime/plan_executor.h"

#include "src/kernels/kernels.h"

#include <vector>

namespace pejit::runtime {

class DeferredWeightGrads {
public:
  /// Where GraphRunner::State::deferred points during one run's backward pass.
  std::vector<GraphRunner::DeferredGemm>* sink() { return &deferred_; }
  /// Runs every deferred gradient into grads[param].dense (added to what is there) and clears
  /// the list. `jit`: the generated TN kernels may run (ExecOptions::jit_weight_grads);
  /// `profile`: time each GEMM into stats.profile (on the calling thread alone). `workers`
  /// (null: the calling thread): the weights' GEMMs split across them, each weight's whole
  /// gradient by one worker, so its sum over the rows is the one-thread sum, bit for bit.
  /// `ready` (null: nobody) hears of every gradient as it becomes final: first those no GEMM
  /// adds to, then each weight's after its GEMM (after all of them with several workers).
  void run(std::vector<interp::ParamGrad>& grads, PlanStats& stats, bool jit, bool profile,
           const Workers* workers = nullptr, GradReady* ready = nullptr);
  /// Drops what a failed run left.
  void clear() { deferred_.clear(); }

private:
  /// The generated TN kernel for param p's dW [k, m] when every group that deferred one has
  /// it compiled and it fits; else null.
  const jit::CachedKernel* jit_kernel(int p, int64_t k, int64_t m) const;
  /// Param p's column-block kernels when every group that deferred one has them; else null.
  const GraphRunner::WeightGradBlocks* blocks_of(int p) const;

  /// One weight's GEMM: its parts (every group's rows) and whether it ran on its JIT kernel.
  struct Job {
    int param = -1;
    int64_t rows = 0, k = 0, m = 0;
    std::vector<kernels::GemmStretch> parts;
    std::vector<jit::GemmStretch> jit_parts;
    bool jit = false;
  };
  void run_job(Job& j, std::vector<interp::ParamGrad>& grads, bool jit) const;
  /// Columns [c0, c0 + n) of job j's gradient on `kernel` (a column block of its TN kernel);
  /// `parts` is this block's own copy of the stretches (moved to column c0).
  static void run_block(const Job& j, const jit::CachedKernel& kernel, int64_t c0,
                        std::vector<jit::GemmStretch>& parts, float* c, bool accumulate);

  /// One column block of a job, for the workers.
  struct Block {
    size_t job = 0;
    int64_t c0 = 0;
    const jit::CachedKernel* kernel = nullptr;
    std::vector<jit::GemmStretch> parts;
  };
  std::vector<Block> blocks_; // reused across runs

  std::vector<GraphRunner::DeferredGemm> deferred_;
  std::vector<Job> jobs_; // reused across runs
};

} // namespace pejit::runtime
