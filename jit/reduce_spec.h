// ReduceSpec: kernel family 3, the row reductions and the loss that training plans run: a sum
// over the row axis (bias gradients, per-row parameter gradients), and cross-entropy over rows
// of logits with its backward. Plain C++: the lowering to LLVM IR is in reduce_codegen.cpp and
// is reached only through jit::Jit. Every kind computes what its reference kernel in
// src/kernels/reduce.cpp computes, in the same order of operations (see each kind).
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
};

const char* reduce_kind_name(ReduceKind kind); ///< "sum_rows", "cross_entropy", ...

/// A family-3 kernel. Compiled to `int64_t k(const void* const* in, void* const* out, int64_t
/// rows)` (arrays dense, row-major, as listed under ReduceKind). The cross-entropy kinds return
/// the first row whose label is outside [0, C), or -1 (that row's results are then meaningless:
/// the caller reports the error, e.g. by running the reference kernel, which throws); SumRows
/// returns -1. e^x is the elementwise family's branch-free exp (rel. error <= 3e-7).
struct ReduceSpec {
  ReduceKind kind = ReduceKind::SumRows;
  int64_t width = 1; ///< SumRows: columns; cross-entropy: classes C
  std::string dtype = "f32";
  /// The family has one schedule, "default" (vectors of the host's width over the columns for
  /// SumRows; 16-lane sums per row for cross-entropy); nothing else is accepted yet.
  std::string schedule = "default";

  /// Canonical text: equal for specs that compile to the same code (target excluded; the cache
  /// appends it). Example: "reduce f32 cross_entropy w=5 sched=default".
  std::string canonical_text() const;
  /// The canonical text without the schedule.
  std::string signature() const;

  /// Throws pejit::Error naming the problem (width < 1, an unknown dtype or schedule).
  void validate() const;
};

} // namespace pejit::jit
