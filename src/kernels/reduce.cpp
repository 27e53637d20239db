// Reductions: sum / mean (all or one axis), softmax and log-softmax over the last axis, the
// cross-entropy loss with its backward, and argmax. Rows use the 16-lane helpers of row_ops.h,
// so every result depends only on the shapes, never on alignment or timing.
#include "src/kernels/fast_math.h"
#include "src/kernels/kernels.h"
#include "src/kernels/row_ops.h"
#include "src/util/check.h"

#include <cmath>
#include <cstring>

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

void require_f32(const Tensor& t, const char* what) {
  if (!t.defined())
    throw Error(std::string(what) + ": undefined tensor");
  if (t.dtype() != DType::F32)
    throw Error(std::string(what) + ": needs f32, got " + dtype_name(t.dtype()) + t.shape().str());
}

struct Split {
  int64_t outer = 1, n = 1, inner = 1;
};

Split split_at(const Shape& s, int axis) {
  Split sp;
  for (int d = 0; d < static_cast<int>(s.rank()); ++d) {
    int64_t v = s[static_cast<size_t>(d)];
    if (d < axis)
      sp.outer *= v;
    else if (d == axis)
      sp.n = v;
    else
      sp.inner *= v;
  }
  return sp;
}

Shape drop_axis(const Shape& s, int axis) {
  Shape out;
  for (int d = 0; d < static_cast<int>(s.rank()); ++d)
    if (d != axis)
      out.push_back(s[static_cast<size_t>(d)]);
  return out;
}

// Rows of the last axis of x: count and length. Throws for rank 0 or an empty last axis.
Split last_axis_rows(const Tensor& x, const char* what) {
  if (x.rank() == 0)
    throw Error(std::string(what) + ": needs rank >= 1, got shape " + x.shape().str());
  Split sp = split_at(x.shape(), static_cast<int>(x.rank()) - 1);
  if (sp.n == 0 && sp.outer > 0)
    throw Error(std::string(what) + ": empty last axis in shape " + x.shape().str());
  return sp;
}

// A row's max m and log(sum(exp(x - m))); callers form (x - m) - lse, which stays exact for
// large x where x - (m + lse) would lose the low bits of lse.
struct RowLse {
  float m, lse;
};

RowLse row_logsumexp(const float* x, int64_t n) {
  float m = detail::row_max(x, n);
  if (std::isinf(m)) // all -inf, or a +inf: avoid inf - inf
    return {m, 0.0f};
  float lane[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j)
      lane[j] += fast_exp(x[i + j] - m);
  for (int j = 0; i < n; ++i, ++j)
    lane[j] += fast_exp(x[i] - m);
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; ++j)
      lane[j] += lane[j + w];
  return {m, std::log(lane[0])};
}

// Checks labels against logits [..., C] and returns C.
int64_t check_ce(const Tensor& logits, const Tensor& labels, const char* what) {
  require_f32(logits, what);
  if (!labels.defined() || labels.dtype() != DType::I32)
    throw Error(std::string(what) + ": labels must be i32");
  if (logits.rank() == 0 ||
      drop_axis(logits.shape(), static_cast<int>(logits.rank()) - 1) != labels.shape())
    throw Error(std::string(what) + ": logits " + logits.shape().str() + " do not match labels " +
                labels.shape().str() + " (logits must be labels' shape plus a class axis)");
  int64_t c = logits.dim(-1);
  const int32_t* lp = labels.i32();
  for (int64_t i = 0; i < labels.numel(); ++i)
    if (lp[i] < 0 || lp[i] >= c)
      throw Error(std::string(what) + ": label " + std::to_string(lp[i]) + " at position " +
                  std::to_string(i) + " is outside [0, " + std::to_string(c) + ")");
  return c;
}

} // namespace

Tensor sum(const Tensor& x) {
  if (!x.defined())
    throw Error("sum: undefined tensor");
  if (x.dtype() == DType::F32)
    return Tensor::scalar_f32(detail::row_sum(x.f32(), x.numel()));
  uint32_t s = 0;
  const int32_t* p = x.i32();
  for (int64_t i = 0; i < x.numel(); ++i)
    s += static_cast<uint32_t>(p[i]);
  return Tensor::scalar_i32(static_cast<int32_t>(s));
}

Tensor sum_axis(const Tensor& x, int axis) {
  if (!x.defined())
    throw Error("sum_axis: undefined tensor");
  int a = normalize_axis(axis, x.rank(), "sum_axis", x.shape());
  Split sp = split_at(x.shape(), a);
  Tensor y = Tensor::zeros(x.dtype(), drop_axis(x.shape(), a));
  if (x.dtype() == DType::F32) {
    const float* xp = x.f32();
    float* yp = y.f32();
    for (int64_t o = 0; o < sp.outer; ++o) {
      const float* src = xp + o * sp.n * sp.inner;
      float* __restrict dst = yp + o * sp.inner;
      if (sp.inner == 1) {
        dst[0] = detail::row_sum(src, sp.n);
        continue;
      }
      for (int64_t j = 0; j < sp.n; ++j)
        for (int64_t i = 0; i < sp.inner; ++i)
          dst[i] += src[j * sp.inner + i];
    }
  } else {
    const int32_t* xp = x.i32();
    int32_t* yp = y.i32();
    for (int64_t o = 0; o < sp.outer; ++o)
      for (int64_t j = 0; j < sp.n; ++j)
        for (int64_t i = 0; i < sp.inner; ++i) {
          int32_t& d = yp[o * sp.inner + i];
          d = static_cast<int32_t>(static_cast<uint32_t>(d) +
                                   static_cast<uint32_t>(xp[(o * sp.n + j) * sp.inner + i]));
        }
  }
  return y;
}

Tensor mean(const Tensor& x) {
  require_f32(x, "mean");
  if (x.numel() == 0)
    throw Error("mean: empty tensor " + x.shape().str());
  return Tensor::scalar_f32(detail::row_sum(x.f32(), x.numel()) / static_cast<float>(x.numel()));
}

Tensor mean_axis(const Tensor& x, int axis) {
  require_f32(x, "mean_axis");
  int a = normalize_axis(axis, x.rank(), "mean_axis", x.shape());
  int64_t n = x.shape()[static_cast<size_t>(a)];
  if (n == 0)
    throw Error("mean_axis: empty axis " + std::to_string(axis) + " in " + x.shape().str());
  Tensor y = sum_axis(x, a);
  float inv = 1.0f / static_cast<float>(n);
  float* p = y.f32();
  for (int64_t i = 0; i < y.numel(); ++i)
    p[i] *= inv;
  return y;
}

Tensor softmax(const Tensor& x) {
  require_f32(x, "softmax");
  Split sp = last_axis_rows(x, "softmax");
  Tensor y = Tensor::empty(DType::F32, x.shape());
  const float* xp = x.f32();
  float* yp = y.f32();
  for (int64_t r = 0; r < sp.outer; ++r) {
    const float* __restrict src = xp + r * sp.n;
    float* __restrict dst = yp + r * sp.n;
    float m = detail::row_max(src, sp.n);
    for (int64_t i = 0; i < sp.n; ++i)
      dst[i] = fast_exp(src[i] - m);
    float inv = 1.0f / detail::row_sum(dst, sp.n);
    for (int64_t i = 0; i < sp.n; ++i)
      dst[i] *= inv;
  }
  return y;
}

Tensor log_softmax(const Tensor& x) {
  require_f32(x, "log_softmax");
  Split sp = last_axis_rows(x, "log_softmax");
  Tensor y = Tensor::empty(DType::F32, x.shape());
  const float* xp = x.f32();
  float* yp = y.f32();
  for (int64_t r = 0; r < sp.outer; ++r) {
    const float* __restrict src = xp + r * sp.n;
    float* __restrict dst = yp + r * sp.n;
    RowLse l = row_logsumexp(src, sp.n);
    for (int64_t i = 0; i < sp.n; ++i)
      dst[i] = (src[i] - l.m) - l.lse;
  }
  return y;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels) {
  int64_t c = check_ce(logits, labels, "cross_entropy");
  Tensor y = Tensor::empty(DType::F32, labels.shape());
  const float* xp = logits.f32();
  const int32_t* lp = labels.i32();
  float* yp = y.f32();
  for (int64_t r = 0; r < labels.numel(); ++r) {
    const float* row = xp + r * c;
    RowLse l = row_logsumexp(row, c);
    yp[r] = l.lse - (row[lp[r]] - l.m);
  }
  return y;
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& gy) {
  int64_t c = check_ce(logits, labels, "cross_entropy_backward");
  require_f32(gy, "cross_entropy_backward");
  if (gy.shape() != labels.shape())
    throw Error("cross_entropy_backward: gradient " + gy.shape().str() + " does not match labels " +
                labels.shape().str());
  Tensor dx = Tensor::empty(DType::F32, logits.shape());
  const float* xp = logits.f32();
  const float* gp = gy.f32();
  const int32_t* lp = labels.i32();
  float* dp = dx.f32();
  for (int64_t r = 0; r < labels.numel(); ++r) {
    const float* __restrict src = xp + r * c;
    float* __restrict dst = dp + r * c;
    float m = detail::row_max(src, c);
    for (int64_t i = 0; i < c; ++i)
      dst[i] = fast_exp(src[i] - m);
    float scale = gp[r] / detail::row_sum(dst, c);
    for (int64_t i = 0; i < c; ++i)
      dst[i] *= scale;
    dst[lp[r]] -= gp[r];
  }
  return dx;
}

Tensor argmax(const Tensor& x) {
  if (!x.defined())
    throw Error("argmax: undefined tensor");
  Split sp = last_axis_rows(x, "argmax");
  Tensor y = Tensor::empty(DType::I32, drop_axis(x.shape(), static_cast<int>(x.rank()) - 1));
  int32_t* yp = y.i32();
  auto run = [&](auto* p) {
    for (int64_t r = 0; r < sp.outer; ++r) {
      auto* row = p + r * sp.n;
      int64_t best = 0;
      for (int64_t i = 1; i < sp.n; ++i)
        if (row[i] > row[best])
          best = i;
      yp[r] = static_cast<int32_t>(best);
    }
  };
  if (x.dtype() == DType::F32)
    run(x.f32());
  else
    run(x.i32());
  return y;
}

} // namespace pejit::kernels
