// ReduceSpec: kernel family 3, the row reductions and the loss that training plans run: a sum
// over the row axis (bias gradients, per-row parameter gradients), cross-entropy over rows
// of logits with its backward, and the reductions along a row (a per-row value's sum and mean,
// softmax and log-softmax with their backward). Plain C++: the lowering to LLVM IR is in
// reduce_codegen.cpp and is reached only through jit::Jit. Every kind computes what its reference
// kernel in src/kernels/reduce.cpp computes, in the same order of operations (see each kind).
#pragma once

#include <cstdint>
#include <string>

namespace pejit::jit {

enum class ReduceKind {
  /// in[0] = x f32 [rows, width], out[0] = y f32 [width]: y[c] = sum over r of x[r, c], in row
  /// order (((0 + x[0,c]) + x[1,c]) + ...) for width > 1, so every column's bits are fixed by
  /// its own column and the row count (as kernels::sum_axis(x, 0) sums them: bit for bit). A
  /// width of 1 sums as kernels::detail::row_sum does: 16 lanes (row r into lane r mod 16, in
  /// row order), then lanes folded 8, 4, 2, 1 (bit for bit, too). 0 rows give zeros.
  SumRows,
  /// in[0] = logits f32 [rows, C], in[1] = labels i32 [rows], out[0] = loss f32 [rows]:
  /// loss[r] = lse - (x[r, label] - m) with m the row's max and lse = log(sum_i e^(x[r,i] - m))
  /// (logf of libm; 0 when m is infinite), the sum over 16 lanes as kernels::cross_entropy.
  CrossEntropy,
  /// in[0] = logits [rows, C], in[1] = labels i32 [rows], in[2] = gy f32 [rows], out[0] = dx
  /// f32 [rows, C]: dx[r, i] = e_i * (gy[r] / s) - (i == label) * gy[r], with e_i = e^(x[r,i] - m)
  /// and s their 16-lane sum, as kernels::cross_entropy_backward.
  CrossEntropyBwd,
  /// in[0] = x f32 [rows, width], out[0] = y f32 [rows]: y[r] = the 16-lane sum of row r (as
  /// kernels::detail::row_sum: kernels::sum_axis(x, 1), a per-row value's `sum`), bit for bit.
  SumCols,
  /// As SumCols, times 1.0f / width (kernels::mean_axis(x, 1): a per-row value's `mean`).
  MeanCols,
  /// in[0] = x f32 [rows, width], out[0] = y f32 [rows, width]: y = e / s with e_i = e^(x_i - m)
  /// (m the row's max) and s their 16-lane sum, multiplied by 1.0f / s, as kernels::softmax.
  Softmax,
  /// As Softmax: y_i = (x_i - m) - lse, lse = log(s) (0 when m is infinite), as
  /// kernels::log_softmax.
  LogSoftmax,
  /// in[0] = y (softmax's output), in[1] = gy, both f32 [rows, width]; out[0] = dx f32 [rows,
  /// width] = y * (gy - s), s the 16-lane sum of the rounded products gy_i * y_i (the
  /// reference's GradOp::SoftmaxBwd: a product, sum_axis(-1), a difference, a product).
  SoftmaxBwd,
  /// in[0] = y (log_softmax's output), in[1] = gy; out[0] = dx = gy - e^y * s, s the 16-lane
  /// sum of gy (the reference's GradOp::LogSoftmaxBwd, e^y the branch-free exp).
  LogSoftmaxBwd,
};

/// How many arrays a kind reads (in[0..n)).
int reduce_inputs(ReduceKind kind);

const char* reduce_kind_name(ReduceKind kind); ///< "sum_rows", "cross_entropy", ...

/// A family-3 kernel. Compiled to `int64_t k(const void* const* in, void* const* out, int64_t
/// rows)` (arrays dense, row-major, as listed under ReduceKind). The cross-entropy kinds return
/// the first row whose label is outside [0, C), or -1 (that row's results are then meaningless:
/// the caller reports the error, e.g. by running the reference kernel, which throws); the other
/// kinds return -1. The per-row kinds (SumCols and after) take `rows` rows of `width` floats:
/// a caller with several such rows per plan row (a per-row matrix) passes their total. e^x is the
/// elementwise family's branch-free exp (rel. error <= 3e-7).
struct ReduceSpec {
  ReduceKind kind = ReduceKind::SumRows;
  int64_t width = 1; ///< SumRows: columns; cross-entropy: classes C; the others: a row's length
  std::string dtype = "f32";
  /// Cross-entropy kinds only: one logits row (in[0] f32 [C]) or one label (in[1] i32 [1])
  /// read by every row (a template specialized to a constant state), i.e. a stride of 0; each
  /// row computes what it computes with that row or label in its place.
  bool shared_logits = false, shared_label = false;
  /// Cross-entropy kinds with per-row logits, CPU kernels only: the row statistics passed from
  /// the forward to the backward. CrossEntropy also writes, when out[1] is not null, each row's
  /// m and s (f32 [rows, 2], the values its loss used); CrossEntropyBwd reads them from in[3]
  /// when it is not null and then makes one pass over a row (e^(x_i - m) * (gy / s), the same
  /// bits as computing m and s itself, which it does when in[3] is null). The GPU kernels
  /// ignore it.
  bool row_stats = false;
  /// The family has one schedule, "default" (vectors of the host's width over the columns for
  /// SumRows; 16-lane sums per row for the others); nothing else is accepted yet.
  std::string schedule = "default";

  /// Canonical text: equal for specs that compile to the same code (target excluded; the cache
  /// appends it). Example: "reduce f32 cross_entropy w=5 sched=default", "reduce f32
  /// cross_entropy w=5 shared=logits sched=default".
  std::string canonical_text() const;
  /// The canonical text without the schedule.
  std::string signature() const;

  /// Throws pejit::Error naming the problem (width < 1, an unknown dtype or schedule, a shared
  /// operand of a kind other than cross-entropy or both shared, row statistics of another kind
  /// or of shared logits).
  void validate() const;
};

} // namespace pejit::jit
