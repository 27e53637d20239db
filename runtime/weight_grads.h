// The weight gradients a plan run defers (GraphRunner::DeferredGemm): each group leaves its
// x^T·gy of a weight where its rows lie, and after the backward pass each weight gets one GEMM
// over the rows of every group that had one, on its generated TN kernel when every such group
// has it compiled, else on kernels::sgemm_tn_stretches (the same bits on AVX-512 builds).
#pragma once

#include "runtime/graph_runner.h"
#include "runtime/plan_executor.h"

#include <vector>

namespace pejit::runtime {

class DeferredWeightGrads {
public:
  /// Where GraphRunner::State::deferred points during one run's backward pass.
  std::vector<GraphRunner::DeferredGemm>* sink() { return &deferred_; }
  /// Runs every deferred gradient into grads[param].dense (added to what is there) and clears
  /// the list. `jit`: the generated TN kernels may run (ExecOptions::jit_weight_grads);
  /// `profile`: time each GEMM into stats.profile.
  void run(std::vector<interp::ParamGrad>& grads, PlanStats& stats, bool jit, bool profile);
  /// Drops what a failed run left.
  void clear() { deferred_.clear(); }

private:
  /// The generated TN kernel for param p's dW [k, m] when every group that deferred one has
  /// it compiled and it fits; else null.
  const jit::CachedKernel* jit_kernel(int p, int64_t k, int64_t m) const;

  std::vector<GraphRunner::DeferredGemm> deferred_;
  std::vector<jit::GemmStretch> jit_parts_; // reused across runs
};

} // namespace pejit::runtime
