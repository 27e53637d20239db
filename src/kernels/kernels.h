// Reference CPU kernels over host Tensors: the eager (generic) path runs these, one call per
// op, so they allocate their outputs and are tuned for many tiny ops (vectors of 150-750
// floats, 1-row GEMMs). Every kernel is single-threaded and deterministic: reduction orders
// depend only on shapes. User mistakes (shape or dtype mismatch, bad index) throw pejit::Error
// naming the shapes involved; nothing is silently broadcast or truncated.
#pragma once

#include "src/tensor/tensor.h"

#include <cstdint>
#include <span>

namespace pejit::kernels {

// ---- GEMM ---------------------------------------------------------------------------------

/// C = alpha*op(A)*op(B) + beta*C, all row-major, op(A) is [m,k], op(B) is [k,n]. Runs a
/// libxsmm JIT kernel cached per shape; beta == 0 never reads C.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

/// A right operand B [k,n] packed for sgemm_packed: column panels of kPackedWidth columns, each
/// panel's k rows contiguous (the last panel zero-padded). Made once per plan run for a weight
/// that every level multiplies by (forward x·W, and W^T for dX = dY·W^T).
constexpr int64_t kPackedWidth = 32;
/// Floats that pack_b writes for a [k,n] B.
int64_t packed_size(int64_t k, int64_t n);
/// Packs B = op(b) [k,n]: b is [k,n] (ldb between rows), or with trans_b b is [n,k] and is
/// transposed while packing.
void pack_b(bool trans_b, int64_t k, int64_t n, const float* b, int64_t ldb, float* packed);
/// pack_b's panels [first, last) alone (panels of kPackedWidth columns; the last may be
/// partial): what one worker packs when a weight's packing is shared out. Each panel is
/// written by one call, and the panels together are pack_b's output exactly.
void pack_b_panels(bool trans_b, int64_t k, int64_t n, const float* b, int64_t ldb, float* packed,
                   int64_t first, int64_t last);
/// The panels pack_b writes for n columns.
inline int64_t packed_panels(int64_t n) {
  return (n + kPackedWidth - 1) / kPackedWidth;
}
/// C = A·B (beta 0, C not read) or C += A·B (beta 1); A [m,k] row-major, B from pack_b. The
/// same sums in the same order as sgemm(false, false, ...) on the unpacked B where the AVX-512
/// kernels run (bit for bit), the same up to rounding elsewhere.
void sgemm_packed(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* packed,
                  float beta, float* c, int64_t ldc);

/// k rows of a weight gradient's operands: a [k, m] and b [k, n], dense rows.
struct GemmStretch {
  const float* a;
  const float* b;
  int64_t k;
};
/// C = sum over the stretches of a^T·b (beta 0, C not read) or C += that sum (beta 1): the
/// weight gradient of rows kept in several buffers, as sgemm(true, false, ...) over the stacked
/// rows gives it (bit for bit where the AVX-512 kernels run, else up to rounding), unstacked.
void sgemm_tn_stretches(int64_t m, int64_t n, const GemmStretch* stretches, size_t count,
                        float beta, float* c, int64_t ldc);

/// [m,k]@[k,n] -> [m,n], [k]@[k,n] -> [n], [m,k]@[k] -> [m], [k]@[k] -> []; f32 only.
Tensor matmul(const Tensor& a, const Tensor& b);

// ---- elementwise --------------------------------------------------------------------------

enum class Unary { Neg, Exp, Log, Tanh, Sigmoid, Relu };
/// Elementwise op; Neg and Relu also accept i32, the others f32 only. Exp, Tanh and Sigmoid use
/// the vectorized approximations of fast_math.h (relative error <= 5e-7 in their normal range).
Tensor unary(Unary op, const Tensor& x);

enum class Binary { Add, Sub, Mul, Div, Lt, Le, Gt, Ge, Eq, Ne };
/// Elementwise op with numpy broadcasting; both operands must share a dtype. Comparisons give
/// 0/1 in that dtype. i32 Div truncates toward zero and throws pejit::Error on a zero divisor.
Tensor binary(Binary op, const Tensor& a, const Tensor& b);

/// The numpy broadcast of two shapes; throws pejit::Error naming both when incompatible.
Shape broadcast_shape(const Shape& a, const Shape& b);
/// x broadcast (copied) to shape s; returns x itself when the shapes are equal.
Tensor broadcast_to(const Tensor& x, const Shape& s);
/// Sums g over the dimensions that broadcasting s to g.shape() expanded (the gradient of
/// broadcasting); returns g itself when the shapes are equal.
Tensor sum_to_shape(const Tensor& g, const Shape& s);

/// gy*y*(1-y), y = sigmoid(x); same shapes.
Tensor sigmoid_backward(const Tensor& y, const Tensor& gy);
/// gy*(1-y^2), y = tanh(x); same shapes.
Tensor tanh_backward(const Tensor& y, const Tensor& gy);
/// gy where x > 0, else 0; same shapes.
Tensor relu_backward(const Tensor& x, const Tensor& gy);

/// acc += x (same shape and dtype). An undefined acc becomes x (shared); a shared acc is cloned
/// first, so other holders of its storage never see the change.
void add_inplace(Tensor& acc, const Tensor& x);
/// x *= s (f32); a shared x is cloned first.
void scale_inplace(Tensor& x, float s);

// ---- reductions and rows ------------------------------------------------------------------

/// Sum of all elements -> rank 0, same dtype.
Tensor sum(const Tensor& x);
/// Sums over `axis` (negative counts from the end), dropping it.
Tensor sum_axis(const Tensor& x, int axis);
/// Means (f32 only).
Tensor mean(const Tensor& x);
Tensor mean_axis(const Tensor& x, int axis);

/// Softmax / log-softmax over the last axis, max-subtracted (stable for large inputs).
Tensor softmax(const Tensor& x);
Tensor log_softmax(const Tensor& x);
/// logits f32 [..., C], labels i32 [...] -> f32 [...] = -log_softmax(logits)[label]. A label
/// outside [0, C) throws pejit::Error.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels);
/// d(cross_entropy)/d(logits) scaled by gy (shape of labels): gy * (softmax - onehot(label)).
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& gy);
/// Index of the largest element along the last axis (ties: first), i32, that axis dropped.
Tensor argmax(const Tensor& x);

// ---- layout ------------------------------------------------------------------------------

/// Concatenation along `axis` (negative ok); all inputs share dtype, rank and other dims.
Tensor concat(std::span<const Tensor> xs, int axis);
/// Elements [start, end) along `axis`; negative start/end count from the end (python-like,
/// no clamping: out of range throws pejit::Error).
Tensor slice(const Tensor& x, int axis, int64_t start, int64_t end);
/// Transpose of a 2-D tensor.
Tensor transpose(const Tensor& x);

/// Gathers rows: table [V, D...], idx i32 of any shape -> idx.shape ++ [D...]. An id outside
/// [0, V) throws pejit::Error.
Tensor take(const Tensor& table, const Tensor& idx);
/// take(table, idx) written into `out` (of take's result size and the table's dtype: a
/// caller's block), the same rows and errors.
void take_into(const Tensor& table, const Tensor& idx, Tensor& out);

/// Gradient of take: rows[i] belongs to row indices[i] of a [num_rows, D...] table; indices may
/// repeat unless coalesced.
struct RowSparse {
  Tensor indices; ///< i32 [n]
  Tensor rows;    ///< f32 [n, D...]
  int64_t num_rows = 0;

  /// The dense [num_rows, D...] gradient (duplicates summed in index order).
  Tensor to_dense() const;
  /// Merges duplicate indices: indices become sorted and unique, rows of equal indices summed
  /// in their original order (deterministic).
  void coalesce();
};

/// The row-sparse gradient of take(table, idx) given gy; shares idx and gy storage (no copy).
RowSparse take_backward(const Tensor& idx, const Tensor& gy, const Shape& table_shape);
/// dense[indices[i]] += scale * rows[i]; a shared dense is cloned first.
void add_rows_inplace(Tensor& dense, const RowSparse& g, float scale = 1.0f);

} // namespace pejit::kernels
