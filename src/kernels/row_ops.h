// Internal: reductions over one contiguous row, shared by the elementwise and reduction
// kernels. Each keeps 16 independent lanes so GCC vectorizes it without reassociating floats
// on its own; the summation order depends only on n, so results are reproducible.
#pragma once

#include <cstdint>

namespace pejit::kernels::detail {

inline float row_sum(const float* x, int64_t n) {
  float lane[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      lane[j] += x[i + j];
  for (int j = 0; i < n; ++i, ++j)
    lane[j] += x[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j)
      lane[j] += lane[j + w];
  return lane[0];
}

/// Largest element of a non-empty row. NaN handling is unspecified: callers (softmax) turn a
/// NaN row into NaN results anyway.
inline float row_max(const float* x, int64_t n) {
  float lane[16];
  for (int j = 0; j < 16; ++j)
    lane[j] = x[0];
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      lane[j] = x[i + j] > lane[j] ? x[i + j] : lane[j];
  for (int j = 0; i < n; ++i, ++j)
    lane[j] = x[i] > lane[j] ? x[i] : lane[j];
  float m = lane[0];
  for (int j = 1; j < 16; ++j)
    m = lane[j] > m ? lane[j] : m;
  return m;
}

/// Dot product of two contiguous rows, 16 lanes.
inline float row_dot(const float* a, const float* b, int64_t n) {
  float lane[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      lane[j] += a[i + j] * b[i + j];
  for (int j = 0; i < n; ++i, ++j)
    lane[j] += a[i] * b[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j)
      lane[j] += lane[j + w];
  return lane[0];
}

} // namespace pejit::kernels::detail
