// Row-major SGEMM over libxsmm, and matmul on Tensors.
// libxsmm is column-major, so row-major C = op(A)·op(B) runs as column-major
// C^T = op(B)^T·op(A)^T: the operands swap and a row-major transpose flag becomes the other
// operand's column-major one. One JIT kernel per (shape, leading dims, flags, beta 0/1) comes
// from libxsmm_smmdispatch and is remembered in a per-thread map (no lock on the hot path;
// libxsmm's own registry is thread-safe). libxsmm kernels take alpha = 1 and beta in {0, 1};
// other alpha/beta go through a scratch product. Where libxsmm has no kernel (transposes it
// does not generate), small-m A·B^T uses row dot products and everything else transposes the
// operand into per-thread scratch first; a plain loop is the last resort.
#include "kernels/kernels.h"

#include "kernels/row_ops.h"
#include "kernels/transpose.h"
#include "util/check.h"
#include <algorithm>

#include <libxsmm.h>

#include <climits>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace pejit::kernels {
namespace {

struct KernelKey {
  int64_t m, n, k, lda, ldb, ldc;
  int flags;
  bool operator==(const KernelKey&) const = default;
};

struct KernelKeyHash {
  size_t operator()(const KernelKey& key) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc, int64_t{key.flags}})
      h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// Column-major kernel C(MxN) = A(MxK)·B(KxN) (+ C unless kBeta0), or nullptr if libxsmm
// cannot generate one. Null answers are cached too.
libxsmm_smmfunction xsmm_kernel(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                                int64_t ldc, int flags) {
  static std::once_flag init;
  std::call_once(init, [] { libxsmm_init(); });
  thread_local std::unordered_map<KernelKey, libxsmm_smmfunction, KernelKeyHash> cache;
  KernelKey key{m, n, k, lda, ldb, ldc, flags};
  auto it = cache.find(key);
  if (it != cache.end())
    return it->second;
  libxsmm_smmfunction fn = nullptr;
  if (m <= INT_MAX && n <= INT_MAX && k <= INT_MAX && lda <= INT_MAX && ldb <= INT_MAX &&
      ldc <= INT_MAX) {
    libxsmm_blasint bm = static_cast<libxsmm_blasint>(m), bn = static_cast<libxsmm_blasint>(n),
                    bk = static_cast<libxsmm_blasint>(k);
    libxsmm_blasint blda = static_cast<libxsmm_blasint>(lda),
                    bldb = static_cast<libxsmm_blasint>(ldb),
                    bldc = static_cast<libxsmm_blasint>(ldc);
    float alpha = 1.0f, beta = (flags & LIBXSMM_GEMM_FLAG_BETA_0) ? 0.0f : 1.0f;
    int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
    fn = libxsmm_smmdispatch(bm, bn, bk, &blda, &bldb, &bldc, &alpha, &beta, &flags, &prefetch);
  }
  cache.emplace(key, fn);
  return fn;
}

// Per-thread scratch, grown on demand and kept (no allocation in steady state).
float* scratch(int slot, size_t n) {
  thread_local std::vector<float> bufs[4];
  if (bufs[slot].size() < n)
    bufs[slot].resize(n);
  return bufs[slot].data();
}

// C (+)= A·B^T for a few rows of A: each C element is a dot of two contiguous rows; four rows
// of B at a time share the loads of A. Lanes are combined in a fixed order (deterministic).
void gemm_nt_dots(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, bool beta0, float* c, int64_t ldc) {
  constexpr int kL = 16;
  int64_t k16 = k / kL * kL;
  for (int64_t i = 0; i < m; ++i) {
    const float* ar = a + i * lda;
    float* cr = c + i * ldc;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      const float* b0 = b + j * ldb;
      const float* b1 = b0 + ldb;
      const float* b2 = b1 + ldb;
      const float* b3 = b2 + ldb;
      float l0[kL] = {}, l1[kL] = {}, l2[kL] = {}, l3[kL] = {};
      for (int64_t p = 0; p < k16; p += kL)
        for (int l = 0; l < kL; ++l) {
          float av = ar[p + l];
          l0[l] += av * b0[p + l];
          l1[l] += av * b1[p + l];
          l2[l] += av * b2[p + l];
          l3[l] += av * b3[p + l];
        }
      for (int64_t p = k16; p < k; ++p) {
        l0[p - k16] += ar[p] * b0[p];
        l1[p - k16] += ar[p] * b1[p];
        l2[p - k16] += ar[p] * b2[p];
        l3[p - k16] += ar[p] * b3[p];
      }
      float d[4] = {};
      for (int l = 0; l < kL; ++l) {
        d[0] += l0[l];
        d[1] += l1[l];
        d[2] += l2[l];
        d[3] += l3[l];
      }
      for (int q = 0; q < 4; ++q)
        cr[j + q] = beta0 ? d[q] : cr[j + q] + d[q];
    }
    for (; j < n; ++j) {
      float d = detail::row_dot(ar, b + j * ldb, k);
      cr[j] = beta0 ? d : cr[j] + d;
    }
  }
}

// Last resort, C (+)= A·B, no transposes.
void gemm_nn_loops(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                   int64_t ldb, bool beta0, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* __restrict cr = c + i * ldc;
    if (beta0)
      std::memset(cr, 0, static_cast<size_t>(n) * sizeof(float));
    for (int64_t p = 0; p < k; ++p) {
      float av = a[i * lda + p];
      const float* __restrict br = b + p * ldb;
      for (int64_t j = 0; j < n; ++j)
        cr[j] += av * br[j];
    }
  }
}

// C = op(A)·op(B) (beta0) or C += op(A)·op(B); row-major; m, n, k > 0.
void gemm_kernel(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, bool beta0, float* c, int64_t ldc);

// Batched plans multiply by every row count and, for weight gradients, sum over every row
// count: rows are cut into fixed panels of kPanel (and the summed dimension into chunks,
// accumulated in order), so that the number of distinct libxsmm kernels stays bounded and no
// new shape has to be generated batch after batch.
constexpr int64_t kPanel = 64;

void gemm_core(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
               const float* b, int64_t ldb, bool beta0, float* c, int64_t ldc) {
  if (tb && m > 8) {
    // A·B^T (the input gradient dX = dY·W^T) without a libxsmm kernel for it: transpose B once
    // here, not once per panel.
    int flags = LIBXSMM_GEMM_FLAG_TRANS_A | (ta ? LIBXSMM_GEMM_FLAG_TRANS_B : 0) |
                (beta0 ? LIBXSMM_GEMM_FLAG_BETA_0 : 0);
    if (xsmm_kernel(n, std::min(m, kPanel), k, ldb, lda, ldc, flags) == nullptr) {
      float* bt = scratch(3, static_cast<size_t>(k * n));
      detail::transpose32(b, n, k, ldb, bt, n);
      b = bt;
      ldb = n;
      tb = false;
    }
  }
  if (m > kPanel) {
    for (int64_t i = 0; i < m; i += kPanel) {
      int64_t mi = std::min(kPanel, m - i);
      const float* ai = ta ? a + i : a + i * lda;
      gemm_core(ta, tb, mi, n, k, ai, lda, b, ldb, beta0, c + i * ldc, ldc);
    }
    return;
  }
  if (k > 4 * kPanel && ta) {
    // Weight gradients: A^T·B summed over k rows; chunks of kPanel rows, accumulated.
    for (int64_t p = 0; p < k; p += kPanel) {
      int64_t kp = std::min(kPanel, k - p);
      const float* ap = a + p * lda;              // op(A) = A^T: rows of A are k
      const float* bp = tb ? b + p : b + p * ldb; // op(B) rows are k
      gemm_kernel(ta, tb, m, n, kp, ap, lda, bp, ldb, beta0 && p == 0, c, ldc);
    }
    return;
  }
  gemm_kernel(ta, tb, m, n, k, a, lda, b, ldb, beta0, c, ldc);
}

void gemm_kernel(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, bool beta0, float* c, int64_t ldc) {
  int beta_flag = beta0 ? LIBXSMM_GEMM_FLAG_BETA_0 : 0;
  // Column-major view: M' = n, N' = m, A' = B (transposed iff tb), B' = A (iff ta).
  int flags =
      beta_flag | (tb ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (ta ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
  if (libxsmm_smmfunction fn = xsmm_kernel(n, m, k, ldb, lda, ldc, flags)) {
    fn(b, a, c);
    return;
  }
  if (ta) { // cheap relative to the product: m*k against m*n*k
    float* at = scratch(0, static_cast<size_t>(m * k));
    detail::transpose32(a, k, m, lda, at, k);
    a = at;
    lda = k;
  }
  if (tb && m <= 8) {
    gemm_nt_dots(m, n, k, a, lda, b, ldb, beta0, c, ldc);
    return;
  }
  if (tb) {
    float* bt = scratch(1, static_cast<size_t>(k * n));
    detail::transpose32(b, n, k, ldb, bt, n);
    b = bt;
    ldb = n;
  }
  if (libxsmm_smmfunction fn = xsmm_kernel(n, m, k, ldb, lda, ldc, beta_flag)) {
    fn(b, a, c);
    return;
  }
  gemm_nn_loops(m, n, k, a, lda, b, ldb, beta0, c, ldc);
}

} // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  PEJIT_CHECK(m >= 0 && n >= 0 && k >= 0) << "sgemm: negative size";
  PEJIT_CHECK(lda >= (trans_a ? (m > 1 ? m : 1) : (k > 1 ? k : 1))) << "sgemm: lda " << lda;
  PEJIT_CHECK(ldb >= (trans_b ? (k > 1 ? k : 1) : (n > 1 ? n : 1))) << "sgemm: ldb " << ldb;
  PEJIT_CHECK(ldc >= (n > 1 ? n : 1)) << "sgemm: ldc " << ldc;
  if (m == 0 || n == 0)
    return;
  if (k == 0 || alpha == 0.0f) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  if (alpha == 1.0f && (beta == 0.0f || beta == 1.0f)) {
    gemm_core(trans_a, trans_b, m, n, k, a, lda, b, ldb, beta == 0.0f, c, ldc);
    return;
  }
  float* t = scratch(2, static_cast<size_t>(m * n));
  gemm_core(trans_a, trans_b, m, n, k, a, lda, b, ldb, true, t, n);
  for (int64_t i = 0; i < m; ++i) {
    float* __restrict cr = c + i * ldc;
    const float* __restrict tr = t + i * n;
    if (beta == 0.0f)
      for (int64_t j = 0; j < n; ++j)
        cr[j] = alpha * tr[j];
    else
      for (int64_t j = 0; j < n; ++j)
        cr[j] = alpha * tr[j] + beta * cr[j];
  }
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.dtype() != DType::F32 || b.dtype() != DType::F32)
    throw Error("matmul: needs two f32 tensors");
  auto mismatch = [&] {
    return Error("matmul: cannot multiply " + a.shape().str() + " by " + b.shape().str());
  };
  if (a.rank() < 1 || a.rank() > 2 || b.rank() < 1 || b.rank() > 2)
    throw mismatch();
  int64_t m = a.rank() == 2 ? a.dim(0) : 1;
  int64_t k = a.dim(-1);
  int64_t kb = b.dim(0);
  int64_t n = b.rank() == 2 ? b.dim(1) : 1;
  if (k != kb)
    throw mismatch();
  Shape out;
  if (a.rank() == 2)
    out.push_back(m);
  if (b.rank() == 2)
    out.push_back(n);
  Tensor y = Tensor::empty(DType::F32, out);
  if (b.rank() == 1) { // [m,k]@[k] or [k]@[k]: row dots, no kernel dispatch needed
    const float* ap = a.f32();
    float* yp = y.f32();
    for (int64_t i = 0; i < m; ++i)
      yp[i] = detail::row_dot(ap + i * k, b.f32(), k);
    return y;
  }
  sgemm(false, false, m, n, k, 1.0f, a.f32(), k > 0 ? k : 1, b.f32(), n > 0 ? n : 1, 0.0f, y.f32(),
        n > 0 ? n : 1);
  return y;
}

} // namespace pejit::kernels
