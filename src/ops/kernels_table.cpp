// Every op's reference kernel: the registry's EvalFn, built on src/kernels. Used by the
// generic path and, per batched row block, by plans on reference kernels.
#include "src/kernels/kernels.h"
#include "src/kernels/random.h"
#include "src/ops/emitter.h"
#include "src/tensor/tensor.h"
#include "src/util/check.h"

#include <mutex>

namespace pejit::ops {

namespace {

using In = std::span<const Tensor>;
using Out = std::vector<Tensor>;
namespace k = kernels;

template <k::Unary U> void unary(In in, const Attr&, Out& out) {
  out = {k::unary(U, in[0])};
}
template <k::Binary B> void binary(In in, const Attr&, Out& out) {
  out = {k::binary(B, in[0], in[1])};
}

Shape shape_of(const std::vector<int64_t>& v) {
  return Shape(std::span<const int64_t>(v));
}

void e_matmul(In in, const Attr&, Out& out) {
  out = {k::matmul(in[0], in[1])};
}

void e_to_f32(In in, const Attr&, Out& out) {
  const Tensor& x = in[0];
  if (x.dtype() == DType::F32) {
    out = {x};
    return;
  }
  Tensor y = Tensor::empty(DType::F32, x.shape());
  const int32_t* s = x.i32();
  float* d = y.f32();
  for (int64_t i = 0; i < x.numel(); ++i)
    d[i] = static_cast<float>(s[i]);
  out = {y};
}

void e_to_i32(In in, const Attr&, Out& out) {
  const Tensor& x = in[0];
  if (x.dtype() == DType::I32) {
    out = {x};
    return;
  }
  Tensor y = Tensor::empty(DType::I32, x.shape());
  const float* s = x.f32();
  int32_t* d = y.i32();
  for (int64_t i = 0; i < x.numel(); ++i)
    d[i] = static_cast<int32_t>(s[i]);
  out = {y};
}

void e_sum(In in, const Attr& a, Out& out) {
  out = {a.ints.empty() ? k::sum(in[0]) : k::sum_axis(in[0], static_cast<int>(a.ints[0]))};
}
void e_mean(In in, const Attr& a, Out& out) {
  out = {a.ints.empty() ? k::mean(in[0]) : k::mean_axis(in[0], static_cast<int>(a.ints[0]))};
}
void e_concat(In in, const Attr&, Out& out) {
  out = {k::concat(in, -1)};
}
void e_split(In in, const Attr& a, Out& out) {
  int64_t n = a.ints[0];
  int64_t w = in[0].dim(-1) / n;
  out.clear();
  for (int64_t i = 0; i < n; ++i)
    out.push_back(k::slice(in[0], -1, i * w, (i + 1) * w));
}
void e_slice(In in, const Attr& a, Out& out) {
  out = {k::slice(in[0], -1, a.ints[0], a.ints[1])};
}
void e_reshape(In in, const Attr& a, Out& out) {
  out = {in[0].reshaped(shape_of(a.ints))};
}
void e_transpose(In in, const Attr&, Out& out) {
  out = {k::transpose(in[0])};
}
void e_take(In in, const Attr&, Out& out) {
  out = {k::take(in[0], in[1])};
}
void e_softmax(In in, const Attr&, Out& out) {
  out = {k::softmax(in[0])};
}
void e_log_softmax(In in, const Attr&, Out& out) {
  out = {k::log_softmax(in[0])};
}
void e_cross_entropy(In in, const Attr&, Out& out) {
  out = {k::cross_entropy(in[0], in[1])};
}
void e_argmax(In in, const Attr&, Out& out) {
  out = {k::argmax(in[0])};
}
void e_zeros(In, const Attr& a, Out& out) {
  out = {Tensor::zeros(DType::F32, shape_of(a.ints))};
}
void e_ones(In, const Attr& a, Out& out) {
  out = {Tensor::full(shape_of(a.ints), 1.0f)};
}
void e_full(In in, const Attr& a, Out& out) {
  out = {k::broadcast_to(in[0], shape_of(a.ints))};
}

// Random ops: the key is the last operand, j the first attribute (ops.def).
void e_dropout(In in, const Attr& a, Out& out) {
  out = {k::dropout(in[0], in[1], static_cast<uint32_t>(a.ints[0]), random_p(a))};
}
template <k::RandomDist D> void e_random(In in, const Attr& a, Out& out) {
  size_t first = D == k::RandomDist::Bernoulli ? 2 : 1;
  std::vector<int64_t> dims(a.ints.begin() + static_cast<std::ptrdiff_t>(first), a.ints.end());
  float p = D == k::RandomDist::Bernoulli ? random_p(a) : 0.0f;
  out = {k::random_op(D, in[0], static_cast<uint32_t>(a.ints[0]), p, shape_of(dims))};
}

} // namespace

void register_kernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    auto set = [](OpId id, EvalFn f) { op_def_mut(id).eval = f; };
    set(OpId::MatMul, e_matmul);
    set(OpId::Add, binary<k::Binary::Add>);
    set(OpId::Sub, binary<k::Binary::Sub>);
    set(OpId::Mul, binary<k::Binary::Mul>);
    set(OpId::Div, binary<k::Binary::Div>);
    set(OpId::Lt, binary<k::Binary::Lt>);
    set(OpId::Le, binary<k::Binary::Le>);
    set(OpId::Gt, binary<k::Binary::Gt>);
    set(OpId::Ge, binary<k::Binary::Ge>);
    set(OpId::Eq, binary<k::Binary::Eq>);
    set(OpId::Ne, binary<k::Binary::Ne>);
    set(OpId::Neg, unary<k::Unary::Neg>);
    set(OpId::Exp, unary<k::Unary::Exp>);
    set(OpId::Log, unary<k::Unary::Log>);
    set(OpId::Tanh, unary<k::Unary::Tanh>);
    set(OpId::Sigmoid, unary<k::Unary::Sigmoid>);
    set(OpId::Relu, unary<k::Unary::Relu>);
    set(OpId::ToF32, e_to_f32);
    set(OpId::ToI32, e_to_i32);
    set(OpId::Sum, e_sum);
    set(OpId::Mean, e_mean);
    set(OpId::Concat, e_concat);
    set(OpId::Split, e_split);
    set(OpId::Slice, e_slice);
    set(OpId::Reshape, e_reshape);
    set(OpId::Transpose, e_transpose);
    set(OpId::Take, e_take);
    set(OpId::Softmax, e_softmax);
    set(OpId::LogSoftmax, e_log_softmax);
    set(OpId::CrossEntropy, e_cross_entropy);
    set(OpId::Argmax, e_argmax);
    set(OpId::Zeros, e_zeros);
    set(OpId::Ones, e_ones);
    set(OpId::Full, e_full);
    set(OpId::Dropout, e_dropout);
    set(OpId::Bernoulli, e_random<k::RandomDist::Bernoulli>);
    set(OpId::Uniform, e_random<k::RandomDist::Uniform>);
    set(OpId::Normal, e_random<k::RandomDist::Normal>);
    for (size_t i = 0; i < static_cast<size_t>(OpId::Count); ++i)
      PEJIT_CHECK(op_def(static_cast<OpId>(i)).eval)
          << "no kernel for " << op_def(static_cast<OpId>(i)).name;
  });
}

} // namespace pejit::ops
