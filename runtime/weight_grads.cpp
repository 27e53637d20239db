// Deferred weight gradients of a plan run (weight_grads.h): one GEMM per weight over the rows
// of every group, read where the groups left them (no stacking).
#include "runtime/weight_grads.h"

#include "jit/kernel_cache.h"
#include "runtime/parallel.h"
#include "src/kernels/kernels.h"

#include <algorithm>
#include <cstddef>
#include <variant>

namespace pejit::runtime {

const jit::CachedKernel* DeferredWeightGrads::jit_kernel(int p, int64_t k, int64_t m) const {
  const jit::CachedKernel* g = nullptr;
  for (const auto& d : deferred_)
    if (d.param == p) {
      if (!d.kernel || (g != nullptr && d.kernel.get() != g))
        return nullptr;
      g = d.kernel.get();
    }
  const auto* gemm = g != nullptr ? std::get_if<jit::GemmKernel>(&g->family) : nullptr;
  if (gemm == nullptr || gemm->code.stretches == nullptr || gemm->spec.m != k || gemm->spec.n != m)
    return nullptr;
  return g;
}

const GraphRunner::WeightGradBlocks* DeferredWeightGrads::blocks_of(int p) const {
  const GraphRunner::WeightGradBlocks* b = nullptr;
  for (const auto& d : deferred_)
    if (d.param == p) {
      if (d.blocks == nullptr || !d.blocks->block ||
          (b != nullptr && d.blocks != b &&
           (d.blocks->block != b->block || d.blocks->tail != b->tail)))
        return nullptr;
      b = d.blocks;
    }
  return b;
}

void DeferredWeightGrads::run_block(const Job& j, const jit::CachedKernel& kernel, int64_t c0,
                                    std::vector<jit::GemmStretch>& parts, float* c,
                                    bool accumulate) {
  parts.clear();
  for (const auto& s : j.parts)
    parts.push_back({s.a, s.b + c0, s.k});
  kernel.gemm().stretches(parts.data(), static_cast<int64_t>(parts.size()), c + c0, accumulate);
}

void DeferredWeightGrads::run_job(Job& j, std::vector<interp::ParamGrad>& grads, bool jit) const {
  auto& dst = grads[static_cast<size_t>(j.param)].dense;
  float beta = dst.defined() ? 1.0f : 0.0f;
  if (!dst.defined())
    dst = Tensor::empty(DType::F32, Shape{j.k, j.m});
  j.jit = false;
  if (const jit::CachedKernel* g = jit ? jit_kernel(j.param, j.k, j.m) : nullptr) {
    static_assert(sizeof(jit::GemmStretch) == sizeof(kernels::GemmStretch) &&
                  offsetof(jit::GemmStretch, k) == offsetof(kernels::GemmStretch, k));
    j.jit_parts.clear();
    for (const auto& s : j.parts)
      j.jit_parts.push_back({s.a, s.b, s.k});
    g->gemm().stretches(j.jit_parts.data(), static_cast<int64_t>(j.jit_parts.size()), dst.f32(),
                        beta != 0.0f);
    j.jit = true;
  } else {
    kernels::sgemm_tn_stretches(j.k, j.m, j.parts.data(), j.parts.size(), beta, dst.f32(), j.m);
  }
}

void DeferredWeightGrads::run(std::vector<interp::ParamGrad>& grads, PlanStats& stats, bool jit,
                              bool profile, const Workers* workers, GradReady* ready) {
  // One job per weight, in the order the weights were first deferred.
  size_t njobs = 0;
  int64_t work = 0;
  for (const auto& d : deferred_) {
    size_t i = 0;
    while (i < njobs && jobs_[i].param != d.param)
      ++i;
    if (i == njobs) {
      if (jobs_.size() <= njobs)
        jobs_.emplace_back();
      Job& j = jobs_[njobs++];
      j.param = d.param;
      j.rows = 0;
      j.parts.clear();
    }
    Job& j = jobs_[i];
    j.parts.push_back({d.a.f32(), d.gy.f32(), d.a.dim(0)});
    j.rows += d.a.dim(0);
    j.k = d.a.dim(1);
    j.m = d.gy.dim(1);
    work += 2 * j.k * j.m * d.a.dim(0);
  }
  if (ready != nullptr)
    for (size_t p = 0; p < grads.size(); ++p)
      if (std::none_of(jobs_.begin(), jobs_.begin() + static_cast<std::ptrdiff_t>(njobs),
                       [&](const Job& j) { return j.param == static_cast<int>(p); }))
        ready->ready(p, grads[p]);
  // Weights to several workers when there is more than one block's work in all; profiling
  // times a split as one launch of all its GEMMs' flops, and each GEMM on its own otherwise.
  const bool split = workers != nullptr && workers->threads() > 1 && njobs > 1 &&
                     work >= 2 * workers->policy().min_block_work;
  const auto t_split = profile && split ? ProfileClock::now() : ProfileClock::time_point{};
  // With the column-block kernels compiled (RunnerCache with several threads), a weight's
  // gradient is cut by columns, so that the largest weight no longer bounds the split; each
  // element is still one chain over every row, the whole kernel's bits.
  blocks_.clear();
  for (size_t i = 0; split && jit && i < njobs; ++i) {
    Job& j = jobs_[i];
    const auto* wb = blocks_of(j.param);
    if (wb == nullptr || jit_kernel(j.param, j.k, j.m) == nullptr)
      continue;
    const int64_t cols = GraphRunner::WeightGradBlocks::kBlockCols;
    if (j.m % cols != 0 && !wb->tail)
      continue; // every column has a kernel, or the weight runs whole
    for (int64_t c0 = 0; c0 < j.m; c0 += cols)
      blocks_.push_back(Block{i, c0, j.m - c0 >= cols ? wb->block.get() : wb->tail.get(), {}});
  }
  if (split && !blocks_.empty()) {
    // The jobs cut into blocks, and the others whole; destinations made here, before the
    // workers write them.
    std::vector<char> cut(njobs, 0);
    for (const Block& b : blocks_)
      cut[b.job] = 1;
    std::vector<char> accumulate(njobs, 0);
    for (size_t i = 0; i < njobs; ++i) {
      if (!cut[i])
        continue;
      Job& j = jobs_[i];
      auto& dst = grads[static_cast<size_t>(j.param)].dense;
      accumulate[i] = dst.defined() ? 1 : 0;
      if (!dst.defined())
        dst = Tensor::empty(DType::F32, Shape{j.k, j.m});
      j.jit = true;
    }
    std::vector<size_t> whole;
    for (size_t i = 0; i < njobs; ++i)
      if (!cut[i])
        whole.push_back(i);
    const int64_t nb = static_cast<int64_t>(blocks_.size());
    stats.weight_grad_blocks += nb;
    workers->for_blocks(
        nb + static_cast<int64_t>(whole.size()),
        [&](int64_t t) {
          if (t >= nb) {
            run_job(jobs_[whole[static_cast<size_t>(t - nb)]], grads, jit);
            return;
          }
          Block& b = blocks_[static_cast<size_t>(t)];
          const Job& j = jobs_[b.job];
          run_block(j, *b.kernel, b.c0, b.parts, grads[static_cast<size_t>(j.param)].dense.f32(),
                    accumulate[b.job] != 0);
        },
        static_cast<int>(Family::GemmWeightGrad));
    for (size_t i = 0; ready != nullptr && i < njobs; ++i)
      ready->ready(static_cast<size_t>(jobs_[i].param), grads[static_cast<size_t>(jobs_[i].param)]);
  } else if (split) {
    workers->for_blocks(
        static_cast<int64_t>(njobs),
        [&](int64_t i) { run_job(jobs_[static_cast<size_t>(i)], grads, jit); },
        static_cast<int>(Family::GemmWeightGrad));
    for (size_t i = 0; ready != nullptr && i < njobs; ++i)
      ready->ready(static_cast<size_t>(jobs_[i].param), grads[static_cast<size_t>(jobs_[i].param)]);
  } else {
    for (size_t i = 0; i < njobs; ++i) {
      auto t0 = profile ? ProfileClock::now() : ProfileClock::time_point{};
      run_job(jobs_[i], grads, jit);
      const Job& j = jobs_[i];
      if (profile)
        record(stats.profile, Family::GemmWeightGrad, t0,
               2.0 * static_cast<double>(j.k * j.m * j.rows));
      if (ready != nullptr)
        ready->ready(static_cast<size_t>(j.param), grads[static_cast<size_t>(j.param)]);
    }
  }
  if (profile && split)
    record(stats.profile, Family::GemmWeightGrad, t_split, static_cast<double>(work));
  for (size_t i = 0; i < njobs; ++i) {
    stats.weight_grad_gemms++;
    stats.jit_weight_grads += jobs_[i].jit ? 1 : 0;
  }
  deferred_.clear();
}

} // namespace pejit::runtime
