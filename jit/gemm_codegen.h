// GemmSpec: the GEMM core the JIT generates (kernel family 2): a register-blocked SGEMM for
// static column count and static leading dimensions, with one dimension left to run time (the
// row count of a batched level, or, for weight gradients, the summed row count). Plain C++:
// the lowering to LLVM IR is in gemm_codegen.cpp and is reached only through jit::Jit.
#pragma once

#include <cstdint>
#include <string>

namespace pejit::jit {

/// Which operand is stored transposed (all arrays row-major).
enum class GemmLayout {
  NN, ///< C[M,N] (+)= A[M,K] · B[K,N]; M at run time (forward: X·W)
  NT, ///< C[M,N] (+)= A[M,K] · B^T, B stored [N,K]; M at run time (input gradient dY·W^T)
  TN, ///< C[M,N] (+)= A^T · B[K,N], A stored [K,M]; K at run time (weight gradient X^T·dY)
};

const char* layout_name(GemmLayout layout); ///< "nn", "nt", "tn"

/// One stretch of a weight gradient's rows (GemmSpec::stretches): A [k, m] and B [k, n] with
/// the spec's leading dimensions. The layout of kernels::GemmStretch.
struct GemmStretch {
  const float* a = nullptr;
  const float* b = nullptr;
  int64_t k = 0; ///< rows in this stretch (0 is allowed: nothing to add)
};

/// A GEMM kernel. Compiled to `void g(const float* a, const float* b, float* c, int64_t rows)`
/// where `rows` is the run-time dimension: M for NN and NT, K for TN; a TN spec with
/// `stretches` compiles to `void g(const GemmStretch* st, int64_t count, float* c, int64_t
/// accumulate)` instead (whether C is accumulated is then chosen per call).
/// Callers must not pass a C that overlaps A or B (the arguments are `noalias`).
struct GemmSpec {
  GemmLayout layout = GemmLayout::NN;
  int64_t m = 0; ///< rows of C: 0 (run time) for NN and NT; static (> 0) for TN
  int64_t n = 0; ///< columns of C, static
  int64_t k = 0; ///< summed dimension: static (> 0) for NN and NT; 0 (run time) for TN
  /// Leading dimensions (floats between rows) of A, B and C as stored; 0 means dense
  /// (A: k, or m for TN; B: n, or k for NT; C: n).
  int64_t lda = 0, ldb = 0, ldc = 0;
  bool accumulate = false; ///< C += product instead of C = product (C is then read)
  /// Register block (the schedule): NN/TN: `mr` rows x `nr` vectors of C; NT: `mr` rows x
  /// `nr` columns of C, each a dot product over k. 0 picks the default for the shape.
  int mr = 0, nr = 0;
  /// NN only, ldb 0: B is a weight packed once per plan run (kernels::pack_b's layout): column
  /// panels of kPackedCols columns, panel p at b + p*kPackedCols*k, kPackedCols floats between
  /// its rows, the last one zero-padded. The block is then `mr` rows x one panel (nr is the
  /// panel's vectors, kPackedCols / lanes, whatever is given). This is the GEMM core of panel
  /// kernels (KernelSpec::gemm_n), lowered by gemm_panel_codegen.cpp: the same bits as
  /// kernels::sgemm_packed on AVX-512 builds, except for a narrow n (2 n <= lanes), which runs
  /// as dot products along k (packs_b_transposed) and differs from it by rounding.
  bool packed_b = false;
  static constexpr int64_t kPackedCols = 32;
  /// TN only: C (+)= the sum over `count` stretches of A_s^T · B_s, in order (the rows of one
  /// weight gradient kept in several buffers), as if they were stacked; GemmStretchesFn.
  /// `accumulate` is then a run-time argument and must be left false here.
  bool stretches = false;

  /// Largest B (floats) that a narrow NN copies transposed to the stack.
  static constexpr int64_t kMaxPackedB = 16384;

  /// True when a narrow NN (n <= lanes/2, n*k <= kMaxPackedB) runs as NT on B^T packed per
  /// call; its block is then rows x columns, as for NT.
  bool packs_b_transposed(int lanes) const;

  /// True when a narrow TN (n <= lanes/2, m >= lanes: the classifier's dW [150, 5]) runs on C^T
  /// = B^T·A, vectors along m; its block is then `mr` columns of C x `nr` vectors of rows.
  bool tn_transposed(int lanes) const;

  /// The same spec with dense strides and, for a target with `lanes`-float vectors, the default
  /// block filled in (what the lowering compiles).
  GemmSpec resolved(int lanes) const;

  /// Canonical text, equal for specs that compile to the same code on one target (the cache
  /// appends the target, which fixes a default block). Example:
  /// "gemm f32 nn m=? n=450 k=300 lda=300 ldb=450 ldc=450 acc=0 block=default"; a TN spec
  /// with stretches reads "acc=? st=1" (accumulation chosen per call).
  std::string canonical_text() const;
  /// The canonical text without the block: what a tuned database is keyed by.
  std::string signature() const;

  /// Throws pejit::Error naming the problem when the spec is malformed (a static dimension
  /// < 1, the wrong dimension left to run time, a leading dimension smaller than its row, a
  /// block outside 1..32 or with more than 28 accumulators).
  void validate() const;
};

} // namespace pejit::jit
