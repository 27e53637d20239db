// Deferred weight gradients of a plan run (weight_grads.h): one GEMM per weight over the rows
// of every group, read where the groups left them (no stacking).
#include "runtime/weight_grads.h"

#include "jit/kernel_cache.h"
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

void DeferredWeightGrads::run(std::vector<interp::ParamGrad>& grads, PlanStats& stats, bool jit,
                              bool profile) {
  std::vector<int> order;
  for (const auto& d : deferred_)
    if (std::find(order.begin(), order.end(), d.param) == order.end())
      order.push_back(d.param);
  for (int p : order) {
    auto t0 = profile ? ProfileClock::now() : ProfileClock::time_point{};
    int64_t rows = 0, k = 0, m = 0;
    std::vector<kernels::GemmStretch> parts;
    for (const auto& d : deferred_)
      if (d.param == p) {
        parts.push_back({d.a.f32(), d.gy.f32(), d.a.dim(0)});
        rows += d.a.dim(0);
        k = d.a.dim(1);
        m = d.gy.dim(1);
      }
    auto& dst = grads[static_cast<size_t>(p)].dense;
    float beta = dst.defined() ? 1.0f : 0.0f;
    if (!dst.defined())
      dst = Tensor::empty(DType::F32, Shape{k, m});
    if (const jit::CachedKernel* g = jit ? jit_kernel(p, k, m) : nullptr) {
      static_assert(sizeof(jit::GemmStretch) == sizeof(kernels::GemmStretch) &&
                    offsetof(jit::GemmStretch, k) == offsetof(kernels::GemmStretch, k));
      jit_parts_.clear();
      for (const auto& s : parts)
        jit_parts_.push_back({s.a, s.b, s.k});
      g->gemm().stretches(jit_parts_.data(), static_cast<int64_t>(jit_parts_.size()), dst.f32(),
                          beta != 0.0f);
      stats.jit_weight_grads++;
    } else {
      kernels::sgemm_tn_stretches(k, m, parts.data(), parts.size(), beta, dst.f32(), m);
    }
    stats.weight_grad_gemms++;
    if (profile)
      record(stats.profile, Family::GemmWeightGrad, t0, 2.0 * static_cast<double>(k * m * rows));
  }
  deferred_.clear();
}

} // namespace pejit::runtime
