// Internal: the one transpose of 4-byte elements behind kernels::transpose (W^T once per plan
// run, for dX = dY·W^T) and the GEMM wrapper's transposed operands (weight-gradient chunks).
#pragma once

#include <cstdint>

namespace pejit::kernels::detail {

/// dst[j][i] = src[i][j] for an r x c block of 4-byte elements (f32 or i32: only bits move),
/// with leading dimensions lds and ldd (elements). src and dst must not overlap.
void transpose32(const void* src, int64_t r, int64_t c, int64_t lds, void* dst, int64_t ldd);

} // namespace pejit::kernels::detail
