// Elementwise kernels: unary ops, broadcasting binary ops, broadcast_to / sum_to_shape, the
// activation backward rules and the in-place accumulators. Inner loops are written over unit
// or zero strides (see broadcast.h) so that each specialisation vectorizes.
#include "src/kernels/broadcast.h"
#include "src/kernels/fast_math.h"
#include "src/kernels/kernels.h"
#include "src/kernels/row_ops.h"
#include "src/util/check.h"

#include <cmath>
#include <cstring>
#include <type_traits>

namespace pejit::kernels {
namespace {

std::string shapes_msg(const Tensor& a, const Tensor& b) {
  return std::string(dtype_name(a.dtype())) + a.shape().str() + " and " + dtype_name(b.dtype()) +
         b.shape().str();
}

void require_defined(const Tensor& t, const char* what) {
  if (!t.defined())
    throw Error(std::string(what) + ": undefined tensor");
}

void require_same(const Tensor& a, const Tensor& b, const char* what) {
  require_defined(a, what);
  require_defined(b, what);
  if (a.dtype() != b.dtype() || a.shape() != b.shape())
    throw Error(std::string(what) + ": operands must have the same shape and dtype, got " +
                shapes_msg(a, b));
}

void require_f32(const Tensor& t, const char* what) {
  require_defined(t, what);
  if (t.dtype() != DType::F32)
    throw Error(std::string(what) + ": needs f32, got " + dtype_name(t.dtype()) + t.shape().str());
}

// ---- unary ---------------------------------------------------------------------------------

template <class F> void map_f32(const float* x, float* y, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = f(x[i]);
}

// ---- binary --------------------------------------------------------------------------------

template <Binary op, class T> inline T apply(T a, T b) {
  if constexpr (std::is_same_v<T, int32_t>) {
    using U = uint32_t;
    if constexpr (op == Binary::Add)
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    if constexpr (op == Binary::Sub)
      return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
    if constexpr (op == Binary::Mul)
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    if constexpr (op == Binary::Div) // zero divisors rejected before; INT_MIN / -1 wraps
      return b == -1 ? static_cast<T>(U(0) - static_cast<U>(a)) : a / b;
  } else {
    if constexpr (op == Binary::Add)
      return a + b;
    if constexpr (op == Binary::Sub)
      return a - b;
    if constexpr (op == Binary::Mul)
      return a * b;
    if constexpr (op == Binary::Div)
      return a / b;
  }
  if constexpr (op == Binary::Lt)
    return a < b ? T(1) : T(0);
  if constexpr (op == Binary::Le)
    return a <= b ? T(1) : T(0);
  if constexpr (op == Binary::Gt)
    return a > b ? T(1) : T(0);
  if constexpr (op == Binary::Ge)
    return a >= b ? T(1) : T(0);
  if constexpr (op == Binary::Eq)
    return a == b ? T(1) : T(0);
  if constexpr (op == Binary::Ne)
    return a != b ? T(1) : T(0);
}

template <Binary op, class T>
void binary_row(T* __restrict o, const T* __restrict a, int64_t sa, const T* __restrict b,
                int64_t sb, int64_t n) {
  if (sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i)
      o[i] = apply<op>(a[i], b[i]);
  } else if (sa == 1) {
    T bv = b[0];
    for (int64_t i = 0; i < n; ++i)
      o[i] = apply<op>(a[i], bv);
  } else if (sb == 1) {
    T av = a[0];
    for (int64_t i = 0; i < n; ++i)
      o[i] = apply<op>(av, b[i]);
  } else {
    T v = apply<op>(a[0], b[0]);
    for (int64_t i = 0; i < n; ++i)
      o[i] = v;
  }
}

template <Binary op, class T>
void binary_typed(const T* a, const T* b, T* o, const Shape& out, const Shape& as,
                  const Shape& bs) {
  if (as == bs) { // the common case, no plan needed
    binary_row<op, T>(o, a, 1, b, 1, out.numel());
    return;
  }
  const Shape* ins[2] = {&as, &bs};
  detail::BroadcastPlan<2> plan(out, ins);
  T* op_ = o;
  plan.for_each_row([&](const int64_t* off, const int64_t* st, int64_t n) {
    binary_row<op, T>(op_, a + off[0], st[0], b + off[1], st[1], n);
    op_ += n;
  });
}

template <class T>
void binary_dispatch(Binary op, const T* a, const T* b, T* o, const Shape& out, const Shape& as,
                     const Shape& bs) {
  switch (op) {
#define PEJIT_BIN(name)                                                                            \
  case Binary::name:                                                                               \
    return binary_typed<Binary::name, T>(a, b, o, out, as, bs);
    PEJIT_BIN(Add)
    PEJIT_BIN(Sub)
    PEJIT_BIN(Mul)
    PEJIT_BIN(Div)
    PEJIT_BIN(Lt)
    PEJIT_BIN(Le)
    PEJIT_BIN(Gt)
    PEJIT_BIN(Ge)
    PEJIT_BIN(Eq)
    PEJIT_BIN(Ne)
#undef PEJIT_BIN
  }
  PEJIT_CHECK(false) << "unknown binary op";
}

template <class T> void copy_broadcast(const T* x, T* o, const Shape& xs, const Shape& out) {
  const Shape* ins[1] = {&xs};
  detail::BroadcastPlan<1> plan(out, ins);
  T* op_ = o;
  plan.for_each_row([&](const int64_t* off, const int64_t* st, int64_t n) {
    const T* src = x + off[0];
    if (st[0] == 1) {
      std::memcpy(op_, src, static_cast<size_t>(n) * sizeof(T));
    } else {
      T v = *src;
      for (int64_t i = 0; i < n; ++i)
        op_[i] = v;
    }
    op_ += n;
  });
}

template <class T> void reduce_broadcast(const T* g, T* o, const Shape& gs, const Shape& out) {
  const Shape* ins[1] = {&out}; // strides of the reduced output within g's index space
  detail::BroadcastPlan<1> plan(gs, ins);
  const T* gp = g;
  plan.for_each_row([&](const int64_t* off, const int64_t* st, int64_t n) {
    T* dst = o + off[0];
    if (st[0] == 1) {
      for (int64_t i = 0; i < n; ++i)
        dst[i] += gp[i];
    } else if constexpr (std::is_same_v<T, float>) {
      *dst += detail::row_sum(gp, n);
    } else {
      uint32_t s = 0;
      for (int64_t i = 0; i < n; ++i)
        s += static_cast<uint32_t>(gp[i]);
      *dst = static_cast<T>(static_cast<uint32_t>(*dst) + s);
    }
    gp += n;
  });
}

} // namespace

Tensor unary(Unary op, const Tensor& x) {
  require_defined(x, "unary");
  Tensor y = Tensor::empty(x.dtype(), x.shape());
  int64_t n = x.numel();
  if (x.dtype() == DType::I32) {
    const int32_t* xp = x.i32();
    int32_t* yp = y.i32();
    if (op == Unary::Neg) {
      for (int64_t i = 0; i < n; ++i)
        yp[i] = static_cast<int32_t>(0u - static_cast<uint32_t>(xp[i]));
    } else if (op == Unary::Relu) {
      for (int64_t i = 0; i < n; ++i)
        yp[i] = xp[i] < 0 ? 0 : xp[i];
    } else {
      throw Error("unary: this op needs f32, got i32" + x.shape().str());
    }
    return y;
  }
  const float* xp = x.f32();
  float* yp = y.f32();
  switch (op) {
  case Unary::Neg:
    map_f32(xp, yp, n, [](float v) { return -v; });
    break;
  case Unary::Exp:
    map_f32(xp, yp, n, [](float v) { return fast_exp(v); });
    break;
  case Unary::Log:
    map_f32(xp, yp, n, [](float v) { return std::log(v); });
    break;
  case Unary::Tanh:
    map_f32(xp, yp, n, [](float v) { return fast_tanh(v); });
    break;
  case Unary::Sigmoid:
    map_f32(xp, yp, n, [](float v) { return fast_sigmoid(v); });
    break;
  case Unary::Relu: // NaN propagates
    map_f32(xp, yp, n, [](float v) { return v < 0.0f ? 0.0f : v; });
    break;
  }
  return y;
}

namespace {
// The broadcast of a and b into *out; false when incompatible.
bool try_broadcast(const Shape& a, const Shape& b, Shape* out) {
  size_t r = a.rank() > b.rank() ? a.rank() : b.rank();
  *out = Shape();
  for (size_t i = 0; i < r; ++i) {
    size_t oa = r - a.rank(), ob = r - b.rank();
    int64_t da = i >= oa ? a[i - oa] : 1;
    int64_t db = i >= ob ? b[i - ob] : 1;
    if (da != db && da != 1 && db != 1)
      return false;
    out->push_back(da == 1 ? db : da);
  }
  return true;
}
} // namespace

Shape broadcast_shape(const Shape& a, const Shape& b) {
  Shape out;
  if (!try_broadcast(a, b, &out))
    throw Error("cannot broadcast shapes " + a.str() + " and " + b.str());
  return out;
}

Tensor binary(Binary op, const Tensor& a, const Tensor& b) {
  require_defined(a, "binary");
  require_defined(b, "binary");
  if (a.dtype() != b.dtype())
    throw Error("binary: operand dtypes differ: " + shapes_msg(a, b));
  Shape out = broadcast_shape(a.shape(), b.shape());
  Tensor y = Tensor::empty(a.dtype(), out);
  if (y.numel() == 0)
    return y;
  if (a.dtype() == DType::F32) {
    binary_dispatch(op, a.f32(), b.f32(), y.f32(), out, a.shape(), b.shape());
  } else {
    if (op == Binary::Div) {
      const int32_t* bp = b.i32();
      for (int64_t i = 0; i < b.numel(); ++i)
        if (bp[i] == 0)
          throw Error("binary: i32 division by zero (divisor " + b.shape().str() + ")");
    }
    binary_dispatch(op, a.i32(), b.i32(), y.i32(), out, a.shape(), b.shape());
  }
  return y;
}

Tensor broadcast_to(const Tensor& x, const Shape& s) {
  require_defined(x, "broadcast_to");
  if (x.shape() == s)
    return x;
  Shape bs;
  if (!try_broadcast(x.shape(), s, &bs) || bs != s)
    throw Error("broadcast_to: cannot broadcast " + x.shape().str() + " to " + s.str());
  Tensor y = Tensor::empty(x.dtype(), s);
  if (y.numel() == 0)
    return y;
  if (x.dtype() == DType::F32)
    copy_broadcast(x.f32(), y.f32(), x.shape(), s);
  else
    copy_broadcast(x.i32(), y.i32(), x.shape(), s);
  return y;
}

Tensor sum_to_shape(const Tensor& g, const Shape& s) {
  require_defined(g, "sum_to_shape");
  if (g.shape() == s)
    return g;
  Shape bs;
  if (!try_broadcast(s, g.shape(), &bs) || bs != g.shape())
    throw Error("sum_to_shape: " + s.str() + " does not broadcast to " + g.shape().str());
  Tensor y = Tensor::zeros(g.dtype(), s);
  if (g.numel() == 0)
    return y;
  if (g.dtype() == DType::F32)
    reduce_broadcast(g.f32(), y.f32(), g.shape(), s);
  else
    reduce_broadcast(g.i32(), y.i32(), g.shape(), s);
  return y;
}

Tensor sigmoid_backward(const Tensor& y, const Tensor& gy) {
  require_same(y, gy, "sigmoid_backward");
  require_f32(y, "sigmoid_backward");
  Tensor dx = Tensor::empty(DType::F32, y.shape());
  const float *yp = y.f32(), *gp = gy.f32();
  float* dp = dx.f32();
  for (int64_t i = 0; i < y.numel(); ++i)
    dp[i] = gp[i] * yp[i] * (1.0f - yp[i]);
  return dx;
}

Tensor tanh_backward(const Tensor& y, const Tensor& gy) {
  require_same(y, gy, "tanh_backward");
  require_f32(y, "tanh_backward");
  Tensor dx = Tensor::empty(DType::F32, y.shape());
  const float *yp = y.f32(), *gp = gy.f32();
  float* dp = dx.f32();
  for (int64_t i = 0; i < y.numel(); ++i)
    dp[i] = gp[i] * (1.0f - yp[i] * yp[i]);
  return dx;
}

Tensor relu_backward(const Tensor& x, const Tensor& gy) {
  require_same(x, gy, "relu_backward");
  require_f32(x, "relu_backward");
  Tensor dx = Tensor::empty(DType::F32, x.shape());
  const float *xp = x.f32(), *gp = gy.f32();
  float* dp = dx.f32();
  for (int64_t i = 0; i < x.numel(); ++i)
    dp[i] = xp[i] > 0.0f ? gp[i] : 0.0f;
  return dx;
}

void add_inplace(Tensor& acc, const Tensor& x) {
  require_defined(x, "add_inplace");
  if (!acc.defined()) {
    acc = x;
    return;
  }
  require_same(acc, x, "add_inplace");
  if (!acc.unique())
    acc = acc.clone();
  int64_t n = x.numel();
  if (x.dtype() == DType::F32) {
    float* __restrict ap = acc.f32();
    const float* __restrict xp = x.f32();
    for (int64_t i = 0; i < n; ++i)
      ap[i] += xp[i];
  } else {
    int32_t* ap = acc.i32();
    const int32_t* xp = x.i32();
    for (int64_t i = 0; i < n; ++i)
      ap[i] = static_cast<int32_t>(static_cast<uint32_t>(ap[i]) + static_cast<uint32_t>(xp[i]));
  }
}

void scale_inplace(Tensor& x, float s) {
  require_f32(x, "scale_inplace");
  if (!x.unique())
    x = x.clone();
  float* p = x.f32();
  for (int64_t i = 0; i < x.numel(); ++i)
    p[i] *= s;
}

} // namespace pejit::kernels
