// Layout kernels (concat, slice, transpose) and row gathers: take, its row-sparse gradient
// (RowSparse: coalesce, to_dense) and the scatter-add that applies it to a dense table.
#include "src/kernels/kernels.h"
#include "src/kernels/transpose.h"
#include "src/util/check.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

namespace pejit::kernels {
namespace {

int normalize_axis(int axis, size_t rank, const char* what, const Shape& s) {
  int r = static_cast<int>(rank);
  int a = axis < 0 ? axis + r : axis;
  if (a < 0 || a >= r)
    throw Error(std::string(what) + ": axis " + std::to_string(axis) + " out of range for shape " +
                s.str());
  return a;
}

char* bytes(Tensor& t) {
  return static_cast<char*>(t.raw());
}
const char* bytes(const Tensor& t) {
  return static_cast<const char*>(t.raw());
}

// Product of dims [from, to).
int64_t prod(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t d = from; d < to; ++d)
    p *= s[d];
  return p;
}

// Elements per table row (product of D...), checking the table's rank.
int64_t row_elems(const Shape& table, const char* what) {
  if (table.rank() == 0)
    throw Error(std::string(what) + ": table must have rank >= 1, got " + table.str());
  return prod(table, 1, table.rank());
}

void check_ids(const int32_t* ids, int64_t n, int64_t v, const char* what) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= v)
      throw Error(std::string(what) + ": id " + std::to_string(ids[i]) + " at position " +
                  std::to_string(i) + " is outside [0, " + std::to_string(v) + ")");
}

void add_row(float* __restrict dst, const float* __restrict src, float scale, int64_t n) {
  if (scale == 1.0f) {
    for (int64_t i = 0; i < n; ++i)
      dst[i] += src[i];
  } else {
    for (int64_t i = 0; i < n; ++i)
      dst[i] += scale * src[i];
  }
}

} // namespace

Tensor concat(std::span<const Tensor> xs, int axis) {
  if (xs.empty())
    throw Error("concat: no inputs");
  const Tensor& x0 = xs[0];
  if (!x0.defined())
    throw Error("concat: undefined input 0");
  int a = normalize_axis(axis, x0.rank(), "concat", x0.shape());
  Shape out = x0.shape();
  out[static_cast<size_t>(a)] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    bool ok = x.defined() && x.dtype() == x0.dtype() && x.rank() == x0.rank();
    for (size_t d = 0; ok && d < x.rank(); ++d)
      ok = d == static_cast<size_t>(a) || x.shape()[d] == x0.shape()[d];
    if (!ok)
      throw Error("concat: input " + std::to_string(i) + " (" +
                  (x.defined() ? std::string(dtype_name(x.dtype())) + x.shape().str()
                               : std::string("undefined")) +
                  ") does not match input 0 (" + dtype_name(x0.dtype()) + x0.shape().str() +
                  ") outside axis " + std::to_string(axis));
    out[static_cast<size_t>(a)] += x.shape()[static_cast<size_t>(a)];
  }
  Tensor y = Tensor::empty(x0.dtype(), out);
  int64_t outer = prod(out, 0, static_cast<size_t>(a));
  int64_t inner = prod(out, static_cast<size_t>(a) + 1, out.rank()) * 4; // bytes
  char* dst = bytes(y);
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor& x : xs) {
      int64_t chunk = x.shape()[static_cast<size_t>(a)] * inner;
      if (chunk > 0)
        std::memcpy(dst, bytes(x) + o * chunk, static_cast<size_t>(chunk));
      dst += chunk;
    }
  return y;
}

Tensor slice(const Tensor& x, int axis, int64_t start, int64_t end) {
  if (!x.defined())
    throw Error("slice: undefined tensor");
  int a = normalize_axis(axis, x.rank(), "slice", x.shape());
  int64_t n = x.shape()[static_cast<size_t>(a)];
  int64_t s = start < 0 ? start + n : start;
  int64_t e = end < 0 ? end + n : end;
  if (s < 0 || e > n || s > e)
    throw Error("slice: [" + std::to_string(start) + ", " + std::to_string(end) +
                ") out of range for axis " + std::to_string(axis) + " of shape " + x.shape().str());
  if (s == 0 && e == n)
    return x;
  Shape out = x.shape();
  out[static_cast<size_t>(a)] = e - s;
  Tensor y = Tensor::empty(x.dtype(), out);
  int64_t outer = prod(out, 0, static_cast<size_t>(a));
  int64_t inner = prod(out, static_cast<size_t>(a) + 1, out.rank()) * 4;
  const char* src = bytes(x) + s * inner;
  char* dst = bytes(y);
  int64_t chunk = (e - s) * inner;
  if (chunk > 0)
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + o * chunk, src + o * n * inner, static_cast<size_t>(chunk));
  return y;
}

Tensor transpose(const Tensor& x) {
  if (!x.defined() || x.rank() != 2)
    throw Error("transpose: needs a 2-D tensor, got " +
                (x.defined() ? x.shape().str() : std::string("undefined")));
  int64_t r = x.dim(0), c = x.dim(1);
  Tensor y = Tensor::empty(x.dtype(), Shape{c, r});
  // 4-byte elements either way.
  detail::transpose32(x.raw(), r, c, c, y.raw(), r);
  return y;
}

Tensor take(const Tensor& table, const Tensor& idx) {
  if (!table.defined())
    throw Error("take: undefined table");
  if (!idx.defined() || idx.dtype() != DType::I32)
    throw Error("take: indices must be i32");
  Shape out = idx.shape();
  for (size_t k = 1; k < table.rank(); ++k)
    out.push_back(table.shape()[k]);
  Tensor y = Tensor::empty(table.dtype(), out);
  take_into(table, idx, y);
  return y;
}

void take_into(const Tensor& table, const Tensor& idx, Tensor& out) {
  if (!table.defined())
    throw Error("take: undefined table");
  if (!idx.defined() || idx.dtype() != DType::I32)
    throw Error("take: indices must be i32");
  int64_t d = row_elems(table.shape(), "take");
  int64_t v = table.dim(0);
  const int32_t* ip = idx.i32();
  check_ids(ip, idx.numel(), v, "take");
  PEJIT_CHECK(out.defined() && out.dtype() == table.dtype() && out.numel() == idx.numel() * d)
      << "take_into: the output block does not fit the rows";
  size_t row = static_cast<size_t>(d) * 4;
  const char* src = bytes(table);
  char* dst = bytes(out);
  for (int64_t i = 0; i < idx.numel(); ++i)
    std::memcpy(dst + i * row, src + ip[i] * row, row);
}

RowSparse take_backward(const Tensor& idx, const Tensor& gy, const Shape& table_shape) {
  if (!idx.defined() || idx.dtype() != DType::I32)
    throw Error("take_backward: indices must be i32");
  if (!gy.defined() || gy.dtype() != DType::F32)
    throw Error("take_backward: gradient must be f32");
  row_elems(table_shape, "take_backward");
  Shape expect = idx.shape();
  Shape rows_shape{idx.numel()};
  for (size_t k = 1; k < table_shape.rank(); ++k) {
    expect.push_back(table_shape[k]);
    rows_shape.push_back(table_shape[k]);
  }
  if (gy.shape() != expect)
    throw Error("take_backward: gradient " + gy.shape().str() + " does not match indices " +
                idx.shape().str() + " and table " + table_shape.str() + " (expected " +
                expect.str() + ")");
  check_ids(idx.i32(), idx.numel(), table_shape[0], "take_backward");
  RowSparse g;
  g.indices = idx.reshaped(Shape{idx.numel()});
  g.rows = gy.reshaped(rows_shape);
  g.num_rows = table_shape[0];
  return g;
}

Tensor RowSparse::to_dense() const {
  Shape s{num_rows};
  for (size_t k = 1; k < rows.rank(); ++k)
    s.push_back(rows.shape()[k]);
  Tensor dense = Tensor::zeros(DType::F32, s);
  add_rows_inplace(dense, *this);
  return dense;
}

void RowSparse::coalesce() {
  if (!indices.defined() || !rows.defined() || indices.dtype() != DType::I32 ||
      rows.dtype() != DType::F32 || rows.rank() == 0 || indices.numel() != rows.dim(0))
    throw Error("RowSparse::coalesce: malformed (indices and rows disagree)");
  int64_t n = indices.numel();
  int64_t d = rows.numel() / std::max<int64_t>(n, 1);
  const int32_t* ip = indices.i32();
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return ip[x] < ip[y]; });
  int64_t uniq = 0;
  for (int64_t i = 0; i < n; ++i)
    if (i == 0 || ip[order[i]] != ip[order[i - 1]])
      ++uniq;
  Shape rs = rows.shape();
  rs[0] = uniq;
  Tensor new_idx = Tensor::empty(DType::I32, Shape{uniq});
  Tensor new_rows = Tensor::zeros(DType::F32, rs);
  int32_t* ni = new_idx.i32();
  float* nr = new_rows.f32();
  const float* rp = rows.f32();
  int64_t u = -1;
  for (int64_t i = 0; i < n; ++i) {
    int64_t src = order[static_cast<size_t>(i)];
    if (i == 0 || ip[src] != ni[u])
      ni[++u] = ip[src];
    add_row(nr + u * d, rp + src * d, 1.0f, d);
  }
  indices = new_idx;
  rows = new_rows;
}

void add_rows_inplace(Tensor& dense, const RowSparse& g, float scale) {
  if (!dense.defined() || dense.dtype() != DType::F32)
    throw Error("add_rows_inplace: dense must be f32");
  if (!g.indices.defined() || !g.rows.defined() || g.rows.rank() == 0 ||
      g.indices.numel() != g.rows.dim(0))
    throw Error("add_rows_inplace: malformed RowSparse (indices and rows disagree)");
  Shape expect{g.num_rows};
  for (size_t k = 1; k < g.rows.rank(); ++k)
    expect.push_back(g.rows.shape()[k]);
  if (dense.shape() != expect)
    throw Error("add_rows_inplace: dense " + dense.shape().str() +
                " does not match row-sparse gradient of " + expect.str());
  const int32_t* ip = g.indices.i32();
  int64_t n = g.indices.numel();
  check_ids(ip, n, g.num_rows, "add_rows_inplace");
  if (!dense.unique())
    dense = dense.clone();
  int64_t d = row_elems(expect, "add_rows_inplace");
  float* dp = dense.f32();
  const float* rp = g.rows.f32();
  for (int64_t i = 0; i < n; ++i)
    add_row(dp + ip[i] * d, rp + i * d, scale, d);
}

} // namespace pejit::kernels
