// Row-major SGEMM and matmul on Tensors. Built for AVX-512 (the native default on hosts that
// have it), C (+)= op(A)·B runs on this file's register-blocked kernels (design note at
// namespace avx512), A·B^T too once B is transposed into per-thread scratch (a few rows: row
// dot products), and a right operand packed once (pack_b) feeds the same kernels.
// Elsewhere, libxsmm: it is column-major, so row-major C = op(A)·op(B) runs as column-major
// C^T = op(B)^T·op(A)^T: the operands swap and a row-major transpose flag becomes the other
// operand's column-major one. One JIT kernel per (shape, leading dims, flags, beta 0/1) comes
// from libxsmm_smmdispatch and is remembered in a per-thread map (no lock on the hot path;
// libxsmm's own registry is thread-safe). Where libxsmm has no kernel (transposes it does not
// generate), the operand is transposed into scratch first; a plain loop is the last resort.
// Both take alpha = 1 and beta in {0, 1}; other alpha/beta go through a scratch product.
#include "src/kernels/kernels.h"

#include "src/kernels/row_ops.h"
#include "src/kernels/transpose.h"
#include "src/util/check.h"
#include <algorithm>
#include <array>
#include <utility>

#include <libxsmm.h>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

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
  thread_local std::vector<float> bufs[5];
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

#ifdef __AVX512F__
// A narrow B (2n <= 16 columns, as the classifier's 5): the JIT's generated GEMM runs it as
// dot products along k (jit/gemm_codegen.cpp, GemmSpec::packs_b_transposed), and so does this
// kernel, operation for operation, so that a plan gives the same bits on reference kernels
// and on JIT kernels: B^T copied once; each C element a dot of 16 lanes of fma partial sums
// over k in order, the k tail one more step with zeros in the lanes past k, the lanes reduced
// by the same tree (lane l plus lane l + 8, then + 4, + 2, + 1), then added to C or stored.
constexpr int64_t kNarrowMaxB = 16384; // jit::GemmSpec::kMaxPackedB

bool narrow_nn(int64_t n, int64_t k) {
  return 2 * n <= 16 && n * k <= kNarrowMaxB;
}

void gemm_narrow_dots(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                      int64_t ldb, bool beta0, float* c, int64_t ldc) {
  float* bt = scratch(4, static_cast<size_t>(n * k));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t p = 0; p < k; ++p)
      bt[j * k + p] = b[p * ldb + j];
  const int64_t k16 = k / 16 * 16;
  const auto tail = static_cast<__mmask16>((1u << (k - k16)) - 1u);
  for (int64_t i = 0; i < m; ++i) {
    const float* ar = a + i * lda;
    for (int64_t j = 0; j < n; ++j) {
      const float* br = bt + j * k;
      __m512 acc = _mm512_setzero_ps();
      for (int64_t p = 0; p < k16; p += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(ar + p), _mm512_loadu_ps(br + p), acc);
      if (tail != 0)
        acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, ar + k16),
                              _mm512_maskz_loadu_ps(tail, br + k16), acc);
      alignas(64) float lane[16];
      _mm512_store_ps(lane, acc);
      for (int w = 8; w >= 1; w /= 2)
        for (int l = 0; l < w; ++l)
          lane[l] = lane[l] + lane[l + w];
      float* cij = c + i * ldc + j;
      *cij = beta0 ? lane[0] : *cij + lane[0];
    }
  }
}
#endif

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

#ifdef __AVX512F__
// Register-blocked AVX-512 kernels for C (+)= op(A)·B with B not transposed (forward X·W,
// dX = dY·W^T on a W^T made once per run, and weight gradients X^T·dY, whose transposed A is
// read in place by broadcasts, without a copy). A block of C (kMr rows x 32 columns, or a few
// rows x 128 columns for the GEMV-like levels) stays in registers over a chunk of the summed
// dimension; C is loaded into the accumulators first, so every element is summed over k in
// order, the same for any blocking or row count (deterministic, and beta 1 is exact).
namespace avx512 {

constexpr int kMr = 12;           // rows per block: 24 accumulators with 2 vectors
constexpr int kWideRows = 3;      // up to this many rows: blocks of 8 vectors (128 columns)
constexpr int64_t kChunk = 320;   // most k per pass over a B panel (2 vectors: 40 KB)
constexpr int64_t kPrefetch = 16; // rows of B fetched ahead

// C[MR, NV vectors] (+)= sum over the stretches s of op(A_s)[MR, k_s] · B_s[k_s, NV vectors],
// where A_s = s.a + a_off and B_s = s.b + b_off (one stretch but for weight gradients over rows
// kept in several buffers); `last` masks the columns of the last vector (all set except at the
// right edge). TA: A is stored [k, rows] (lda between k).
template <int MR, int NV, bool TA>
void block(const GemmStretch* st, size_t nst, int64_t a_off, int64_t lda, int64_t b_off,
           int64_t ldb, float* c, int64_t ldc, bool beta0, __mmask16 last) {
  __m512 acc[MR][NV];
  if (beta0) // C's lines are written at the end: ask for them now (a plan's C is cold)
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v)
        _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16 * v), _MM_HINT_ET0);
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16 * NV - 1), _MM_HINT_ET0);
    }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      acc[r][v] = beta0 ? _mm512_setzero_ps()
                        : _mm512_maskz_loadu_ps(v == NV - 1 ? last : 0xFFFF, c + r * ldc + 16 * v);
  for (size_t s = 0; s < nst; ++s) {
    const float* a = st[s].a + a_off;
    const float* b = st[s].b + b_off;
    const int64_t k = st[s].k;
    for (int64_t p = 0; p < k; ++p) {
      // B's rows are far apart (ldb floats): the hardware prefetchers miss them when B comes
      // from L3, as it does in a plan run, where other kernels' data pass through L2 between
      // GEMMs. Prefetches past the end are harmless.
      const float* ahead = b + (p + kPrefetch) * ldb;
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v)
        _mm_prefetch(reinterpret_cast<const char*>(ahead + 16 * v), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(ahead + 16 * NV - 1), _MM_HINT_T0);
      if (TA) { // A's rows too (weight gradients: X [k, rows], lda apart)
        const float* a_ahead = a + (p + kPrefetch) * lda;
        _mm_prefetch(reinterpret_cast<const char*>(a_ahead), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(a_ahead + MR - 1), _MM_HINT_T0);
      }
      __m512 bv[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v)
        bv[v] = v == NV - 1 ? _mm512_maskz_loadu_ps(last, b + p * ldb + 16 * v)
                            : _mm512_loadu_ps(b + p * ldb + 16 * v);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        __m512 av = _mm512_set1_ps(TA ? a[p * lda + r] : a[r * lda + p]);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v)
          acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      _mm512_mask_storeu_ps(c + r * ldc + 16 * v, v == NV - 1 ? last : 0xFFFF, acc[r][v]);
}

using BlockFn = void (*)(const GemmStretch*, size_t, int64_t, int64_t, int64_t, int64_t, float*,
                         int64_t, bool, __mmask16);

// The blocks of MR rows: 1..2 vectors, and up to 8 for MR <= kWideRows (the others are null and
// never instantiated).
template <bool TA, int MR, int... NV>
constexpr std::array<BlockFn, 8> row_of_blocks(std::integer_sequence<int, NV...>) {
  return {((NV < 2 || MR <= kWideRows) ? &block<MR, (NV < 2 || MR <= kWideRows ? NV + 1 : 1), TA>
                                       : nullptr)...};
}

// kTable<TA>[rows - 1][vectors - 1]: 12 x 2 + 3 x 6 kernels per TA, whatever the shapes.
template <bool TA, int... MR>
constexpr std::array<std::array<BlockFn, 8>, sizeof...(MR)>
table(std::integer_sequence<int, MR...>) {
  return {row_of_blocks<TA, MR + 1>(std::make_integer_sequence<int, 8>())...};
}

template <bool TA> constexpr auto kTable = table<TA>(std::make_integer_sequence<int, kMr>());

// C (+)= op(A)·B, row-major, B not transposed; m, n, k > 0. With `packed`, b is pack_b's
// layout: panel j / kPackedWidth at b + j * k, kPackedWidth floats between rows.
template <bool TA>
void gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
          bool beta0, float* c, int64_t ldc, bool packed = false) {
  const int nvec = packed ? static_cast<int>(kPackedWidth / 16) : m <= kWideRows ? 8 : 2;
  const int64_t width = 16 * nvec;
  if (packed)
    ldb = kPackedWidth;
  // Row blocks of near-equal size (13 rows: 7 + 6, not 12 + 1), and k chunks likewise.
  const int64_t nblocks = (m + kMr - 1) / kMr;
  const int64_t nchunks = (k + kChunk - 1) / kChunk;
  for (int64_t j = 0; j < n; j += width) {
    const int64_t nj = std::min(width, n - j);
    const int nv = static_cast<int>((nj + 15) / 16);
    const auto last = static_cast<__mmask16>(0xFFFFu >> (16 * nv - nj));
    for (int64_t q = 0; q < nchunks; ++q) {
      const int64_t p0 = k * q / nchunks;
      const GemmStretch st{TA ? a + p0 * lda : a + p0,
                           packed ? b + j * k + p0 * ldb : b + p0 * ldb + j,
                           k * (q + 1) / nchunks - p0};
      for (int64_t bi = 0; bi < nblocks; ++bi) {
        const int64_t i0 = m * bi / nblocks, mi = m * (bi + 1) / nblocks - i0;
        kTable<TA>[static_cast<size_t>(mi - 1)][static_cast<size_t>(nv - 1)](
            &st, 1, TA ? i0 : i0 * lda, lda, 0, ldb, c + i0 * ldc + j, ldc, beta0&& q == 0, last);
      }
    }
  }
}

// C (+)= sum over the stretches of A_s^T · B_s, A_s [k_s, m] and B_s [k_s, n] dense; m, n > 0.
// Each block of C runs through every stretch in registers: the same sums as over the stacked
// rows, without stacking them.
void gemm_tn_stretches(int64_t m, int64_t n, const GemmStretch* st, size_t nst, bool beta0,
                       float* c, int64_t ldc) {
  const int nvec = m <= kWideRows ? 8 : 2;
  const int64_t width = 16 * nvec;
  const int64_t nblocks = (m + kMr - 1) / kMr;
  for (int64_t j = 0; j < n; j += width) {
    const int64_t nj = std::min(width, n - j);
    const int nv = static_cast<int>((nj + 15) / 16);
    const auto last = static_cast<__mmask16>(0xFFFFu >> (16 * nv - nj));
    for (int64_t bi = 0; bi < nblocks; ++bi) {
      const int64_t i0 = m * bi / nblocks, mi = m * (bi + 1) / nblocks - i0;
      kTable<true>[static_cast<size_t>(mi - 1)][static_cast<size_t>(nv - 1)](
          st, nst, i0, m, j, n, c + i0 * ldc + j, ldc, beta0, last);
    }
  }
}

} // namespace avx512
#endif

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
#ifdef __AVX512F__
  if (!tb || m > 8) {
    if (tb) { // dY·W^T per call (a plan run packs W^T once per run instead: sgemm_packed)
      float* bt = scratch(3, static_cast<size_t>(k * n));
      detail::transpose32(b, n, k, ldb, bt, n);
      b = bt;
      ldb = n;
    }
    if (!ta && narrow_nn(n, k)) {
      gemm_narrow_dots(m, n, k, a, lda, b, ldb, beta0, c, ldc);
      return;
    }
    if (ta)
      avx512::gemm<true>(m, n, k, a, lda, b, ldb, beta0, c, ldc);
    else
      avx512::gemm<false>(m, n, k, a, lda, b, ldb, beta0, c, ldc);
    return;
  }
#endif
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

int64_t packed_size(int64_t k, int64_t n) {
  return (n + kPackedWidth - 1) / kPackedWidth * kPackedWidth * k;
}

void pack_b(bool trans_b, int64_t k, int64_t n, const float* b, int64_t ldb, float* packed) {
  pack_b_panels(trans_b, k, n, b, ldb, packed, 0, packed_panels(n));
}

void pack_b_panels(bool trans_b, int64_t k, int64_t n, const float* b, int64_t ldb, float* packed,
                   int64_t first, int64_t last) {
  PEJIT_CHECK(k >= 0 && n >= 0 && ldb >= (trans_b ? k : n) && 0 <= first && first <= last &&
              last <= packed_panels(n))
      << "pack_b: bad sizes";
  // Whole panels not transposed are copied row by row below; the rest panel by panel.
  const int64_t whole = trans_b ? first : std::max(first, std::min(last, n / kPackedWidth));
  // B's rows in order (read sequentially), each cut into its whole panels' rows.
  for (int64_t p = 0; p < k && whole > first; ++p)
    for (int64_t jp = first; jp < whole; ++jp)
      std::memcpy(packed + jp * kPackedWidth * k + p * kPackedWidth,
                  b + p * ldb + jp * kPackedWidth, kPackedWidth * sizeof(float));
  for (int64_t j = whole * kPackedWidth; j < std::min(n, last * kPackedWidth); j += kPackedWidth) {
    const int64_t nj = std::min(kPackedWidth, n - j);
    float* panel = packed + j * k;
    if (trans_b)
      detail::transpose32(b + j * ldb, nj, k, ldb, panel, kPackedWidth);
    for (int64_t p = 0; p < k; ++p) {
      float* row = panel + p * kPackedWidth;
      if (!trans_b)
        std::memcpy(row, b + p * ldb + j, static_cast<size_t>(nj) * sizeof(float));
      std::fill(row + nj, row + kPackedWidth, 0.0f);
    }
  }
}

void sgemm_packed(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* packed,
                  float beta, float* c, int64_t ldc) {
  PEJIT_CHECK(m >= 0 && n >= 0 && k >= 0 && lda >= k && ldc >= n) << "sgemm_packed: bad sizes";
  PEJIT_CHECK(beta == 0.0f || beta == 1.0f) << "sgemm_packed: beta " << beta;
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    if (beta == 0.0f)
      for (int64_t i = 0; i < m; ++i)
        std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
#ifdef __AVX512F__
  if (narrow_nn(n, k)) { // one panel: B with kPackedWidth floats between rows
    gemm_narrow_dots(m, n, k, a, lda, packed, kPackedWidth, beta == 0.0f, c, ldc);
    return;
  }
  avx512::gemm<false>(m, n, k, a, lda, packed, kPackedWidth, beta == 0.0f, c, ldc, true);
  return;
#endif
  // Elsewhere: each panel is a B of kPackedWidth columns with its own leading dimension.
  for (int64_t j = 0; j < n; j += kPackedWidth)
    gemm_core(false, false, m, std::min(kPackedWidth, n - j), k, a, lda, packed + j * k,
              kPackedWidth, beta == 0.0f, c + j, ldc);
}

void sgemm_tn_stretches(int64_t m, int64_t n, const GemmStretch* stretches, size_t count,
                        float beta, float* c, int64_t ldc) {
  PEJIT_CHECK(m >= 0 && n >= 0 && ldc >= n) << "sgemm_tn_stretches: bad sizes";
  PEJIT_CHECK(beta == 0.0f || beta == 1.0f) << "sgemm_tn_stretches: beta " << beta;
  std::vector<GemmStretch> st;
  for (size_t s = 0; s < count; ++s) {
    PEJIT_CHECK(stretches[s].k >= 0) << "sgemm_tn_stretches: negative rows";
    if (stretches[s].k > 0)
      st.push_back(stretches[s]);
  }
  if (m == 0 || n == 0)
    return;
  if (st.empty()) {
    if (beta == 0.0f)
      for (int64_t i = 0; i < m; ++i)
        std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
#ifdef __AVX512F__
  avx512::gemm_tn_stretches(m, n, st.data(), st.size(), beta == 0.0f, c, ldc);
  return;
#endif
  for (size_t s = 0; s < st.size(); ++s)
    sgemm(true, false, m, n, st[s].k, 1.0f, st[s].a, m, st[s].b, n, s == 0 ? beta : 1.0f, c, ldc);
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
