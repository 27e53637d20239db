// Internal: iteration over numpy-broadcast operands. A BroadcastPlan aligns operand shapes to
// the output's, gives broadcast dimensions stride 0, drops size-1 dimensions and merges
// neighbours that are contiguous in every operand, so same-shape ops become one flat loop and
// bias-style [m,n]+[n] ops become m rows of a unit-stride loop. for_each_row() then calls a
// kernel per innermost row with that row's unit-or-zero strides.
#pragma once

#include "src/tensor/tensor.h"

#include <cstdint>

namespace pejit::kernels::detail {

template <int N> struct BroadcastPlan {
  int rank = 0;                  // after collapsing; 0 means a single element
  int64_t dims[Shape::kMaxRank]; // output dims
  int64_t strides[N][Shape::kMaxRank];

  /// `out` must be the broadcast of every shape in `ins` (checked by the caller).
  BroadcastPlan(const Shape& out, const Shape* const* ins) {
    int r = static_cast<int>(out.rank());
    int64_t st[N][Shape::kMaxRank];
    for (int k = 0; k < N; ++k) {
      const Shape& s = *ins[k];
      int off = r - static_cast<int>(s.rank());
      int64_t acc = 1;
      for (int d = r - 1; d >= 0; --d) {
        int64_t sd = d >= off ? s[static_cast<size_t>(d - off)] : 1;
        st[k][d] = sd == 1 ? 0 : acc;
        acc *= sd;
      }
    }
    for (int d = 0; d < r; ++d) {
      int64_t n = out[static_cast<size_t>(d)];
      if (n == 1)
        continue;
      bool merge = rank > 0;
      for (int k = 0; k < N && merge; ++k)
        merge = strides[k][rank - 1] == st[k][d] * n;
      if (merge) {
        dims[rank - 1] *= n;
        for (int k = 0; k < N; ++k)
          strides[k][rank - 1] = st[k][d];
      } else {
        dims[rank] = n;
        for (int k = 0; k < N; ++k)
          strides[k][rank] = st[k][d];
        ++rank;
      }
    }
  }

  /// Calls row(offsets[N], inner_strides[N], n) for every innermost row, in row-major order.
  template <class F> void for_each_row(F&& row) const {
    int64_t off[N] = {};
    if (rank == 0) {
      int64_t zero[N] = {};
      row(off, zero, int64_t{1});
      return;
    }
    int64_t inner[N];
    for (int k = 0; k < N; ++k)
      inner[k] = strides[k][rank - 1];
    int64_t n = dims[rank - 1];
    int64_t idx[Shape::kMaxRank] = {};
    for (;;) {
      row(off, inner, n);
      int d = rank - 2;
      for (; d >= 0; --d) {
        for (int k = 0; k < N; ++k)
          off[k] += strides[k][d];
        if (++idx[d] < dims[d])
          break;
        for (int k = 0; k < N; ++k)
          off[k] -= strides[k][d] * dims[d];
        idx[d] = 0;
      }
      if (d < 0)
        return;
    }
  }
};

} // namespace pejit::kernels::detail
